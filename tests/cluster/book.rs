//! The book's pages as written, run by a shell as a reader types them in a second terminal
//! of `muster dev`, started as the first cluster page starts it, with the exports it prints:
//! the walk-through (`getting-started/walk-through.md`: its first block with the placeholders
//! a reader fills in filled in, then the leader killed by typing `kill leader` where `muster
//! dev` runs, and the failover block's commands; then an application attached and Ctrl-C,
//! and the block of kills, queues and users), the queues page's block as the named user it
//! made (`user/queues.md`), and the jobs page (`user/jobs.md`: its job files in client and in
//! cluster mode).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use nix::sys::signal::Signal;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{
    DEADLINE, Dev, Process, alive_workers, book_page, driver, repository_root, running_executors,
    sh_block, signal,
};

/// The commands of the `n`th `sh` block of `markdown` (from 0), each with what its comment
/// says, without the exports.
fn commands(markdown: &str, n: usize) -> Vec<(String, String)> {
    sh_block(markdown, n)
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with("export "))
        .map(|line| match line.split_once("  #") {
            Some((command, comment)) => (command.trim().to_owned(), comment.trim().to_owned()),
            None => (line.trim().to_owned(), String::new()),
        })
        .collect()
}

/// A reader's second terminal beside `muster dev`.
struct Terminal(Dev);

impl Terminal {
    /// `muster dev` as the first cluster page starts it, its data under `data`.
    fn start(data: &Path) -> Self {
        Self(Dev::start(&["--data-dir", data.to_str().unwrap()], &[]))
    }

    /// `command` run by `sh` in the repository's root.
    fn run(&self, command: &str) -> Output {
        self.0
            .second_terminal(Command::new("sh").args(["-c", command]))
            .current_dir(repository_root())
            .output()
            .unwrap()
    }

    /// `muster status --json`, once it answers and `done` holds for it.
    fn status_when(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let output = self.run("muster status --json");
            if output.status.success() {
                let status: Value = serde_json::from_slice(&output.stdout).unwrap();
                if done(&status) {
                    return status;
                }
            }
            assert!(start.elapsed() < DEADLINE, "{what} not seen");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `command` until it succeeds with `expected` in its output, within [`DEADLINE`].
    fn run_until(&self, command: &str, expected: &str) -> String {
        let start = Instant::now();
        loop {
            let output = self.run(command);
            let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
            if output.status.success() && stdout.contains(expected) {
                return stdout;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "`{command}` did not {}: {stdout}{}",
                if expected.is_empty() {
                    "succeed".to_owned()
                } else {
                    format!("print {expected}")
                },
                String::from_utf8_lossy(&output.stderr)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The id of the driver named `name` in `status`, and its process id once it has one.
fn named_driver(status: &Value, name: &str) -> Option<(String, Option<u64>)> {
    status["drivers"]
        .as_array()?
        .iter()
        .find(|d| d["name"] == name)
        .map(|d| (d["id"].as_str().unwrap().to_owned(), d["pid"].as_u64()))
}

#[test]
fn the_walk_through_runs_as_written_through_a_leader_killed() {
    let page = book_page("getting-started/walk-through.md");
    let first = commands(&page, 0);
    let failover = commands(&page, 1);
    assert!(first.len() >= 8, "the block has its commands: {first:?}");
    let data = tempfile::tempdir().unwrap();
    let mut dev = Terminal::start(data.path());
    dev.status_when("the workers", |s| {
        alive_workers(s) == 2 && s["recovery_state"] == "ALIVE"
    });
    let first_master = dev
        .0
        .exported("MUSTER_MASTERS")
        .split(',')
        .next()
        .unwrap()
        .to_owned();

    let mut first_driver: Option<String> = None;
    for (written, comment) in first {
        let command = written
            .replace("DRIVER_ID", first_driver.as_deref().unwrap_or("DRIVER_ID"))
            .replace("ONE_OF_THE_ADDRESSES", &first_master);
        // `muster logs` prints what its comment begins with once the driver has run: it is
        // asked again until then.
        let expected = if command.starts_with("muster logs ") {
            comment.split(' ').next().unwrap_or_default()
        } else {
            ""
        };
        let stdout = dev.run_until(&command, expected);
        if command.starts_with("muster submit ") && first_driver.is_none() {
            first_driver = Some(stdout.trim().to_owned());
        }
    }
    assert!(first_driver.is_some(), "the block submits a driver");
    // As the block's comments say: `hello` FAILED with exit code 3, `ok` FINISHED.
    dev.status_when("hello failed and ok finished", |s| {
        let ended = |name: &str, state: &str, code: i64| {
            s["drivers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["name"] == name && d["state"] == state && d["exit_code"] == code)
        };
        ended("hello", "FAILED", 3) && ended("ok", "FINISHED", 0)
    });

    // The leader killed as the page says, with `long` running.
    let before = dev.status_when("`long` running", |s| {
        named_driver(s, "long").is_some_and(|(_, pid)| pid.is_some())
    });
    let leader = before["leader"].as_u64().unwrap();
    let (long, pid) = named_driver(&before, "long").unwrap();
    let answer = dev.0.type_line("kill leader", " killed ");
    assert!(
        answer.starts_with(&format!("master-{leader} killed (pid ")),
        "{answer}"
    );
    let after = dev.status_when("a new leader ALIVE", |s| {
        s["leader"] != leader && s["leader"] != 0 && s["recovery_state"] == "ALIVE"
    });
    assert_eq!(
        driver(&after, &long).unwrap()["pid"].as_u64(),
        pid,
        "`long` is the same process after the failover"
    );
    for (command, _) in &failover {
        dev.run_until(command, "");
    }
    let placed = dev.status_when("the driver submitted after the failover ran", |s| {
        s["drivers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["name"] == "after" && d["state"] == "FINISHED")
    });
    assert_ne!(placed["leader"], leader);
    // And the killed master comes back as the page says.
    dev.0.type_line(
        &format!("restart master-{leader}"),
        &format!("master-{leader} started again"),
    );
}

#[test]
fn the_jobs_pages_commands_run_as_written() {
    let page = book_page("user/jobs.md");
    let (client_mode, cluster_mode) = (commands(&page, 0), commands(&page, 1));
    assert!(client_mode.len() >= 4 && cluster_mode.len() == 2, "{page}");
    let data = tempfile::tempdir().unwrap();
    let dev = Terminal::start(data.path());
    dev.status_when("the workers", |s| {
        alive_workers(s) == 2 && s["recovery_state"] == "ALIVE"
    });
    // Each job file runs to its end, every job succeeding (exit 0), once.
    for (command, _) in &client_mode {
        let output = dev.run(command);
        assert!(
            output.status.success(),
            "`{command}`: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if command.ends_with("--json") {
            let report: Value = serde_json::from_slice(&output.stdout).unwrap();
            let jobs = report["jobs"].as_array().unwrap();
            assert!(
                !jobs.is_empty() && jobs.iter().all(|j| j["state"] == "SUCCEEDED"),
                "{report}"
            );
        }
    }
    // In cluster mode the masters place the driver, which ends FINISHED with exit 0.
    let (submit, _) = &cluster_mode[0];
    let id = String::from_utf8_lossy(&dev.run(submit).stdout)
        .trim()
        .to_owned();
    let status = dev.status_when("the job file's driver finished", |s| {
        driver(s, &id).is_some_and(|d| d["state"] == "FINISHED")
    });
    assert_eq!(driver(&status, &id).unwrap()["exit_code"], 0, "{status}");
    let (drivers, _) = &cluster_mode[1];
    assert!(dev.run_until(drivers, "FINISHED").contains(&id));
}

#[test]
fn the_walk_throughs_applications_and_queues_run_as_written() {
    let page = book_page("getting-started/walk-through.md");
    let (application, housekeeping) = (commands(&page, 2), commands(&page, 3));
    assert!(
        application.len() == 2 && housekeeping.len() == 4,
        "{application:?} {housekeeping:?}"
    );
    let data = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let dev = Terminal::start(data.path());
    dev.status_when("the workers", |s| {
        alive_workers(s) == 2 && s["recovery_state"] == "ALIVE"
    });

    // `muster app run` stays attached in its terminal; `muster apps` in another shows its
    // executors, and Ctrl-C there finishes it.
    let (attach, _) = &application[0];
    let mut attached = Process(
        dev.0
            .second_terminal(Command::new("sh").args(["-c", &format!("exec {attach}")]))
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let status = dev.status_when("etl's four executors", |s| {
        s["apps"].as_array().unwrap().iter().any(|a| {
            a["name"] == "etl" && running_executors(s, a["id"].as_str().unwrap()).len() == 4
        })
    });
    let app = status["apps"][0]["id"].as_str().unwrap().to_owned();
    let (apps, _) = &application[1];
    dev.run_until(apps, &app);
    signal(attached.pid(), Signal::SIGINT);
    let status = dev.status_when("etl finished", |s| crate::support::app(s, &app).is_none());
    let ended = status["completed_apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == app.as_str())
        .unwrap_or_else(|| panic!("etl among the completed apps: {status}"));
    assert_eq!(ended["state"], "FINISHED", "{ended}");
    assert!(attached.exited("muster app run").success());

    // A driver killed by id, a queue file set and listed, a named user's file written.
    let sleeper = dev.run_until("muster submit -- /bin/sleep 600", "driver-");
    let sleeper = sleeper.trim();
    let queues = files.path().join("queues.json");
    let credential = files.path().join("alice.credential");
    for (written, comment) in housekeeping {
        if let Some(example) = comment.strip_prefix("e.g. ") {
            std::fs::write(&queues, example).unwrap();
        }
        let command = written
            .replace("driver-...", sleeper)
            .replace("queues.json", queues.to_str().unwrap())
            .replace("alice.credential", credential.to_str().unwrap());
        let expected = match command.as_str() {
            "muster queues" => "prod",
            kill if kill.starts_with("muster kill ") => "killed",
            _ => "",
        };
        dev.run_until(&command, expected);
    }
    dev.status_when("the driver killed", |s| {
        driver(s, sleeper).is_some_and(|d| d["state"] == "KILLED")
    });
    assert!(
        std::fs::metadata(&credential).unwrap().len() > 0,
        "alice's credential is written"
    );

    // The queues page's block, as alice: her credential in place of the page's file.
    let page = book_page("user/queues.md");
    let block = sh_block(&page, 0);
    assert!(block.contains("~/you.credential"), "{block}");
    let as_alice = block.replace("~/you.credential", credential.to_str().unwrap());
    let output = dev.run(&as_alice);
    assert!(
        output.status.success() && String::from_utf8_lossy(&output.stdout).contains("ALIVE"),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
