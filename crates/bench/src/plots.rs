//! The benchmarks' plots for the book. A benchmark run with `MUSTER_BENCH_DATA=DIR` writes
//! what it measured into `DIR` as JSON (`placement.json`, `failover.json`), and
//! `deploy/bench/c1m` writes `muster bench workers --json`'s report of a C1M-style run as
//! `c1m.json`; [`draw`] turns each file it finds there into an SVG line chart.
//! `deploy/bench/plots` does both for the first two.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;
use serde::Deserialize;

use crate::BenchError;

/// One pass of each placer over one snapshot, as the `placement` benchmark's summary
/// measured it (medians of interleaved runs).
#[derive(Debug, Deserialize)]
pub struct PlacementPass {
    /// `mixed`, `wide` or `tree`.
    pub workload: String,
    /// Workers in the snapshot.
    pub workers: u32,
    /// Milliseconds per pass of the indexed placer.
    pub indexed_ms: f64,
    /// Milliseconds per pass of the literal port of Spark's loop.
    pub spark_loop_ms: f64,
}

/// One round of the `failover` benchmark.
#[derive(Debug, Deserialize)]
pub struct FailoverRound {
    /// `SIGKILL` or `SIGSTOP`, sent to the leader.
    pub fault: String,
    /// Seconds until another master led.
    pub elected_s: f64,
    /// Seconds until it was ALIVE with every worker.
    pub alive_s: f64,
}

/// A C1M-style run of `muster bench workers`, as its JSON report has it.
#[derive(Debug, Deserialize)]
pub struct PlacementRun {
    /// Simulated workers.
    pub workers: usize,
    /// Drivers placed.
    pub drivers: usize,
    /// Drivers placed in each second of the run.
    pub placed_each_s: Vec<u64>,
    /// Over the whole run.
    pub placements_per_s: f64,
}

/// Nomad's C1M: a million containers placed in under five minutes, about 3,750 a second.
const NOMAD_C1M_PER_S: f64 = 3_750.0;

/// Draws a plot for each benchmark whose results are in `data` into `out`, and returns the
/// plots' paths. Fails when `data` holds none.
///
/// # Errors
///
/// A file cannot be read, is not what its benchmark writes, or a plot cannot be written.
pub fn draw(data: &Path, out: &Path) -> Result<Vec<PathBuf>, BenchError> {
    // Every file is read before any plot is drawn, so a malformed one changes nothing.
    let passes = read::<PlacementPass>(&data.join("placement.json"))?;
    let rounds = read::<FailoverRound>(&data.join("failover.json"))?;
    let run = read_one::<PlacementRun>(&data.join("c1m.json"))?;
    if passes.is_none() && rounds.is_none() && run.is_none() {
        return Err(BenchError::BadInput(format!(
            "{} holds no benchmark results (placement.json, failover.json, c1m.json): run \
             the benchmarks with MUSTER_BENCH_DATA set to it",
            data.display()
        )));
    }
    let mut drawn = Vec::new();
    if let Some(passes) = passes {
        let path = out.join("placement.svg");
        placement(&path, &passes)?;
        drawn.push(path);
    }
    if let Some(rounds) = rounds {
        let path = out.join("failover.svg");
        failover(&path, &rounds)?;
        drawn.push(path);
    }
    if let Some(run) = run {
        let path = out.join("c1m.svg");
        placements_over_time(&path, &run)?;
        drawn.push(path);
    }
    Ok(drawn)
}

/// The JSON object in `path`, or `None` when there is no such file.
fn read_one<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, BenchError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(BenchError::Failed(format!("{}: {e}", path.display()))),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| BenchError::BadInput(format!("{}: {e}", path.display())))
}

/// The JSON array in `path`, or `None` when there is no such file.
fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<Vec<T>>, BenchError> {
    let Some(values) = read_one::<Vec<T>>(path)? else {
        return Ok(None);
    };
    if values.is_empty() {
        return Err(BenchError::BadInput(format!(
            "{}: no measurements",
            path.display()
        )));
    }
    Ok(Some(values))
}

/// The lines' colours, dark enough to read on white.
const COLORS: [RGBColor; 4] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
];

fn failed(path: &Path) -> impl Fn(&dyn std::fmt::Display) -> BenchError + '_ {
    move |e| BenchError::Failed(format!("cannot draw {}: {e}", path.display()))
}

/// `items` grouped by `key`, in the order of the keys.
fn by<T>(items: &[T], key: impl Fn(&T) -> &String) -> BTreeMap<&str, Vec<&T>> {
    let mut groups: BTreeMap<&str, Vec<&T>> = BTreeMap::new();
    for item in items {
        groups.entry(key(item).as_str()).or_default().push(item);
    }
    groups
}

/// A white SVG canvas for `path`.
fn canvas(path: &Path) -> Result<DrawingArea<SVGBackend<'_>, Shift>, BenchError> {
    let root = SVGBackend::new(path, (900, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(path)(&e))?;
    Ok(root)
}

/// Draws `chart`'s legend in its upper left corner and writes `root` to `path`.
fn finish<'a, Coords: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Coords>,
    root: &DrawingArea<SVGBackend<'a>, Shift>,
    path: &Path,
) -> Result<(), BenchError> {
    let failed = failed(path);
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(|e| failed(&e))?;
    root.present().map_err(|e| failed(&e))
}

/// Milliseconds per pass against workers, both axes logarithmic: a solid line per workload
/// for the indexed placer and a dashed one, same colour, for Spark's loop.
fn placement(path: &Path, passes: &[PlacementPass]) -> Result<(), BenchError> {
    let failed = failed(path);
    let workers = |p: &PlacementPass| f64::from(p.workers);
    let times = passes.iter().flat_map(|p| [p.indexed_ms, p.spark_loop_ms]);
    let (low, high) = times.fold((f64::MAX, f64::MIN), |(l, h), t| (l.min(t), h.max(t)));
    let (fewest, most) = passes
        .iter()
        .map(workers)
        .fold((f64::MAX, f64::MIN), |(l, h), w| (l.min(w), h.max(w)));
    let root = canvas(path)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "one placement pass: indexed placer (solid) and Spark's loop (dashed)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (fewest * 0.8..most * 1.25).log_scale(),
            (low * 0.5..high * 2.0).log_scale(),
        )
        .map_err(|e| failed(&e))?;
    chart
        .configure_mesh()
        .x_desc("workers")
        .x_label_formatter(&|workers| format!("{workers:.0}"))
        .y_desc("milliseconds per pass")
        .draw()
        .map_err(|e| failed(&e))?;
    for (i, (workload, mut ours)) in by(passes, |p| &p.workload).into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        ours.sort_by_key(|p| p.workers);
        chart
            .draw_series(LineSeries::new(
                ours.iter().map(|p| (workers(p), p.indexed_ms)),
                color.stroke_width(2),
            ))
            .map_err(|e| failed(&e))?
            .label(workload)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(DashedLineSeries::new(
                ours.iter().map(|p| (workers(p), p.spark_loop_ms)),
                6,
                4,
                color.stroke_width(2),
            ))
            .map_err(|e| failed(&e))?;
    }
    finish(&mut chart, &root, path)
}

/// Seconds after each fault, per fault, its rounds sorted by when the new leader was ALIVE
/// with every worker (thick), and in the same rounds when another master led (thin).
fn failover(path: &Path, rounds: &[FailoverRound]) -> Result<(), BenchError> {
    let failed = failed(path);
    let faults = by(rounds, |r| &r.fault);
    let most = faults.values().map(Vec::len).max().unwrap_or(1);
    let slowest = rounds.iter().map(|r| r.alive_s).fold(0.0, f64::max);
    let root = canvas(path)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "failover of the leader: elected (thin), ALIVE with every worker (thick)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.5..most as f64 + 0.5, 0.0..slowest * 1.15)
        .map_err(|e| failed(&e))?;
    chart
        .configure_mesh()
        .x_desc("rounds, the fastest to ALIVE first")
        .x_label_formatter(&|round| format!("{round:.0}"))
        .y_desc("seconds after the fault")
        .draw()
        .map_err(|e| failed(&e))?;
    for (i, (fault, mut ours)) in faults.into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        ours.sort_by(|a, b| a.alive_s.total_cmp(&b.alive_s));
        let in_order = |of: fn(&FailoverRound) -> f64| {
            ours.iter()
                .enumerate()
                .map(|(i, round)| (i as f64 + 1.0, of(round)))
                .collect::<Vec<_>>()
        };
        let alive = in_order(|r| r.alive_s);
        chart
            .draw_series(LineSeries::new(alive.clone(), color.stroke_width(3)))
            .map_err(|e| failed(&e))?
            .label(fault)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(alive.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(|e| failed(&e))?;
        chart
            .draw_series(LineSeries::new(
                in_order(|r| r.elected_s),
                color.stroke_width(1),
            ))
            .map_err(|e| failed(&e))?;
    }
    finish(&mut chart, &root, path)
}

/// Drivers placed in each second of a C1M-style run (solid), beside its average over the run
/// and Nomad's C1M rate (dashed).
fn placements_over_time(path: &Path, run: &PlacementRun) -> Result<(), BenchError> {
    let failed = failed(path);
    let most = run.placed_each_s.iter().copied().max().unwrap_or(0) as f64;
    let seconds = run.placed_each_s.len() as f64;
    let root = canvas(path)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{} drivers placed on {} simulated workers through three masters",
                run.drivers, run.workers
            ),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..seconds.max(1.0), 0.0..most.max(NOMAD_C1M_PER_S) * 1.15)
        .map_err(|e| failed(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds from the first submission")
        .x_label_formatter(&|second| format!("{second:.0}"))
        .y_desc("drivers placed in that second")
        .y_label_formatter(&|placed| format!("{placed:.0}"))
        .draw()
        .map_err(|e| failed(&e))?;
    let color = COLORS[0];
    chart
        .draw_series(LineSeries::new(
            run.placed_each_s
                .iter()
                .enumerate()
                .map(|(second, &placed)| (second as f64 + 1.0, placed as f64)),
            color.stroke_width(2),
        ))
        .map_err(|e| failed(&e))?
        .label("placed each second")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    for (rate, label, color) in [
        (run.placements_per_s, "average over the run", COLORS[2]),
        (NOMAD_C1M_PER_S, "Nomad's C1M (3,750 a second)", COLORS[1]),
    ] {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, rate), (seconds, rate)],
                6,
                4,
                color.stroke_width(2),
            ))
            .map_err(|e| failed(&e))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    finish(&mut chart, &root, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts an SVG shows.
    fn texts(svg: &str) -> Vec<&str> {
        svg.split("<text")
            .skip(1)
            .filter_map(|text| Some(text[text.find('>')? + 1..text.find("</text>")?].trim()))
            .collect()
    }

    #[test]
    fn draws_a_plot_for_each_benchmark_that_left_results() {
        let data = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        std::fs::write(
            data.path().join("placement.json"),
            r#"[{"workload":"wide","workers":100,"indexed_ms":0.05,"spark_loop_ms":0.3},
                {"workload":"wide","workers":1000,"indexed_ms":0.4,"spark_loop_ms":3.6}]"#,
        )
        .unwrap();
        let drawn = draw(data.path(), out.path()).unwrap();
        assert_eq!(drawn, [out.path().join("placement.svg")]);
        let svg = std::fs::read_to_string(&drawn[0]).unwrap();
        assert!(texts(&svg).contains(&"wide"), "{svg}");

        std::fs::write(
            data.path().join("failover.json"),
            r#"[{"fault":"SIGKILL","elected_s":0.5,"alive_s":0.9},
                {"fault":"SIGSTOP","elected_s":2.1,"alive_s":2.4}]"#,
        )
        .unwrap();
        let drawn = draw(data.path(), out.path()).unwrap();
        assert_eq!(drawn.len(), 2);
        let svg = std::fs::read_to_string(&drawn[1]).unwrap();
        let faults = texts(&svg);
        assert!(
            faults.contains(&"SIGKILL") && faults.contains(&"SIGSTOP"),
            "{svg}"
        );

        std::fs::write(
            data.path().join("c1m.json"),
            r#"{"workers":5000,"drivers":12000,"placed_each_s":[5000,4000,3000],
                "placements_per_s":4000.0,"leader_changes":0}"#,
        )
        .unwrap();
        let drawn = draw(data.path(), out.path()).unwrap();
        assert_eq!(drawn[2], out.path().join("c1m.svg"));
        let svg = std::fs::read_to_string(&drawn[2]).unwrap();
        assert!(
            texts(&svg)
                .contains(&"12000 drivers placed on 5000 simulated workers through three masters"),
            "{svg}"
        );
    }

    #[test]
    fn no_results_or_malformed_ones_are_refused_and_nothing_is_drawn() {
        let data = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let error = draw(data.path(), out.path()).unwrap_err();
        assert!(error.to_string().contains("MUSTER_BENCH_DATA"), "{error}");

        std::fs::write(
            data.path().join("placement.json"),
            r#"[{"workload":"wide","workers":100,"indexed_ms":0.05,"spark_loop_ms":0.3}]"#,
        )
        .unwrap();
        std::fs::write(
            data.path().join("failover.json"),
            r#"[{"fault":"SIGKILL"}]"#,
        )
        .unwrap();
        let error = draw(data.path(), out.path()).unwrap_err();
        assert!(error.to_string().contains("missing field"), "{error}");
        assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
    }
}
