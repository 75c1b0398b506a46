//! `muster dev` starts a whole local cluster and stops all of it on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{DEADLINE, Masters, muster, stdout};

#[test]
fn dev_starts_masters_and_workers_and_stops_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let mut dev = muster()
        .args(["dev", "--masters", "3", "--workers", "2", "--data-dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("muster dev starts");
    let mut lines = BufReader::new(dev.stdout.take().unwrap()).lines();
    let masters = loop {
        let line = lines
            .next()
            .expect("muster dev prints where the masters are")
            .unwrap();
        if let Some(list) = line.strip_prefix("export MUSTER_MASTERS=") {
            break list.to_owned();
        }
    };
    assert_eq!(masters.split(',').count(), 3);

    let start = Instant::now();
    let status = loop {
        let status: Value =
            serde_json::from_str(&stdout(&Masters::client(&masters, &["status", "--json"])))
                .unwrap();
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

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(dev.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(dev.wait().unwrap().success());
    for addr in masters.split(',') {
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "master at {addr} still listens"
        );
    }
}
