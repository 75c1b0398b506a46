//! Placement scripts (`tests/placement/scripts`): a cluster snapshot built command by
//! command, and scheduling passes over it. Every pass runs both the indexed placer and the
//! literal port of Spark's loop and fails if their plans differ. Expectations come from
//! Spark's own sources and tests and the queue design, not from runs.
//!
//! Commands:
//!
//! * `config [spread_out_apps=B] [spread_out_drivers=B] [worker_selection=POLICY]
//!   [default_cores=N] [max_drivers=N] [driver_share=F] [seed=N]`;
//! * `queue NAME [prior=B] [threshold=F] [max_capacity=F] [capacity=F] [driver_share=F]
//!   [ordering=fifo|fair|drf] [weights=USER:W,...] [user_limit=F]`, its name a path
//!   (`analytics.etl`) under a parent listed before;
//! * `worker ID cores=N mem=MB [used_cores=N] [used_mem=MB] [state=DEAD|DECOMMISSIONED]
//!   [prior=B] [NAME=AMOUNT]...` (custom resources), replacing a worker of the same id;
//!   `workers N cores=N mem=MB` adds `wK`, `wK+1`, ... after the K workers there are;
//! * `driver ID [cores=1] [mem=1024] [queue=Q] [gang=N] [gang_cores=1] [gang_mem=1024]
//!   [NAME=AMOUNT]...`, `gang` the minimum of its application's gang, of executors of
//!   `gang_cores` and `gang_mem`; `pending_gang [queue=Q] min=N cores=N mem=MB`, the gang of
//!   a running driver whose application has not started;
//! * `app ID [queue=Q] [cores_max=N] [executor_cores=N] [mem=1024] [limit=N] [min=N]
//!   [user=U] [priority=N] [NAME=AMOUNT]...`, replacing an app of the same id (`min`: its gang's minimum); `profile APP ID
//!   [executor_cores=N] [mem=1024] limit=N [NAME=AMOUNT]...` adds a resource profile to it;
//!   `held APP WORKER cores=N mem=MB [profile=N]` gives it an executor it already holds
//!   (the worker's usage is set separately);
//! * `running_drivers N`; `drivers_hold QUEUE cores=N mem=MB`, what the queue's running
//!   drivers hold (the workers' usage is set separately); `clear` (no drivers and no
//!   apps), `reset` (an empty cluster);
//! * `preempt [queue=Q] [capacities=B] [fraction=F]` prints which executors the waiting work
//!   of prior queue `Q` (or, with `capacities`, of ordinary queues below their guarantee)
//!   would have stopped (`stop APP/EXECUTOR on WORKER`), held executors numbered in the
//!   order given, and the room reserved for it;
//! * `schedule [spread_out=B]` prints `launch DRIVER on WORKER` per driver, `grant APP:
//!   WORKER=COUNTxCORES ...` per app (workers in id order; `grant APP profile N: ...` for
//!   a resource profile's executors), `wait ID: REASON`, and `reserve APP on WORKER:
//!   RESOURCES` for the room kept for a waiting gang.

use muster_core::ids::QueueName;
use muster_core::model::{
    AppRequest, DriverRequest, DriversHold, GangRequest, HeldExecutor, OrderingPolicy, PendingGang,
    ProfileRequest, QueueConfig, Snapshot, Worker, WorkerSelection, WorkerState,
};
use muster_core::preempt::PreemptionSettings;
use muster_core::resources::{ResourceAmounts, Resources};
use muster_core::{Plan, spark_reference};
use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;

use crate::support::worker;

fn run_script(path: &std::path::Path) {
    goldenscript::run(&mut Runner::default(), path).expect("goldenscript failed");
}

test_each_file::test_each_path! { in "crates/core/tests/placement/scripts" as placement => run_script }

#[derive(goldenscript::Command)]
enum Command {
    Config {
        #[arg(key)]
        spread_out_apps: Option<bool>,
        #[arg(key)]
        spread_out_drivers: Option<bool>,
        #[arg(key)]
        worker_selection: Option<String>,
        #[arg(key)]
        default_cores: Option<u32>,
        #[arg(key)]
        max_drivers: Option<u32>,
        #[arg(key)]
        driver_share: Option<f64>,
        #[arg(key)]
        seed: Option<u64>,
    },
    Queue {
        name: String,
        #[arg(key)]
        prior: Option<bool>,
        #[arg(key)]
        threshold: Option<f64>,
        #[arg(key)]
        max_capacity: Option<f64>,
        #[arg(key)]
        capacity: Option<f64>,
        #[arg(key)]
        driver_share: Option<f64>,
        #[arg(key)]
        ordering: Option<String>,
        /// Users' weights under `drf`, as `USER:WEIGHT,...`.
        #[arg(key)]
        weights: Option<String>,
        #[arg(key)]
        user_limit: Option<f64>,
    },
    Worker {
        id: String,
        #[arg(key)]
        cores: u32,
        #[arg(key)]
        mem: u64,
        #[arg(key)]
        used_cores: Option<u32>,
        #[arg(key)]
        used_mem: Option<u64>,
        #[arg(key)]
        state: Option<String>,
        #[arg(key)]
        prior: Option<bool>,
        #[arg(key)]
        without_spark: Option<bool>,
        #[arg(key, many, optional)]
        custom: ResourceAmounts,
    },
    Workers {
        count: usize,
        #[arg(key)]
        cores: u32,
        #[arg(key)]
        mem: u64,
    },
    Driver {
        id: String,
        #[arg(key)]
        cores: Option<u32>,
        #[arg(key)]
        mem: Option<u64>,
        #[arg(key)]
        queue: Option<String>,
        #[arg(key)]
        gang: Option<u32>,
        #[arg(key)]
        gang_cores: Option<u32>,
        #[arg(key)]
        gang_mem: Option<u64>,
        #[arg(key)]
        priority: Option<i32>,
        #[arg(key)]
        spark: Option<bool>,
        #[arg(key, many, optional)]
        custom: ResourceAmounts,
    },
    PendingGang {
        #[arg(key)]
        queue: Option<String>,
        #[arg(key)]
        min: u32,
        #[arg(key)]
        cores: u32,
        #[arg(key)]
        mem: u64,
        #[arg(key)]
        registered: Option<bool>,
    },
    App {
        id: String,
        #[arg(key)]
        queue: Option<String>,
        #[arg(key)]
        cores_max: Option<u32>,
        #[arg(key)]
        executor_cores: Option<u32>,
        #[arg(key)]
        mem: Option<u64>,
        #[arg(key)]
        limit: Option<u32>,
        #[arg(key)]
        min: Option<u32>,
        #[arg(key)]
        user: Option<String>,
        #[arg(key)]
        priority: Option<i32>,
        #[arg(key, many, optional)]
        custom: ResourceAmounts,
    },
    /// Executors of another size `app` asks for: its resource profile `id`.
    Profile {
        app: String,
        id: u32,
        #[arg(key)]
        executor_cores: Option<u32>,
        #[arg(key)]
        mem: Option<u64>,
        #[arg(key)]
        limit: u32,
        #[arg(key, many, optional)]
        custom: ResourceAmounts,
    },
    /// An executor `app` holds on `worker`; the custom resources it names (`gpu=1`) are
    /// added to the worker's usage, which has no key of its own for them.
    Held {
        app: String,
        worker: String,
        #[arg(key)]
        cores: u32,
        #[arg(key)]
        mem: u64,
        #[arg(key)]
        profile: Option<u32>,
        #[arg(key, many, optional)]
        custom: ResourceAmounts,
    },
    RunningDrivers(u32),
    DriversHold {
        queue: String,
        #[arg(key)]
        cores: u64,
        #[arg(key)]
        mem: u64,
    },
    Clear,
    Reset,
    Schedule {
        #[arg(key)]
        spread_out: Option<bool>,
    },
    Preempt {
        #[arg(key)]
        queue: Option<String>,
        #[arg(key)]
        capacities: Option<bool>,
        #[arg(key)]
        within_queues: Option<bool>,
        #[arg(key)]
        fraction: Option<f64>,
    },
}

/// The snapshot the script builds; workers are placed by id unless `config` says otherwise,
/// as in Spark's placement suites.
struct Runner {
    snapshot: Snapshot,
}

impl Default for Runner {
    fn default() -> Self {
        let mut snapshot = Snapshot::default();
        snapshot.config.worker_selection = WorkerSelection::WorkerId;
        Self { snapshot }
    }
}

impl goldenscript::Runner for Runner {
    type Command = Command;

    fn run(
        &mut self,
        command: &Command,
        _context: &goldenscript::Context,
    ) -> Result<String, Box<dyn Error>> {
        let snapshot = &mut self.snapshot;
        match command {
            Command::Config {
                spread_out_apps,
                spread_out_drivers,
                worker_selection,
                default_cores,
                max_drivers,
                driver_share,
                seed,
            } => {
                let config = &mut snapshot.config;
                config.spread_out_apps = spread_out_apps.unwrap_or(config.spread_out_apps);
                config.spread_out_drivers = spread_out_drivers.unwrap_or(config.spread_out_drivers);
                if let Some(policy) = worker_selection {
                    config.worker_selection = policy_named(policy)?;
                }
                config.default_cores = default_cores.or(config.default_cores);
                config.max_drivers = max_drivers.or(config.max_drivers);
                config.driver_share = driver_share.unwrap_or(config.driver_share);
                config.seed = seed.unwrap_or(config.seed);
            }
            Command::Queue {
                name,
                prior,
                threshold,
                max_capacity,
                capacity,
                driver_share,
                ordering,
                weights,
                user_limit,
            } => {
                let ordering = match ordering.as_deref() {
                    None | Some("fifo") => OrderingPolicy::Fifo,
                    Some("fair") => OrderingPolicy::Fair,
                    Some("drf") => OrderingPolicy::Drf,
                    Some(other) => return Err(format!("unknown ordering {other}").into()),
                };
                let mut user_weights = BTreeMap::new();
                for pair in weights.iter().flat_map(|w| w.split(',')) {
                    let (user, weight) = pair.split_once(':').ok_or("weights: USER:WEIGHT,...")?;
                    user_weights.insert(user.into(), weight.parse()?);
                }
                snapshot.queues.retain(|q| q.name.0 != *name);
                snapshot.queues.push(QueueConfig {
                    prior: prior.unwrap_or(false),
                    threshold: threshold.unwrap_or(1.0),
                    max_capacity: max_capacity.unwrap_or(1.0),
                    capacity: *capacity,
                    driver_share: *driver_share,
                    ordering,
                    user_weights,
                    user_limit: *user_limit,
                    ..QueueConfig::named(name)
                });
            }
            Command::Worker {
                id,
                cores,
                mem,
                used_cores,
                used_mem,
                state,
                prior,
                without_spark,
                custom,
            } => {
                let state = match state.as_deref() {
                    None | Some("ALIVE") => WorkerState::Alive,
                    Some("DEAD") => WorkerState::Dead,
                    Some("DECOMMISSIONED") => WorkerState::Decommissioned,
                    Some(other) => return Err(format!("unknown worker state {other}").into()),
                };
                let workers = snapshot.workers.make_mut();
                workers.retain(|w| *w.id.0 != **id);
                workers.push(Worker {
                    capacity: Resources::new(*cores, *mem).with_custom(custom.clone()),
                    used: Resources::new(used_cores.unwrap_or(0), used_mem.unwrap_or(0)),
                    state,
                    hosts_prior: prior.unwrap_or(false),
                    without_spark: without_spark.unwrap_or(false),
                    ..worker(id, *cores, *mem)
                });
            }
            Command::Workers { count, cores, mem } => {
                let first = snapshot.workers.len();
                snapshot
                    .workers
                    .make_mut()
                    .extend((first..first + count).map(|i| worker(&format!("w{i}"), *cores, *mem)));
            }
            Command::Driver {
                id,
                cores,
                mem,
                queue,
                gang,
                gang_cores,
                gang_mem,
                priority,
                spark,
                custom,
            } => snapshot.drivers.push(DriverRequest {
                id: id.as_str().into(),
                need: Resources::new(cores.unwrap_or(1), mem.unwrap_or(1024))
                    .with_custom(custom.clone()),
                queue: queue
                    .as_deref()
                    .map_or_else(QueueName::default, QueueName::from),
                gang: gang.map(|min_executors| GangRequest {
                    min_executors,
                    executor_cores: gang_cores.unwrap_or(1),
                    executor_memory_mb: gang_mem.unwrap_or(1024),
                    executor_resources: ResourceAmounts::new(),
                }),
                priority: priority.unwrap_or(0),
                spark: spark.unwrap_or(false),
            }),
            Command::PendingGang {
                queue,
                min,
                cores,
                mem,
                registered,
            } => snapshot.pending_gangs.push(PendingGang {
                queue: queue
                    .as_deref()
                    .map_or_else(QueueName::default, QueueName::from),
                gang: GangRequest {
                    min_executors: *min,
                    executor_cores: *cores,
                    executor_memory_mb: *mem,
                    executor_resources: ResourceAmounts::new(),
                },
                registered: registered.unwrap_or(false),
            }),
            Command::App {
                id,
                queue,
                cores_max,
                executor_cores,
                mem,
                limit,
                min,
                user,
                priority,
                custom,
            } => {
                snapshot.apps.make_mut().retain(|a| *a.id.0 != **id);
                let mut app = AppRequest::new(id);
                app.queue = queue
                    .as_deref()
                    .map_or_else(QueueName::default, QueueName::from);
                app.cores_max = *cores_max;
                app.executor_cores = *executor_cores;
                app.executor_memory_mb = mem.unwrap_or(app.executor_memory_mb);
                app.executor_limit = *limit;
                app.min_executors = *min;
                app.user = user.as_deref().map(Into::into);
                app.priority = priority.unwrap_or(0);
                app.executor_resources = custom.clone();
                snapshot.apps.make_mut().push(app);
            }
            Command::Profile {
                app,
                id,
                executor_cores,
                mem,
                limit,
                custom,
            } => {
                let app = snapshot
                    .apps
                    .make_mut()
                    .iter_mut()
                    .find(|a| *a.id.0 == **app)
                    .ok_or_else(|| format!("no app {app}"))?;
                app.profiles.push(ProfileRequest {
                    id: *id,
                    executor_cores: *executor_cores,
                    executor_memory_mb: mem.unwrap_or(1024),
                    executor_resources: custom.clone(),
                    executor_limit: *limit,
                });
            }
            Command::Held {
                app,
                worker,
                cores,
                mem,
                profile,
                custom,
            } => {
                let host = snapshot
                    .workers
                    .make_mut()
                    .iter_mut()
                    .find(|w| *w.id.0 == **worker)
                    .ok_or_else(|| format!("no worker {worker}"))?;
                for (name, amount) in custom {
                    *host.used.custom.entry(name.clone()).or_default() += amount;
                }
                let app = snapshot
                    .apps
                    .make_mut()
                    .iter_mut()
                    .find(|a| *a.id.0 == **app)
                    .ok_or_else(|| format!("no app {app}"))?;
                app.executors.push(HeldExecutor {
                    id: None,
                    worker: worker.as_str().into(),
                    resources: Resources::new(*cores, *mem).with_custom(custom.clone()),
                    profile: profile.unwrap_or(0),
                });
            }
            Command::RunningDrivers(count) => snapshot.running_drivers = *count,
            Command::DriversHold { queue, cores, mem } => {
                let hold = DriversHold {
                    cores: *cores,
                    memory_mb: *mem,
                };
                snapshot.drivers_hold.insert(queue.as_str().into(), hold);
            }
            Command::Clear => {
                snapshot.apps.make_mut().clear();
                snapshot.drivers.clear();
                snapshot.pending_gangs.clear();
            }
            Command::Reset => *self = Self::default(),
            Command::Schedule { spread_out } => {
                let mut pass = snapshot.clone();
                pass.config.spread_out_apps = spread_out.unwrap_or(pass.config.spread_out_apps);
                let plan = muster_core::schedule(&pass)?;
                let reference = spark_reference::schedule(&pass)?;
                if plan != reference {
                    return Err(format!(
                        "the indexed placer and Spark's loop disagree:\n{plan:?}\n{reference:?}"
                    )
                    .into());
                }
                return Ok(describe(&plan));
            }
            Command::Preempt {
                queue,
                capacities,
                within_queues,
                fraction,
            } => {
                let settings = PreemptionSettings {
                    queues: queue.iter().map(|q| q.as_str().into()).collect(),
                    max_fraction: fraction.unwrap_or(0.1),
                    capacities: capacities.unwrap_or(false),
                    within_queues: within_queues.unwrap_or(false),
                };
                let Some(preemption) = muster_core::preempt::dry_run(snapshot, &settings)? else {
                    return Ok("nothing to preempt\n".to_owned());
                };
                let mut out = String::new();
                for victim in &preemption.victims {
                    let _ = writeln!(
                        out,
                        "stop {}/{} on {} ({})",
                        victim.app, victim.executor, victim.worker, victim.resources
                    );
                }
                for reserved in &preemption.reservations {
                    let _ = writeln!(
                        out,
                        "reserve {} for {}: {}",
                        reserved.worker, reserved.id, reserved.resources
                    );
                }
                return Ok(out);
            }
        }
        Ok(String::new())
    }
}

fn policy_named(name: &str) -> Result<WorkerSelection, Box<dyn Error>> {
    Ok(match name {
        "CORES_FREE_ASC" => WorkerSelection::CoresFreeAsc,
        "CORES_FREE_DESC" => WorkerSelection::CoresFreeDesc,
        "MEMORY_FREE_ASC" => WorkerSelection::MemoryFreeAsc,
        "MEMORY_FREE_DESC" => WorkerSelection::MemoryFreeDesc,
        "WORKER_ID" => WorkerSelection::WorkerId,
        other => return Err(format!("unknown policy {other}").into()),
    })
}

/// Launches in order, then each app's grants by worker (`COUNTxCORES`, or every executor's
/// cores when they differ), then what waits.
fn describe(plan: &Plan) -> String {
    let mut out = String::new();
    for launch in &plan.drivers {
        let _ = writeln!(out, "launch {} on {}", launch.driver, launch.worker);
    }
    // An app's grants of one size, its resource profile's beyond its own: `a1 profile 1`.
    let mut apps: Vec<(&str, u32)> = Vec::new();
    let mut grants: BTreeMap<(&str, u32, &str), Vec<u32>> = BTreeMap::new();
    for grant in &plan.executors {
        let app = (grant.app.as_ref(), grant.profile);
        if !apps.contains(&app) {
            apps.push(app);
        }
        grants
            .entry((app.0, app.1, &grant.worker.0))
            .or_default()
            .extend(std::iter::repeat_n(
                grant.resources.cores,
                grant.count as usize,
            ));
    }
    for (app, profile) in apps {
        let on: Vec<String> = grants
            .range((app, profile, "")..)
            .take_while(|((a, p, _), _)| *a == app && *p == profile)
            .map(|((_, _, worker), cores)| match cores.as_slice() {
                [first, rest @ ..] if rest.iter().all(|c| c == first) => {
                    format!("{worker}={}x{first}", cores.len())
                }
                _ => format!("{worker}={cores:?}"),
            })
            .collect();
        let size = match profile {
            0 => String::new(),
            profile => format!(" profile {profile}"),
        };
        let _ = writeln!(out, "grant {app}{size}: {}", on.join(" "));
    }
    for waiting in &plan.waiting {
        let _ = writeln!(out, "wait {}: {}", waiting.id, waiting.reason);
    }
    for reserved in &plan.reserved {
        let _ = writeln!(
            out,
            "reserve {} on {}: {}",
            reserved.app, reserved.worker, reserved.resources
        );
    }
    out
}
