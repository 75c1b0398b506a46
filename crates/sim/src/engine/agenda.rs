//! The agenda of a simulation: what happens next and when, in the order added at equal
//! times, so that one trace, cluster file and seed always give the same run.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use muster_core::ids::{AppId, DriverId, ExecutorId, Term, WorkerId};
use muster_leader::{LinkId, ProcessKey, ToApp, ToWorker};

/// What happens next, at a virtual time.
#[derive(Debug)]
pub(super) enum Happening {
    /// Trace entry `i` comes due.
    Entry(usize),
    /// A client's write of trace entry `i` (a submission, a drain) commits.
    ClientWrite(usize),
    /// The oldest proposal of the leader of this term commits.
    Commit(Term),
    /// The leader is ticked.
    Tick,
    /// The leader runs the pass it wants.
    Pass,
    /// What the cluster holds is sampled.
    Sample,
    /// A worker heartbeats, unless its machine failed since this was planned (it counts
    /// its failures).
    Heartbeat(WorkerId, u64),
    /// A worker registers with the leader (again).
    Register(WorkerId),
    /// An application's client attaches (again).
    Attach(AppId),
    /// A launched process started.
    Started(WorkerId, ProcessKey, u64),
    /// A process told to stop ended.
    Stopped(WorkerId, ProcessKey, u64),
    /// A driver's run is done: it exits.
    DriverDone(WorkerId, DriverId, u64),
    /// A supervised driver's worker starts it again after its back-off.
    DriverRestart(WorkerId, DriverId, u64),
    /// A task on an executor (of this serial) is done.
    TaskDone(AppId, ExecutorId, u64),
    /// A message reaches a worker.
    ToWorker(LinkId, ToWorker),
    /// A message reaches an application's client.
    ToApp(LinkId, ToApp),
    /// A worker's machine comes back, empty.
    WorkerBack(WorkerId),
    /// A new leader is elected.
    Elected,
}

/// The agenda: happenings by virtual time (ms), in the order added within a time. The heap
/// orders small keys; the happenings wait in slots of their own. Two kinds come due in the
/// order they are added: heartbeats, the bulk of a run at scale (each a fixed interval after
/// the last), and the trace's entries (in time order). Each waits in a lane of its own, and
/// each next happening is the earliest of the heap's first and the lanes'.
#[derive(Default)]
pub(super) struct Agenda {
    /// When each waiting happening is due, the order it was added in, and its slot.
    due: BinaryHeap<Reverse<(u64, u64, usize)>>,
    slots: Vec<Option<Happening>>,
    /// Slots whose happenings have happened.
    free: Vec<usize>,
    /// Per [`Lane`], happenings added no earlier than the last of them, with when and the
    /// order added.
    lanes: [VecDeque<(u64, u64, Happening)>; 2],
    added: u64,
}

/// A kind of happening that mostly comes due in the order it is added.
#[derive(Clone, Copy)]
pub(super) enum Lane {
    Heartbeats,
    Trace,
}

impl Agenda {
    pub(super) fn at(&mut self, time: u64, happening: Happening) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(happening);
                slot
            }
            None => {
                self.slots.push(Some(happening));
                self.slots.len() - 1
            }
        };
        self.due.push(Reverse((time, self.added, slot)));
        self.added += 1;
    }

    /// As [`Agenda::at`], for a happening that mostly comes due after every one added to
    /// `lane` before it: queued there, not heaped, when it does.
    pub(super) fn at_in_order(&mut self, lane: Lane, time: u64, happening: Happening) {
        let queue = &mut self.lanes[lane as usize];
        if queue.back().is_some_and(|&(last, _, _)| time < last) {
            return self.at(time, happening);
        }
        queue.push_back((time, self.added, happening));
        self.added += 1;
    }

    pub(super) fn next(&mut self) -> Option<(u64, Happening)> {
        let heaped = self
            .due
            .peek()
            .map(|&Reverse((time, added, _))| (time, added));
        let first_queued = self
            .lanes
            .iter_mut()
            .filter_map(|queue| {
                let &(time, added, _) = queue.front()?;
                Some(((time, added), queue))
            })
            .min_by_key(|&(key, _)| key);
        if let Some((queued, queue)) = first_queued
            && heaped.is_none_or(|heaped| queued < heaped)
        {
            let (time, _, happening) = queue.pop_front()?;
            return Some((time, happening));
        }
        let Reverse((time, _, slot)) = self.due.pop()?;
        self.free.push(slot);
        let happening = self.slots[slot]
            .take()
            .expect("a due slot holds its happening");
        Some((time, happening))
    }
}
