//! The book's metric reference (`docs/src/reference/metrics.md`), made from what the masters'
//! and the workers' registries export: each metric's name as Prometheus is queried for it,
//! its type, its labels and its help text.

use std::fmt::Write as _;

use super::cell;

/// The page.
pub(super) fn page() -> String {
    let mut page = String::from(
        "# Metrics\n\n\
         Every metric Muster exports, in Prometheus's text format at `/metrics`. This page is \
         made from what the masters and the workers register, and a test keeps it so. The \
         operator guide's [Monitoring](../operator/monitoring.md) page says how to scrape \
         them and which dashboard plots them.\n",
    );
    section(
        &mut page,
        "Masters",
        "Every master with `--http` serves these (over HTTPS when it has a certificate). Each \
         reports its own Raft node and the cluster as it has applied it; the leader adds what \
         its sessions see, and counters stay where its last term as leader left them.",
        &muster_master::web::metrics::Metrics::sample(),
    );
    section(
        &mut page,
        "Workers",
        "A worker started with `--http HOST:PORT` serves these, over plain HTTP: bind it where \
         only Prometheus reaches.",
        &muster_worker::metrics::Metrics::sample(),
    );
    page
}

/// A section of the page: `intro`, then a row for each metric of `exposition`.
fn section(page: &mut String, title: &str, intro: &str, exposition: &str) {
    write!(
        page,
        "\n## {title}\n\n{intro}\n\n| Metric | Type | Labels | What it is |\n|---|---|---|---|\n"
    )
    .unwrap();
    for metric in metrics(exposition) {
        let labels = metric
            .labels
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ");
        writeln!(
            page,
            "| `{}` | {} | {labels} | {} |",
            metric.name,
            metric.kind,
            cell(&metric.help)
        )
        .unwrap();
    }
}

/// One metric of an exposition.
struct Metric {
    /// As it is queried: a counter's with `_total`.
    name: String,
    kind: String,
    labels: Vec<String>,
    help: String,
}

/// The metrics of `exposition`, in its order: each from its `# HELP` and `# TYPE` lines and
/// the label names of its first sample (a histogram's `le` left out).
fn metrics(exposition: &str) -> Vec<Metric> {
    let mut metrics: Vec<Metric> = Vec::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("a help line names its metric");
            metrics.push(Metric {
                name: name.to_owned(),
                kind: String::new(),
                labels: Vec::new(),
                help: help.to_owned(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let metric = metrics.last_mut().expect("a type line after its help line");
            metric.kind = rest.split_once(' ').expect("a type").1.to_owned();
            if metric.kind == "counter" {
                metric.name.push_str("_total");
            }
        } else if !line.starts_with('#') {
            let metric = metrics.last_mut().expect("a sample after its help line");
            if let Some((_, labels)) = line.split_once('{')
                && metric.labels.is_empty()
            {
                let labels = labels.split_once('}').expect("labels end").0;
                metric.labels = labels
                    .split(',')
                    .filter_map(|pair| pair.split_once('=').map(|(name, _)| name.to_owned()))
                    .filter(|name| name != "le")
                    .collect();
            }
        }
    }
    metrics
}
