//! Liveness of an ALIVE leader's peers: a worker silent past its loss timeout is lost, an
//! application whose client has been gone past its grace is finished for it, and a draining
//! worker is decommissioned once it is empty or its kill-after has passed. Each is proposed
//! once and decided again only if its proposal fails.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use muster_core::ids::{AppId, WorkerId};
use muster_core::model::WorkerState;
use muster_state::ClusterState;
use muster_state::model::Worker;

use super::links::Links;

/// What a fencing worker's loss waits for beyond the worker timeout and its kill grace: the
/// worker's last contact may trail the leader's last hearing by a heartbeat answer, and it
/// checks its fence every heartbeat or reconnection attempt.
pub const FENCE_MARGIN: Duration = Duration::from_secs(5);

/// Losses, finishes and decommissions this leader has proposed and not settled yet.
#[derive(Debug, Default)]
pub(super) struct Liveness {
    /// When liveness was first checked in ALIVE: a worker this leader has never heard from
    /// is counted from then.
    alive_at: Option<Instant>,
    /// When every worker of the log was last checked for silence.
    all_checked_at: Option<Instant>,
    /// The ALIVE workers of the log this leader had not heard from then.
    unheard: BTreeSet<WorkerId>,
    /// Workers whose loss is proposed and not committed yet.
    losing: BTreeSet<WorkerId>,
    /// Applications being finished for a vanished client.
    finishing: BTreeSet<AppId>,
    /// When this leader first saw each drain: its kill-after counts from then.
    drains_seen: BTreeMap<WorkerId, Instant>,
    /// Draining workers whose decommissioning is proposed and not committed yet.
    decommissioning: BTreeSet<WorkerId>,
}

impl Liveness {
    /// Workers the log has ALIVE that have been silent past their loss timeout at `now`,
    /// with that timeout; each is noted as being lost.
    ///
    /// A worker this leader never heard from (or forgot) counts from when liveness was first
    /// checked. Every `worker_timeout / 4` all the log's workers are looked at, which finds
    /// those; in between, only the ones found then and those `links` has as silent past the
    /// worker timeout.
    pub(super) fn silent_workers(
        &mut self,
        now: Instant,
        state: &ClusterState,
        links: &Links,
        worker_timeout: Duration,
    ) -> Vec<(WorkerId, Duration)> {
        let alive_at = *self.alive_at.get_or_insert(now);
        let all = self
            .all_checked_at
            .is_none_or(|at| now.saturating_duration_since(at) >= worker_timeout / 4);
        let heard: Vec<(&Worker, Instant)> = if all {
            self.all_checked_at = Some(now);
            self.unheard.clear();
            // Both in the order of worker ids: one walk, not a search for each worker.
            let mut heard = links.heard().peekable();
            let mut all = Vec::new();
            for w in state.workers().values() {
                while heard.next_if(|&(id, _)| id < &w.id).is_some() {}
                match heard.next_if(|&(id, _)| id == &w.id) {
                    Some((_, at)) => all.push((w, at)),
                    None => {
                        // Only an ALIVE one can be lost: the dead ones the log keeps are
                        // not looked at again each tick.
                        if w.state == WorkerState::Alive {
                            self.unheard.insert(w.id.clone());
                        }
                        all.push((w, alive_at));
                    }
                }
            }
            all
        } else {
            let unheard = self
                .unheard
                .iter()
                .filter(|id| !links.knows_worker(id))
                .filter_map(|id| Some((state.workers().get(id)?, alive_at)));
            let heard_long_ago = now
                .checked_sub(worker_timeout)
                .into_iter()
                .flat_map(|cutoff| {
                    links
                        .heard_before(cutoff)
                        .filter_map(|(id, at)| Some((state.workers().get(id)?, at)))
                });
            unheard.chain(heard_long_ago).collect()
        };
        let silent: Vec<(WorkerId, Duration)> = heard
            .into_iter()
            .filter_map(|(w, heard)| {
                let timeout = loss_timeout(w, worker_timeout);
                let silent = w.state == WorkerState::Alive
                    && now.saturating_duration_since(heard) > timeout
                    && !self.losing.contains(&w.id);
                silent.then(|| (w.id.clone(), timeout))
            })
            .collect();
        self.losing
            .extend(silent.iter().map(|(worker, _)| worker.clone()));
        silent
    }

    /// A loss of `worker` was settled, committed or not.
    pub(super) fn loss_settled(&mut self, worker: &WorkerId) {
        self.losing.remove(worker);
    }

    /// Active applications whose clients have been detached for `grace` at `now`; each is
    /// noted as being finished.
    pub(super) fn vanished_apps(
        &mut self,
        now: Instant,
        state: &ClusterState,
        links: &Links,
        grace: Duration,
    ) -> Vec<AppId> {
        let vanished: Vec<AppId> = links
            .detached_for(grace, now)
            .filter(|app| !self.finishing.contains(*app) && state.apps().contains_key(*app))
            .cloned()
            .collect();
        self.finishing.extend(vanished.iter().cloned());
        vanished
    }

    /// `app` ended, or its finish failed.
    pub(super) fn finish_settled(&mut self, app: &AppId) {
        self.finishing.remove(app);
    }

    /// Draining workers to decommission at `now`: those with nothing left to run, and those
    /// whose kill-after (as the log has it now) has passed by this leader's clock, counted
    /// from when this leader first saw the drain. A worker being lost is left to its loss.
    /// Each is noted as being decommissioned.
    pub(super) fn drained_workers(&mut self, now: Instant, state: &ClusterState) -> Vec<WorkerId> {
        let draining = state.draining();
        self.drains_seen.retain(|w, _| draining.contains_key(w));
        let mut drained = Vec::new();
        for (id, drain) in draining {
            if self.decommissioning.contains(id) || self.losing.contains(id) {
                continue;
            }
            let seen = *self.drains_seen.entry(id.clone()).or_insert(now);
            let due = drain
                .kill_after_ms
                .is_some_and(|ms| now >= seen + Duration::from_millis(ms));
            let empty = state
                .workers()
                .get(id)
                .is_none_or(|w| w.executors.is_empty() && w.drivers.is_empty());
            if empty || due {
                self.decommissioning.insert(id.clone());
                drained.push(id.clone());
            }
        }
        drained
    }

    /// A decommissioning of `worker` was settled, committed or not.
    pub(super) fn decommission_settled(&mut self, worker: &WorkerId) {
        self.decommissioning.remove(worker);
    }
}

/// How long `worker` may be silent before it is lost: the worker timeout, and for a worker
/// that fences, its kill grace and [`FENCE_MARGIN`] more, so that its own kills are done
/// before anything of it is relaunched elsewhere.
fn loss_timeout(worker: &Worker, worker_timeout: Duration) -> Duration {
    let fence = worker.fence_grace_ms.map_or(Duration::ZERO, |grace| {
        Duration::from_millis(grace) + FENCE_MARGIN
    });
    worker_timeout + fence
}
