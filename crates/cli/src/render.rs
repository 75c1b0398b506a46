//! The tables client commands print, one per part of the cluster status, each with a header
//! row.

use std::fmt::Write as _;

use muster_proto::convert::resources;
use muster_proto::exit;
use muster_proto::v1::{ProcessUsage, StatusReply};

/// The members: id, address, role.
pub fn members(status: &StatusReply) -> String {
    let mut out = format!("{:<4} {:<22} ROLE\n", "ID", "ADDRESS");
    for m in &status.members {
        let silent = if m.silent {
            " (silent: not heard from)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{:<4} {:<22} {}{silent}",
            m.id,
            m.addr,
            m.role().name()
        );
    }
    out
}

/// The workers: id, host, state, cores and memory used of their capacity.
pub fn workers(status: &StatusReply) -> String {
    let mut out = format!(
        "{:<34} {:<12} {:<14} {:<9} MEMORY (MB)\n",
        "ID", "HOST", "STATE", "CORES"
    );
    for w in &status.workers {
        let (capacity, used) = (resources(w.capacity.clone()), resources(w.used.clone()));
        let _ = writeln!(
            out,
            "{:<34} {:<12} {:<14} {:<9} {}/{}",
            w.id,
            w.host,
            if w.draining {
                "DRAINING"
            } else {
                w.state().name()
            },
            format!("{}/{}", used.cores, capacity.cores),
            used.memory_mb,
            capacity.memory_mb
        );
    }
    out
}

/// The named users.
pub fn users(status: &StatusReply) -> String {
    let mut out = format!("{:<24} {:<6} {:<8} GENERATION\n", "NAME", "ROLE", "STATE");
    for u in &status.users {
        let role = if u.admin { "admin" } else { "user" };
        let state = if u.revoked { "REVOKED" } else { "ACTIVE" };
        let _ = writeln!(out, "{:<24} {role:<6} {state:<8} {}", u.name, u.generation);
    }
    out
}

/// The applications, each followed by why it waits and its executors.
pub fn apps(status: &StatusReply) -> String {
    let mut out = format!(
        "{:<28} {:<16} {:<12} {:<10} {:<8} CORES\n",
        "ID", "NAME", "USER", "QUEUE", "STATE"
    );
    for a in &status.apps {
        let _ = writeln!(
            out,
            "{:<28} {:<16} {:<12} {:<10} {:<8} {}",
            a.id,
            a.name,
            a.user,
            a.queue,
            a.state().name(),
            a.cores_granted
        );
        if !a.ui_address.is_empty() {
            let _ = writeln!(out, "  ui: {}", a.ui_address);
        }
        if !a.waiting.is_empty() {
            let _ = writeln!(out, "  waiting: {}", a.waiting);
        }
        for e in &a.executors {
            let granted = resources(e.resources.clone());
            let _ = writeln!(
                out,
                "  executor {:<4} {:<34} {:<10} cores {} pid {}{}",
                e.id,
                e.worker,
                e.state().name(),
                granted.cores,
                e.pid,
                used(e.usage.as_ref(), Some(granted.memory_mb))
            );
        }
    }
    out
}

/// What a process uses, where its worker measures it: `, mem 40/512 MB, cpu 1.2 s` (the
/// memory granted after the slash, where known; CPU time where counted).
fn used(usage: Option<&ProcessUsage>, granted_mb: Option<u64>) -> String {
    let Some(usage) = usage else {
        return String::new();
    };
    let granted = granted_mb.map(|mb| format!("/{mb}")).unwrap_or_default();
    let cpu = usage
        .cpu_ms
        .map(|ms| format!(", cpu {:.1} s", ms as f64 / 1000.0))
        .unwrap_or_default();
    format!(
        ", mem {}{granted} MB{cpu}",
        usage.memory_bytes / (1024 * 1024)
    )
}

/// The drivers, running and recently ended, each followed by why it waits.
pub fn drivers(status: &StatusReply) -> String {
    let mut out = format!(
        "{:<28} {:<16} {:<12} {:<10} {:<11} {:<34} PROCESS\n",
        "ID", "NAME", "USER", "QUEUE", "STATE", "WORKER"
    );
    for d in &status.drivers {
        let exit = d.exit_code.map(exit::describe).unwrap_or_default();
        let pid = if d.pid == 0 {
            String::new()
        } else {
            format!("pid {}", d.pid)
        };
        let _ = writeln!(
            out,
            "{:<28} {:<16} {:<12} {:<10} {:<11} {:<34} {pid}{exit}{}",
            d.id,
            d.name,
            d.user,
            d.queue,
            d.state().name(),
            d.worker,
            used(d.usage.as_ref(), None)
        );
        if !d.waiting.is_empty() {
            let _ = writeln!(out, "  waiting: {}", d.waiting);
        }
    }
    out
}

/// The queues and their settings, children indented below their parents, with the
/// executor cores held in each (below it, for a parent).
pub fn queues(status: &StatusReply) -> String {
    let mut out = format!(
        "{:<20} {:<6} {:<9} {:<8} {:<12} {:<10} {:<12} SUBMIT\n",
        "NAME", "PRIOR", "CAPACITY", "MAX", "THRESHOLD", "CORES", "MAX_PER_USER"
    );
    for (q, view) in status.queues.iter().zip(muster_master::queue_views(status)) {
        let submit = match &q.submit {
            _ if !view.leaf => "-".to_owned(),
            Some(list) if list.users.is_empty() => "admins".to_owned(),
            Some(list) => list.users.join(","),
            None if q.prior => "admins".to_owned(),
            None => "*".to_owned(),
        };
        let per_user = q
            .max_per_user
            .map_or_else(|| "-".to_owned(), |n| n.to_string());
        let capacity = q.capacity.map_or_else(|| "-".to_owned(), |c| c.to_string());
        let name = format!("{}{}", "  ".repeat(view.depth), q.name);
        let _ = writeln!(
            out,
            "{name:<20} {:<6} {capacity:<9} {:<8} {:<12} {:<10} {per_user:<12} {submit}",
            q.prior, q.max_capacity, q.threshold, view.cores_used
        );
    }
    out
}
