//! Application lifecycle: submit, kill, finish, limits, executor state changes and retries.

use muster_core::ids::ExecutorId;
use muster_state::commands::{
    AppFinished, ExecutorStateChanged, KillApp, KillExecutors, SetExecutorLimit, SubmitApp,
};
use muster_state::model::{AppState, ExecutorState};
use muster_state::{ApplyError, Op, Outcome, StateConfig};

use crate::support::{Cluster, START, app_desc, cores};

#[test]
fn app_ids_come_from_the_command_time_and_a_replicated_counter() {
    let mut c = Cluster::new();
    let first = c.submit_app(app_desc(None, None, 512));
    let second = c.submit_app(app_desc(None, None, 512));
    assert_eq!(first.0, "app-20231031224509-0000");
    assert_eq!(second.0, "app-20231031224510-0001");
    assert_eq!(c.state.apps()[&first].state, AppState::Waiting);
    assert_eq!(c.state.apps()[&first].submitted_at.0, START);
}

#[test]
fn malformed_apps_are_refused() {
    let mut c = Cluster::new();
    let mut desc = app_desc(Some(0), None, 512);
    assert_eq!(
        c.refuse(Op::SubmitApp(SubmitApp {
            desc: desc.clone(),
            executor_limit: None
        }))
        .to_string(),
        "cores_max: must be at least 1"
    );
    desc.cores_max = None;
    desc.executor_cores = Some(0);
    assert_eq!(
        c.refuse(Op::SubmitApp(SubmitApp {
            desc: desc.clone(),
            executor_limit: None
        }))
        .to_string(),
        "executor_cores: must be at least 1"
    );
    desc.executor_cores = None;
    desc.executor_memory_mb = 0;
    assert_eq!(
        c.refuse(Op::SubmitApp(SubmitApp {
            desc: desc.clone(),
            executor_limit: None
        }))
        .to_string(),
        "executor_memory_mb: must be at least 1"
    );
    desc.executor_memory_mb = 512;
    desc.executor_resources.insert("gpu".into(), 0);
    assert_eq!(
        c.refuse(Op::SubmitApp(SubmitApp {
            desc: desc.clone(),
            executor_limit: None
        }))
        .to_string(),
        "executor_resources.gpu: must be at least 1"
    );
    desc.executor_resources.clear();
    desc.queue = "nightly".into();
    assert_eq!(
        c.refuse(Op::SubmitApp(SubmitApp {
            desc: desc.clone(),
            executor_limit: None
        })),
        ApplyError::UnknownQueue("nightly".into())
    );
    desc.queue = Default::default();
    desc.command = " ".into();
    assert_eq!(
        c.refuse(Op::SubmitApp(SubmitApp {
            desc,
            executor_limit: None
        }))
        .to_string(),
        "command: must not be empty"
    );
}

#[test]
fn killing_an_app_kills_its_executors_and_keeps_it_as_completed() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let app = c.submit_app(app_desc(None, Some(2), 512));
    c.schedule();
    let response = c.ok(Op::KillApp(KillApp { id: app.clone() }));
    assert_eq!(response.effects.ended_executors.len(), 2);
    assert!(
        response
            .effects
            .ended_executors
            .iter()
            .all(|(_, e)| e.state == ExecutorState::Killed)
    );
    assert_eq!(
        response.effects.removed_apps,
        [(app.clone(), AppState::Killed)]
    );
    assert!(c.state.apps().is_empty());
    assert_eq!(c.state.workers()[&crate::support::w("w1")].used.cores, 0);
    assert_eq!(c.state.completed_apps()[0].state, AppState::Killed);
    assert_eq!(
        c.refuse(Op::KillApp(KillApp { id: app.clone() })),
        ApplyError::UnknownApp(app)
    );
}

#[test]
fn a_finished_app_ends_in_the_state_reported() {
    let mut c = Cluster::new();
    let app = c.submit_app(app_desc(None, None, 512));
    assert!(matches!(
        c.refuse(Op::AppFinished(AppFinished {
            id: app.clone(),
            state: AppState::Running
        })),
        ApplyError::Invalid { .. }
    ));
    c.ok(Op::AppFinished(AppFinished {
        id: app.clone(),
        state: AppState::Finished,
    }));
    assert_eq!(c.state.completed_apps()[0].state, AppState::Finished);
    assert!(c.state.completed_apps()[0].ended_at.is_some());
}

#[test]
fn completed_apps_are_bounded_like_spark() {
    let mut c = Cluster::with_config(StateConfig {
        retained_apps: 20,
        ..StateConfig::default()
    });
    for _ in 0..25 {
        let app = c.submit_app(app_desc(None, None, 512));
        c.ok(Op::KillApp(KillApp { id: app }));
    }
    // At 20, the oldest tenth (2) goes before the next is added: 20, 19, 20, 19, ...
    assert!(c.state.completed_apps().len() <= 20);
    assert_eq!(
        c.state.completed_apps().back().unwrap().id.0,
        "app-20231031224557-0024"
    );
}

#[test]
fn executor_limits_cap_grants_and_lowering_kills_nothing() {
    let mut c = Cluster::new();
    c.worker("w1", 8, 8192);
    let app = c.submit_app(app_desc(None, Some(1), 512));
    c.ok(Op::SetExecutorLimit(SetExecutorLimit {
        app: app.clone(),
        limit: Some(3),
    }));
    c.schedule();
    assert_eq!(c.state.apps()[&app].executors.len(), 3);
    c.ok(Op::SetExecutorLimit(SetExecutorLimit {
        app: app.clone(),
        limit: Some(1),
    }));
    assert_eq!(c.state.apps()[&app].executors.len(), 3);
    c.ok(Op::SetExecutorLimit(SetExecutorLimit {
        app: app.clone(),
        limit: None,
    }));
    c.schedule();
    assert_eq!(c.placement(&app), cores(&[("w1", 8)]));
}

#[test]
fn killing_executors_reports_unknown_ids() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let app = c.submit_app(app_desc(Some(2), Some(1), 512));
    c.schedule();
    let response = c.ok(Op::KillExecutors(KillExecutors {
        app: app.clone(),
        executors: vec![ExecutorId(0), ExecutorId(7), ExecutorId(0)],
    }));
    assert_eq!(
        response.outcome,
        Outcome::ExecutorsKilled {
            unknown: vec![ExecutorId(7)]
        }
    );
    assert_eq!(response.effects.ended_executors.len(), 1);
    assert_eq!(c.state.apps()[&app].cores_granted, 1);
    // The app's demand is back: the next pass grants a new executor with a new id.
    c.schedule();
    assert_eq!(
        c.state.apps()[&app]
            .executors
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [ExecutorId(1), ExecutorId(2)]
    );
}

fn report(
    app: &muster_core::ids::AppId,
    executor: u32,
    state: ExecutorState,
    exit_code: Option<i32>,
) -> Op {
    Op::ExecutorStateChanged(ExecutorStateChanged {
        app: app.clone(),
        executor: ExecutorId(executor),
        state,
        exit_code,
    })
}

#[test]
fn running_resets_the_retry_count_and_reports_are_idempotent() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let app = c.submit_app(app_desc(Some(1), Some(1), 512));
    c.schedule();
    let response = c.ok(report(&app, 0, ExecutorState::Failed, Some(1)));
    let (_, ended) = &response.effects.ended_executors[0];
    assert_eq!(
        (ended.id, ended.state, ended.exit_code),
        (ExecutorId(0), ExecutorState::Failed, Some(1))
    );
    assert_eq!(c.state.apps()[&app].retry_count, 1);
    c.schedule();
    c.ok(report(&app, 1, ExecutorState::Running, None));
    assert_eq!(c.state.apps()[&app].retry_count, 0);
    assert_eq!(
        c.ok(report(&app, 1, ExecutorState::Running, None)),
        Default::default()
    );
    assert!(matches!(
        c.refuse(report(&app, 1, ExecutorState::Launching, None)),
        ApplyError::Conflict(_)
    ));
    assert_eq!(
        c.refuse(report(&app, 0, ExecutorState::Running, None)),
        ApplyError::UnknownExecutor(app.clone(), ExecutorId(0))
    );
    // A clean exit is no failure.
    c.ok(report(&app, 1, ExecutorState::Exited, Some(0)));
    assert_eq!(c.state.apps()[&app].retry_count, 0);
}

#[test]
fn an_app_whose_executors_keep_failing_is_removed_after_max_retries() {
    // SPARK-27510: every launch fails; after exactly 10 failures the app is removed as FAILED.
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let app = c.submit_app(app_desc(Some(1), Some(1), 512));
    let mut launches = 0;
    while c.state.apps().contains_key(&app) {
        c.schedule();
        launches += 1;
        let id = c.state.apps()[&app].next_executor_id - 1;
        let response = c.ok(report(&app, id, ExecutorState::Failed, Some(1)));
        if launches == 10 {
            assert_eq!(
                response.effects.removed_apps,
                [(app.clone(), AppState::Failed)]
            );
        }
    }
    assert_eq!(launches, 10);
    assert_eq!(c.state.completed_apps()[0].state, AppState::Failed);
}

#[test]
fn a_running_executor_keeps_a_failing_app_alive() {
    let mut c = Cluster::with_config(StateConfig {
        max_executor_retries: 2,
        ..StateConfig::default()
    });
    c.worker("w1", 4, 4096);
    let app = c.submit_app(app_desc(Some(2), Some(1), 512));
    c.schedule();
    c.ok(report(&app, 0, ExecutorState::Running, None));
    for _ in 0..3 {
        let id = c.state.apps()[&app].executors.keys().last().unwrap().0;
        c.ok(report(&app, id, ExecutorState::Failed, Some(137)));
        c.schedule();
    }
    assert!(c.state.apps()[&app].retry_count >= 2);
    assert!(c.state.apps().contains_key(&app), "executor 0 still runs");
}

#[test]
fn negative_max_retries_disables_the_rule() {
    let mut c = Cluster::with_config(StateConfig {
        max_executor_retries: -1,
        ..StateConfig::default()
    });
    c.worker("w1", 4, 4096);
    let app = c.submit_app(app_desc(Some(1), Some(1), 512));
    for _ in 0..15 {
        c.schedule();
        let id = c.state.apps()[&app].next_executor_id - 1;
        c.ok(report(&app, id, ExecutorState::Failed, None));
    }
    assert_eq!(c.state.apps()[&app].retry_count, 15);
}
