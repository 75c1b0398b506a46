//! Admission as a property: bursts of cluster-mode drivers (their applications gangs or
//! not) and client-mode applications (gangs or not) on random clusters, run pass after pass
//! in a small world where a launched driver's application registers one pass later and an
//! application that holds executors ends after a few passes, freeing them and its driver.
//! From every state some work can go on, so everything ends (room kept for a waiting gang
//! included); no gang ever holds part of its minimum; and room kept for a gang is one
//! waiting gang's, and never promised twice.
//!
//! Executors take one to three cores: once drivers take a core on each worker, the room
//! left can be too scattered for one executor, a fragmentation the driver share alone does
//! not prevent. A cluster-mode driver therefore says its executors' size, and starts only
//! beside room for the first of them (or for its gang), kept until its application registers.

use std::collections::BTreeMap;

use muster_core::model::{
    AppRequest, DriverRequest, DriversHold, GangRequest, HeldExecutor, PendingGang, Snapshot,
    Worker, WorkerSelection,
};
use muster_core::resources::Resources;
use proptest::prelude::*;

/// What an application asks for: executors of `executor_cores` and `memory_mb`, at most
/// `cores_max` cores of them, all `min` at once when it is a gang; it works for `passes`
/// passes once it holds any.
#[derive(Clone, Debug)]
struct AppSpec {
    executor_cores: u32,
    memory_mb: u64,
    cores_max: u32,
    min: Option<u32>,
    passes: u32,
}

impl AppSpec {
    /// The room its cluster-mode driver starts beside: its gang, or its first executor.
    fn first_room(&self) -> GangRequest {
        GangRequest {
            min_executors: self.min.unwrap_or(1),
            executor_cores: self.executor_cores,
            executor_memory_mb: self.memory_mb,
            executor_resources: BTreeMap::new(),
        }
    }

    fn request(&self, id: &str) -> AppRequest {
        AppRequest {
            cores_max: Some(self.cores_max),
            executor_cores: Some(self.executor_cores),
            executor_memory_mb: self.memory_mb,
            min_executors: self.min,
            ..AppRequest::new(id)
        }
    }
}

fn app_spec() -> impl Strategy<Value = AppSpec> {
    (
        1..4u32,
        prop::sample::select(vec![256u64, 512, 1024]),
        1..3u32,
        prop::option::weighted(0.5, 1..6u32),
        1..4u32,
    )
        .prop_map(
            |(executor_cores, memory_mb, executors_max, min, passes)| AppSpec {
                executor_cores,
                memory_mb,
                cores_max: executor_cores * executors_max,
                // A gang asks for no more than its cores_max allows.
                min: min.map(|m| m.min(executors_max)),
                passes,
            },
        )
}

/// A world: the cluster, and what runs and waits on it.
#[derive(Debug)]
struct World {
    workers: Vec<Worker>,
    driver_share: f64,
    /// Cluster-mode drivers that wait, with their applications.
    waiting: Vec<(String, AppSpec)>,
    /// Running drivers: their worker, their application, and whether it registered.
    running: BTreeMap<String, (usize, AppSpec, bool)>,
    /// Active applications: what they ask, the executors they hold (by worker), the passes of
    /// work left, and their driver.
    apps: Vec<(AppRequest, Vec<usize>, u32, Option<String>)>,
    /// Client-mode applications still to come, with the pass they arrive before, latest
    /// first.
    arriving: Vec<(u32, AppRequest, u32)>,
    /// Passes run so far.
    passes: u32,
}

/// Worlds run by the property.
const CASES: u32 = 1000;

const DRIVER_CORES: u32 = 1;
const DRIVER_MEMORY_MB: u64 = 256;

impl World {
    fn snapshot(&self) -> Snapshot {
        let mut used = vec![Resources::default(); self.workers.len()];
        let driver = Resources::new(DRIVER_CORES, DRIVER_MEMORY_MB);
        let mut hold = DriversHold::default();
        for (w, _, _) in self.running.values() {
            used[*w] = used[*w].checked_add(&driver).unwrap();
            hold = hold.with(&driver);
        }
        let mut apps = Vec::new();
        for (request, executors, _, _) in &self.apps {
            let mut request = request.clone();
            for &w in executors {
                let executor =
                    Resources::new(request.executor_cores.unwrap(), request.executor_memory_mb);
                used[w] = used[w].checked_add(&executor).unwrap();
                request.executors.push(HeldExecutor {
                    id: None,
                    worker: self.workers[w].id.clone(),
                    resources: executor,
                    profile: 0,
                });
            }
            apps.push(request);
        }
        let mut snapshot = Snapshot {
            workers: self
                .workers
                .iter()
                .zip(used)
                .map(|(w, used)| Worker { used, ..w.clone() })
                .collect(),
            running_drivers: self.running.len() as u32,
            drivers_hold: if self.running.is_empty() {
                BTreeMap::new()
            } else {
                BTreeMap::from([("default".into(), hold)])
            },
            drivers: self
                .waiting
                .iter()
                .map(|(id, spec)| DriverRequest {
                    id: id.as_str().into(),
                    need: driver.clone(),
                    queue: "default".into(),
                    gang: Some(spec.first_room()),
                    priority: 0,
                    spark: false,
                })
                .collect(),
            // Room beside a driver until its application registers, then, for one that is
            // no gang, from drivers until it holds an executor.
            pending_gangs: self
                .running
                .iter()
                .filter(|(driver, (_, spec, registered))| {
                    !registered || (spec.min.is_none() && !self.holds_executors(driver))
                })
                .map(|(_, (_, spec, registered))| PendingGang {
                    queue: "default".into(),
                    gang: spec.first_room(),
                    registered: *registered,
                })
                .collect(),
            apps: apps.into(),
            ..Snapshot::default()
        };
        snapshot.config.driver_share = self.driver_share;
        snapshot.config.worker_selection = WorkerSelection::WorkerId;
        snapshot
    }

    /// Whether the application of running driver `driver` holds executors.
    fn holds_executors(&self, driver: &str) -> bool {
        self.apps
            .iter()
            .any(|(_, executors, _, of)| of.as_deref() == Some(driver) && !executors.is_empty())
    }

    /// One pass, then a pass's worth of time: applications registered and worked.
    fn step(&mut self) -> Result<(), TestCaseError> {
        while self
            .arriving
            .last()
            .is_some_and(|(at, ..)| *at <= self.passes)
        {
            let (_, request, passes) = self.arriving.pop().unwrap();
            self.apps.push((request, Vec::new(), passes, None));
        }
        self.passes += 1;
        let snapshot = self.snapshot();
        let plan = muster_core::schedule(&snapshot).unwrap();
        let worker_of = |id: &muster_core::ids::WorkerId| {
            self.workers.iter().position(|w| &w.id == id).unwrap()
        };
        // Room kept for a waiting gang: one gang's, that holds no executor and got none, and
        // on no worker beyond what is left after everything placed.
        if let Some(first) = plan.reserved.first() {
            prop_assert!(plan.reserved.iter().all(|r| r.app == first.app));
            let gang = snapshot.apps.iter().find(|a| a.id == first.app).unwrap();
            prop_assert!(gang.min_executors.is_some() && gang.executors.is_empty());
            prop_assert!(!plan.executors.iter().any(|g| g.app == first.app));
        }
        for worker in snapshot.workers.iter() {
            let mut taken = worker.used.clone();
            let launched = plan.drivers.iter().filter(|d| d.worker == worker.id);
            for _ in launched {
                taken = taken
                    .checked_add(&Resources::new(DRIVER_CORES, DRIVER_MEMORY_MB))
                    .unwrap();
            }
            for grant in plan.executors.iter().filter(|g| g.worker == worker.id) {
                taken = taken
                    .checked_add(&grant.resources.clone().times(grant.count))
                    .unwrap();
            }
            for reserved in plan.reserved.iter().filter(|r| r.worker == worker.id) {
                taken = taken.checked_add(&reserved.resources).unwrap();
            }
            prop_assert!(
                worker.capacity.fits(&taken).is_ok(),
                "{} promised {taken:?} of {:?}",
                worker.id,
                worker.capacity
            );
        }
        // Applications of drivers launched before this pass register now.
        for (driver, (_, spec, registered)) in &mut self.running {
            if !*registered {
                *registered = true;
                let request = spec.request(&format!("app-of-{driver}"));
                self.apps
                    .push((request, Vec::new(), spec.passes, Some(driver.clone())));
            }
        }
        for launch in &plan.drivers {
            let i = self
                .waiting
                .iter()
                .position(|(id, _)| *id == launch.driver.0)
                .unwrap();
            let (id, spec) = self.waiting.remove(i);
            self.running
                .insert(id, (worker_of(&launch.worker), spec, false));
        }
        for grant in &plan.executors {
            let w = worker_of(&grant.worker);
            let (request, executors, _, _) = self
                .apps
                .iter_mut()
                .find(|(request, ..)| request.id == grant.app)
                .unwrap();
            let held_none = executors.is_empty();
            executors.extend(std::iter::repeat_n(w, grant.count as usize));
            if let Some(min) = request.min_executors.filter(|_| held_none) {
                let granted: u32 = plan
                    .executors
                    .iter()
                    .filter(|g| g.app == request.id)
                    .map(|g| g.count)
                    .sum();
                prop_assert!(
                    granted >= min,
                    "{} granted {granted} of its {min}",
                    request.id
                );
            }
        }
        // Applications that hold executors work; those done end with their drivers.
        let mut ended = Vec::new();
        self.apps.retain_mut(|(_, executors, left, driver)| {
            if executors.is_empty() {
                return true;
            }
            *left -= 1;
            if *left > 0 {
                return true;
            }
            ended.extend(driver.clone());
            false
        });
        for driver in ended {
            self.running.remove(&driver);
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.waiting.is_empty()
            && self.running.is_empty()
            && self.apps.is_empty()
            && self.arriving.is_empty()
    }
}

fn world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(
            (2..9u32, prop::sample::select(vec![2048u64, 4096, 8192])),
            1..4,
        ),
        // A share of 1 is Spark's own behaviour, which a burst wedges (the `driver-share`
        // script shows it).
        prop::sample::select(vec![0.25, 0.5]),
        // A burst of one job's drivers, as a workflow scheduler sends it, or of many jobs'.
        prop_oneof![
            (app_spec(), 1..12usize).prop_map(|(spec, n)| vec![spec; n]),
            prop::collection::vec(app_spec(), 0..12),
        ],
        // Client-mode applications, each arriving before one of the first passes: a gang
        // that comes while drivers hold room must not wedge them.
        prop::collection::vec((app_spec(), 0..4u32), 0..4),
    )
        .prop_map(|(workers, driver_share, drivers, clients)| {
            let workers: Vec<Worker> = workers
                .into_iter()
                .enumerate()
                .map(|(i, (cores, memory_mb))| {
                    crate::support::worker(&format!("w{i}"), cores, memory_mb)
                })
                .collect();
            World {
                workers,
                driver_share,
                waiting: drivers
                    .into_iter()
                    .enumerate()
                    .map(|(i, spec)| (format!("driver-{i:02}"), spec))
                    .collect(),
                running: BTreeMap::new(),
                apps: Vec::new(),
                arriving: {
                    let mut arriving: Vec<(u32, AppRequest, u32)> = clients
                        .into_iter()
                        .enumerate()
                        .map(|(i, (spec, at))| {
                            (at, spec.request(&format!("client-{i}")), spec.passes)
                        })
                        .collect();
                    // Popped from the end: the earliest first, and of those arriving
                    // together, the first submitted (the sort is stable).
                    arriving.reverse();
                    arriving.sort_by_key(|(at, ..)| std::cmp::Reverse(*at));
                    arriving
                },
                passes: 0,
            }
        })
}

/// Whether every driver and application of `world` could run alone on the empty cluster:
/// its gang's minimum (or one executor) fits beside a driver on any worker.
fn each_fits_alone(world: &World) -> bool {
    let fits = |cores: u32, memory_mb: u64, min: Option<u32>| {
        let room: u64 = world
            .workers
            .iter()
            .map(|w| {
                let by_cores = u64::from((w.capacity.cores - DRIVER_CORES) / cores);
                by_cores.min((w.capacity.memory_mb - DRIVER_MEMORY_MB) / memory_mb)
            })
            .sum();
        room >= u64::from(min.unwrap_or(1))
    };
    world
        .waiting
        .iter()
        .all(|(_, spec)| fits(spec.executor_cores, spec.memory_mb, spec.min))
        && world.arriving.iter().all(|(_, request, _)| {
            fits(
                request.executor_cores.unwrap(),
                request.executor_memory_mb,
                request.min_executors,
            )
        })
}

proptest! {
    // Random worlds often hold a gang no worker set could ever hold; those are skipped.
    #![proptest_config(ProptestConfig {
        max_global_rejects: 1 << 20,
        ..ProptestConfig::with_cases(CASES)
    })]

    #[test]
    fn bursts_of_drivers_and_gangs_all_end_and_no_gang_holds_part_of_its_minimum(
        mut world in world(),
    ) {
        prop_assume!(each_fits_alone(&world));
        for _ in 0..400 {
            if world.done() {
                break;
            }
            world.step()?;
        }
        prop_assert!(world.done(), "wedged: {world:?}");
    }
}
