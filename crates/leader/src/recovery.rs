//! Recovery of a new leader (Spark's `RecoveryState`): whom it waits for, when it stops
//! waiting, what it removes because it never came back, and when it is ALIVE.
//!
//! A new leader starts RECOVERING. Once a linearizable read confirms that its state holds
//! everything committed before its term, [`Recovery::start`] notes every worker the log has
//! ALIVE and every active application that are not back yet. When all of them are back, or
//! after the recovery timeout, [`Recovery::complete`] goes COMPLETING_RECOVERY and names
//! what never came back; the leader removes it through the log, and once each of those
//! proposals is settled ([`Recovery::settled_one`]) the leader is ALIVE.

use std::collections::BTreeSet;
use std::time::Instant;

use muster_core::ids::{AppId, WorkerId};
use muster_core::model::{RecoveryState, WorkerState};
use muster_state::ClusterState;

/// Where a leader's recovery stands.
#[derive(Debug)]
pub(super) struct Recovery {
    state: RecoveryState,
    /// When it gives up waiting, once the state has been read.
    deadline: Option<Instant>,
    /// Workers the log had ALIVE that have not registered in this term.
    awaited_workers: BTreeSet<WorkerId>,
    /// Applications active at the start of the term whose clients have not re-attached.
    awaited_apps: BTreeSet<AppId>,
    /// Completing proposals not settled yet.
    completing: usize,
}

/// What never came back, for the leader to remove through the log.
pub(super) struct NeverBack {
    /// Workers to lose.
    pub workers: Vec<WorkerId>,
    /// Applications to finish.
    pub apps: Vec<AppId>,
}

impl Recovery {
    pub(super) fn new() -> Self {
        Self {
            state: RecoveryState::Recovering,
            deadline: None,
            awaited_workers: BTreeSet::new(),
            awaited_apps: BTreeSet::new(),
            completing: 0,
        }
    }

    pub(super) fn state(&self) -> RecoveryState {
        self.state
    }

    pub(super) fn is_alive(&self) -> bool {
        self.state == RecoveryState::Alive
    }

    /// The state is complete: waits until `deadline` for every worker the log has ALIVE that
    /// has not `registered` and every active application whose client is not `attached`.
    /// Only the first read counts.
    pub(super) fn start(
        &mut self,
        deadline: Instant,
        state: &ClusterState,
        registered: impl Fn(&WorkerId) -> bool,
        attached: impl Fn(&AppId) -> bool,
    ) {
        if self.deadline.is_some() {
            return;
        }
        self.deadline = Some(deadline);
        self.awaited_workers = state
            .workers()
            .values()
            .filter(|w| w.state == WorkerState::Alive && !registered(&w.id))
            .map(|w| w.id.clone())
            .collect();
        self.awaited_apps = state
            .apps()
            .keys()
            .filter(|app| !attached(app))
            .cloned()
            .collect();
    }

    /// `worker` registered: it is not awaited any more.
    pub(super) fn worker_back(&mut self, worker: &WorkerId) {
        self.awaited_workers.remove(worker);
    }

    /// `app`'s client attached, or the app ended: it is not awaited any more.
    pub(super) fn app_back(&mut self, app: &AppId) {
        self.awaited_apps.remove(app);
    }

    /// Whether recovery waits no more: everything came back.
    pub(super) fn all_back(&self) -> bool {
        self.state == RecoveryState::Recovering
            && self.deadline.is_some()
            && self.awaited_workers.is_empty()
            && self.awaited_apps.is_empty()
    }

    /// Whether recovery waits no more: its deadline has passed.
    pub(super) fn timed_out(&self, now: Instant) -> bool {
        self.state == RecoveryState::Recovering && self.deadline.is_some_and(|d| now >= d)
    }

    /// COMPLETING_RECOVERY: what is still awaited and never came back. A worker whose
    /// registration is in flight (`registering`) is back; so is one the log no longer has
    /// ALIVE, or that fences (it may still be killing its work; liveness watches it from
    /// here). An application whose client is `attached` is back, and so is one that ended.
    pub(super) fn complete(
        &mut self,
        state: &ClusterState,
        registering: impl Fn(&WorkerId) -> bool,
        attached: impl Fn(&AppId) -> bool,
    ) -> NeverBack {
        self.state = RecoveryState::CompletingRecovery;
        let workers = std::mem::take(&mut self.awaited_workers)
            .into_iter()
            .filter(|worker| {
                let lost_now = state
                    .workers()
                    .get(worker)
                    .is_some_and(|w| w.state == WorkerState::Alive && w.fence_grace_ms.is_none());
                !registering(worker) && lost_now
            })
            .collect();
        let apps = std::mem::take(&mut self.awaited_apps)
            .into_iter()
            .filter(|app| state.apps().contains_key(app) && !attached(app))
            .collect();
        NeverBack { workers, apps }
    }

    /// The leader proposed `count` completing commands; ALIVE at once when there are none.
    /// Whether it became ALIVE.
    pub(super) fn completing(&mut self, count: usize) -> bool {
        self.completing = count;
        self.settled_if_none()
    }

    /// One completing command was committed or failed. Whether the leader became ALIVE.
    pub(super) fn settled_one(&mut self) -> bool {
        self.completing = self.completing.saturating_sub(1);
        self.settled_if_none()
    }

    fn settled_if_none(&mut self) -> bool {
        if self.completing == 0 && self.state == RecoveryState::CompletingRecovery {
            self.state = RecoveryState::Alive;
            return true;
        }
        false
    }
}
