//! Queue configuration changes.

use muster_core::model::QueueConfig;
use muster_state::commands::{KillApp, SetQueues};
use muster_state::{ApplyError, Op};

use crate::support::{Cluster, app_desc};

fn queue(name: &str, threshold: f64) -> QueueConfig {
    QueueConfig {
        name: name.into(),
        prior: false,
        threshold,
        max_capacity: 1.0,
    }
}

#[test]
fn queues_are_replaced_and_checked() {
    let mut c = Cluster::new();
    c.ok(Op::SetQueues(SetQueues {
        queues: vec![queue("batch", 0.8)],
    }));
    assert_eq!(c.state.queues(), [queue("batch", 0.8)]);
    assert_eq!(
        c.refuse(Op::SetQueues(SetQueues {
            queues: vec![queue("batch", 1.5)]
        }))
        .to_string(),
        "queues[0].threshold: must be in (0, 1], got 1.5"
    );
    assert_eq!(
        c.refuse(Op::SetQueues(SetQueues {
            queues: vec![queue("a", 1.0), queue("a", 1.0)]
        }))
        .to_string(),
        "queues[1].name: duplicate queue `a`"
    );
}

#[test]
fn a_queue_in_use_cannot_be_dropped() {
    let mut c = Cluster::new();
    c.ok(Op::SetQueues(SetQueues {
        queues: vec![queue("batch", 1.0)],
    }));
    let mut desc = app_desc(None, None, 512);
    desc.queue = "batch".into();
    let app = c.submit_app(desc);
    assert_eq!(
        c.refuse(Op::SetQueues(SetQueues { queues: vec![] })),
        ApplyError::Conflict("queue `batch` still has active applications or drivers".into())
    );
    c.ok(Op::KillApp(KillApp { id: app }));
    c.ok(Op::SetQueues(SetQueues { queues: vec![] }));
}
