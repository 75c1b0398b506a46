//! Queue configuration: the tree with capacities is one command validated as a whole, work
//! goes only to leaves, the ops of earlier builds still read and apply, a queue's driver
//! share is written only once every master reads it and bounds its drivers, a gang is
//! granted all of its minimum or nothing and stops waiting by its style at its timeout, a
//! leaf's ordering shares it among users, an application's priority is capped by its queue
//! and set by its owner, and preemption for guarantees takes no queue below its own.

use std::collections::BTreeSet;

use muster_core::access::QueueSpec;
use muster_core::ids::{AppId, WorkId};
use muster_core::model::{GangRequest, GangStyle, OrderingPolicy, PassConfig};
use muster_core::plan::WaitReason;
use muster_core::preempt::{Preempting, choose};
use muster_state::commands::{
    AddUser, By, EndGangWait, KillApp, Preempt, PreemptWithinQueue, QueueSettings, RaiseLogFormat,
    SetAppPriority, SetQueues, SubmitApp, SubmitDriver, SubmitGang, SubmitGangDriver,
    SubmitWithSettings, WorkerLost, set_queues_op, submit_app_op,
};
use muster_state::model::DriverState;
use muster_state::version::LogFormat;
use muster_state::{ApplyError, Op, Outcome};

use crate::support::{Cluster, app_desc, driver_desc, fixture};

fn queue(name: &str, capacity: f64) -> QueueSpec {
    QueueSpec {
        capacity: Some(capacity),
        ..QueueSpec::named(name)
    }
}

/// An application of `queue` with these cores and 256 MB executors.
/// Room for `min` executors of `cores` cores and 256 MB each.
fn executors(min: u32, cores: u32) -> GangRequest {
    GangRequest {
        min_executors: min,
        executor_cores: cores,
        executor_memory_mb: 256,
        executor_resources: Default::default(),
    }
}

/// Submits a one-core driver whose application needs `room` first; its id.
fn submit_driver_beside(c: &mut Cluster, room: &GangRequest) -> muster_core::ids::DriverId {
    let op = Op::SubmitGangDriver(SubmitGangDriver {
        driver: muster_state::commands::SubmitDriver {
            desc: driver_desc(1, 256, false),
        },
        gang: room.clone(),
    });
    assert_eq!(op.introduced_in(), LogFormat::FOURTH);
    match c.ok(op).outcome {
        muster_state::Outcome::DriverSubmitted { id } => id,
        other => panic!("{other:?}"),
    }
}

fn in_queue(
    queue: &str,
    cores_max: Option<u32>,
    executor_cores: Option<u32>,
) -> muster_state::model::AppDescription {
    let mut desc = app_desc(cores_max, executor_cores, 256);
    desc.queue = queue.into();
    desc
}

fn submit(c: &mut Cluster, queue: &str) -> Result<muster_state::Response, ApplyError> {
    c.apply(Op::SubmitApp(muster_state::commands::SubmitApp {
        desc: in_queue(queue, None, None),
        executor_limit: None,
    }))
}

#[test]
fn the_tree_with_capacities_is_set_as_a_whole_and_reaches_the_pass() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    let tree = vec![queue("default", 0.0), queue("a", 0.5), queue("b", 0.5)];
    let op = set_queues_op(tree);
    assert!(matches!(op, Op::ConfigureQueues(_)), "{op:?}");
    c.ok(op);
    assert_eq!(c.state.queues()[1].capacity, Some(0.5));
    assert_eq!(c.state.queue_specs()[2].capacity, Some(0.5));

    // The pass sees the capacities: a's app borrows b's idle half.
    submit(&mut c, "a").unwrap();
    c.schedule();
    let held: u64 = c.state.apps().values().map(|a| a.cores_granted).sum();
    assert_eq!(held, 8, "a alone takes the whole cluster");

    // Capacities that do not sum are refused, naming the parent, and change nothing.
    let before = c.state.clone();
    let error = c
        .apply(set_queues_op(vec![
            queue("default", 0.0),
            queue("a", 0.5),
            queue("b", 0.4),
        ]))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "queues: the capacities of the top-level queues sum to 0.9, not 1: a 0.5, b 0.4, \
         default 0"
    );
    assert_eq!(c.state, before);
}

#[test]
fn a_queues_driver_share_is_of_log_format_4_and_bounds_its_running_drivers() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    let tree = vec![
        QueueSpec {
            driver_share: Some(0.25),
            ..QueueSpec::named("etl")
        },
        QueueSpec::named("default"),
    ];
    // Without a share the older op is written; with one, the op of log format 4.
    assert!(matches!(
        set_queues_op(vec![QueueSpec::named("etl")]),
        Op::SetQueues(_)
    ));
    let op = set_queues_op(tree.clone());
    assert!(matches!(op, Op::ConfigureQueuesWithAdmission(_)), "{op:?}");
    assert_eq!(op.introduced_in(), LogFormat::FOURTH);
    c.ok(Op::RaiseLogFormat(RaiseLogFormat {
        to: LogFormat::FOURTH,
    }));
    c.ok(op);
    assert_eq!(c.state.queue_specs(), tree);

    // Four drivers of etl: its share of 0.25 of 8 cores lets two run.
    let mut desc = driver_desc(1, 256, false);
    desc.queue = "etl".into();
    let drivers: Vec<_> = (0..4).map(|_| c.submit_driver(desc.clone())).collect();
    c.schedule();
    let running = |c: &Cluster| {
        drivers
            .iter()
            .filter(|d| c.state.drivers()[*d].state == DriverState::Running)
            .count()
    };
    assert_eq!(running(&c), 2);
    let snapshot = c.state.scheduling_snapshot(PassConfig::default());
    let hold = snapshot.drivers_hold[&"etl".into()];
    assert_eq!((hold.cores, hold.memory_mb), (2, 512));
    assert_eq!(snapshot.queues[0].driver_share, Some(0.25));
    let plan = muster_core::schedule(&snapshot).unwrap();
    assert!(plan.drivers.is_empty());
    assert_eq!(
        plan.waiting[0].reason.to_string(),
        "drivers of queue `etl` hold 2 of 2 cores allowed (driver share 0.25)"
    );

    // A share on a parent queue, or outside (0, 1], is refused and changes nothing.
    let before = c.state.clone();
    let parent = vec![
        QueueSpec {
            driver_share: Some(0.5),
            ..QueueSpec::named("team")
        },
        QueueSpec::named("team.etl"),
        QueueSpec::named("etl"),
    ];
    let error = c.apply(set_queues_op(parent)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "queues[0].driver_share: `team` is a parent queue: `driver_share` belongs to its leaves"
    );
    let mut zero = tree;
    zero[0].driver_share = Some(0.0);
    let error = c.apply(set_queues_op(zero)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "queues[0].driver_share: must be in (0, 1], got 0"
    );
    assert_eq!(c.state, before);
}

#[test]
fn a_leafs_ordering_is_of_log_format_4_and_shares_it_among_users_by_drf() {
    let mut c = Cluster::new();
    c.worker("w1", 8, 8192);
    let drf = vec![QueueSpec {
        ordering: OrderingPolicy::Drf,
        user_weights: [("bob".into(), 3.0)].into(),
        ..QueueSpec::named("default")
    }];
    let op = set_queues_op(drf.clone());
    assert!(matches!(op, Op::ConfigureQueuesWithOrdering(_)), "{op:?}");
    assert_eq!(op.introduced_in(), LogFormat::FOURTH);
    c.ok(Op::RaiseLogFormat(RaiseLogFormat {
        to: LogFormat::FOURTH,
    }));
    c.ok(op);
    assert_eq!(c.state.queue_specs(), drf);

    // Alice's application, submitted first, would take every core in Spark's order; under
    // drf bob, of weight 3, gets three times her share: 6 cores to her 2.
    let sleeper = |user: &str| {
        let mut desc = app_desc(None, Some(1), 1024);
        desc.user = user.to_owned();
        desc
    };
    let alice = c.submit_app(sleeper("alice"));
    let bob = c.submit_app(sleeper("bob"));
    c.schedule();
    let cores = |c: &Cluster, app| c.state.apps()[app].cores_granted;
    assert_eq!((cores(&c, &alice), cores(&c, &bob)), (2, 6));

    // A weight of 0 is refused and changes nothing.
    let before = c.state.clone();
    let mut zero = drf;
    zero[0].user_weights = [("bob".into(), 0.0)].into();
    let error = c.apply(set_queues_op(zero)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "queues[0].user_weights.bob: must be above 0, got 0"
    );
    assert_eq!(c.state, before);
}

/// Raises `c` to log format 4 and lets the `default` queue's priorities go up to 5.
fn priorities_up_to_5(c: &mut Cluster) {
    c.ok(Op::RaiseLogFormat(RaiseLogFormat {
        to: LogFormat::FOURTH,
    }));
    c.ok(set_queues_op(vec![QueueSpec {
        max_priority: Some(5),
        ..QueueSpec::named("default")
    }]));
}

#[test]
fn an_apps_priority_is_of_log_format_4_capped_by_its_queue_and_set_by_its_owner() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    priorities_up_to_5(&mut c);
    for name in ["alice", "bob"] {
        c.ok(Op::AddUser(AddUser {
            name: name.into(),
            admin: false,
        }));
    }
    let by = |user: &str, op: Op| {
        Op::By(By {
            user: user.into(),
            generation: 1,
            op: Box::new(op),
        })
    };
    let submit = |c: &mut Cluster, user: &str| {
        let op = submit_app_op(
            SubmitApp {
                desc: app_desc(None, Some(1), 512),
                executor_limit: None,
            },
            None,
            None,
            &c.state,
        );
        match c.ok(by(user, op)).outcome {
            Outcome::AppSubmitted { id } => id,
            other => panic!("{other:?}"),
        }
    };
    let first = submit(&mut c, "alice");
    let urgent = submit(&mut c, "bob");

    // Bob asks for 9: his queue caps it at 5, and his application, submitted second, is
    // served first.
    let set = |app: &AppId, priority| {
        Op::SetAppPriority(SetAppPriority {
            app: app.clone(),
            priority,
        })
    };
    assert_eq!(set(&urgent, 9).introduced_in(), LogFormat::FOURTH);
    let response = c.ok(by("bob", set(&urgent, 9)));
    assert_eq!(response.outcome, Outcome::Prioritized { priority: 5 });
    assert_eq!(c.state.app_priority(&urgent), 5);
    c.schedule();
    let cores = |c: &Cluster, app| c.state.apps()[app].cores_granted;
    assert_eq!((cores(&c, &first), cores(&c, &urgent)), (0, 4));

    // Alice may not change bob's; nothing changes.
    let before = c.state.clone();
    let error = c.apply(by("alice", set(&urgent, 0))).unwrap_err();
    assert!(
        error.to_string().starts_with("user `alice` may not steer"),
        "{error}"
    );
    assert_eq!(c.state, before);

    // A queue without a max_priority caps every priority at 0, as YARN's default does: what
    // bob asked for stays asked, and counts again once a maximum allows it.
    c.ok(set_queues_op(vec![QueueSpec::named("default")]));
    assert_eq!(c.state.app_priority(&urgent), 0);
    c.ok(set_queues_op(vec![QueueSpec {
        max_priority: Some(7),
        ..QueueSpec::named("default")
    }]));
    assert_eq!(c.state.app_priority(&urgent), 7);

    // Its priority goes with the application.
    c.ok(Op::KillApp(KillApp { id: urgent.clone() }));
    assert_eq!(c.state.app_priority(&urgent), 0);
    c.state.check_invariants().unwrap();
}

#[test]
fn an_app_submitted_with_its_priority_has_it_from_its_first_pass_or_is_refused_whole() {
    let mut c = Cluster::new();
    c.worker("w1", 2, 4096);
    priorities_up_to_5(&mut c);
    c.ok(Op::AddUser(AddUser {
        name: "bob".into(),
        admin: false,
    }));
    let prioritized = |submit: Op, priority| {
        Op::SubmitWithSettings(SubmitWithSettings {
            submit: Box::new(submit),
            priority,
            logs_events: false,
        })
    };
    let submit = |desc| {
        Op::SubmitApp(SubmitApp {
            desc,
            executor_limit: None,
        })
    };
    let first = c.submit_app(app_desc(None, Some(1), 512));
    let op = prioritized(submit(app_desc(None, Some(1), 512)), 3);
    assert_eq!(op.introduced_in(), LogFormat::FOURTH);
    let by_bob = Op::By(By {
        user: "bob".into(),
        generation: 1,
        op: Box::new(op),
    });
    let Outcome::AppSubmitted { id: urgent } = c.ok(by_bob).outcome else {
        panic!("a submission names its application");
    };
    assert_eq!(c.state.app_priority(&urgent), 3);
    assert_eq!(c.state.app_user(&urgent), Some("bob"));
    // The first pass to see it serves it first, though it was submitted second.
    c.schedule();
    let cores = |c: &Cluster, app| c.state.apps()[app].cores_granted;
    assert_eq!((cores(&c, &first), cores(&c, &urgent)), (0, 2));

    // A submission the state refuses is refused with its priority, and only a submission
    // takes one: nothing changes.
    let before = c.state.clone();
    let error = c
        .apply(prioritized(submit(app_desc(None, Some(0), 512)), 2))
        .unwrap_err();
    assert_eq!(error.to_string(), "executor_cores: must be at least 1");
    let error = c
        .apply(prioritized(Op::KillApp(KillApp { id: first.clone() }), 2))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "submit: only an application's or a driver's submission takes a priority"
    );
    let driver = Op::SubmitWithSettings(SubmitWithSettings {
        submit: Box::new(Op::SubmitDriver(SubmitDriver {
            desc: driver_desc(1, 512, false),
        })),
        priority: 0,
        logs_events: true,
    });
    let error = c.apply(driver).unwrap_err();
    assert_eq!(
        error.to_string(),
        "logs_events: a driver's application says whether it logs events"
    );
    assert_eq!(c.state, before);

    // An application that logs events is said to while it runs and once it has ended, as
    // long as its record is kept.
    let logging = Op::SubmitWithSettings(SubmitWithSettings {
        submit: Box::new(submit(app_desc(None, Some(1), 512))),
        priority: 0,
        logs_events: true,
    });
    let Outcome::AppSubmitted { id: logging } = c.ok(logging).outcome else {
        panic!("a submission names its application");
    };
    assert!(c.state.logs_events(&logging));
    assert!(!c.state.logs_events(&first));
    c.ok(Op::KillApp(KillApp {
        id: logging.clone(),
    }));
    assert!(c.state.logs_events(&logging));
    c.state.check_invariants().unwrap();
}

#[test]
fn work_goes_to_leaves_and_a_busy_leaf_stays_one() {
    let mut c = Cluster::new();
    c.ok(set_queues_op(vec![
        queue("default", 0.5),
        queue("team", 0.5),
        queue("team.etl", 0.5),
        queue("team.batch", 0.5),
    ]));
    let error = submit(&mut c, "team").unwrap_err();
    assert_eq!(
        error.to_string(),
        "queue: `team` is a parent queue: submit to one of its leaves (team.batch, team.etl)"
    );
    submit(&mut c, "team.etl").unwrap();
    let before = c.state.clone();
    let error = c
        .apply(set_queues_op(vec![
            queue("default", 0.5),
            queue("team", 0.5),
            queue("team.etl", 1.0),
            queue("team.etl.daily", 1.0),
        ]))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "queue `team.etl` has active applications or drivers, so it cannot become a parent queue"
    );
    assert_eq!(c.state, before);
}

#[test]
fn queue_ops_of_the_previous_build_still_read_and_apply() {
    // Written by the build before capacities: a `SetQueues` (prod prior, batch at threshold
    // 0.8 and max 0.5), then a `ReplaceQueues` with access lists (prod for alice,
    // administered by bob; batch at most 3 per user).
    let ops: Vec<Op> = fixture("queue-ops-format-5.bin");
    let mut c = Cluster::new();
    for name in ["alice", "bob"] {
        c.ok(Op::AddUser(AddUser {
            name: name.into(),
            admin: false,
        }));
    }
    let [set, replace] = <[Op; 2]>::try_from(ops).unwrap();
    c.ok(set);
    let batch = &c.state.queues()[1];
    assert_eq!((batch.threshold, batch.max_capacity), (0.8, 0.5));
    c.ok(replace);
    let specs = c.state.queue_specs();
    assert!(specs[0].prior);
    assert_eq!(specs[0].submit, Some(vec!["alice".to_owned()]));
    assert_eq!(specs[0].administer, vec!["bob".to_owned()]);
    assert_eq!(specs[1].max_per_user, Some(3));
    assert!(specs.iter().all(|q| q.capacity.is_none()));
}

#[test]
fn preemption_for_guarantees_takes_only_what_a_queue_holds_above_its_own() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.ok(set_queues_op(vec![
        queue("default", 0.0),
        queue("a", 0.5),
        queue("b", 0.5),
    ]));
    let borrower = c.submit_app(in_queue("a", None, Some(1)));
    c.schedule();
    assert_eq!(c.state.apps()[&borrower].executors.len(), 4);
    let newcomer = c.submit_app(in_queue("b", None, Some(1)));
    let snapshot = c.state.scheduling_snapshot(PassConfig::default());
    let eligible = BTreeSet::from([WorkId::App(newcomer.clone())]);
    let chosen = choose(&snapshot, &eligible, 1.0, Preempting::BelowGuarantee)
        .unwrap()
        .expect("b is below its guarantee and a above its own");
    assert_eq!(chosen.victims.len(), 2, "a keeps its half: {chosen:?}");

    // A third victim would stop more than b lacks; as a preemption for prior work, the
    // newcomer may not preempt at all. Both are refused and change nothing.
    let before = c.state.clone();
    let mut greedy = Preempt::chosen(chosen.clone(), 1000);
    let third = c.state.apps()[&borrower]
        .executors
        .keys()
        .find(|id| !greedy.victims.iter().any(|(_, v)| v == *id))
        .copied()
        .unwrap();
    greedy.victims.push((borrower.clone(), third));
    let error = c.apply(Op::PreemptForGuarantees(greedy)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "stopping 3 cores for queues that lack 2: a preemption for guarantees takes no more \
         than they lack"
    );
    let error = c
        .apply(Op::Preempt(Preempt::chosen(chosen.clone(), 1000)))
        .unwrap_err();
    assert!(
        error.to_string().contains("only prior work preempts"),
        "{error}"
    );
    assert_eq!(c.state, before);

    c.ok(Op::PreemptForGuarantees(Preempt::chosen(chosen, 1000)));
    assert_eq!(c.state.apps()[&borrower].executors.len(), 2);
    let kept: Vec<_> = c.state.reservations().iter().map(|r| &r.owner).collect();
    assert_eq!(
        kept,
        [&WorkId::App(newcomer.clone()), &WorkId::App(newcomer)]
    );

    // Until that room is granted, b preempts no more, for any of its apps.
    let second = c.submit_app(in_queue("b", None, Some(1)));
    let again = Preempt {
        victims: vec![(
            borrower.clone(),
            *c.state.apps()[&borrower].executors.keys().next().unwrap(),
        )],
        reservations: vec![muster_state::model::Reservation {
            owner: WorkId::App(second),
            ..c.state.reservations()[0].clone()
        }],
        grace_ms: 1000,
    };
    let error = c.apply(Op::PreemptForGuarantees(again)).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("room is already kept for queue `b`"),
        "{error}"
    );
}

#[test]
fn preemption_for_guarantees_never_takes_a_queue_below_its_own() {
    // On 4 cores a is promised 2 and holds 3, b 1 and holds none, c 1 and holds 1: b may
    // take a core from a, never c's.
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.ok(set_queues_op(vec![
        queue("default", 0.0),
        queue("a", 0.5),
        queue("b", 0.25),
        queue("c", 0.25),
    ]));
    let mut apps = Vec::new();
    for (name, cores) in [("a", 3), ("c", 1)] {
        apps.push(c.submit_app(in_queue(name, Some(cores), Some(1))));
    }
    c.schedule();
    let waiting = c.submit_app(in_queue("b", None, Some(1)));
    let from = |app: &muster_core::ids::AppId, c: &Cluster| Preempt {
        victims: vec![(
            app.clone(),
            *c.state.apps()[app].executors.keys().next().unwrap(),
        )],
        reservations: vec![muster_state::model::Reservation {
            owner: WorkId::App(waiting.clone()),
            worker: "w1".into(),
            resources: muster_core::resources::Resources::new(1, 256),
            until: muster_core::ids::Timestamp(0),
        }],
        grace_ms: 1000,
    };
    let error = c
        .apply(Op::PreemptForGuarantees(from(&apps[1], &c)))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "stopping these executors takes queue `c` below its guarantee"
    );
    c.ok(Op::PreemptForGuarantees(from(&apps[0], &c)));
}

#[test]
fn a_driver_submitted_with_its_priority_starts_first_in_its_queue_and_keeps_it_when_relaunched() {
    let mut c = Cluster::new();
    priorities_up_to_5(&mut c);
    c.ok(Op::AddUser(AddUser {
        name: "bob".into(),
        admin: false,
    }));
    let first = c.submit_driver(driver_desc(1, 512, false));
    let submit = Op::SubmitDriver(SubmitDriver {
        desc: driver_desc(1, 512, true),
    });
    let prioritized = Op::SubmitWithSettings(SubmitWithSettings {
        submit: Box::new(submit),
        priority: 9,
        logs_events: false,
    });
    let by_bob = Op::By(By {
        user: "bob".into(),
        generation: 1,
        op: Box::new(prioritized),
    });
    let Outcome::DriverSubmitted { id: urgent } = c.ok(by_bob).outcome else {
        panic!("a submission names its driver");
    };
    // Capped by its queue, and bob's.
    assert_eq!(c.state.driver_priority(&urgent), 5);
    assert_eq!(
        c.state.driver_owner(&urgent).map(|o| o.user.as_str()),
        Some("bob")
    );

    // One core: the urgent driver, submitted second, starts.
    c.worker("w1", 1, 4096);
    c.schedule();
    assert_eq!(c.state.drivers()[&urgent].state, DriverState::Running);
    assert_eq!(c.state.drivers()[&first].state, DriverState::Submitted);

    // Its worker lost, the supervised driver is submitted again with its priority, and
    // starts first again.
    c.ok(Op::WorkerLost(WorkerLost {
        id: "w1".into(),
        reason: "gone".into(),
    }));
    let successor = c.state.relaunched_as(&urgent).unwrap().clone();
    assert_eq!(c.state.driver_priority(&successor), 5);
    c.worker("w2", 1, 4096);
    c.schedule();
    assert_eq!(c.state.drivers()[&successor].state, DriverState::Running);
    c.state.check_invariants().unwrap();
}

#[test]
fn preemption_inside_a_queue_stops_only_what_an_owner_outranks_and_keeps_gangs_whole() {
    // On 4 cores, a0 (priority 0) holds 3 and the gang g (minimum 1) holds 1; a1, of
    // priority 3, waits.
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    priorities_up_to_5(&mut c);
    let a0 = c.submit_app(in_queue("default", Some(3), Some(1)));
    let gang = Op::SubmitGang(SubmitGang {
        app: SubmitApp {
            desc: in_queue("default", Some(1), Some(1)),
            executor_limit: None,
        },
        min_executors: 1,
        driver: None,
    });
    let Outcome::AppSubmitted { id: g } = c.ok(gang).outcome else {
        panic!("a submission names its application");
    };
    c.schedule();
    let a1 = c.submit_app(in_queue("default", Some(2), Some(1)));
    let from = |app: &AppId, owner: &AppId, c: &Cluster| {
        Op::PreemptWithinQueue(PreemptWithinQueue {
            preempt: Preempt {
                victims: vec![(
                    app.clone(),
                    *c.state.apps()[app].executors.keys().next_back().unwrap(),
                )],
                reservations: vec![muster_state::model::Reservation {
                    owner: WorkId::App(owner.clone()),
                    worker: "w1".into(),
                    resources: muster_core::resources::Resources::new(1, 256),
                    until: muster_core::ids::Timestamp(0),
                }],
                grace_ms: 1000,
            },
            profiles: vec![0],
        })
    };
    assert_eq!(from(&a0, &a1, &c).introduced_in(), LogFormat::FOURTH);

    // At equal priority under fifo nothing is outranked; nor is a gang taken below its
    // minimum, whoever waits. Each refusal changes nothing.
    let before = c.state.clone();
    let error = c.apply(from(&a0, &a1, &c)).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "no application the room is kept for outranks `{a0}` in its queue: neither a \
             higher priority nor a holder left below its share"
        )
    );
    assert_eq!(c.state, before);
    c.ok(Op::SetAppPriority(SetAppPriority {
        app: a1.clone(),
        priority: 3,
    }));
    let before = c.state.clone();
    let error = c.apply(from(&g, &a1, &c)).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("stopping these executors takes `{g}` below its gang's minimum")
    );
    let error = c.apply(from(&g, &a0, &c)).unwrap_err();
    assert!(
        error.to_string().contains("below its gang's minimum"),
        "{error}"
    );
    assert_eq!(c.state, before);

    // The higher priority stops a0's youngest executor, and the room is kept for it.
    c.ok(from(&a0, &a1, &c));
    assert_eq!(c.state.apps()[&a0].executors.len(), 2);
    assert_eq!(c.state.reservations()[0].owner, WorkId::App(a1.clone()));
    // Until that room is granted, a1 preempts no more.
    let error = c.apply(from(&a0, &a1, &c)).unwrap_err();
    assert!(
        error.to_string().starts_with("room is already kept for"),
        "{error}"
    );
    c.state.check_invariants().unwrap();
}

#[test]
fn names_earlier_builds_took_still_apply_from_their_ops_and_are_refused_in_a_tree() {
    // Before trees, any name was a flat queue: a lone `root.etl`, or `team` beside
    // `team.x` with work in `team`. Their ops apply as they did, and the work is scheduled.
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let flat = |names: &[&str]| {
        Op::SetQueues(SetQueues {
            queues: names
                .iter()
                .map(|&name| QueueSettings::from(&QueueSpec::named(name)))
                .collect(),
        })
    };
    c.ok(flat(&["root.etl", "team"]));
    for queue in ["root.etl", "team"] {
        c.submit_app(in_queue(queue, Some(2), None));
    }
    c.ok(flat(&["root.etl", "team", "team.x"]));
    c.schedule();
    assert!(c.state.apps().values().all(|a| a.cores_granted > 0));

    // Written as a tree (with capacities), the same names are refused.
    let error = c
        .apply(set_queues_op(vec![
            queue("root.etl", 0.5),
            queue("team", 0.5),
            queue("team.x", 1.0),
        ]))
        .unwrap_err();
    assert!(
        error.to_string().contains("`root` is the implicit top"),
        "{error}"
    );
}

#[test]
fn the_pass_sees_which_workers_run_prior_work() {
    let mut c = Cluster::new();
    for id in ["w1", "w2", "w3", "w4"] {
        c.worker(id, 2, 4096);
    }
    c.ok(set_queues_op(vec![
        QueueSpec {
            prior: true,
            ..QueueSpec::named("prod")
        },
        QueueSpec::named("default"),
    ]));
    // A prior driver, a prior app's executor and an ordinary one, each filling a worker.
    let mut driver = crate::support::driver_desc(2, 512, false);
    driver.queue = "prod".into();
    c.submit_driver(driver);
    c.submit_app(in_queue("prod", Some(2), Some(2)));
    c.submit_app(in_queue("default", Some(2), Some(2)));
    c.schedule();
    let hosts_prior = |c: &Cluster| -> Vec<(String, bool)> {
        c.state
            .scheduling_snapshot(PassConfig::default())
            .workers
            .iter()
            .map(|w| (w.id.0.to_string(), w.hosts_prior))
            .collect()
    };
    // What each worker's own records say: an executor of a `prod` app, or a `prod` driver.
    let runs_prior = |c: &Cluster| -> Vec<(String, bool)> {
        let prod = |queue: &muster_core::ids::QueueName| queue.0 == "prod";
        c.state
            .workers()
            .values()
            .map(|w| {
                let executor = w
                    .executors
                    .iter()
                    .any(|(app, _)| c.state.apps().get(app).is_some_and(|a| prod(&a.desc.queue)));
                let driver = w.drivers.iter().any(|d| {
                    c.state
                        .drivers()
                        .get(d)
                        .is_some_and(|d| prod(&d.desc.queue))
                });
                (w.id.0.to_string(), executor || driver)
            })
            .collect()
    };
    let expected = runs_prior(&c);
    assert_eq!(
        expected.iter().filter(|(_, prior)| *prior).count(),
        2,
        "the prior driver and executor run on two workers: {expected:?}"
    );
    assert_eq!(hosts_prior(&c), expected);
    // Once the prior app has ended, only the driver's worker runs prior work.
    let prior_app = c
        .state
        .apps()
        .values()
        .find(|a| a.desc.queue.0 == "prod")
        .map(|a| a.id.clone())
        .unwrap();
    c.ok(Op::AppFinished(muster_state::commands::AppFinished {
        id: prior_app,
        state: muster_state::model::AppState::Finished,
    }));
    let expected = runs_prior(&c);
    assert_eq!(expected.iter().filter(|(_, prior)| *prior).count(), 1);
    assert_eq!(hosts_prior(&c), expected);
}

#[test]
fn a_gang_is_of_log_format_4_and_granted_all_of_its_minimum_or_nothing() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    let gang = |min_executors, executor_cores| {
        Op::SubmitGang(SubmitGang {
            app: SubmitApp {
                desc: in_queue("default", Some(5), executor_cores),
                executor_limit: None,
            },
            min_executors,
            driver: None,
        })
    };
    assert_eq!(gang(5, Some(1)).introduced_in(), LogFormat::FOURTH);
    // Bad minimums are refused and change nothing.
    let before = c.state.clone();
    for (op, error) in [
        (gang(0, Some(1)), "min_executors: must be at least 1"),
        (
            gang(2, None),
            "min_executors: a gang needs executor_cores: without it an application has one \
             executor a worker, which takes all the cores it is given",
        ),
        (
            gang(3, Some(2)),
            "min_executors: 3 executors of 2 cores need 6 cores, more than cores_max 5",
        ),
    ] {
        assert_eq!(c.apply(op).unwrap_err().to_string(), error);
    }
    assert_eq!(c.state, before);

    // Two gangs of 5 one-core executors on 8 cores: the first gets its 5, the second none.
    let first = match c.ok(gang(5, Some(1))).outcome {
        muster_state::Outcome::AppSubmitted { id } => id,
        other => panic!("{other:?}"),
    };
    let second = match c.ok(gang(5, Some(1))).outcome {
        muster_state::Outcome::AppSubmitted { id } => id,
        other => panic!("{other:?}"),
    };
    assert_eq!(c.state.gang(&first), Some(5));
    c.schedule();
    assert_eq!(c.state.apps()[&first].executors.len(), 5);
    assert!(c.state.apps()[&second].executors.is_empty());
    let bytes = c.state.encode_snapshot();
    assert_eq!(bytes[0], 12, "a gang takes format 12");
    assert_eq!(
        muster_state::ClusterState::decode_snapshot(&bytes).unwrap(),
        c.state
    );

    // Once the first ends, the second gets all of its 5; an ended gang is forgotten.
    c.ok(Op::KillApp(muster_state::commands::KillApp {
        id: first.clone(),
    }));
    assert_eq!(c.state.gang(&first), None);
    c.schedule();
    assert_eq!(c.state.apps()[&second].executors.len(), 5);
}

#[test]
fn a_gang_that_waited_its_timeout_is_placed_as_any_app_or_fails_by_its_style() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let gang = |min_executors| {
        Op::SubmitGang(SubmitGang {
            app: SubmitApp {
                desc: in_queue("default", Some(6), Some(1)),
                executor_limit: None,
            },
            min_executors,
            driver: None,
        })
    };
    let submitted = |c: &mut Cluster, op| match c.ok(op).outcome {
        muster_state::Outcome::AppSubmitted { id } => id,
        other => panic!("{other:?}"),
    };
    let end = |app: &muster_core::ids::AppId, style| {
        Op::EndGangWait(EndGangWait {
            work: WorkId::App(app.clone()),
            style,
            waited_ms: 900_000,
        })
    };
    // Six executors on four cores never fit at once.
    let soft = submitted(&mut c, gang(6));
    c.schedule();
    assert!(c.state.apps()[&soft].executors.is_empty());
    assert_eq!(
        end(&soft, GangStyle::Soft).introduced_in(),
        LogFormat::FOURTH
    );

    // Soft: no longer a gang, and placed as any app.
    c.ok(end(&soft, GangStyle::Soft));
    assert_eq!(c.state.gang(&soft), None);
    assert_eq!(
        c.state
            .timed_out_gang(&WorkId::App(soft.clone()))
            .unwrap()
            .to_string(),
        "its gang of 6 executors did not fit within 900 s: placed as any application since \
         (gang_style soft)"
    );
    c.schedule();
    assert_eq!(c.state.apps()[&soft].executors.len(), 4);
    c.assert_snapshot_round_trips();

    // Not a waiting gang any more (nor an app that never was one): refused, nothing changes.
    let before = c.state.clone();
    for style in [GangStyle::Soft, GangStyle::Hard] {
        assert!(matches!(
            c.apply(end(&soft, style)),
            Err(ApplyError::Conflict(_))
        ));
    }
    assert_eq!(c.state, before);

    // Hard: the app fails, saying why, and the reason stays with the ended app.
    let hard = submitted(&mut c, gang(6));
    c.ok(end(&hard, GangStyle::Hard));
    assert!(!c.state.apps().contains_key(&hard));
    let ended = c
        .state
        .completed_apps()
        .iter()
        .find(|a| a.id == hard)
        .unwrap();
    assert_eq!(ended.state, muster_state::model::AppState::Failed);
    assert!(
        c.state
            .timed_out_gang(&WorkId::App(hard.clone()))
            .unwrap()
            .to_string()
            .ends_with("failed (gang_style hard)")
    );
}

#[test]
fn a_driver_that_waited_its_gangs_timeout_starts_as_any_driver_or_fails_by_its_style() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    // The driver and all four of its gang's executors never fit on four cores.
    let gang = executors(4, 1);
    let submit = |c: &mut Cluster| submit_driver_beside(c, &gang);
    let end = |driver: &muster_core::ids::DriverId, style| {
        Op::EndGangWait(EndGangWait {
            work: WorkId::Driver(driver.clone()),
            style,
            waited_ms: 900_000,
        })
    };
    let soft = submit(&mut c);
    let hard = submit(&mut c);
    c.schedule();
    assert_eq!(c.state.drivers()[&soft].state, DriverState::Submitted);

    // Soft: it starts as any driver, its gang no longer kept beside it.
    c.ok(end(&soft, GangStyle::Soft));
    assert!(
        c.state
            .timed_out_gang(&WorkId::Driver(soft.clone()))
            .unwrap()
            .to_string()
            .starts_with("its gang of 4 executors did not fit within 900 s")
    );
    c.schedule();
    assert_eq!(c.state.drivers()[&soft].state, DriverState::Running);
    // A started driver waits for no gang: refused, nothing changes.
    let before = c.state.clone();
    assert!(matches!(
        c.apply(end(&soft, GangStyle::Hard)),
        Err(ApplyError::Conflict(_))
    ));
    assert_eq!(c.state, before);

    // Hard: it fails, and the reason stays with the ended driver.
    c.ok(end(&hard, GangStyle::Hard));
    let ended = c.state.known_driver(&hard).unwrap();
    assert_eq!(ended.state, DriverState::Failed);
    assert!(c.state.timed_out_gang(&WorkId::Driver(hard)).is_some());
    c.assert_snapshot_round_trips();
}

#[test]
fn a_gang_drivers_room_for_its_gang_is_kept_until_its_application_registers() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    let gang = executors(5, 1);
    let submit = |c: &mut Cluster| submit_driver_beside(c, &gang);
    let (first, second) = (submit(&mut c), submit(&mut c));
    // The first starts with its gang's room kept; the second would not fit beside both.
    c.schedule();
    assert_eq!(c.state.drivers()[&first].state, DriverState::Running);
    assert_eq!(c.state.drivers()[&second].state, DriverState::Submitted);
    let snapshot = c.state.scheduling_snapshot(PassConfig::default());
    assert_eq!(snapshot.pending_gangs.len(), 1);
    assert_eq!(snapshot.pending_gangs[0].gang, gang);
    assert_eq!(snapshot.drivers[0].gang.as_ref(), Some(&gang));
    let plan = muster_core::schedule(&snapshot).unwrap();
    assert!(plan.drivers.is_empty(), "{plan:?}");

    // Its application registers naming it: the room is no longer kept, and the gang gets it.
    let mut desc = in_queue("default", Some(5), Some(1));
    desc.executor_memory_mb = 256;
    let app = match c
        .ok(Op::SubmitGang(SubmitGang {
            app: SubmitApp {
                desc,
                executor_limit: None,
            },
            min_executors: 5,
            driver: Some(first.clone()),
        }))
        .outcome
    {
        muster_state::Outcome::AppSubmitted { id } => id,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        c.state.driver_gang(&first).unwrap().app.as_ref(),
        Some(&app)
    );
    let snapshot = c.state.scheduling_snapshot(PassConfig::default());
    assert!(snapshot.pending_gangs.is_empty());
    c.schedule();
    assert_eq!(c.state.apps()[&app].executors.len(), 5);
    assert_eq!(c.state.drivers()[&second].state, DriverState::Submitted);

    // An ended driver's gang is forgotten.
    c.ok(Op::KillDriver(muster_state::commands::KillDriver {
        id: first.clone(),
    }));
    assert!(c.state.driver_gang(&first).is_none());
    c.assert_snapshot_round_trips();
}

#[test]
fn a_drivers_room_for_its_first_executor_is_kept_from_other_drivers_until_it_has_one() {
    // Executors of 3 cores on workers of 4 and 2: drivers spread one to a worker would
    // leave no room for any.
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    c.worker("w3", 2, 4096);
    let first_executor = executors(1, 3);
    let drivers: Vec<_> = (0..3)
        .map(|_| submit_driver_beside(&mut c, &first_executor))
        .collect();
    // Two start, each beside room for its first executor; the third, which would fit alone,
    // waits for room for both.
    c.schedule();
    let running = |c: &Cluster| {
        drivers
            .iter()
            .filter(|d| c.state.drivers()[*d].state == DriverState::Running)
            .count()
    };
    assert_eq!(running(&c), 2);
    let plan = muster_core::schedule(&c.state.scheduling_snapshot(PassConfig::default())).unwrap();
    assert_eq!(plan.waiting[0].reason, WaitReason::FirstExecutor);

    // Both register their applications, which are no gangs, naming their drivers.
    let mut apps = Vec::new();
    for driver in &drivers[..2] {
        assert!(c.state.keeps_room_for_app_of(driver));
        let mut desc = in_queue("default", Some(3), Some(3));
        desc.executor_memory_mb = 256;
        let submit = SubmitApp {
            desc,
            executor_limit: None,
        };
        let op = submit_app_op(submit, None, Some(driver.clone()), &c.state);
        assert!(matches!(op, Op::SubmitDriverApp(_)), "{op:?}");
        assert_eq!(op.introduced_in(), LogFormat::FOURTH);
        match c.ok(op).outcome {
            muster_state::Outcome::AppSubmitted { id } => apps.push(id),
            other => panic!("{other:?}"),
        }
        assert!(!c.state.keeps_room_for_app_of(driver));
    }
    // Their room is kept from the third driver, and each gets its executor.
    let snapshot = c.state.scheduling_snapshot(PassConfig::default());
    assert!(snapshot.pending_gangs.iter().all(|p| p.registered));
    c.schedule();
    for app in &apps {
        assert_eq!(c.state.apps()[app].executors.len(), 1, "{app}");
    }
    assert_eq!(running(&c), 2);
    // Holding an executor, an application has no room kept for it.
    let snapshot = c.state.scheduling_snapshot(PassConfig::default());
    assert!(snapshot.pending_gangs.is_empty());
    c.assert_snapshot_round_trips();
}

#[test]
fn a_stale_plan_grants_a_gang_all_of_its_minimum_or_none() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.worker("w2", 4, 4096);
    let gang = match c
        .ok(Op::SubmitGang(SubmitGang {
            app: SubmitApp {
                desc: in_queue("default", Some(6), Some(1)),
                executor_limit: None,
            },
            min_executors: 6,
            driver: None,
        }))
        .outcome
    {
        muster_state::Outcome::AppSubmitted { id } => id,
        other => panic!("{other:?}"),
    };
    // The pass grants all 6; before its plan commits, a driver takes 3 cores of w2.
    let stale = muster_core::schedule(&c.state.scheduling_snapshot(PassConfig::default())).unwrap();
    let granted: u32 = stale.executors.iter().map(|g| g.count).sum();
    assert_eq!(granted, 6);
    let driver = c.submit_driver(driver_desc(3, 256, false));
    c.ok(Op::ApplyPlan(muster_state::commands::ApplyPlan {
        drivers: vec![muster_core::plan::DriverLaunch {
            driver,
            worker: "w2".into(),
        }],
        executors: Vec::new(),
    }));
    let response = c.ok(muster_state::commands::plan_op(&stale));
    let muster_state::Outcome::PlanApplied { rejected, .. } = response.outcome else {
        panic!("{response:?}");
    };
    assert!(
        !rejected.is_empty()
            && rejected
                .iter()
                .all(|r| r.reason == muster_state::Rejection::GangNoLongerFits),
        "{rejected:?}"
    );
    assert!(c.state.apps()[&gang].executors.is_empty(), "none of its 6");
    // The next pass finds it waiting with how many fit now.
    let plan = muster_core::schedule(&c.state.scheduling_snapshot(PassConfig::default())).unwrap();
    assert_eq!(
        plan.waiting[0].reason.to_string(),
        "a gang of 6 executors starts when all fit at once: 5 fit now"
    );
}
