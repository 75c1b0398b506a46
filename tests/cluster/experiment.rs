//! `muster experiment priority --quick`: the priority experiment runs, prior jobs under full
//! load finish before the ordinary control, and in the paper's functional order.

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
