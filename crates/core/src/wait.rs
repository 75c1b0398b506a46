//! Why a driver or executor found no worker: the most actionable cause that applies.

use crate::ids::QueueName;
use crate::ledger::Ledger;
use crate::plan::{Kind, WaitReason};
use crate::queues::{Admission, Queues};
use crate::resources::Resources;

/// The reason no ALIVE worker admitted `need` from `queue` in this pass. `has_room` answers
/// whether some ALIVE worker admits `need` under an admission, the threshold aside.
pub(crate) fn why_nothing_fits(
    ledger: &Ledger<'_>,
    kind: Kind,
    need: &Resources,
    queue: &QueueName,
    queues: &Queues,
    mut has_room: impl FnMut(Admission) -> bool,
) -> WaitReason {
    let alive = ledger.alive_by_id();
    if alive.is_empty() {
        return WaitReason::NoAliveWorker;
    }
    if !alive.iter().any(|&w| ledger.could_ever_fit(w, need)) {
        return WaitReason::LargerThanAnyWorker {
            kind,
            need: need.clone(),
        };
    }
    match queues.admission(queue) {
        Admission::Normal { threshold } if has_room(Admission::Prior) => {
            WaitReason::HeldByThreshold {
                kind,
                need: need.clone(),
                queue: queue.clone(),
                threshold,
            }
        }
        _ => WaitReason::NoRoom {
            kind,
            need: need.clone(),
        },
    }
}
