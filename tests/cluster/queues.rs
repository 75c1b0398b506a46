//! Queues with guaranteed capacities on a real cluster: a team alone borrows the idle half of
//! the cluster, and the other team gets its half back as the borrowed executors end, or
//! sooner by preemption when the masters' policy has it; inside a queue, a higher priority
//! is served first and, with preemption inside queues, takes executors of lower-priority
//! work; preemption settings that can never stop an executor are said where the queues are
//! shown.

use std::io::Write as _;

use serde_json::Value;

use crate::support::{
    Masters, SLEEPERS, app, app_run, configured_masters, running_executors, start_worker, wait_for,
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

/// Once the cluster's log format holds priorities, lets the `default` queue's go up to
/// `max`, through a queue file in `dir`.
fn max_priority(masters: &Masters, dir: &std::path::Path, max: i32) {
    wait_for(masters, "log format 4", |s| {
        s["log_format"].as_u64() >= Some(4)
    });
    let queues = format!(r#"[{{"name": "default", "max_priority": {max}}}]"#);
    crate::support::set_queues(&masters.list_from(1), dir, &queues);
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

#[test]
fn a_driver_submitted_with_a_higher_priority_starts_first_in_its_queue() {
    let masters = Masters::start();
    masters.leader(0);
    let list = masters.list_from(1);
    let dir = tempfile::tempdir().unwrap();
    max_priority(&masters, dir.path(), 5);
    let sleeper = ["--memory", "64", "--", "/bin/sleep", "1000"];
    let first = crate::support::submit(&masters, &sleeper);
    let urgent = crate::support::submit(&masters, &[&["--priority", "2"][..], &sleeper].concat());
    let listed = crate::support::stdout(&Masters::client(&list, &["drivers"]));
    assert!(listed.contains("  priority: 2"), "{listed}");

    // One core: the driver submitted second, at priority 2, takes it.
    let _worker = start_worker(&masters, "w1", 1);
    let status = wait_for(&masters, "a driver running", |s| {
        [&first, &urgent]
            .iter()
            .any(|id| crate::support::driver(s, id).is_some_and(|d| d["state"] == "RUNNING"))
    });
    let state = |id: &str| crate::support::driver(&status, id).unwrap()["state"].clone();
    assert_eq!(state(&urgent), "RUNNING", "{status}");
    assert_eq!(state(&first), "SUBMITTED", "{status}");
    assert_eq!(
        crate::support::driver(&status, &urgent).unwrap()["priority"],
        2
    );
}

#[test]
fn with_preemption_inside_queues_a_higher_priority_takes_executors_of_lower_priority_work() {
    let (masters, settings) = configured_masters(
        r#"{"preemption": {"within_queues": true, "delay_s": 1, "grace_s": 2, "max_fraction": 1}}"#,
        r#"[{"name": "default"}]"#,
    );
    max_priority(&masters, settings.path(), 5);
    let _worker = start_worker(&masters, "w1", 4);
    let (_batch, batch_id, _batch_out) = app_run(&masters, SLEEPERS);
    wait_for(&masters, "the batch application holding every core", |s| {
        running_executors(s, &batch_id).len() == 4
    });

    // The urgent application waits a second, then two of the batch application's executors
    // stop for it, the youngest first; the batch application keeps the other two.
    let urgent_args = [&["--priority", "3", "--cores-max", "2"][..], SLEEPERS].concat();
    let (_urgent, urgent_id, _urgent_out) = app_run(&masters, &urgent_args);
    let shared = wait_for(&masters, "the urgent application running", |s| {
        running_executors(s, &urgent_id).len() == 2
    });
    let mut kept: Vec<u64> = running_executors(&shared, &batch_id)
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    kept.sort_unstable();
    assert_eq!(kept, [0, 1], "{shared}");
    assert_eq!(shared["workers"][0]["cores_used"], 4, "{shared}");
}

#[test]
fn preemption_settings_that_can_never_stop_an_executor_are_said_where_queues_are_shown() {
    // Queues that live only in the log: the masters start without them.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("master.json");
    std::fs::write(
        &config,
        r#"{"preemption": {"queues": ["prod"], "max_fraction": 0.25}}"#,
    )
    .unwrap();
    let masters = Masters::start_with(&["--config", config.to_str().unwrap()]);
    masters.leader(0);
    let list = masters.list_from(1);
    // `muster queues` lists them and says the warning on its standard error, exit 0.
    let said = || {
        let shown = Masters::client(&list, &["queues"]);
        assert!(
            crate::support::stdout(&shown).starts_with("NAME"),
            "{shown:?}"
        );
        String::from_utf8(shown.stderr).unwrap().trim().to_owned()
    };
    let warned = |why: &str| {
        assert_eq!(
            said(),
            format!("warning: preemption can never stop an executor: {why}")
        );
    };
    let missing = "no queue `prod` among the queues: it would never preempt";
    wait_for(&masters, "the warning of a missing queue", |s| {
        s["preemption_warning"] == missing
    });
    warned(missing);

    // Once `prod` is a prior queue, the settings can preempt: nothing is said.
    crate::support::set_queues(&list, dir.path(), r#"[{"name": "prod", "prior": true}]"#);
    let status = wait_for(&masters, "no warning", |s| {
        s["preemption_warning"].is_null()
    });
    assert_eq!(status["queues"][0]["prior"], true, "{status}");
    assert_eq!(said(), "");

    // A round may stop a quarter of 4 cores: one core, and the only ordinary executors
    // hold two each.
    let _worker = start_worker(&masters, "w1", 4);
    let two_cores = [&["--executor-cores", "2"][..], &SLEEPERS[2..]].concat();
    let (_app, id, _out) = app_run(&masters, &two_cores);
    let small = "max_fraction 0.25 of 4 cores is 1 core, fewer than any executor of an \
                 ordinary queue holds (the smallest, 2): no round could stop one";
    wait_for(&masters, "the warning of a round too small", |s| {
        running_executors(s, &id).len() == 2 && s["preemption_warning"] == small
    });
    warned(small);
}

#[test]
fn the_application_of_the_highest_priority_is_served_first_whenever_it_was_submitted() {
    let masters = Masters::start();
    masters.leader(0);
    let list = masters.list_from(1);
    let dir = tempfile::tempdir().unwrap();
    max_priority(&masters, dir.path(), 2);
    // Three applications wait for a worker: the first as submitted, the second asking for
    // priority 1, the third set to 2 while it waits (asking for 3, above the queue's
    // max_priority).
    let (_first, first, _first_events) = app_run(&masters, SLEEPERS);
    let (_second, second, _second_events) =
        app_run(&masters, &[&["--priority", "1"][..], SLEEPERS].concat());
    let (_third, third, _third_events) = app_run(&masters, SLEEPERS);
    let set = Masters::client(&list, &["apps", "priority", &third, "3"]);
    assert_eq!(
        crate::support::stdout(&set),
        format!("{third}: priority 2 (its queue's max_priority)")
    );
    // Of an application that is not active, it is refused in one line.
    let unknown = Masters::client(&list, &["apps", "priority", "app-0-0000", "2"]);
    assert_eq!(unknown.status.code(), Some(3), "{unknown:?}");
    assert_eq!(
        crate::support::stderr(&unknown),
        "error: unknown or finished application `app-0-0000`"
    );
    let status = masters.status(&list);
    assert_eq!(app(&status, &second).unwrap()["priority"], 1, "{status}");
    assert_eq!(app(&status, &third).unwrap()["priority"], 2, "{status}");

    // The pass that places them gives the third every core.
    let _worker = start_worker(&masters, "w1", 4);
    let status = wait_for(&masters, "four executors", |s| {
        [&first, &second, &third]
            .iter()
            .map(|id| running_executors(s, id).len())
            .sum::<usize>()
            == 4
    });
    assert_eq!(running_executors(&status, &third).len(), 4, "{status}");
    let status = wait_for(&masters, "the others saying why they wait", |s| {
        [&first, &second].iter().all(|id| {
            app(s, id).is_some_and(|a| {
                a["waiting"]
                    .as_str()
                    .is_some_and(|w| w.ends_with("it waits behind priority 2 work of its queue"))
            })
        })
    });
    assert_eq!(running_executors(&status, &first).len(), 0, "{status}");
}
