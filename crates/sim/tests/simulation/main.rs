//! Simulations driven by scripts (`tests/simulation/scripts`): each sets up a cluster file
//! and a trace exactly as their files have them, one JSON document per command, runs them,
//! and prints what became of every app and driver, in the order they ended, and what the
//! run cost. The state's invariants are checked after every log entry.
//!
//! Commands:
//!
//! * `cluster 'JSON'`: the cluster file;
//! * `trace 'JSON'`: one more line of the trace; `clear`: none yet;
//! * `run [seed=N] [until_s=S]`: a run from scratch, printing one line per app or driver
//!   (`NAME QUEUE submitted S started S ended S OUTCOME`, `waits` for those unfinished),
//!   with two or more users Jain's index of their dominant shares and each one's mean, and
//!   what preemptions and faults cost.
//!
//! And a generated day of bursts, which must all end, and a generated day of two teams, whose
//! small applications wait far less under `drf` than in Spark's order.

use std::error::Error;
use std::path::Path;

use goldenscript::{Argument, Command, Context};
use muster_core::model::OrderingPolicy;
use muster_sim::Options;
use muster_sim::cluster::Cluster;
use muster_sim::trace::{self, Entry};

fn run_script(path: &Path) {
    goldenscript::run(&mut Runner::default(), path).expect("goldenscript failed");
}

test_each_file::test_each_path! { in "crates/sim/tests/simulation/scripts" as simulation => run_script }

#[derive(Default)]
struct Runner {
    cluster: Option<Cluster>,
    trace: Vec<Entry>,
}

impl goldenscript::Runner for Runner {
    type Command = Command;

    fn run(&mut self, command: &Command, _context: &Context) -> Result<String, Box<dyn Error>> {
        let mut seed = 1;
        let mut until_s = None;
        let mut json = None;
        for arg in &command.args {
            match arg {
                Argument::Positional(text) => json = Some(text.as_str()),
                Argument::KeyValue(key, value) if key == "seed" => seed = value.parse()?,
                Argument::KeyValue(key, value) if key == "until_s" => {
                    until_s = Some(value.parse::<f64>()?);
                }
                other => return Err(format!("unexpected argument {other}").into()),
            }
        }
        match command.name.as_str() {
            "cluster" => {
                let text = json.ok_or("cluster 'JSON'")?;
                self.cluster = Some(Cluster::parse(text, Path::new("cluster.json"))?);
                Ok(String::new())
            }
            "trace" => {
                let text = json.ok_or("trace 'JSON'")?;
                self.trace.extend(trace::parse(text, "trace.jsonl")?);
                // In time order, as a trace file is read.
                self.trace.sort_by(|a, b| a.at_s().total_cmp(&b.at_s()));
                Ok(String::new())
            }
            "clear" => {
                self.trace.clear();
                Ok(String::new())
            }
            "run" => {
                let cluster = self.cluster.as_ref().ok_or("no cluster yet")?;
                let options = Options {
                    seed,
                    until_ms: until_s.map(muster_sim::seconds_to_ms),
                    sample_ms: 1000,
                    check_invariants: true,
                };
                let recorder = muster_sim::simulate(cluster, &self.trace, options, &mut |_| {});
                let mut out = String::new();
                for &i in recorder.order.iter().chain(&recorder.unfinished()) {
                    let w = recorder.work[i].as_ref().expect("work");
                    let time = |t: Option<f64>| t.map_or("-".into(), |t| format!("{t:.1}"));
                    out += &format!(
                        "{} {} submitted {:.1} started {} ended {} {}",
                        w.name,
                        w.queue,
                        w.submitted_s,
                        time(w.started_s),
                        time(w.ended_s),
                        w.outcome.as_deref().unwrap_or("waits")
                    );
                    if w.failed_runs > 0 {
                        out += &format!(" (failed runs: {})", w.failed_runs);
                    }
                    out += "\n";
                }
                let s = recorder.report().simulated;
                if let Some(jain) = s.fairness.jain_index {
                    out += &format!("fairness {jain:.2}: {}\n", s.fairness.means());
                }
                out += &format!(
                    "preempted {}: {} tasks ran again ({:.1} core-s)\n",
                    s.preemption.executors, s.preemption.tasks_rerun, s.preemption.core_s_lost
                );
                if s.workers_lost + s.leader_changes > 0 || s.other_losses.tasks_rerun > 0 {
                    out += &format!(
                        "workers lost {}, leader changes {}: {} tasks ran again ({:.1} core-s)\n",
                        s.workers_lost,
                        s.leader_changes,
                        s.other_losses.tasks_rerun,
                        s.other_losses.core_s_lost
                    );
                }
                if s.ran_twice > 0 {
                    out += &format!("RAN TWICE: {}\n", s.ran_twice);
                }
                if s.overcommitted > 0 {
                    out += &format!("OVERCOMMITTED: {}\n", s.overcommitted);
                }
                Ok(out)
            }
            other => Err(format!("unknown command {other}").into()),
        }
    }
}

/// Runs a generated workload to its end, sampling every minute and checking the state's
/// invariants after every log entry.
fn run_generated(workload: &muster_sim::generate::Workload) -> muster_sim::report::Recorder {
    let cluster = Cluster::parse(&workload.cluster.to_string(), Path::new("cluster.json"))
        .expect("a valid cluster file");
    let options = Options {
        seed: 1,
        until_ms: None,
        sample_ms: 60_000,
        check_invariants: true,
    };
    muster_sim::simulate(&cluster, &workload.trace, options, &mut |_| {})
}

/// A generated day of bursts (`generate bursts`): every hour more cluster-mode job drivers
/// than the cluster has cores, a third of their applications gangs, and client applications
/// between: everything ends FINISHED, nothing waits for ever, nothing runs twice.
#[test]
fn a_day_of_bursts_of_job_drivers_and_gangs_all_ends() {
    let workload = muster_sim::generate::bursts(&muster_sim::generate::Bursts {
        workers: 2,
        hours: 3,
        seed: 7,
    });
    let recorder = run_generated(&workload);
    let waiting: Vec<String> = recorder
        .unfinished()
        .iter()
        .map(|&i| {
            let w = recorder.work[i].as_ref().expect("work");
            format!(
                "{} {:?} started {:?}",
                w.name, workload.trace[i], w.started_s
            )
        })
        .collect();
    assert!(waiting.is_empty(), "waits for ever: {waiting:#?}");
    let outcomes: Vec<&str> = recorder
        .work
        .iter()
        .flatten()
        .map(|w| w.outcome.as_deref().unwrap_or("waits"))
        .collect();
    let gangs = workload
        .trace
        .iter()
        .filter(|e| match e {
            Entry::App(app) => app.min_executors.is_some(),
            Entry::Driver(driver) => driver.min_executors.is_some(),
            _ => false,
        })
        .count();
    assert!(
        gangs > 0 && outcomes.len() > 200,
        "{gangs} gangs of {}",
        outcomes.len()
    );
    assert!(outcomes.iter().all(|o| *o == "FINISHED"), "{outcomes:?}");
    assert_eq!(recorder.report().simulated.ran_twice, 0);
    assert_eq!(recorder.report().simulated.overcommitted, 0);
}

/// A generated day of two teams sharing one queue (`generate teams`): under `drf` the
/// analysts' small applications no longer wait behind the batch applications queued before
/// them, as they do in Spark's order; every application ends either way.
#[test]
fn under_drf_the_analysts_small_applications_wait_less_than_half_as_long_as_in_fifo() {
    let median_waits = |ordering| {
        let workload = muster_sim::generate::teams(&muster_sim::generate::Teams {
            workers: 4,
            hours: 3.0,
            ordering,
            seed: 1,
        });
        let recorder = run_generated(&workload);
        assert!(
            recorder.unfinished().is_empty(),
            "{ordering}: some wait for ever"
        );
        let users = recorder.report().simulated.users;
        (users["analysts"].wait_s.p50, users["etl"].wait_s.p50)
    };
    let (fifo, fifo_etl) = median_waits(OrderingPolicy::Fifo);
    let (drf, drf_etl) = median_waits(OrderingPolicy::Drf);
    assert!(
        drf * 2.0 < fifo,
        "analysts wait {drf} s under drf, {fifo} s under fifo (etl {drf_etl} s, {fifo_etl} s)"
    );
}
