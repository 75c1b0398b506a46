//! What workers, applications and clients send, checked and turned into the leader's
//! [`Event`]s and the log's [`Op`]s: the one translation from the wire, without I/O, so the
//! services only carry messages and tests and fuzzing feed the same checks the master runs.

use muster_core::ids::{AppId, DriverId, ExecutorId, WorkId, WorkerId};
use muster_core::limits;
use muster_core::model::WorkerState;
use muster_core::resources::Usage;
use muster_core::restarts::Restarts;
use muster_proto::convert;
use muster_proto::v1::app_message::Body as AppUp;
use muster_proto::v1::worker_message::Body as WorkerUp;
use muster_proto::v1::{
    DrainWorkerRequest, DriverUpdate, ExecutorUpdate, KillRequest, LogStream, ReadLog,
    ReadLogRequest, Register,
};
use muster_state::commands::{DrainWorker, KillApp, KillDriver, RegisterWorker, SetAppPriority};
use muster_state::model::{DriverState, ExecutorState, Profile};
use muster_state::{ApplyError, ClusterState, ENDED_EXECUTORS_KEPT, Op};
use tonic::Status;

use muster_leader::{
    AppRequest, Event, LinkId, ProcessKey, Registration, Report, RunningProcess, Update,
};

/// The op a kill request writes. Ids say what they name, so the op is chosen without reading
/// the state and a retried kill is deduplicated like any other write.
///
/// # Errors
///
/// The id is longer than a name may be.
pub fn kill_op(request: &KillRequest) -> Result<Op, ApplyError> {
    let id = request.id.as_str();
    limits::name("id", id)?;
    Ok(match WorkId::from(id) {
        WorkId::Driver(id) => Op::KillDriver(KillDriver { id }),
        WorkId::App(id) => Op::KillApp(KillApp { id }),
    })
}

/// Setting application `app_id`'s priority as a log op.
///
/// # Errors
///
/// The id is beyond the name limit.
pub fn priority_op(app_id: &str, priority: i32) -> Result<Op, ApplyError> {
    limits::name("app_id", app_id)?;
    Ok(Op::SetAppPriority(SetAppPriority {
        app: app_id.into(),
        priority,
    }))
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

/// A client's read of a process's output, as the leader asks the worker that ran it.
#[derive(Debug, PartialEq)]
pub struct LogRead {
    /// The worker that runs or ran the process; none for a driver not placed yet.
    pub worker: Option<WorkerId>,
    /// Whether the state has the process live (a driver that has not ended, a live
    /// executor): what it wrote may still grow, or its file may not exist yet.
    pub live: bool,
    /// What to ask the worker (its request number still unset).
    pub read: ReadLog,
}

/// A process id that can name a directory on a worker, as the worker checks it.
fn path_safe(field: &str, id: &str) -> Result<(), ApplyError> {
    limits::name(field, id)?;
    if !limits::names_a_directory(id) {
        return Err(ApplyError::Invalid {
            field: field.to_owned(),
            message: format!("`{id}` cannot name a process"),
        });
    }
    Ok(())
}

/// Where `request`'s process runs or ran, by `state`, or by the worker the request names when
/// the state no longer has the process (an ended executor, a driver past retention).
///
/// # Errors
///
/// The id, stream or size is malformed, the process is unknown and no worker is named, or
/// its worker is unknown or DEAD.
pub fn log_read(state: &ClusterState, request: &ReadLogRequest) -> Result<LogRead, ApplyError> {
    limits::name("worker_id", &request.worker_id)?;
    if request.max_bytes > limits::MAX_LOG_CHUNK_BYTES {
        return Err(ApplyError::Invalid {
            field: "max_bytes".to_owned(),
            message: format!("at most {} bytes", limits::MAX_LOG_CHUNK_BYTES),
        });
    }
    let stream = LogStream::try_from(request.stream).map_err(|_| ApplyError::Invalid {
        field: "stream".to_owned(),
        message: format!("no output stream {}", request.stream),
    })?;
    let named = (!request.worker_id.is_empty()).then(|| WorkerId::from(request.worker_id.as_str()));
    let mut read = ReadLog {
        stream: stream.into(),
        offset: request.offset,
        max_bytes: match request.max_bytes {
            0 => limits::DEFAULT_LOG_CHUNK_BYTES,
            max => max,
        },
        ..ReadLog::default()
    };
    let (worker, live) = if request.id.starts_with("driver-") {
        path_safe("id", &request.id)?;
        let id = DriverId::from(request.id.as_str());
        read.driver_id = request.id.clone();
        let active = state.drivers().get(&id);
        let known = state.known_driver(&id);
        match (known, named) {
            (_, Some(named)) => (Some(named), active.is_some()),
            (Some(driver), None) => (driver.worker.clone(), active.is_some()),
            (None, None) => {
                return Err(ApplyError::Conflict(format!(
                    "no driver `{id}` is known: it never existed, or ended before the drivers the \
                     masters keep; for one that ran, name the worker that ran it"
                )));
            }
        }
    } else {
        let invalid = || ApplyError::Invalid {
            field: "id".to_owned(),
            message: "a driver id, or an executor as APP_ID/EXECUTOR_ID".to_owned(),
        };
        let (app, executor) = request.id.rsplit_once('/').ok_or_else(invalid)?;
        path_safe("id", app)?;
        let (app, executor) = (AppId::from(app), executor.parse().map_err(|_| invalid())?);
        read.app_id = app.to_string();
        read.executor_id = executor;
        let live = state
            .apps()
            .get(&app)
            .and_then(|a| a.executors.get(&ExecutorId(executor)));
        let ended = || {
            state
                .ended_executors(&app)
                .find(|e| e.id == ExecutorId(executor))
        };
        match (live, named) {
            (_, Some(named)) => (Some(named), live.is_some()),
            (Some(live), None) => (Some(live.worker.clone()), true),
            (None, None) => match ended() {
                Some(ended) => (Some(ended.worker.clone()), false),
                None => {
                    return Err(ApplyError::Conflict(format!(
                        "executor {executor} of `{app}` is neither live nor among the ended \
                         executors the masters keep ({ENDED_EXECUTORS_KEPT} an application): \
                         name the worker that ran it (--worker ID)"
                    )));
                }
            },
        }
    };
    if let Some(worker) = &worker {
        match state.workers().get(worker) {
            None => return Err(ApplyError::UnknownWorker(worker.clone())),
            Some(known) if known.state == WorkerState::Dead => {
                return Err(ApplyError::Conflict(format!(
                    "worker `{worker}` is DEAD: what it wrote is out of reach until it registers \
                     again"
                )));
            }
            Some(_) => {}
        }
    }
    Ok(LogRead { worker, live, read })
}

/// Checks a registration and turns it into the leader's terms.
pub fn registration(register: Register) -> Result<Registration, Status> {
    let worker = RegisterWorker::from(&register);
    let addresses = convert::addresses(register.addresses);
    worker
        .validate()
        .and_then(|()| worker.validate_addresses(&addresses))
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    let executors = register.executors.into_iter().map(|e| {
        let key = ProcessKey::Executor(e.app_id.as_str().into(), ExecutorId(e.executor_id));
        let runs = RunningProcess {
            pid: e.pid,
            restarts: None,
        };
        (key, runs)
    });
    let drivers = register.drivers.into_iter().map(|d| {
        let runs = RunningProcess {
            pid: d.pid,
            restarts: d.restarts.as_ref().map(Restarts::from),
        };
        (ProcessKey::Driver(d.driver_id.as_str().into()), runs)
    });
    let mut reports = register
        .executor_updates
        .into_iter()
        .map(executor_report)
        .chain(register.driver_updates.into_iter().map(driver_report))
        .collect::<Result<Vec<_>, _>>()?;
    reports.sort_by_key(|r| r.seq);
    Ok(Registration {
        worker,
        addresses,
        running: executors.chain(drivers).collect(),
        reports,
        build: register.build.map(Into::into),
        shuffle_service: register
            .shuffle_service
            .map(TryInto::try_into)
            .transpose()
            .map_err(Status::invalid_argument)?,
        spark_home: register.spark_home,
    })
}

/// A worker reports a process that runs or ended by itself or on request; launching, lost and
/// waiting are the leader's to decide, so a report of them is refused.
fn reported<S: Copy + PartialEq + std::fmt::Display>(
    state: S,
    reportable: &[S],
) -> Result<S, Status> {
    if reportable.contains(&state) {
        Ok(state)
    } else {
        Err(Status::invalid_argument(format!(
            "a worker does not report {state}"
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
            restarts: update.restarts.as_ref().map(Restarts::from),
        },
    })
}

/// The leader's event for one message on worker `worker`'s stream, if it means one.
pub fn worker_event(worker: &WorkerId, link: LinkId, body: WorkerUp) -> Option<Event> {
    let report = match body {
        WorkerUp::Heartbeat(heartbeat) => {
            let usage = heartbeat.usage.into_iter().map(|u| {
                let process = if u.driver_id.is_empty() {
                    ProcessKey::Executor(u.app_id.as_str().into(), ExecutorId(u.executor_id))
                } else {
                    ProcessKey::Driver(u.driver_id.as_str().into())
                };
                let usage = Usage {
                    memory_bytes: u.memory_bytes,
                    cpu_ms: u.cpu_ms,
                };
                (process, usage)
            });
            return Some(Event::WorkerHeartbeat {
                link,
                usage: usage.collect(),
                // A port out of range is none, and said.
                shuffle_service: heartbeat.shuffle_service.and_then(|service| {
                    service
                        .try_into()
                        .inspect_err(|error: &String| {
                            tracing::warn!(%worker, %error, "a heartbeat's shuffle service refused");
                        })
                        .ok()
                }),
                apps_with_data: heartbeat
                    .apps_with_data
                    .iter()
                    .map(|app| app.as_str().into())
                    .collect(),
            });
        }
        WorkerUp::Executor(update) => executor_report(update),
        WorkerUp::Driver(update) => driver_report(update),
        WorkerUp::Register(_) => {
            tracing::warn!(%worker, "a worker registered twice on one stream");
            return None;
        }
        // Answers the session routes to the client that asked, past the leader.
        WorkerUp::LogChunk(_) => return None,
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
        AppUp::SetProfileLimit(set) => AppRequest::SetProfileLimit(
            set.profile_id,
            Profile {
                executor_cores: set.executor_cores,
                executor_memory_mb: set.executor_memory_mb,
                executor_resources: set.executor_resources.into_iter().collect(),
                env: set.env.into_iter().collect(),
                executor_limit: set.executor_limit,
            },
        ),
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

#[cfg(test)]
mod tests {
    use muster_core::ids::Timestamp;
    use muster_core::resources::Resources;
    use muster_proto::v1::{LogStream, SubmitDriverRequest};
    use muster_state::{Command, Outcome, StateConfig};

    use super::*;

    fn apply(state: &mut ClusterState, op: Op) -> Outcome {
        let command = Command {
            at: Timestamp(1),
            request_id: None,
            term: None,
            op,
        };
        state.apply(&command).expect("applies").outcome
    }

    /// A state with worker `w1` and a driver submitted but not placed; the driver's id.
    fn state() -> (ClusterState, String) {
        let mut state = ClusterState::new(StateConfig::default());
        apply(
            &mut state,
            Op::RegisterWorker(RegisterWorker {
                id: "w1".into(),
                host: "h1".to_owned(),
                address: "h1".to_owned(),
                resources: Resources::new(4, 4096),
                fence_grace_ms: None,
            }),
        );
        let submit = SubmitDriverRequest {
            command: "/bin/true".to_owned(),
            resources: Some(muster_proto::v1::Resources {
                cores: 1,
                memory_mb: 1,
                ..Default::default()
            }),
            ..Default::default()
        };
        let Outcome::DriverSubmitted { id } = apply(&mut state, Op::SubmitDriver(submit.into()))
        else {
            panic!("a driver is submitted");
        };
        (state, id.0)
    }

    fn request(id: &str, worker: &str) -> ReadLogRequest {
        ReadLogRequest {
            id: id.to_owned(),
            stream: LogStream::Stderr.into(),
            offset: 7,
            worker_id: worker.to_owned(),
            ..ReadLogRequest::default()
        }
    }

    #[test]
    fn a_named_worker_serves_what_the_state_no_longer_has() {
        let (state, _) = state();
        let read = log_read(&state, &request("app-1/3", "w1")).unwrap();
        assert_eq!(read.worker, Some(WorkerId::from("w1")));
        assert!(!read.live, "no such executor in the state");
        assert_eq!(
            (read.read.app_id.as_str(), read.read.executor_id),
            ("app-1", 3)
        );
        assert_eq!(read.read.stream(), LogStream::Stderr);
        assert_eq!(read.read.offset, 7);
        assert_eq!(read.read.max_bytes, limits::DEFAULT_LOG_CHUNK_BYTES);
        let read = log_read(&state, &request("driver-1-0001", "w1")).unwrap();
        assert_eq!(read.read.driver_id, "driver-1-0001");
    }

    #[test]
    fn a_driver_not_placed_yet_is_live_on_no_worker() {
        let (state, driver) = state();
        let read = log_read(&state, &request(&driver, "")).unwrap();
        assert_eq!((read.worker, read.live), (None, true));
    }

    #[test]
    fn a_read_nothing_can_serve_is_refused_with_the_reason() {
        let (state, driver) = state();
        let refused = |id: &str, worker: &str| log_read(&state, &request(id, worker)).unwrap_err();
        assert!(matches!(
            refused("driver-1-0009", ""),
            ApplyError::Conflict(m) if m.contains("no driver `driver-1-0009` is known")
        ));
        assert!(matches!(
            refused("app-1/3", ""),
            ApplyError::Conflict(m) if m.contains("name the worker that ran it")
        ));
        assert!(matches!(refused("app-1", ""), ApplyError::Invalid { field, .. } if field == "id"));
        assert!(matches!(
            refused("app-1/x", "w1"),
            ApplyError::Invalid { .. }
        ));
        assert!(matches!(
            refused(&driver, "w9"),
            ApplyError::UnknownWorker(_)
        ));
        let too_much = ReadLogRequest {
            max_bytes: limits::MAX_LOG_CHUNK_BYTES + 1,
            ..request(&driver, "w1")
        };
        assert!(matches!(
            log_read(&state, &too_much),
            Err(ApplyError::Invalid { field, .. }) if field == "max_bytes"
        ));
    }
}
