//! Scheduling passes as the log carries them: a pass written by the build before grants had a
//! count still reads, and applies as it did. And the snapshots passes read, which share the
//! state's lists: one keeps what it saw.

use muster_core::model::{PassConfig, WorkerState};
use muster_core::resources::Resources;
use muster_state::commands::DrainWorker;
use muster_state::{Op, Outcome};

use crate::support::{Cluster, app_desc, driver_desc, fixture};

#[test]
fn a_plan_of_the_build_before_counted_grants_still_reads_and_applies() {
    // Written by that build after this setup: the driver launched on w1, and four one-core
    // executors of the app, two on w1 and two on w2, of which its cores_max of 3 lets three
    // in.
    let ops: Vec<Op> = fixture("plan-op-format-7.bin");
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    let app = c.submit_app(app_desc(Some(3), Some(1), 512));
    let driver = c.submit_driver(driver_desc(1, 512, false));

    let [plan] = <[Op; 1]>::try_from(ops).unwrap();
    assert!(matches!(plan, Op::ApplyPlanPerExecutor(_)), "{plan:?}");
    let Outcome::PlanApplied {
        drivers,
        executors,
        rejected,
    } = c.ok(plan).outcome
    else {
        panic!("not a plan's outcome");
    };
    assert_eq!(drivers, [(driver, "w1".into())]);
    let placed: Vec<(&str, &str)> = executors
        .iter()
        .map(|(id, executor)| (id.as_ref(), executor.worker.as_ref()))
        .collect();
    assert_eq!(
        placed,
        [(app.as_ref(), "w1"); 2]
            .into_iter()
            .chain([(app.as_ref(), "w2")])
            .collect::<Vec<_>>()
    );
    assert!(
        executors
            .iter()
            .all(|(_, e)| e.resources == Resources::new(1, 512))
    );
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0].worker, "w2".into());
    assert_eq!(c.state.apps()[&app].cores_granted, 3);
}

#[test]
fn a_snapshot_keeps_what_it_saw_while_the_state_moves_on() {
    // A pass's snapshot shares the state's lists of workers and apps: the state copies a list
    // before changing it while a snapshot holds it.
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    c.submit_app(app_desc(Some(4), Some(1), 512));
    let before = c.state.scheduling_snapshot(PassConfig::default());
    let seen = format!("{before:?}");

    c.schedule();
    c.ok(Op::DrainWorker(DrainWorker {
        id: "w1".into(),
        kill_after_ms: None,
    }));

    assert_eq!(format!("{before:?}"), seen);
    assert!(before.workers.iter().all(|w| w.used.cores == 0));
    assert!(before.apps[0].executors.is_empty());
    let now = c.state.scheduling_snapshot(PassConfig::default());
    let used: Vec<u32> = now.workers.iter().map(|w| w.used.cores).collect();
    assert_eq!(used, [2, 2]);
    assert_eq!(now.workers[0].state, WorkerState::Decommissioned);
    assert_eq!(now.apps[0].executors.cores(), 4);
}
