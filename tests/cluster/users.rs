//! Named users and queue access lists between real processes: who may submit to the prior
//! queue, who may kill whose work, and that a revoked credential is refused on every master,
//! also after the leader is killed, and by the streams of applications already attached;
//! a `drf` queue shares a worker between users. Refusals change nothing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::support::{
    Masters, SLEEPERS, app_link, app_registration, app_run_from, driver_state, muster,
    muster_binary, register_app, running_executor_ids, set_queues, start_worker, stderr, stdout,
    wait_for,
};

/// `muster ARGS` against `masters` with the credential in `file`.
fn as_user(masters: &str, file: &Path, args: &[&str]) -> Output {
    muster()
        .args(args)
        .env("MUSTER_MASTERS", masters)
        .env("MUSTER_SECRET_FILE", file)
        .output()
        .expect("muster runs")
}

fn add_user(masters: &Masters, dir: &Path, name: &str) -> PathBuf {
    let file = dir.join(format!("{name}.credential"));
    let output = Masters::client(
        &masters.list_from(1),
        &["users", "add", name, "--out", file.to_str().unwrap()],
    );
    assert_eq!(
        stdout(&output),
        format!(
            "{name} added (user): their credential is in {}",
            file.display()
        )
    );
    file
}

/// The credential a named user's file holds.
fn user_credential(file: &Path) -> muster_proto::auth::Credential {
    let Ok(muster_proto::auth::SecretFile::User(credential)) =
        muster_proto::auth::SecretFile::read(file)
    else {
        panic!("{} is not a user's credential file", file.display());
    };
    credential
}

fn submit(masters: &str, file: &Path, queue: &str) -> Output {
    as_user(
        masters,
        file,
        &["submit", "--queue", queue, "--", "/bin/sleep", "60"],
    )
}

fn drivers(status: &Value) -> Vec<(String, Value)> {
    status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["id"].as_str().unwrap().to_owned(), d["user"].clone()))
        .collect()
}

#[test]
fn users_submit_where_queues_let_them_kill_their_own_and_lose_everything_when_revoked() {
    let mut masters = Masters::start();
    let leader = masters.leader(0);
    let all = masters.list_from(1);
    let dir = tempfile::tempdir().unwrap();
    let alice = add_user(&masters, dir.path(), "alice");
    let bob = add_user(&masters, dir.path(), "bob");
    set_queues(&all, dir.path(), r#"[{"name": "prod", "prior": true}]"#);

    // A prior queue takes nobody's work until an admin lists them.
    let refused = submit(&all, &alice, "prod");
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    assert!(
        stderr(&refused).contains("user `alice` may not submit to queue `prod`"),
        "{refused:?}"
    );
    assert!(
        drivers(&masters.status(&all)).is_empty(),
        "nothing submitted"
    );
    let ordinary = submit(&all, &alice, "default");
    let id = stdout(&ordinary);
    assert!(ordinary.status.success(), "{ordinary:?}");
    assert_eq!(
        drivers(&masters.status(&all)),
        vec![(id.clone(), Value::from("alice"))]
    );

    // Bob may not kill her driver; she may.
    let killed = as_user(&all, &bob, &["kill", &id]);
    assert_eq!(killed.status.code(), Some(3), "{killed:?}");
    assert!(
        stderr(&killed).contains("needs administer on queue `default`"),
        "{killed:?}"
    );
    assert_eq!(masters.status(&all)["drivers"][0]["state"], "SUBMITTED");
    let killed = as_user(&all, &alice, &["kill", &id]);
    assert_eq!(stdout(&killed), format!("{id} killed"));

    // Listed for prod, she submits there; users are no admins.
    set_queues(
        &all,
        dir.path(),
        r#"[{"name": "prod", "prior": true, "submit": ["alice"]},
            {"name": "default", "max_per_user": 1}]"#,
    );
    assert!(submit(&all, &alice, "prod").status.success());
    // One waiting driver of hers in `default`, no more.
    assert!(submit(&all, &alice, "default").status.success());
    let capped = submit(&all, &alice, "default");
    assert_eq!(capped.status.code(), Some(3), "{capped:?}");
    assert!(
        stderr(&capped).contains("has 1 applications and waiting drivers in queue `default`"),
        "{capped:?}"
    );
    let not_admin = as_user(&all, &alice, &["users", "revoke", "bob"]);
    assert_eq!(not_admin.status.code(), Some(3), "{not_admin:?}");
    assert!(stderr(&not_admin).contains("not an admin"), "{not_admin:?}");
    let queues = stdout(&Masters::client(&all, &["queues"]));
    let prod = queues
        .lines()
        .find(|l| l.starts_with("prod "))
        .unwrap_or_default();
    assert!(prod.ends_with(" alice"), "{queues}");
    let table = stdout(&Masters::client(&all, &["drivers"]));
    assert!(
        table
            .lines()
            .filter(|l| l.starts_with("driver-"))
            .all(|l| l[46..58].trim() == "alice"),
        "her drivers, named as hers: {table}"
    );
    let listed = stdout(&Masters::client(&all, &["users"]));
    assert!(
        listed.contains("bob") && listed.contains("ACTIVE"),
        "{listed}"
    );

    // Revoked, she is refused by every master, for reads too, and after a leader kill.
    let revoked = stdout(&Masters::client(&all, &["users", "revoke", "alice"]));
    assert_eq!(
        revoked,
        "alice revoked: every master refuses their credential"
    );
    let before = drivers(&masters.status(&all));
    for first in 1..=3 {
        let refused = submit(&masters.list_from(first), &alice, "default");
        assert_eq!(refused.status.code(), Some(3), "{refused:?}");
        assert!(stderr(&refused).contains("was revoked"), "{refused:?}");
    }
    masters.running[leader as usize - 1]
        .take()
        .expect("the leader runs")
        .crash();
    masters.leader(leader);
    let others = masters.list_from(leader as usize % 3 + 1);
    let status = as_user(&others, &alice, &["status"]);
    assert_eq!(status.status.code(), Some(3), "{status:?}");
    assert!(stderr(&status).contains("was revoked"), "{status:?}");
    assert_eq!(
        drivers(&masters.status(&others)),
        before,
        "refusals changed nothing"
    );
    assert!(as_user(&others, &bob, &["status"]).status.success());
}

#[test]
fn a_users_driver_calls_the_masters_as_that_user_not_with_its_workers_rights() {
    let masters = Masters::start();
    masters.leader(0);
    let all = masters.list_from(1);
    let _worker = start_worker(&masters, "w1", 2);
    let dir = tempfile::tempdir().unwrap();
    let alice = add_user(&masters, dir.path(), "alice");
    let bob = add_user(&masters, dir.path(), "bob");
    // Her driver tries what only an admin may, and what she may.
    let attempt = r#""$MUSTER_BIN" users revoke bob; test $? = 3 && "$MUSTER_BIN" status"#;
    let submitted = as_user(&all, &alice, &["submit", "--", "/bin/sh", "-c", attempt]);
    let id = stdout(&submitted);
    let status = wait_for(&masters, "the driver ended", |s| {
        driver_state(s, &id) != "SUBMITTED" && driver_state(s, &id) != "RUNNING"
    });
    let logs = Masters::client(&all, &["logs", &id]);
    assert_eq!(driver_state(&status, &id), "FINISHED", "{logs:?}");
    let listed = &status["users"].as_array().unwrap()[1];
    assert_eq!(listed["name"], "bob");
    assert_eq!(listed["revoked"], false, "her driver had no admin rights");
    // What it wrote is hers to read, not bob's.
    let hers = as_user(&all, &alice, &["logs", &id, "--stderr"]);
    assert!(hers.status.success(), "{hers:?}");
    assert!(
        String::from_utf8_lossy(&hers.stdout).contains("not an admin"),
        "{hers:?}"
    );
    let not_his = as_user(&all, &bob, &["logs", &id]);
    assert_eq!(not_his.status.code(), Some(3), "{not_his:?}");
    assert!(stderr(&not_his).contains("may not read"), "{not_his:?}");
}

#[test]
fn a_request_id_replayed_by_another_user_or_for_another_write_gives_nothing_away() {
    use muster_proto::auth::Credential;
    use muster_proto::v1::AddUserRequest;
    use muster_proto::v1::cluster_client::ClusterClient;

    let masters = Masters::start();
    let leader = masters.leader(0);
    let dir = tempfile::tempdir().unwrap();
    let bobs = user_credential(&add_user(&masters, dir.path(), "bob"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let addr = masters.addrs[leader as usize - 1].clone();
    runtime.block_on(async {
        let channel = crate::support::dialer()
            .endpoint(&addr)
            .unwrap()
            .connect()
            .await
            .unwrap();
        // The admin adds carol under request id `r1`; bob replays `r1`.
        let mut admin = ClusterClient::with_interceptor(
            channel.clone(),
            crate::support::credential(muster_proto::auth::Role::Client),
        );
        let add = |name: &str| AddUserRequest {
            request_id: "r1".into(),
            name: name.into(),
            admin: true,
        };
        let carol = admin.add_user(add("carol")).await.unwrap().into_inner();
        let mut as_bob = ClusterClient::with_interceptor(channel.clone(), bobs.clone());
        let replayed = as_bob.add_user(add("carol")).await.unwrap_err();
        assert_eq!(
            replayed.code(),
            tonic::Code::PermissionDenied,
            "{replayed:?}"
        );
        // His own earlier write's id, for a user he may not add: no credential either.
        let mut submit = crate::support::driver_request();
        submit.request_id = "r2".into();
        as_bob.submit_driver(submit).await.unwrap();
        let mut request = add("root");
        request.request_id = "r2".into();
        let reused = as_bob.add_user(request).await.unwrap_err();
        assert!(reused.message().contains("another write"), "{reused:?}");
        // The admin's retry answers the same credential, which works.
        let again = admin.add_user(add("carol")).await.unwrap().into_inner();
        assert_eq!(again.credential, carol.credential);
        let mut as_carol = ClusterClient::with_interceptor(
            channel,
            Credential::from_text(&carol.credential).unwrap(),
        );
        let status = muster_proto::v1::StatusRequest::default();
        assert!(as_carol.status(status).await.is_ok());
    });
    let users = masters.status(&masters.list_from(1))["users"].clone();
    assert_eq!(users.as_array().unwrap().len(), 2, "no root: {users}");
}

#[test]
fn a_revoked_users_attached_application_no_longer_steers_itself() {
    let masters = Masters::start();
    masters.leader(0);
    let all = masters.list_from(1);
    let _worker = start_worker(&masters, "w1", 4);
    let dir = tempfile::tempdir().unwrap();
    let alice = add_user(&masters, dir.path(), "alice");
    // An application's requests are its user's once every master reads that.
    wait_for(&masters, "log format 3 or newer", |s| {
        s["log_format"].as_u64() >= Some(3)
    });
    let (mut run, id, _events) = app_run_from(&muster_binary(), &masters, Some(&alice), SLEEPERS);
    let ids = |s: &Value| running_executor_ids(s, &id);
    wait_for(&masters, "four executors", |s| ids(s) == [0, 1, 2, 3]);
    let mut stdin = run.0.stdin.take().unwrap();
    writeln!(stdin, "limit 3").unwrap();
    writeln!(stdin, "release 0").unwrap();
    wait_for(&masters, "one released", |s| ids(s) == [1, 2, 3]);

    // Revoked, her application's next request is refused and its link with it.
    Masters::client(&all, &["users", "revoke", "alice"]);
    writeln!(stdin, "release 1").unwrap();
    let status = run.exited("the revoked application's client");
    let stderr = std::fs::read_to_string(masters.dir.path().join("app-run.log")).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("was revoked"), "{stderr}");
    assert_eq!(
        ids(&masters.status(&all)),
        [1, 2, 3],
        "the refused release changed nothing"
    );
    // Its client cannot attach again, so the leader finishes it as vanished.
    wait_for(&masters, "the application finished", |s| ids(s).is_empty());
}

#[test]
fn a_user_attaches_only_to_applications_they_may_steer() {
    let masters = Masters::start();
    let leader = masters.leader(0);
    let dir = tempfile::tempdir().unwrap();
    let credential = |name: &str| user_credential(&add_user(&masters, dir.path(), name));
    let (alice, bob) = (credential("alice"), credential("bob"));
    let addr = masters.addrs[leader as usize - 1].clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let channel = crate::support::dialer()
            .endpoint(&addr)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut as_alice = app_link(channel.clone(), alice);
        let (hers, _events, registered) = register_app(&mut as_alice).await;
        // Bob holds her application's token, but it is not his to steer.
        let mut as_bob = app_link(channel, bob);
        let denied = as_bob
            .run(tokio_stream::iter([app_registration(
                &registered.app_id,
                &registered.app_token,
            )]))
            .await
            .unwrap_err();
        assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
        assert!(
            denied.message().contains("user `bob` may not steer"),
            "{}",
            denied.message()
        );
        drop(hers);
    });
}

/// Masters whose `default` queue is `drf`, from log format 4, and the credentials of two
/// named users of it, alice's and bob's (in the directory returned with them).
fn drf_queue_of_alice_and_bob() -> (Masters, tempfile::TempDir, PathBuf, PathBuf) {
    let masters = Masters::start();
    masters.leader(0);
    let all = masters.list_from(1);
    let dir = tempfile::tempdir().unwrap();
    let alice = add_user(&masters, dir.path(), "alice");
    let bob = add_user(&masters, dir.path(), "bob");
    wait_for(&masters, "log format 4", |s| {
        s["log_format"].as_u64() >= Some(4)
    });
    set_queues(
        &all,
        dir.path(),
        r#"[{"name": "default", "ordering": "drf"}]"#,
    );
    assert_eq!(masters.status(&all)["queues"][0]["ordering"], "drf");
    (masters, dir, alice, bob)
}

#[test]
fn a_drf_queue_shares_a_worker_evenly_between_two_users_where_fifo_gives_it_to_the_first() {
    let (masters, _dir, alice, bob) = drf_queue_of_alice_and_bob();

    // Both applications wait for a worker; the pass that places them shares it: two
    // executors each, where Spark's order would give alice's, submitted first, all four.
    let program = muster_binary();
    let (_alice_run, alice_app, _alice_events) =
        app_run_from(&program, &masters, Some(&alice), SLEEPERS);
    let (_bob_run, bob_app, _bob_events) = app_run_from(&program, &masters, Some(&bob), SLEEPERS);
    let _worker = start_worker(&masters, "w1", 4);
    let held = |s: &Value, app: &str| running_executor_ids(s, app).len();
    let status = wait_for(&masters, "four executors", |s| {
        held(s, &alice_app) + held(s, &bob_app) == 4
    });
    assert_eq!(
        (held(&status, &alice_app), held(&status, &bob_app)),
        (2, 2),
        "{status}"
    );
}

#[test]
fn a_drf_queue_splits_cores_and_memory_between_a_memory_heavy_and_a_core_heavy_user() {
    let (masters, _dir, alice, bob) = drf_queue_of_alice_and_bob();

    // On 8 cores and 4096 MB, alice's executors take a quarter of the memory each and
    // bob's a quarter of the cores. Spark's order gives alice, submitted first, all the
    // memory (4 executors, bob none); DRF evens their dominant shares at 2 each, and the
    // remnant fits one more of alice's: 3 and 2.
    let sleeper = |cores: &'static str, memory: &'static str| {
        [
            "--executor-cores",
            cores,
            "--executor-memory",
            memory,
            "--",
            "/bin/sleep",
            "1000",
        ]
    };
    let program = muster_binary();
    let (_alice_run, alice_app, _alice_events) =
        app_run_from(&program, &masters, Some(&alice), &sleeper("1", "1024"));
    let (_bob_run, bob_app, _bob_events) =
        app_run_from(&program, &masters, Some(&bob), &sleeper("2", "128"));
    let _worker = start_worker(&masters, "w1", 8);
    let held = |s: &Value, app: &str| running_executor_ids(s, app).len();
    let status = wait_for(&masters, "five executors", |s| {
        held(s, &alice_app) + held(s, &bob_app) == 5
    });
    assert_eq!(
        (held(&status, &alice_app), held(&status, &bob_app)),
        (3, 2),
        "{status}"
    );
}
