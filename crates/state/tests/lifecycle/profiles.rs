//! Resource profiles (Spark's stage-level scheduling): an application's executors of other
//! sizes, each with its own limit, granted by the plans that name them and kept in
//! snapshots from log format 3.

use std::collections::BTreeMap;

use muster_core::access::QueueSpec;
use muster_core::ids::{AppId, ExecutorId, Timestamp, WorkId};
use muster_core::preempt::Preempting;
use muster_core::resources::Resources;
use muster_state::commands::{
    AppFinished, ApplyPlanWithProfiles, Grant, GrantReservations, KillExecutors, Preempt,
    PreemptForProfiles, ProfileGrant, RaiseLogFormat, SetExecutorLimit, SetProfileLimit,
    preempt_op, set_queues_op,
};
use muster_state::model::{AppState, Profile, Reservation};
use muster_state::version::LogFormat;
use muster_state::{ApplyError, ClusterState, Op, Outcome};

use crate::support::{Cluster, app_desc};

/// Profile 1: 1-core executors with 2048 MB, at most `limit` of them.
fn gpu_less(limit: u32) -> Profile {
    Profile {
        executor_cores: Some(1),
        executor_memory_mb: 2048,
        executor_resources: BTreeMap::new(),
        env: [("MUSTER_SPARK_HEAP".to_owned(), "1600m".to_owned())].into(),
        executor_limit: limit,
    }
}

fn set_profile(app: &AppId, id: u32, profile: Profile) -> Op {
    Op::SetProfileLimit(SetProfileLimit {
        app: app.clone(),
        id,
        profile,
    })
}

fn raised() -> Cluster {
    let mut c = Cluster::new();
    for to in [LogFormat::RAISABLE, LogFormat::THIRD] {
        c.ok(Op::RaiseLogFormat(RaiseLogFormat { to }));
    }
    c
}

/// A cluster at log format 3 with one worker and an app of 1-core, 512 MB executors (at
/// most one) that asked for two of profile 1, placed.
fn cluster_with_a_profile() -> (Cluster, AppId) {
    let mut c = raised();
    c.worker("w1", 8, 16384);
    let app = c.submit_app(app_desc(None, Some(1), 512));
    c.ok(Op::SetExecutorLimit(SetExecutorLimit {
        app: app.clone(),
        limit: Some(1),
    }));
    c.ok(set_profile(&app, 1, gpu_less(2)));
    c.schedule();
    (c, app)
}

fn profile_of(state: &ClusterState, app: &AppId, executor: ExecutorId) -> u32 {
    state
        .executor_profile(app, executor)
        .map_or(0, |(id, _)| id)
}

#[test]
fn each_size_is_granted_up_to_its_own_limit() {
    let (c, app) = cluster_with_a_profile();
    let executors = &c.state.apps()[&app].executors;
    let sizes: Vec<(u32, u64, u32)> = executors
        .values()
        .map(|e| {
            let profile = profile_of(&c.state, &app, e.id);
            (profile, e.resources.memory_mb, e.resources.cores)
        })
        .collect();
    assert_eq!(sizes, [(0, 512, 1), (1, 2048, 1), (1, 2048, 1)]);
    let (_, profile) = c.state.executor_profile(&app, ExecutorId(1)).unwrap();
    assert_eq!(profile.env["MUSTER_SPARK_HEAP"], "1600m");
}

#[test]
fn a_grant_beyond_its_profiles_limit_or_of_another_size_is_rejected() {
    let (mut c, app) = cluster_with_a_profile();
    let grant = |resources, profile| {
        Op::ApplyPlanWithProfiles(ApplyPlanWithProfiles {
            drivers: Vec::new(),
            executors: vec![ProfileGrant {
                grant: Grant {
                    app: app.clone(),
                    worker: "w1".into(),
                    resources,
                    count: 1,
                },
                profile,
            }],
        })
    };
    for (op, reason) in [
        (
            grant(Resources::new(1, 2048), 1),
            "ExecutorLimit { limit: 2 }",
        ),
        (grant(Resources::new(1, 512), 1), "NotTheExecutorSize"),
        (grant(Resources::new(1, 2048), 7), "NotTheExecutorSize"),
    ] {
        let Outcome::PlanApplied {
            executors,
            rejected,
            ..
        } = c.ok(op).outcome
        else {
            panic!("not a plan's outcome");
        };
        assert!(executors.is_empty());
        assert_eq!(format!("{:?}", rejected[0].reason), reason);
    }
    // Raised, the limit lets one more in.
    c.ok(set_profile(&app, 1, gpu_less(3)));
    c.schedule();
    assert_eq!(c.state.app_profiles(&app).unwrap().executors.len(), 3);
}

#[test]
fn a_profile_never_changes_its_size_and_needs_log_format_3() {
    let (mut c, app) = cluster_with_a_profile();
    let mut bigger = gpu_less(2);
    bigger.executor_memory_mb = 4096;
    let refused = c.apply(set_profile(&app, 1, bigger)).unwrap_err();
    assert!(matches!(refused, ApplyError::Conflict(_)), "{refused}");
    let refused = c.apply(set_profile(&app, 0, gpu_less(2))).unwrap_err();
    assert_eq!(refused.to_string(), "profile: must be at least 1");

    let mut old = Cluster::new();
    old.worker("w1", 8, 16384);
    let app = old.submit_app(app_desc(None, Some(1), 512));
    let refused = old.apply(set_profile(&app, 1, gpu_less(2))).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "resource profiles need every master on release 0.3.0 or newer; the cluster is at \
         log format 1 (release 0.1.0)"
    );
    assert_eq!(
        set_profile(&app, 1, gpu_less(2)).introduced_in(),
        LogFormat::THIRD
    );
}

#[test]
fn ended_executors_and_apps_leave_their_profiles() {
    let (mut c, app) = cluster_with_a_profile();
    c.ok(Op::KillExecutors(KillExecutors {
        app: app.clone(),
        executors: vec![ExecutorId(1)],
    }));
    let profiles = c.state.app_profiles(&app).unwrap();
    assert_eq!(
        profiles.executors.keys().copied().collect::<Vec<_>>(),
        [ExecutorId(2)]
    );
    c.ok(Op::AppFinished(AppFinished {
        id: app.clone(),
        state: AppState::Finished,
    }));
    assert!(c.state.app_profiles(&app).is_none());
}

#[test]
fn room_kept_by_a_preemption_is_granted_as_the_first_size_it_fits() {
    let mut c = raised();
    c.worker("w1", 2, 4096);
    let app = c.submit_app(app_desc(None, Some(1), 512));
    c.ok(set_profile(&app, 1, gpu_less(1)));
    c.schedule();
    let victim = c.state.apps()[&app]
        .executors
        .keys()
        .next()
        .copied()
        .unwrap();
    c.ok(set_queues_op(vec![QueueSpec {
        prior: true,
        ..QueueSpec::named("prod")
    }]));
    let mut desc = app_desc(None, Some(1), 512);
    desc.queue = "prod".into();
    let urgent = c.submit_app(desc);
    c.ok(set_profile(&urgent, 3, gpu_less(1)));
    c.ok(Op::Preempt(Preempt {
        victims: vec![(app.clone(), victim)],
        reservations: vec![Reservation {
            owner: WorkId::App(urgent.clone()),
            worker: "w1".into(),
            resources: Resources::new(1, 2048),
            until: Timestamp(0),
        }],
        grace_ms: 0,
    }));
    c.ok(Op::GrantReservations(GrantReservations {
        owners: vec![WorkId::App(urgent.clone())],
    }));
    let granted = c.state.apps()[&urgent]
        .executors
        .keys()
        .next()
        .copied()
        .unwrap();
    assert_eq!(profile_of(&c.state, &urgent, granted), 3);
}

/// A cluster at log format 4 with one 2-core worker filled by an ordinary application, and
/// a prior application whose own executors (1 core, 2048 MB) are of the same size as its
/// profile 1's; with the ordinary application's executor and the prior application.
fn a_prior_app_with_a_profile_of_its_own_size() -> (Cluster, AppId, ExecutorId, AppId) {
    let mut c = raised();
    c.ok(Op::RaiseLogFormat(RaiseLogFormat {
        to: LogFormat::FOURTH,
    }));
    c.worker("w1", 2, 4096);
    let ordinary = c.submit_app(app_desc(Some(2), Some(2), 4096));
    c.schedule();
    let victim = *c.state.apps()[&ordinary].executors.keys().next().unwrap();
    c.ok(set_queues_op(vec![QueueSpec {
        prior: true,
        ..QueueSpec::named("prod")
    }]));
    let mut desc = app_desc(None, Some(1), 2048);
    desc.queue = "prod".into();
    let urgent = c.submit_app(desc);
    c.ok(set_profile(&urgent, 1, gpu_less(1)));
    (c, ordinary, victim, urgent)
}

fn preempt_for(victim: (AppId, ExecutorId), owner: &AppId) -> Preempt {
    Preempt {
        victims: vec![victim],
        reservations: vec![Reservation {
            owner: WorkId::App(owner.clone()),
            worker: "w1".into(),
            resources: Resources::new(1, 2048),
            until: Timestamp(0),
        }],
        grace_ms: 0,
    }
}

#[test]
fn room_kept_for_a_profile_is_granted_as_that_profile_not_a_size_that_fits_it_too() {
    let (mut c, ordinary, victim, urgent) = a_prior_app_with_a_profile_of_its_own_size();
    c.ok(Op::PreemptForProfiles(PreemptForProfiles {
        preempt: preempt_for((ordinary.clone(), victim), &urgent),
        for_guarantees: false,
        profiles: vec![1],
    }));
    c.assert_snapshot_round_trips();
    c.ok(Op::GrantReservations(GrantReservations {
        owners: vec![WorkId::App(urgent.clone())],
    }));
    let granted = *c.state.apps()[&urgent].executors.keys().next().unwrap();
    assert_eq!(profile_of(&c.state, &urgent, granted), 1);

    // Kept by a preemption that names no profile, the same room goes to the first size it
    // fits: the application's own.
    let (mut c, ordinary, victim, urgent) = a_prior_app_with_a_profile_of_its_own_size();
    c.ok(Op::Preempt(preempt_for((ordinary, victim), &urgent)));
    c.ok(Op::GrantReservations(GrantReservations {
        owners: vec![WorkId::App(urgent.clone())],
    }));
    let granted = *c.state.apps()[&urgent].executors.keys().next().unwrap();
    assert_eq!(profile_of(&c.state, &urgent, granted), 0);
}

#[test]
fn room_kept_for_a_profile_its_owner_lacks_or_of_another_size_is_refused() {
    let (mut c, ordinary, victim, urgent) = a_prior_app_with_a_profile_of_its_own_size();
    let preempt = preempt_for((ordinary, victim), &urgent);
    for (profiles, says) in [
        (vec![2], "has no resource profile 2"),
        (vec![1, 1], "2 profiles for 1 reservations"),
    ] {
        let refused = c.apply(Op::PreemptForProfiles(PreemptForProfiles {
            preempt: preempt.clone(),
            for_guarantees: false,
            profiles,
        }));
        assert!(
            matches!(&refused, Err(ApplyError::Invalid { message, .. }) if message.contains(says)),
            "{refused:?}"
        );
    }
    let mut other_size = preempt;
    other_size.reservations[0].resources = Resources::new(2, 2048);
    let refused = c.apply(Op::PreemptForProfiles(PreemptForProfiles {
        preempt: other_size,
        for_guarantees: false,
        profiles: vec![1],
    }));
    assert!(
        matches!(refused, Err(ApplyError::Invalid { .. })),
        "{refused:?}"
    );
}

#[test]
fn a_preemption_keeps_room_for_profiles_only_once_the_log_format_is_4() {
    let (c, _, _, urgent) = a_prior_app_with_a_profile_of_its_own_size();
    let chosen = muster_core::preempt::Preemption {
        victims: Vec::new(),
        reservations: vec![muster_core::preempt::Reservation {
            id: WorkId::App(urgent.clone()),
            worker: "w1".into(),
            resources: Resources::new(1, 2048),
            profile: 1,
        }],
    };
    let op = preempt_op(chosen.clone(), 1000, Preempting::Prior, &c.state);
    assert!(
        matches!(&op, Op::PreemptForProfiles(p) if p.profiles == [1] && !p.for_guarantees),
        "{op:?}"
    );
    assert_eq!(op.introduced_in(), LogFormat::FOURTH);
    let at_3 = raised();
    let op = preempt_op(chosen, 1000, Preempting::Prior, &at_3.state);
    assert!(matches!(op, Op::Preempt(_)), "{op:?}");
}

#[test]
fn a_snapshot_keeps_the_profiles() {
    let (c, app) = cluster_with_a_profile();
    let bytes = c.state.encode_snapshot();
    assert_eq!(bytes[0], 11, "the profiles' format");
    let restored = ClusterState::decode_snapshot(&bytes).unwrap();
    assert_eq!(restored, c.state);
    assert_eq!(restored.app_profiles(&app), c.state.app_profiles(&app));
}
