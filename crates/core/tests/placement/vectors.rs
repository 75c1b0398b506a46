//! Spark's own test vectors (Spark reference §4), expectations copied from the reference.

use std::collections::BTreeSet;

use muster_core::WaitReason;
use muster_core::model::WorkerSelection;

use crate::support::{app, cluster, cores_per_worker, driver, executors_per_worker, plan, workers};

/// One row of `MasterSuiteBase`'s placement matrix (§4.1): 3 workers x (10 cores, 512 MB).
struct Row {
    memory_mb: u64,
    executor_cores: Option<u32>,
    cores_max: Option<u32>,
    executor_limit: Option<u32>,
    spread_out: [u32; 3],
    consolidated: [u32; 3],
}

const fn row(
    memory_mb: u64,
    executor_cores: Option<u32>,
    cores_max: Option<u32>,
    executor_limit: Option<u32>,
    spread_out: [u32; 3],
    consolidated: [u32; 3],
) -> Row {
    Row {
        memory_mb,
        executor_cores,
        cores_max,
        executor_limit,
        spread_out,
        consolidated,
    }
}

const MASTER_SUITE: &[Row] = &[
    // 1 basicScheduling
    row(128, None, None, None, [10, 10, 10], [10, 10, 10]),
    // 2 basicSchedulingWithMoreMemory
    row(384, None, None, None, [10, 10, 10], [10, 10, 10]),
    // 3 schedulingWithMaxCores
    row(128, None, Some(8), None, [3, 3, 2], [8, 0, 0]),
    row(128, None, Some(16), None, [6, 5, 5], [10, 6, 0]),
    // 4 schedulingWithCoresPerExecutor (4a is memory-bound: 4 executors per worker)
    row(128, Some(2), None, None, [8, 8, 8], [8, 8, 8]),
    row(32, Some(2), None, None, [10, 10, 10], [10, 10, 10]),
    row(32, Some(3), None, None, [9, 9, 9], [9, 9, 9]),
    // 5 schedulingWithCoresPerExecutorAndMaxCores
    row(32, Some(2), Some(4), None, [2, 2, 0], [4, 0, 0]),
    row(32, Some(2), Some(20), None, [8, 6, 6], [10, 10, 0]),
    row(32, Some(3), Some(20), None, [6, 6, 6], [9, 9, 0]),
    // 6 schedulingWithExecutorLimit
    row(32, None, None, Some(0), [0, 0, 0], [0, 0, 0]),
    row(32, None, None, Some(2), [10, 10, 0], [10, 10, 0]),
    row(32, None, None, Some(5), [10, 10, 10], [10, 10, 10]),
    // 7 schedulingWithExecutorLimitAndMaxCores
    row(32, None, Some(16), Some(0), [0, 0, 0], [0, 0, 0]),
    row(32, None, Some(16), Some(2), [8, 8, 0], [10, 6, 0]),
    row(32, None, Some(16), Some(5), [6, 5, 5], [10, 6, 0]),
    // 8 schedulingWithExecutorLimitAndCoresPerExecutor
    row(32, Some(4), None, Some(0), [0, 0, 0], [0, 0, 0]),
    row(32, Some(4), None, Some(2), [4, 4, 0], [8, 0, 0]),
    row(32, Some(4), None, Some(5), [8, 8, 4], [8, 8, 4]),
    // 9 schedulingWithEverything
    row(32, Some(4), Some(18), Some(0), [0, 0, 0], [0, 0, 0]),
    row(32, Some(4), Some(18), Some(2), [4, 4, 0], [8, 0, 0]),
    row(32, Some(4), Some(18), Some(5), [8, 4, 4], [8, 8, 0]),
];

#[test]
fn master_suite_placement_matrix() {
    for (i, r) in MASTER_SUITE.iter().enumerate() {
        for (spread_out, expected) in [(true, r.spread_out), (false, r.consolidated)] {
            let mut snapshot = cluster(workers(3, 10, 512));
            snapshot.config.spread_out_apps = spread_out;
            let mut a = app("a");
            a.executor_memory_mb = r.memory_mb;
            a.executor_cores = r.executor_cores;
            a.cores_max = r.cores_max;
            a.executor_limit = r.executor_limit;
            snapshot.apps.push(a);
            let plan = plan(&snapshot);
            let context = format!("row {i}, spread_out {spread_out}");
            assert_eq!(
                cores_per_worker(&snapshot, &plan, "a"),
                expected,
                "{context}"
            );
            // cores / cpe executors where cpe is set, otherwise one per worker that got cores.
            let executors: Vec<usize> = expected
                .iter()
                .map(|&c| match r.executor_cores {
                    Some(cpe) => (c / cpe) as usize,
                    None => usize::from(c > 0),
                })
                .collect();
            assert_eq!(
                executors_per_worker(&snapshot, &plan, "a"),
                executors,
                "{context}"
            );
            if let Some(cpe) = r.executor_cores {
                assert!(
                    plan.executors.iter().all(|e| e.resources.cores == cpe),
                    "{context}"
                );
            }
            assert!(
                plan.executors
                    .iter()
                    .all(|e| e.resources.memory_mb == r.memory_mb),
                "{context}"
            );
        }
    }
}

#[test]
fn spark_8881_grants_whole_executors() {
    // 4 workers x 16 cores, cores.max 48, executor.cores 16: three full executors, not
    // 12 cores on each of four workers (which would launch none).
    let mut snapshot = cluster(workers(4, 16, 4096));
    let mut a = app("a");
    a.cores_max = Some(48);
    a.executor_cores = Some(16);
    snapshot.apps.push(a);
    let plan = plan(&snapshot);
    assert_eq!(cores_per_worker(&snapshot, &plan, "a"), [16, 16, 16, 0]);
    assert_eq!(plan.executors.len(), 3);
}

#[test]
fn worker_selection_policies() {
    // WorkerSelectionSuite (SPARK-46881): 2 executors of 2 cores each.
    let expectations = [
        (
            WorkerSelection::CoresFreeAsc,
            ["10001", "10002"].as_slice(),
            ["10001"].as_slice(),
        ),
        (
            WorkerSelection::CoresFreeDesc,
            &["10002", "10003"],
            &["10003"],
        ),
        (
            WorkerSelection::MemoryFreeAsc,
            &["10001", "10003"],
            &["10001"],
        ),
        (
            WorkerSelection::MemoryFreeDesc,
            &["10002", "10003"],
            &["10002"],
        ),
        (WorkerSelection::WorkerId, &["10001", "10002"], &["10001"]),
    ];
    for (policy, spread, consolidated) in expectations {
        for (spread_out, expected) in [(true, spread), (false, consolidated)] {
            let mut snapshot = cluster(vec![
                crate::support::worker("10001", 5, 1280),
                crate::support::worker("10002", 6, 5120),
                crate::support::worker("10003", 7, 3840),
            ]);
            snapshot.config.worker_selection = policy;
            snapshot.config.spread_out_apps = spread_out;
            let mut a = app("a");
            a.executor_memory_mb = 128;
            a.executor_cores = Some(2);
            a.cores_max = Some(4);
            snapshot.apps.push(a);
            let plan = plan(&snapshot);
            let chosen: BTreeSet<&str> =
                plan.executors.iter().map(|e| e.worker.0.as_str()).collect();
            assert_eq!(
                chosen,
                expected.iter().copied().collect(),
                "{policy:?} spread_out {spread_out}"
            );
            assert_eq!(
                plan.executors.len(),
                2,
                "{policy:?} spread_out {spread_out}"
            );
        }
    }
}

#[test]
fn descending_policies_reverse_the_id_tie_break() {
    // Equal free cores: CORES_FREE_DESC walks ids backwards, as Spark 4's `.reverse` does.
    let mut snapshot = cluster(workers(3, 4, 1024));
    snapshot.config.worker_selection = WorkerSelection::CoresFreeDesc;
    let mut a = app("a");
    a.executor_memory_mb = 128;
    a.executor_cores = Some(4);
    a.cores_max = Some(4);
    snapshot.apps.push(a);
    assert_eq!(plan(&snapshot).executors[0].worker.0, "w2");
}

#[test]
fn spread_out_drivers_go_one_per_worker() {
    for seed in 0..20 {
        let mut snapshot = cluster(workers(3, 10, 512));
        snapshot.config.seed = seed;
        snapshot.drivers = (0..3).map(|i| driver(&format!("d{i}"), 1, 1)).collect();
        let plan = plan(&snapshot);
        let hosts: BTreeSet<&str> = plan.drivers.iter().map(|d| d.worker.0.as_str()).collect();
        assert_eq!(hosts.len(), 3, "seed {seed}: {plan:?}");
        assert!(plan.waiting.is_empty());
    }
}

#[test]
fn consolidated_drivers_take_the_first_worker_by_id() {
    let mut snapshot = cluster(workers(3, 10, 512));
    snapshot.workers.reverse();
    snapshot.config.spread_out_drivers = false;
    snapshot.drivers = (0..3).map(|i| driver(&format!("d{i}"), 1, 1)).collect();
    let plan = plan(&snapshot);
    assert!(plan.drivers.iter().all(|d| d.worker.0 == "w0"), "{plan:?}");
    assert!(plan.waiting.is_empty());
}

#[test]
fn max_drivers_caps_running_drivers() {
    // SPARK-45174: max 4, three run; three more submitted: one more runs, two wait.
    let mut snapshot = cluster(workers(1, 10, 512));
    snapshot.config.max_drivers = Some(4);
    snapshot.drivers = (0..3).map(|i| driver(&format!("d{i}"), 1, 1)).collect();
    assert_eq!(plan(&snapshot).drivers.len(), 3);

    snapshot.running_drivers = 3;
    snapshot.workers[0].cores_used = 3;
    snapshot.workers[0].memory_used_mb = 3;
    snapshot.drivers = (3..6).map(|i| driver(&format!("d{i}"), 1, 1)).collect();
    let plan = plan(&snapshot);
    assert_eq!(plan.drivers.len(), 1);
    assert_eq!(plan.waiting.len(), 2);
    assert!(
        plan.waiting
            .iter()
            .all(|w| w.reason == WaitReason::MaxDrivers { max: 4 })
    );
}

#[test]
fn drivers_take_custom_resources() {
    // "assign/recycle resources to/from driver": gpu 3 + fpga 3 fill the worker; a second
    // such driver has to wait.
    let mut snapshot = cluster(workers(1, 10, 512));
    snapshot.workers[0].resources = [("gpu".into(), 3), ("fpga".into(), 3)].into();
    let mut first = driver("d0", 1, 1);
    first.resources = [("gpu".into(), 3), ("fpga".into(), 3)].into();
    let mut second = first.clone();
    second.id = "d1".into();
    snapshot.drivers = vec![first, second];
    let plan = plan(&snapshot);
    assert_eq!(plan.drivers.len(), 1);
    assert_eq!(
        crate::support::reason(&plan, "d1").unwrap(),
        "no ALIVE worker has 1 core, 1 MB, fpga=3, gpu=3 free for a driver"
    );
}

#[test]
fn drivers_come_before_executors() {
    let mut snapshot = cluster(workers(1, 4, 4096));
    snapshot.apps.push(app("a"));
    snapshot.drivers.push(driver("d", 1, 1024));
    let plan = plan(&snapshot);
    assert_eq!(plan.drivers.len(), 1);
    assert_eq!(cores_per_worker(&snapshot, &plan, "a"), [3]);
}

#[test]
fn only_alive_workers_receive_work() {
    let mut snapshot = cluster(workers(3, 4, 4096));
    snapshot.workers[0].state = muster_core::model::WorkerState::Dead;
    snapshot.workers[1].state = muster_core::model::WorkerState::Decommissioned;
    snapshot.apps.push(app("a"));
    snapshot.drivers.push(driver("d", 1, 1024));
    let plan = plan(&snapshot);
    assert!(plan.drivers.iter().all(|d| d.worker.0 == "w2"));
    assert!(plan.executors.iter().all(|e| e.worker.0 == "w2"));
}

#[test]
fn spread_out_drivers_go_round_robin_in_id_order_from_a_seeded_start() {
    let mut starts = BTreeSet::new();
    for seed in 0..32 {
        let mut snapshot = cluster(workers(4, 10, 512));
        snapshot.config.seed = seed;
        snapshot.drivers = (0..6).map(|i| driver(&format!("d{i}"), 1, 1)).collect();
        let plan = plan(&snapshot);
        let positions: Vec<usize> = plan
            .drivers
            .iter()
            .map(|d| d.worker.0[1..].parse().unwrap())
            .collect();
        let start = positions[0];
        let round_robin: Vec<usize> = (0..6).map(|i| (start + i) % 4).collect();
        assert_eq!(positions, round_robin, "seed {seed}");
        starts.insert(start);
    }
    assert_eq!(
        starts.len(),
        4,
        "every worker should be a starting point for some seed"
    );
}
