//! Worker registration, loss and decommissioning.

use muster_core::model::WorkerState;
use muster_core::resources::Resources;
use muster_state::commands::{DecommissionWorker, RegisterWorker, WorkerLost};
use muster_state::model::{DriverState, ExecutorState};
use muster_state::{ApplyError, Op, Outcome};

use crate::support::{Cluster, app_desc, cores, driver_desc, w};

fn register(id: &str, cores: u32, memory_mb: u64) -> Op {
    Op::RegisterWorker(RegisterWorker {
        id: id.into(),
        host: "h".into(),
        address: "h:1".into(),
        resources: Resources::new(cores, memory_mb),
        fence_grace_ms: None,
    })
}

fn lose(id: &str) -> Op {
    Op::WorkerLost(WorkerLost {
        id: id.into(),
        reason: "no heartbeat for 15 s".into(),
    })
}

#[test]
fn registering_twice_is_a_duplicate_that_keeps_the_worker() {
    let mut c = Cluster::new();
    assert_eq!(
        c.ok(register("w1", 4, 4096)).outcome,
        Outcome::WorkerRegistered { duplicate: false }
    );
    let app = c.submit_app(app_desc(None, None, 512));
    c.schedule();
    assert_eq!(
        c.ok(register("w1", 4, 4096)).outcome,
        Outcome::WorkerRegistered { duplicate: true }
    );
    assert_eq!(c.state.workers()[&w("w1")].state, WorkerState::Alive);
    assert_eq!(
        c.placement(&app)[&w("w1")],
        4,
        "a reconnect keeps what runs"
    );
}

#[test]
fn zero_capacity_is_refused() {
    let mut c = Cluster::new();
    assert_eq!(
        c.refuse(register("w1", 0, 4096)).to_string(),
        "cores: must be at least 1"
    );
    assert_eq!(
        c.refuse(register("w1", 4, 0)).to_string(),
        "memory_mb: must be at least 1"
    );
    assert_eq!(
        c.refuse(register("", 4, 4)).to_string(),
        "id: must not be empty"
    );
}

#[test]
fn a_lost_workers_executors_are_lost_and_their_cores_return_to_demand() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    let app = c.submit_app(app_desc(Some(4), Some(2), 512));
    c.schedule();
    assert_eq!(c.placement(&app), cores(&[("w1", 2), ("w2", 2)]));

    let response = c.ok(lose("w1"));
    let lost: Vec<_> = response
        .effects
        .ended_executors
        .iter()
        .map(|(_, e)| (e.worker.0.as_str(), e.state))
        .collect();
    assert_eq!(lost, [("w1", ExecutorState::Lost)]);
    assert_eq!(c.state.workers()[&w("w1")].state, WorkerState::Dead);
    assert_eq!(c.state.apps()[&app].cores_granted, 2);

    // The freed demand is placed again, on the worker that is left.
    c.schedule();
    assert_eq!(c.placement(&app), cores(&[("w2", 4)]));
}

#[test]
fn a_lost_workers_supervised_driver_relaunches_under_a_new_id() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let supervised = c.submit_driver(driver_desc(1, 512, true));
    let unsupervised = c.submit_driver(driver_desc(1, 512, false));
    c.schedule();

    let response = c.ok(lose("w1"));
    assert_eq!(response.effects.relaunched_drivers.len(), 1);
    let (old, new) = &response.effects.relaunched_drivers[0];
    assert_eq!(old, &supervised);
    assert_ne!(
        new, &supervised,
        "SPARK-19900: a relaunched driver gets a new id"
    );
    assert_eq!(c.state.drivers()[new].state, DriverState::Submitted);
    let completed: Vec<_> = c
        .state
        .completed_drivers()
        .iter()
        .map(|d| (d.id.clone(), d.state))
        .collect();
    assert_eq!(
        completed,
        [
            (supervised, DriverState::Relaunching),
            (unsupervised, DriverState::Error)
        ]
    );

    // The relaunched driver is placed once a worker is back.
    c.worker("w2", 4, 4096);
    c.schedule();
    assert_eq!(c.state.drivers()[new].worker, Some(w("w2")));
}

#[test]
fn losing_a_dead_or_unknown_worker_is_refused() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.ok(lose("w1"));
    assert_eq!(
        c.refuse(lose("w1")),
        ApplyError::Conflict("worker `w1` is already DEAD".into())
    );
    assert_eq!(c.refuse(lose("w9")), ApplyError::UnknownWorker("w9".into()));
}

#[test]
fn a_dead_worker_comes_back_alive_and_empty() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let app = c.submit_app(app_desc(None, None, 512));
    c.schedule();
    c.ok(lose("w1"));
    assert_eq!(
        c.ok(register("w1", 8, 8192)).outcome,
        Outcome::WorkerRegistered { duplicate: true }
    );
    let worker = &c.state.workers()[&w("w1")];
    assert_eq!(
        (worker.state, worker.capacity.cores, worker.used.cores),
        (WorkerState::Alive, 8, 0)
    );
    c.schedule();
    assert_eq!(c.placement(&app), cores(&[("w1", 8)]));
}

#[test]
fn decommissioning_ends_what_runs_and_takes_no_more_work() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    let app = c.submit_app(app_desc(None, Some(1), 512));
    c.schedule();
    let decommission = || Op::DecommissionWorker(DecommissionWorker { id: "w1".into() });
    let response = c.ok(decommission());
    assert!(
        response
            .effects
            .ended_executors
            .iter()
            .all(|(_, e)| e.worker.0 == "w1" && e.state == ExecutorState::Killed)
    );
    assert_eq!(response.effects.ended_executors.len(), 4);
    assert_eq!(
        c.state.apps()[&app].retry_count,
        0,
        "a decommission is no executor failure"
    );
    assert_eq!(
        c.ok(decommission()),
        Default::default(),
        "decommissioning again changes nothing"
    );
    c.schedule();
    assert_eq!(c.placement(&app), cores(&[("w2", 4)]));
    assert_eq!(
        c.state.workers()[&w("w1")].state,
        WorkerState::Decommissioned
    );
    // A decommissioned worker that reconnects stays decommissioned.
    assert_eq!(
        c.ok(register("w1", 4, 4096)).outcome,
        Outcome::WorkerRegistered { duplicate: true }
    );
    assert_eq!(
        c.state.workers()[&w("w1")].state,
        WorkerState::Decommissioned
    );
}
