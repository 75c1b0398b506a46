//! Simulated workers: registering and heartbeating on their links, launching and stopping
//! processes as the leader tells them and reporting their ends, supervised drivers started
//! again after their back-off, and workers lost and coming back.

use std::time::Duration;

use muster_core::ids::{DriverId, WorkerId};
use muster_core::restarts::Backoff;
use muster_leader::{Event, LinkId, ProcessKey, Registration, ToWorker, Update};
use muster_state::model::{DriverState, ExecutorState};

use crate::trace::{DriverEntry, Entry};
use crate::world::{Process, driver_entry};

use super::agenda::{Happening, Lane};
use super::{Peer, Simulation, millis, seconds_to_ms, splitmix};

impl<'a> Simulation<'a> {
    pub(super) fn register(&mut self, id: &WorkerId) {
        let Some(worker) = self.workers.get(id) else {
            return;
        };
        if !worker.up || self.leader.is_none() {
            return;
        }
        if let Some(old) = worker.link {
            self.links.remove(&old);
            self.step(Event::LinkClosed { link: old });
        }
        let link = self.new_link(Peer::Worker(id.clone()));
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        worker.link = Some(link);
        let registration = Registration {
            worker: worker.registration.clone(),
            addresses: Default::default(),
            running: worker.running(self.now),
            reports: worker.unacked.values().cloned().collect(),
            build: None,
            shuffle_service: None,
            spark_home: None,
        };
        self.step(Event::WorkerAttached { link, registration });
    }

    pub(super) fn heartbeat(&mut self, id: &WorkerId, failures: u64) {
        let Some(worker) = self.workers.get(id) else {
            return;
        };
        if !worker.up || worker.failures != failures {
            return;
        }
        let at = self.now + millis(self.cluster.heartbeat()).max(1);
        self.agenda.at_in_order(
            Lane::Heartbeats,
            at,
            Happening::Heartbeat(id.clone(), failures),
        );
        if let Some(link) = worker.link {
            self.step(Event::WorkerHeartbeat {
                link,
                usage: Vec::new(),
                shuffle_service: None,
                apps_with_data: Vec::new(),
            });
        }
    }

    pub(super) fn lose_worker(&mut self, id: &WorkerId) {
        let Some(worker) = self.workers.get_mut(id) else {
            return;
        };
        if !worker.up {
            return;
        }
        self.recorder.worker_lost();
        let link = worker.link;
        for key in worker.fail() {
            self.placed.remove(&key);
            // Its executors stop running their tasks with it.
            if let ProcessKey::Executor(app_id, executor) = key
                && let Some(app) = self.apps.get_mut(&app_id)
            {
                let (lost, _) = app.remove(executor, self.now);
                self.recorder.lost(lost, false);
                self.run_tasks(&app_id);
            }
        }
        if let Some(link) = link {
            self.links.remove(&link);
            self.step(Event::LinkClosed { link });
        }
    }

    /// Worker `id` reports `update`, now or when it next registers.
    pub(super) fn report(&mut self, id: &WorkerId, update: Update) {
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        let report = worker.report(update);
        if let Some(link) = worker.link {
            self.step(Event::WorkerReport { link, report });
        }
    }

    pub(super) fn worker_hears(&mut self, link: LinkId, message: ToWorker) {
        let Some(Peer::Worker(id)) = self.links.get(&link).cloned() else {
            return;
        };
        let worker = self.workers.get_mut(&id).expect("a simulated worker");
        match message {
            ToWorker::Registered | ToWorker::HeartbeatAck | ToWorker::AppsEnded(_) => {
                unreachable!("dropped when sent")
            }
            ToWorker::Acknowledged(seqs) => {
                for seq in seqs {
                    worker.unacked.remove(&seq);
                }
            }
            ToWorker::LaunchExecutor(app, executor) => {
                self.launch(&id, ProcessKey::Executor(app, executor));
            }
            ToWorker::LaunchDriver(driver) => self.launch(&id, ProcessKey::Driver(driver)),
            ToWorker::KillExecutor(app, executor, _) => {
                self.stop(&id, ProcessKey::Executor(app, executor));
            }
            ToWorker::KillDriver(driver) => self.stop(&id, ProcessKey::Driver(driver)),
        }
    }

    pub(super) fn launch(&mut self, id: &WorkerId, key: ProcessKey) {
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        if worker.processes.contains_key(&key) {
            return;
        }
        let placed = match &key {
            ProcessKey::Executor(app, executor) => self
                .state
                .apps()
                .get(app)
                .and_then(|a| a.executors.get(executor))
                .map(|e| &e.resources),
            ProcessKey::Driver(driver) => {
                self.state.drivers().get(driver).map(|d| &d.desc.resources)
            }
        };
        let holds = placed.map_or((0, 0), |r| (r.cores, r.memory_mb));
        // What its worker's processes hold, those told to stop and not yet ended included,
        // with it: never more than the worker has.
        let (cores, memory_mb) = worker
            .processes
            .values()
            .fold(holds, |(c, m), p| (c + p.holds.0, m + p.holds.1));
        let has = &worker.registration.resources;
        if cores > has.cores || memory_mb > has.memory_mb {
            self.recorder.overcommitted();
        }
        let process = Process {
            pid: self.next_pid,
            serial: self.next_serial,
            stopping: false,
            holds,
            started_ms: self.now,
            restarts: 0,
            starts_again_ms: None,
            backoff: Backoff::default(),
        };
        self.next_pid += 1;
        self.next_serial += 1;
        worker.processes.insert(key.clone(), process);
        if let Some(other) = self.placed.insert(key.clone(), id.clone())
            && other != *id
        {
            self.recorder.ran_twice();
        }
        let at = self.now + self.spread(self.cluster.timings.launch_ms);
        self.agenda
            .at(at, Happening::Started(id.clone(), key, process.serial));
    }

    pub(super) fn stop(&mut self, id: &WorkerId, key: ProcessKey) {
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        let Some(process) = worker.processes.get_mut(&key) else {
            return;
        };
        if let (Some(_), ProcessKey::Driver(driver)) = (process.starts_again_ms, &key) {
            // A supervised driver waiting to start again has no process: it ends at once.
            let update = Update::Driver {
                driver: driver.clone(),
                state: DriverState::Killed,
                exit_code: None,
                pid: 0,
                restarts: None,
            };
            worker.processes.remove(&key);
            self.placed.remove(&key);
            self.report(id, update);
            return;
        }
        if !process.stopping {
            process.stopping = true;
            let at = self.now + self.cluster.timings.stop_ms;
            self.agenda
                .at(at, Happening::Stopped(id.clone(), key, process.serial));
        }
    }

    /// `ms`, spread by a quarter either way: processes do not all start equally fast.
    pub(super) fn spread(&mut self, ms: u64) -> u64 {
        self.random = splitmix(self.random);
        let quarter = ms / 4;
        ms - quarter + self.random % (2 * quarter + 1)
    }

    /// A launched process started (unless it was told to stop, or its worker failed).
    pub(super) fn started(&mut self, id: &WorkerId, key: ProcessKey, serial: u64) {
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        let Some(process) = worker.live_process(&key, serial) else {
            return;
        };
        process.started_ms = self.now;
        let process = *process;
        let update = match &key {
            ProcessKey::Executor(app, executor) => Update::Executor {
                app: app.clone(),
                executor: *executor,
                state: ExecutorState::Running,
                exit_code: None,
                pid: process.pid,
            },
            ProcessKey::Driver(driver) => {
                if let Some((entry, spec)) = self.driver_spec(driver) {
                    let at = self.now + seconds_to_ms(spec.duration_s);
                    self.agenda.at(
                        at,
                        Happening::DriverDone(id.clone(), driver.clone(), serial),
                    );
                    self.recorder.started(entry, self.now);
                }
                Update::Driver {
                    driver: driver.clone(),
                    state: DriverState::Running,
                    exit_code: None,
                    pid: process.pid,
                    restarts: None,
                }
            }
        };
        self.report(id, update);
    }

    /// A process told to stop ended.
    pub(super) fn stopped(&mut self, id: &WorkerId, key: &ProcessKey, serial: u64) {
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        if worker.processes.get(key).is_none_or(|p| p.serial != serial) {
            return;
        }
        let process = worker.processes.remove(key).expect("checked");
        self.placed.remove(key);
        let update = match key {
            ProcessKey::Executor(app, executor) => Update::Executor {
                app: app.clone(),
                executor: *executor,
                state: ExecutorState::Killed,
                exit_code: None,
                pid: process.pid,
            },
            ProcessKey::Driver(driver) => Update::Driver {
                driver: driver.clone(),
                state: DriverState::Killed,
                exit_code: None,
                pid: process.pid,
                restarts: None,
            },
        };
        self.report(id, update);
    }

    /// The trace entry of driver `id` while the log has it, with its place in the trace.
    pub(super) fn driver_spec(&self, id: &DriverId) -> Option<(usize, &'a DriverEntry)> {
        let entry = driver_entry(&self.state.drivers().get(id)?.desc.args)?;
        match &self.trace[entry] {
            Entry::Driver(spec) => Some((entry, spec)),
            _ => None,
        }
    }

    /// A driver's run is done: it finishes, or, while its trace entry has failures left, it
    /// fails, and a supervised one waits its back-off to start again as a real worker has it.
    pub(super) fn driver_done(&mut self, id: &WorkerId, driver: DriverId, serial: u64) {
        let spec = self.driver_spec(&driver);
        // A driver that runs an application registers it first, and ends once it has.
        let mut refused = false;
        if let Some((entry, app)) = spec.and_then(|(entry, spec)| Some((entry, spec.app()?)))
            && !self.driver_apps.contains(&driver)
        {
            let runs = self.workers[id]
                .processes
                .get(&ProcessKey::Driver(driver.clone()));
            if runs.is_none_or(|process| process.serial != serial) {
                return;
            }
            if self.leader.is_none() {
                let at = self.now + self.cluster.timings.reconnect_ms;
                self.agenda
                    .at(at, Happening::DriverDone(id.clone(), driver, serial));
                return;
            }
            self.driver_apps.insert(driver.clone());
            let registered = (id.clone(), driver.clone(), serial);
            match self.submit_app(entry, &app, Some(registered)) {
                Some(app) => {
                    self.attach(&app);
                    return;
                }
                // Its registration was refused: it fails, as Spark's driver does.
                None => refused = true,
            }
        }
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        let key = ProcessKey::Driver(driver.clone());
        let Some(process) = worker.live_process(&key, serial) else {
            return;
        };
        let fails = match spec {
            Some(_) if refused => Some(false),
            Some((entry, spec)) => {
                let failed = self.failed_runs.entry(entry).or_default();
                let fails = *failed < spec.failures;
                if fails {
                    *failed += 1;
                    self.recorder.failed_run(entry);
                }
                fails.then_some(spec.supervise)
            }
            None => None,
        };
        let update = match fails {
            Some(true) => {
                let ran = Duration::from_millis(self.now - process.started_ms);
                let wait = process.backoff.after_failure(ran);
                process.restarts += 1;
                let again = self
                    .now
                    .saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
                process.starts_again_ms = Some(again);
                self.agenda.at(
                    again,
                    Happening::DriverRestart(id.clone(), driver.clone(), serial),
                );
                Update::Driver {
                    driver,
                    state: DriverState::Running,
                    exit_code: None,
                    pid: 0,
                    restarts: process.reported_restarts(self.now),
                }
            }
            ended => {
                let process = worker.processes.remove(&key).expect("checked");
                self.placed.remove(&key);
                let (state, code) = match ended {
                    Some(_) => (DriverState::Failed, 1),
                    None => (DriverState::Finished, 0),
                };
                Update::Driver {
                    driver,
                    state,
                    exit_code: Some(code),
                    pid: process.pid,
                    restarts: None,
                }
            }
        };
        self.report(id, update);
    }

    /// A supervised driver's worker starts it again (unless it was told to stop meanwhile,
    /// or its worker failed): a new process, running for the driver's duration again.
    pub(super) fn driver_restart(&mut self, id: &WorkerId, driver: DriverId, serial: u64) {
        // The log may have ended the driver while its kill is still on the way.
        let Some((_, spec)) = self.driver_spec(&driver) else {
            return;
        };
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        let key = ProcessKey::Driver(driver.clone());
        let Some(process) = worker.live_process(&key, serial) else {
            return;
        };
        process.pid = self.next_pid;
        self.next_pid += 1;
        process.started_ms = self.now;
        process.starts_again_ms = None;
        let (pid, restarts) = (process.pid, process.reported_restarts(self.now));
        self.agenda.at(
            self.now + seconds_to_ms(spec.duration_s),
            Happening::DriverDone(id.clone(), driver.clone(), serial),
        );
        let update = Update::Driver {
            driver,
            state: DriverState::Running,
            exit_code: None,
            pid,
            restarts,
        };
        self.report(id, update);
    }
}
