//! The commands of the allocation log, one type each, dispatched through [`Op`].
//!
//! A [`Command`] is what the leader proposes: an [`Op`] stamped with the leader's wall-clock
//! time and, for client writes, the client's request id. Every op validates everything
//! before it changes anything, so a refused op leaves the state as it was.

mod apps;
mod drivers;
mod plan;
mod preempt;
mod queues;
mod restore;
mod users;
mod workers;

pub use crate::version::RaiseLogFormat;
pub use apps::{
    AppFinished, EndGangWait, ExecutorStateChanged, KillApp, KillExecutors, MAX_PROFILES,
    SetAppPriority, SetExecutorLimit, SetProfileLimit, SubmitApp, SubmitDriverApp, SubmitGang,
    SubmitWithSettings, submit_app_op,
};
pub use drivers::{DriverStateChanged, KillDriver, SubmitDriver, SubmitGangDriver};
pub use plan::{
    ApplyPlan, ApplyPlanPerExecutor, ApplyPlanWithProfiles, Grant, GrantOfOne, ProfileGrant,
    plan_op,
};
pub use preempt::{GrantReservations, Preempt, PreemptForProfiles, PreemptWithinQueue, preempt_op};
pub use queues::{
    ConfigureQueues, ConfigureQueuesWithAdmission, ConfigureQueuesWithOrdering, QueueAdmission,
    QueueOrdering, QueueSettings, ReplaceQueues, SetQueues, set_queues_op,
};
pub use restore::Restore;
pub use users::{AddUser, By, RevokeUser};
pub use workers::{
    DecommissionWorker, DrainWorker, RegisterWorker, RegisterWorkerWithAddresses, WorkerLost,
};

use std::collections::BTreeMap;

use muster_core::ids::{RequestId, Term, Timestamp};
use muster_core::limits;
use serde::{Deserialize, Serialize};

use crate::ClusterState;
use crate::response::{ApplyError, Effects, Outcome, Response};

/// One log entry: an op, when the leader proposed it, and the client request it answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// The leader's wall-clock time; the only time `apply` sees.
    pub at: Timestamp,
    /// The client's id for this write, when a client sent it; retries reuse it.
    pub request_id: Option<RequestId>,
    /// The term of the leader session that decided this command, when a leader decided it
    /// (reconciliation, liveness, plans); [`ClusterState::apply_in_term`] refuses it in a
    /// later term. Client writes carry `None`: they mean the same in any term.
    pub term: Option<Term>,
    /// What to do.
    pub op: Op,
}

/// Every change the log can carry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// A worker registers or re-registers.
    RegisterWorker(RegisterWorker),
    /// A worker stopped heartbeating or never came back.
    WorkerLost(WorkerLost),
    /// A worker is taken out of service.
    DecommissionWorker(DecommissionWorker),
    /// An application is submitted.
    SubmitApp(SubmitApp),
    /// A driver is submitted.
    SubmitDriver(SubmitDriver),
    /// A user kills an application.
    KillApp(KillApp),
    /// A user kills a driver.
    KillDriver(KillDriver),
    /// An application changes its executor target.
    SetExecutorLimit(SetExecutorLimit),
    /// An application gives back executors.
    KillExecutors(KillExecutors),
    /// One scheduling pass as builds before grants had a count wrote it: a grant per
    /// executor.
    ApplyPlanPerExecutor(ApplyPlanPerExecutor),
    /// A worker reports an executor's new state.
    ExecutorStateChanged(ExecutorStateChanged),
    /// A worker reports a driver's end.
    DriverStateChanged(DriverStateChanged),
    /// An application ended (its driver unregistered or vanished).
    AppFinished(AppFinished),
    /// The queue configuration changes, every queue with the default access.
    SetQueues(SetQueues),
    /// Executors of ordinary queues stop for prior work, whose room is kept for it.
    Preempt(Preempt),
    /// Kept room whose grace has passed goes to the work it was kept for.
    GrantReservations(GrantReservations),
    /// Commands committed together in one entry (group commit): each applies in order as if
    /// it had an entry of its own, and the outcome lists their results. Only a log entry
    /// carries a batch, and a batch holds no batch.
    Batch(Vec<Command>),
    /// A worker is drained: no new work, and it leaves once what runs on it has ended.
    DrainWorker(DrainWorker),
    /// A new cluster takes a saved snapshot's state.
    Restore(Restore),
    /// A user is added, or added again after a revocation.
    AddUser(AddUser),
    /// A user's credential is revoked.
    RevokeUser(RevokeUser),
    /// A named user's request, applied if they may make it.
    By(By),
    /// The queue configuration and the queues' access lists change.
    ReplaceQueues(ReplaceQueues),
    /// The queue configuration, access lists and capacities change.
    ConfigureQueues(ConfigureQueues),
    /// Executors of ordinary queues above their guarantee stop for applications of queues
    /// below theirs, whose room is kept for them.
    PreemptForGuarantees(Preempt),
    /// A worker registers or re-registers with the addresses of its custom resources.
    RegisterWorkerWithAddresses(RegisterWorkerWithAddresses),
    /// One scheduling pass: driver launches and executor grants.
    ApplyPlan(ApplyPlan),
    /// The cluster's effective log format is raised (see [`crate::version`]).
    RaiseLogFormat(RaiseLogFormat),
    /// An application asks for executors of one of its resource profiles.
    SetProfileLimit(SetProfileLimit),
    /// One scheduling pass whose grants include executors of resource profiles.
    ApplyPlanWithProfiles(ApplyPlanWithProfiles),
    /// The queue configuration, access lists, capacities and admission settings change.
    ConfigureQueuesWithAdmission(ConfigureQueuesWithAdmission),
    /// An application that needs a minimum of executors at once is submitted.
    SubmitGang(SubmitGang),
    /// A driver that says the room its application needs first is submitted.
    SubmitGangDriver(SubmitGangDriver),
    /// A gang that waited its timeout stops waiting.
    EndGangWait(EndGangWait),
    /// An application its cluster-mode driver registers.
    SubmitDriverApp(SubmitDriverApp),
    /// A preemption whose room is kept for resource profiles.
    PreemptForProfiles(PreemptForProfiles),
    /// Replaces the queue configuration with each leaf's ordering (from log format 4).
    ConfigureQueuesWithOrdering(ConfigureQueuesWithOrdering),
    /// Sets an application's priority in its queue (from log format 4).
    SetAppPriority(SetAppPriority),
    /// An application or a driver is submitted with its priority (from log format 4).
    SubmitWithSettings(SubmitWithSettings),
    /// Executors stop for applications of their own leaf queue that outrank theirs, whose
    /// room is kept for them (from log format 4).
    PreemptWithinQueue(PreemptWithinQueue),
}

/// How an op changes the state.
pub(crate) trait Apply {
    /// Applies the op at time `at`.
    ///
    /// # Errors
    ///
    /// Refuses invalid input or an op that does not fit the current state, changing nothing.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError>;
}

impl ClusterState {
    /// Applies the command of a log entry written in `entry_term`: a command decided by the
    /// leader of an older term is refused (a deposed leader's session must not act in its
    /// successor's term), anything else is [`ClusterState::apply`]'d.
    ///
    /// # Errors
    ///
    /// [`ApplyError::StaleTerm`], or the op's refusal; the state is unchanged.
    pub fn apply_in_term(
        &mut self,
        entry_term: Term,
        command: &Command,
    ) -> Result<Response, ApplyError> {
        if let Op::Batch(commands) = &command.op {
            let results = commands
                .iter()
                .map(|command| match command.op {
                    Op::Batch(_) => Err(ApplyError::Batch),
                    _ => self.apply_in_term(entry_term, command),
                })
                .collect();
            return Ok(Response {
                outcome: Outcome::Batch(results),
                effects: Effects::default(),
            });
        }
        match command.term {
            Some(decided) if decided < entry_term => Err(ApplyError::StaleTerm {
                decided,
                entry: entry_term,
            }),
            _ => self.apply(command),
        }
    }

    /// Applies one committed command. Deterministic: no clock, no randomness, no I/O.
    ///
    /// A command whose request id was already applied returns the first result again and
    /// changes nothing.
    ///
    /// # Errors
    ///
    /// The op's refusal; the state is unchanged.
    pub fn apply(&mut self, command: &Command) -> Result<Response, ApplyError> {
        if let Some(id) = &command.request_id {
            // Remembered results are bounded: an id beyond the name limit is not stored.
            limits::name("request_id", &id.0)?;
            if let Some(result) = self.requests.get(id) {
                return result.clone();
            }
        }
        let result = self.apply_op(&command.op, command.at);
        if let Some(id) = &command.request_id {
            self.requests
                .insert(id.clone(), result.clone(), self.config.retained_requests);
        }
        result
    }

    /// Applies `op` at time `at`.
    pub(crate) fn apply_op(&mut self, op: &Op, at: Timestamp) -> Result<Response, ApplyError> {
        match op {
            Op::RegisterWorker(op) => op.apply(self, at),
            Op::WorkerLost(op) => op.apply(self, at),
            Op::DecommissionWorker(op) => op.apply(self, at),
            Op::SubmitApp(op) => op.apply(self, at),
            Op::SubmitDriver(op) => op.apply(self, at),
            Op::KillApp(op) => op.apply(self, at),
            Op::KillDriver(op) => op.apply(self, at),
            Op::SetExecutorLimit(op) => op.apply(self, at),
            Op::KillExecutors(op) => op.apply(self, at),
            Op::ApplyPlan(op) => op.apply(self, at),
            Op::ApplyPlanPerExecutor(op) => op.apply(self, at),
            Op::ExecutorStateChanged(op) => op.apply(self, at),
            Op::DriverStateChanged(op) => op.apply(self, at),
            Op::AppFinished(op) => op.apply(self, at),
            Op::SetQueues(op) => op.apply(self, at),
            Op::Preempt(op) => op.apply(self, at),
            Op::GrantReservations(op) => op.apply(self, at),
            Op::Batch(_) => Err(ApplyError::Batch),
            Op::DrainWorker(op) => op.apply(self, at),
            Op::Restore(op) => op.apply(self, at),
            Op::AddUser(op) => op.apply(self, at),
            Op::RevokeUser(op) => op.apply(self, at),
            Op::By(op) => op.apply(self, at),
            Op::ReplaceQueues(op) => op.apply(self, at),
            Op::ConfigureQueues(op) => op.apply(self, at),
            Op::ConfigureQueuesWithAdmission(op) => op.apply(self, at),
            Op::ConfigureQueuesWithOrdering(op) => op.apply(self, at),
            Op::SetAppPriority(op) => op.apply(self, at),
            Op::SubmitWithSettings(op) => op.apply(self, at),
            Op::PreemptWithinQueue(op) => op.apply(self, at),
            Op::SubmitGang(op) => op.apply(self, at),
            Op::SubmitGangDriver(op) => op.apply(self, at),
            Op::EndGangWait(op) => op.apply(self, at),
            Op::SubmitDriverApp(op) => op.apply(self, at),
            Op::PreemptForProfiles(op) => op.apply(self, at),
            Op::PreemptForGuarantees(op) => op.apply_for(
                self,
                at,
                muster_core::preempt::Preempting::BelowGuarantee,
                &[],
            ),
            Op::RegisterWorkerWithAddresses(op) => op.apply(self, at),
            Op::RaiseLogFormat(op) => op.apply(self, at),
            Op::SetProfileLimit(op) => op.apply(self, at),
            Op::ApplyPlanWithProfiles(op) => op.apply(self, at),
        }
    }
}

/// Checks a program to launch: a command is required, and the whole program within the
/// limits.
fn program(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
) -> Result<(), ApplyError> {
    if command.trim().is_empty() {
        return Err(ApplyError::Invalid {
            field: "command".to_owned(),
            message: "must not be empty".to_owned(),
        });
    }
    Ok(limits::program(command, args, env)?)
}
