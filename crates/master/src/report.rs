//! The cluster status as JSON, the one shape `muster status --json` prints and the master's
//! HTTP endpoint serves.

use muster_proto::v1::StatusReply;
use serde_json::json;

/// The status reply as JSON: `null` for what is not set (a driver's worker before it is
/// placed, a process id not reported yet, a reason for something that does not wait).
pub fn status_json(status: &StatusReply) -> serde_json::Value {
    json!({
        "leader": status.leader,
        "term": status.term,
        "recovery_state": status.recovery_state,
        "members": status.members.iter().map(|m| json!({"id": m.id, "addr": m.addr, "role": m.role})).collect::<Vec<_>>(),
        "workers": status.workers.iter().map(|w| json!({
            "id": w.id, "host": w.host, "state": w.state, "cores": w.cores, "cores_used": w.cores_used,
            "memory_mb": w.memory_mb, "memory_used_mb": w.memory_used_mb,
        })).collect::<Vec<_>>(),
        "apps": status.apps.iter().map(|a| json!({
            "id": a.id, "name": a.name, "queue": a.queue, "state": a.state, "cores_granted": a.cores_granted,
            "waiting": if a.waiting.is_empty() { serde_json::Value::Null } else { json!(a.waiting) },
            "executors": a.executors.iter().map(|e| json!({
                "id": e.id, "worker": e.worker, "cores": e.cores, "memory_mb": e.memory_mb, "state": e.state,
                "pid": if e.pid == 0 { serde_json::Value::Null } else { json!(e.pid) },
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "drivers": status.drivers.iter().map(|d| json!({
            "id": d.id, "name": d.name, "queue": d.queue, "state": d.state,
            "worker": if d.worker.is_empty() { serde_json::Value::Null } else { json!(d.worker) },
            "pid": if d.pid == 0 { serde_json::Value::Null } else { json!(d.pid) },
            "exit_code": d.exit_code,
            "waiting": if d.waiting.is_empty() { serde_json::Value::Null } else { json!(d.waiting) },
        })).collect::<Vec<_>>(),
        "queues": status.queues.iter().map(|q| json!({
            "name": q.name, "prior": q.prior, "threshold": q.threshold, "max_capacity": q.max_capacity,
        })).collect::<Vec<_>>(),
    })
}
