//! The tables client commands print, one per part of the cluster status, each with a header
//! row.

use std::fmt::Write as _;

use muster_master::web::view::{BuildView, ShuffleServiceView, StatusView, UsageView};
use muster_proto::exit;

/// The members: id, address, role.
pub fn members(status: &StatusView) -> String {
    let mut out = format!("{:<4} {:<22} {:<10} BUILD\n", "ID", "ADDRESS", "ROLE");
    for m in &status.members {
        let silent = if m.silent {
            " (silent: not heard from)"
        } else {
            ""
        };
        let build = BuildView::line(m.build.as_ref());
        let _ = writeln!(
            out,
            "{:<4} {:<22} {:<10} {build}{silent}",
            m.id,
            m.addr,
            m.role.name()
        );
    }
    let _ = writeln!(
        out,
        "cluster log format {} (release {}): masters of older releases can no longer join",
        status.log_format, status.log_format_release
    );
    if let Some(held) = status.held_log_format() {
        let _ = writeln!(out, "log format {held}");
    }
    let _ = writeln!(
        out,
        "applied log index {} (by the master that answered)",
        status.applied_index
    );
    out
}

/// The workers: id, host, state, cores and memory used of their capacity.
pub fn workers(status: &StatusView) -> String {
    let mut out = format!(
        "{:<34} {:<12} {:<14} {:<9} {:<13} {:<16} BUILD\n",
        "ID", "HOST", "STATE", "CORES", "MEMORY (MB)", "SHUFFLE SERVICE"
    );
    for w in &status.workers {
        let build = BuildView::line(w.build.as_ref());
        let shuffle_service = ShuffleServiceView::line(w.shuffle_service.as_ref());
        let _ = writeln!(
            out,
            "{:<34} {:<12} {:<14} {:<9} {:<13} {shuffle_service:<16} {build}",
            w.id,
            w.host,
            if w.draining {
                "DRAINING"
            } else {
                w.state.name()
            },
            format!("{}/{}", w.cores_used, w.cores),
            format!("{}/{}", w.memory_used_mb, w.memory_mb),
        );
    }
    // Room kept, and for whom: no other work is placed there.
    for k in &status.kept {
        let why = if k.until_ms == 0 {
            "a waiting gang"
        } else {
            "prior work that preempted"
        };
        let _ = writeln!(
            out,
            "kept on {}: {} cores, {} MB for {} ({why})",
            k.worker, k.cores, k.memory_mb, k.owner
        );
    }
    out
}

/// The named users.
pub fn users(status: &StatusView) -> String {
    let mut out = format!("{:<24} {:<6} {:<8} GENERATION\n", "NAME", "ROLE", "STATE");
    for u in &status.users {
        let role = if u.admin { "admin" } else { "user" };
        let state = if u.revoked { "REVOKED" } else { "ACTIVE" };
        let _ = writeln!(out, "{:<24} {role:<6} {state:<8} {}", u.name, u.generation);
    }
    out
}

/// The applications, each followed by why it waits and its executors, then the ended ones
/// the masters retain, the most recent last (as `muster drivers` lists ended drivers).
pub fn apps(status: &StatusView) -> String {
    let mut out = format!(
        "{:<28} {:<16} {:<12} {:<10} {:<8} CORES\n",
        "ID", "NAME", "USER", "QUEUE", "STATE"
    );
    for a in &status.apps {
        let row = [
            &*a.id,
            &a.name,
            a.user.as_deref().unwrap_or_default(),
            &a.queue,
        ];
        app_row(&mut out, row, a.state.name(), &a.cores_granted.to_string());
        if let Some(ui) = &a.ui_address {
            let _ = writeln!(out, "  ui: {ui}");
        }
        if a.priority != 0 {
            let _ = writeln!(out, "  priority: {}", a.priority);
        }
        if let Some(minimum) = a.min_executors {
            let _ = writeln!(out, "  gang: {minimum} executors at once");
        }
        gang_timed_out(&mut out, a.gang_timed_out.as_ref());
        if let Some(waiting) = &a.waiting {
            let _ = writeln!(out, "  waiting: {waiting}");
        }
        for e in &a.executors {
            let _ = writeln!(
                out,
                "  executor {:<4} {:<34} {:<10} cores {} pid {}{}",
                e.id,
                e.worker,
                e.state.name(),
                e.cores,
                e.pid.unwrap_or(0),
                used(e.usage, Some(e.memory_mb))
            );
        }
    }
    for a in &status.completed_apps {
        let row = [
            &*a.id,
            &a.name,
            a.user.as_deref().unwrap_or_default(),
            &a.queue,
        ];
        app_row(&mut out, row, a.state.name(), "-");
        gang_timed_out(&mut out, a.gang_timed_out.as_ref());
    }
    out
}

/// An application's row: its id, name, user and queue, its state, and the cores it holds.
fn app_row(out: &mut String, [id, name, user, queue]: [&str; 4], state: &str, cores: &str) {
    let _ = writeln!(
        out,
        "{id:<28} {name:<16} {user:<12} {queue:<10} {state:<8} {cores}"
    );
}

/// Why an application was no longer a gang, when it waited its gang's timeout.
fn gang_timed_out(out: &mut String, timed_out: Option<&String>) {
    if let Some(timed_out) = timed_out {
        let _ = writeln!(out, "  gang timed out: {timed_out}");
    }
}

/// What a process uses, where its worker measures it: `, mem 40/512 MB, cpu 1.2 s` (the
/// memory granted after the slash, where known; CPU time where counted).
fn used(usage: Option<UsageView>, granted_mb: Option<u64>) -> String {
    let Some(usage) = usage else {
        return String::new();
    };
    let granted = granted_mb.map(|mb| format!("/{mb}")).unwrap_or_default();
    let cpu = usage
        .cpu_seconds
        .map(|seconds| format!(", cpu {seconds:.1} s"))
        .unwrap_or_default();
    format!(", mem {}{granted} MB{cpu}", usage.memory_mb)
}

/// The drivers, running and recently ended, each followed by why it waits, or, for a
/// supervised one started again, its restarts.
pub fn drivers(status: &StatusView) -> String {
    let mut out = format!(
        "{:<28} {:<16} {:<12} {:<10} {:<11} {:<5} {:<7} {:<34} PROCESS\n",
        "ID", "NAME", "USER", "QUEUE", "STATE", "CORES", "MEM", "WORKER"
    );
    for d in &status.drivers {
        let exit = d.exit_code.map(exit::describe).unwrap_or_default();
        // Between the runs of a supervised driver its worker waits to start it again.
        let waits_to_restart = d.restarts.as_ref().and_then(|r| r.starts_again_in_ms);
        let pid = match (d.pid, waits_to_restart) {
            (Some(pid), _) => format!("pid {pid}"),
            (None, Some(ms)) => format!("restarting in {:.1} s", ms as f64 / 1000.0),
            (None, None) => String::new(),
        };
        let _ = writeln!(
            out,
            "{:<28} {:<16} {:<12} {:<10} {:<11} {:<5} {:<7} {:<34} {pid}{exit}{}",
            d.id,
            d.name,
            d.user.as_deref().unwrap_or_default(),
            d.queue,
            d.state.name(),
            d.cores,
            d.memory_mb,
            d.worker.as_deref().unwrap_or_default(),
            used(d.usage, None)
        );
        if d.priority != 0 {
            let _ = writeln!(out, "  priority: {}", d.priority);
        }
        if let Some(timed_out) = &d.gang_timed_out {
            let _ = writeln!(out, "  gang timed out: {timed_out}");
        }
        if let Some(waiting) = &d.waiting {
            let _ = writeln!(out, "  waiting: {waiting}");
        }
        if let Some(restarts) = &d.restarts {
            let _ = writeln!(out, "  {}", restarts.describe());
        }
        if let Some(successor) = &d.relaunched_as {
            let _ = writeln!(out, "  relaunched as {successor}");
        }
    }
    out
}

/// The queues and their settings, children indented below their parents, with the
/// executor cores held in each (below it, for a parent).
pub fn queues(status: &StatusView) -> String {
    let mut out = format!(
        "{:<20} {:<6} {:<9} {:<8} {:<12} {:<13} {:<13} {:<9} {:<10} {:<12} SUBMIT\n",
        "NAME",
        "PRIOR",
        "CAPACITY",
        "MAX",
        "THRESHOLD",
        "DRIVER_SHARE",
        "GANG_TIMEOUT",
        "ORDERING",
        "CORES",
        "MAX_PER_USER"
    );
    for q in &status.queues {
        let submit = if q.leaf {
            q.submitters()
        } else {
            "-".to_owned()
        };
        let per_user = q
            .max_per_user
            .map_or_else(|| "-".to_owned(), |n| n.to_string());
        let capacity = q.capacity.map_or_else(|| "-".to_owned(), |c| c.to_string());
        let driver_share = q
            .driver_share
            .map_or_else(|| "-".to_owned(), |s| s.to_string());
        let gang_timeout = match (q.gang_timeout_s, q.gang_style) {
            (None, None) => "-".to_owned(),
            (after, style) => format!(
                "{} {}",
                after.map_or_else(|| "-".to_owned(), |s| format!("{s}s")),
                style.map_or_else(|| "-".to_owned(), |style| style.to_string())
            ),
        };
        let name = format!("{}{}", "  ".repeat(q.depth), q.name);
        let _ = writeln!(
            out,
            "{name:<20} {:<6} {capacity:<9} {:<8} {:<12} {driver_share:<13} {gang_timeout:<13} {:<9} {:<10} {per_user:<12} {submit}",
            q.prior, q.max_capacity, q.threshold, q.ordering, q.cores_used
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use muster_master::web::view::StatusView;
    use muster_proto::v1::{DriverState, DriverStatus, Restarts, StatusReply};

    #[test]
    fn a_supervised_driver_between_two_runs_says_it_is_restarting() {
        let status = StatusView::of(&StatusReply {
            drivers: vec![DriverStatus {
                id: "driver-1".into(),
                state: DriverState::Running.into(),
                worker: "w1".into(),
                restarts: Some(Restarts {
                    count: 3,
                    last_exit_code: Some(1),
                    starts_again_in_ms: 2500,
                }),
                ..DriverStatus::default()
            }],
            ..StatusReply::default()
        });
        let table = super::drivers(&status);
        let row = table.lines().nth(1).unwrap();
        assert!(row.trim_end().ends_with("restarting in 2.5 s"), "{table}");
        assert!(
            table.contains("restarted 3 times, last failed with exit 1; starts again in 2.5 s"),
            "{table}"
        );
    }
}
