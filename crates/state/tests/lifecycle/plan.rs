//! Applying a scheduling pass: every launch and grant is checked again.

use muster_core::ids::ExecutorId;
use muster_core::model::WorkerState;
use muster_core::plan::{DriverLaunch, ExecutorGrant};
use muster_core::resources::{Resource, Resources, Shortfall};
use muster_state::commands::{ApplyPlan, KillApp, WorkerLost};
use muster_state::model::{AppState, DriverState, ExecutorState};
use muster_state::{Op, Outcome, Rejection};

use crate::support::{Cluster, app_desc, driver_desc, w};

fn grant(app: &muster_core::ids::AppId, worker: &str, cores: u32) -> ExecutorGrant {
    ExecutorGrant {
        app: app.clone(),
        worker: w(worker),
        resources: Resources::new(cores, 512),
    }
}

/// What the re-check refused: (driver or app id, worker, why).
fn rejected(response: &muster_state::Response) -> Vec<(String, String, Rejection)> {
    match &response.outcome {
        Outcome::PlanApplied { rejected, .. } => rejected
            .iter()
            .map(|r| (r.id.clone(), r.worker.0.clone(), r.reason.clone()))
            .collect(),
        other => panic!("unexpected outcome {other:?}"),
    }
}

#[test]
fn a_plan_applies_what_fits_and_reports_the_rest() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    let app = c.submit_app(app_desc(None, Some(2), 512));
    let response = c.ok(Op::ApplyPlan(ApplyPlan {
        drivers: vec![],
        executors: vec![
            grant(&app, "w1", 2),
            grant(&app, "w1", 2),
            grant(&app, "w1", 2),
            grant(&app, "w9", 2),
            grant(&app, "w2", 3),
        ],
    }));
    let Outcome::PlanApplied { executors, .. } = &response.outcome else {
        panic!()
    };
    let ids: Vec<_> = executors
        .iter()
        .map(|(_, e)| (e.id, e.worker.0.as_str(), e.state))
        .collect();
    assert_eq!(
        ids,
        [
            (ExecutorId(0), "w1", ExecutorState::Launching),
            (ExecutorId(1), "w1", ExecutorState::Launching)
        ]
    );
    let on = |worker: &str, reason| (app.0.clone(), worker.to_owned(), reason);
    let no_cores = Shortfall {
        resource: Resource::Cores,
        free: 0,
        needed: 2,
    };
    assert_eq!(
        rejected(&response),
        [
            on("w1", Rejection::NoRoom(no_cores)),
            on("w9", Rejection::UnknownWorker),
            on("w2", Rejection::NotTheExecutorSize),
        ]
    );
    assert_eq!(c.state.apps()[&app].state, AppState::Running);
    assert_eq!(c.state.apps()[&app].cores_granted, 4);
}

#[test]
fn a_stale_plan_is_refused_part_by_part() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    let app = c.submit_app(app_desc(Some(2), None, 512));
    let driver = c.submit_driver(driver_desc(1, 512, false));
    let stale = Op::ApplyPlan(ApplyPlan {
        drivers: vec![DriverLaunch {
            driver: driver.clone(),
            worker: w("w1"),
        }],
        executors: vec![grant(&app, "w2", 2)],
    });
    c.ok(Op::WorkerLost(WorkerLost {
        id: w("w1"),
        reason: "test".into(),
    }));
    c.ok(Op::KillApp(KillApp { id: app.clone() }));
    let response = c.ok(stale);
    assert_eq!(
        rejected(&response),
        [
            (
                driver.0.clone(),
                "w1".to_owned(),
                Rejection::WorkerNotAlive(WorkerState::Dead)
            ),
            (app.0.clone(), "w2".to_owned(), Rejection::UnknownApp),
        ]
    );
    assert_eq!(c.state.drivers()[&driver].state, DriverState::Submitted);
}

#[test]
fn a_plan_never_exceeds_cores_max_or_the_executor_limit() {
    let mut c = Cluster::new();
    c.worker("w1", 8, 8192);
    let app = c.submit_app(app_desc(Some(3), Some(1), 512));
    let response = c.ok(Op::ApplyPlan(ApplyPlan {
        drivers: vec![],
        executors: (0..4).map(|_| grant(&app, "w1", 1)).collect(),
    }));
    assert_eq!(
        rejected(&response),
        [(
            app.0.clone(),
            "w1".to_owned(),
            Rejection::CoresMax { held: 3, max: 3 }
        )]
    );
}

#[test]
fn a_driver_is_launched_once() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let driver = c.submit_driver(driver_desc(1, 512, false));
    let launch = || {
        Op::ApplyPlan(ApplyPlan {
            drivers: vec![DriverLaunch {
                driver: driver.clone(),
                worker: w("w1"),
            }],
            executors: vec![],
        })
    };
    assert!(rejected(&c.ok(launch())).is_empty());
    assert_eq!(
        rejected(&c.ok(launch())),
        [(
            driver.0.clone(),
            "w1".to_owned(),
            Rejection::DriverNotWaiting(DriverState::Running)
        )]
    );
    assert_eq!(c.state.workers()[&w("w1")].used.cores, 1);
}

#[test]
fn the_scheduling_snapshot_marks_workers_running_prior_work() {
    let mut c = Cluster::new();
    c.ok(Op::SetQueues(muster_state::commands::SetQueues {
        queues: vec![muster_core::model::QueueConfig {
            name: "prod".into(),
            prior: true,
            threshold: 1.0,
            max_capacity: 1.0,
        }],
    }));
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    let mut desc = app_desc(Some(1), Some(1), 512);
    desc.queue = "prod".into();
    c.submit_app(desc);
    c.schedule();
    let snapshot = c.state.scheduling_snapshot(Default::default());
    let prior: Vec<_> = snapshot
        .workers
        .iter()
        .map(|w| (w.id.0.as_str(), w.hosts_prior))
        .collect();
    assert_eq!(prior, [("w1", true), ("w2", false)]);
    assert_eq!(snapshot.apps[0].executors.len(), 1);
}
