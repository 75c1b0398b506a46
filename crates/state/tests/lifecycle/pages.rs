//! Drivers read a page at a time: in id order across active and ended ones, each page
//! naming where the next starts, with the counts of all.

use muster_core::ids::DriverId;
use muster_state::DriverCounts;
use muster_state::Op;
use muster_state::commands::KillDriver;

use crate::support::{Cluster, driver_desc};

/// The ids of the drivers of the page of `limit` from `from`, and where the next starts.
fn page(c: &Cluster, from: &DriverId, limit: usize) -> (Vec<DriverId>, Option<DriverId>) {
    let (drivers, next) = c.state.drivers_page(from, limit);
    (drivers.into_iter().map(|d| d.id.clone()).collect(), next)
}

#[test]
fn pages_of_drivers_follow_submission_order_across_active_and_ended_ones() {
    let mut c = Cluster::new();
    let ids: Vec<DriverId> = (0..5)
        .map(|_| c.submit_driver(driver_desc(1, 512, false)))
        .collect();
    // The second and fourth end: they move to the retained ended drivers.
    for ended in [&ids[1], &ids[3]] {
        c.ok(Op::KillDriver(KillDriver { id: ended.clone() }));
    }
    assert_eq!(
        c.state.driver_counts(),
        DriverCounts {
            waiting: 3,
            running: 0,
            ended: 2,
        }
    );

    let start = DriverId(String::new());
    let (first, next) = page(&c, &start, 2);
    assert_eq!(first, ids[0..2]);
    assert_eq!(next.as_ref(), Some(&ids[2]));
    let (second, next) = page(&c, &next.unwrap(), 2);
    assert_eq!(second, ids[2..4]);
    let (last, next) = page(&c, &next.unwrap(), 2);
    assert_eq!(last, ids[4..]);
    assert_eq!(next, None);

    // A page of one from a driver is that driver; a page of none only says where to start.
    assert_eq!(page(&c, &ids[3], 1).0, [ids[3].clone()]);
    assert_eq!(page(&c, &start, 0), (vec![], Some(ids[0].clone())));
    // All at once, in the same order.
    assert_eq!(page(&c, &start, 100), (ids, None));
}
