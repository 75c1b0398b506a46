//! What each leaf queue held over the last hour, as the status endpoint samples it, and the
//! overview's charts of it: one SVG line chart of cores and one of memory, a line a queue.
//! Sampling is the endpoint's; this keeps the samples and draws them, with time passed in.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use maud::{Markup, html};

use crate::web::view::StatusView;

/// How far back the charts reach.
pub(crate) const SPAN_MS: u64 = 60 * 60 * 1000;

/// How often the endpoint samples.
pub(crate) const SAMPLE_EVERY_MS: u64 = 15 * 1000;

/// One sample: what each leaf queue held then.
#[derive(Clone, Debug, PartialEq)]
struct Sample {
    at_ms: u64,
    /// Cores and memory in MB, by queue.
    held: BTreeMap<String, (u64, u64)>,
}

/// The samples of the last [`SPAN_MS`], oldest first.
#[derive(Debug, Default)]
pub(crate) struct QueueHistory {
    samples: VecDeque<Sample>,
}

/// The line colours, one a queue in turn.
const COLOURS: [&str; 8] = [
    "#4a7", "#47b", "#c63", "#a4a", "#bb3", "#3aa", "#888", "#d47",
];

const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 120.0;

impl QueueHistory {
    /// Records what each leaf queue of `status` holds at `at_ms`, and forgets samples older
    /// than [`SPAN_MS`].
    pub(crate) fn record(&mut self, at_ms: u64, status: &StatusView) {
        let held = status
            .queues
            .iter()
            .filter(|q| q.leaf)
            .map(|q| (q.name.clone(), (q.cores_used, q.memory_used_mb)))
            .collect();
        self.samples.push_back(Sample { at_ms, held });
        while self
            .samples
            .front()
            .is_some_and(|s| s.at_ms + SPAN_MS < at_ms)
        {
            self.samples.pop_front();
        }
    }

    /// The charts of cores and memory held per queue over the hour before `now_ms`.
    pub(crate) fn charts(&self, now_ms: u64) -> Markup {
        let queues: BTreeSet<&String> = self.samples.iter().flat_map(|s| s.held.keys()).collect();
        html! {
            h2 { "Held per queue, the last hour" }
            @if self.samples.len() < 2 {
                p { "Sampled every " (SAMPLE_EVERY_MS / 1000) " s: the charts show once there are two samples." }
            } @else {
                (self.chart("executor and driver cores", now_ms, &queues, |held| held.0))
                (self.chart("memory (MB)", now_ms, &queues, |held| held.1))
                p {
                    @for (i, queue) in queues.iter().enumerate() {
                        span style={ "color:" (COLOURS[i % COLOURS.len()]) ";margin-right:1em" } { "■ " (queue) }
                    }
                }
            }
        }
    }

    /// One chart: `value` of each queue's holding, a line a queue, over the hour before
    /// `now_ms`, scaled to the largest value.
    fn chart(
        &self,
        title: &str,
        now_ms: u64,
        queues: &BTreeSet<&String>,
        value: fn(&(u64, u64)) -> u64,
    ) -> Markup {
        let most = self
            .samples
            .iter()
            .flat_map(|s| s.held.values().map(value))
            .max()
            .unwrap_or(0)
            .max(1);
        let start = now_ms.saturating_sub(SPAN_MS);
        let x = |at: u64| at.saturating_sub(start) as f64 / SPAN_MS as f64 * WIDTH;
        let y = |v: u64| HEIGHT - v as f64 / most as f64 * HEIGHT;
        let line = |queue: &String| {
            self.samples
                .iter()
                .map(|s| {
                    let v = s.held.get(queue).map_or(0, value);
                    format!("{:.1},{:.1}", x(s.at_ms), y(v))
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        html! {
            figure style="margin:0 0 1em 0" {
                figcaption { (title) ", at most " (most) }
                svg xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(HEIGHT + 14.0)
                    viewBox={ "0 0 " (WIDTH) " " (HEIGHT + 14.0) } {
                    rect x="0" y="0" width=(WIDTH) height=(HEIGHT) fill="none" stroke="#ccc" {}
                    @for (i, queue) in queues.iter().enumerate() {
                        polyline fill="none" stroke=(COLOURS[i % COLOURS.len()]) stroke-width="1.5"
                            points=(line(queue)) {}
                    }
                    text x="0" y=(HEIGHT + 12.0) font-size="10" { "an hour ago" }
                    text x=(WIDTH) y=(HEIGHT + 12.0) font-size="10" text-anchor="end" { "now" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use muster_proto::v1::{Queue, StatusReply};

    use super::*;

    fn status(queues: &[(&str, u64)]) -> StatusView {
        let mut view = StatusView::of(&StatusReply {
            queues: queues
                .iter()
                .map(|(name, _)| Queue {
                    name: (*name).into(),
                    max_capacity: 1.0,
                    threshold: 1.0,
                    ..Queue::default()
                })
                .collect(),
            ..StatusReply::default()
        });
        for row in &mut view.queues {
            let cores = queues.iter().find(|(n, _)| *n == row.name).unwrap().1;
            row.cores_used = cores;
            row.memory_used_mb = cores * 1024;
        }
        view
    }

    #[test]
    fn samples_older_than_an_hour_are_forgotten() {
        let mut history = QueueHistory::default();
        history.record(0, &status(&[("default", 1)]));
        history.record(SPAN_MS, &status(&[("default", 2)]));
        assert_eq!(history.samples.len(), 2, "an hour old is kept");
        history.record(SPAN_MS + 1, &status(&[("default", 3)]));
        assert_eq!(history.samples.len(), 2);
        assert_eq!(history.samples[0].held["default"], (2, 2048));
    }

    #[test]
    fn each_queue_is_a_line_across_the_hour_scaled_to_the_most_held() {
        let mut history = QueueHistory::default();
        let now = 10 * SPAN_MS;
        assert!(
            history
                .charts(now)
                .into_string()
                .contains("once there are two samples"),
            "no chart without samples"
        );
        history.record(now - SPAN_MS, &status(&[("default", 0), ("prod", 4)]));
        history.record(now, &status(&[("default", 2), ("prod", 1)]));
        let page = history.charts(now).into_string();
        // Cores: prod from the top at the left to a quarter at the right; default from the
        // bottom to half.
        assert!(page.contains(r#"points="0.0,0.0 600.0,90.0""#), "{page}");
        assert!(page.contains(r#"points="0.0,120.0 600.0,60.0""#), "{page}");
        assert!(
            page.contains("executor and driver cores, at most 4"),
            "{page}"
        );
        assert!(page.contains("memory (MB), at most 4096"), "{page}");
        assert_eq!(
            page.matches("<polyline").count(),
            4,
            "two queues, two charts"
        );
        assert!(
            page.contains("■ default") && page.contains("■ prod"),
            "{page}"
        );
    }
}
