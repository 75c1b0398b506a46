//! The cluster status as JSON, the one shape `muster status --json` prints and the master's
//! HTTP endpoint serves.

use std::collections::{BTreeMap, HashMap};

use muster_core::access::QueueSpec;
use muster_core::ids::QueueName;
use muster_core::queues::{self, QueueView};
use muster_proto::exit;
use muster_proto::v1::{AddressList, ProcessUsage, Resources, StatusReply};
use serde_json::json;

/// The status reply as JSON: `null` for what is not set (a driver's worker before it is
/// placed, a process id not reported yet, a reason for something that does not wait).
/// Custom resources (`gpu`, ...) are a `resources` map by name, `{}` when none, as in
/// `muster plan`'s snapshots; their addresses an `addresses` map of lists by name. A process
/// shows what it uses, `usage: {"memory_mb", "cpu_seconds"}`, where its worker measures it
/// (the leader's view: `null` in a follower's local status).
pub fn status_json(status: &StatusReply) -> serde_json::Value {
    let null_if = |empty: bool, value: serde_json::Value| {
        if empty {
            serde_json::Value::Null
        } else {
            value
        }
    };
    json!({
        "leader": status.leader,
        "term": status.term,
        "applied_index": status.applied_index,
        "recovery_state": status.recovery_state().name(),
        "members": status.members.iter().map(|m| json!({
            "id": m.id, "addr": m.addr, "role": m.role().name(), "silent": m.silent,
        })).collect::<Vec<_>>(),
        "workers": status.workers.iter().map(|w| {
            let (capacity, used) = (w.capacity.clone().unwrap_or_default(), w.used.clone().unwrap_or_default());
            json!({
                "id": w.id, "host": w.host, "state": w.state().name(), "draining": w.draining,
                "cores": capacity.cores, "cores_used": used.cores,
                "memory_mb": capacity.memory_mb, "memory_used_mb": used.memory_mb,
                "resources": custom(&capacity), "resources_used": custom(&used),
                "addresses": addresses(&w.addresses),
            })
        }).collect::<Vec<_>>(),
        "apps": status.apps.iter().map(|a| json!({
            "id": a.id, "name": a.name, "queue": a.queue,
            "user": null_if(a.user.is_empty(), json!(a.user)),
            "state": a.state().name(), "cores_granted": a.cores_granted,
            "waiting": null_if(a.waiting.is_empty(), json!(a.waiting)),
            "ui_address": null_if(a.ui_address.is_empty(), json!(a.ui_address)),
            "executors": a.executors.iter().map(|e| {
                let resources = e.resources.clone().unwrap_or_default();
                json!({
                    "id": e.id, "worker": e.worker, "cores": resources.cores, "memory_mb": resources.memory_mb,
                    "resources": custom(&resources), "addresses": addresses(&e.addresses),
                    "state": e.state().name(),
                    "pid": null_if(e.pid == 0, json!(e.pid)),
                    "usage": e.usage.as_ref().map(usage),
                })
            }).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "completed_apps": status.completed_apps.iter().map(|a| json!({
            "id": a.id, "name": a.name, "queue": a.queue,
            "user": null_if(a.user.is_empty(), json!(a.user)),
            "state": a.state().name(),
        })).collect::<Vec<_>>(),
        "drivers": status.drivers.iter().map(|d| json!({
            "id": d.id, "name": d.name, "queue": d.queue,
            "user": null_if(d.user.is_empty(), json!(d.user)),
            "state": d.state().name(),
            "worker": null_if(d.worker.is_empty(), json!(d.worker)),
            "pid": null_if(d.pid == 0, json!(d.pid)),
            "usage": d.usage.as_ref().map(usage),
            "addresses": addresses(&d.addresses),
            "exit_code": d.exit_code,
            "exit_reason": d.exit_code.and_then(exit::reason),
            "waiting": null_if(d.waiting.is_empty(), json!(d.waiting)),
        })).collect::<Vec<_>>(),
        "queues": status.queues.iter().zip(queue_views(status)).map(|(q, view)| json!({
            "name": q.name, "prior": q.prior, "threshold": q.threshold, "max_capacity": q.max_capacity,
            "capacity": q.capacity,
            "submit": q.submit.as_ref().map(|list| &list.users), "administer": q.administer,
            "max_per_user": q.max_per_user,
            "depth": view.depth, "leaf": view.leaf, "guaranteed_share": view.guaranteed_share,
            "max_share": view.max_share, "cores_used": view.cores_used,
            "memory_used_mb": view.memory_used_mb,
        })).collect::<Vec<_>>(),
        "users": status.users.iter().map(|u| json!({
            "name": u.name, "admin": u.admin, "revoked": u.revoked, "generation": u.generation,
        })).collect::<Vec<_>>(),
        "kept": status.kept.iter().map(|k| {
            let resources = k.resources.clone().unwrap_or_default();
            json!({
                "owner": k.owner, "worker": k.worker, "cores": resources.cores,
                "memory_mb": resources.memory_mb, "resources": custom(&resources),
                "until_ms": k.until_ms,
            })
        }).collect::<Vec<_>>(),
    })
}

/// The status's queues in the tree, with the executor cores and memory held below each.
pub fn queue_views(status: &StatusReply) -> Vec<QueueView> {
    let mut used_by_leaf: BTreeMap<QueueName, (u64, u64)> = BTreeMap::new();
    for app in &status.apps {
        let used = used_by_leaf.entry(app.queue.as_str().into()).or_default();
        for executor in &app.executors {
            let resources = executor.resources.clone().unwrap_or_default();
            used.0 += u64::from(resources.cores);
            used.1 += resources.memory_mb;
        }
    }
    let configs: Vec<_> = status
        .queues
        .iter()
        .map(|q| QueueSpec::from(q).split().0)
        .collect();
    queues::views(&configs, &used_by_leaf)
}

/// What a process uses: memory in MB (as grants count it) and CPU time in seconds.
fn usage(usage: &ProcessUsage) -> serde_json::Value {
    json!({
        "memory_mb": usage.memory_bytes / (1024 * 1024),
        "cpu_seconds": usage.cpu_ms.map(|ms| ms as f64 / 1000.0),
    })
}

/// Resource addresses by name, in name order: `{"gpu": ["0", "1"]}`, `{}` when none.
fn addresses(lists: &HashMap<String, AddressList>) -> BTreeMap<&str, &[String]> {
    lists
        .iter()
        .map(|(name, list)| (name.as_str(), list.addresses.as_slice()))
        .collect()
}

/// The custom amounts of `resources`, by name.
fn custom(resources: &Resources) -> BTreeMap<&str, u32> {
    resources
        .custom
        .iter()
        .map(|(name, amount)| (name.as_str(), *amount))
        .collect()
}
