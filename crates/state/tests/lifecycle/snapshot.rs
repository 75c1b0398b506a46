//! Snapshot encoding round trips and refuses what it cannot read.

use std::collections::BTreeMap;

use muster_core::access::QueueSpec;
use muster_core::ids::{ExecutorId, Timestamp, WorkId};
use muster_core::model::OrderingPolicy;
use muster_core::resources::Resources;
use muster_state::commands::{
    AddUser, By, DecommissionWorker, DrainWorker, DriverStateChanged, ExecutorStateChanged,
    KillExecutors, Preempt, RaiseLogFormat, RegisterWorker, Restore, SetAppPriority,
    SetProfileLimit, SubmitApp, SubmitDriver, SubmitWithSettings, set_queues_op,
};
use muster_state::model::{DriverState, ExecutorState, Profile, Reservation};
use muster_state::version::LogFormat;
use muster_state::{
    ClusterState, ENDED_EXECUTORS_KEPT, Op, Outcome, SNAPSHOT_FORMAT, SnapshotError, Stopped,
};

use crate::snapshot_bytes::decode_hostile;
use crate::support::{Cluster, app_desc, driver_desc};

fn busy_cluster() -> Cluster {
    let mut c = Cluster::new();
    c.worker("w1", 8, 8192);
    c.worker("w2", 4, 4096);
    let etl = c.submit_app(app_desc(Some(6), Some(2), 1024));
    c.submit_driver(driver_desc(1, 512, true));
    c.schedule();
    // Prior work that preempted one executor, with its room kept.
    c.ok(set_queues_op(vec![QueueSpec {
        prior: true,
        ..QueueSpec::named("prod")
    }]));
    let mut urgent = app_desc(Some(2), Some(2), 1024);
    urgent.queue = "prod".into();
    let urgent = c.submit_app(urgent);
    let (&youngest, victim) = c.state.apps()[&etl].executors.last_key_value().unwrap();
    let worker = victim.worker.clone();
    c.ok(Op::Preempt(Preempt {
        victims: vec![(etl, youngest)],
        reservations: vec![Reservation {
            owner: WorkId::App(urgent.clone()),
            worker,
            resources: Resources::new(2, 1024),
            until: Timestamp(0),
        }],
        grace_ms: 60_000,
    }));
    assert_eq!(c.state.reservations().len(), 1);
    // The other worker is being drained.
    let kept_on = c.state.reservations()[0].worker.clone();
    let other = if kept_on.as_ref() == "w1" { "w2" } else { "w1" };
    c.ok(Op::DrainWorker(DrainWorker {
        id: other.into(),
        kill_after_ms: Some(30_000),
    }));
    c
}

/// [`busy_cluster`] with a named user who submitted a driver.
fn busy_cluster_with_a_user() -> Cluster {
    let mut c = busy_cluster();
    c.ok(Op::AddUser(AddUser {
        name: "alice".into(),
        admin: false,
    }));
    c.ok(by_alice(Op::SubmitDriver(SubmitDriver {
        desc: driver_desc(1, 256, false),
    })));
    c
}

/// The busy cluster with a user, its queues with capacities.
fn busy_cluster_with_capacities() -> Cluster {
    let mut c = busy_cluster_with_a_user();
    c.ok(set_queues_op(vec![
        QueueSpec {
            prior: true,
            capacity: Some(0.5),
            ..QueueSpec::named("prod")
        },
        QueueSpec {
            capacity: Some(0.5),
            ..QueueSpec::named("default")
        },
    ]));
    c
}

/// The busy cluster with capacities, and a worker that named its GPUs' addresses with an
/// executor holding one of them.
fn busy_cluster_with_addresses() -> Cluster {
    let mut c = busy_cluster_with_capacities();
    let gpus = |n| [("gpu".to_owned(), n)].into();
    let worker = RegisterWorker {
        id: "w3".into(),
        host: "host-w3".into(),
        address: "w3:7078".into(),
        resources: Resources::new(2, 2048).with_custom(gpus(2)),
        fence_grace_ms: None,
    };
    c.ok(worker.op([("gpu".to_owned(), vec!["GPU-a".into(), "GPU-b".into()])].into()));
    let mut desc = app_desc(None, Some(1), 512);
    desc.executor_resources = gpus(1);
    let app = c.submit_app(desc);
    c.schedule();
    let executor = c.state.apps()[&app]
        .executors
        .keys()
        .next()
        .copied()
        .unwrap();
    assert_eq!(c.state.executor_addresses(&app, executor)["gpu"], ["GPU-a"]);
    c
}

/// The newest snapshot format release 0.1.0 reads.
const RELEASE_0_1_SNAPSHOTS: u8 = 7;

fn raise_to_0_2() -> Op {
    Op::RaiseLogFormat(RaiseLogFormat {
        to: LogFormat::RAISABLE,
    })
}

#[test]
fn until_the_log_format_is_raised_snapshots_are_what_release_0_1_reads() {
    let mut c = busy_cluster_with_addresses();
    assert_eq!(c.state.log_format(), LogFormat::FIRST);
    let unraised = c.state.encode_snapshot();
    assert_eq!(unraised[0], RELEASE_0_1_SNAPSHOTS);
    c.ok(raise_to_0_2());
    assert_eq!(c.state.log_format(), LogFormat::RAISABLE);
    let raised = c.state.encode_snapshot();
    assert_eq!(raised[0], 8, "the raised format is kept from format 8 on");
    let restored = ClusterState::decode_snapshot(&raised).unwrap();
    assert_eq!(restored.log_format(), LogFormat::RAISABLE);
    assert_eq!(
        ClusterState::decode_snapshot(&unraised)
            .unwrap()
            .log_format(),
        LogFormat::FIRST
    );
}

#[test]
fn a_log_format_is_never_lowered_nor_raised_to_itself() {
    let mut c = busy_cluster();
    c.ok(raise_to_0_2());
    let before = c.state.clone();
    for to in [LogFormat::FIRST, LogFormat::RAISABLE] {
        let refused = c
            .apply(Op::RaiseLogFormat(RaiseLogFormat { to }))
            .unwrap_err();
        assert!(refused.to_string().contains("never lowered"), "{refused}");
    }
    assert_eq!(c.state, before);
}

fn by_alice(op: Op) -> Op {
    Op::By(By {
        user: "alice".into(),
        generation: 1,
        op: Box::new(op),
    })
}

/// The busy cluster raised to log format 3, its GPU executor killed and not yet reported
/// ended: it keeps its GPU (snapshot format 9).
fn busy_cluster_with_a_stopping_process() -> Cluster {
    let mut c = busy_cluster_with_addresses();
    c.ok(raise_to_0_2());
    c.ok(Op::RaiseLogFormat(RaiseLogFormat {
        to: LogFormat::THIRD,
    }));
    let (app, executor) = c
        .state
        .apps()
        .values()
        .find_map(|a| {
            let gpu = a
                .executors
                .values()
                .find(|e| !e.resources.custom.is_empty())?;
            Some((a.id.clone(), gpu.id))
        })
        .unwrap();
    c.ok(Op::KillExecutors(KillExecutors {
        app,
        executors: vec![executor],
    }));
    assert_eq!(c.state.stopping().count(), 1);
    c
}

/// [`busy_cluster_with_a_stopping_process`] whose supervised driver was relaunched: its
/// worker gave it up.
fn busy_cluster_with_a_relaunch() -> Cluster {
    let mut c = busy_cluster_with_a_stopping_process();
    let running = c
        .state
        .drivers()
        .values()
        .find(|d| d.desc.supervise && d.worker.is_some())
        .unwrap()
        .id
        .clone();
    c.ok(Op::DriverStateChanged(DriverStateChanged {
        driver: running.clone(),
        state: DriverState::Relaunching,
        exit_code: None,
    }));
    let successor = c.state.relaunched_as(&running).expect("named").clone();
    assert_eq!(c.state.drivers()[&successor].state, DriverState::Submitted);
    c
}

#[test]
fn until_the_log_format_is_raised_to_3_snapshots_are_what_release_0_2_reads() {
    let mut c = busy_cluster_with_addresses();
    c.ok(raise_to_0_2());
    assert_eq!(c.state.encode_snapshot()[0], 8);
    // Raised to 3 with nothing yet that only 0.3.0 keeps, format 8 still holds it; but a
    // restore of it needs every master to read format 3.
    c.ok(Op::RaiseLogFormat(RaiseLogFormat {
        to: LogFormat::THIRD,
    }));
    let format_8 = c.state.encode_snapshot();
    assert_eq!(format_8[0], 8);
    let restore = Op::Restore(Restore { snapshot: format_8 });
    assert_eq!(restore.introduced_in(), LogFormat::THIRD);
    // A process stopped and not ended, and the executors ended since, take format 10.
    let stopping = busy_cluster_with_a_stopping_process();
    assert_eq!(stopping.state.encode_snapshot()[0], 10);
}

#[test]
fn a_snapshot_restores_the_same_state() {
    let mut c = busy_cluster_with_a_relaunch();
    assert_eq!(c.state.encode_snapshot()[0], 10);
    // An application with a resource profile takes format 11.
    let app = c.state.apps().keys().next().unwrap().clone();
    c.ok(Op::SetProfileLimit(SetProfileLimit {
        app,
        id: 1,
        profile: Profile {
            executor_cores: Some(2),
            executor_memory_mb: 2048,
            executor_resources: [("gpu".to_owned(), 1)].into(),
            env: BTreeMap::new(),
            executor_limit: 1,
        },
    }));
    assert_eq!(c.state.encode_snapshot()[0], 11);
    // Raised to 4, a queue's driver share takes format 12.
    c.ok(Op::RaiseLogFormat(RaiseLogFormat {
        to: LogFormat::FOURTH,
    }));
    let mut queues = c.state.queue_specs();
    queues[0].driver_share = Some(0.25);
    c.ok(set_queues_op(queues));
    assert_eq!(c.state.users().len(), 1);
    assert_eq!(c.state.queues()[0].capacity, Some(0.5));
    assert_eq!(c.state.queues()[0].driver_share, Some(0.25));
    assert_eq!(c.state.encode_snapshot()[0], 12);
    // At 4, an executor the masters stop keeps its cores and memory until its end is
    // reported: format 13.
    let (app, executor) = c
        .state
        .apps()
        .values()
        .find_map(|a| Some((a.id.clone(), *a.executors.keys().next()?)))
        .unwrap();
    c.ok(Op::KillExecutors(KillExecutors {
        app: app.clone(),
        executors: vec![executor],
    }));
    assert!(
        c.state
            .stopping()
            .any(|(process, _, _)| *process == Stopped::Executor(app.clone(), executor))
    );
    assert_eq!(c.state.encode_snapshot()[0], 13);
    // A leaf's ordering takes format 14.
    let mut queues = c.state.queue_specs();
    queues[0].ordering = OrderingPolicy::Drf;
    queues[0].user_weights = [("alice".into(), 2.0)].into();
    queues[0].user_limit = Some(0.5);
    for queue in &mut queues {
        queue.max_priority = Some(5);
    }
    c.ok(set_queues_op(queues.clone()));
    assert_eq!(c.state.queue_specs(), queues);
    assert_eq!(c.state.queues()[0].ordering, OrderingPolicy::Drf);
    // And an application's priority.
    c.ok(Op::SetAppPriority(SetAppPriority {
        app: app.clone(),
        priority: 3,
    }));
    assert_eq!(c.state.app_priority(&app), 3);
    // And a waiting driver's.
    let submit = Op::SubmitDriver(SubmitDriver {
        desc: driver_desc(64, 1024, false),
    });
    let Outcome::DriverSubmitted { id: driver } = c
        .ok(Op::SubmitWithSettings(SubmitWithSettings {
            submit: Box::new(submit),
            priority: 2,
            logs_events: false,
        }))
        .outcome
    else {
        panic!("a submission names its driver");
    };
    assert_eq!(c.state.driver_priority(&driver), 2);
    // And an application that logs events.
    let submit = Op::SubmitApp(SubmitApp {
        desc: app_desc(Some(1), Some(1), 256),
        executor_limit: None,
    });
    let Outcome::AppSubmitted { id: logging } = c
        .ok(Op::SubmitWithSettings(SubmitWithSettings {
            submit: Box::new(submit),
            priority: 0,
            logs_events: true,
        }))
        .outcome
    else {
        panic!("a submission names its application");
    };
    assert!(c.state.logs_events(&logging));
    let bytes = c.state.encode_snapshot();
    assert_eq!(bytes[0], SNAPSHOT_FORMAT);
    let restored = ClusterState::decode_snapshot(&bytes).unwrap();
    assert_eq!(restored, c.state);
    assert_eq!(
        restored.encode_snapshot(),
        bytes,
        "encoding is deterministic"
    );
}

#[test]
fn a_state_without_addresses_is_written_in_format_6_and_reads_back() {
    let c = busy_cluster_with_capacities();
    let bytes = c.state.encode_snapshot();
    assert_eq!(bytes[0], 6, "replicas of the previous build read it");
    assert_eq!(ClusterState::decode_snapshot(&bytes).unwrap(), c.state);
}

#[test]
fn a_state_without_capacities_is_written_in_format_5_and_reads_back() {
    let c = busy_cluster_with_a_user();
    let bytes = c.state.encode_snapshot();
    assert_eq!(bytes[0], 5, "replicas of the previous build read it");
    assert_eq!(ClusterState::decode_snapshot(&bytes).unwrap(), c.state);
}

#[test]
fn a_state_without_users_is_written_in_format_4_and_reads_back() {
    let mut c = Cluster::new();
    c.worker("w1", 8, 8192);
    c.submit_app(app_desc(Some(6), Some(2), 1024));
    c.ok(Op::DrainWorker(DrainWorker {
        id: "w1".into(),
        kill_after_ms: None,
    }));
    let bytes = c.state.encode_snapshot();
    assert_eq!(bytes[0], 4, "replicas of the previous build read it");
    assert_eq!(ClusterState::decode_snapshot(&bytes).unwrap(), c.state);
}

#[test]
fn a_state_without_drains_is_written_in_format_3_and_reads_back() {
    let mut c = busy_cluster();
    let drained = c.state.draining().keys().next().unwrap().clone();
    c.ok(Op::DecommissionWorker(DecommissionWorker { id: drained }));
    assert!(c.state.draining().is_empty());
    assert!(!c.state.reservations().is_empty());
    let bytes = c.state.encode_snapshot();
    assert_eq!(bytes[0], 3, "replicas of the previous build read it");
    assert_eq!(ClusterState::decode_snapshot(&bytes).unwrap(), c.state);
}

#[test]
fn unreadable_snapshots_are_clear_errors() {
    let bytes = busy_cluster().state.encode_snapshot();
    assert_eq!(
        ClusterState::decode_snapshot(&[]),
        Err(SnapshotError::Empty)
    );

    let mut newer = bytes.clone();
    newer[0] = SNAPSHOT_FORMAT + 1;
    let error = ClusterState::decode_snapshot(&newer).unwrap_err();
    assert_eq!(
        error,
        SnapshotError::NewerFormat {
            found: SNAPSHOT_FORMAT + 1
        }
    );
    assert!(error.to_string().contains("newer than this build's format"));

    let truncated = &bytes[..bytes.len() / 2];
    assert!(matches!(
        ClusterState::decode_snapshot(truncated),
        Err(SnapshotError::Corrupt(_))
    ));

    let mut trailing = bytes.clone();
    trailing.push(0);
    assert!(matches!(
        ClusterState::decode_snapshot(&trailing),
        Err(SnapshotError::Corrupt(_))
    ));

    assert_eq!(
        ClusterState::decode_snapshot(&[0]),
        Err(SnapshotError::UnsupportedFormat { found: 0 })
    );
}

#[test]
fn a_format_2_snapshot_still_reads() {
    // Written by the build before `Resources` replaced the flat cores, memory and resources
    // fields (format 2, before reservations): a worker with GPUs, an app holding a GPU
    // executor, a running supervised driver and a killed app. It reads as a state without
    // kept room, its GPU executor handed the worker's first GPU as it loads.
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/lifecycle/fixtures/format-2.snapshot"
    ))
    .unwrap();
    assert_eq!(bytes[0], 2);
    let state = ClusterState::decode_snapshot(&bytes).unwrap();
    state.check_invariants().unwrap();
    let gpus = |n| [("gpu".to_owned(), n)].into();
    let w2 = &state.workers()[&"w2".into()];
    assert_eq!(w2.capacity, Resources::new(8, 8192).with_custom(gpus(2)));
    assert_eq!(w2.used, Resources::new(5, 1280).with_custom(gpus(1)));
    assert_eq!(w2.fence_grace_ms, Some(10_000));
    let gpu_executor = state
        .apps()
        .values()
        .flat_map(|a| a.executors.values())
        .find(|e| !e.resources.custom.is_empty())
        .unwrap();
    assert_eq!(
        gpu_executor.resources,
        Resources::new(2, 512).with_custom(gpus(1))
    );
    let app = state
        .apps()
        .values()
        .find(|a| a.executors.values().any(|e| e == gpu_executor))
        .unwrap();
    assert_eq!(
        state.executor_addresses(&app.id, gpu_executor.id)["gpu"],
        ["0"]
    );
    let driver = state.drivers().values().next().unwrap();
    assert_eq!(driver.desc.resources, Resources::new(1, 256));
    assert_eq!(state.completed_apps().len(), 1);
    assert_eq!(
        ClusterState::decode_snapshot(&state.encode_snapshot()).unwrap(),
        state
    );
    assert!(state.reservations().is_empty());
    assert_eq!(state.encode_snapshot()[0], RELEASE_0_1_SNAPSHOTS);
}

/// Found by the `snapshot` fuzz target: a snapshot whose queue has a NaN threshold decoded
/// into a state no command could have made.
#[test]
fn a_snapshot_with_impossible_queue_settings_is_refused() {
    let bytes = [
        0x02, 0x00, 0x00, 0x01, 0xb7, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x1b, 0x00, 0x05, 0xff,
        0xff, 0xfd, 0xff, 0xff, 0xff, 0xd6, 0x01, 0x2f, 0x00, 0x04, 0x01, 0x00, 0x00, 0x01, 0x00,
        0x00, 0x00, 0x00, 0x00,
    ];
    let error = ClusterState::decode_snapshot(&bytes).unwrap_err();
    assert!(error.to_string().contains("bad queue settings"), "{error}");
    decode_hostile(&bytes);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Any bytes, and any corruption of a real snapshot, decode to an error or to a state
    /// that keeps every invariant: never a panic, never an inconsistent replica.
    #[test]
    fn hostile_snapshot_bytes_never_panic_nor_decode_inconsistent(
        noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
        flips in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..8),
    ) {
        let mut bytes = vec![SNAPSHOT_FORMAT];
        bytes.extend(&noise);
        decode_hostile(&bytes);
        let mut corrupted = busy_cluster().state.encode_snapshot();
        for (at, byte) in flips {
            let at = 1 + at % (corrupted.len() - 1);
            corrupted[at] ^= byte | 1;
        }
        decode_hostile(&corrupted);
    }
}

#[test]
fn a_new_cluster_restores_a_saved_snapshot_and_only_a_new_one() {
    let saved = busy_cluster();
    let restore = || {
        Op::Restore(Restore {
            snapshot: saved.state.encode_snapshot(),
        })
    };
    let mut fresh = Cluster::new();
    fresh.ok(restore());
    assert_eq!(fresh.state, saved.state);

    // A cluster that has run something keeps it.
    let refused = fresh.command(restore(), None).unwrap_err();
    assert!(
        refused.to_string().contains("only into a new cluster"),
        "{refused}"
    );
    // Bytes that are no snapshot change nothing either.
    let mut other = Cluster::new();
    let garbage = Op::Restore(Restore {
        snapshot: vec![SNAPSHOT_FORMAT, 1, 2, 3],
    });
    let refused = other.command(garbage, None).unwrap_err();
    assert!(refused.to_string().contains("snapshot"), "{refused}");
    assert!(other.state.workers().is_empty());
}

#[test]
fn a_restore_keeps_the_log_format_in_force() {
    let saved = busy_cluster();
    assert_eq!(saved.state.log_format(), LogFormat::FIRST);
    let mut raised = Cluster::new();
    raised.ok(raise_to_0_2());
    raised.ok(Op::Restore(Restore {
        snapshot: saved.state.encode_snapshot(),
    }));
    assert_eq!(raised.state.log_format(), LogFormat::RAISABLE);
    assert_eq!(raised.state.apps(), saved.state.apps());
}

#[test]
fn an_applications_ended_executors_are_kept_up_to_a_bound_newest_last() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    c.ok(raise_to_0_2());
    c.ok(Op::RaiseLogFormat(RaiseLogFormat {
        to: LogFormat::THIRD,
    }));
    let app = c.submit_app(app_desc(Some(4), Some(1), 256));
    // Four executors at a time exit and are replaced, until far more have ended than kept.
    let mut ended = 0;
    while ended < 2 * ENDED_EXECUTORS_KEPT {
        c.schedule();
        let live: Vec<ExecutorId> = c.state.apps()[&app].executors.keys().copied().collect();
        for executor in live {
            c.ok(Op::ExecutorStateChanged(ExecutorStateChanged {
                app: app.clone(),
                executor,
                state: ExecutorState::Exited,
                exit_code: Some(0),
            }));
            ended += 1;
        }
    }
    let kept: Vec<u32> = c.state.ended_executors(&app).map(|e| e.id.0).collect();
    assert!(
        !kept.is_empty() && kept.len() <= ENDED_EXECUTORS_KEPT,
        "{}",
        kept.len()
    );
    assert_eq!(
        kept.last(),
        Some(&(ended as u32 - 1)),
        "the newest kept last"
    );
    assert!(kept.windows(2).all(|w| w[0] < w[1]), "oldest first");
    c.assert_snapshot_round_trips();
}
