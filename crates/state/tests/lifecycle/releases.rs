//! What each release wrote, read by this build: golden bytes that no later build may stop
//! reading. Release 0.1.0 wrote its fixtures itself (its lifecycle tests' random commands,
//! run deterministically, and a per-executor plan, a batch and a preemption for guarantees
//! added by hand): the log entries with whether each applied, and the snapshot of the state
//! they left.

use std::collections::BTreeSet;

use muster_core::ids::Term;
use muster_state::version::LogFormat;
use muster_state::{ClusterState, Command, Op};

use crate::support::{fixture, fixture_bytes};

/// Every op release 0.1.0 writes, by name.
const RELEASE_0_1_0_OPS: [&str; 27] = [
    "RegisterWorker",
    "WorkerLost",
    "DecommissionWorker",
    "SubmitApp",
    "SubmitDriver",
    "KillApp",
    "KillDriver",
    "SetExecutorLimit",
    "KillExecutors",
    "ApplyPlanPerExecutor",
    "ExecutorStateChanged",
    "DriverStateChanged",
    "AppFinished",
    "SetQueues",
    "Preempt",
    "GrantReservations",
    "Batch",
    "DrainWorker",
    "Restore",
    "AddUser",
    "RevokeUser",
    "By",
    "ReplaceQueues",
    "ConfigureQueues",
    "PreemptForGuarantees",
    "RegisterWorkerWithAddresses",
    "ApplyPlan",
];

fn name(op: &Op) -> String {
    let debug = format!("{op:?}");
    debug[..debug.find('(').unwrap_or(debug.len())].to_owned()
}

#[test]
fn the_log_release_0_1_0_wrote_applies_as_it_did_and_ends_in_the_state_it_snapshotted() {
    let log: Vec<(Command, bool)> = fixture("log-release-0.1.0.bin");
    let written: BTreeSet<String> = log.iter().map(|(command, _)| name(&command.op)).collect();
    let every: BTreeSet<String> = RELEASE_0_1_0_OPS.iter().map(|&op| op.to_owned()).collect();
    assert_eq!(
        written, every,
        "the fixture holds every op of release 0.1.0"
    );
    let mut state = ClusterState::default();
    for (command, applied) in &log {
        assert_eq!(command.op.introduced_in(), LogFormat::FIRST, "{command:?}");
        let result = state.apply_in_term(Term(1), command);
        assert_eq!(result.is_ok(), *applied, "{command:?}: {result:?}");
    }
    let snapshot = fixture_bytes("release-0.1.0.snapshot");
    assert_eq!(snapshot[0], 7, "release 0.1.0's newest snapshot format");
    let snapshotted = ClusterState::decode_snapshot(&snapshot).unwrap();
    assert_eq!(snapshotted, state);
    assert_eq!(snapshotted.log_format(), LogFormat::FIRST);
    // Unraised, this build writes the very bytes release 0.1.0 wrote.
    assert_eq!(state.encode_snapshot(), snapshot);
}
