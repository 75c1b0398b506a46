//! The book's walk-through as written: the commands of its first block
//! (`docs/src/getting-started/walk-through.md`) run by a shell against a real cluster, with
//! the exports a reader copies from `muster dev` made for this cluster and the placeholders a
//! reader fills in filled in.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support::{
    Masters, alive_workers, muster_binary, start_worker, wait_for, with_test_cluster_files,
};

/// The commands of the first `sh` block of `markdown`, each with what its comment says.
fn first_block(markdown: &str) -> Vec<(String, String)> {
    markdown
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a block of commands")
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with("export "))
        .map(|line| match line.split_once("  #") {
            Some((command, comment)) => (command.trim().to_owned(), comment.trim().to_owned()),
            None => (line.trim().to_owned(), String::new()),
        })
        .collect()
}

/// `command` run by `sh` as a reader's second terminal runs it: the cluster's variables
/// exported and `muster` on the `PATH`.
fn run(masters: &Masters, command: &str) -> Output {
    let bin = muster_binary();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut shell = Command::new("sh");
    with_test_cluster_files(&mut shell)
        .args(["-c", command])
        .env("MUSTER_MASTERS", masters.list_from(1))
        .env("PATH", path);
    shell.output().unwrap()
}

#[test]
fn the_walk_throughs_first_commands_run_as_written() {
    let page = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/src/getting-started/walk-through.md");
    let commands = first_block(&std::fs::read_to_string(page).unwrap());
    assert!(
        commands.len() >= 8,
        "the block has its commands: {commands:?}"
    );
    let masters = Masters::start();
    let _worker = start_worker(&masters, "worker-1", 4);
    wait_for(&masters, "the worker", |s| {
        alive_workers(s) == 1 && s["recovery_state"] == "ALIVE"
    });
    let first_master = masters.list_from(1).split(',').next().unwrap().to_owned();
    let mut first_driver: Option<String> = None;
    for (written, comment) in commands {
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
        let deadline = Instant::now() + Duration::from_secs(30);
        let output = loop {
            let output = run(&masters, &command);
            let done = output.status.success()
                && String::from_utf8_lossy(&output.stdout).contains(expected);
            if done || Instant::now() > deadline {
                break output;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains(expected),
            "`{command}` did not {}: {stdout}{}",
            if expected.is_empty() {
                "succeed".to_owned()
            } else {
                format!("print {expected}")
            },
            String::from_utf8_lossy(&output.stderr)
        );
        if command.starts_with("muster submit ") && first_driver.is_none() {
            first_driver = Some(String::from_utf8_lossy(&output.stdout).trim().to_owned());
        }
    }
    assert!(first_driver.is_some(), "the block submits a driver");
}
