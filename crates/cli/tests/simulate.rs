//! `muster simulate` as a user runs it: a generated workload runs to its end and prints the
//! same report twice, two cluster files compare side by side, and a malformed trace or
//! cluster file exits 2 with one line naming the line and the field.

use std::path::Path;
use std::process::{Command, Output};

fn muster(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("muster runs")
}

fn success(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8")
}

#[test]
fn the_priority_experiment_runs_the_same_twice_and_compares_with_and_without_preemption() {
    let dir = tempfile::tempdir().unwrap();
    success(&muster(
        &["simulate", "generate", "paper", "--out", "on"],
        dir.path(),
    ));
    success(&muster(
        &[
            "simulate",
            "generate",
            "paper",
            "--no-preempt",
            "--out",
            "off",
        ],
        dir.path(),
    ));
    let run = [
        "simulate",
        "on/trace.jsonl",
        "--cluster",
        "on/cluster.json",
        "--json",
    ];
    let first: serde_json::Value =
        serde_json::from_str(&success(&muster(&run, dir.path()))).unwrap();
    let second: serde_json::Value =
        serde_json::from_str(&success(&muster(&run, dir.path()))).unwrap();
    assert_eq!(first["simulated"], second["simulated"]);
    let prod = &first["simulated"]["queues"]["prod"];
    assert_eq!(prod["finished"], 3, "{prod}");
    // Prior jobs of 72.8 s on an idle cluster, under full load with preemption.
    let turnaround = prod["turnaround_s"]["p50"].as_f64().unwrap();
    assert!((72.8..80.0).contains(&turnaround), "{turnaround}");
    assert!(
        first["simulated"]["preemption"]["executors"]
            .as_u64()
            .unwrap()
            > 0
    );

    let compared = success(&muster(
        &[
            "simulate",
            "on/trace.jsonl",
            "--compare",
            "on/cluster.json",
            "off/cluster.json",
        ],
        dir.path(),
    ));
    let row = compared
        .lines()
        .find(|line| line.starts_with("executors preempted"))
        .unwrap_or_else(|| panic!("{compared}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[cells.len() - 1], "0", "{compared}");
    assert_ne!(cells[cells.len() - 2], "0", "{compared}");
}

#[test]
fn malformed_traces_and_cluster_files_exit_2_naming_the_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write(
        "cluster.json",
        r#"{"workers": [{"count": 2, "cores": 4, "memory_mb": 4096}]}"#,
    );
    write(
        "trace.jsonl",
        "{\"kind\": \"app\", \"at_s\": 0, \"tasks\": 1, \"task_s\": 1}\n\n{\"kind\": \"app\", \"at_s\": 1, \"tasks\": 0, \"task_s\": 1}\n",
    );
    write(
        "ok.jsonl",
        "{\"kind\": \"app\", \"at_s\": 0, \"tasks\": 1, \"task_s\": 1}\n",
    );
    write(
        "typo.jsonl",
        "{\"kind\": \"app\", \"at_s\": 0, \"task\": 1, \"task_s\": 1}\n",
    );
    write(
        "stranger.jsonl",
        "{\"kind\": \"lose_worker\", \"at_s\": 0, \"worker\": \"worker-9\"}\n",
    );
    write(
        "elsewhere.jsonl",
        "{\"kind\": \"app\", \"at_s\": 0, \"queue\": \"nightly\", \"tasks\": 1, \"task_s\": 1}\n",
    );
    write("empty.jsonl", "\n");
    write(
        "misspelt-preemption.json",
        r#"{"workers": [{"count": 1, "cores": 4, "memory_mb": 4096}],
            "queues": [{"name": "prod", "prior": true}],
            "master": {"preemption": {"queues": ["Prod"]}}}"#,
    );
    write(
        "ordinary-preemption.json",
        r#"{"workers": [{"count": 1, "cores": 4, "memory_mb": 4096}],
            "queues": [{"name": "prod"}],
            "master": {"preemption": {"queues": ["prod"]}}}"#,
    );
    write(
        "tiny-fraction.json",
        r#"{"workers": [{"count": 1, "cores": 4, "memory_mb": 4096}],
            "queues": [{"name": "prod", "prior": true}],
            "master": {"preemption": {"queues": ["prod"], "max_fraction": 0.1}}}"#,
    );
    write(
        "quarter-fraction.json",
        r#"{"workers": [{"count": 1, "cores": 4, "memory_mb": 4096}],
            "queues": [{"name": "prod", "prior": true}],
            "master": {"preemption": {"queues": ["prod"], "max_fraction": 0.25}}}"#,
    );
    write(
        "two-core-executors.jsonl",
        "{\"kind\": \"app\", \"at_s\": 0, \"executor_cores\": 2, \"tasks\": 1, \"task_s\": 1}\n\
         {\"kind\": \"app\", \"at_s\": 1, \"queue\": \"prod\", \"executor_cores\": 1, \"tasks\": 1, \"task_s\": 1}\n",
    );
    write(
        "bad-cluster.json",
        r#"{"workers": [{"count": 0, "cores": 4, "memory_mb": 4096}]}"#,
    );
    for (args, message) in [
        (
            ["trace.jsonl", "--cluster", "cluster.json"],
            "trace.jsonl:3: tasks: must be at least 1",
        ),
        (
            ["typo.jsonl", "--cluster", "cluster.json"],
            "typo.jsonl:1: unknown field `task`",
        ),
        (
            ["stranger.jsonl", "--cluster", "cluster.json"],
            "the trace names worker `worker-9`, which the cluster file does not have",
        ),
        (
            ["elsewhere.jsonl", "--cluster", "cluster.json"],
            "the trace submits to queue `nightly`, which the cluster file does not have",
        ),
        (
            ["empty.jsonl", "--cluster", "cluster.json"],
            "empty.jsonl:0: no entries",
        ),
        (
            ["ok.jsonl", "--cluster", "misspelt-preemption.json"],
            "misspelt-preemption.json: master.preemption.queues: no queue `Prod` among the \
             queues: it would never preempt",
        ),
        (
            ["ok.jsonl", "--cluster", "tiny-fraction.json"],
            "tiny-fraction.json: master.preemption.max_fraction: max_fraction 0.1 of 4 cores \
             is less than one core: no round could stop an executor",
        ),
        (
            [
                "two-core-executors.jsonl",
                "--cluster",
                "quarter-fraction.json",
            ],
            "master.preemption.max_fraction: max_fraction 0.25 of 4 cores is 1 core, fewer \
             than any executor of an ordinary queue holds (the smallest, 2): no round could \
             stop one",
        ),
        (
            ["ok.jsonl", "--cluster", "ordinary-preemption.json"],
            "ordinary-preemption.json: master.preemption.queues: `prod` is not a prior queue: it would never preempt",
        ),
        (
            ["ok.jsonl", "--cluster", "bad-cluster.json"],
            "bad-cluster.json: workers[0]: count, cores and memory_mb must be at least 1",
        ),
    ] {
        let output = muster(&[&["simulate"][..], &args[..]].concat(), dir.path());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

#[test]
fn the_books_csv_trace_runs() {
    let dir = tempfile::tempdir().unwrap();
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/src/user/simulate.md"
    ))
    .unwrap();
    let csv = page
        .split("A trace named `*.csv`")
        .nth(1)
        .and_then(|rest| rest.split("```\n").nth(1))
        .expect("the page's CSV trace");
    std::fs::write(dir.path().join("trace.csv"), csv).unwrap();
    std::fs::write(
        dir.path().join("cluster.json"),
        r#"{"workers": [{"count": 50, "cores": 4, "memory_mb": 16384}],
            "queues": [{"name": "etl"}, {"name": "adhoc"}]}"#,
    )
    .unwrap();
    let report: serde_json::Value = serde_json::from_str(&success(&muster(
        &[
            "simulate",
            "trace.csv",
            "--cluster",
            "cluster.json",
            "--json",
        ],
        dir.path(),
    )))
    .unwrap();
    let queues = &report["simulated"]["queues"];
    assert_eq!(queues["etl"]["finished"], 1, "{report}");
    assert_eq!(queues["adhoc"]["finished"], 1, "{report}");
}
