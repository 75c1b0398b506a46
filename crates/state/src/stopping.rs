//! What a process stopped at the masters' word keeps until its worker reports its end.
//!
//! A process the masters stop (its application ended or let it go, its driver was killed, a
//! preemption chose it) may run on through its kill grace, still using what it was given.
//! So that no worker is promised more than it has even then, what it held stays taken on its
//! worker until the worker reports its end, as YARN and Kubernetes do and Spark's Master
//! does not: from log format 3 its custom resources and their addresses ([`Stopping`]), from
//! log format 4 its cores and memory too ([`StoppingRoom`]). A preemption's victim keeps
//! only what the room kept for the work that preempted it does not already hold. A worker
//! that is lost or leaves takes it all with it.

use std::collections::BTreeMap;

use muster_core::ids::{AppId, DriverId, ExecutorId, WorkerId};
use muster_core::model::WorkerState;
use muster_core::resources::{ResourceAddresses, ResourceAmounts, Resources};
use serde::{Deserialize, Serialize};

use crate::ClusterState;
use crate::addresses::NONE;
use crate::invariants::{InvariantViolation, violated};
use crate::version::LogFormat;

/// A process the masters stopped, whose end its worker has not reported yet.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Stopped {
    /// Executor `.1` of application `.0`.
    Executor(AppId, ExecutorId),
    /// A driver.
    Driver(DriverId),
}

/// The custom resources a stopped process still holds on its worker until its end is
/// reported (from log format 3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Stopping {
    /// Its worker.
    pub(crate) worker: WorkerId,
    /// Its custom resources, still counted as used there.
    pub(crate) resources: ResourceAmounts,
    /// Their addresses, still its own.
    pub(crate) addresses: ResourceAddresses,
}

/// The cores and memory a stopped process still holds on its worker until its end is
/// reported (from log format 4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoppingRoom {
    /// Its worker.
    pub(crate) worker: WorkerId,
    /// Its cores and memory (no custom resources: [`Stopping`] keeps those), still counted
    /// as used there.
    pub(crate) resources: Resources,
}

impl ClusterState {
    /// The processes stopped whose end their workers have not reported: each with its worker
    /// and the addresses it keeps there.
    pub fn stopping(&self) -> impl Iterator<Item = (&Stopped, &WorkerId, &ResourceAddresses)> {
        let mut stopping: BTreeMap<&Stopped, (&WorkerId, &ResourceAddresses)> = self
            .stopping_room
            .iter()
            .map(|(process, room)| (process, (&room.worker, NONE)))
            .collect();
        for (process, kept) in &self.stopping {
            stopping.insert(process, (&kept.worker, &kept.addresses));
        }
        stopping
            .into_iter()
            .map(|(process, (worker, addresses))| (process, worker, addresses))
    }

    /// The processes stopped on worker `id` whose end it has not reported.
    pub fn stopping_on<'a>(&'a self, id: &'a WorkerId) -> impl Iterator<Item = &'a Stopped> {
        self.stopping()
            .filter(move |(_, worker, _)| *worker == id)
            .map(|(process, _, _)| process)
    }

    /// `process`, just ended at the masters' word on `worker` where it held `resources`
    /// (already released there), keeps them, and the `addresses` of its custom resources,
    /// until its end is reported: its custom resources from log format 3 on, its cores and
    /// memory from log format 4 on (before, nothing is kept, as older releases did).
    pub(crate) fn keep_until_ended(
        &mut self,
        process: Stopped,
        worker: &WorkerId,
        resources: &Resources,
        addresses: ResourceAddresses,
    ) {
        let room = Resources {
            custom: ResourceAmounts::new(),
            ..resources.clone()
        };
        self.keep_room_until_ended(process.clone(), worker, room);
        let custom = resources.custom.clone();
        if custom.is_empty() || self.log_format() < LogFormat::THIRD {
            return;
        }
        let Some(on) = self.workers.get_mut(worker) else {
            return;
        };
        crate::state::take(on, &Resources::default().with_custom(custom.clone()));
        self.show_worker_to_passes(worker);
        let stopping = Stopping {
            worker: worker.clone(),
            resources: custom,
            addresses,
        };
        self.stopping.insert(process, stopping);
    }

    /// `process`, just ended at the masters' word on `worker`, keeps `room` there (cores and
    /// memory, free on it now) until its end is reported, from log format 4 on.
    pub(crate) fn keep_room_until_ended(
        &mut self,
        process: Stopped,
        worker: &WorkerId,
        room: Resources,
    ) {
        debug_assert!(
            room.custom.is_empty(),
            "custom resources are kept as Stopping"
        );
        if room == Resources::default() || self.log_format() < LogFormat::FOURTH {
            return;
        }
        let Some(on) = self.workers.get_mut(worker) else {
            return;
        };
        crate::state::take(on, &room);
        self.show_worker_to_passes(worker);
        let room = StoppingRoom {
            worker: worker.clone(),
            resources: room,
        };
        self.stopping_room.insert(process, room);
    }

    /// What each stopped process keeps taken on its worker.
    pub(crate) fn kept_by_stopping(&self) -> impl Iterator<Item = (&WorkerId, Resources)> {
        let custom = self.stopping.values().map(|stopping| {
            let kept = Resources::default().with_custom(stopping.resources.clone());
            (&stopping.worker, kept)
        });
        let room = self
            .stopping_room
            .values()
            .map(|room| (&room.worker, room.resources.clone()));
        custom.chain(room)
    }

    /// `process`, stopped earlier, has ended: what it kept is free. Whether it kept anything.
    pub(crate) fn stopped_process_ended(&mut self, process: &Stopped) -> bool {
        let custom = self.stopping.remove(process).map(|stopping| {
            let kept = Resources::default().with_custom(stopping.resources);
            (stopping.worker, kept)
        });
        let room = self
            .stopping_room
            .remove(process)
            .map(|room| (room.worker, room.resources));
        let mut kept_any = false;
        for (worker, kept) in custom.into_iter().chain(room) {
            kept_any = true;
            if let Some(on) = self.workers.get_mut(&worker) {
                crate::state::release(on, &kept);
                self.show_worker_to_passes(&worker);
            }
        }
        kept_any
    }

    /// The stopped processes' invariant: each is no longer live, and on an ALIVE worker.
    pub(crate) fn check_stopping(&self) -> Result<(), InvariantViolation> {
        for (process, worker, _) in self.stopping() {
            let alive = self
                .workers
                .get(worker)
                .is_some_and(|w| w.state == WorkerState::Alive);
            let live = match process {
                Stopped::Executor(app, id) => self
                    .apps
                    .get(app)
                    .is_some_and(|a| a.executors.contains_key(id)),
                Stopped::Driver(id) => self.drivers.contains_key(id),
            };
            if !alive || live {
                return violated(format!(
                    "{process:?} is kept as stopping on {worker}, but {}",
                    if live {
                        "it is live"
                    } else {
                        "that is not ALIVE"
                    }
                ));
            }
        }
        Ok(())
    }

    /// Worker `id` stops running work (lost or decommissioned): what its stopped processes
    /// kept is free.
    pub(crate) fn forget_stopping_on(&mut self, id: &WorkerId) {
        let processes: Vec<Stopped> = self.stopping_on(id).cloned().collect();
        for process in processes {
            self.stopped_process_ended(&process);
        }
    }
}
