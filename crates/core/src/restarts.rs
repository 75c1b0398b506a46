//! How long a supervised driver waits before its worker starts it again after a failed run,
//! as Spark's `DriverRunner.runCommandWithRetry` has it: one second after the first failure,
//! twice as long after each failure that follows, and one second again after a run that
//! lasted longer than five seconds, long enough to count as successful. The worker's
//! supervisor waits this long, and `muster simulate` waits the same.

use std::time::Duration;

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
