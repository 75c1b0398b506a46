//! Three `muster master` processes on loopback ports: a leader is elected, any master takes
//! client commands, the leader is killed and another takes over without losing what was
//! accepted, a restarted master rejoins, and bad input changes nothing.

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(30);

fn muster() -> Command {
    Command::new(env!("CARGO_BIN_EXE_muster"))
}

/// A free loopback port (bound, read, released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A master process, killed when dropped.
struct Master(Child);

impl Drop for Master {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Masters {
    addrs: Vec<String>,
    peers: String,
    running: Vec<Option<Master>>,
    dir: tempfile::TempDir,
}

impl Masters {
    fn start() -> Self {
        let addrs: Vec<String> = (0..3)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let peers = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut masters = Self {
            addrs,
            peers,
            running: Vec::new(),
            dir: tempfile::tempdir().unwrap(),
        };
        for id in 1..=3 {
            let master = masters.spawn(id);
            masters.running.push(Some(master));
        }
        masters
    }

    fn spawn(&self, id: usize) -> Master {
        let data_dir = self.dir.path().join(format!("master-{id}"));
        let log = std::fs::File::create(self.dir.path().join(format!("master-{id}.log"))).unwrap();
        Master(
            muster()
                .args([
                    "master",
                    "--id",
                    &id.to_string(),
                    "--listen",
                    &self.addrs[id - 1],
                    "--peers",
                    &self.peers,
                ])
                .arg("--data-dir")
                .arg(&data_dir)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("muster master starts"),
        )
    }

    /// Runs a client command against `masters` (a comma-separated list).
    fn client(masters: &str, args: &[&str]) -> Output {
        muster()
            .args(args)
            .env("MUSTER_MASTERS", masters)
            .output()
            .expect("muster runs")
    }

    /// Every master, starting with `first` (1-based).
    fn list_from(&self, first: usize) -> String {
        (0..3)
            .map(|i| self.addrs[(first - 1 + i) % 3].clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn status(&self, masters: &str) -> Value {
        let output = Self::client(masters, &["status", "--json"]);
        assert!(
            output.status.success(),
            "status failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("status prints JSON")
    }

    /// Waits until status reports a leader other than `not`, and returns its id.
    fn leader(&self, not: u64) -> u64 {
        let start = Instant::now();
        loop {
            let output = Self::client(&self.list_from(1), &["status", "--json"]);
            if output.status.success() {
                let status: Value = serde_json::from_slice(&output.stdout).unwrap();
                let leader = status["leader"].as_u64().unwrap();
                if leader != 0 && leader != not {
                    return leader;
                }
            }
            assert!(
                start.elapsed() < DEADLINE,
                "no new leader within {DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "command failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .trim()
        .to_owned()
}

fn stderr(output: &Output) -> String {
    assert!(!output.status.success(), "command should fail");
    String::from_utf8(output.stderr.clone())
        .unwrap()
        .trim()
        .to_owned()
}

/// Ids of the drivers that have not ended, in status order.
fn driver_ids(status: &Value) -> Vec<&str> {
    status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| matches!(d["state"].as_str(), Some("SUBMITTED" | "RUNNING")))
        .map(|d| d["id"].as_str().unwrap())
        .collect()
}

/// The state status shows for driver `id`.
fn driver_state<'s>(status: &'s Value, id: &str) -> &'s str {
    let drivers = status["drivers"].as_array().unwrap();
    drivers
        .iter()
        .find(|d| d["id"] == id)
        .and_then(|d| d["state"].as_str())
        .unwrap_or("missing")
}

#[test]
fn masters_elect_a_leader_survive_its_loss_and_keep_what_was_accepted() {
    let mut masters = Masters::start();
    let first = masters.leader(0);
    let follower = (1..=3).find(|&id| id != first as usize).unwrap();

    // A follower takes the submission and forwards it to the leader.
    let submitted = stdout(&Masters::client(
        &masters.addrs[follower - 1],
        &["submit", "--name", "first", "--", "/bin/true"],
    ));
    assert!(submitted.starts_with("driver-"), "{submitted}");
    let status = masters.status(&masters.list_from(follower));
    assert_eq!(driver_ids(&status), [submitted.as_str()]);
    assert_eq!(status["drivers"][0]["state"], "SUBMITTED");
    let roles: Vec<&str> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles.iter().filter(|&&r| r == "leader").count(), 1);
    assert_eq!(roles.len(), 3);

    // Kill the leader outright.
    let killed_at = Instant::now();
    masters.running[first as usize - 1] = None;
    let second = masters.leader(first);
    println!(
        "new leader {second} answered {:?} after the kill",
        killed_at.elapsed()
    );
    let status = masters.status(&masters.list_from(second as usize));
    assert_eq!(
        driver_ids(&status),
        [submitted.as_str()],
        "nothing accepted was lost"
    );

    // The cluster keeps taking writes, through any master that is up.
    let next = stdout(&Masters::client(
        &masters.list_from(first as usize),
        &["submit", "--", "/bin/true"],
    ));
    stdout(&Masters::client(
        &masters.list_from(1),
        &["kill", &submitted],
    ));
    let status = masters.status(&masters.list_from(1));
    assert_eq!(driver_ids(&status), [next.as_str()]);
    assert_eq!(driver_state(&status, &submitted), "KILLED");
    assert_eq!(status["recovery_state"], "ALIVE");

    // The killed master restarts from its data and rejoins; on its own it still answers.
    masters.running[first as usize - 1] = Some(masters.spawn(first as usize));
    let alone = masters.addrs[first as usize - 1].clone();
    let start = Instant::now();
    loop {
        let output = Masters::client(&alone, &["status", "--json"]);
        if output.status.success() {
            let status: Value = serde_json::from_slice(&output.stdout).unwrap();
            if driver_ids(&status) == [next.as_str()] && status["leader"] == second {
                break;
            }
        }
        assert!(
            start.elapsed() < DEADLINE,
            "restarted master did not rejoin"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn bad_input_is_refused_with_one_line_and_changes_nothing() {
    let masters = Masters::start();
    masters.leader(0);
    let all = masters.list_from(1);
    let before = masters.status(&all);

    let zero = Masters::client(&all, &["submit", "--cores", "0", "--", "/bin/true"]);
    assert_eq!(stderr(&zero), "error: cores: must be at least 1");
    let queue = Masters::client(&all, &["submit", "--queue", "nightly", "--", "/bin/true"]);
    assert_eq!(stderr(&queue), "error: unknown queue `nightly`");
    let unknown = Masters::client(&all, &["kill", "driver-19700101000000-0042"]);
    assert_eq!(
        stderr(&unknown),
        "error: unknown or finished driver `driver-19700101000000-0042`"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad_queues = dir.path().join("queues.json");
    std::fs::write(&bad_queues, r#"[{"name": "prod", "threshold": 1.5}]"#).unwrap();
    let set = Masters::client(&all, &["queues", "--set", bad_queues.to_str().unwrap()]);
    assert_eq!(
        stderr(&set),
        "error: queues[0].threshold: must be in (0, 1], got 1.5"
    );

    let after = masters.status(&all);
    assert_eq!(
        (&before["drivers"], &before["queues"]),
        (&after["drivers"], &after["queues"])
    );
}

#[test]
fn queues_are_set_through_any_master() {
    let masters = Masters::start();
    masters.leader(0);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("queues.json");
    std::fs::write(
        &file,
        r#"[{"name": "prod", "prior": true}, {"name": "default", "threshold": 0.8}]"#,
    )
    .unwrap();
    stdout(&Masters::client(
        &masters.list_from(2),
        &["queues", "--set", file.to_str().unwrap()],
    ));
    let queues: Value = serde_json::from_str(&stdout(&Masters::client(
        &masters.list_from(3),
        &["queues", "--json"],
    )))
    .unwrap();
    assert_eq!(queues[0]["name"], "prod");
    assert_eq!(queues[0]["prior"], true);
    assert_eq!(queues[1]["threshold"], 0.8);
    // A driver may now name the new queue.
    stdout(&Masters::client(
        &masters.list_from(1),
        &["submit", "--queue", "prod", "--", "/bin/true"],
    ));
}

#[test]
fn no_reachable_master_is_one_clear_error() {
    let unused = format!("127.0.0.1:{}", free_port());
    let output = Masters::client(&unused, &["status"]);
    let message = stderr(&output);
    assert!(
        message.starts_with("error: no master reachable (tried "),
        "{message}"
    );
    assert!(message.contains(&unused), "{message}");
}
