//! The cores each queue holds over a simulated run, as an SVG line chart.

use std::collections::BTreeSet;
use std::path::Path;

use plotters::prelude::*;

use crate::report::Sample;

/// Draws `samples` (cores held per queue over time, of a cluster of `cores`) to `path`.
///
/// # Errors
///
/// The file cannot be written.
pub fn cores_by_queue(
    path: &Path,
    title: &str,
    samples: &[Sample],
    cores: u64,
) -> Result<(), String> {
    let failed = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    let end = samples.last().map_or(1.0, |s| s.at_s).max(1.0);
    let (scale, unit) = if end > 7200.0 {
        (3600.0, "hours")
    } else if end > 300.0 {
        (60.0, "minutes")
    } else {
        (1.0, "seconds")
    };
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end / scale, 0u64..cores.max(1) + cores / 20 + 1)
        .map_err(|e| failed(&e))?;
    chart
        .configure_mesh()
        .x_desc(unit)
        .y_desc("cores held")
        .draw()
        .map_err(|e| failed(&e))?;
    let queues: BTreeSet<&String> = samples.iter().flat_map(|s| s.cores.keys()).collect();
    for (i, queue) in queues.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let line = samples
            .iter()
            .map(|s| (s.at_s / scale, s.cores.get(queue).copied().unwrap_or(0)));
        chart
            .draw_series(LineSeries::new(line, color))
            .map_err(|e| failed(&e))?
            .label(queue.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(|e| failed(&e))?;
    root.present().map_err(|e| failed(&e))
}
