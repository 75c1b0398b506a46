//! `muster dev` starts a whole local cluster, kills a member and starts it again on request,
//! and stops all of it on SIGTERM.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{DEADLINE, Dev, muster, processes_with_args, stdout};

#[test]
fn dev_starts_masters_and_workers_and_stops_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    // Started with the test clusters' secret and TLS files in its environment, which it
    // must not take for its own.
    let tls = crate::support::tls_files();
    let mut dev = Dev::start(
        &["--masters", "3", "--workers", "2", "--data-dir", data],
        &[
            (
                "MUSTER_SECRET_FILE",
                crate::support::secret_file().as_os_str(),
            ),
            ("MUSTER_TLS_CERT", tls.cert.as_deref().unwrap().as_os_str()),
            ("MUSTER_TLS_KEY", tls.key.as_deref().unwrap().as_os_str()),
            ("MUSTER_TLS_CA", tls.ca.as_deref().unwrap().as_os_str()),
        ],
    );
    let masters = dev.exported("MUSTER_MASTERS").to_owned();
    let secret = dev.exported("MUSTER_SECRET_FILE").to_owned();
    let ca = dev.exported("MUSTER_TLS_CA").to_owned();
    assert_eq!(masters.split(',').count(), 3);
    // The cluster runs with its own secret and CA: the test clusters' secret is refused, its
    // own accepted.
    let status_with = |secret: &str| {
        muster()
            .args(["status", "--json"])
            .env("MUSTER_MASTERS", &masters)
            .env("MUSTER_SECRET_FILE", secret)
            .env("MUSTER_TLS_CA", &ca)
            .output()
            .unwrap()
    };
    let refused = status_with(crate::support::secret_file().to_str().unwrap());
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");

    let start = Instant::now();
    let status = loop {
        let status: Value = serde_json::from_str(&stdout(&status_with(&secret))).unwrap();
        let workers = status["workers"].as_array().unwrap();
        if workers.len() == 2 && workers.iter().all(|w| w["state"] == "ALIVE") {
            break status;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "workers did not register: {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status["recovery_state"], "ALIVE");
    assert_eq!(status["members"].as_array().unwrap().len(), 3);

    // Killing the leader is what a local cluster is for: `kill leader` does it, and dev
    // reports the exit and carries on.
    let leader = status["leader"].as_u64().unwrap() as usize;
    let leader_addr = masters.split(',').nth(leader - 1).unwrap().to_owned();
    let pid = *processes_with_args(&["--listen", &leader_addr])
        .first()
        .expect("the leader's process");
    let killed = dev.type_line("kill leader", " killed ");
    assert_eq!(killed, format!("master-{leader} killed (pid {pid})"));
    let reported = dev.line_with(" exited ");
    assert!(
        reported.starts_with(&format!("master-{leader} exited")),
        "{reported}"
    );
    let start = Instant::now();
    loop {
        let output = status_with(&secret);
        if output.status.success() {
            let status: Value = serde_json::from_slice(&output.stdout).unwrap();
            if status["leader"] != leader as u64 && status["recovery_state"] == "ALIVE" {
                break;
            }
        }
        assert!(start.elapsed() < DEADLINE, "no new leader after the kill");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        dev.process.0.try_wait().unwrap().is_none(),
        "dev keeps running"
    );

    // `restart NAME` on its standard input brings the killed master back, which answers
    // again from its own copy of the state.
    let restarted = dev.type_line(&format!("restart {leader}"), " started again ");
    assert!(
        restarted.starts_with(&format!("master-{leader} started again (pid ")),
        "{restarted}"
    );
    let start = Instant::now();
    loop {
        let output = muster()
            .args(["status", "--local", "--json"])
            .env("MUSTER_MASTERS", &leader_addr)
            .env("MUSTER_SECRET_FILE", &secret)
            .env("MUSTER_TLS_CA", &ca)
            .output()
            .unwrap();
        if output.status.success() {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the restarted master does not answer"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A driver runs when dev stops: it stops with it.
    let submitted = muster()
        .args([
            "submit",
            "--name",
            "dev-sleeper",
            "--",
            "/bin/sleep",
            "1000",
        ])
        .env("MUSTER_MASTERS", &masters)
        .env("MUSTER_SECRET_FILE", &secret)
        .env("MUSTER_TLS_CA", &ca)
        .output()
        .unwrap();
    let driver = stdout(&submitted);
    let start = Instant::now();
    let driver_pid = loop {
        let status: Value = serde_json::from_str(&stdout(&status_with(&secret))).unwrap();
        if let Some(pid) = crate::support::driver(&status, &driver).and_then(|d| d["pid"].as_u64())
        {
            break pid;
        }
        assert!(start.elapsed() < DEADLINE, "the driver never ran: {status}");
        std::thread::sleep(Duration::from_millis(100));
    };

    assert!(dev.stop().0.success());
    for addr in masters.split(',') {
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "master at {addr} still listens"
        );
    }
    assert!(
        !crate::support::alive(driver_pid),
        "the driver stopped with dev"
    );
}

#[test]
fn dev_keeps_its_temporary_data_and_logs_when_a_member_exited() {
    let dev = Dev::start(&["--masters", "1", "--workers", "1"], &[]);
    let dir = dev
        .banner
        .iter()
        .find_map(|line| line.strip_prefix("data and logs: "))
        .expect("dev names its directory")
        .to_owned();
    // The worker exits (it is stopped, as an operator might).
    let start = Instant::now();
    let worker = loop {
        if let Some(&pid) = processes_with_args(&["--work-dir", &format!("{dir}/worker-1")]).first()
        {
            break pid;
        }
        assert!(start.elapsed() < DEADLINE, "no worker process");
        std::thread::sleep(Duration::from_millis(100));
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let reported = dev.line_with(" exited ");
    assert!(reported.starts_with("worker-1 exited"), "{reported}");
    let (stopped, last) = dev.stop();
    assert!(stopped.success());
    assert!(
        last.ends_with(&format!("its data and logs stay in {dir}")),
        "{last}"
    );
    let log = std::path::Path::new(&dir).join("worker-1.log");
    assert!(log.exists(), "{} kept", log.display());
    std::fs::remove_dir_all(&dir).unwrap();
}
