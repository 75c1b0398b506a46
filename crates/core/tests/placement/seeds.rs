//! Driver placement across seeds: spread out, drivers go round-robin over the ALIVE workers
//! in id order from a starting worker drawn with the pass's seed. Properties over many seeds,
//! so they stay here rather than in a script.

use std::collections::BTreeSet;

use crate::support::{cluster, driver, plan, workers};

#[test]
fn spread_out_drivers_go_one_per_worker() {
    for seed in 0..20 {
        let mut snapshot = cluster(workers(3, 10, 512));
        snapshot.config.seed = seed;
        snapshot.drivers = (0..3).map(|i| driver(&format!("d{i}"), 1, 1)).collect();
        let plan = plan(&snapshot);
        let hosts: BTreeSet<&str> = plan.drivers.iter().map(|d| d.worker.as_ref()).collect();
        assert_eq!(hosts.len(), 3, "seed {seed}: {plan:?}");
        assert!(plan.waiting.is_empty());
    }
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
