//! `muster experiment priority --quick`: the priority experiment runs, prior jobs under full
//! load finish before the ordinary control, and in the paper's functional order; its Spark
//! variant refuses to start without a Spark.

use crate::support::muster;

#[test]
fn the_priority_experiment_runs_and_prior_work_goes_first() {
    let output = muster()
        .args(["experiment", "priority", "--quick", "--json"])
        .output()
        .expect("muster experiment runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let seconds = |key: &str| report[key].as_f64().unwrap();
    assert!(seconds("idle_s") > 0.0, "{report}");
    assert!(
        seconds("prior_s") < seconds("ordinary_s"),
        "prior jobs under load beat the ordinary control: {report}"
    );
    assert_eq!(
        report["order"],
        serde_json::json!([2, 3, 1]),
        "jobs 2 and 3 (prod) finish before job 1 (default), as in the paper: {report}"
    );
}

#[test]
fn the_spark_experiment_without_spark_home_says_what_it_needs() {
    let output = muster()
        .args([
            "experiment",
            "priority",
            "--quick",
            "--spark",
            "muster-spark.jar",
        ])
        .env_remove("SPARK_HOME")
        .output()
        .expect("muster experiment runs");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("--spark needs SPARK_HOME set"), "{said}");
}
