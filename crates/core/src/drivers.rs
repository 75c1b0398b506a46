//! Driver placement, the first half of Spark's `Master.schedule()`
//! (`deploy/master/Master.scala`), with the queue rules on top: prior drivers go first, and a
//! normal driver on a worker that runs prior work must stay within its queue's threshold.

use crate::ids::WorkId;
use crate::ledger::Ledger;
use crate::model::Snapshot;
use crate::plan::{DriverLaunch, Kind, Plan, WaitReason, Waiting};
use crate::queues::{Admission, Queues, prior_first};
use crate::rng::SplitMix64;
use crate::wait::why_nothing_fits;

/// Places the snapshot's waiting drivers, recording launches and waits in `plan`.
///
/// With `spread_out_drivers` the ALIVE workers are visited round-robin in id order from a
/// starting worker drawn with the pass's seed, the cursor carrying over from one driver to the
/// next (Spark shuffles the workers instead; a seeded start keeps the order one a person can
/// predict from the ids). Otherwise each driver takes the first worker by id that fits. `max_drivers` caps running drivers, those
/// launched in this pass included.
pub(crate) fn place_drivers(
    snapshot: &Snapshot,
    queues: &Queues,
    ledger: &mut Ledger<'_>,
    plan: &mut Plan,
) {
    let config = &snapshot.config;
    let order = ledger.alive_by_id().to_vec();
    let mut cursor = match order.len() {
        0 => 0,
        n => SplitMix64::new(config.seed).below(n),
    };
    let mut running = snapshot.running_drivers;
    for driver in prior_first(&snapshot.drivers, queues, |d| &d.queue) {
        let need = &driver.need;
        let admission = queues.admission(&driver.queue);
        let placed = match config.max_drivers {
            Some(max) if running >= max => Err(WaitReason::MaxDrivers { max }),
            _ if config.spread_out_drivers => {
                let found = (0..order.len()).find_map(|_| {
                    let w = order[cursor];
                    cursor = (cursor + 1) % order.len();
                    ledger.fits(w, need, admission).then_some(w)
                });
                found.ok_or_else(|| {
                    why_nothing_fits(ledger, Kind::Driver, need, &driver.queue, queues, |a| {
                        ledger.any_fits(need, a)
                    })
                })
            }
            _ => order
                .iter()
                .copied()
                .find(|&w| ledger.fits(w, need, admission))
                .ok_or_else(|| {
                    why_nothing_fits(ledger, Kind::Driver, need, &driver.queue, queues, |a| {
                        ledger.any_fits(need, a)
                    })
                }),
        };
        match placed {
            Ok(w) => {
                ledger.take(w, need, admission == Admission::Prior);
                running += 1;
                plan.drivers.push(DriverLaunch {
                    driver: driver.id.clone(),
                    worker: ledger.worker(w).id.clone(),
                });
            }
            Err(reason) => plan.waiting.push(Waiting {
                id: WorkId::Driver(driver.id.clone()),
                reason,
            }),
        }
    }
}
