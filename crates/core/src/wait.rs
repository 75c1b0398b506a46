//! Why a driver or executor found no worker: the most actionable cause that applies.

use crate::ids::QueueName;
use crate::ledger::Ledger;
use crate::plan::{Kind, WaitReason};
use crate::queues::{Admission, Queues};
use crate::resources::Resources;

/// Why `need` fits on no ALIVE worker whatever runs there, if it does not: no worker is
/// ALIVE, or none is large enough. Such a reason comes before any other.
pub(crate) fn why_never_fits(
    ledger: &Ledger<'_>,
    kind: Kind,
    need: &Resources,
) -> Option<WaitReason> {
    let alive = ledger.alive_by_id();
    if alive.is_empty() {
        return Some(WaitReason::NoAliveWorker);
    }
    if !alive.iter().any(|&w| ledger.could_ever_fit(w, need)) {
        return Some(WaitReason::LargerThanAnyWorker {
            kind,
            need: need.clone(),
        });
    }
    None
}

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
    if let Some(never) = why_never_fits(ledger, kind, need) {
        return never;
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
