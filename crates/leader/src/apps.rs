//! The leader's side of an application's client: its attachment (the executors it missed
//! while away are told again), and its own requests (executor limits, resource profiles,
//! kills), proposed to the log or deferred until the cluster's log format admits them.

use muster_core::ids::{AppId, DriverId, ExecutorId, WorkerId};
use muster_core::resources::Resources;
use muster_state::commands::{AppFinished, By, KillExecutors, SetExecutorLimit, SetProfileLimit};
use muster_state::model::{AppState, Executor, ExecutorState, Owner};
use muster_state::version::LogFormat;
use muster_state::{ClusterState, Op};

use crate::links::{AppClient, Peer};
use crate::protocol::{Action, AppRequest, Close, LinkId, ToApp};
use crate::{Leader, Purpose};

/// An application's client attached ([`crate::Event::AppAttached`]).
pub(super) struct Attached {
    pub(super) app: AppId,
    pub(super) ui_address: String,
    pub(super) driver: Option<DriverId>,
    pub(super) user: Option<Owner>,
    pub(super) believed_live: Vec<ExecutorId>,
}

/// The end of executor `id` as told to a client that missed it when this leader does not
/// know how it ended (it ended before this leader's term): lost, its worker unknown.
fn ended_unseen(id: ExecutorId) -> Executor {
    Executor {
        id,
        worker: WorkerId::from(""),
        resources: Resources::default(),
        state: ExecutorState::Lost,
        exit_code: None,
    }
}

impl Leader {
    pub(super) fn app_attached(&mut self, link: LinkId, attached: Attached, state: &ClusterState) {
        let Attached {
            app,
            ui_address,
            driver,
            user,
            believed_live,
        } = attached;
        if let Some(old) = self.links.app_link(&app) {
            self.close(old, Close::Superseded);
        }
        self.links
            .attach_app(link, app.clone(), AppClient { ui_address, driver }, user);
        self.recovery.app_back(&app);
        self.actions.push(Action::ToApp {
            link,
            message: ToApp::Registered(app.clone()),
        });
        // So that a re-attached client starts from the truth: the executors it holds, and
        // the end of each it has not seen end, as this leader saw it or else as lost.
        if let Some(held) = state.apps().get(&app) {
            let ended = believed_live
                .into_iter()
                .filter(|id| !held.executors.contains_key(id))
                .map(|id| {
                    self.links
                        .end_of(&app, id)
                        .cloned()
                        .unwrap_or_else(|| ended_unseen(id))
                });
            let told: Vec<Executor> = held.executors.values().cloned().chain(ended).collect();
            for executor in told {
                self.actions.push(Action::ToApp {
                    link,
                    message: ToApp::Executor(executor),
                });
            }
        }
        self.passes.want();
    }

    /// An application's request on `link`, proposed ([`Leader::propose_app_request`]).
    pub(super) fn app_request(&mut self, link: LinkId, request: AppRequest, state: &ClusterState) {
        let Some(Peer::App(app)) = self.links.peer(link).cloned() else {
            return;
        };
        if self.links.app_link(&app) != Some(link) {
            self.close(link, Close::Superseded);
            return;
        }
        let profile = match &request {
            AppRequest::SetProfileLimit(id, _) => Some(*id),
            _ => None,
        };
        let op = match request {
            AppRequest::Heartbeat => {
                self.actions.push(Action::ToApp {
                    link,
                    message: ToApp::HeartbeatAck,
                });
                return;
            }
            AppRequest::Finish => Op::AppFinished(AppFinished {
                id: app.clone(),
                state: AppState::Finished,
            }),
            AppRequest::SetLimit(limit) => Op::SetExecutorLimit(SetExecutorLimit {
                app: app.clone(),
                limit,
            }),
            // A master of an older release could not read it: kept until they all do.
            AppRequest::SetProfileLimit(id, profile) if state.log_format() < LogFormat::THIRD => {
                tracing::info!(%app, "resource profiles wait for every master to run release 0.3.0");
                self.deferred_profiles
                    .entry(app)
                    .or_default()
                    .insert(id, profile);
                return;
            }
            AppRequest::SetProfileLimit(id, profile) => {
                // Newer than what was kept for it, if anything was.
                if let Some(kept) = self.deferred_profiles.get_mut(&app) {
                    kept.remove(&id);
                }
                Op::SetProfileLimit(SetProfileLimit {
                    app: app.clone(),
                    id,
                    profile,
                })
            }
            AppRequest::Release(executors) => Op::KillExecutors(KillExecutors {
                app: app.clone(),
                executors,
            }),
        };
        self.propose_app_request(&app, link, profile, op, state);
    }

    /// Proposes application `app`'s request `op`, made on `link` (for executors of
    /// `profile`, if it names one), as its named user's once every master reads that (the
    /// state then refuses it when their credential was revoked).
    pub(super) fn propose_app_request(
        &mut self,
        app: &AppId,
        link: LinkId,
        profile: Option<u32>,
        op: Op,
        state: &ClusterState,
    ) {
        let op = match self.links.app_user(app) {
            Some(owner) if state.log_format() >= LogFormat::THIRD => Op::By(By {
                user: owner.user.clone(),
                generation: owner.generation,
                op: Box::new(op),
            }),
            _ => op,
        };
        self.propose(op, Purpose::AppRequest { link, profile });
    }

    /// Proposes the resource profiles deferred until the cluster read log format 3, once it
    /// does, for the applications still attached.
    pub(super) fn propose_deferred_profiles(&mut self, state: &ClusterState) {
        if state.log_format() < LogFormat::THIRD {
            return;
        }
        for (app, profiles) in std::mem::take(&mut self.deferred_profiles) {
            let Some(link) = self.links.app_link(&app) else {
                continue;
            };
            for (id, profile) in profiles {
                let op = Op::SetProfileLimit(SetProfileLimit {
                    app: app.clone(),
                    id,
                    profile,
                });
                self.propose_app_request(&app, link, Some(id), op, state);
            }
        }
    }
}
