//! Client commands as a newcomer meets them: they end quietly when their reader goes away,
//! say what they did when they succeed, tell a client without the CA to give it, and keep
//! asking while a call is lost on the way instead of giving up.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{
    DEADLINE, Masters, Process, app, muster, start_worker, stderr, stdout, submit, wait_for,
    without_security, worker_on,
};

/// Waits for `child` to exit, within [`DEADLINE`].
fn exit_of(child: &mut Child, what: &str) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(start.elapsed() < DEADLINE, "{what} did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `muster ARGS` against `masters`, its standard output a pipe whose reader has gone.
fn with_reader_gone(masters: &str, args: &[&str]) -> (ExitStatus, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = muster()
        .args(args)
        .env("MUSTER_MASTERS", masters)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut errors = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut errors)
        .unwrap();
    (exit_of(&mut child, &args.join(" ")), errors)
}

#[test]
fn every_printing_command_ends_quietly_when_its_reader_has_gone() {
    let masters = Masters::start();
    let _worker = start_worker(&masters, "worker-1", 2);
    let list = masters.list_from(1);
    wait_for(&masters, "the worker", |s| {
        s["workers"][0]["state"] == "ALIVE"
    });
    let driver = submit(&masters, &["--", "/bin/sleep", "600"]);
    let snapshot = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/examples/snapshot.json"
    );
    let commands: [&[&str]; 13] = [
        &["status"],
        &["status", "--json"],
        &["apps"],
        &["drivers"],
        &["workers"],
        &["members"],
        &["queues"],
        &["queues", "--json"],
        &["submit", "--", "/bin/true"],
        &["kill", &driver],
        &["plan", snapshot],
        &["completions", "bash"],
        &["--help"],
    ];
    for args in commands {
        let (status, errors) = with_reader_gone(&list, args);
        assert!(
            status.success() && !errors.contains("panicked"),
            "muster {}: {status}: {errors}",
            args.join(" ")
        );
    }

    // An attached application whose reader has gone finishes itself, killing its executors,
    // instead of running on unseen.
    let (status, errors) = with_reader_gone(
        &list,
        &[
            "app",
            "run",
            "--name",
            "unread",
            "--executor-cores",
            "1",
            "--",
            "/bin/sleep",
            "600",
        ],
    );
    assert!(status.success(), "app run: {status}: {errors}");
    let status = wait_for(&masters, "the unread application finished", |s| {
        s["apps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["name"] != "unread")
    });
    let finished = status["completed_apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "unread")
        .expect("the application is among the completed ones");
    assert_eq!(finished["state"], "FINISHED", "{finished}");
}

#[test]
fn successes_say_what_was_done_and_a_wait_says_why() {
    let masters = Masters::start();
    let _worker = start_worker(&masters, "worker-1", 1);
    let list = masters.list_from(1);
    let status = wait_for(&masters, "the worker", |s| {
        s["workers"][0]["state"] == "ALIVE"
    });
    let worker = worker_on(&status, "worker-1");
    let worker = worker.as_str().unwrap();

    // A driver larger than any worker waits, and --wait says why.
    let mut waiting = muster()
        .args(["submit", "--wait", "--cores", "2", "--", "/bin/true"])
        .env("MUSTER_MASTERS", &list)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, errors) = (
        waiting.stdout.take().unwrap(),
        waiting.stderr.take().unwrap(),
    );
    let _waiting = Process(waiting);
    let mut id = String::new();
    BufReader::new(out).read_line(&mut id).unwrap();
    let id = id.trim().to_owned();
    let line = BufReader::new(errors)
        .lines()
        .map(Result::unwrap)
        .find(|line| line.contains("waiting:"))
        .expect("--wait says why the driver waits");
    assert!(
        line.starts_with(&format!("{id} SUBMITTED, waiting: ")) && line.contains("2 cores"),
        "{line}"
    );

    let killed = stdout(&Masters::client(&list, &["kill", &id]));
    assert_eq!(killed, format!("{id} killed"));
    // Several at once, each in turn: one that cannot be killed does not stop the others, and
    // the command says which were and why the others were not.
    // A driver no worker could ever hold is accepted (workers may come that can), and says
    // so at once.
    let larger = Masters::client(&list, &["submit", "--cores", "2", "--", "/bin/true"]);
    assert_eq!(
        String::from_utf8_lossy(&larger.stderr).trim(),
        "warning: no ALIVE worker could ever hold this driver (the largest has 1 core and \
         4096 MB): it waits until one that can registers"
    );
    let (a, b) = (
        stdout(&larger),
        submit(&masters, &["--cores", "2", "--", "/bin/true"]),
    );
    let several = Masters::client(&list, &["kill", &a, "driver-none", &b]);
    let said = stderr(&several);
    assert_eq!(several.status.code(), Some(3), "{said}");
    assert!(
        said.contains(&format!("{a} killed\n{b} killed\ndriver-none not killed: ")),
        "{said}"
    );
    let after = masters.status(&list);
    for killed in [&a, &b] {
        assert_eq!(
            crate::support::driver_state(&after, killed),
            "KILLED",
            "{after}"
        );
    }
    // `muster drivers ID` shows that driver alone, named after its program by default.
    let shown = Masters::client(&list, &["drivers", "--json", &id]);
    let shown: Value = serde_json::from_str(&stdout(&shown)).unwrap();
    assert_eq!(
        (shown.as_array().map(Vec::len), &shown[0]["name"]),
        (Some(1), &serde_json::json!("true")),
        "{shown}"
    );
    let unknown = Masters::client(&list, &["drivers", "driver-none"]);
    assert_eq!(unknown.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no driver `driver-none`"),
        "{unknown:?}"
    );

    let queues = masters.dir.path().join("queues.json");
    std::fs::write(
        &queues,
        r#"[{"name": "prod", "prior": true}, {"name": "default", "threshold": 0.8}]"#,
    )
    .unwrap();
    let set = stdout(&Masters::client(
        &list,
        &["queues", "--set", queues.to_str().unwrap()],
    ));
    assert_eq!(set, "queues set: prod (prior), default");

    let drained = stdout(&Masters::client(
        &list,
        &["workers", "drain", worker, "--kill-after", "30"],
    ));
    assert_eq!(
        drained,
        format!(
            "{worker} draining: no new work, DECOMMISSIONED once nothing runs on it; what \
             still runs after 30 s is killed"
        )
    );
}

#[test]
fn a_client_without_the_ca_is_told_to_give_it() {
    let masters = Masters::start();
    let list = masters.list_from(1);
    masters.leader(0);
    for args in [
        &["status"][..],
        &["submit", "--", "/bin/true"],
        &["app", "run", "--", "/bin/true"],
    ] {
        let start = Instant::now();
        let output = muster()
            .args(args)
            .env("MUSTER_MASTERS", &list)
            .env_remove("MUSTER_TLS_CA")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let error = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {error}");
        assert!(
            error.contains("speaks TLS") && error.contains("--tls-ca"),
            "{args:?}: {error}"
        );
        // Told at once, not after the patience for an unreachable cluster.
        assert!(start.elapsed() < Duration::from_secs(5), "{args:?}");
    }
}

/// A proxy to `target` that passes a plain HTTP/2 connection's set-up through and cuts the
/// connection as soon as the client starts a call (its first HEADERS frame): every call is
/// lost on the way after the connection was made, as on a half-cut network.
fn call_breaker(target: String) -> String {
    let listener = muster_bench::cluster::loopback_listener().unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { continue };
            let Ok(mut server) = TcpStream::connect(&target) else {
                continue;
            };
            let (mut from_server, mut to_client) =
                (server.try_clone().unwrap(), client.try_clone().unwrap());
            std::thread::spawn(move || std::io::copy(&mut from_server, &mut to_client));
            std::thread::spawn(move || {
                let mut preface = [0; 24];
                if client.read_exact(&mut preface).is_err() || server.write_all(&preface).is_err() {
                    return;
                }
                loop {
                    let mut header = [0; 9];
                    if client.read_exact(&mut header).is_err() {
                        return;
                    }
                    let length = u32::from_be_bytes([0, header[0], header[1], header[2]]);
                    const HEADERS: u8 = 1;
                    if header[3] == HEADERS {
                        let _ = client.shutdown(Shutdown::Both);
                        let _ = server.shutdown(Shutdown::Both);
                        return;
                    }
                    let mut payload = vec![0; length as usize];
                    if client.read_exact(&mut payload).is_err()
                        || server.write_all(&header).is_err()
                        || server.write_all(&payload).is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn calls_broken_on_the_way_are_made_again_of_the_other_masters() {
    // Plain HTTP/2, so that the proxy can see where a call starts.
    let masters = Masters::start_plain();
    let client = |list: &str, args: &[&str]| {
        let mut command = muster();
        without_security(&mut command)
            .args(args)
            .env("MUSTER_MASTERS", list);
        command
    };
    let worker_log = masters.dir.path().join("worker-1.log");
    let _worker = Process(
        client(
            &masters.list_from(1),
            &["worker", "--cores", "2", "--memory", "4096"],
        )
        .arg("--work-dir")
        .arg(masters.dir.path().join("worker-1"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&worker_log).unwrap())
        .spawn()
        .unwrap(),
    );
    let status = |list: &str| -> Option<Value> {
        let output = client(list, &["status", "--json"]).output().unwrap();
        output
            .status
            .success()
            .then(|| serde_json::from_slice(&output.stdout).unwrap())
    };
    let start = Instant::now();
    let leader = loop {
        if let Some(s) = status(&masters.list_from(1))
            && s["recovery_state"] == "ALIVE"
            && s["workers"][0]["state"] == "ALIVE"
        {
            break s["leader"].as_u64().unwrap() as usize;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "no leader with its worker; the worker's log:\n{}",
            std::fs::read_to_string(&worker_log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The first master the clients ask is the leader, through a link that breaks every
    // call; the others answer.
    let list = format!(
        "{},{}",
        call_breaker(masters.addrs[leader - 1].clone()),
        masters.list_from(leader % 3 + 1)
    );
    assert!(status(&list).is_some(), "status is answered by the others");

    let mut attached = client(
        &list,
        &["app", "run", "--name", "patient", "--executor-cores", "1"],
    )
    .args(["--", "/bin/sleep", "600"])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Read on, and kept open: a reader that has gone would finish the application.
    let mut out = BufReader::new(attached.stdout.take().unwrap());
    let attached = Process(attached);
    let mut id = String::new();
    out.read_line(&mut id).unwrap();
    let id = id.trim().to_owned();
    assert!(id.starts_with("app-"), "app run registered: {id:?}");
    let start = Instant::now();
    while !status(&list)
        .is_some_and(|s| app(&s, &id).is_some_and(|a| a["executors"][0]["state"] == "RUNNING"))
    {
        assert!(
            start.elapsed() < DEADLINE,
            "the patient application's executor"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop((attached, out));
}
