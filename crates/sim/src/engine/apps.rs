//! Simulated applications and clients: the trace's entries submitted as client writes (apps,
//! drivers, refused ones), applications attaching on their links, running their tasks on
//! the executors they are given, and finishing.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use muster_core::ids::{AppId, DriverId, ExecutorId, WorkerId};
use muster_core::model::GangRequest;
use muster_core::resources::Resources;
use muster_leader::{AppRequest, Event, LinkId, ProcessKey, ToApp};
use muster_state::Op;
use muster_state::commands::{
    DrainWorker, SubmitApp, SubmitDriver, SubmitGangDriver, submit_app_op,
};
use muster_state::model::{AppDescription, DriverDescription, ExecutorState};

use crate::trace::{AppEntry, Entry};
use crate::world::{App, Slots};

use super::agenda::Happening;
use super::{Peer, Simulation, seconds_to_ms};

impl<'a> Simulation<'a> {
    pub(super) fn entry(&mut self, i: usize) {
        match &self.trace[i] {
            Entry::App(_) | Entry::Driver(_) | Entry::Drain { .. } => {
                let at = self.now + self.cluster.timings.commit_ms;
                self.agenda.at(at, Happening::ClientWrite(i));
            }
            Entry::LoseWorker { worker, down_s, .. } => {
                let id = WorkerId::from(worker.as_str());
                self.lose_worker(&id);
                if let Some(down) = down_s {
                    let at = self.now + seconds_to_ms(*down);
                    self.agenda.at(at, Happening::WorkerBack(id));
                }
            }
            Entry::LeaderChange { .. } => self.leader_lost(),
        }
    }

    /// Entry `i`'s client write commits, if a leader takes it; otherwise its client tries
    /// again once one may.
    pub(super) fn client_write(&mut self, i: usize) {
        if self.leader.is_none() {
            let at = self.now + self.cluster.timings.reconnect_ms;
            self.agenda.at(at, Happening::ClientWrite(i));
            return;
        }
        match &self.trace[i] {
            Entry::App(app) => {
                let Some(id) = self.submit_app(i, app, None) else {
                    self.refused(i);
                    return;
                };
                self.recorder.submitted(i, id.as_ref());
                self.attach(&id);
            }
            Entry::Driver(driver) => {
                let desc = DriverDescription {
                    name: driver.name.clone(),
                    queue: driver.queue.clone(),
                    resources: Resources::new(driver.cores, driver.memory_mb),
                    command: "simulated".into(),
                    args: vec![i.to_string()],
                    env: BTreeMap::new(),
                    supervise: driver.supervise,
                };
                let submit = SubmitDriver { desc };
                // A job driver starts beside room for its gang, or for its first executor.
                let gang = driver.app().map(|app| GangRequest {
                    min_executors: app.min_executors.unwrap_or(1),
                    executor_cores: app.executor_cores.unwrap_or(1),
                    executor_memory_mb: app.executor_memory_mb,
                    executor_resources: BTreeMap::new(),
                });
                let op = match gang {
                    Some(gang) => Op::SubmitGangDriver(SubmitGangDriver {
                        driver: submit,
                        gang,
                    }),
                    None => Op::SubmitDriver(submit),
                };
                let Ok(response) = self.write(op) else {
                    self.refused(i);
                    return;
                };
                if let muster_state::Outcome::DriverSubmitted { id } = &response.outcome {
                    self.recorder.submitted(i, &id.0);
                }
                self.step(Event::ClientCommitted {
                    effects: response.effects,
                });
            }
            Entry::Drain {
                worker,
                kill_after_s,
                ..
            } => {
                let kill_after_ms = kill_after_s.map(seconds_to_ms);
                let op = Op::DrainWorker(DrainWorker {
                    id: worker.as_str().into(),
                    kill_after_ms,
                });
                if let Ok(response) = self.write(op) {
                    self.step(Event::ClientCommitted {
                        effects: response.effects,
                    });
                    self.step(Event::WorkerDrained {
                        worker: worker.as_str().into(),
                        kill_after: kill_after_ms.map(Duration::from_millis),
                    });
                }
            }
            Entry::LoseWorker { .. } | Entry::LeaderChange { .. } => {}
        }
    }

    /// Submits `app`, of trace entry `i`, registered by `driver` in cluster mode: its id,
    /// or `None` if refused.
    pub(super) fn submit_app(
        &mut self,
        i: usize,
        app: &AppEntry,
        driver: Option<(WorkerId, DriverId, u64)>,
    ) -> Option<AppId> {
        let desc = AppDescription {
            name: app.name.clone(),
            user: app.user.clone(),
            queue: app.queue.clone(),
            cores_max: app.cores_max,
            executor_cores: app.executor_cores,
            executor_memory_mb: app.executor_memory_mb,
            executor_resources: BTreeMap::new(),
            command: "simulated".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
        };
        let submit = SubmitApp {
            desc,
            executor_limit: app.executor_limit,
        };
        let driver_id = driver.as_ref().map(|(_, id, _)| id.clone());
        let op = submit_app_op(submit, app.min_executors, driver_id, &self.state);
        let response = self.write(op).ok()?;
        let muster_state::Outcome::AppSubmitted { id } = response.outcome else {
            unreachable!("a submission's outcome names the app");
        };
        self.apps.insert(
            id.clone(),
            App {
                entry: i,
                link: None,
                task_ms: seconds_to_ms(app.task_s).max(1),
                tasks_left: app.tasks,
                executors: BTreeMap::new(),
                done: false,
                driver,
            },
        );
        Some(id)
    }

    /// Entry `i`'s submission was refused: it ends there.
    pub(super) fn refused(&mut self, i: usize) {
        self.recorder.refused(i);
        self.unfinished -= 1;
    }

    pub(super) fn attach(&mut self, id: &AppId) {
        let Some(app) = self.apps.get(id) else {
            return;
        };
        if self.leader.is_none() || !self.state.apps().contains_key(id) {
            return;
        }
        let believed_live = app.executors.keys().copied().collect();
        let done = app.done;
        let link = self.new_link(Peer::App(id.clone()));
        self.apps.get_mut(id).expect("checked").link = Some(link);
        self.step(Event::AppAttached {
            link,
            app: id.clone(),
            ui_address: String::new(),
            driver: None,
            user: None,
            believed_live,
        });
        if done {
            self.finish(id);
        }
    }

    pub(super) fn app_hears(&mut self, link: LinkId, message: ToApp) {
        let Some(Peer::App(id)) = self.links.get(&link).cloned() else {
            return;
        };
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        match message {
            ToApp::Registered(_)
            | ToApp::HeartbeatAck
            | ToApp::Draining(..)
            | ToApp::Preempted(..)
            | ToApp::ProfileRefused(..) => unreachable!("dropped when sent"),
            ToApp::Executor(executor) => match executor.state {
                ExecutorState::Launching => {}
                ExecutorState::Running => {
                    // A new leader tells a re-attached client of executors on a machine that
                    // failed and is not yet lost: they run no tasks.
                    let runs = self.workers.get(&executor.worker).is_some_and(|w| {
                        w.processes
                            .contains_key(&ProcessKey::Executor(id.clone(), executor.id))
                    });
                    if !runs || app.executors.contains_key(&executor.id) {
                        return;
                    }
                    let entry = app.entry;
                    app.executors.insert(
                        executor.id,
                        Slots {
                            serial: self.next_serial,
                            cores: executor.resources.cores,
                            running: VecDeque::new(),
                            preempted: false,
                        },
                    );
                    self.next_serial += 1;
                    self.recorder.started(entry, self.now);
                    self.run_tasks(&id);
                }
                ExecutorState::Killed
                | ExecutorState::Failed
                | ExecutorState::Lost
                | ExecutorState::Exited => {
                    let (lost, preempted) = app.remove(executor.id, self.now);
                    self.recorder.lost(lost, preempted);
                    self.run_tasks(&id);
                }
            },
            ToApp::Ended(_) => {
                // Its end is recorded as it commits.
                self.links.remove(&link);
                self.apps.remove(&id);
            }
        }
    }

    /// Starts app `id`'s waiting tasks on its free cores.
    pub(super) fn run_tasks(&mut self, id: &AppId) {
        let app = self.apps.get_mut(id).expect("a simulated app");
        let (task_ms, started) = (app.task_ms, app.fill(self.now));
        self.tasks_started(id, task_ms, started);
    }

    /// App `id` started tasks of `task_ms` each on `started` (executor and its serial): each
    /// ends that long from now.
    pub(super) fn tasks_started(
        &mut self,
        id: &AppId,
        task_ms: u64,
        started: impl IntoIterator<Item = (ExecutorId, u64)>,
    ) {
        let done_at = self.now + task_ms;
        for (executor, serial) in started {
            self.agenda
                .at(done_at, Happening::TaskDone(id.clone(), executor, serial));
        }
    }

    pub(super) fn task_done(&mut self, id: &AppId, executor: ExecutorId, serial: u64) {
        let Some(app) = self.apps.get_mut(id) else {
            return;
        };
        if !app.task_done(executor, serial) {
            return;
        }
        self.recorder.task_done(app.entry, app.task_ms);
        if app.all_run() && !app.done {
            app.done = true;
            let (entry, driver) = (app.entry, app.driver.clone());
            self.recorder.finished(entry, self.now);
            self.finish(id);
            if let Some((worker, driver, serial)) = driver {
                self.agenda
                    .at(self.now, Happening::DriverDone(worker, driver, serial));
            }
        } else if let Some(serial) = app.refill(executor, self.now) {
            let task_ms = app.task_ms;
            self.tasks_started(id, task_ms, [(executor, serial)]);
        }
    }

    /// App `id`'s client asks to finish, if it is attached (else when it attaches again).
    pub(super) fn finish(&mut self, id: &AppId) {
        if let Some(link) = self.apps.get(id).and_then(|app| app.link) {
            self.step(Event::AppRequest {
                link,
                request: AppRequest::Finish,
            });
        }
    }
}
