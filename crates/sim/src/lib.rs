//! `muster simulate`: Muster's own scheduling code run in virtual time, at any scale.
//!
//! A simulation drives the leader's state machine (`muster_leader`: steps, ticks,
//! scheduling passes, recovery, preemption) and the replicated state's `apply` exactly as a
//! master's session does, but with a log kept in memory and no Raft, no gRPC and no
//! processes: simulated workers register, heartbeat, launch, stop and report; simulated
//! applications attach, run their tasks on the executors they are given and finish. What it
//! reports is thus a statement about Muster itself, not about a model of it.
//!
//! | module | owns |
//! |---|---|
//! | [`cluster`] | the cluster file: workers, queues, the masters' settings, timings |
//! | [`trace`] | the trace format: apps, drivers and faults, one JSON object per line |
//! | [`generate`] | built-in traces: the priority experiment at any scale, a production mix |
//! | `engine` | the agenda of virtual time, and the leader and state driven by it |
//! | `world` | the simulated workers and applications |
//! | [`report`] | what a run records and reports |
//! | [`plot`] | cores held per queue over time, as SVG |

pub mod cluster;
mod engine;
pub mod generate;
pub mod plot;
pub mod report;
pub mod trace;
mod world;

use engine::Simulation;
pub use engine::{Options, seconds_to_ms};
use report::Recorder;

/// Runs `trace` (in time order) on `cluster`; `progress` hears the virtual time (ms) about
/// once a simulated minute.
pub fn simulate(
    cluster: &cluster::Cluster,
    trace: &[trace::Entry],
    options: Options,
    progress: &mut dyn FnMut(u64),
) -> Recorder {
    Simulation::new(cluster, trace, options).run(progress)
}
