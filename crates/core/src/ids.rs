//! Every identifier Muster passes around, and time as the log carries it: the one place that
//! says what names a worker, an application, a driver, either of them ([`WorkId`]), an
//! executor, a queue, a client request and a leader's term.
//!
//! Workers choose their own ids; application and driver ids are derived by the replicated
//! state from the leader's timestamp and replicated counters (Spark's
//! `app-yyyyMMddHHmmss-NNNN`), never from a replica's own clock.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
pub use smol_str::SmolStr;

/// An id type over its text: `String`, or for the names that every executor grant and every
/// scheduling snapshot repeats (workers', applications', queues'), a [`SmolStr`]: up to 23
/// bytes held in place (Spark's `app-yyyyMMddHHmmss-NNNN` is 23), longer ones shared, so that
/// a copy costs no allocation and a comparison reads no other memory. Both serialize as a
/// plain string.
macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident($text:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $text);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.into())
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id.into())
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

name_type!(
    /// A worker's id, chosen by the worker. Ordering is string ordering, as in Spark.
    WorkerId(SmolStr)
);
name_type!(
    /// An application's id, `app-yyyyMMddHHmmss-NNNN`.
    AppId(SmolStr)
);
name_type!(
    /// A driver's id, `driver-yyyyMMddHHmmss-NNNN`.
    DriverId(String)
);
name_type!(
    /// A queue's name.
    QueueName(SmolStr)
);
name_type!(
    /// A client-chosen id that makes a write idempotent: applying a command whose request id
    /// was already applied returns the first result and changes nothing.
    RequestId(String)
);

/// An application or a driver: what waits for room, and what room is kept for. Its kind is
/// decided where the work enters and never guessed again; it reads and writes as the plain
/// id, and the replicated state's ids tell their kind by their prefix (`driver-`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", from = "String")]
pub enum WorkId {
    /// An application.
    App(AppId),
    /// A driver.
    Driver(DriverId),
}

impl fmt::Display for WorkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::App(id) => id.fmt(f),
            Self::Driver(id) => id.fmt(f),
        }
    }
}

impl From<WorkId> for String {
    fn from(id: WorkId) -> Self {
        id.to_string()
    }
}

impl From<String> for WorkId {
    /// An id as the replicated state makes them: `driver-...` a driver's, any other an
    /// application's.
    fn from(id: String) -> Self {
        if id.starts_with("driver-") {
            Self::Driver(DriverId(id))
        } else {
            Self::App(AppId::from(id))
        }
    }
}

impl From<&str> for WorkId {
    fn from(id: &str) -> Self {
        Self::from(id.to_owned())
    }
}

impl RequestId {
    /// A request id derived from `content`: the same bytes give the same id on every master,
    /// whatever its build (FNV-1a, unlike the standard library's hasher), so a write that
    /// several leaders may carry is applied once.
    pub fn of_content(prefix: &str, content: &[u8]) -> Self {
        let digest = content
            .iter()
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, &byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
            });
        Self(format!("{prefix}-{digest:016x}"))
    }
}

/// `duration` in whole milliseconds; `u64::MAX` beyond that (some 584 million years).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The queue that always exists, and that apps and drivers use when they name none.
pub const DEFAULT_QUEUE: &str = "default";

impl Default for QueueName {
    fn default() -> Self {
        Self(SmolStr::new_static(DEFAULT_QUEUE))
    }
}

/// An executor's id within its app: 0, 1, 2, ... never reused (Spark's `nextExecutorId`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ExecutorId(pub u32);

impl fmt::Display for ExecutorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A Raft term: a leader's reign. Commands a leader decides carry its term, and workers obey
/// no command from a term older than the newest they have seen.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Term(pub u64);

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Milliseconds since the Unix epoch, UTC, as stamped on a command by the leader.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The time as `yyyyMMddHHmmss` in UTC, the middle part of Spark's app and driver ids.
    pub fn compact_utc(self) -> String {
        let [year, month, day, hour, minute, second] = self.utc_fields();
        format!("{year:04}{month:02}{day:02}{hour:02}{minute:02}{second:02}")
    }

    /// The time as `yyyy-MM-dd HH:mm:ss` in UTC, for people.
    pub fn utc(self) -> String {
        let [year, month, day, hour, minute, second] = self.utc_fields();
        format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}")
    }

    /// Year, month, day, hour, minute and second, in UTC.
    fn utc_fields(self) -> [u64; 6] {
        let seconds = self.0 / 1000;
        let (days, second_of_day) = (seconds / 86_400, seconds % 86_400);
        let (year, month, day) = civil_from_days(days);
        [
            year,
            month,
            day,
            second_of_day / 3600,
            second_of_day / 60 % 60,
            second_of_day % 60,
        ]
    }
}

/// Year, month and day of the `days`-th day after 1970-01-01 (H. Hinnant, "chrono-Compatible
/// Low-Level Date Algorithms", `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{RequestId, Timestamp, millis};

    #[test]
    fn compact_utc_matches_known_dates() {
        assert_eq!(Timestamp(0).compact_utc(), "19700101000000");
        // Spark's example id app-20231031224509-0008.
        assert_eq!(Timestamp(1_698_792_309_000).compact_utc(), "20231031224509");
        // A leap day.
        assert_eq!(Timestamp(1_709_210_096_789).compact_utc(), "20240229123456");
        assert_eq!(Timestamp(4_102_444_799_000).compact_utc(), "20991231235959");
        assert_eq!(
            Timestamp(1_709_210_096_789).utc(),
            "2024-02-29 12:34:56",
            "the same time for people"
        );
    }

    #[test]
    fn a_content_request_id_is_the_same_for_the_same_bytes_only() {
        let id = RequestId::of_content("restore", b"state");
        assert_eq!(id, RequestId::of_content("restore", b"state"));
        assert_ne!(id, RequestId::of_content("restore", b"state!"));
        // FNV-1a of "a", as published.
        assert_eq!(RequestId::of_content("x", b"a").0, "x-af63dc4c8601ec8c");
        assert_eq!(millis(Duration::from_micros(2_999)), 2);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
