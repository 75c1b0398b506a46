//! How long a supervised driver waits before its worker starts it again after a failed run,
//! as Spark's `DriverRunner.runCommandWithRetry` has it: one second after the first failure,
//! twice as long after each failure that follows, and one second again after a run that
//! lasted longer than five seconds, long enough to count as successful. The worker's
//! supervisor waits this long, and `muster simulate` waits the same.
//!
//! [`Restarts`] is what a driver's restarts are, wherever they are kept or told: the worker's
//! supervisor, its reports, the leader, the simulator.

use std::time::{Duration, Instant};

/// A supervised driver's restarts on its worker: how many times it was started again, how its
/// last failed run ended, and while it waits to start again, when it does. `When` is an
/// [`Instant`] where the restarts are kept (the worker's supervisor, the leader) and a
/// [`Duration`] from the moment they are told where they cross from one process to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restarts<When> {
    /// How many times it was started again.
    pub count: u32,
    /// The exit code of its last failed run, when it had one.
    pub last_exit_code: Option<i32>,
    /// While it waits to start again, when it does.
    pub starts_again: Option<When>,
}

impl<When> Default for Restarts<When> {
    fn default() -> Self {
        Self {
            count: 0,
            last_exit_code: None,
            starts_again: None,
        }
    }
}

impl Restarts<Instant> {
    /// These restarts as told at `now`: the wait before the next start counted from then.
    pub fn told_at(self, now: Instant) -> Restarts<Duration> {
        Restarts {
            count: self.count,
            last_exit_code: self.last_exit_code,
            starts_again: self
                .starts_again
                .map(|at| at.saturating_duration_since(now)),
        }
    }
}

impl Restarts<Duration> {
    /// These restarts, told at `now`, as kept: the next start at an instant.
    pub fn heard_at(self, now: Instant) -> Restarts<Instant> {
        Restarts {
            count: self.count,
            last_exit_code: self.last_exit_code,
            starts_again: self.starts_again.map(|wait| now + wait),
        }
    }
}

/// The wait before the first restart.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// A run longer than this starts the back-off over.
pub const SUCCESSFUL_RUN: Duration = Duration::from_secs(5);

/// One supervised driver's back-off between its runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    successful_run: Duration,
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(FIRST_BACKOFF, SUCCESSFUL_RUN)
    }
}

impl Backoff {
    /// A back-off that waits `first` after a first failure, and starts over after a run
    /// longer than `successful_run`.
    pub fn new(first: Duration, successful_run: Duration) -> Self {
        Self {
            first,
            successful_run,
            next: first,
        }
    }

    /// A run that lasted `ran` failed: how long to wait before the next start.
    pub fn after_failure(&mut self, ran: Duration) -> Duration {
        if ran > self.successful_run {
            self.next = self.first;
        }
        let wait = self.next;
        self.next = self.next.saturating_mul(2);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_after_each_quick_failure_and_starts_over_after_a_long_run() {
        let mut backoff = Backoff::default();
        let quick = Duration::from_millis(100);
        let long = SUCCESSFUL_RUN + Duration::from_millis(1);
        let waits: Vec<u64> = [quick, quick, quick, SUCCESSFUL_RUN, long, quick]
            .into_iter()
            .map(|ran| backoff.after_failure(ran).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 1, 2]);
    }
}
