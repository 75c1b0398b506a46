//! The streams of one leader: which worker or application is at the other end of each
//! [`LinkId`], each one's current stream (a newer one supersedes it), and when each worker
//! was last heard from and each client went away.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use muster_core::agent::{Build, ShuffleServiceStatus};
use muster_core::ids::{AppId, DriverId, ExecutorId, WorkerId};
use muster_state::model::{Executor, Owner};

use super::protocol::LinkId;

/// Who is at the other end of a link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Peer {
    Worker(WorkerId),
    App(AppId),
}

/// What a message from a worker on a link is, to this leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hearing {
    /// This leader does not keep the worker.
    Unknown,
    /// The link is not the worker's current stream.
    Superseded,
    /// From the worker's current stream; noted as heard.
    Current {
        /// Whether its registration is committed and reconciled in this term.
        registered: bool,
    },
}

/// A worker as this leader knows it.
#[derive(Clone, Debug)]
struct KnownWorker {
    /// Its current stream, if open.
    link: Option<LinkId>,
    /// When it was last heard from.
    heard: Instant,
    /// Whether its registration is committed and reconciled in this term.
    registered: bool,
    /// What its agent said of itself.
    agent: Agent,
}

/// What a worker's agent says of itself when it registers.
#[derive(Clone, Debug, Default)]
pub(super) struct Agent {
    /// The build it runs, if it said (agents of release 0.1.0 do not).
    pub(super) build: Option<Build>,
    /// Its shuffle service as it last said, when it runs one.
    pub(super) shuffle_service: Option<ShuffleServiceStatus>,
    /// The Spark its drivers run Spark submissions with, if it said (agents of release
    /// 0.3.0 and before do not); empty when it has none.
    pub(super) spark_home: Option<String>,
}

/// An application's client as this leader knows it.
#[derive(Clone, Debug)]
struct KnownApp {
    /// Its current stream, if open.
    link: Option<LinkId>,
    /// Since when it has had no stream.
    detached_at: Option<Instant>,
    /// What its client said of it.
    client: AppClient,
    /// The named user its client attached as, with the generation of their credential.
    user: Option<Owner>,
}

/// What an application's client says of it when it attaches.
#[derive(Clone, Debug, Default)]
pub(super) struct AppClient {
    /// Its web UI; empty if none.
    pub(super) ui_address: String,
    /// The cluster-mode driver that runs it, if one does.
    pub(super) driver: Option<DriverId>,
}

/// Every open stream, and the workers and applications this leader knows.
#[derive(Debug, Default)]
pub(super) struct Links {
    open: BTreeMap<LinkId, Peer>,
    workers: BTreeMap<WorkerId, KnownWorker>,
    /// The workers of `workers` by when they were last heard from, the longest silent first.
    silence: BTreeSet<(Instant, WorkerId)>,
    apps: BTreeMap<AppId, KnownApp>,
    /// The latest ends of each application's executors in this term (at most
    /// [`ENDS_KEPT`]), told again to a client that attaches again without having seen them:
    /// its stream may have been gone, or going, when they were sent.
    ends: BTreeMap<AppId, BTreeMap<ExecutorId, Executor>>,
}

/// How many ends of one application's executors a leader keeps to tell again.
const ENDS_KEPT: usize = 256;

impl Links {
    /// Who is at the other end of `link`, while it is open.
    pub(super) fn peer(&self, link: LinkId) -> Option<&Peer> {
        self.open.get(&link)
    }

    /// Whether `link` is open.
    pub(super) fn is_open(&self, link: LinkId) -> bool {
        self.open.contains_key(&link)
    }

    /// `link` is closed by the leader.
    pub(super) fn forget(&mut self, link: LinkId) {
        self.open.remove(&link);
    }

    /// The stream `worker` is on now, if it has one.
    pub(super) fn worker_link(&self, worker: &WorkerId) -> Option<LinkId> {
        self.workers.get(worker)?.link
    }

    /// The stream `app`'s client is on now, if it has one.
    pub(super) fn app_link(&self, app: &AppId) -> Option<LinkId> {
        self.apps.get(app)?.link
    }

    /// When each worker this leader knows was last heard from, in the order of their ids.
    pub(super) fn heard(&self) -> impl Iterator<Item = (&WorkerId, Instant)> {
        self.workers.iter().map(|(id, known)| (id, known.heard))
    }

    /// The workers this leader knows that were last heard from before `cutoff`, with when,
    /// the longest silent first.
    pub(super) fn heard_before(
        &self,
        cutoff: Instant,
    ) -> impl Iterator<Item = (&WorkerId, Instant)> {
        self.silence
            .iter()
            .take_while(move |(heard, _)| *heard < cutoff)
            .map(|(heard, id)| (id, *heard))
    }

    /// Whether `worker`'s registration is committed and reconciled in this term.
    pub(super) fn is_registered(&self, worker: &WorkerId) -> bool {
        self.workers.get(worker).is_some_and(|w| w.registered)
    }

    /// The web UI `app`'s client gave when it attached; empty if none.
    pub(super) fn ui_address(&self, app: &AppId) -> &str {
        self.apps
            .get(app)
            .map_or("", |a| a.client.ui_address.as_str())
    }

    /// The cluster-mode driver that runs `app`, as its client said when it attached.
    pub(super) fn app_driver(&self, app: &AppId) -> Option<&DriverId> {
        self.apps.get(app)?.client.driver.as_ref()
    }

    /// The named user `app`'s client attached as, if any.
    pub(super) fn app_user(&self, app: &AppId) -> Option<&Owner> {
        self.apps.get(app)?.user.as_ref()
    }

    /// The build `worker`'s agent said it runs.
    pub(super) fn worker_build(&self, worker: &WorkerId) -> Option<&Build> {
        self.workers.get(worker)?.agent.build.as_ref()
    }

    /// `worker`'s shuffle service as it last said, when it runs one.
    pub(super) fn shuffle_service(&self, worker: &WorkerId) -> Option<&ShuffleServiceStatus> {
        self.workers.get(worker)?.agent.shuffle_service.as_ref()
    }

    /// The Spark `worker`'s drivers run Spark submissions with, as its agent said.
    pub(super) fn spark_home(&self, worker: &WorkerId) -> Option<&str> {
        self.workers.get(worker)?.agent.spark_home.as_deref()
    }

    /// `worker` says how its shuffle service is.
    pub(super) fn set_shuffle_service(
        &mut self,
        worker: &WorkerId,
        service: Option<ShuffleServiceStatus>,
    ) {
        if let Some(known) = self.workers.get_mut(worker) {
            known.agent.shuffle_service = service;
        }
    }

    /// Whether this leader keeps `worker` (it has registered and not been forgotten).
    pub(super) fn knows_worker(&self, worker: &WorkerId) -> bool {
        self.workers.contains_key(worker)
    }

    /// `worker` registered on `link` at `now`, which becomes its current stream.
    pub(super) fn attach_worker(
        &mut self,
        link: LinkId,
        worker: WorkerId,
        agent: Agent,
        now: Instant,
    ) {
        self.open.insert(link, Peer::Worker(worker.clone()));
        self.forget_worker(&worker);
        self.silence.insert((now, worker.clone()));
        let known = KnownWorker {
            link: Some(link),
            heard: now,
            registered: false,
            agent,
        };
        self.workers.insert(worker, known);
    }

    /// `app`'s client attached on `link` as `user`, which becomes its current stream.
    pub(super) fn attach_app(
        &mut self,
        link: LinkId,
        app: AppId,
        client: AppClient,
        user: Option<Owner>,
    ) {
        self.open.insert(link, Peer::App(app.clone()));
        let known = KnownApp {
            link: Some(link),
            detached_at: None,
            client,
            user,
        };
        self.apps.insert(app, known);
    }

    /// `worker` was heard from on `link` at `now`: noted if `link` is its current stream.
    pub(super) fn heard_on(&mut self, worker: &WorkerId, link: LinkId, now: Instant) -> Hearing {
        match self.workers.get_mut(worker) {
            None => Hearing::Unknown,
            Some(known) if known.link != Some(link) => Hearing::Superseded,
            Some(known) => {
                let before = std::mem::replace(&mut known.heard, now);
                if before != now {
                    let key = (before, worker.clone());
                    let (_, id) = self.silence.take(&key).unwrap_or(key);
                    self.silence.insert((now, id));
                }
                Hearing::Current {
                    registered: known.registered,
                }
            }
        }
    }

    /// `worker`'s registration on `link` is in the log. Whether `link` is still its stream
    /// (a newer stream registered since reconciles instead).
    pub(super) fn registered(&mut self, worker: &WorkerId, link: LinkId) -> bool {
        match self.workers.get_mut(worker) {
            Some(known) if known.link == Some(link) => {
                known.registered = true;
                true
            }
            _ => false,
        }
    }

    /// `worker`'s registration must be reconciled again: its loss was committed after it.
    pub(super) fn unregistered(&mut self, worker: &WorkerId) {
        if let Some(known) = self.workers.get_mut(worker) {
            known.registered = false;
        }
    }

    /// This leader no longer keeps `worker`: it must register again.
    pub(super) fn forget_worker(&mut self, worker: &WorkerId) {
        if let Some(known) = self.workers.remove(worker) {
            self.silence.remove(&(known.heard, worker.clone()));
        }
    }

    /// `executor` of `app` ended.
    pub(super) fn executor_ended(&mut self, app: &AppId, executor: Executor) {
        let ends = self.ends.entry(app.clone()).or_default();
        ends.insert(executor.id, executor);
        if ends.len() > ENDS_KEPT {
            ends.pop_first();
        }
    }

    /// How executor `id` of `app` ended, if this leader saw it end.
    pub(super) fn end_of(&self, app: &AppId, id: ExecutorId) -> Option<&Executor> {
        self.ends.get(app)?.get(&id)
    }

    /// `app` ended: its stream, if it had one, is no longer open.
    pub(super) fn app_ended(&mut self, app: &AppId) -> Option<LinkId> {
        self.ends.remove(app);
        let link = self.apps.remove(app)?.link?;
        self.open.remove(&link);
        Some(link)
    }

    /// The stream `link` ended at `now`: its worker has its timeout to come back, its
    /// application's client its grace.
    pub(super) fn closed(&mut self, link: LinkId, now: Instant) {
        match self.open.remove(&link) {
            Some(Peer::Worker(worker)) => {
                if let Some(known) = self.workers.get_mut(&worker)
                    && known.link == Some(link)
                {
                    known.link = None;
                }
            }
            Some(Peer::App(app)) => {
                if let Some(known) = self.apps.get_mut(&app)
                    && known.link == Some(link)
                {
                    known.link = None;
                    known.detached_at = Some(now);
                }
            }
            None => {}
        }
    }

    /// This leader stood still until `now`: every worker and detached client counts its
    /// silence from now.
    pub(super) fn stood_still(&mut self, now: Instant) {
        for worker in self.workers.values_mut() {
            worker.heard = now;
        }
        self.silence = self.workers.keys().map(|id| (now, id.clone())).collect();
        for app in self.apps.values_mut() {
            if app.detached_at.is_some() {
                app.detached_at = Some(now);
            }
        }
    }

    /// Applications whose clients have had no stream for `grace` at `now`.
    pub(super) fn detached_for(
        &self,
        grace: Duration,
        now: Instant,
    ) -> impl Iterator<Item = &AppId> {
        self.apps
            .iter()
            .filter(move |(_, a)| {
                a.link.is_none()
                    && a.detached_at
                        .is_some_and(|at| now.saturating_duration_since(at) >= grace)
            })
            .map(|(app, _)| app)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn silent_before(links: &Links, cutoff: Instant) -> Vec<(String, Instant)> {
        links
            .heard_before(cutoff)
            .map(|(id, at)| (id.0.to_string(), at))
            .collect()
    }

    #[test]
    fn the_silence_index_follows_every_hearing_forgetting_and_standstill() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let (a, b) = (WorkerId("a".into()), WorkerId("b".into()));
        let mut links = Links::default();
        links.attach_worker(LinkId(1), a.clone(), Agent::default(), at(0));
        links.attach_worker(LinkId(2), b.clone(), Agent::default(), at(1));
        assert_eq!(
            silent_before(&links, at(5)),
            [("a".into(), at(0)), ("b".into(), at(1))]
        );
        // Heard again on its stream: no longer the longest silent.
        assert_eq!(
            links.heard_on(&a, LinkId(1), at(3)),
            Hearing::Current { registered: false }
        );
        assert_eq!(
            silent_before(&links, at(5)),
            [("b".into(), at(1)), ("a".into(), at(3))]
        );
        // Not on its stream: not heard.
        assert_eq!(links.heard_on(&b, LinkId(9), at(4)), Hearing::Superseded);
        assert_eq!(silent_before(&links, at(2)), [("b".into(), at(1))]);
        // Registered again: its silence starts over, once.
        links.attach_worker(LinkId(3), b.clone(), Agent::default(), at(4));
        assert_eq!(
            silent_before(&links, at(5)),
            [("a".into(), at(3)), ("b".into(), at(4))]
        );
        links.forget_worker(&a);
        assert_eq!(links.heard_on(&a, LinkId(1), at(5)), Hearing::Unknown);
        assert_eq!(silent_before(&links, at(9)), [("b".into(), at(4))]);
        links.stood_still(at(8));
        assert_eq!(silent_before(&links, at(8)), []);
        assert_eq!(silent_before(&links, at(9)), [("b".into(), at(8))]);
    }
}
