//! What a process the masters stop keeps until its worker reports its end: from log format 4
//! its cores and memory, so that no worker is promised more than it has while the process
//! runs through its kill grace; a preemption's victim keeps what the room kept for the
//! preempting work does not hold.

use muster_core::access::QueueSpec;
use muster_core::ids::{AppId, ExecutorId, Timestamp, WorkId, WorkerId};
use muster_core::resources::Resources;
use muster_state::commands::{
    ExecutorStateChanged, GrantReservations, KillExecutors, Preempt, RaiseLogFormat, WorkerLost,
    set_queues_op,
};
use muster_state::model::{ExecutorState, Reservation};
use muster_state::version::LogFormat;
use muster_state::{Op, Stopped};

use crate::support::{Cluster, app_desc};

/// A cluster raised to `format`, with one 4-core worker filled by one 4-core executor of an
/// ordinary application; with that application and its executor.
fn filled(format: LogFormat) -> (Cluster, AppId, ExecutorId) {
    let mut c = Cluster::new();
    for to in [LogFormat::RAISABLE, LogFormat::THIRD, LogFormat::FOURTH] {
        if to <= format {
            c.ok(Op::RaiseLogFormat(RaiseLogFormat { to }));
        }
    }
    c.worker("w1", 4, 8192);
    let app = c.submit_app(app_desc(Some(4), Some(4), 4096));
    c.schedule();
    let executor = *c.state.apps()[&app].executors.keys().next().unwrap();
    (c, app, executor)
}

fn used(c: &Cluster) -> (u32, u64) {
    let used = &c.state.workers()[&WorkerId::from("w1")].used;
    (used.cores, used.memory_mb)
}

fn ended(app: &AppId, executor: ExecutorId) -> Op {
    Op::ExecutorStateChanged(ExecutorStateChanged {
        app: app.clone(),
        executor,
        state: ExecutorState::Killed,
        exit_code: Some(143),
    })
}

#[test]
fn a_stopped_executor_keeps_its_cores_and_memory_until_its_end_is_reported() {
    let (mut c, app, executor) = filled(LogFormat::FOURTH);
    c.ok(Op::KillExecutors(KillExecutors {
        app: app.clone(),
        executors: vec![executor],
    }));
    assert!(c.state.apps()[&app].executors.is_empty(), "ended at once");
    assert_eq!(used(&c), (4, 4096), "still its worker's, while it runs");
    let stopped = Stopped::Executor(app.clone(), executor);
    assert_eq!(
        c.state.stopping_on(&"w1".into()).collect::<Vec<_>>(),
        [&stopped]
    );
    // Another application waits, and the stopped one's wants its cores back: nothing is
    // placed on the room meanwhile.
    let other = c.submit_app(app_desc(Some(4), Some(4), 4096));
    c.schedule();
    assert!(c.state.apps()[&other].executors.is_empty());
    assert!(c.state.apps()[&app].executors.is_empty());
    c.assert_snapshot_round_trips();

    c.ok(ended(&app, executor));
    assert_eq!(c.state.stopping().count(), 0);
    assert_eq!(used(&c), (0, 0));
    // Placed once it ended: to the application that was first, as Spark's order has it.
    c.schedule();
    assert_eq!(c.state.apps()[&app].executors.len(), 1);
    assert!(c.state.apps()[&other].executors.is_empty());
}

#[test]
fn before_log_format_4_a_stopped_executor_frees_its_cores_and_memory_at_once() {
    let (mut c, app, executor) = filled(LogFormat::THIRD);
    c.ok(Op::KillExecutors(KillExecutors {
        app,
        executors: vec![executor],
    }));
    assert_eq!(used(&c), (0, 0), "as release 0.3.0 does");
    assert_eq!(c.state.stopping().count(), 0);
}

#[test]
fn a_lost_worker_takes_what_its_stopped_processes_kept() {
    let (mut c, app, executor) = filled(LogFormat::FOURTH);
    c.ok(Op::KillExecutors(KillExecutors {
        app,
        executors: vec![executor],
    }));
    c.ok(Op::WorkerLost(WorkerLost {
        id: "w1".into(),
        reason: "its heartbeats stopped".into(),
    }));
    assert_eq!(c.state.stopping().count(), 0);
    assert_eq!(used(&c), (0, 0));
}

/// A 4-core victim stopped for a 2-core executor of prior work: the two cores kept for the
/// prior work and the two the victim still holds leave nothing free until its end is
/// reported, whatever the grace; then its two are free, and the grant gives the prior work
/// its two.
#[test]
fn a_preemption_victim_keeps_what_the_room_kept_for_the_preempting_work_does_not_hold() {
    let (mut c, app, victim) = filled(LogFormat::FOURTH);
    c.ok(set_queues_op(vec![QueueSpec {
        prior: true,
        ..QueueSpec::named("prod")
    }]));
    let mut desc = app_desc(Some(2), Some(2), 2048);
    desc.queue = "prod".into();
    let urgent = c.submit_app(desc);
    c.ok(Op::Preempt(Preempt {
        victims: vec![(app.clone(), victim)],
        reservations: vec![Reservation {
            owner: WorkId::App(urgent.clone()),
            worker: "w1".into(),
            resources: Resources::new(2, 2048),
            until: Timestamp(0),
        }],
        grace_ms: 1000,
    }));
    assert_eq!(
        used(&c),
        (4, 4096),
        "two cores kept, two still the victim's"
    );
    let other = c.submit_app(app_desc(Some(2), Some(2), 2048));
    c.schedule();
    assert!(c.state.apps()[&other].executors.is_empty(), "nothing free");
    assert!(
        c.state.apps()[&urgent].executors.is_empty(),
        "its room is kept"
    );
    c.assert_snapshot_round_trips();

    c.ok(ended(&app, victim));
    assert_eq!(used(&c), (2, 2048), "the victim's two are free");
    c.ok(Op::GrantReservations(GrantReservations {
        owners: vec![WorkId::App(urgent.clone())],
    }));
    assert_eq!(c.state.apps()[&urgent].cores_granted, 2);
}
