//! Nobody without the cluster's secret, or with another role's credential, changes anything;
//! and a master or worker without a secret refuses to start where other machines reach it.

use std::os::unix::fs::PermissionsExt as _;
use std::time::Instant;

use muster_proto::auth::Role;
use muster_proto::v1::cluster_client::ClusterClient;
use muster_proto::v1::replication_client::ReplicationClient;
use muster_proto::v1::worker_link_client::WorkerLinkClient;
use muster_proto::v1::worker_message::Body as WorkerBody;
use muster_proto::v1::{KillRequest, RaftBytes, Register, Resources, StatusRequest, WorkerMessage};
use tonic::Code;

use crate::support::{
    DEADLINE, Masters, app_link, app_registration, credential, dialer, driver_request, free_port,
    muster, register_app, stderr, stdout,
};

#[test]
fn calls_without_the_secret_or_with_another_roles_credential_change_nothing() {
    let masters = Masters::start();
    masters.leader(0);
    let all = masters.list_from(1);
    let before = masters.status(&all);

    // No secret, and another cluster's: refused before anything is read (exit 3).
    let without = muster()
        .args(["submit", "--", "/bin/true"])
        .env("MUSTER_MASTERS", &all)
        .env_remove("MUSTER_SECRET_FILE")
        .output()
        .unwrap();
    assert!(
        stderr(&without).starts_with("error: no credential"),
        "{without:?}"
    );
    assert_eq!(without.status.code(), Some(3));
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other-secret");
    std::fs::write(&other, "another cluster's secret, long enough to pass").unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
    let wrong = muster()
        .args(["kill", "driver-19700101000000-0000"])
        .env("MUSTER_MASTERS", &all)
        .env("MUSTER_SECRET_FILE", &other)
        .output()
        .unwrap();
    assert_eq!(
        stderr(&wrong),
        "error: wrong credential: not this cluster's secret"
    );
    assert_eq!(wrong.status.code(), Some(3));
    // A secret file others may read is refused before anything is sent (exit 2).
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o644)).unwrap();
    let exposed = muster()
        .args(["status"])
        .env("MUSTER_MASTERS", &all)
        .env("MUSTER_SECRET_FILE", &other)
        .output()
        .unwrap();
    assert!(stderr(&exposed).contains("chmod 600"), "{exposed:?}");
    assert_eq!(exposed.status.code(), Some(2));

    // Each role's credential opens its own services only.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let leader = masters.addrs[masters.leader(0) as usize - 1].clone();
    runtime.block_on(async {
        let channel = dialer().endpoint(&leader).unwrap().connect().await.unwrap();
        let driver = driver_request();
        for role in [Role::Worker, Role::Peer] {
            let mut cluster = ClusterClient::with_interceptor(channel.clone(), credential(role));
            let denied = cluster.submit_driver(driver.clone()).await.unwrap_err();
            assert_eq!(denied.code(), Code::PermissionDenied, "{role}");
            let denied = cluster
                .kill(KillRequest {
                    request_id: String::new(),
                    id: "driver-19700101000000-0000".into(),
                })
                .await
                .unwrap_err();
            assert_eq!(denied.code(), Code::PermissionDenied, "{role}");
        }
        let register = WorkerMessage {
            body: Some(WorkerBody::Register(Register {
                worker_id: "intruder".into(),
                capacity: Some(Resources {
                    cores: 64,
                    memory_mb: 65_536,
                    ..Default::default()
                }),
                ..Default::default()
            })),
        };
        let mut workers =
            WorkerLinkClient::with_interceptor(channel.clone(), credential(Role::Client));
        let denied = workers
            .attach(tokio_stream::iter([register]))
            .await
            .unwrap_err();
        assert_eq!(denied.code(), Code::PermissionDenied);
        assert_eq!(
            denied.message(),
            "a client credential may not call WorkerLink"
        );
        let mut raft =
            ReplicationClient::with_interceptor(channel.clone(), credential(Role::Client));
        let denied = raft
            .vote(RaftBytes {
                data: vec![0],
                log_format: 0,
            })
            .await
            .unwrap_err();
        assert_eq!(denied.code(), Code::PermissionDenied);
        // The client credential still reads the status.
        let mut cluster = ClusterClient::with_interceptor(channel, credential(Role::Client));
        cluster.status(StatusRequest::default()).await.unwrap();
    });

    let after = masters.status(&all);
    for part in ["workers", "apps", "drivers", "queues"] {
        assert_eq!(before[part], after[part], "{part} changed");
    }
}

#[test]
fn without_a_secret_or_tls_only_loopback_or_insecure_is_allowed() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    // A master on every interface, without these settings from the environment.
    let master_without = |removed: &[&str], extra: &[&str]| {
        let mut command = muster();
        for key in removed {
            command.env_remove(key);
        }
        command
            .args(["master", "--id", "1", "--listen"])
            .arg(format!("0.0.0.0:{port}"))
            .arg("--peers")
            .arg(format!("1=0.0.0.0:{port}"))
            .arg("--data-dir")
            .arg(dir.path())
            .args(extra);
        command
    };
    let master = |extra: &[&str]| master_without(&["MUSTER_SECRET_FILE"], extra);
    let refused = master(&[]).output().unwrap();
    let message = stderr(&refused);
    assert!(message.contains("0.0.0.0"), "{message}");
    assert!(message.contains("--insecure"), "{message}");
    assert_eq!(refused.status.code(), Some(2));

    let mut open = master(&["--insecure"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // It serves, without a secret, and leads.
    let start = Instant::now();
    loop {
        let output = muster()
            .env_remove("MUSTER_SECRET_FILE")
            .args(["status", "--json", "--masters"])
            .arg(format!("127.0.0.1:{port}"))
            .output()
            .unwrap();
        if output.status.success() && stdout(&output).contains("\"leader\":1") {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the insecure master never served as leader"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    open.kill().unwrap();
    open.wait().unwrap();

    // A worker without a secret against masters other machines reach refuses too.
    let worker = muster()
        .env_remove("MUSTER_SECRET_FILE")
        .args([
            "worker",
            "--cores",
            "1",
            "--memory",
            "64",
            "--masters",
            "10.0.0.1:7077",
        ])
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .output()
        .unwrap();
    assert!(stderr(&worker).contains("--insecure"), "{worker:?}");
    assert_eq!(worker.status.code(), Some(2));

    // With the secret but without TLS, the credentials would cross the network in the clear.
    let tls = ["MUSTER_TLS_CERT", "MUSTER_TLS_KEY", "MUSTER_TLS_CA"];
    let cleartext = master_without(&tls, &[]).output().unwrap();
    let message = stderr(&cleartext);
    assert!(message.contains("no TLS"), "{message}");
    assert_eq!(cleartext.status.code(), Some(2));
}

#[test]
fn only_the_client_that_registered_an_app_can_re_attach_to_it() {
    use muster_proto::v1::app_event::Body as Event;

    let masters = Masters::start();
    let leader = masters.addrs[masters.leader(0) as usize - 1].clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let channel = dialer().endpoint(&leader).unwrap().connect().await.unwrap();
        let mut apps = app_link(channel, credential(Role::Client));
        let (owner, _events, registered) = register_app(&mut apps).await;
        assert_eq!(registered.app_token.len(), 64);

        // Another client of the same cluster, without the token or with another app's.
        for token in ["", "0".repeat(64).as_str()] {
            let denied = apps
                .run(tokio_stream::iter([app_registration(
                    &registered.app_id,
                    token,
                )]))
                .await
                .unwrap_err();
            assert_eq!(denied.code(), Code::PermissionDenied, "token {token:?}");
            assert!(
                denied.message().contains("app token"),
                "{}",
                denied.message()
            );
        }
        // With the token, the owner re-attaches (as after a failover).
        let mut again = apps
            .run(tokio_stream::iter([app_registration(
                &registered.app_id,
                &registered.app_token,
            )]))
            .await
            .unwrap()
            .into_inner();
        let Some(Event::Registered(reattached)) = again.message().await.unwrap().unwrap().body
        else {
            panic!("the re-attach is answered");
        };
        assert_eq!(reattached.app_id, registered.app_id);
        drop(owner);
    });
}

#[test]
fn a_client_only_secret_submits_work_and_opens_nothing_else() {
    use muster_proto::auth::Secret;

    let dir = tempfile::tempdir().unwrap();
    let clients = dir.path().join("client-secret");
    std::fs::write(&clients, "the secret handed to people who submit work").unwrap();
    std::fs::set_permissions(&clients, std::fs::Permissions::from_mode(0o600)).unwrap();
    let masters = Masters::start_with(&["--client-secret-file", clients.to_str().unwrap()]);
    masters.leader(0);

    let submitted = muster()
        .args(["submit", "--", "/bin/true"])
        .env("MUSTER_MASTERS", masters.list_from(1))
        .env("MUSTER_SECRET_FILE", &clients)
        .output()
        .unwrap();
    assert!(stdout(&submitted).starts_with("driver-"));

    // The same secret gives no worker rights.
    let worker = Secret::read(&clients).unwrap().credential(Role::Worker);
    let leader = masters.addrs[masters.leader(0) as usize - 1].clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let channel = dialer().endpoint(&leader).unwrap().connect().await.unwrap();
        let mut workers = WorkerLinkClient::with_interceptor(channel, worker);
        let register = WorkerMessage {
            body: Some(WorkerBody::Register(Register {
                worker_id: "intruder".into(),
                ..Default::default()
            })),
        };
        let denied = workers
            .attach(tokio_stream::iter([register]))
            .await
            .unwrap_err();
        assert_eq!(denied.code(), Code::Unauthenticated);
    });
}
