//! Finding the leading master: the one way workers, application clients and the CLI do it.
//!
//! Any master may be asked. A follower answers `UNAVAILABLE` and names the leader's address
//! in the [`LEADER_HEADER`] metadata (while an election runs it first waits briefly for one);
//! the caller asks that address next. A master that cannot be reached is skipped for the next
//! one at once; only when every master failed in a row does the caller back off, with
//! jitter, up to [`MAX_BACKOFF`]. A leader the caller gave up because it fell silent (frozen,
//! cut off) is asked last.
//!
//! A leader with more client writes waiting than it takes refuses the next with
//! `RESOURCE_EXHAUSTED` and how long to wait in the [`RETRY_AFTER_HEADER`] metadata (in
//! milliseconds): the write was not queued, and the caller sends it again to the same leader
//! after that wait and a jitter of up to as long again, so that the callers refused together
//! come back spread out.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use muster_core::ids::millis;

/// Metadata key in which a follower names the leader's address.
pub const LEADER_HEADER: &str = "x-muster-leader";

/// Metadata key in which a busy leader says how many milliseconds to wait before retrying.
pub const RETRY_AFTER_HEADER: &str = "x-muster-retry-after-ms";

/// The longest wait between rounds over all masters: short, because a new leader waits in
/// RECOVERING for every worker and application before it schedules anything.
pub const MAX_BACKOFF: Duration = Duration::from_millis(500);

const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Whether a failed call is worth making again, of this master or the next. It is when no
/// master's answer came back (a connection refused, reset or closed, a stream broken, no
/// answer in time: an error made on this side, which carries its cause), or when a master
/// answered that it cannot take the call now (`UNAVAILABLE`: a follower, an election, a
/// leader stepping down; `CANCELLED`, `DEADLINE_EXCEEDED`) or that it is busy ([`retry_after`]).
/// Every other status is the masters' answer (bad input, unknown ids, refused credentials) and
/// is passed on.
pub fn worth_retrying(status: &tonic::Status) -> bool {
    std::error::Error::source(status).is_some()
        || retry_after(status).is_some()
        || matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
        )
}

/// A wait of whole milliseconds from none up to `most`, taken from the clock's nanoseconds:
/// enough to spread apart callers that failed together, without a random generator.
pub fn jitter(most: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    let most = millis(most);
    Duration::from_millis(nanos % most.saturating_add(1))
}

/// How long a busy leader asked to wait before the call is made again: `None` unless the
/// status is a busy leader's refusal (`RESOURCE_EXHAUSTED` naming a wait).
pub fn retry_after(status: &tonic::Status) -> Option<Duration> {
    if status.code() != tonic::Code::ResourceExhausted {
        return None;
    }
    let millis = status.metadata().get(RETRY_AFTER_HEADER)?.to_str().ok()?;
    millis.parse().ok().map(Duration::from_millis)
}

/// How long to wait before sending again a call a busy leader refused, asking to wait
/// `hint`: the hint and a jitter of up to as long again.
pub fn busy_wait(hint: Duration) -> Duration {
    hint + jitter(hint)
}

/// The leader's address a refusal names, if it names one other than `asked`.
pub fn leader_hint<'s>(status: &'s tonic::Status, asked: &str) -> Option<&'s str> {
    status
        .metadata()
        .get(LEADER_HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|leader| *leader != asked)
}

/// Where to look for the leader next.
#[derive(Clone, Debug)]
pub struct LeaderFinder {
    masters: Vec<String>,
    /// Index of the next master to ask in turn.
    next: usize,
    /// An address a master named as the leader: asked before anyone else.
    hinted: Option<String>,
    /// A leader given up as silent: skipped once in turn.
    silent: Option<String>,
    /// Masters that failed since the last success or hint.
    failed: usize,
    /// Hints followed in a row, with no failure between: masters with stale views may name
    /// each other.
    hints: usize,
    backoff: Duration,
}

impl LeaderFinder {
    /// A finder over `masters` (not empty), starting with the first.
    ///
    /// # Panics
    ///
    /// `masters` is empty.
    pub fn new(masters: Vec<String>) -> Self {
        assert!(!masters.is_empty(), "at least one master to ask");
        Self {
            masters,
            next: 0,
            hinted: None,
            silent: None,
            failed: 0,
            hints: 0,
            backoff: FIRST_BACKOFF,
        }
    }

    /// The master to ask next.
    pub fn next_master(&mut self) -> String {
        if let Some(hinted) = self.hinted.take() {
            return hinted;
        }
        let mut addr = self.in_turn();
        if self.silent.as_ref() == Some(&addr) && self.masters.len() > 1 {
            self.silent = None;
            addr = self.in_turn();
        }
        addr
    }

    fn in_turn(&mut self) -> String {
        let addr = self.masters[self.next % self.masters.len()].clone();
        self.next += 1;
        addr
    }

    /// A master named `leader` as the leader: it is asked next, at once, and the search
    /// starts its back-off afresh. Returns how long to wait first: nothing, unless more hints
    /// than masters came in a row with nothing else between (stale views naming each
    /// other), when the hint is dropped and the caller backs off as after a failure.
    pub fn hinted(&mut self, leader: &str) -> Duration {
        self.hints += 1;
        if self.hints > self.masters.len() {
            return self.back_off();
        }
        self.hinted = Some(leader.to_owned());
        self.failed = 0;
        self.backoff = FIRST_BACKOFF;
        Duration::ZERO
    }

    /// The leader at `addr` is busy and asked to wait `hint`: it is asked again, after the
    /// returned wait ([`busy_wait`]).
    pub fn busy(&mut self, addr: &str, hint: Duration) -> Duration {
        self.hinted = Some(addr.to_owned());
        self.hints = 0;
        self.failed = 0;
        self.backoff = FIRST_BACKOFF;
        busy_wait(hint)
    }

    /// The leader at `addr` stopped answering: it is asked last.
    pub fn silent(&mut self, addr: &str) {
        self.silent = Some(addr.to_owned());
        self.failed = 0;
    }

    /// Asking the last master gave nothing; returns how long to wait before asking the next
    /// one: nothing until every master failed in a row, then a back-off that doubles.
    pub fn failed(&mut self) -> Duration {
        self.hints = 0;
        self.failed += 1;
        if !self.failed.is_multiple_of(self.masters.len()) {
            return Duration::ZERO;
        }
        self.back_off()
    }

    /// The next wait of the back-off, which doubles each time.
    fn back_off(&mut self) -> Duration {
        // Jitter spreads callers that lost the leader together apart.
        let wait = self.backoff + jitter(Duration::from_millis(99));
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        wait
    }

    /// The leader was found: the next search starts afresh.
    pub fn found(&mut self) {
        self.failed = 0;
        self.hints = 0;
        self.backoff = FIRST_BACKOFF;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finder() -> LeaderFinder {
        LeaderFinder::new(vec!["m1".into(), "m2".into(), "m3".into()])
    }

    #[test]
    fn a_lost_call_is_retried_and_an_answer_is_passed_on() {
        // What tonic makes of a broken connection: `Unknown`, with the transport error as
        // its cause.
        let broken = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "transport error",
        )));
        assert_eq!(broken.code(), tonic::Code::Unknown);
        assert!(worth_retrying(&broken));
        assert!(worth_retrying(&tonic::Status::unavailable(
            "not the leader"
        )));
        // The same codes from a master, read off the wire, carry no cause.
        assert!(!worth_retrying(&tonic::Status::unknown("transport error")));
        assert!(!worth_retrying(&tonic::Status::invalid_argument(
            "cores: must be at least 1"
        )));
        assert!(!worth_retrying(&tonic::Status::not_found(
            "unknown application"
        )));
        assert!(!worth_retrying(&tonic::Status::unauthenticated(
            "no credential"
        )));
    }

    #[test]
    fn masters_are_asked_in_turn_and_a_hint_goes_first() {
        let mut f = finder();
        assert_eq!(f.next_master(), "m1");
        assert_eq!(f.failed(), Duration::ZERO);
        assert_eq!(f.next_master(), "m2");
        assert_eq!(f.hinted("m3"), Duration::ZERO);
        assert_eq!(f.next_master(), "m3");
        assert_eq!(f.next_master(), "m3", "then in turn again");
        assert_eq!(f.next_master(), "m1");
    }

    #[test]
    fn backing_off_waits_for_a_whole_round_of_failures_and_doubles() {
        let mut f = finder();
        let waits: Vec<Duration> = (0..9).map(|_| f.failed()).collect();
        assert_eq!(&waits[..2], [Duration::ZERO; 2]);
        assert!(waits[2] >= FIRST_BACKOFF && waits[2] < FIRST_BACKOFF * 2);
        assert!(waits[5] >= FIRST_BACKOFF * 2 && waits[5] < FIRST_BACKOFF * 3);
        assert!(waits[8] >= FIRST_BACKOFF * 4);
        f.found();
        assert_eq!(f.failed(), Duration::ZERO);
    }

    #[test]
    fn masters_naming_each_other_cannot_keep_the_caller_spinning() {
        let mut f = finder();
        let mut waited = Duration::ZERO;
        for _ in 0..12 {
            let asked = f.next_master();
            let other = if asked == "m1" { "m2" } else { "m1" };
            waited += f.hinted(other);
        }
        assert!(waited > Duration::ZERO, "stale hints end in a back-off");
    }

    #[test]
    fn a_stale_hint_to_a_dead_leader_does_not_slow_the_search() {
        // During an election followers still name the old leader, which refuses connections.
        let mut f = finder();
        for _ in 0..12 {
            f.next_master();
            assert_eq!(f.hinted("m1"), Duration::ZERO);
            assert_eq!(f.next_master(), "m1");
            assert_eq!(f.failed(), Duration::ZERO);
        }
    }

    #[test]
    fn a_silent_leader_is_skipped_once() {
        let mut f = finder();
        assert_eq!(f.next_master(), "m1");
        f.silent("m2");
        assert_eq!(f.next_master(), "m3", "m2 is skipped");
        assert_eq!(f.next_master(), "m1");
        assert_eq!(f.next_master(), "m2", "and asked again later");
    }

    #[test]
    fn a_busy_leader_is_asked_again_after_the_wait_it_names_and_jitter() {
        let mut busy = tonic::Status::resource_exhausted("the leader is busy");
        busy.metadata_mut()
            .insert(RETRY_AFTER_HEADER, "250".parse().unwrap());
        assert_eq!(retry_after(&busy), Some(Duration::from_millis(250)));
        assert!(worth_retrying(&busy));
        // Resources exhausted otherwise (a message too large) are an answer, not a wait.
        let too_large = tonic::Status::resource_exhausted("message too large");
        assert_eq!(retry_after(&too_large), None);
        assert!(!worth_retrying(&too_large));

        let mut f = finder();
        assert_eq!(f.next_master(), "m1");
        assert_eq!(f.failed(), Duration::ZERO);
        assert_eq!(f.next_master(), "m2");
        let wait = f.busy("m2", Duration::from_millis(250));
        assert!(
            (Duration::from_millis(250)..=Duration::from_millis(500)).contains(&wait),
            "{wait:?}"
        );
        assert_eq!(f.next_master(), "m2", "the busy leader is asked again");
    }
}
