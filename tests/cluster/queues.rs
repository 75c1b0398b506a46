//! Queues with guaranteed capacities on a real cluster: a team alone borrows the idle half of
//! the cluster, and the other team gets its half back as the borrowed executors end, or
//! sooner by preemption when the masters' policy has it.

use std::io::Write as _;

use serde_json::Value;

use crate::support::{
    SLEEPERS, app, app_run, configured_masters, running_executors, start_worker, wait_for,
};

/// The queue named `name` as status shows it.
fn queue<'s>(status: &'s Value, name: &str) -> &'s Value {
    status["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == name)
        .unwrap()
}

#[test]
fn a_team_borrows_the_idle_half_and_the_other_gets_it_back_as_executors_end() {
    let (masters, _settings) = configured_masters(
        "{}",
        r#"[{"name": "team", "capacity": 1},
            {"name": "team.a", "capacity": 0.5},
            {"name": "team.b", "capacity": 0.5}]"#,
    );
    let _worker = start_worker(&masters, "w1", 4);

    // Alone, team a takes the whole cluster: its half, then the idle half of team b.
    let team = |queue: &'static str| [&["--queue", queue][..], SLEEPERS].concat();
    let (mut borrower, borrower_id, _borrower_out) = app_run(&masters, &team("team.a"));
    let alone = wait_for(&masters, "team a holding every core", |s| {
        running_executors(s, &borrower_id).len() == 4
    });
    assert_eq!(queue(&alone, "team.a")["cores_used"], 4, "{alone}");
    assert_eq!(queue(&alone, "team.a")["guaranteed_share"], 0.5, "{alone}");
    assert_eq!(queue(&alone, "team")["cores_used"], 4, "{alone}");

    // A second app of team a, then team b's: both wait, the cluster is full.
    let (_second, second_id, _second_out) = app_run(&masters, &team("team.a"));
    let (_newcomer, newcomer_id, _newcomer_out) = app_run(&masters, &team("team.b"));
    wait_for(&masters, "team b's app waiting", |s| {
        app(s, &newcomer_id).is_some_and(|a| a["waiting"].is_string())
    });

    // Team a gives back two executors: the freed cores go to team b, furthest below its
    // guarantee, not to team a's app submitted before it.
    let mut youngest: Vec<u64> = running_executors(&alone, &borrower_id)
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    youngest.sort_unstable();
    let released = format!("release {} {}", youngest[2], youngest[3]);
    writeln!(borrower.0.stdin.as_mut().unwrap(), "{released}").unwrap();
    let shared = wait_for(&masters, "team b at its half", |s| {
        running_executors(s, &newcomer_id).len() == 2 && s["workers"][0]["cores_used"] == 4
    });
    assert_eq!(
        running_executors(&shared, &borrower_id).len(),
        2,
        "{shared}"
    );
    assert!(
        running_executors(&shared, &second_id).is_empty(),
        "{shared}"
    );
    assert_eq!(queue(&shared, "team.a")["cores_used"], 2, "{shared}");
    assert_eq!(queue(&shared, "team.b")["cores_used"], 2, "{shared}");
}

#[test]
fn with_preemption_for_capacities_the_other_team_gets_its_half_back_from_running_executors() {
    let (masters, _settings) = configured_masters(
        r#"{"preemption": {"capacities": true, "delay_s": 1, "grace_s": 2, "max_fraction": 1}}"#,
        r#"[{"name": "a", "capacity": 0.5}, {"name": "b", "capacity": 0.5}]"#,
    );
    let _worker = start_worker(&masters, "w1", 4);
    let team = |queue: &'static str| [&["--queue", queue][..], SLEEPERS].concat();
    let (_borrower, borrower_id, _borrower_out) = app_run(&masters, &team("a"));
    wait_for(&masters, "team a holding every core", |s| {
        running_executors(s, &borrower_id).len() == 4
    });

    // Team b's app waits a second, then a's two youngest executors stop for it: a keeps
    // its half.
    let (_newcomer, newcomer_id, _newcomer_out) = app_run(&masters, &team("b"));
    let shared = wait_for(&masters, "team b at its half", |s| {
        running_executors(s, &newcomer_id).len() == 2
    });
    assert_eq!(
        running_executors(&shared, &borrower_id).len(),
        2,
        "{shared}"
    );
    assert_eq!(queue(&shared, "a")["cores_used"], 2, "{shared}");
    assert_eq!(queue(&shared, "b")["cores_used"], 2, "{shared}");
}
