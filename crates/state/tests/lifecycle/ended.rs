//! The ended executors kept of each application: exactly [`ENDED_EXECUTORS_KEPT`] of the
//! latest from log format 4; before, Spark's rule of forgetting the oldest tenth at a time.

use muster_core::ids::{AppId, ExecutorId};
use muster_state::commands::{ExecutorStateChanged, RaiseLogFormat};
use muster_state::model::ExecutorState;
use muster_state::version::LogFormat;
use muster_state::{ENDED_EXECUTORS_KEPT, Op};

use crate::support::{Cluster, app_desc};

/// A cluster at log format `format` whose one application has had `ended` executors, one
/// after the other, each exiting by itself: the ids of those it keeps.
fn ended_executors_kept(format: LogFormat, ended: u32) -> Vec<ExecutorId> {
    let mut cluster = Cluster::new();
    for to in 2..=format.0 {
        cluster.ok(Op::RaiseLogFormat(RaiseLogFormat { to: LogFormat(to) }));
    }
    cluster.worker("w1", 1, 1024);
    let app: AppId = cluster.submit_app(app_desc(Some(1), Some(1), 256));
    for id in 0..ended {
        cluster.schedule();
        cluster.ok(Op::ExecutorStateChanged(ExecutorStateChanged {
            app: app.clone(),
            executor: ExecutorId(id),
            state: ExecutorState::Exited,
            exit_code: Some(0),
        }));
    }
    cluster.state.ended_executors(&app).map(|e| e.id).collect()
}

#[test]
fn exactly_the_documented_number_of_the_latest_are_kept_from_log_format_4() {
    let ended = u32::try_from(ENDED_EXECUTORS_KEPT).unwrap() + 12;
    let kept = ended_executors_kept(LogFormat::FOURTH, ended);
    let latest: Vec<ExecutorId> = (12..ended).map(ExecutorId).collect();
    assert_eq!(kept, latest);
}

#[test]
fn before_log_format_4_the_oldest_tenth_goes_at_once() {
    let ended = u32::try_from(ENDED_EXECUTORS_KEPT).unwrap() + 1;
    let kept = ended_executors_kept(LogFormat::THIRD, ended);
    // The 129th end forgot the oldest twelve.
    assert_eq!(kept.len(), ENDED_EXECUTORS_KEPT + 1 - 12);
    assert_eq!(kept.first(), Some(&ExecutorId(12)));
}
