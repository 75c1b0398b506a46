//! Admission: a burst of cluster-mode drivers on a cluster with no configuration never
//! wedges it, since each queue's drivers hold at most its driver share.

use std::time::Duration;

use serde_json::Value;

use crate::support::{Masters, driver_state, start_worker, stdout, wait_for, wait_within};

/// How long ten jobs of 24 task-seconds each may take on 8 cores, two at a time at the
/// least, with room to spare on a loaded machine.
const BURST_DEADLINE: Duration = Duration::from_secs(240);

fn drivers_in<'s>(status: &'s Value, ids: &[String], state: &str) -> Vec<&'s Value> {
    status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| ids.iter().any(|id| d["id"] == id.as_str()) && d["state"] == state)
        .collect()
}

#[test]
fn a_burst_of_cluster_mode_drivers_all_finish_on_a_cluster_with_no_configuration() {
    let masters = Masters::start();
    let _w1 = start_worker(&masters, "w1", 4);
    let _w2 = start_worker(&masters, "w2", 4);
    wait_for(&masters, "two workers", |s| {
        crate::support::alive_workers(s) == 2
    });
    // Each job asks for two one-core executors and runs 8 tasks of 3 s: the nightly burst
    // of a workflow scheduler.
    let file = masters.dir.path().join("burst.toml");
    std::fs::write(
        &file,
        r#"name = "burst"
[resources]
cores_max = 2
executor_cores = 1
executor_memory_mb = 64
[[jobs]]
name = "tasks"
  [[jobs.stages]]
  name = "s"
  tasks = 8
  run = { builtin = "sleep", ms = 3000 }
"#,
    )
    .unwrap();
    let submit = [
        "submit",
        "--cores",
        "1",
        "--memory",
        "64",
        "--job",
        file.to_str().unwrap(),
    ];
    let list = masters.list_from(1);
    let ids: Vec<String> = std::thread::scope(|scope| {
        let submitting: Vec<_> = (0..10)
            .map(|_| scope.spawn(|| stdout(&Masters::client(&list, &submit))))
            .collect();
        submitting.into_iter().map(|s| s.join().unwrap()).collect()
    });
    assert_eq!(ids.len(), 10);

    // Drivers take at most half the cores (the default driver share); those held back say
    // so, and the applications of those running get executors.
    let status = wait_for(&masters, "executors beside the running drivers", |s| {
        let executors = s["apps"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|a| a["executors"].as_array().unwrap())
            .count();
        drivers_in(s, &ids, "RUNNING").len() == 4 && executors > 0
    });
    let held_back = drivers_in(&status, &ids, "SUBMITTED");
    assert_eq!(held_back.len(), 6, "{status}");
    assert!(
        held_back.iter().all(|d| d["waiting"]
            == "drivers of queue `default` hold 4 of 4 cores allowed (driver share 0.5)"),
        "{held_back:?}"
    );

    // Every driver finishes.
    let status = wait_within(&list, "every driver FINISHED", BURST_DEADLINE, |s| {
        ids.iter()
            .all(|id| driver_state(s, id) != "SUBMITTED" && driver_state(s, id) != "RUNNING")
    });
    for id in &ids {
        let driver = crate::support::driver(&status, id).unwrap();
        assert_eq!(
            (driver["state"].as_str(), driver["exit_code"].as_i64()),
            (Some("FINISHED"), Some(0)),
            "{driver}"
        );
    }
}
