//! Malformed snapshots are refused with the offending field, and nothing is scheduled.

use muster_core::model::HeldExecutor;
use muster_core::resources::Resources;
use muster_core::{Snapshot, schedule};

use crate::support::{app, cluster, driver, queue, workers};

fn refused(snapshot: &Snapshot) -> String {
    let error = schedule(snapshot).expect_err("snapshot should be refused");
    assert_eq!(
        muster_core::spark_reference::schedule(snapshot).unwrap_err(),
        error
    );
    error.to_string()
}

fn base() -> Snapshot {
    let mut snapshot = cluster(workers(2, 4, 4096));
    snapshot.apps.push(app("a"));
    snapshot.drivers.push(driver("d", 1, 512));
    snapshot
}

#[test]
fn the_defaults_alone_are_valid() {
    assert!(schedule(&Snapshot::default()).unwrap().executors.is_empty());
    assert!(schedule(&base()).is_ok());
}

#[test]
fn zero_capacity_and_zero_demand_are_refused() {
    let mut s = base();
    s.workers[1].cores = 0;
    assert_eq!(refused(&s), "workers[1].cores: must be at least 1");

    let mut s = base();
    s.workers[0].memory_mb = 0;
    assert_eq!(refused(&s), "workers[0].memory_mb: must be at least 1");

    let mut s = base();
    s.workers[0].resources.insert("gpu".into(), 0);
    assert_eq!(refused(&s), "workers[0].resources.gpu: must be at least 1");

    let mut s = base();
    s.apps[0].executor_cores = Some(0);
    assert_eq!(refused(&s), "apps[0].executor_cores: must be at least 1");

    let mut s = base();
    s.apps[0].cores_max = Some(0);
    assert_eq!(refused(&s), "apps[0].cores_max: must be at least 1");

    let mut s = base();
    s.drivers[0].memory_mb = 0;
    assert_eq!(refused(&s), "drivers[0].memory_mb: must be at least 1");

    let mut s = base();
    s.config.max_drivers = Some(0);
    assert_eq!(refused(&s), "config.max_drivers: must be at least 1");
}

#[test]
fn usage_above_capacity_is_refused() {
    let mut s = base();
    s.workers[0].cores_used = 5;
    assert_eq!(
        refused(&s),
        "workers[0].cores_used: 5 exceeds the worker's 4 cores"
    );

    let mut s = base();
    s.workers[0].resources_used.insert("gpu".into(), 1);
    assert_eq!(
        refused(&s),
        "workers[0].resources_used.gpu: 1 exceeds the worker's 0"
    );
}

#[test]
fn queue_fractions_must_be_in_zero_to_one() {
    for (threshold, max_capacity, field) in [
        (0.0, 1.0, "queues[0].threshold"),
        (1.5, 1.0, "queues[0].threshold"),
        (f64::NAN, 1.0, "queues[0].threshold"),
        (0.5, 0.0, "queues[0].max_capacity"),
        (0.5, -0.1, "queues[0].max_capacity"),
    ] {
        let mut s = base();
        s.queues = vec![queue("default", false, threshold, max_capacity)];
        assert!(
            refused(&s).starts_with(&format!("{field}: must be in (0, 1]")),
            "{field}"
        );
    }
}

#[test]
fn unknown_names_are_refused() {
    let mut s = base();
    s.apps[0].queue = "batch".into();
    assert_eq!(refused(&s), "apps[0].queue: unknown queue `batch`");

    let mut s = base();
    s.drivers[0].queue = "batch".into();
    assert_eq!(refused(&s), "drivers[0].queue: unknown queue `batch`");

    let mut s = base();
    s.apps[0].executors.push(HeldExecutor {
        id: None,
        worker: "w9".into(),
        resources: Resources::new(1, 1),
    });
    assert_eq!(
        refused(&s),
        "apps[0].executors[0].worker: unknown worker `w9`"
    );
}

#[test]
fn duplicates_are_refused() {
    let mut s = base();
    s.workers[1].id = "w0".into();
    assert_eq!(refused(&s), "workers[1].id: duplicate worker id `w0`");

    let mut s = base();
    s.apps.push(app("a"));
    assert_eq!(refused(&s), "apps[1].id: duplicate app id `a`");

    let mut s = base();
    s.queues = vec![queue("q", false, 1.0, 1.0), queue("q", true, 1.0, 1.0)];
    assert_eq!(refused(&s), "queues[1].name: duplicate queue `q`");
}
