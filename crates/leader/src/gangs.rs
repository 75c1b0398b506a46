//! How long gangs wait, and when they stop waiting (a gang's timeout, YuniKorn's
//! placeholder timeout).
//!
//! Each pass notes since when each gang has waited for all of its minimum, by this leader's
//! clock ([`GangWaits::note`]): an application's that fits nowhere or keeps room as it
//! frees, or a driver's waiting to start beside its application's gang. Once one has waited
//! its queue's `gang_timeout_s` (or the masters'), the leader proposes an `EndGangWait` with
//! its queue's `gang_style` ([`GangWaits::due`]): soft, it is placed as any application (or
//! driver) from then on; hard, it fails. A new leader counts afresh, so a failover
//! can only lengthen a wait, never cut one short. One is in flight at a time; a refused one
//! (the gang was granted, or ended, meanwhile) is forgotten.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use muster_core::ids::{QueueName, WorkId, millis};
use muster_core::model::{GangStyle, QueueConfig};
use muster_core::plan::{Plan, WaitReason};
use muster_state::commands::EndGangWait;
use muster_state::version::LogFormat;
use muster_state::{ClusterState, Op};

/// What becomes of gangs that wait too long, where their queues set nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GangTimeout {
    /// How long a gang may wait for all of its minimum.
    pub after: Duration,
    /// What becomes of it then.
    pub style: GangStyle,
}

impl Default for GangTimeout {
    /// YuniKorn's defaults: 15 minutes, soft.
    fn default() -> Self {
        Self {
            after: Duration::from_secs(15 * 60),
            style: GangStyle::Soft,
        }
    }
}

/// Since when each gang has waited, and the end of a wait in flight.
#[derive(Debug, Default)]
pub(super) struct GangWaits {
    since: BTreeMap<WorkId, Instant>,
    in_flight: bool,
}

impl GangWaits {
    /// Notes the gangs `plan` (a pass at `now`) left waiting for all of their minimum; the
    /// others wait no more.
    pub(super) fn note(&mut self, now: Instant, plan: &Plan) {
        let mut waiting = BTreeMap::new();
        for w in &plan.waiting {
            if let WaitReason::Gang { .. }
            | WaitReason::GangReserved { .. }
            | WaitReason::DriverGang { .. } = w.reason
            {
                let since = self.since.get(&w.id).copied().unwrap_or(now);
                waiting.insert(w.id.clone(), since);
            }
        }
        self.since = waiting;
    }

    /// The end of the wait of the gang that has waited longest past its timeout at `now`,
    /// if any and none is in flight, once the cluster's log format admits it.
    pub(super) fn due(
        &mut self,
        now: Instant,
        state: &ClusterState,
        default: GangTimeout,
    ) -> Option<Op> {
        if self.in_flight || self.since.is_empty() || state.log_format() < LogFormat::FOURTH {
            return None;
        }
        let queues = state.queues();
        let timeout = |work: &WorkId| {
            let queue: Option<&QueueName> = match work {
                WorkId::App(app) => state.apps().get(app).map(|a| &a.desc.queue),
                WorkId::Driver(driver) => state.drivers().get(driver).map(|d| &d.desc.queue),
            };
            let config = queues.iter().find(|q| Some(&q.name) == queue);
            timeout_of(config, default)
        };
        let (work, waited, style) = self
            .since
            .iter()
            .map(|(work, since)| (work, now.saturating_duration_since(*since), timeout(work)))
            .filter(|(_, waited, timeout)| *waited >= timeout.after)
            .max_by_key(|(_, waited, _)| *waited)
            .map(|(work, waited, timeout)| (work.clone(), waited, timeout.style))?;
        self.since.remove(&work);
        self.in_flight = true;
        Some(Op::EndGangWait(EndGangWait {
            work,
            style,
            waited_ms: millis(waited),
        }))
    }

    /// The end of a wait in flight was settled, committed or not.
    pub(super) fn settled(&mut self) {
        self.in_flight = false;
    }
}

/// The timeout of a gang of the queue `config` describes (`None`: one with default
/// settings).
fn timeout_of(config: Option<&QueueConfig>, default: GangTimeout) -> GangTimeout {
    GangTimeout {
        after: config
            .and_then(|q| q.gang_timeout_s)
            .map_or(default.after, Duration::from_secs),
        style: config.and_then(|q| q.gang_style).unwrap_or(default.style),
    }
}

#[cfg(test)]
mod tests {
    use muster_core::plan::Waiting;

    use super::*;

    fn plan_waiting(apps: &[(&str, WaitReason)]) -> Plan {
        Plan {
            waiting: apps
                .iter()
                .map(|(app, reason)| Waiting {
                    id: work(app),
                    reason: reason.clone(),
                })
                .collect(),
            ..Plan::default()
        }
    }

    /// An application, or a driver when `id` starts with `driver-`.
    fn work(id: &str) -> WorkId {
        if id.starts_with("driver-") {
            WorkId::Driver(id.into())
        } else {
            WorkId::App(id.into())
        }
    }

    #[test]
    fn a_gang_is_timed_since_it_first_waited_and_forgotten_once_it_waits_no_more() {
        let start = Instant::now();
        let gang = WaitReason::Gang { minimum: 5, fit: 3 };
        let reserved = WaitReason::GangReserved {
            minimum: 5,
            reserved: 3,
        };
        let mut waits = GangWaits::default();
        waits.note(start, &plan_waiting(&[("a", gang.clone())]));
        // Keeping room is waiting still; its start stays.
        let beside = WaitReason::DriverGang { minimum: 5, fit: 2 };
        let later = start + Duration::from_secs(5);
        waits.note(
            later,
            &plan_waiting(&[("a", reserved), ("b", gang), ("driver-c", beside)]),
        );
        assert_eq!(waits.since[&work("a")], start);
        assert_eq!(waits.since[&work("b")], later);
        // A driver waiting beside its application's gang waits for the gang too.
        assert_eq!(waits.since[&work("driver-c")], later);
        // Waiting for something else is not a gang's wait.
        let limit = WaitReason::ExecutorLimit { limit: 1, held: 1 };
        waits.note(
            start + Duration::from_secs(6),
            &plan_waiting(&[("a", limit)]),
        );
        assert!(waits.since.is_empty());
    }

    #[test]
    fn a_queues_own_timeout_and_style_win_over_the_masters() {
        let default = GangTimeout::default();
        assert_eq!(timeout_of(None, default), default);
        let queue = QueueConfig {
            gang_timeout_s: Some(30),
            gang_style: Some(GangStyle::Hard),
            ..QueueConfig::named("etl")
        };
        assert_eq!(
            timeout_of(Some(&queue), default),
            GangTimeout {
                after: Duration::from_secs(30),
                style: GangStyle::Hard
            }
        );
        let only_style = QueueConfig {
            gang_style: Some(GangStyle::Hard),
            ..QueueConfig::named("etl")
        };
        assert_eq!(timeout_of(Some(&only_style), default).after, default.after);
    }
}
