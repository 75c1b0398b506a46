//! Named users and queue access lists: who may submit where, who may kill what, and that a
//! revoked credential does nothing.

use muster_core::access::QueueSpec;
use muster_state::commands::{AddUser, By, KillApp, KillDriver, RevokeUser, set_queues_op};
use muster_state::commands::{SubmitApp, SubmitDriver};
use muster_state::{ApplyError, Op, Outcome};

use crate::support::{Cluster, app_desc, driver_desc};

fn by(user: &str, generation: u64, op: Op) -> Op {
    Op::By(By {
        user: user.into(),
        generation,
        op: Box::new(op),
    })
}

fn add(c: &mut Cluster, name: &str, admin: bool) {
    c.ok(Op::AddUser(AddUser {
        name: name.into(),
        admin,
    }));
}

fn submit_app(queue: &str) -> Op {
    let mut desc = app_desc(Some(1), Some(1), 256);
    desc.queue = queue.into();
    desc.user = "claimed".into();
    Op::SubmitApp(SubmitApp {
        desc,
        executor_limit: None,
    })
}

fn queues(prod_submit: Option<&[&str]>, administer: &[&str]) -> Op {
    let prod = QueueSpec {
        prior: true,
        submit: prod_submit.map(|users| users.iter().map(|&u| u.to_owned()).collect()),
        ..QueueSpec::named("prod")
    };
    let default = QueueSpec {
        administer: administer.iter().map(|&u| u.to_owned()).collect(),
        ..QueueSpec::named("default")
    };
    set_queues_op(vec![prod, default])
}

fn denied(result: Result<muster_state::Response, ApplyError>) -> String {
    match result {
        Err(ApplyError::Denied(message)) => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_prior_queue_takes_only_the_work_of_those_it_lists() {
    let mut c = Cluster::new();
    add(&mut c, "alice", false);
    c.ok(queues(None, &[]));
    let refused = denied(c.apply(by("alice", 1, submit_app("prod"))));
    assert!(
        refused.contains("user `alice` may not submit to queue `prod`"),
        "{refused}"
    );
    // Her work goes to the ordinary queue, recorded as hers whatever the request claims.
    let Outcome::AppSubmitted { id } = c.ok(by("alice", 1, submit_app("default"))).outcome else {
        panic!("an app id");
    };
    assert_eq!(c.state.apps()[&id].desc.user, "alice");
    // Granted the prior queue, she may use it.
    c.ok(queues(Some(&["alice"]), &[]));
    c.ok(by("alice", 1, submit_app("prod")));
    // An access list names known users only: nothing changes.
    let error = c.apply(queues(Some(&["mallory"]), &[])).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("queues[0].submit[0]: unknown user `mallory`"),
        "{error}"
    );
}

#[test]
fn others_work_is_killed_only_by_admins_and_those_who_administer_its_queue() {
    let mut c = Cluster::new();
    add(&mut c, "alice", false);
    add(&mut c, "bob", false);
    add(&mut c, "root", true);
    let Outcome::AppSubmitted { id: app } = c.ok(by("bob", 1, submit_app("default"))).outcome
    else {
        panic!("an app id");
    };
    let Outcome::DriverSubmitted { id: driver } = c
        .ok(by(
            "bob",
            1,
            Op::SubmitDriver(SubmitDriver {
                desc: driver_desc(1, 256, false),
            }),
        ))
        .outcome
    else {
        panic!("a driver id");
    };
    assert_eq!(
        c.state.driver_owner(&driver).map(|o| o.user.as_str()),
        Some("bob")
    );
    let kill_app = || Op::KillApp(KillApp { id: app.clone() });
    let refused = denied(c.apply(by("alice", 1, kill_app())));
    assert!(
        refused.contains("may not kill") && refused.contains("of `bob`"),
        "{refused}"
    );
    let kill_driver = Op::KillDriver(KillDriver { id: driver.clone() });
    denied(c.apply(by("alice", 1, kill_driver.clone())));
    // Bob may end his own; an admin, or who administers the queue, anyone's.
    c.ok(by("bob", 1, kill_driver));
    c.ok(queues(None, &["alice"]));
    c.ok(by("alice", 1, kill_app()));
    // Only admins change the cluster itself.
    let refused = denied(c.apply(by("alice", 1, queues(Some(&["alice"]), &[]))));
    assert!(refused.contains("not an admin"), "{refused}");
    c.ok(by("root", 1, queues(Some(&["alice"]), &[])));
}

#[test]
fn a_revoked_credential_does_nothing_and_a_new_one_works() {
    let mut c = Cluster::new();
    add(&mut c, "alice", false);
    c.ok(by("alice", 1, submit_app("default")));
    c.ok(Op::RevokeUser(RevokeUser {
        name: "alice".into(),
    }));
    let refused = denied(c.apply(by("alice", 1, submit_app("default"))));
    assert!(refused.contains("revoked"), "{refused}");
    // Added again, she has a new generation; the old credential stays void.
    let again = c.apply(Op::AddUser(AddUser {
        name: "alice".into(),
        admin: false,
    }));
    assert!(again.is_ok());
    assert_eq!(c.state.users()["alice"].generation, 2);
    denied(c.apply(by("alice", 1, submit_app("default"))));
    c.ok(by("alice", 2, submit_app("default")));
    // An existing user is not added twice; a malformed name is refused.
    assert!(matches!(
        c.apply(Op::AddUser(AddUser {
            name: "alice".into(),
            admin: true,
        })),
        Err(ApplyError::Conflict(_))
    ));
    assert!(matches!(
        c.apply(Op::AddUser(AddUser {
            name: "a:b".into(),
            admin: false,
        })),
        Err(ApplyError::Invalid { .. })
    ));
    // Nobody unknown gets anything.
    denied(c.apply(by("eve", 1, submit_app("default"))));
}

#[test]
fn a_queue_caps_each_users_active_work_and_frees_room_as_it_ends() {
    let mut c = Cluster::new();
    add(&mut c, "alice", true);
    add(&mut c, "bob", false);
    let default = QueueSpec {
        max_per_user: Some(2),
        ..QueueSpec::named("default")
    };
    c.ok(set_queues_op(vec![default]));
    let Outcome::AppSubmitted { id: first } = c.ok(by("alice", 1, submit_app("default"))).outcome
    else {
        panic!("an app id");
    };
    c.ok(by(
        "alice",
        1,
        Op::SubmitDriver(SubmitDriver {
            desc: driver_desc(1, 256, false),
        }),
    ));
    // Admins too: the cap is each named user's.
    let error = c.apply(by("alice", 1, submit_app("default"))).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("user `alice` has 2 applications and waiting drivers in queue `default`"),
        "{error}"
    );
    // Another user's room is their own, and the cluster's credential has no cap.
    c.ok(by("bob", 1, submit_app("default")));
    c.ok(submit_app("default"));
    c.ok(Op::KillApp(KillApp { id: first }));
    c.ok(by("alice", 1, submit_app("default")));
    // A driver placed on a worker counts through the application it registers.
    c.worker("w1", 8, 8192);
    c.schedule();
    assert_eq!(c.state.active_of("alice", &"default".into()), 1);
    c.ok(by("alice", 1, submit_app("default")));
    let zero = QueueSpec {
        max_per_user: Some(0),
        ..QueueSpec::named("default")
    };
    let error = c.apply(set_queues_op(vec![zero])).unwrap_err();
    assert!(
        error.to_string().contains("queues[0].max_per_user"),
        "{error}"
    );
}
