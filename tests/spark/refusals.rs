//! A Spark application Muster cannot take ends spark-submit non-zero, naming the cause, and
//! leaves nothing registered or running.

use crate::support::Masters;
use crate::{app, cluster, spark, status};

/// Runs pi with `conf` settings against `masters`, which must refuse it: returns its log.
fn refused(spark: &crate::Spark, masters: &Masters, conf: &[&str]) -> String {
    let mut args: Vec<&str> = conf.iter().flat_map(|c| ["--conf", c]).collect();
    let pi = app("pi.py");
    args.extend([pi.as_str(), "2"]);
    let output = spark.run(&masters.list_from(1), &args);
    assert!(
        !output.status.success(),
        "spark-submit succeeded with {conf:?}"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn an_application_muster_refuses_ends_spark_submit_with_the_cause() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let (masters, _workers) = cluster(1);
    let log = refused(spark, &masters, &["spark.muster.queue=nightly"]);
    assert!(
        log.contains("Muster did not register the application: unknown queue `nightly`"),
        "{log}"
    );
    assert!(!log.contains("Application has been killed"), "{log}");

    let log = refused(spark, &masters, &["spark.muster.priority=high"]);
    assert!(
        log.contains("spark.muster.priority: `high` is not a whole number"),
        "{log}"
    );

    let log = refused(spark, &masters, &["spark.muster.bin=/nonexistent/muster"]);
    assert!(
        log.contains("cannot run the muster command `/nonexistent/muster`"),
        "{log}"
    );

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing-secret");
    let log = refused(
        spark,
        &masters,
        &[&format!("spark.muster.secretFile={}", missing.display())],
    );
    assert!(log.contains("missing-secret"), "{log}");

    let status = status(&masters.list_from(1));
    assert_eq!(status["apps"].as_array().unwrap().len(), 0, "{status}");
    assert!(
        status["completed_apps"].as_array().unwrap().is_empty(),
        "{status}"
    );
}

#[test]
fn a_named_users_spark_application_goes_only_where_the_queues_let_it_and_is_theirs() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let (masters, _workers) = cluster(1);
    let all = masters.list_from(1);
    let dir = tempfile::tempdir().unwrap();
    let alice = dir.path().join("alice.credential");
    let added = Masters::client(
        &all,
        &["users", "add", "alice", "--out", alice.to_str().unwrap()],
    );
    assert!(added.status.success(), "{added:?}");
    crate::support::set_queues(&all, dir.path(), r#"[{"name": "prod", "prior": true}]"#);
    let as_alice = format!("spark.muster.secretFile={}", alice.display());

    let log = refused(spark, &masters, &[&as_alice, "spark.muster.queue=prod"]);
    assert!(
        log.contains(
            "Muster did not register the application: user `alice` may not submit to queue `prod`"
        ),
        "{log}"
    );
    let pi = app("pi.py");
    let output = spark.run(&all, &["--conf", &as_alice, &pi, "2"]);
    crate::succeeded(&output);
    let status = status(&all);
    let apps = status["completed_apps"].as_array().unwrap();
    assert_eq!(apps.len(), 1, "{status}");
    assert_eq!(apps[0]["user"], "alice", "{status}");
}
