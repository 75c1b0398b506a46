//! The queue tree as status views show it: each queue's place, shares and what is held
//! below it.

use std::collections::BTreeMap;

use muster_core::queues::views;

use crate::support::queue;

#[test]
fn a_parent_holds_what_its_leaves_hold_and_shares_multiply_down_the_tree() {
    let mut configs = vec![
        queue("team", false, 1.0, 0.5),
        queue("team.etl", false, 1.0, 1.0),
        queue("team.urgent", true, 1.0, 0.5),
        queue("other", false, 1.0, 1.0),
    ];
    for (q, capacity) in configs.iter_mut().zip([0.5, 0.25, 0.75, 0.5]) {
        q.capacity = Some(capacity);
    }
    let used = BTreeMap::from([
        ("team.etl".into(), (2, 1024)),
        ("team.urgent".into(), (3, 512)),
        ("default".into(), (1, 256)),
    ]);
    let views = views(&configs, &used);
    let row = |i: usize| {
        let v = &views[i];
        (
            v.name.0.as_str(),
            v.depth,
            v.leaf,
            v.guaranteed_share,
            v.max_share,
            v.cores_used,
            v.memory_used_mb,
        )
    };
    assert_eq!(row(0), ("team", 0, false, Some(0.5), 0.5, 5, 1536));
    assert_eq!(row(1), ("team.etl", 1, true, Some(0.125), 0.5, 2, 1024));
    assert_eq!(row(2), ("team.urgent", 1, true, Some(0.375), 1.0, 3, 512));
    assert_eq!(row(3), ("other", 0, true, Some(0.5), 1.0, 0, 0));
    assert_eq!(views.len(), 4, "the implicit default is not listed");
}

#[test]
fn flat_queues_have_no_guarantee() {
    let views = views(&[queue("batch", false, 0.8, 0.5)], &BTreeMap::new());
    assert_eq!(views[0].guaranteed_share, None);
    assert_eq!(views[0].max_share, 0.5);
}
