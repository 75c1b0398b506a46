//! What workers, applications and clients send, checked and turned into the leader's
//! [`Event`]s and the log's [`Op`]s: the one translation from the wire, without I/O, so the
//! services only carry messages and tests and fuzzing feed the same checks the master runs.

use muster_core::ids::{AppId, ExecutorId, WorkerId};
use muster_core::limits;
use muster_proto::v1::app_message::Body as AppUp;
use muster_proto::v1::worker_message::Body as WorkerUp;
use muster_proto::v1::{DrainWorkerRequest, DriverUpdate, ExecutorUpdate, KillRequest, Register};
use muster_state::commands::{DrainWorker, KillApp, KillDriver, RegisterWorker};
use muster_state::model::{DriverState, ExecutorState};
use muster_state::{ApplyError, Op};
use tonic::Status;

use crate::leader::{AppRequest, Event, LinkId, ProcessKey, Registration, Report, Update};

/// The op a kill request writes. Ids say what they name, so the op is chosen without reading
/// the state and a retried kill is deduplicated like any other write.
///
/// # Errors
///
/// The id is longer than a name may be.
pub fn kill_op(request: &KillRequest) -> Result<Op, ApplyError> {
    let id = request.id.as_str();
    limits::name("id", id)?;
    Ok(if id.starts_with("driver-") {
        Op::KillDriver(KillDriver { id: id.into() })
    } else {
        Op::KillApp(KillApp { id: id.into() })
    })
}

/// A client's drain request as a log op.
///
/// # Errors
///
/// The worker id is beyond the name limit.
pub fn drain_op(request: &DrainWorkerRequest) -> Result<Op, ApplyError> {
    limits::name("worker_id", &request.worker_id)?;
    Ok(Op::DrainWorker(DrainWorker {
        id: request.worker_id.as_str().into(),
        kill_after_ms: request.kill_after_ms,
    }))
}

/// Checks a registration and turns it into the leader's terms.
pub fn registration(register: Register) -> Result<Registration, Status> {
    let worker = RegisterWorker::from(&register);
    worker
        .validate()
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    let executors = register.executors.into_iter().map(|e| {
        let key = ProcessKey::Executor(e.app_id.as_str().into(), ExecutorId(e.executor_id));
        (key, e.pid)
    });
    let drivers = register
        .drivers
        .into_iter()
        .map(|d| (ProcessKey::Driver(d.driver_id.as_str().into()), d.pid));
    let mut reports = register
        .executor_updates
        .into_iter()
        .map(executor_report)
        .chain(register.driver_updates.into_iter().map(driver_report))
        .collect::<Result<Vec<_>, _>>()?;
    reports.sort_by_key(|r| r.seq);
    Ok(Registration {
        worker,
        running: executors.chain(drivers).collect(),
        reports,
    })
}

/// A worker reports a process that runs or ended by itself or on request; launching, lost and
/// waiting are the leader's to decide, so a report of them is refused.
fn reported<S: Copy + PartialEq + std::fmt::Debug>(
    state: S,
    reportable: &[S],
) -> Result<S, Status> {
    if reportable.contains(&state) {
        Ok(state)
    } else {
        Err(Status::invalid_argument(format!(
            "a worker does not report {state:?}"
        )))
    }
}

fn executor_report(update: ExecutorUpdate) -> Result<Report, Status> {
    let state = ExecutorState::try_from(update.state())
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    let state = reported(
        state,
        &[
            ExecutorState::Running,
            ExecutorState::Exited,
            ExecutorState::Failed,
            ExecutorState::Killed,
        ],
    )?;
    Ok(Report {
        seq: update.seq,
        update: Update::Executor {
            app: update.app_id.as_str().into(),
            executor: ExecutorId(update.executor_id),
            state,
            exit_code: update.exit_code,
            pid: update.pid,
        },
    })
}

fn driver_report(update: DriverUpdate) -> Result<Report, Status> {
    let state = DriverState::try_from(update.state())
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    // RELAUNCHING: a fencing worker killed it; relaunched elsewhere if supervised.
    let state = reported(
        state,
        &[
            DriverState::Running,
            DriverState::Finished,
            DriverState::Failed,
            DriverState::Killed,
            DriverState::Error,
            DriverState::Relaunching,
        ],
    )?;
    Ok(Report {
        seq: update.seq,
        update: Update::Driver {
            driver: update.driver_id.as_str().into(),
            state,
            exit_code: update.exit_code,
            pid: update.pid,
        },
    })
}

/// The leader's event for one message on worker `worker`'s stream, if it means one.
pub fn worker_event(worker: &WorkerId, link: LinkId, body: WorkerUp) -> Option<Event> {
    let report = match body {
        WorkerUp::Heartbeat(_) => return Some(Event::WorkerHeartbeat { link }),
        WorkerUp::Executor(update) => executor_report(update),
        WorkerUp::Driver(update) => driver_report(update),
        WorkerUp::Register(_) => {
            tracing::warn!(%worker, "a worker registered twice on one stream");
            return None;
        }
    };
    match report {
        Ok(report) => Some(Event::WorkerReport { link, report }),
        Err(status) => {
            tracing::warn!(%worker, %status, "bad report");
            None
        }
    }
}

/// The leader's event for one message on application `app`'s stream, if it means one.
pub fn app_event(app: &AppId, link: LinkId, body: AppUp) -> Option<Event> {
    let request = match body {
        AppUp::Heartbeat(_) => AppRequest::Heartbeat,
        AppUp::Finish(_) => AppRequest::Finish,
        AppUp::SetLimit(set) => AppRequest::SetLimit(set.executor_limit),
        AppUp::Release(release) => {
            AppRequest::Release(release.executor_ids.into_iter().map(ExecutorId).collect())
        }
        AppUp::Register(_) => {
            tracing::warn!(%app, "an application registered twice on one stream");
            return None;
        }
    };
    Some(Event::AppRequest { link, request })
}
