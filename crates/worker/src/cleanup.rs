//! Work-dir cleanup: which directories of ended drivers and executors a worker removes, as
//! Spark's standalone worker does with `spark.worker.cleanup.*` and Nomad's client with its
//! allocation garbage collection. A directory goes once its process ended longer than the TTL
//! ago, and the oldest go first while the work dir holds more than its cap. An application's
//! data (`local/<app>`) is not theirs to remove: a shuffle service serves it after its
//! executors ended, while the application runs. The choice is a
//! pure function of what the work dir holds and the time; [`crate::supervisor`] scans and
//! removes.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// When a worker removes what ended processes left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// How long after its process ended a directory is kept.
    pub ttl: Duration,
    /// The most the work dir holds, in bytes, before the oldest ended directories go early;
    /// `None`: no cap.
    pub cap_bytes: Option<u64>,
    /// How often the worker looks.
    pub every: Duration,
}

impl Default for CleanupPolicy {
    /// Standalone's defaults: seven days after the end, looked for every half hour; no cap.
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(7 * 24 * 3600),
            cap_bytes: None,
            every: Duration::from_secs(30 * 60),
        }
    }
}

/// The directory of a process that ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    /// The directory.
    pub path: PathBuf,
    /// When its process ended (its last write).
    pub at: SystemTime,
    /// What it holds.
    pub bytes: u64,
}

/// The directories of `ended` to remove at `now` under `policy`, oldest first, when the
/// directories of running processes hold `live_bytes`.
pub fn to_remove(
    ended: &[Ended],
    live_bytes: u64,
    now: SystemTime,
    policy: &CleanupPolicy,
) -> Vec<PathBuf> {
    let mut by_age: Vec<&Ended> = ended.iter().collect();
    by_age.sort_by_key(|e| e.at);
    let expired = |e: &Ended| now.duration_since(e.at).is_ok_and(|age| age >= policy.ttl);
    let mut held: u64 = live_bytes + ended.iter().map(|e| e.bytes).sum::<u64>();
    let mut removed = Vec::new();
    for e in by_age {
        let over_cap = policy.cap_bytes.is_some_and(|cap| held > cap);
        if expired(e) || over_cap {
            held -= e.bytes;
            removed.push(e.path.clone());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn ended(name: &str, hours_ago: u64, bytes: u64, now: SystemTime) -> Ended {
        Ended {
            path: PathBuf::from(name),
            at: now - HOUR * u32::try_from(hours_ago).unwrap(),
            bytes,
        }
    }

    #[test]
    fn what_ended_longer_ago_than_the_ttl_goes_the_rest_stays() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let policy = CleanupPolicy {
            ttl: 24 * HOUR,
            ..CleanupPolicy::default()
        };
        let all = [
            ended("a", 25, 10, now),
            ended("b", 24, 10, now),
            ended("c", 23, 10, now),
        ];
        assert_eq!(
            to_remove(&all, 0, now, &policy),
            ["a", "b"].map(PathBuf::from)
        );
        // A clock that went back removes nothing early.
        let future = [ended("d", 0, 10, now + HOUR)];
        assert!(to_remove(&future, 0, now, &policy).is_empty());
    }

    #[test]
    fn over_the_cap_the_oldest_go_first_until_it_fits() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let policy = CleanupPolicy {
            ttl: 1000 * HOUR,
            cap_bytes: Some(100),
            ..CleanupPolicy::default()
        };
        let all = [
            ended("new", 1, 30, now),
            ended("old", 3, 30, now),
            ended("middle", 2, 30, now),
        ];
        // Running processes hold 40: 130 in all, so the oldest goes, and 100 fits.
        assert_eq!(to_remove(&all, 40, now, &policy), [PathBuf::from("old")]);
        // Running ones over the cap on their own: every ended one goes, and nothing else.
        assert_eq!(to_remove(&all, 200, now, &policy).len(), 3);
        assert!(to_remove(&all, 10, now, &policy).is_empty());
    }
}
