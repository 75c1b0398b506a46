//! Client request ids make writes idempotent.

use muster_state::commands::{KillApp, SubmitApp};
use muster_state::{ApplyError, Op, StateConfig};

use crate::support::{Cluster, app_desc};

fn submit() -> Op {
    Op::SubmitApp(SubmitApp {
        desc: app_desc(None, None, 512),
        executor_limit: None,
    })
}

#[test]
fn a_retried_request_returns_the_first_result_and_changes_nothing() {
    let mut c = Cluster::new();
    let first = c.command(submit(), Some("req-1")).unwrap();
    let state = c.state.clone();
    let retry = c.command(submit(), Some("req-1")).unwrap();
    assert_eq!(first, retry);
    assert_eq!(c.state, state);
    assert_eq!(c.state.apps().len(), 1);
    // Another request id is another submission.
    c.command(submit(), Some("req-2")).unwrap();
    assert_eq!(c.state.apps().len(), 2);
}

#[test]
fn a_retried_refusal_is_refused_the_same_way() {
    let mut c = Cluster::new();
    let kill = || Op::KillApp(KillApp { id: "app-x".into() });
    let first = c.command(kill(), Some("req-1")).unwrap_err();
    assert_eq!(first, ApplyError::UnknownApp("app-x".into()));
    assert_eq!(c.command(kill(), Some("req-1")).unwrap_err(), first);
}

#[test]
fn only_the_last_request_ids_are_remembered() {
    let mut c = Cluster::with_config(StateConfig {
        retained_requests: 3,
        ..StateConfig::default()
    });
    for i in 0..4 {
        c.command(submit(), Some(&format!("req-{i}"))).unwrap();
    }
    // req-0 was forgotten: applying it again is a new submission; req-3 is still known.
    c.command(submit(), Some("req-3")).unwrap();
    assert_eq!(c.state.apps().len(), 4);
    c.command(submit(), Some("req-0")).unwrap();
    assert_eq!(c.state.apps().len(), 5);
}

#[test]
fn a_leader_command_written_in_a_later_term_is_refused_and_changes_nothing() {
    use muster_core::ids::{Term, Timestamp};
    use muster_state::Command;
    use muster_state::commands::WorkerLost;

    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let lost = |term| Command {
        at: Timestamp(1),
        request_id: None,
        term: Some(Term(term)),
        op: Op::WorkerLost(WorkerLost {
            id: "w1".into(),
            reason: "silent".into(),
        }),
    };
    let state = c.state.clone();
    assert_eq!(
        c.state.apply_in_term(Term(4), &lost(3)).unwrap_err(),
        ApplyError::StaleTerm {
            decided: Term(3),
            entry: Term(4)
        }
    );
    assert_eq!(c.state, state);
    // In its own term it applies; a client write (no term) applies in any term.
    c.state.apply_in_term(Term(4), &lost(4)).unwrap();
    assert_ne!(c.state, state);
    let submit = Command {
        at: Timestamp(2),
        request_id: None,
        term: None,
        op: submit(),
    };
    c.state.apply_in_term(Term(9), &submit).unwrap();
}
