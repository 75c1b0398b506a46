//! Malformed snapshots are refused with the offending field, and nothing is scheduled.

use muster_core::access::QueueSpec;
use muster_core::model::HeldExecutor;
use muster_core::queues::check_paths;
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
    snapshot.apps.make_mut().push(app("a"));
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
    s.workers.make_mut()[1].capacity.cores = 0;
    assert_eq!(refused(&s), "workers[1].cores: must be at least 1");

    let mut s = base();
    s.workers.make_mut()[0].capacity.memory_mb = 0;
    assert_eq!(refused(&s), "workers[0].memory_mb: must be at least 1");

    let mut s = base();
    s.workers.make_mut()[0]
        .capacity
        .custom
        .insert("gpu".into(), 0);
    assert_eq!(refused(&s), "workers[0].resources.gpu: must be at least 1");

    let mut s = base();
    s.apps.make_mut()[0].executor_cores = Some(0);
    assert_eq!(refused(&s), "apps[0].executor_cores: must be at least 1");

    let mut s = base();
    s.apps.make_mut()[0].cores_max = Some(0);
    assert_eq!(refused(&s), "apps[0].cores_max: must be at least 1");

    let mut s = base();
    s.drivers[0].need.memory_mb = 0;
    assert_eq!(refused(&s), "drivers[0].memory_mb: must be at least 1");

    let mut s = base();
    s.config.max_drivers = Some(0);
    assert_eq!(refused(&s), "config.max_drivers: must be at least 1");
}

#[test]
fn usage_above_capacity_is_refused() {
    let mut s = base();
    s.workers.make_mut()[0].used.cores = 5;
    assert_eq!(
        refused(&s),
        "workers[0].cores_used: 5 exceeds the worker's 4 cores"
    );

    let mut s = base();
    s.workers.make_mut()[0].used.custom.insert("gpu".into(), 1);
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
    s.apps.make_mut()[0].queue = "batch".into();
    assert_eq!(refused(&s), "apps[0].queue: unknown queue `batch`");

    let mut s = base();
    s.drivers[0].queue = "batch".into();
    assert_eq!(refused(&s), "drivers[0].queue: unknown queue `batch`");

    let mut s = base();
    s.apps.make_mut()[0].executors.push(HeldExecutor {
        id: None,
        worker: "w9".into(),
        resources: Resources::new(1, 1),
        profile: 0,
    });
    assert_eq!(
        refused(&s),
        "apps[0].executors[0].worker: unknown worker `w9`"
    );
}

#[test]
fn duplicates_are_refused() {
    let mut s = base();
    s.workers.make_mut()[1].id = "w0".into();
    assert_eq!(refused(&s), "workers[1].id: duplicate worker id `w0`");

    let mut s = base();
    s.apps.make_mut().push(app("a"));
    assert_eq!(refused(&s), "apps[1].id: duplicate app id `a`");

    let mut s = base();
    s.queues = vec![queue("q", false, 1.0, 1.0), queue("q", true, 1.0, 1.0)];
    assert_eq!(refused(&s), "queues[1].name: duplicate queue `q`");
}

/// The base snapshot with queues of the given names and capacities.
fn tree(queues: &[(&str, f64)]) -> Snapshot {
    let mut s = base();
    s.queues = queues
        .iter()
        .map(|&(name, capacity)| {
            let mut q = queue(name, false, 1.0, 1.0);
            q.capacity = Some(capacity);
            q
        })
        .collect();
    s
}

#[test]
fn capacities_are_refused_naming_the_queue_or_the_parent_at_fault() {
    let valid = tree(&[("default", 0.5), ("team", 0.5), ("team.etl", 1.0)]);
    assert!(schedule(&valid).is_ok());

    let cases = [
        (
            tree(&[
                ("default", 0.5),
                ("team", 0.5),
                ("team.etl", 0.6),
                ("team.batch", 0.3),
            ]),
            "queues: the capacities of the children of `team` sum to 0.9, not 1: \
             team.batch 0.3, team.etl 0.6",
        ),
        (
            tree(&[("default", 0.5), ("team", 0.4)]),
            "queues: the capacities of the top-level queues sum to 0.9, not 1: default 0.5, \
             team 0.4",
        ),
        (
            tree(&[("default", 1.5)]),
            "queues[0].capacity: must be in [0, 1], got 1.5",
        ),
    ];
    for (snapshot, error) in cases {
        assert_eq!(refused(&snapshot), error);
    }
    let mut s = tree(&[("default", 0.5), ("team", 0.5)]);
    s.queues[1].max_capacity = 0.4;
    assert_eq!(
        refused(&s),
        "queues[1].capacity: 0.5 exceeds its max_capacity 0.4"
    );
    let mut s = tree(&[("default", 0.5), ("team", 0.5)]);
    s.queues[1].capacity = None;
    assert_eq!(
        refused(&s),
        "queues[1].capacity: missing: `default` has a capacity, so every queue needs one"
    );
}

#[test]
fn written_queue_names_must_be_the_paths_of_a_tree() {
    let paths = |names: &[&str]| -> Result<(), String> {
        let queues: Vec<_> = names.iter().map(|&n| QueueSpec::named(n)).collect();
        check_paths(&queues).map_err(|e| e.to_string())
    };
    assert_eq!(paths(&["team", "team.etl", "team.etl.daily"]), Ok(()));
    assert_eq!(
        paths(&["default", "team.etl"]),
        Err("queues[1].name: parent queue `team` of `team.etl` is not listed".to_owned())
    );
    assert_eq!(
        paths(&["default", "default.etl"]),
        Err(
            "queues[1].name: `default.etl`: `default` takes work and cannot have children"
                .to_owned()
        )
    );
    assert_eq!(
        paths(&["root.etl"]),
        Err(
            "queues[0].name: `root` is the implicit top of the tree: name queues by their path \
             below it"
                .to_owned()
        )
    );
    assert_eq!(
        paths(&["team..etl"]),
        Err(
            "queues[0].name: `team..etl` is not a queue path: segments separated by `.` must \
             not be empty"
                .to_owned()
        )
    );
    let mut prior_parent = vec![
        QueueSpec {
            prior: true,
            ..QueueSpec::named("team")
        },
        QueueSpec::named("team.etl"),
    ];
    assert_eq!(
        check_paths(&prior_parent).unwrap_err().to_string(),
        "queues[0].prior: `team` is a parent queue: `prior` belongs to its leaves"
    );
    prior_parent[0].prior = false;
    prior_parent[0].threshold = 0.5;
    assert_eq!(
        check_paths(&prior_parent).unwrap_err().to_string(),
        "queues[0].threshold: `team` is a parent queue: `threshold` belongs to its leaves"
    );
    prior_parent[0].threshold = 1.0;
    prior_parent[0].submit = Some(vec!["alice".to_owned()]);
    assert_eq!(
        check_paths(&prior_parent).unwrap_err().to_string(),
        "queues[0].submit: `team` is a parent queue: `submit` belongs to its leaves"
    );
}

#[test]
fn names_of_earlier_builds_read_as_a_lenient_tree() {
    // Builds before trees took any name: a dotted one whose prefixes are not listed is a
    // top-level queue of its own, and work in what is now a parent is still scheduled.
    let mut s = cluster(workers(1, 4, 4096));
    s.queues = vec![
        queue("root.etl", false, 1.0, 0.5),
        queue("team", false, 1.0, 1.0),
        queue("team.x.y", false, 1.0, 0.5),
    ];
    let mut etl = app("etl");
    etl.queue = "root.etl".into();
    let mut parent = app("parent");
    parent.queue = "team".into();
    s.apps = vec![etl, parent].into();
    let plan = schedule(&s).unwrap();
    let cores = |id: &str| -> u32 {
        plan.executors
            .iter()
            .filter(|g| g.app.to_string() == id)
            .map(|g| g.resources.cores * g.count)
            .sum()
    };
    assert_eq!((cores("etl"), cores("parent")), (2, 2), "{plan:?}");
    let views = muster_core::queues::views(&s.queues, &Default::default());
    let depths: Vec<usize> = views.iter().map(|v| v.depth).collect();
    assert_eq!(
        depths,
        [0, 0, 1],
        "team.x.y's parent is team, its longest listed prefix"
    );
}
