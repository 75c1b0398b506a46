//! The synthetic production mix at a small scale, with faults: the same inputs give the same
//! report, every task of every finished app runs to its end exactly once, no process runs
//! twice, and the state's invariants hold after every log entry.

use muster_sim::cluster::Cluster;
use muster_sim::generate::{Mix, mix};
use muster_sim::trace::{Entry, parse, write};
use muster_sim::{Options, simulate};

fn workload(seed: u64) -> (Cluster, Vec<Entry>) {
    let workload = mix(&Mix {
        workers: 40,
        apps: 100,
        hours: 1.0,
        seed,
    });
    let cluster = Cluster::parse(
        &workload.cluster.to_string(),
        std::path::Path::new("cluster.json"),
    )
    .expect("the generated cluster file reads");
    let mut trace = workload.trace;
    // A worker lost and back, a drain, and a leader change, amid the arrivals.
    let faults = r#"{"kind": "lose_worker", "at_s": 600, "worker": "worker-0007", "down_s": 300}
{"kind": "drain", "at_s": 1200, "worker": "worker-0013", "kill_after_s": 120}
{"kind": "leader_change", "at_s": 1800}"#;
    trace.extend(parse(faults, "faults").expect("faults read"));
    // Written and read back, as a trace file is.
    let trace = parse(&write(&trace), "trace.jsonl").expect("a written trace reads back");
    (cluster, trace)
}

fn options(check_invariants: bool) -> Options {
    Options {
        seed: 7,
        until_ms: None,
        sample_ms: 10_000,
        check_invariants,
    }
}

#[test]
fn a_run_with_faults_runs_every_task_once_and_repeats_exactly() {
    let (cluster, trace) = workload(3);
    let recorder = simulate(&cluster, &trace, options(true), &mut |_| {});
    let report = recorder.report();
    let s = &report.simulated;
    assert_eq!((s.workers_lost, s.leader_changes), (1, 1));
    assert_eq!(s.ran_twice, 0, "a process ran on two workers at once");
    assert_eq!(s.overcommitted, 0, "a worker was promised more than it has");
    assert_eq!(s.unfinished, 0, "work left at the end");
    assert!(s.passes > 100, "{} passes", s.passes);
    assert!(s.preemption.executors > 0, "nothing preempted: {s:?}");
    let mut finished = 0;
    for (entry, work) in trace.iter().zip(&recorder.work) {
        let (Entry::App(app), Some(work)) = (entry, work) else {
            continue;
        };
        assert_eq!(work.outcome.as_deref(), Some("FINISHED"), "{work:?}");
        // Goodput counts tasks run to their end: each of them once.
        let expected = u64::from(app.tasks) * muster_sim::seconds_to_ms(app.task_s).max(1);
        assert_eq!(
            work.core_ms, expected,
            "{} ran tasks twice or never",
            work.name
        );
        finished += 1;
    }
    assert_eq!(finished, 100);

    let again = simulate(&cluster, &trace, options(false), &mut |_| {}).report();
    assert_eq!(
        serde_json::to_string(&again.simulated).unwrap(),
        serde_json::to_string(&report.simulated).unwrap(),
        "the same inputs gave another run"
    );
}

#[test]
fn the_mix_is_the_same_for_the_same_seed_and_another_for_another() {
    let (_, one) = workload(3);
    let (_, same) = workload(3);
    let (_, other) = workload(4);
    assert_eq!(one, same);
    assert_ne!(one, other);
    let prod = one
        .iter()
        .filter(|e| matches!(e, Entry::App(a) if a.queue.as_ref() == "prod"))
        .count();
    // About a tenth of the apps are prior.
    assert!((3..=25).contains(&prod), "{prod} prod apps of 100");
}
