//! `muster bench` against three real masters: each benchmark runs end to end and reports
//! what it did.

use serde_json::Value;

use crate::support::{Masters, stdout};

fn bench(masters: &Masters, args: &[&str]) -> Value {
    let output = stdout(&Masters::client(
        &masters.list_from(1),
        &[&["bench"][..], args, &["--json"]].concat(),
    ));
    serde_json::from_str(&output).unwrap_or_else(|e| panic!("{e}: {output}"))
}

#[test]
fn submit_writes_as_many_times_as_asked_and_leaves_nothing_behind() {
    let masters = Masters::start();
    masters.leader(0);
    let report = bench(&masters, &["submit", "--clients", "4", "--requests", "40"]);
    assert_eq!(report["writes"], 40, "{report}");
    assert_eq!(report["clients"], 4, "{report}");
    assert!(report["writes_per_s"].as_f64().unwrap() > 0.0, "{report}");
    assert!(
        report["p50_ms"].as_f64() <= report["p99_ms"].as_f64(),
        "{report}"
    );
    // Clients may share fewer connections, as HTTP/2 streams.
    let shared = bench(
        &masters,
        &[
            "submit",
            "--clients",
            "8",
            "--connections",
            "2",
            "--requests",
            "64",
        ],
    );
    assert_eq!(
        (
            &shared["writes"],
            &shared["clients"],
            &shared["connections"]
        ),
        (&64.into(), &8.into(), &2.into()),
        "{shared}"
    );
    for connections in ["0", "9"] {
        let refused = Masters::client(
            &masters.list_from(1),
            &[
                "bench",
                "submit",
                "--clients",
                "8",
                "--connections",
                connections,
            ],
        );
        assert_eq!(refused.status.code(), Some(2), "{refused:?}");
        assert!(
            String::from_utf8_lossy(&refused.stderr)
                .contains("--connections must be at least 1 and at most --clients"),
            "{refused:?}"
        );
    }
    // Every submitted driver was killed right after.
    let status = masters.status(&masters.list_from(1));
    assert!(crate::support::driver_ids(&status).is_empty(), "{status}");
}

#[test]
fn submit_runs_on_a_cluster_with_workers_whose_drivers_end_before_their_kill() {
    let masters = Masters::start();
    let _worker = crate::support::start_worker(&masters, "w1", 4);
    crate::support::wait_for(&masters, "the worker", |s| {
        crate::support::alive_workers(s) == 1
    });
    // 64 clients make a kill wait long enough, often, for its driver to have run `/bin/true`.
    let report = bench(
        &masters,
        &["submit", "--clients", "64", "--requests", "2048"],
    );
    assert_eq!(report["writes"], 2048, "{report}");
    // Drivers launched on the worker ran `/bin/true` or were killed: none is left active.
    crate::support::wait_for(&masters, "every driver ended", |s| {
        s["drivers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| !matches!(d["state"].as_str(), Some("SUBMITTED" | "RUNNING")))
    });
}

#[test]
fn simulated_workers_register_heartbeat_and_come_back_after_the_leader_is_killed() {
    let masters = Masters::start();
    let leader = masters.leader(0);
    let report = bench(
        &masters,
        &[
            "workers",
            "--count",
            "200",
            "--seconds",
            "2",
            "--kill-leader",
        ],
    );
    assert_eq!(report["workers"], 200, "{report}");
    assert!(
        report["heartbeats_per_s"].as_f64().unwrap() > 50.0,
        "{report}"
    );
    assert!(report["leader_cores"].as_f64().is_some(), "{report}");
    assert!(report["failover_s"].as_f64().is_some(), "{report}");
    // The bench killed the leader; another leads, with every simulated worker ALIVE.
    let next = masters.leader(leader);
    let status = masters.status(&masters.list_from(next as usize));
    assert_eq!(crate::support::alive_workers(&status), 200, "{status}");
}

#[test]
fn drivers_submitted_at_once_are_all_placed_on_simulated_workers() {
    let masters = Masters::start();
    masters.leader(0);
    let report = bench(
        &masters,
        &[
            "workers",
            "--count",
            "20",
            "--seconds",
            "1",
            "--drivers",
            "60",
            "--clients",
            "8",
        ],
    );
    assert_eq!(report["drivers"], 60, "{report}");
    assert!(
        report["placements_per_s"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    // A quiet cluster: one leader throughout, and whatever was sent again counted.
    assert_eq!(report["leader_changes"], 0, "{report}");
    assert!(report["submission_retries"].is_u64(), "{report}");
    // Every driver was placed once: the log has each RUNNING on a simulated worker.
    let status = masters.status(&masters.list_from(1));
    let running = status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["state"] == "RUNNING" && d["worker"].is_string())
        .count();
    assert_eq!(running, 60, "{status}");
}

#[test]
fn a_leader_under_more_submissions_than_it_queues_refuses_them_busy_and_loses_none() {
    // A leader that keeps only 4 client writes waiting, under 32 clients submitting at once:
    // about eight times what it queues. Drivers end a second after their launch, so that the
    // workers' cores are used again.
    let (masters, _dir) = crate::support::configured_masters(
        r#"{"max_queued_writes": 4, "retained_drivers": 1000}"#,
        r#"[{"name": "default", "driver_share": 1}]"#,
    );
    let report = bench(
        &masters,
        &[
            "workers",
            "--count",
            "10",
            "--seconds",
            "1",
            "--drivers",
            "600",
            "--clients",
            "32",
            "--driver-s",
            "1",
        ],
    );
    // The clients were slowed down, not failed, and the leader stayed.
    assert!(report["busy_refusals"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["leader_changes"], 0, "{report}");
    assert_eq!(report["duplicate_launches"], 0, "{report}");
    let each_second: u64 = report["placed_each_s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(each_second, 600, "{report}");
    assert_each_placed_once(&masters.status(&masters.list_from(1)), 600);
}

#[test]
fn drivers_placed_while_the_leader_is_killed_are_each_placed_once() {
    let (masters, _dir) = crate::support::configured_masters(
        r#"{"retained_drivers": 5000}"#,
        r#"[{"name": "default", "driver_share": 1}]"#,
    );
    let leader = masters.leader(0);
    let report = bench(
        &masters,
        &[
            "workers",
            "--count",
            "20",
            "--seconds",
            "1",
            "--drivers",
            "1500",
            "--clients",
            "16",
            "--driver-s",
            "1",
            "--kill-leader-while-placing",
            "0.5",
        ],
    );
    // Another master took over; the clients sent what was cut off again, to it.
    assert!(report["leader_changes"].as_u64().unwrap() >= 1, "{report}");
    assert_eq!(report["duplicate_launches"], 0, "{report}");
    let next = masters.leader(leader);
    assert_each_placed_once(&masters.status(&masters.list_from(next as usize)), 1500);
}

/// Every accepted submission of a bench, `count` in all, is in the log once and was placed:
/// it runs or has run.
fn assert_each_placed_once(status: &Value, count: usize) {
    let drivers = status["drivers"].as_array().unwrap();
    let ids: std::collections::HashSet<&str> =
        drivers.iter().map(|d| d["id"].as_str().unwrap()).collect();
    assert_eq!((drivers.len(), ids.len()), (count, count), "{status}");
    assert!(
        drivers
            .iter()
            .all(|d| matches!(d["state"].as_str(), Some("RUNNING" | "FINISHED"))),
        "{status}"
    );
}
