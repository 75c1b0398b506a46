//! The queue rules of the YARN high-priority design, as Muster defines them.

use muster_core::model::{HeldExecutor, Snapshot};

use crate::support::{
    app, cluster, cores_per_worker, driver, plan, queue, reason, worker, workers,
};

fn with_queues(mut snapshot: Snapshot) -> Snapshot {
    snapshot.queues = vec![
        queue("prod", true, 1.0, 0.5),
        queue("default", false, 0.8, 1.0),
        queue("batch", false, 1.0, 0.5),
    ];
    snapshot
}

#[test]
fn prior_apps_are_served_first() {
    let mut snapshot = with_queues(cluster(workers(1, 4, 4096)));
    let mut normal = app("normal");
    normal.executor_memory_mb = 512;
    let mut urgent = app("urgent");
    urgent.queue = "prod".into();
    urgent.executor_memory_mb = 512;
    snapshot.apps = vec![normal, urgent];
    let plan = plan(&snapshot);
    assert_eq!(cores_per_worker(&snapshot, &plan, "urgent"), [4]);
    assert_eq!(cores_per_worker(&snapshot, &plan, "normal"), [0]);
    assert_eq!(plan.executors[0].app.0, "urgent");
}

#[test]
fn prior_drivers_are_served_first() {
    let mut snapshot = with_queues(cluster(workers(1, 1, 4096)));
    let mut urgent = driver("urgent", 1, 512);
    urgent.queue = "prod".into();
    snapshot.drivers = vec![driver("normal", 1, 512), urgent];
    let plan = plan(&snapshot);
    assert_eq!(plan.drivers.len(), 1);
    assert_eq!(plan.drivers[0].driver.0, "urgent");
    assert_eq!(
        reason(&plan, "normal").unwrap(),
        "no ALIVE worker has 1 core, 512 MB free for a driver"
    );
}

#[test]
fn prior_queue_may_take_the_whole_cluster() {
    // prod's max_capacity of 0.5 is ignored: prior queues may use everything.
    let mut snapshot = with_queues(cluster(workers(2, 4, 4096)));
    let mut urgent = app("urgent");
    urgent.queue = "prod".into();
    urgent.executor_memory_mb = 512;
    snapshot.apps = vec![urgent];
    let plan = plan(&snapshot);
    assert_eq!(cores_per_worker(&snapshot, &plan, "urgent"), [4, 4]);
}

#[test]
fn max_capacity_caps_a_normal_queue() {
    // batch may hold floor(0.5 * 8) = 4 cores; one app already holds 1 of them.
    let mut snapshot = with_queues(cluster(workers(2, 4, 4096)));
    snapshot.workers[0].cores_used = 1;
    snapshot.workers[0].memory_used_mb = 512;
    let mut first = app("first");
    first.queue = "batch".into();
    first.executor_memory_mb = 512;
    first.executors = vec![HeldExecutor {
        worker: "w0".into(),
        cores: 1,
        memory_mb: 512,
    }];
    let mut second = first.clone();
    second.id = "second".into();
    second.executors.clear();
    snapshot.apps = vec![first, second];
    let plan = plan(&snapshot);
    let granted: u32 = plan.executors.iter().map(|e| e.resources.cores).sum();
    assert_eq!(granted, 3);
    assert_eq!(cores_per_worker(&snapshot, &plan, "second"), [0, 0]);
    assert_eq!(
        reason(&plan, "second").unwrap(),
        "queue `batch` at max capacity: its executors hold 4 of 4 cores"
    );
}

#[test]
fn threshold_limits_normal_executors_on_prior_workers() {
    // w0 runs prior work on 2 of 10 cores: default (threshold 0.8) may fill it to 8 cores.
    let mut snapshot = with_queues(cluster(vec![
        worker("w0", 10, 10_000),
        worker("w1", 10, 10_000),
    ]));
    snapshot.workers[0].hosts_prior = true;
    snapshot.workers[0].cores_used = 2;
    let mut normal = app("normal");
    normal.executor_memory_mb = 100;
    snapshot.apps = vec![normal];
    let plan = plan(&snapshot);
    assert_eq!(cores_per_worker(&snapshot, &plan, "normal"), [6, 10]);
}

#[test]
fn threshold_limits_memory_too() {
    // 700 of 1000 MB used with prior work: default may go to 800 MB, so a 200 MB executor waits.
    let mut snapshot = with_queues(cluster(vec![worker("w0", 10, 1000)]));
    snapshot.workers[0].hosts_prior = true;
    snapshot.workers[0].memory_used_mb = 700;
    let mut normal = app("normal");
    normal.executor_memory_mb = 200;
    snapshot.apps = vec![normal];
    let plan = plan(&snapshot);
    assert!(plan.executors.is_empty());
    assert_eq!(
        reason(&plan, "normal").unwrap(),
        "no ALIVE worker has 1 core, 200 MB free for an executor: workers with room run prior \
         work and queue `default` may fill them only up to threshold 0.8"
    );
}

#[test]
fn prior_work_placed_in_the_pass_starts_the_threshold() {
    // The prior app takes 2 cores of the only worker; the normal app then stops at 8 of 10.
    let mut snapshot = with_queues(cluster(workers(1, 10, 10_000)));
    let mut urgent = app("urgent");
    urgent.queue = "prod".into();
    urgent.cores_max = Some(2);
    urgent.executor_memory_mb = 100;
    let mut normal = app("normal");
    normal.executor_memory_mb = 100;
    snapshot.apps = vec![normal, urgent];
    let plan = plan(&snapshot);
    assert_eq!(cores_per_worker(&snapshot, &plan, "urgent"), [2]);
    assert_eq!(cores_per_worker(&snapshot, &plan, "normal"), [6]);
}

#[test]
fn threshold_admits_drivers_by_queue() {
    // 7 of 10 cores used with prior work: a normal 2-core driver would reach 9 > 8 and waits;
    // a prior one is admitted.
    let mut snapshot = with_queues(cluster(workers(1, 10, 10_000)));
    snapshot.workers[0].hosts_prior = true;
    snapshot.workers[0].cores_used = 7;
    let mut urgent = driver("urgent", 2, 100);
    urgent.queue = "prod".into();
    snapshot.drivers = vec![driver("normal", 2, 100)];
    let waiting = plan(&snapshot);
    assert!(waiting.drivers.is_empty());
    assert!(
        reason(&waiting, "normal")
            .unwrap()
            .contains("up to threshold 0.8")
    );

    snapshot.drivers = vec![urgent];
    assert_eq!(plan(&snapshot).drivers.len(), 1);
}

#[test]
fn waiting_reasons_name_the_cause() {
    let mut snapshot = with_queues(cluster(workers(2, 4, 4096)));
    let mut limited = app("limited");
    limited.executor_memory_mb = 512;
    limited.executor_cores = Some(1);
    limited.executor_limit = Some(1);
    let mut huge = app("huge");
    huge.executor_memory_mb = 8192;
    let mut gpu = app("gpu");
    gpu.executor_resources = [("gpu".into(), 1)].into();
    let mut satisfied = app("satisfied");
    satisfied.cores_max = Some(1);
    satisfied.executor_memory_mb = 512;
    snapshot.apps = vec![limited, huge, gpu, satisfied];
    let plan = plan(&snapshot);
    assert_eq!(
        reason(&plan, "limited").unwrap(),
        "executor limit reached: holds 1 executors, limit 1"
    );
    assert_eq!(
        reason(&plan, "huge").unwrap(),
        "an executor needs 1 core, 8192 MB: more than any ALIVE worker has in total"
    );
    assert!(
        reason(&plan, "gpu")
            .unwrap()
            .contains("gpu=1: more than any ALIVE worker")
    );
    assert_eq!(reason(&plan, "satisfied"), None);

    snapshot
        .workers
        .iter_mut()
        .for_each(|w| w.state = muster_core::model::WorkerState::Dead);
    assert_eq!(
        reason(&crate::support::plan(&snapshot), "limited").unwrap(),
        "no ALIVE worker"
    );
}
