//! Driver placement, the first half of Spark's `Master.schedule()`
//! (`deploy/master/Master.scala`), with the queue rules on top: prior drivers go first, a
//! normal driver on a worker that runs prior work must stay within its queue's threshold,
//! each queue's drivers hold at most its driver share, and a driver starts only when it and
//! the room its application needs first fit at once: all of a gang's minimum, or one
//! executor of the size the application will ask for. Inside a queue, a driver of a higher
//! priority is placed before those of a lower one; a Spark submission's driver only on a
//! worker that has Spark.
//!
//! The driver share is YARN's `maximum-am-resource-percent`: in cluster mode every
//! driver waits for executors of its own, so drivers that filled a queue's room would wait
//! for ever (SPARK-27750). A queue's running drivers may hold at most a share of its room,
//! its maximum in cores and in memory (all of the ALIVE workers for a prior queue), the
//! rest staying for executors; a queue that runs no driver may always start one, so that a
//! small queue is never starved. The driver share alone does not keep the rest usable:
//! drivers spread over the workers can leave each with less than one executor needs, so a
//! driver that says its executors' size starts only beside room for the first of them, kept
//! until its application registers.

use std::collections::BTreeMap;

use crate::ids::{QueueName, WorkId};
use crate::ledger::{Ledger, share};
use crate::model::{DriverRequest, DriversHold, Snapshot};
use crate::plan::{DriverLaunch, Kind, Plan, ShareBound, WaitReason, Waiting};
use crate::queues::{Admission, Bound, Queues, prior_first};
use crate::resources::Resources;
use crate::rng::SplitMix64;
use crate::wait::{why_never_fits, why_nothing_fits};

/// `drivers` with each queue's own in priority order, the highest first (equal priorities
/// keep their order), each queue's drivers taking the places its drivers held: the order
/// across queues, and with every priority 0 the whole order, is unchanged.
fn by_priority_in_queues(drivers: Vec<&DriverRequest>) -> Vec<&DriverRequest> {
    if drivers.iter().all(|d| d.priority == 0) {
        return drivers;
    }
    let mut by_queue: BTreeMap<&QueueName, Vec<&DriverRequest>> = BTreeMap::new();
    for &driver in &drivers {
        by_queue.entry(&driver.queue).or_default().push(driver);
    }
    for queued in by_queue.values_mut() {
        // Stable, then reversed: popping from the end takes the highest priority first, and
        // among equals the first submitted.
        queued.sort_by_key(|d| std::cmp::Reverse(d.priority));
        queued.reverse();
    }
    drivers
        .iter()
        .map(|d| {
            by_queue
                .get_mut(&d.queue)
                .and_then(Vec::pop)
                .expect("one driver of its queue for each place")
        })
        .collect()
}

/// Places the snapshot's waiting drivers, recording launches and waits in `plan`.
///
/// With `spread_out_drivers` the ALIVE workers are visited round-robin in id order from a
/// starting worker drawn with the pass's seed, the cursor carrying over from one driver to the
/// next (Spark shuffles the workers instead; a seeded start keeps the order one a person can
/// predict from the ids). Otherwise each driver takes the first worker by id that fits.
/// `max_drivers` caps running drivers, and each queue's driver share what its drivers hold,
/// those launched in this pass included.
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
    let mut shares = DriverShares::new(snapshot, queues, ledger);
    let mut nowhere = Nowhere::default();
    // Whether a Spark submission's driver has nowhere to go: no ALIVE worker has Spark.
    let no_spark_worker = snapshot.drivers.iter().any(|d| d.spark)
        && order.iter().all(|&w| ledger.worker(w).without_spark);
    let drivers = by_priority_in_queues(prior_first(&snapshot.drivers, queues, |d| &d.queue));
    for driver in drivers {
        let need = &driver.need;
        let admission = queues.admission(&driver.queue);
        let placed = match config.max_drivers {
            Some(max) if running >= max => Err(WaitReason::MaxDrivers { max }),
            _ => match shares.refusal(driver) {
                Some(reason) => Err(nowhere.never_fits(ledger, need).unwrap_or(reason)),
                None if driver.spark && no_spark_worker => Err(WaitReason::NoSparkWorker),
                // A search would visit every worker again, and leave the cursor where it is.
                // (What a Spark submission's driver, kept to workers with Spark, found is
                // not what another of its size would.)
                None => match nowhere
                    .found_none(need, &driver.queue)
                    .filter(|_| !driver.spark)
                {
                    Some(reason) => Err(reason),
                    None => {
                        let fits = |w: usize| {
                            ledger.fits(w, need, admission)
                                && !(driver.spark && ledger.worker(w).without_spark)
                        };
                        let found = if config.spread_out_drivers {
                            (0..order.len()).find_map(|_| {
                                let w = order[cursor];
                                cursor = (cursor + 1) % order.len();
                                fits(w).then_some(w)
                            })
                        } else {
                            order.iter().copied().find(|&w| fits(w))
                        };
                        found.ok_or_else(|| {
                            let reason = why_nothing_fits(
                                ledger,
                                Kind::Driver,
                                need,
                                &driver.queue,
                                queues,
                                |a| ledger.any_fits(need, a),
                            );
                            if !driver.spark {
                                nowhere.note(need, &driver.queue, &reason);
                            }
                            reason
                        })
                    }
                },
            },
        };
        let placed = placed.and_then(|w| {
            let hosted_prior = ledger.hosts_prior(w);
            ledger.take(w, need, admission == Admission::Prior);
            let Some(gang) = &driver.gang else {
                return Ok(w);
            };
            let (fit, minimum) = (
                ledger.gang_fit(gang, admission),
                u64::from(gang.min_executors),
            );
            if fit < minimum {
                ledger.give_back(w, need, hosted_prior);
                // An executor no worker could ever hold says so first.
                let never = why_never_fits(ledger, Kind::Executor, &gang.executor());
                return Err(never.unwrap_or(match minimum {
                    1 => WaitReason::FirstExecutor,
                    _ => WaitReason::DriverGang { minimum, fit },
                }));
            }
            // Kept for the rest of the pass; later passes keep it while the gang is pending.
            ledger.keep_for_gang(gang, admission);
            Ok(w)
        });
        match placed {
            Ok(w) => {
                nowhere.room_taken();
                running += 1;
                shares.take(driver);
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

/// What a pass learned of drivers that fit nowhere, so that a burst larger than the cluster
/// costs a search per size of driver, not one per driver: whether a size fits on no worker
/// whatever runs there (fixed through the pass), and why drivers of a size and queue found
/// no room since room was last taken (room only shrinks while drivers are placed, so a
/// driver of the same size and queue would find none either, for the same reason). A few
/// sizes are remembered, the latest.
#[derive(Default)]
struct Nowhere<'s> {
    never: Vec<(&'s Resources, Option<WaitReason>)>,
    since_taken: Vec<(&'s Resources, &'s QueueName, WaitReason)>,
}

/// How many sizes [`Nowhere`] remembers of each kind.
const SIZES_REMEMBERED: usize = 8;

impl<'s> Nowhere<'s> {
    /// [`why_never_fits`] for a driver of `need`.
    fn never_fits(&mut self, ledger: &Ledger<'_>, need: &'s Resources) -> Option<WaitReason> {
        if let Some((_, reason)) = self.never.iter().find(|(n, _)| *n == need) {
            return reason.clone();
        }
        let reason = why_never_fits(ledger, Kind::Driver, need);
        remember(&mut self.never, (need, reason.clone()));
        reason
    }

    /// Why a driver of `need` and `queue` found no room since room was last taken, if one
    /// did.
    fn found_none(&self, need: &Resources, queue: &QueueName) -> Option<WaitReason> {
        self.since_taken
            .iter()
            .find(|(n, q, _)| *n == need && *q == queue)
            .map(|(_, _, reason)| reason.clone())
    }

    /// A driver of `need` and `queue` found no room, for `reason`.
    fn note(&mut self, need: &'s Resources, queue: &'s QueueName, reason: &WaitReason) {
        remember(&mut self.since_taken, (need, queue, reason.clone()));
    }

    /// A driver was placed: room was taken.
    fn room_taken(&mut self) {
        self.since_taken.clear();
    }
}

/// Adds `entry` to `entries`, forgetting the oldest past [`SIZES_REMEMBERED`].
fn remember<T>(entries: &mut Vec<T>, entry: T) {
    if entries.len() == SIZES_REMEMBERED {
        entries.remove(0);
    }
    entries.push(entry);
}

/// Each queue's driver share through a pass: what its drivers hold and may hold.
struct DriverShares<'s> {
    snapshot: &'s Snapshot,
    queues: &'s Queues,
    /// What each queue's running drivers hold, those launched in this pass included.
    hold: BTreeMap<&'s QueueName, DriversHold>,
    /// The ALIVE workers' cores and memory: the room every queue's is a share of.
    alive: DriversHold,
}

impl<'s> DriverShares<'s> {
    fn new(snapshot: &'s Snapshot, queues: &'s Queues, ledger: &Ledger<'_>) -> Self {
        Self {
            snapshot,
            queues,
            hold: snapshot.drivers_hold.iter().map(|(q, &h)| (q, h)).collect(),
            alive: DriversHold {
                cores: ledger.alive_total_cores(),
                memory_mb: ledger.alive_total_memory_mb(),
            },
        }
    }

    /// Why `driver` may not start now for its queue's driver share, if it may not: its
    /// queue runs drivers, and with it they would hold more cores or memory than the share
    /// of the queue's room allows.
    fn refusal(&self, driver: &DriverRequest) -> Option<WaitReason> {
        let queue = &driver.queue;
        let held = self.hold.get(queue).copied().unwrap_or_default();
        if held.cores == 0 && held.memory_mb == 0 {
            return None;
        }
        let config = self.queues.get(queue);
        let driver_share = config
            .driver_share
            .unwrap_or(self.snapshot.config.driver_share);
        // Prior work may use the whole cluster.
        let room = if config.prior {
            1.0
        } else {
            self.queues.share(queue, Bound::Max)
        };
        let after = held.with(&driver.need);
        let bounds = [
            (ShareBound::Cores, held.cores, after.cores, self.alive.cores),
            (
                ShareBound::Memory,
                held.memory_mb,
                after.memory_mb,
                self.alive.memory_mb,
            ),
        ];
        bounds.into_iter().find_map(|(bound, held, after, alive)| {
            let allowed = share(driver_share, share(room, alive));
            (after > allowed).then(|| WaitReason::DriverShare {
                queue: queue.clone(),
                bound,
                held,
                allowed,
                share: driver_share,
            })
        })
    }

    /// Records that `driver` starts.
    fn take(&mut self, driver: &'s DriverRequest) {
        let held = self.hold.entry(&driver.queue).or_default();
        *held = held.with(&driver.need);
    }
}
