//! Property tests over random command sequences.
//!
//! SAFETY: no sequence breaks an invariant (the harness checks after every command) and a
//! refused command changes nothing.
//! DURABILITY: applying a prefix, snapshotting, restoring and applying the rest gives exactly
//! the state of applying everything.
//! GROUP COMMIT: commands applied as one batch entry give the results and the state of
//! applying them one entry each.
//! ACCESS: a named user's request with a revoked or unknown credential, or a non-admin's
//! change to the cluster itself, is always refused; what a named user submits is theirs.
//!
//! The sequences hold every op but `Batch` (which the group-commit property builds), and a
//! preemption chosen from the state it applies to, for prior work or for guarantees, is
//! always accepted.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use muster_core::access::QueueSpec;
use muster_core::ids::{ExecutorId, QueueName, WorkId};
use muster_core::ids::{Term, Timestamp};
use muster_core::model::{GangRequest, PassConfig, WorkerSelection};
use muster_core::preempt::Preempting;
use muster_core::resources::{ResourceAddresses, Resources};
use muster_state::commands::{
    AddUser, AppFinished, By, DecommissionWorker, DrainWorker, DriverStateChanged,
    ExecutorStateChanged, GrantReservations, KillApp, KillDriver, KillExecutors, Preempt,
    QueueSettings, RaiseLogFormat, RegisterWorker, Restore, RevokeUser, SetExecutorLimit,
    SetQueues, SubmitApp, SubmitDriver, SubmitGang, SubmitGangDriver, WorkerLost, plan_op,
    set_queues_op,
};
use muster_state::model::{AppState, DriverState, ExecutorState};
use muster_state::version::LogFormat;
use muster_state::{ClusterState, Command, Op, Outcome, Stopped};
use proptest::prelude::*;

use crate::support::{Cluster, app_desc, driver_desc};

/// A command in terms of indexes into whatever exists when it runs, so that random sequences
/// mostly name real workers, apps, executors and drivers.
#[derive(Clone, Debug)]
enum Action {
    Register {
        worker: u8,
        cores: u32,
        memory_units: u64,
        gpus: u32,
        /// Whether it names its GPUs' addresses (`g0`, `g1`, ...) rather than numbering them.
        named: bool,
    },
    Lose {
        worker: u8,
    },
    Decommission {
        worker: u8,
    },
    SubmitApp {
        queue: u8,
        cores_max: Option<u32>,
        executor_cores: Option<u32>,
        memory_mb: u64,
        limit: Option<u32>,
        /// Its gang's minimum, if it is one.
        gang: Option<u32>,
    },
    SubmitDriver {
        queue: u8,
        cores: u32,
        supervise: bool,
        /// Its application's gang's minimum, of one-core executors, if it is one.
        gang: Option<u32>,
    },
    KillApp {
        app: u8,
    },
    /// The preemption `muster_core::preempt` chooses for every waiting prior app and driver.
    Preempt {
        grace_ms: u64,
    },
    /// The preemption it chooses for every app of an ordinary queue below its guarantee.
    PreemptForGuarantees {
        grace_ms: u64,
    },
    /// Room kept for one owner (or for all of them) granted.
    Grant {
        owner: u8,
        all: bool,
    },
    /// The snapshot of a cluster that ran work restored (refused unless nothing was ever
    /// submitted here).
    Restore,
    /// The log format raised to the newest.
    Raise,
    /// A stopped process's end reported by its worker.
    StoppedEnds {
        process: u8,
    },
    KillDriver {
        driver: u8,
    },
    SetLimit {
        app: u8,
        limit: Option<u32>,
    },
    KillExecutors {
        app: u8,
        executors: Vec<u32>,
    },
    Schedule {
        spread_out: bool,
        policy: u8,
    },
    ExecutorReport {
        app: u8,
        executor: u8,
        state: u8,
        exit_code: Option<i32>,
    },
    DriverReport {
        driver: u8,
        state: u8,
        exit_code: Option<i32>,
    },
    Finish {
        app: u8,
        state: u8,
    },
    SetQueues {
        prior: bool,
        threshold: u8,
        /// As builds before access lists wrote it (`SetQueues`), or with them.
        legacy: bool,
        /// Who may submit to `prod` (a user index), when it lists anyone.
        prod_submit: Option<u8>,
        max_per_user: Option<u32>,
        /// prod's guaranteed share in tenths, batch getting the rest (`default` nothing).
        prod_capacity: Option<u8>,
    },
    Drain {
        worker: u8,
        kill_after_ms: Option<u64>,
    },
    AddUser {
        user: u8,
        admin: bool,
    },
    RevokeUser {
        user: u8,
    },
    /// `action` asked by named user `user`, with their current credential or a stale one.
    By {
        user: u8,
        stale: bool,
        action: Box<Action>,
    },
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (0..6u8, small(16), small(16).prop_map(u64::from), 0..3u32, any::<bool>()).prop_map(|(worker, cores, memory_units, gpus, named)| Action::Register { worker, cores, memory_units, gpus, named }),
        1 => any::<u8>().prop_map(|worker| Action::Lose { worker }),
        1 => any::<u8>().prop_map(|worker| Action::Decommission { worker }),
        4 => (0..3u8, prop::option::of(small(10)), prop::option::of(small(4)), small(4).prop_map(|m| u64::from(m) * 256), prop::option::of(0..5u32), prop::option::weighted(0.2, 0..4u32))
            .prop_map(|(queue, cores_max, executor_cores, memory_mb, limit, gang)| Action::SubmitApp { queue, cores_max, executor_cores, memory_mb, limit, gang }),
        2 => (0..3u8, small(3), any::<bool>(), prop::option::weighted(0.2, 0..4u32)).prop_map(|(queue, cores, supervise, gang)| Action::SubmitDriver { queue, cores, supervise, gang }),
        1 => any::<u8>().prop_map(|app| Action::KillApp { app }),
        4 => (0..4000u64).prop_map(|grace_ms| Action::Preempt { grace_ms }),
        2 => (0..4000u64).prop_map(|grace_ms| Action::PreemptForGuarantees { grace_ms }),
        2 => (any::<u8>(), any::<bool>()).prop_map(|(owner, all)| Action::Grant { owner, all }),
        1 => Just(Action::Restore),
        1 => Just(Action::Raise),
        3 => any::<u8>().prop_map(|process| Action::StoppedEnds { process }),
        1 => any::<u8>().prop_map(|driver| Action::KillDriver { driver }),
        1 => (any::<u8>(), prop::option::of(0..4u32)).prop_map(|(app, limit)| Action::SetLimit { app, limit }),
        1 => (any::<u8>(), prop::collection::vec(0..6u32, 0..3)).prop_map(|(app, executors)| Action::KillExecutors { app, executors }),
        6 => (any::<bool>(), 0..5u8).prop_map(|(spread_out, policy)| Action::Schedule { spread_out, policy }),
        6 => (any::<u8>(), any::<u8>(), prop_oneof![3 => Just(1u8), 4 => 0..6u8], prop::option::of(-1..2i32)).prop_map(|(app, executor, state, exit_code)| Action::ExecutorReport { app, executor, state, exit_code }),
        2 => (any::<u8>(), 0..7u8, prop::option::of(0..2i32)).prop_map(|(driver, state, exit_code)| Action::DriverReport { driver, state, exit_code }),
        1 => (any::<u8>(), 0..5u8).prop_map(|(app, state)| Action::Finish { app, state }),
        2 => queues(),
        1 => (any::<u8>(), prop::option::of(0..60_000u64)).prop_map(|(worker, kill_after_ms)| Action::Drain { worker, kill_after_ms }),
        1 => (0..3u8, any::<bool>()).prop_map(|(user, admin)| Action::AddUser { user, admin }),
        1 => (0..3u8).prop_map(|user| Action::RevokeUser { user }),
        4 => (0..3u8, prop::bool::weighted(0.2), users_action()).prop_map(|(user, stale, action)| Action::By { user, stale, action: Box::new(action) }),
    ]
}

fn queues() -> impl Strategy<Value = Action> {
    (
        prop::bool::weighted(0.8),
        1..=10u8,
        any::<bool>(),
        prop::option::of(0..3u8),
        prop::option::of(0..3u32),
        prop::option::of(5..=10u8),
    )
        .prop_map(
            |(prior, threshold, legacy, prod_submit, max_per_user, prod_capacity)| {
                Action::SetQueues {
                    prior,
                    threshold,
                    legacy,
                    prod_submit,
                    max_per_user,
                    prod_capacity,
                }
            },
        )
}

/// What named users ask for: work, kills, and changes only admins may make.
fn users_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (0..3u8, prop::option::of(small(10)), prop::option::of(small(4)), small(4).prop_map(|m| u64::from(m) * 256))
            .prop_map(|(queue, cores_max, executor_cores, memory_mb)| Action::SubmitApp { queue, cores_max, executor_cores, memory_mb, limit: None, gang: None }),
        2 => (0..3u8, small(3), any::<bool>()).prop_map(|(queue, cores, supervise)| Action::SubmitDriver { queue, cores, supervise, gang: None }),
        2 => any::<u8>().prop_map(|app| Action::KillApp { app }),
        2 => any::<u8>().prop_map(|driver| Action::KillDriver { driver }),
        1 => queues(),
        1 => (0..3u8).prop_map(|user| Action::RevokeUser { user }),
    ]
}

/// A count in `1..=max` mostly, and sometimes the invalid 0.
fn small(max: u32) -> impl Strategy<Value = u32> {
    prop_oneof![1 => Just(0), 12 => 1..=max]
}

fn pick<T: Clone>(items: &[T], index: u8) -> Option<T> {
    (!items.is_empty()).then(|| items[usize::from(index) % items.len()].clone())
}

const QUEUES: [&str; 3] = ["default", "prod", "batch"];
const USERS: [&str; 3] = ["alice", "bob", "carol"];
const EXECUTOR_STATES: [ExecutorState; 6] = [
    ExecutorState::Launching,
    ExecutorState::Running,
    ExecutorState::Killed,
    ExecutorState::Failed,
    ExecutorState::Lost,
    ExecutorState::Exited,
];
const DRIVER_STATES: [DriverState; 7] = [
    DriverState::Submitted,
    DriverState::Running,
    DriverState::Finished,
    DriverState::Relaunching,
    DriverState::Killed,
    DriverState::Failed,
    DriverState::Error,
];
const APP_STATES: [AppState; 5] = [
    AppState::Waiting,
    AppState::Running,
    AppState::Finished,
    AppState::Failed,
    AppState::Killed,
];
const POLICIES: [WorkerSelection; 5] = [
    WorkerSelection::CoresFreeAsc,
    WorkerSelection::CoresFreeDesc,
    WorkerSelection::MemoryFreeAsc,
    WorkerSelection::MemoryFreeDesc,
    WorkerSelection::WorkerId,
];

/// The op an action stands for in `state`, or `None` when it names nothing that exists.
fn resolve(state: &ClusterState, action: &Action) -> Option<Op> {
    let workers: Vec<_> = state.workers().keys().cloned().collect();
    let apps: Vec<_> = state.apps().keys().cloned().collect();
    let drivers: Vec<_> = state.drivers().keys().cloned().collect();
    Some(match action.clone() {
        Action::Register {
            worker,
            cores,
            memory_units,
            gpus,
            named,
        } => {
            let worker = RegisterWorker {
                id: format!("w{worker}").as_str().into(),
                host: "h".into(),
                address: "h:1".into(),
                resources: Resources::new(cores, memory_units * 512).with_custom(if gpus > 0 {
                    [("gpu".to_string(), gpus)].into()
                } else {
                    BTreeMap::new()
                }),
                fence_grace_ms: None,
            };
            let addresses = if named && gpus > 0 {
                [(
                    "gpu".to_owned(),
                    (0..gpus).map(|g| format!("g{g}")).collect(),
                )]
                .into()
            } else {
                ResourceAddresses::new()
            };
            worker.op(addresses)
        }
        Action::Lose { worker } => Op::WorkerLost(WorkerLost {
            id: pick(&workers, worker)?,
            reason: "test".into(),
        }),
        Action::Decommission { worker } => Op::DecommissionWorker(DecommissionWorker {
            id: pick(&workers, worker)?,
        }),
        Action::SubmitApp {
            queue,
            cores_max,
            executor_cores,
            memory_mb,
            limit,
            gang,
        } => {
            let mut desc = app_desc(cores_max, executor_cores, memory_mb);
            desc.queue = QUEUES[usize::from(queue)].into();
            let app = SubmitApp {
                desc,
                executor_limit: limit,
            };
            match gang {
                // Registered by a driver, as a cluster-mode driver's application is.
                Some(min_executors) => Op::SubmitGang(SubmitGang {
                    app,
                    min_executors,
                    driver: pick(&drivers, queue),
                }),
                None => Op::SubmitApp(app),
            }
        }
        Action::SubmitDriver {
            queue,
            cores,
            supervise,
            gang,
        } => {
            let mut desc = driver_desc(cores, 512, supervise);
            desc.queue = QUEUES[usize::from(queue)].into();
            let driver = SubmitDriver { desc };
            match gang {
                Some(min_executors) => Op::SubmitGangDriver(SubmitGangDriver {
                    driver,
                    gang: GangRequest {
                        min_executors,
                        executor_cores: 1,
                        executor_memory_mb: 256,
                        executor_resources: BTreeMap::new(),
                    },
                }),
                None => Op::SubmitDriver(driver),
            }
        }
        Action::KillApp { app } => Op::KillApp(KillApp {
            id: pick(&apps, app)?,
        }),
        Action::Preempt { grace_ms } => {
            let snapshot = state.scheduling_snapshot(PassConfig::default());
            let prior =
                |queue: &QueueName| snapshot.queues.iter().any(|q| &q.name == queue && q.prior);
            let eligible = snapshot
                .apps
                .iter()
                .filter(|a| prior(&a.queue))
                .map(|a| WorkId::App(a.id.clone()))
                .chain(
                    snapshot
                        .drivers
                        .iter()
                        .filter(|d| prior(&d.queue))
                        .map(|d| WorkId::Driver(d.id.clone())),
                )
                .collect();
            let chosen = muster_core::preempt::choose(&snapshot, &eligible, 1.0, Preempting::Prior)
                .expect("the state gives a valid snapshot")?;
            Op::Preempt(Preempt::chosen(chosen, grace_ms))
        }
        Action::PreemptForGuarantees { grace_ms } => {
            let snapshot = state.scheduling_snapshot(PassConfig::default());
            // As the leader asks: apps of queues without room kept for them already.
            let eligible = snapshot
                .apps
                .iter()
                .filter(|a| !state.room_kept_for_queue(&a.queue))
                .map(|a| WorkId::App(a.id.clone()))
                .collect();
            let chosen =
                muster_core::preempt::choose(&snapshot, &eligible, 1.0, Preempting::BelowGuarantee)
                    .expect("the state gives a valid snapshot")?;
            Op::PreemptForGuarantees(Preempt::chosen(chosen, grace_ms))
        }
        Action::Grant { owner, all } => {
            let owners: Vec<WorkId> = state
                .reservations()
                .iter()
                .map(|r| r.owner.clone())
                .collect();
            let owners = if all {
                owners
            } else {
                vec![pick(&owners, owner)?]
            };
            Op::GrantReservations(GrantReservations { owners })
        }
        Action::Raise => Op::RaiseLogFormat(RaiseLogFormat {
            to: LogFormat::NEWEST,
        }),
        Action::StoppedEnds { process } => {
            let stopped: Vec<Stopped> = state.stopping().map(|(p, _, _)| p.clone()).collect();
            match pick(&stopped, process)? {
                Stopped::Executor(app, executor) => {
                    Op::ExecutorStateChanged(ExecutorStateChanged {
                        app,
                        executor,
                        state: ExecutorState::Killed,
                        exit_code: None,
                    })
                }
                Stopped::Driver(driver) => Op::DriverStateChanged(DriverStateChanged {
                    driver,
                    state: DriverState::Killed,
                    exit_code: None,
                }),
            }
        }
        Action::Restore => Op::Restore(Restore {
            snapshot: donor_snapshot().clone(),
        }),
        Action::KillDriver { driver } => Op::KillDriver(KillDriver {
            id: pick(&drivers, driver)?,
        }),
        Action::SetLimit { app, limit } => Op::SetExecutorLimit(SetExecutorLimit {
            app: pick(&apps, app)?,
            limit,
        }),
        Action::KillExecutors { app, executors } => Op::KillExecutors(KillExecutors {
            app: pick(&apps, app)?,
            executors: executors.into_iter().map(ExecutorId).collect(),
        }),
        Action::Schedule { spread_out, policy } => {
            let config = PassConfig {
                spread_out_apps: spread_out,
                worker_selection: POLICIES[usize::from(policy)],
                ..PassConfig::default()
            };
            let plan = muster_core::schedule(&state.scheduling_snapshot(config))
                .expect("the state gives a valid snapshot");
            plan_op(&plan)
        }
        Action::ExecutorReport {
            app,
            executor,
            state: s,
            exit_code,
        } => {
            let with_executors: Vec<_> = apps
                .iter()
                .filter(|a| !state.apps()[*a].executors.is_empty())
                .cloned()
                .collect();
            let app = pick(&with_executors, app).or_else(|| pick(&apps, app))?;
            let executors: Vec<_> = state.apps()[&app].executors.keys().copied().collect();
            let executor = pick(&executors, executor).unwrap_or(ExecutorId(u32::from(executor)));
            Op::ExecutorStateChanged(ExecutorStateChanged {
                app,
                executor,
                state: EXECUTOR_STATES[usize::from(s)],
                exit_code,
            })
        }
        Action::DriverReport {
            driver,
            state: s,
            exit_code,
        } => Op::DriverStateChanged(DriverStateChanged {
            driver: pick(&drivers, driver)?,
            state: DRIVER_STATES[usize::from(s)],
            exit_code,
        }),
        Action::Finish { app, state: s } => Op::AppFinished(AppFinished {
            id: pick(&apps, app)?,
            state: APP_STATES[usize::from(s)],
        }),
        Action::SetQueues {
            prior,
            threshold,
            legacy,
            prod_submit,
            max_per_user,
            prod_capacity,
        } => {
            let queues = vec![
                QueueSettings {
                    name: "prod".into(),
                    prior,
                    threshold: 1.0,
                    max_capacity: 1.0,
                },
                QueueSettings {
                    name: "batch".into(),
                    prior: false,
                    threshold: f64::from(threshold) / 10.0,
                    max_capacity: 0.5,
                },
            ];
            if legacy {
                Op::SetQueues(SetQueues { queues })
            } else {
                let mut specs: Vec<QueueSpec> = queues
                    .into_iter()
                    .map(|q| {
                        QueueSpec::from((
                            q.config(&BTreeMap::new(), &BTreeMap::new(), &BTreeMap::new()),
                            Default::default(),
                        ))
                    })
                    .collect();
                specs[0].submit = prod_submit.map(|u| vec![USERS[usize::from(u)].to_owned()]);
                specs[1].max_per_user = max_per_user;
                if let Some(tenths) = prod_capacity {
                    // batch's max_capacity is 0.5, so it may be promised at most that.
                    specs[0].capacity = Some(f64::from(tenths) / 10.0);
                    specs[1].capacity = Some(1.0 - f64::from(tenths) / 10.0);
                }
                set_queues_op(specs)
            }
        }
        Action::Drain {
            worker,
            kill_after_ms,
        } => Op::DrainWorker(DrainWorker {
            id: pick(&workers, worker)?,
            kill_after_ms,
        }),
        Action::AddUser { user, admin } => Op::AddUser(AddUser {
            name: USERS[usize::from(user)].to_owned(),
            admin,
        }),
        Action::RevokeUser { user } => Op::RevokeUser(RevokeUser {
            name: USERS[usize::from(user)].to_owned(),
        }),
        Action::By {
            user,
            stale,
            action,
        } => {
            let name = USERS[usize::from(user)];
            let current = state.users().get(name).map_or(1, |u| u.generation);
            Op::By(By {
                user: name.to_owned(),
                generation: if stale { current + 1 } else { current },
                op: Box::new(resolve(state, &action)?),
            })
        }
    })
}

/// The snapshot of a cluster that ran work: two workers (one naming its GPUs), prior and
/// capacity queues, an app with executors running, a driver placed and one waiting.
fn donor_snapshot() -> &'static Vec<u8> {
    static SNAPSHOT: OnceLock<Vec<u8>> = OnceLock::new();
    SNAPSHOT.get_or_init(|| {
        let mut donor = Cluster::new();
        let actions = [
            Action::Register {
                worker: 0,
                cores: 8,
                memory_units: 8,
                gpus: 2,
                named: true,
            },
            Action::Register {
                worker: 1,
                cores: 4,
                memory_units: 4,
                gpus: 0,
                named: false,
            },
            Action::SetQueues {
                prior: true,
                threshold: 8,
                legacy: false,
                prod_submit: None,
                max_per_user: None,
                prod_capacity: Some(6),
            },
            Action::SubmitApp {
                queue: 2,
                cores_max: Some(6),
                executor_cores: Some(2),
                memory_mb: 512,
                limit: None,
                gang: None,
            },
            Action::SubmitDriver {
                queue: 1,
                cores: 1,
                supervise: true,
                gang: None,
            },
            Action::Schedule {
                spread_out: true,
                policy: 0,
            },
            Action::ExecutorReport {
                app: 0,
                executor: 0,
                state: 1,
                exit_code: None,
            },
            Action::SubmitDriver {
                queue: 0,
                cores: 16,
                supervise: false,
                gang: None,
            },
        ];
        run(&mut donor, &actions);
        assert!(!donor.state.apps().is_empty() && donor.state.drivers().len() == 2);
        donor.state.encode_snapshot()
    })
}

/// Checks what a named user's request did against who they are in `before`: a revoked,
/// unknown or stale credential and a non-admin's change to the cluster are refused; a
/// submission that went through is recorded as theirs.
fn check_access(before: &ClusterState, after: &ClusterState, by: &By, accepted: bool) {
    let user = before
        .users()
        .get(&by.user)
        .filter(|u| !u.revoked && u.generation == by.generation);
    let Some(user) = user else {
        assert!(!accepted, "{by:?} went through without a valid credential");
        return;
    };
    let work = matches!(
        *by.op,
        Op::SubmitApp(_)
            | Op::SubmitGang(_)
            | Op::SubmitDriver(_)
            | Op::KillApp(_)
            | Op::KillDriver(_)
    );
    assert!(
        !accepted || user.admin || work,
        "a non-admin changed the cluster: {by:?}"
    );
    if accepted {
        let new_app = after
            .apps()
            .keys()
            .find(|id| !before.apps().contains_key(*id));
        if let Some(app) = new_app {
            assert_eq!(after.apps()[app].desc.user, by.user);
            assert_eq!(after.app_user(app), Some(by.user.as_str()));
        }
        let new_driver = after
            .drivers()
            .keys()
            .find(|id| !before.drivers().contains_key(*id));
        if let Some(driver) = new_driver.filter(|_| matches!(*by.op, Op::SubmitDriver(_))) {
            let owner = after.driver_owner(driver).expect("an owner");
            assert_eq!((&owner.user, owner.generation), (&by.user, by.generation));
        }
    }
}

/// Runs `actions` through the checking harness; returns the cluster. A preemption chosen
/// from the state it applies to is always accepted.
fn run(cluster: &mut Cluster, actions: &[Action]) {
    for action in actions {
        if let Some(op) = resolve(&cluster.state, action) {
            let preempt = matches!(op, Op::Preempt(_) | Op::PreemptForGuarantees(_));
            let before = matches!(op, Op::By(_)).then(|| (cluster.state.clone(), op.clone()));
            let result = cluster.apply(op);
            assert!(
                !preempt || result.is_ok(),
                "a chosen preemption was refused: {result:?}"
            );
            if let Some((state, Op::By(by))) = before {
                check_access(&state, &cluster.state, &by, result.is_ok());
            }
            check_work_to_place(&cluster.state);
        }
    }
}

/// A state with no work to place gives a pass that plans nothing and leaves nothing waiting,
/// with or without default cores: the leader skips such passes.
fn check_work_to_place(state: &ClusterState) {
    for default_cores in [None, Some(2)] {
        if state.has_work_to_place(default_cores) {
            continue;
        }
        let config = PassConfig {
            default_cores,
            ..PassConfig::default()
        };
        let plan = muster_core::schedule(&state.scheduling_snapshot(config)).unwrap();
        assert!(
            plan.drivers.is_empty() && plan.executors.is_empty() && plan.waiting.is_empty(),
            "a state with no work to place planned {plan:?}"
        );
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn random_commands_keep_every_invariant(actions in prop::collection::vec(action(), 1..80)) {
        run(&mut Cluster::new(), &actions);
    }

    #[test]
    fn snapshot_restore_then_apply_equals_apply(actions in prop::collection::vec(action(), 1..80), split in any::<prop::sample::Index>()) {
        let split = split.index(actions.len() + 1);
        let mut straight = Cluster::new();
        run(&mut straight, &actions);

        let mut first = Cluster::new();
        run(&mut first, &actions[..split]);
        let restored = ClusterState::decode_snapshot(&first.state.encode_snapshot()).unwrap();
        prop_assert_eq!(&restored, &first.state);
        let mut second = Cluster { state: restored, clock: first.clock };
        run(&mut second, &actions[split..]);
        prop_assert_eq!(second.state, straight.state);
    }

    #[test]
    fn a_batch_applies_like_its_commands_one_by_one(actions in prop::collection::vec(action(), 1..80), split in any::<prop::sample::Index>()) {
        let split = split.index(actions.len() + 1);
        let mut single = Cluster::new();
        run(&mut single, &actions[..split]);
        let mut batched = single.state.clone();
        // The rest, each resolved against the state the ones before it made.
        let mut commands = Vec::new();
        let mut results = Vec::new();
        for (at, action) in actions[split..].iter().enumerate() {
            let Some(op) = resolve(&single.state, action) else { continue };
            let command = Command {
                at: Timestamp(at as u64 * 1000),
                request_id: None,
                term: Some(Term(1)),
                op,
            };
            results.push(single.state.apply_in_term(Term(1), &command));
            commands.push(command);
        }
        let batch = Command { at: Timestamp(0), request_id: None, term: None, op: Op::Batch(commands) };
        let response = batched.apply_in_term(Term(1), &batch).unwrap();
        prop_assert_eq!(response.outcome, Outcome::Batch(results));
        prop_assert_eq!(&batched, &single.state);
        // A batch inside a batch, and a leader's command from an older term, are refused.
        let inner = Command { at: Timestamp(0), request_id: None, term: None, op: Op::Batch(Vec::new()) };
        let stale = Command {
            at: Timestamp(0),
            request_id: None,
            term: Some(Term(1)),
            op: Op::KillApp(KillApp { id: "app-1".into() }),
        };
        let outer = Command { at: Timestamp(0), request_id: None, term: None, op: Op::Batch(vec![inner, stale]) };
        let response = batched.apply_in_term(Term(2), &outer).unwrap();
        let Outcome::Batch(refusals) = response.outcome else { panic!("a batch outcome") };
        prop_assert_eq!(&refusals[0], &Err(muster_state::ApplyError::Batch));
        let stale_refused = matches!(refusals[1], Err(muster_state::ApplyError::StaleTerm { .. }));
        prop_assert!(stale_refused, "{:?}", refusals[1]);
        prop_assert_eq!(&batched, &single.state);
    }
}
