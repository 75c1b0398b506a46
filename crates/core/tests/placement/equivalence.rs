//! Property tests on random clusters, apps, policies and queue settings.
//!
//! SAFETY: no worker is over-allocated in any dimension; nothing lands on a worker that is not
//! ALIVE; executors have exactly `executor_cores` when it is set; the threshold holds on
//! prior-hosting workers; a normal grant leaves its queue and every parent of it within their
//! maximum; a queue's drivers hold at most its driver share of its room, or are the one
//! driver it runs; a gang is granted all of its minimum or nothing; and so whatever the
//! leaves' orderings and user limits and the apps' users and priorities; and no Spark
//! submission's driver lands on a worker without Spark.
//! EXACTNESS: the indexed placer decides exactly what Spark's loop decides.

use std::collections::BTreeMap;

use muster_core::ids::{AppId, ExecutorId, QueueName, SmolStr, WorkId};
use muster_core::model::{
    AppRequest, DriverRequest, DriversHold, GangRequest, HeldExecutor, OrderingPolicy, PassConfig,
    PendingGang, ProfileRequest, QueueConfig, Snapshot, Worker, WorkerSelection, WorkerState,
};
use muster_core::resources::Resources;
use muster_core::{Plan, schedule, spark_reference};
use proptest::prelude::*;

/// The leaves apps and drivers use; `team` is the parent of the last two.
const QUEUES: [&str; 4] = ["default", "prod", "team.batch", "team.etl"];

fn policy() -> impl Strategy<Value = WorkerSelection> {
    prop_oneof![
        Just(WorkerSelection::CoresFreeAsc),
        Just(WorkerSelection::CoresFreeDesc),
        Just(WorkerSelection::MemoryFreeAsc),
        Just(WorkerSelection::MemoryFreeDesc),
        Just(WorkerSelection::WorkerId),
    ]
}

fn fraction() -> impl Strategy<Value = f64> {
    prop_oneof![Just(1.0), Just(0.8), Just(0.5), Just(0.3)]
}

fn config() -> impl Strategy<Value = PassConfig> {
    (
        any::<bool>(),
        any::<bool>(),
        policy(),
        prop::option::weighted(0.2, 1..20u32),
        prop::option::weighted(0.2, 1..4u32),
        fraction(),
        any::<u64>(),
    )
        .prop_map(
            |(
                spread_out_apps,
                spread_out_drivers,
                worker_selection,
                default_cores,
                max_drivers,
                driver_share,
                seed,
            )| PassConfig {
                spread_out_apps,
                spread_out_drivers,
                worker_selection,
                default_cores,
                max_drivers,
                driver_share,
                seed,
            },
        )
}

/// A leaf's ordering, under `drf` perhaps a weight for user `u1`, and perhaps a user limit.
fn ordering() -> impl Strategy<Value = (OrderingPolicy, BTreeMap<SmolStr, f64>, Option<f64>)> {
    (
        prop_oneof![
            2 => Just(OrderingPolicy::Fifo),
            1 => Just(OrderingPolicy::Fair),
            1 => Just(OrderingPolicy::Drf),
        ],
        prop::option::of(prop::sample::select(vec![0.5, 2.0, 3.0])),
        prop::option::weighted(0.3, prop::sample::select(vec![0.25, 0.5, 1.0])),
    )
        .prop_map(|(ordering, weight, user_limit)| {
            let weights = weight
                .filter(|_| ordering == OrderingPolicy::Drf)
                .map(|w| [("u1".into(), w)].into())
                .unwrap_or_default();
            (ordering, weights, user_limit)
        })
}

/// The queues of [`QUEUES`] and their parent, half the time with capacities (weights
/// normalised so that siblings sum to 1, each queue's maximum at least its guarantee).
fn queues() -> impl Strategy<Value = Vec<QueueConfig>> {
    (
        prop::collection::vec(
            (
                any::<bool>(),
                fraction(),
                fraction(),
                prop::option::weighted(0.3, fraction()),
            ),
            QUEUES.len(),
        ),
        fraction(),
        prop::option::of(prop::collection::vec(0..4u32, 5)),
        prop::collection::vec(ordering(), QUEUES.len()),
    )
        .prop_map(|(leaves, team_max, weights, orderings)| {
            let mut queues: Vec<QueueConfig> = QUEUES
                .iter()
                .zip(leaves)
                .zip(orderings)
                .map(
                    |(
                        (name, (prior, threshold, max_capacity, driver_share)),
                        (ordering, user_weights, user_limit),
                    )| QueueConfig {
                        prior,
                        threshold,
                        max_capacity,
                        driver_share,
                        ordering,
                        user_weights,
                        user_limit,
                        ..QueueConfig::named(name)
                    },
                )
                .collect();
            queues.push(QueueConfig {
                max_capacity: team_max,
                ..QueueConfig::named("team")
            });
            if let Some(weights) = weights {
                let shares = |weights: &[u32]| -> Vec<f64> {
                    let sum: u32 = weights.iter().sum();
                    weights
                        .iter()
                        .map(|&w| match sum {
                            0 => 1.0 / weights.len() as f64,
                            _ => f64::from(w) / f64::from(sum),
                        })
                        .collect()
                };
                let top = shares(&weights[..3])
                    .into_iter()
                    .zip(["default", "prod", "team"]);
                let team = shares(&weights[3..])
                    .into_iter()
                    .zip(["team.batch", "team.etl"]);
                for (capacity, name) in top.chain(team) {
                    let queue = queues.iter_mut().find(|q| q.name.0 == name).unwrap();
                    queue.capacity = Some(capacity);
                    queue.max_capacity = queue.max_capacity.max(capacity);
                }
            }
            queues
        })
}

/// A worker with some of its capacity already in use. Ids are drawn from a small alphabet so
/// that id order and index order differ.
fn worker() -> impl Strategy<Value = Worker> {
    (
        1..12u32,
        1..16u64,
        0..=3u32,
        any::<(u8, u8, u8)>(),
        prop::sample::select(vec![
            WorkerState::Alive,
            WorkerState::Alive,
            WorkerState::Alive,
            WorkerState::Dead,
            WorkerState::Decommissioned,
        ]),
        any::<bool>(),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(
                cores,
                memory_units,
                gpus,
                (used_cores, used_memory, used_gpus),
                state,
                hosts_prior,
                without_spark,
            )| {
                let memory_mb = memory_units * 256;
                Worker {
                    id: "".into(),
                    host: Default::default(),
                    capacity: Resources::new(cores, memory_mb).with_custom(if gpus > 0 {
                        [("gpu".into(), gpus)].into()
                    } else {
                        BTreeMap::new()
                    }),
                    used: Resources::new(
                        u32::from(used_cores) % (cores + 1) / 2,
                        u64::from(used_memory) * memory_mb / 512,
                    )
                    .with_custom(if gpus > 0 {
                        [("gpu".into(), u32::from(used_gpus) % (gpus + 1))].into()
                    } else {
                        BTreeMap::new()
                    }),
                    state,
                    hosts_prior,
                    without_spark,
                }
            },
        )
}

fn app() -> impl Strategy<Value = AppRequest> {
    (
        prop::sample::select(QUEUES.to_vec()),
        prop::option::weighted(0.7, 1..40u32),
        prop::option::weighted(0.6, 1..5u32),
        prop::sample::select(vec![64u64, 128, 256, 512, 1024, 3000]),
        prop::option::weighted(0.2, 1..3u32),
        prop::option::weighted(0.3, 0..8u32),
        prop::collection::vec((any::<prop::sample::Index>(), 1..4u32), 0..3),
        prop::option::weighted(0.3, profile()),
        prop::option::weighted(0.3, 1..8u32),
        (
            prop::option::weighted(0.7, 0..3u8),
            prop::sample::select(vec![0i32, 0, 0, 1, -1, 5]),
        ),
    )
        .prop_map(
            |(
                queue,
                cores_max,
                executor_cores,
                executor_memory_mb,
                gpus,
                executor_limit,
                held,
                profile,
                min_executors,
                (user, priority),
            )| {
                AppRequest {
                    id: "".into(),
                    queue: queue.into(),
                    cores_max,
                    executor_cores,
                    executor_memory_mb,
                    executor_resources: gpus
                        .map(|g| [("gpu".to_string(), g)].into())
                        .unwrap_or_default(),
                    executor_limit,
                    // Only an app with executor_cores may be a gang.
                    min_executors: min_executors.filter(|_| executor_cores.is_some()),
                    // Held executors name workers by index; the snapshot strategy fixes the names.
                    executors: held
                        .into_iter()
                        .map(|(index, cores)| HeldExecutor {
                            id: None,
                            worker: index.index(usize::MAX).to_string().as_str().into(),
                            resources: Resources::new(cores, 64),
                            profile: 0,
                        })
                        .collect(),
                    profiles: profile.into_iter().collect(),
                    user: user.map(|u| format!("u{u}").as_str().into()),
                    priority,
                }
            },
        )
}

/// A resource profile: another executor size, often with a GPU.
fn profile() -> impl Strategy<Value = ProfileRequest> {
    (
        prop::option::weighted(0.7, 1..4u32),
        prop::sample::select(vec![64u64, 512, 2048]),
        prop::option::weighted(0.5, 1..3u32),
        0..6u32,
    )
        .prop_map(
            |(executor_cores, executor_memory_mb, gpus, executor_limit)| ProfileRequest {
                id: 1,
                executor_cores,
                executor_memory_mb,
                executor_resources: gpus
                    .map(|g| [("gpu".to_string(), g)].into())
                    .unwrap_or_default(),
                executor_limit,
            },
        )
}

fn driver() -> impl Strategy<Value = DriverRequest> {
    (
        prop::sample::select(QUEUES.to_vec()),
        1..4u32,
        prop::sample::select(vec![256u64, 1024, 2048]),
        prop::option::weighted(0.2, 1..3u32),
        prop::option::weighted(0.3, gang()),
        prop::sample::select(vec![0, 0, 0, 1, 2]),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(queue, cores, memory_mb, gpus, gang, priority, spark)| DriverRequest {
                id: "".into(),
                need: Resources::new(cores, memory_mb).with_custom(
                    gpus.map(|g| [("gpu".to_string(), g)].into())
                        .unwrap_or_default(),
                ),
                queue: queue.into(),
                gang,
                priority,
                spark,
            },
        )
}

/// The gang of a driver's application, or of a running driver's that has not started.
fn gang() -> impl Strategy<Value = GangRequest> {
    (1..6u32, 1..3u32, prop::sample::select(vec![64u64, 512])).prop_map(
        |(min_executors, executor_cores, executor_memory_mb)| GangRequest {
            min_executors,
            executor_cores,
            executor_memory_mb,
            executor_resources: BTreeMap::new(),
        },
    )
}

fn snapshot() -> impl Strategy<Value = Snapshot> {
    snapshot_of(1..10)
}

/// A snapshot with a number of workers in `workers`.
fn snapshot_of(workers: std::ops::Range<usize>) -> impl Strategy<Value = Snapshot> {
    (
        config(),
        queues(),
        prop::collection::vec(worker(), workers),
        prop::collection::vec(app(), 0..7),
        prop::collection::vec(driver(), 0..4),
        0..3u32,
        prop::collection::vec(
            prop::option::weighted(0.3, (1..4u64, 1..8u64)),
            QUEUES.len(),
        ),
        prop::collection::vec(
            (prop::sample::select(QUEUES.to_vec()), gang(), any::<bool>()),
            0..2,
        ),
        Just(()).prop_perturb(|_, mut rng| rng.random::<u64>()),
    )
        .prop_map(
            |(
                config,
                queues,
                mut workers,
                mut apps,
                mut drivers,
                running_drivers,
                hold,
                pending_gangs,
                id_salt,
            )| {
                let n = workers.len();
                for (i, w) in workers.iter_mut().enumerate() {
                    // Ids whose string order differs from index order.
                    w.id = format!("{}-{i}", (id_salt >> (i % 8 * 8)) as u8 % 7)
                        .as_str()
                        .into();
                }
                let ids: Vec<_> = workers.iter().map(|w| w.id.clone()).collect();
                for (i, a) in apps.iter_mut().enumerate() {
                    a.id = format!("app-{i}").as_str().into();
                    a.executors.update(|executors| {
                        for e in executors {
                            e.worker = ids[e.worker.0.parse::<usize>().unwrap() % n].clone();
                        }
                    });
                }
                for (i, d) in drivers.iter_mut().enumerate() {
                    d.id = format!("driver-{i}").as_str().into();
                }
                let drivers_hold = QUEUES
                    .iter()
                    .zip(hold)
                    .filter_map(|(name, hold)| {
                        let (cores, memory_units) = hold?;
                        let hold = DriversHold {
                            cores,
                            memory_mb: memory_units * 256,
                        };
                        Some((QueueName::from(*name), hold))
                    })
                    .collect();
                Snapshot {
                    config,
                    queues,
                    workers: workers.into(),
                    running_drivers,
                    drivers_hold,
                    drivers,
                    pending_gangs: pending_gangs
                        .into_iter()
                        .map(|(queue, gang, registered)| PendingGang {
                            queue: queue.into(),
                            gang,
                            registered,
                        })
                        .collect(),
                    apps: apps.into(),
                    preemption: None,
                }
            },
        )
}

/// Replays `plan` over `snapshot` and checks every SAFETY property.
fn check_safety(snapshot: &Snapshot, plan: &Plan) -> Result<(), TestCaseError> {
    let queues: BTreeMap<_, _> = snapshot
        .queues
        .iter()
        .map(|q| (q.name.clone(), q))
        .collect();
    let mut used: BTreeMap<_, _> = snapshot
        .workers
        .iter()
        .map(|w| {
            (
                w.id.clone(),
                (
                    w.used.cores,
                    w.used.memory_mb,
                    w.used.custom.clone(),
                    w.hosts_prior,
                ),
            )
        })
        .collect();
    let workers: BTreeMap<_, _> = snapshot.workers.iter().map(|w| (w.id.clone(), w)).collect();
    let mut place = |worker: &muster_core::ids::WorkerId,
                     cores: u32,
                     memory: u64,
                     resources: &BTreeMap<String, u32>,
                     queue: &muster_core::ids::QueueName|
     -> Result<(), TestCaseError> {
        let w = workers[worker];
        prop_assert_eq!(w.state, WorkerState::Alive, "work on a non-ALIVE worker");
        let q = queues[queue];
        let entry = used.get_mut(worker).unwrap();
        entry.0 += cores;
        entry.1 += memory;
        for (name, amount) in resources {
            *entry.2.entry(name.clone()).or_insert(0) += amount;
            prop_assert!(
                entry.2[name] <= w.capacity.custom.get(name).copied().unwrap_or(0),
                "{name} over-allocated on {}",
                w.id
            );
        }
        prop_assert!(
            entry.0 <= w.capacity.cores && entry.1 <= w.capacity.memory_mb,
            "{} over-allocated",
            w.id
        );
        if entry.3 && !q.prior {
            prop_assert!(
                f64::from(entry.0) <= (q.threshold * f64::from(w.capacity.cores)).floor(),
                "core threshold broken on {}",
                w.id
            );
            prop_assert!(
                entry.1 as f64 <= (q.threshold * w.capacity.memory_mb as f64).floor(),
                "memory threshold broken on {}",
                w.id
            );
        }
        entry.3 |= q.prior;
        Ok(())
    };
    let alive = |amount: fn(&Worker) -> u64| -> u64 {
        snapshot
            .workers
            .iter()
            .filter(|w| w.state == WorkerState::Alive)
            .map(amount)
            .sum()
    };
    let alive_cores = alive(|w| u64::from(w.capacity.cores));
    let alive_memory = alive(|w| w.capacity.memory_mb);
    let mut drivers_hold = snapshot.drivers_hold.clone();
    for launch in &plan.drivers {
        let d = snapshot
            .drivers
            .iter()
            .find(|d| d.id == launch.driver)
            .unwrap();
        prop_assert!(
            !(d.spark && workers[&launch.worker].without_spark),
            "a Spark submission's driver on a worker without Spark"
        );
        let q = queues[&d.queue];
        let hold = drivers_hold.entry(d.queue.clone()).or_default();
        if *hold != DriversHold::default() {
            let room = if q.prior {
                1.0
            } else {
                let path = [q.name.0.as_str()]
                    .into_iter()
                    .chain(q.name.0.rsplit_once('.').map(|(parent, _)| parent));
                path.map(|name| queues[&QueueName::from(name)].max_capacity)
                    .product()
            };
            let share = q.driver_share.unwrap_or(snapshot.config.driver_share);
            let allowed = |alive: u64| ((room * alive as f64) as u64 as f64 * share) as u64;
            let after = hold.with(&d.need);
            prop_assert!(
                after.cores <= allowed(alive_cores) && after.memory_mb <= allowed(alive_memory),
                "{} holds {after:?} of drivers beyond its share",
                d.queue
            );
        }
        *hold = hold.with(&d.need);
        place(
            &launch.worker,
            d.need.cores,
            d.need.memory_mb,
            &d.need.custom,
            &d.queue,
        )?;
    }
    let total: u64 = snapshot
        .workers
        .iter()
        .filter(|w| w.state == WorkerState::Alive)
        .map(|w| u64::from(w.capacity.cores))
        .sum();
    // Executor cores below each queue, parents included: held before the pass, and granted
    // to normal queues by it.
    let path = |leaf: &str| -> Vec<String> {
        let mut path = vec![leaf.to_owned()];
        while let Some((up, _)) = path[path.len() - 1].rsplit_once('.') {
            path.push(up.to_owned());
        }
        path
    };
    let mut queue_cores: BTreeMap<String, u64> = BTreeMap::new();
    for a in &snapshot.apps {
        for q in path(&a.queue.0) {
            *queue_cores.entry(q).or_default() += a.executors.cores();
        }
    }
    let mut normal_grants: BTreeMap<String, u64> = BTreeMap::new();
    for grant in &plan.executors {
        let a = snapshot.apps.iter().find(|a| a.id == grant.app).unwrap();
        let executor_cores = match grant.profile {
            0 => a.executor_cores,
            id => {
                a.profiles
                    .iter()
                    .find(|p| p.id == id)
                    .unwrap()
                    .executor_cores
            }
        };
        if let Some(cpe) = executor_cores {
            prop_assert_eq!(grant.resources.cores, cpe);
        } else {
            prop_assert_eq!(grant.count, 1, "one executor per worker");
        }
        prop_assert!(grant.count > 0);
        for _ in 0..grant.count {
            place(
                &grant.worker,
                grant.resources.cores,
                grant.resources.memory_mb,
                &grant.resources.custom,
                &a.queue,
            )?;
            for q in path(&a.queue.0) {
                *queue_cores.entry(q.clone()).or_default() += u64::from(grant.resources.cores);
                if !queues[&a.queue].prior {
                    *normal_grants.entry(q).or_default() += u64::from(grant.resources.cores);
                }
            }
        }
    }
    // A gang that held none of its own executors is granted all of its minimum or none:
    // its minimum, or as many as its cores_max and executor limit allow when fewer.
    for a in snapshot
        .apps
        .iter()
        .filter(|a| a.executors.iter().all(|e| e.profile != 0))
    {
        let Some(minimum) = a.min_executors else {
            continue;
        };
        let granted: u64 = plan
            .executors
            .iter()
            .filter(|g| g.app == a.id && g.profile == 0)
            .map(|g| u64::from(g.count))
            .sum();
        let requested = a
            .cores_max
            .or(snapshot.config.default_cores)
            .map_or(u64::MAX, u64::from);
        let by_cores =
            requested.saturating_sub(a.executors.cores()) / u64::from(a.executor_cores.unwrap());
        let by_limit = a.executor_limit.map_or(u64::MAX, u64::from);
        let required = u64::from(minimum).min(by_cores).min(by_limit);
        prop_assert!(
            granted == 0 || granted >= required,
            "gang {} granted {granted} of its {required}",
            a.id
        );
    }
    // A normal grant below a queue leaves it within its maximum, the product of the
    // max_capacity along its path.
    for (name, granted) in normal_grants {
        let max: f64 = path(&name)
            .iter()
            .map(|q| queues[&muster_core::ids::QueueName::from(q.as_str())].max_capacity)
            .product();
        let capacity = (max * total as f64).floor() as u64;
        prop_assert!(
            granted == 0 || queue_cores[&name] <= capacity,
            "queue {name} over its maximum: {} of {capacity} cores",
            queue_cores[&name]
        );
    }
    Ok(())
}

/// 2,000 cases unless `PROPTEST_CASES` asks for another number.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn indexed_placer_equals_sparks_loop(snapshot in snapshot()) {
        let fast = schedule(&snapshot).unwrap();
        let reference = spark_reference::schedule(&snapshot).unwrap();
        prop_assert_eq!(&fast, &reference);
        check_safety(&snapshot, &fast)?;
    }

    /// With more workers, an app's grants often change fewer than an eighth of them: the
    /// placer then moves each worker in its sets rather than building them afresh.
    #[test]
    fn indexed_placer_equals_sparks_loop_on_larger_clusters(snapshot in snapshot_of(16..48)) {
        let fast = schedule(&snapshot).unwrap();
        let reference = spark_reference::schedule(&snapshot).unwrap();
        prop_assert_eq!(&fast, &reference);
        check_safety(&snapshot, &fast)?;
    }

    #[test]
    fn same_snapshot_same_plan(snapshot in snapshot()) {
        prop_assert_eq!(schedule(&snapshot).unwrap(), schedule(&snapshot.clone()).unwrap());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Hostile amounts (anything a `u32` or `u64` holds) are refused by validation or
    /// scheduled: never a panic, never an overflow.
    #[test]
    fn hostile_amounts_are_refused_or_scheduled(
        mut snapshot in snapshot(),
        cores in any::<u32>(),
        memory_mb in any::<u64>(),
        used in any::<u32>(),
        executor_cores in any::<u32>(),
        cores_max in any::<u32>(),
    ) {
        if let Some(worker) = snapshot.workers.make_mut().first_mut() {
            worker.capacity.cores = cores;
            worker.capacity.memory_mb = memory_mb;
            worker.used.cores = used;
        }
        if let Some(app) = snapshot.apps.make_mut().first_mut() {
            // Executors of at least a thousandth of the worker keep a pass's grants bounded.
            app.executor_cores = Some(executor_cores.max(cores / 1000));
            app.cores_max = Some(cores_max);
            app.executor_memory_mb = memory_mb;
        }
        if let Ok(plan) = schedule(&snapshot) {
            prop_assert!(
                plan.executors
                    .iter()
                    .all(|e| e.resources.cores > 0 && e.count > 0)
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the cluster, preemption stops only ordinary executors on ALIVE workers,
    /// within the round's share of the ALIVE cores; what it reserves is what the pass
    /// without the victims gives the prior work; and it decides the same way twice.
    #[test]
    fn preemption_stops_only_ordinary_executors_within_its_share(
        snapshot in snapshot(),
        fraction in 0.05f64..=1.0,
    ) {
        let prior: Vec<_> = snapshot.queues.iter().filter(|q| q.prior).map(|q| q.name.clone()).collect();
        prop_assume!(!prior.is_empty());
        let settings = muster_core::preempt::PreemptionSettings { queues: prior.clone(), max_fraction: fraction, capacities: false, within_queues: false };
        let first = muster_core::preempt::dry_run(&snapshot, &settings).unwrap();
        prop_assert_eq!(&first, &muster_core::preempt::dry_run(&snapshot, &settings).unwrap());
        let Some(preemption) = first else { return Ok(()) };
        let alive: u64 = snapshot.workers.iter()
            .filter(|w| w.state == WorkerState::Alive)
            .map(|w| u64::from(w.capacity.cores))
            .sum();
        let taken: u64 = preemption
            .victims
            .iter()
            .map(|v| u64::from(v.resources.cores))
            .sum();
        prop_assert!(taken <= (fraction * alive as f64).floor() as u64);
        for victim in &preemption.victims {
            let app = snapshot.apps.iter().find(|a| a.id == victim.app).unwrap();
            prop_assert!(!prior.contains(&app.queue), "a prior executor was chosen");
            prop_assert!(snapshot.workers.iter().any(|w| w.id == victim.worker && w.state == WorkerState::Alive));
        }
        prop_assert!(!preemption.reservations.is_empty(), "victims that serve nothing");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Preemption for guarantees stops only executors of ordinary queues, never takes a
    /// queue or a parent below its guarantee, and stops no more cores than the waiting
    /// queues lack.
    #[test]
    fn preemption_for_guarantees_leaves_every_queue_at_or_above_its_own(
        snapshot in snapshot(),
        fraction in 0.05f64..=1.0,
    ) {
        if snapshot.queues.iter().all(|q| q.capacity.is_none()) {
            return Ok(());
        }
        let settings = muster_core::preempt::PreemptionSettings {
            queues: Vec::new(),
            max_fraction: fraction,
            capacities: true,
            within_queues: false,
        };
        let Some(preemption) = muster_core::preempt::dry_run(&snapshot, &settings).unwrap() else {
            return Ok(());
        };
        let alive: u64 = snapshot.workers.iter()
            .filter(|w| w.state == WorkerState::Alive)
            .map(|w| u64::from(w.capacity.cores))
            .sum();
        let queues: BTreeMap<_, _> = snapshot.queues.iter().map(|q| (q.name.clone(), q)).collect();
        let guaranteed = |name: &str| -> u64 {
            let mut share = 1.0;
            let mut path = Some(name);
            while let Some(q) = path {
                share *= queues.get(&q.into()).and_then(|c| c.capacity).unwrap_or(0.0);
                path = q.rsplit_once('.').map(|(up, _)| up);
            }
            (share * alive as f64).floor() as u64
        };
        let below = |queue: &str, leaf: &str| leaf == queue || leaf.starts_with(&format!("{queue}."));
        let used = |queue: &str, stopped: bool| -> u64 {
            snapshot.apps.iter()
                .filter(|a| below(queue, &a.queue.0))
                .flat_map(|a| a.executors.iter().enumerate().map(move |(i, e)| (a, i, e)))
                .filter(|(a, i, e)| !stopped || !preemption.victims.iter().any(|v| {
                    v.app == a.id && e.id.map_or(v.executor.0 as usize == *i, |id| v.executor == id)
                }))
                .map(|(_, _, e)| u64::from(e.resources.cores))
                .sum()
        };
        for victim in &preemption.victims {
            let app = snapshot.apps.iter().find(|a| a.id == victim.app).unwrap();
            prop_assert!(!queues.get(&app.queue).is_some_and(|q| q.prior), "a prior executor was chosen");
            let mut path = Some(app.queue.0.as_str());
            while let Some(q) = path {
                prop_assert!(
                    used(q, true) >= guaranteed(q),
                    "queue {q} taken below its guarantee: {} of {}", used(q, true), guaranteed(q)
                );
                path = q.rsplit_once('.').map(|(up, _)| up);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Preemption inside queues stops only executors of ordinary applications that an
    /// application the room is kept for outranks in their own leaf (a higher priority, or an
    /// equal one under `fair` or `drf`), never takes a gang below its minimum, and is what the
    /// state's own check accepts.
    #[test]
    fn preemption_inside_queues_stops_only_outranked_executors_of_the_same_leaf(
        mut snapshot in prop_oneof![snapshot(), full_shared_leaf()],
        fraction in 0.05f64..=1.0,
    ) {
        // Named as the state names them, so that its check finds them.
        for app in snapshot.apps.make_mut() {
            app.executors.update(|executors| {
                for (i, executor) in executors.iter_mut().enumerate() {
                    executor.id = Some(ExecutorId(u32::try_from(i).unwrap()));
                }
            });
        }
        let settings = muster_core::preempt::PreemptionSettings {
            queues: Vec::new(),
            max_fraction: fraction,
            capacities: false,
            within_queues: true,
        };
        let Some(preemption) = muster_core::preempt::dry_run(&snapshot, &settings).unwrap() else {
            return Ok(());
        };
        let app = |id: &AppId| snapshot.apps.iter().find(|a| &a.id == id).unwrap();
        let owners: Vec<&AppRequest> = preemption.reservations.iter()
            .filter_map(|r| match &r.id { WorkId::App(id) => Some(app(id)), WorkId::Driver(_) => None })
            .collect();
        prop_assert!(!owners.is_empty(), "room kept for no application");
        let queues: BTreeMap<_, _> = snapshot.queues.iter().map(|q| (q.name.clone(), q)).collect();
        for victim in &preemption.victims {
            let victim = app(&victim.app);
            let config = queues.get(&victim.queue);
            prop_assert!(!config.is_some_and(|q| q.prior), "a prior executor was chosen");
            let fifo = config.is_none_or(|q| q.ordering == OrderingPolicy::Fifo);
            prop_assert!(
                owners.iter().any(|o| o.queue == victim.queue
                    && (o.priority > victim.priority || (o.priority == victim.priority && !fifo))),
                "{} is outranked by no owner of its leaf", victim.id
            );
            let stopped = preemption.victims.iter().filter(|v| v.app == victim.id).count();
            let minimum = victim.min_executors.unwrap_or(0) as usize;
            prop_assert!(victim.executors.len() - stopped >= minimum, "{} below its gang", victim.id);
        }
        let victims: Vec<_> = preemption.victims.iter().map(|v| (v.app.clone(), v.executor)).collect();
        let rooms: Vec<_> = preemption.reservations.iter()
            .filter_map(|r| match &r.id { WorkId::App(id) => Some((id, &r.resources)), WorkId::Driver(_) => None })
            .collect();
        let checked = muster_core::preempt::check_within_queue(&snapshot, &victims, &rooms);
        prop_assert_eq!(checked, Ok(()));

        // Once the victims have stopped and the owners hold their room, no victim's
        // application takes it back from an owner: they never take turns.
        let mut after = snapshot.clone();
        for victim in &preemption.victims {
            let app = after.apps.make_mut().iter_mut().find(|a| a.id == victim.app).unwrap();
            app.executors.update(|e| e.retain(|e| e.id != Some(victim.executor)));
            let worker = after.workers.make_mut().iter_mut().find(|w| w.id == victim.worker).unwrap();
            worker.used = worker.used.saturating_sub(&victim.resources);
        }
        for (n, reservation) in preemption.reservations.iter().enumerate() {
            let WorkId::App(id) = &reservation.id else { continue };
            let app = after.apps.make_mut().iter_mut().find(|a| &a.id == id).unwrap();
            app.executors.push(HeldExecutor {
                id: Some(ExecutorId(1000 + u32::try_from(n).unwrap())),
                worker: reservation.worker.clone(),
                resources: reservation.resources.clone(),
                profile: reservation.profile,
            });
            let worker = after.workers.make_mut().iter_mut().find(|w| w.id == reservation.worker).unwrap();
            worker.used = worker.used.saturating_add(&reservation.resources);
        }
        let first_owners: Vec<&AppId> = owners.iter().map(|o| &o.id).collect();
        let first_victims: Vec<&AppId> = preemption.victims.iter().map(|v| &v.app).collect();
        if let Some(second) = muster_core::preempt::dry_run(&after, &settings).unwrap() {
            let takes_back = second.victims.iter().any(|v| first_owners.contains(&&v.app))
                && second.reservations.iter().any(|r| {
                    matches!(&r.id, WorkId::App(id) if first_victims.contains(&id))
                });
            prop_assert!(!takes_back, "taken back: {:?} then {:?}", preemption, second);
        }
    }
}

/// A leaf (`fifo`, `fair` or `drf`) of users' applications of random priorities, sizes and
/// gangs, whose executors fill its workers but for what none of them fits in, as a
/// replicated state shows it: where preemption inside a queue has the most to choose from.
fn full_shared_leaf() -> impl Strategy<Value = Snapshot> {
    (
        prop::sample::select(vec![
            OrderingPolicy::Fifo,
            OrderingPolicy::Fair,
            OrderingPolicy::Drf,
        ]),
        prop::collection::vec(
            (2..12u32, prop::sample::select(vec![2048u64, 4096, 8192])),
            1..4,
        ),
        prop::collection::vec(
            (
                prop::sample::select(vec!["a", "b", "c"]),
                prop::sample::select(vec![0, 0, 1, 2]),
                1..4u32,
                prop::sample::select(vec![256u64, 512, 1024]),
                prop::option::weighted(0.2, 1..3u32),
                0..6usize,
            ),
            2..7,
        ),
    )
        .prop_map(|(ordering, workers, apps)| {
            let mut workers: Vec<Worker> = workers
                .into_iter()
                .enumerate()
                .map(|(i, (cores, memory_mb))| Worker {
                    id: format!("w{i}").as_str().into(),
                    host: format!("h{i}").as_str().into(),
                    capacity: Resources::new(cores, memory_mb),
                    used: Resources::default(),
                    state: WorkerState::Alive,
                    hosts_prior: false,
                    without_spark: false,
                })
                .collect();
            let mut requests = Vec::new();
            for (i, (user, priority, cores, memory_mb, min, held)) in apps.into_iter().enumerate() {
                let mut app = AppRequest::new(&format!("app-{i}"));
                app.user = Some(user.into());
                app.priority = priority;
                app.executor_cores = Some(cores);
                app.executor_memory_mb = memory_mb;
                app.min_executors = min.filter(|&min| min as usize <= held);
                let size = Resources::new(cores, memory_mb);
                for n in 0..held {
                    let Some(worker) = workers
                        .iter_mut()
                        .find(|w| w.capacity.saturating_sub(&w.used).fits(&size).is_ok())
                    else {
                        break;
                    };
                    worker.used = worker.used.saturating_add(&size);
                    app.executors.push(HeldExecutor {
                        id: Some(ExecutorId(u32::try_from(n).unwrap())),
                        worker: worker.id.clone(),
                        resources: size.clone(),
                        profile: 0,
                    });
                }
                if app
                    .min_executors
                    .is_some_and(|min| min as usize > app.executors.len())
                {
                    app.min_executors = None;
                }
                requests.push(app);
            }
            Snapshot {
                queues: vec![QueueConfig {
                    ordering,
                    ..QueueConfig::named("default")
                }],
                workers: workers.into(),
                apps: requests.into(),
                ..Snapshot::default()
            }
        })
}

/// A cluster whose ALIVE workers ordinary executors fill, as a replicated state shows it (what
/// each worker uses is what it holds), and prior applications and drivers in `prod` that wait.
fn full_cluster_with_prior_work() -> impl Strategy<Value = Snapshot> {
    (
        config(),
        prop::collection::vec((1..9u32, prop::collection::vec(1..4u32, 8)), 1..8),
        prop::collection::vec(any::<prop::sample::Index>(), 64),
        prop::collection::vec(
            (
                prop::option::of(1..4u32),
                prop::option::of(1..9u32),
                1..3u64,
            ),
            1..4,
        ),
        prop::option::of(1..3u32),
    )
        .prop_map(|(config, workers, owners, prior_apps, prior_driver)| {
            let ordinary = ["default", "team.batch", "team.etl"];
            let mut apps: Vec<AppRequest> = ordinary
                .iter()
                .enumerate()
                .map(|(i, queue)| AppRequest {
                    queue: (*queue).into(),
                    executor_memory_mb: 256,
                    ..AppRequest::new(&format!("app-{i}"))
                })
                .collect();
            let mut owner = owners.iter().cycle();
            let mut snapshot_workers = Vec::new();
            for (w, (cores, sizes)) in workers.iter().enumerate() {
                let id: muster_core::ids::WorkerId = format!("w{w}").as_str().into();
                let mut used = Resources {
                    cores: 0,
                    memory_mb: 0,
                    custom: BTreeMap::new(),
                };
                for size in sizes {
                    let size = (*size).min(cores - used.cores);
                    if size == 0 {
                        break;
                    }
                    let app = owner.next().unwrap().index(apps.len());
                    let resources = Resources {
                        cores: size,
                        memory_mb: 256,
                        custom: BTreeMap::new(),
                    };
                    used = used.checked_add(&resources).unwrap();
                    let executors = &mut apps[app].executors;
                    executors.push(HeldExecutor {
                        id: Some(muster_core::ids::ExecutorId(executors.len() as u32)),
                        worker: id.clone(),
                        resources,
                        profile: 0,
                    });
                }
                snapshot_workers.push(Worker {
                    id,
                    host: Default::default(),
                    capacity: Resources {
                        cores: *cores,
                        memory_mb: 256 * u64::from(*cores) + 512,
                        custom: BTreeMap::new(),
                    },
                    used,
                    state: WorkerState::Alive,
                    hosts_prior: false,
                    without_spark: false,
                });
            }
            for (i, (executor_cores, cores_max, _)) in prior_apps.iter().enumerate() {
                apps.push(AppRequest {
                    queue: "prod".into(),
                    cores_max: *cores_max,
                    executor_cores: *executor_cores,
                    executor_memory_mb: 256,
                    ..AppRequest::new(&format!("prior-{i}"))
                });
            }
            let queues = QUEUES
                .iter()
                .map(|name| QueueConfig {
                    prior: *name == "prod",
                    ..QueueConfig::named(name)
                })
                .chain([QueueConfig::named("team")])
                .collect();
            Snapshot {
                config,
                queues,
                workers: snapshot_workers.into(),
                running_drivers: 0,
                drivers_hold: BTreeMap::new(),
                drivers: prior_driver
                    .map(|cores| DriverRequest {
                        id: "driver-prior".into(),
                        need: Resources {
                            cores,
                            memory_mb: 256,
                            custom: BTreeMap::new(),
                        },
                        queue: "prod".into(),
                        gang: None,
                        priority: 0,
                        spark: false,
                    })
                    .into_iter()
                    .collect(),
                pending_gangs: Vec::new(),
                apps: apps.into(),
                preemption: None,
            }
        })
}

/// `snapshot` with the executors `victims` name stopped and their room free.
fn without_victims(snapshot: &Snapshot, victims: &[muster_core::preempt::Victim]) -> Snapshot {
    let mut rest = snapshot.clone();
    for app in rest.apps.make_mut() {
        let mut index = 0;
        let app_id = app.id.clone();
        app.executors.update(|executors| {
            executors.retain(|e| {
                let id = e.id.unwrap_or(muster_core::ids::ExecutorId(index));
                index += 1;
                !victims.iter().any(|v| v.app == app_id && v.executor == id)
            })
        });
    }
    for victim in victims {
        let worker = rest
            .workers
            .make_mut()
            .iter_mut()
            .find(|w| w.id == victim.worker)
            .unwrap();
        worker.used = worker.used.saturating_sub(&victim.resources);
    }
    rest
}

/// The cores a pass over `snapshot` gives the drivers and applications of `queues`.
fn served_to(snapshot: &Snapshot, queues: &[muster_core::ids::QueueName]) -> u64 {
    let plan = schedule(snapshot).unwrap();
    let drivers: u64 = plan
        .drivers
        .iter()
        .filter_map(|d| snapshot.drivers.iter().find(|r| r.id == d.driver))
        .filter(|d| queues.contains(&d.queue))
        .map(|d| u64::from(d.need.cores))
        .sum();
    let executors: u64 = plan
        .executors
        .iter()
        .filter(|g| {
            snapshot
                .apps
                .iter()
                .any(|a| a.id == g.app && queues.contains(&a.queue))
        })
        .map(|g| u64::from(g.resources.cores) * u64::from(g.count))
        .sum();
    drivers + executors
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No executor is stopped in vain: with any one victim kept running, a pass serves the
    /// prior work less than with all of them stopped, and with all of them stopped more than
    /// with none.
    #[test]
    fn preemption_stops_no_executor_the_prior_work_does_without(
        snapshot in full_cluster_with_prior_work(),
        fraction in 0.05f64..=1.0,
    ) {
        let prior = vec![muster_core::ids::QueueName::from("prod")];
        let settings = muster_core::preempt::PreemptionSettings { queues: prior.clone(), max_fraction: fraction, capacities: false, within_queues: false };
        let Some(preemption) = muster_core::preempt::dry_run(&snapshot, &settings).unwrap() else {
            return Ok(());
        };
        let served = served_to(&without_victims(&snapshot, &preemption.victims), &prior);
        prop_assert!(served > served_to(&snapshot, &prior), "the victims serve nothing more");
        for i in 0..preemption.victims.len() {
            let mut kept = preemption.victims.clone();
            let spared = kept.remove(i);
            prop_assert!(
                served_to(&without_victims(&snapshot, &kept), &prior) < served,
                "{spared:?} was stopped, and the prior work is served as much without stopping it"
            );
        }
    }
}
