//! Application lifecycle: submit, kill, finish, executor limits and executor state changes
//! (Spark's `deploy/master/Master.scala`: `executorLimit`, `finishApplication`,
//! `removeApplication`).

use std::collections::BTreeMap;

use muster_core::ids::{AppId, DriverId, ExecutorId, Timestamp, WorkId};
use muster_core::limits;
use muster_core::model::{GangStyle, positive, resource_amounts};
use muster_core::resources::ResourceAmounts;
use serde::{Deserialize, Serialize};

use super::{Apply, Op, program};
use crate::ClusterState;
use crate::model::{
    App, AppDescription, AppState, DriverState, ExecutorState, Profile, TimedOutGang,
};
use crate::response::{ApplyError, Effects, Outcome, Response};
use crate::stopping::Stopped;
use crate::version::LogFormat;

/// An application is submitted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmitApp {
    /// What it asks for.
    pub desc: AppDescription,
    /// Its initial executor limit (`Some(0)` under dynamic allocation); `None` is unlimited.
    pub executor_limit: Option<u32>,
}

impl Apply for SubmitApp {
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let desc = &self.desc;
        state.takes_work(&desc.queue)?;
        if let Some(cores) = desc.cores_max {
            positive("cores_max", cores)?;
        }
        executor_size(
            desc.executor_cores,
            desc.executor_memory_mb,
            &desc.executor_resources,
        )?;
        limits::name("name", &desc.name)?;
        limits::name("user", &desc.user)?;
        program(&desc.command, &desc.args, &desc.env)?;

        let id = state.new_app_id(at);
        let submission = state.take_submission();
        state.apps.insert(
            id.clone(),
            App {
                id: id.clone(),
                desc: desc.clone(),
                state: AppState::Waiting,
                executor_limit: self.executor_limit,
                retry_count: 0,
                submission,
                submitted_at: at,
                ended_at: None,
                next_executor_id: 0,
                executors: BTreeMap::new(),
                cores_granted: 0,
            },
        );
        state.show_app_to_passes(&id);
        Ok(Response {
            outcome: Outcome::AppSubmitted { id },
            effects: Effects::default(),
        })
    }
}

/// An application that needs a minimum of executors to make progress, a gang: while it
/// holds none, passes grant it all of them at once or nothing (from log format 4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmitGang {
    /// The application.
    pub app: SubmitApp,
    /// The executors of its own size it needs at once.
    pub min_executors: u32,
    /// The cluster-mode driver that registers it, when one does: the room kept beside that
    /// driver for the gang is no longer kept.
    pub driver: Option<DriverId>,
}

impl Apply for SubmitGang {
    /// Refused, as [`SubmitApp`] is, and for a minimum of none, without `executor_cores`
    /// (an app without it has one executor a worker, taking all its cores), or more than
    /// its `cores_max` holds.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let desc = &self.app.desc;
        positive("min_executors", self.min_executors)?;
        let invalid = |message: String| ApplyError::Invalid {
            field: "min_executors".to_owned(),
            message,
        };
        let Some(cores) = desc.executor_cores else {
            return Err(invalid(
                "a gang needs executor_cores: without it an application has one executor a \
                 worker, which takes all the cores it is given"
                    .to_owned(),
            ));
        };
        let gang_cores = u64::from(self.min_executors) * u64::from(cores);
        if let Some(cores_max) = desc.cores_max.filter(|&max| u64::from(max) < gang_cores) {
            return Err(invalid(format!(
                "{} executors of {cores} cores need {gang_cores} cores, more than cores_max \
                 {cores_max}",
                self.min_executors
            )));
        }
        let response = self.app.apply(state, at)?;
        let Outcome::AppSubmitted { id } = &response.outcome else {
            unreachable!("a submitted app answers with its id");
        };
        state.gangs.insert(id.clone(), self.min_executors);
        state.show_app_to_passes(id);
        if let Some(driver) = &self.driver {
            state.driver_registered_its_app(driver, id);
        }
        Ok(response)
    }
}

/// The op that submits `app`, which `driver` registers if it names one: a gang when it
/// needs `min_executors` at once; one that frees the room kept beside its driver when that
/// driver keeps room for it in `state`; else a plain submission.
pub fn submit_app_op(
    app: SubmitApp,
    min_executors: Option<u32>,
    driver: Option<DriverId>,
    state: &ClusterState,
) -> Op {
    match (min_executors, driver) {
        (Some(min_executors), driver) => Op::SubmitGang(SubmitGang {
            app,
            min_executors,
            driver,
        }),
        (None, Some(driver)) if state.keeps_room_for_app_of(&driver) => {
            Op::SubmitDriverApp(SubmitDriverApp { app, driver })
        }
        (None, _) => Op::SubmitApp(app),
    }
}

/// An application its cluster-mode driver registers, the driver having started beside room
/// for the application's first executor (from log format 4): that room is the application's
/// now, kept from other drivers until one of its executors is placed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmitDriverApp {
    /// The application.
    pub app: SubmitApp,
    /// The driver that registers it.
    pub driver: DriverId,
}

impl Apply for SubmitDriverApp {
    /// Refused as [`SubmitApp`] is.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let response = self.app.apply(state, at)?;
        let Outcome::AppSubmitted { id } = &response.outcome else {
            unreachable!("a submitted app answers with its id");
        };
        state.driver_registered_its_app(&self.driver, id);
        Ok(response)
    }
}

/// A gang that waited its timeout for all of its minimum stops waiting (from log format 4):
/// an application's, or a waiting driver's whose application is one. With `style` soft it
/// is placed as any application (a driver as any driver, its application's gang no longer
/// kept beside it) from then on; with hard it fails. The leader times gangs out by its own
/// clock, and says how long this one waited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndGangWait {
    /// The gang's application, or the driver submitted with it.
    pub work: WorkId,
    /// What becomes of it.
    pub style: GangStyle,
    /// How long it waited, in milliseconds.
    pub waited_ms: u64,
}

impl Apply for EndGangWait {
    /// Refused, changing nothing, for work that is not a gang waiting for its minimum: an
    /// application that ended or holds its gang's executors, a driver that ended or started.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let no_longer_waits =
            || ApplyError::Conflict(format!("`{}` is not a gang that waits", self.work));
        let minimum = match &self.work {
            WorkId::App(app) => state.waiting_gang(app).ok_or_else(no_longer_waits)?,
            WorkId::Driver(driver) => {
                let submitted = state
                    .drivers
                    .get(driver)
                    .is_some_and(|d| d.state == DriverState::Submitted);
                match state.driver_gangs.get(driver) {
                    Some(gang) if submitted => gang.gang.min_executors,
                    _ => return Err(no_longer_waits()),
                }
            }
        };
        state.timed_out_gangs.insert(
            self.work.clone(),
            TimedOutGang {
                minimum,
                waited_ms: self.waited_ms,
                style: self.style,
            },
        );
        let mut effects = Effects::default();
        match (&self.work, self.style) {
            (WorkId::App(app), GangStyle::Soft) => {
                state.gangs.remove(app);
                state.show_app_to_passes(app);
            }
            (WorkId::App(app), GangStyle::Hard) => {
                state.remove_app(app, AppState::Failed, at, &mut effects);
            }
            (WorkId::Driver(driver), GangStyle::Soft) => {
                state.driver_gangs.remove(driver);
            }
            (WorkId::Driver(driver), GangStyle::Hard) => {
                state.end_driver(driver, DriverState::Failed, None, at, &mut effects);
            }
        }
        Ok(Response {
            outcome: Outcome::Done,
            effects,
        })
    }
}

/// A user kills an application.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KillApp {
    /// The app.
    pub id: AppId,
}

impl Apply for KillApp {
    /// The app ends KILLED; its executors are KILLED.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        state.app_mut(&self.id)?;
        let mut effects = Effects::default();
        state.remove_app(&self.id, AppState::Killed, at, &mut effects);
        Ok(Response {
            outcome: Outcome::Done,
            effects,
        })
    }
}

/// An application ended: its driver unregistered, or vanished past its grace period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppFinished {
    /// The app.
    pub id: AppId,
    /// FINISHED, FAILED or KILLED.
    pub state: AppState,
}

impl Apply for AppFinished {
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        if !self.state.is_finished() {
            return Err(ApplyError::Invalid {
                field: "state".into(),
                message: format!("{} is not a final state", self.state),
            });
        }
        state.app_mut(&self.id)?;
        let mut effects = Effects::default();
        state.remove_app(&self.id, self.state, at, &mut effects);
        Ok(Response {
            outcome: Outcome::Done,
            effects,
        })
    }
}

/// An application sets its executor target (Spark's `RequestExecutors`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SetExecutorLimit {
    /// The app.
    pub app: AppId,
    /// The new cap on its executor count; `None` is unlimited. Lowering it kills nothing.
    pub limit: Option<u32>,
}

impl Apply for SetExecutorLimit {
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        state.app_mut(&self.app)?.executor_limit = self.limit;
        state.show_app_to_passes(&self.app);
        Ok(Response::default())
    }
}

/// Sets the priority an active application asks for in its queue (from log format 4):
/// higher is served first. It has at most its queue's `max_priority`, 0 where the queue sets
/// none (as YARN's default), whatever it asks for; the response's outcome says which it has.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SetAppPriority {
    /// The app.
    pub app: AppId,
    /// The priority asked for.
    pub priority: i32,
}

impl Apply for SetAppPriority {
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        state.app_mut(&self.app)?;
        if self.priority == 0 {
            state.priorities.remove(&self.app);
        } else {
            state.priorities.insert(self.app.clone(), self.priority);
        }
        state.show_app_to_passes(&self.app);
        Ok(Response {
            outcome: Outcome::Prioritized {
                priority: state.app_priority(&self.app),
            },
            ..Response::default()
        })
    }
}

/// An application or a driver submitted with the settings its own op does not carry, in one
/// entry (from log format 4), so that no pass sees it without them: `submit` (an op that
/// submits an application or a driver), then its priority and, for an application, whether
/// it logs Spark events, on the id it gets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmitWithSettings {
    /// The op that submits the application or the driver.
    pub submit: Box<Op>,
    /// The priority asked for in its queue (0, the default, when not).
    pub priority: i32,
    /// For an application: it logs Spark events (`spark.eventLog.enabled`), so that once it
    /// has ended its page links Spark's history server.
    pub logs_events: bool,
}

impl Apply for SubmitWithSettings {
    /// Refused as `submit` is, for an op that submits neither, and for a driver said to log
    /// events (its application says so).
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let submits = matches!(
            *self.submit,
            Op::SubmitApp(_)
                | Op::SubmitGang(_)
                | Op::SubmitDriverApp(_)
                | Op::SubmitDriver(_)
                | Op::SubmitGangDriver(_)
        );
        if !submits {
            return Err(ApplyError::Invalid {
                field: "submit".into(),
                message: "only an application's or a driver's submission takes a priority".into(),
            });
        }
        if self.logs_events && self.submit.app_submitted().is_none() {
            return Err(ApplyError::Invalid {
                field: "logs_events".into(),
                message: "a driver's application says whether it logs events".into(),
            });
        }
        let response = state.apply_op(&self.submit, at)?;
        match &response.outcome {
            Outcome::AppSubmitted { id } => {
                let priority = SetAppPriority {
                    app: id.clone(),
                    priority: self.priority,
                };
                priority.apply(state, at)?;
                if self.logs_events {
                    state.event_logs.insert(id.clone());
                }
            }
            Outcome::DriverSubmitted { id } => {
                if self.priority != 0 {
                    state.driver_priorities.insert(id.clone(), self.priority);
                }
            }
            other => unreachable!("a submission answers with its id, not {other:?}"),
        }
        Ok(response)
    }
}

/// Checks an executor size: cores (when set), memory and custom amounts at least 1, and
/// all within the limits.
fn executor_size(
    cores: Option<u32>,
    memory_mb: u64,
    resources: &ResourceAmounts,
) -> Result<(), ApplyError> {
    if let Some(cores) = cores {
        positive("executor_cores", cores)?;
    }
    positive("executor_memory_mb", memory_mb)?;
    resource_amounts("executor_resources", resources)?;
    limits::amounts("executor_", cores.unwrap_or(1), memory_mb, resources)?;
    Ok(())
}

/// The most resource profiles one application may have.
pub const MAX_PROFILES: usize = 64;

/// An application asks for executors of one of its resource profiles (Spark's
/// `RequestExecutors` for a profile other than the default; from log format 3): the
/// profile's size the first time, and how many of its executors it wants now. A profile's
/// size never changes; lowering its limit kills nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SetProfileLimit {
    /// The app.
    pub app: AppId,
    /// The profile's id, 1 or more: 0 is the app's own size, whose limit
    /// [`SetExecutorLimit`] sets.
    pub id: u32,
    /// Its size and limit.
    pub profile: Profile,
}

impl Apply for SetProfileLimit {
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        let effective = state.log_format();
        if effective < LogFormat::THIRD {
            return Err(ApplyError::Conflict(format!(
                "resource profiles need every master on {}; the cluster is at {effective}",
                LogFormat::THIRD.readers()
            )));
        }
        let profile = &self.profile;
        positive("profile", self.id)?;
        executor_size(
            profile.executor_cores,
            profile.executor_memory_mb,
            &profile.executor_resources,
        )?;
        let app = state
            .apps
            .get(&self.app)
            .ok_or_else(|| ApplyError::UnknownApp(self.app.clone()))?;
        program(&app.desc.command, &app.desc.args, &profile.env)?;
        let profiles = state.profiles.get(&self.app);
        match profiles.and_then(|p| p.profiles.get(&self.id)) {
            Some(known) if !same_size(known, profile) => {
                return Err(ApplyError::Conflict(format!(
                    "resource profile {} of `{}` has another size: a profile never changes",
                    self.id, self.app
                )));
            }
            Some(_) => {}
            None if profiles.is_some_and(|p| p.profiles.len() >= MAX_PROFILES) => {
                return Err(ApplyError::Conflict(format!(
                    "`{}` has {MAX_PROFILES} resource profiles, the most an application may have",
                    self.app
                )));
            }
            None => {}
        }
        state
            .profiles
            .entry(self.app.clone())
            .or_default()
            .profiles
            .insert(self.id, profile.clone());
        state.show_app_to_passes(&self.app);
        Ok(Response::default())
    }
}

/// Whether two descriptions of a profile have the same size and environment: all but the
/// limit.
fn same_size(known: &Profile, asked: &Profile) -> bool {
    Profile {
        executor_limit: asked.executor_limit,
        ..known.clone()
    } == *asked
}

/// An application gives back executors (Spark's `KillExecutors`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KillExecutors {
    /// The app.
    pub app: AppId,
    /// The executors to kill; ids of no live executor are reported, not refused.
    pub executors: Vec<ExecutorId>,
}

impl Apply for KillExecutors {
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        let app = state.app_mut(&self.app)?;
        let (live, unknown): (Vec<ExecutorId>, Vec<ExecutorId>) = self
            .executors
            .iter()
            .partition(|id| app.executors.contains_key(id));
        let mut effects = Effects::default();
        for id in live {
            // A repeated id was ended by its first occurrence.
            if state.apps[&self.app].executors.contains_key(&id) {
                state.stop_executor(&self.app, id, &mut effects);
            }
        }
        Ok(Response {
            outcome: Outcome::ExecutorsKilled { unknown },
            effects,
        })
    }
}

/// A worker reports an executor's new state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutorStateChanged {
    /// The executor's app.
    pub app: AppId,
    /// The executor.
    pub executor: ExecutorId,
    /// Its new state.
    pub state: ExecutorState,
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
}

impl Apply for ExecutorStateChanged {
    /// Spark's `ExecutorStateChanged`: RUNNING resets the app's retry count; an ended executor
    /// frees its resources, and one that ended without exit code 0 counts as a failure. After
    /// `max_executor_retries` failures, an app with no RUNNING executor is removed as FAILED.
    /// Reporting the state an executor is already in changes nothing.
    /// The end of an executor the masters stopped frees what it kept, and from log format
    /// 4 records how it exited.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let stopped = Stopped::Executor(self.app.clone(), self.executor);
        if self.state.is_finished() {
            let recorded = state.record_exit_code(&self.app, self.executor, self.exit_code);
            if state.stopped_process_ended(&stopped) || recorded {
                return Ok(Response::default());
            }
        }
        let max_retries = state.config.max_executor_retries;
        let app = state.app_mut(&self.app)?;
        let executor = app
            .executors
            .get_mut(&self.executor)
            .ok_or_else(|| ApplyError::UnknownExecutor(self.app.clone(), self.executor))?;
        match (executor.state, self.state) {
            (old, new) if old == new => return Ok(Response::default()),
            (ExecutorState::Launching, ExecutorState::Running) => {
                executor.state = ExecutorState::Running;
                app.retry_count = 0;
                return Ok(Response::default());
            }
            (old, new) if !new.is_finished() => {
                return Err(ApplyError::Conflict(format!(
                    "executor {} of `{}` cannot go from {old:?} to {new:?}",
                    self.executor, self.app
                )));
            }
            _ => {}
        }

        let mut effects = Effects::default();
        state.end_executor(
            &self.app,
            self.executor,
            self.state,
            self.exit_code,
            &mut effects,
        );
        if self.exit_code != Some(0) {
            let app = state.apps.get_mut(&self.app).expect("checked above");
            app.retry_count += 1;
            let none_running = app
                .executors
                .values()
                .all(|e| e.state != ExecutorState::Running);
            let retries_exhausted =
                max_retries >= 0 && i64::from(app.retry_count) >= i64::from(max_retries);
            if retries_exhausted && none_running {
                state.remove_app(&self.app, AppState::Failed, at, &mut effects);
            }
        }
        Ok(Response {
            outcome: Outcome::Done,
            effects,
        })
    }
}
