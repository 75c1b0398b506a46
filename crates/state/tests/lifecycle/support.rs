//! A cluster under test: stamps commands with a test clock and checks every apply.

use std::collections::BTreeMap;

use muster_core::ids::{AppId, DriverId, QueueName, RequestId, Timestamp};
use muster_core::model::PassConfig;
use muster_core::resources::Resources;
use muster_state::commands::{RegisterWorker, SubmitApp, SubmitDriver, plan_op};
use muster_state::model::{AppDescription, DriverDescription};
use muster_state::{ApplyError, ClusterState, Command, Op, Outcome, Response, StateConfig};

/// 2023-10-31 22:45:09 UTC, the time in Spark's example ids.
pub const START: u64 = 1_698_792_309_000;

pub struct Cluster {
    pub state: ClusterState,
    /// Milliseconds; every command advances it by one second.
    pub clock: u64,
}

impl Cluster {
    pub fn new() -> Self {
        Self::with_config(StateConfig::default())
    }

    pub fn with_config(config: StateConfig) -> Self {
        Self {
            state: ClusterState::new(config),
            clock: START,
        }
    }

    /// Checks that the state comes back the same from a snapshot of it.
    pub fn assert_snapshot_round_trips(&self) {
        let bytes = self.state.encode_snapshot();
        assert_eq!(ClusterState::decode_snapshot(&bytes).unwrap(), self.state);
    }

    /// Applies `op` as a command with an optional request id, then checks the invariants and
    /// that a refusal changed nothing.
    pub fn command(&mut self, op: Op, request_id: Option<&str>) -> Result<Response, ApplyError> {
        let before = self.state.clone();
        let dedup = request_id.is_some();
        let command = Command {
            at: Timestamp(self.clock),
            request_id: request_id.map(|id| RequestId(id.into())),
            term: None,
            op,
        };
        self.clock += 1000;
        let result = self.state.apply(&command);
        if let Err(invariant) = self.state.check_invariants() {
            panic!("invariant broken by {command:?}: {invariant}");
        }
        // A refusal changes nothing, except that a request id remembers its result.
        if result.is_err() && dedup {
            assert_eq!(
                visible(&before),
                visible(&self.state),
                "a refused command changed the state"
            );
        } else if result.is_err() {
            assert_eq!(before, self.state, "a refused command changed the state");
        }
        result
    }

    pub fn apply(&mut self, op: Op) -> Result<Response, ApplyError> {
        self.command(op, None)
    }

    pub fn ok(&mut self, op: Op) -> Response {
        let description = format!("{op:?}");
        self.apply(op)
            .unwrap_or_else(|e| panic!("{description} refused: {e}"))
    }

    pub fn worker(&mut self, id: &str, cores: u32, memory_mb: u64) {
        self.ok(Op::RegisterWorker(RegisterWorker {
            id: id.into(),
            host: format!("host-{id}"),
            address: format!("{id}:7078"),
            resources: Resources::new(cores, memory_mb),
            fence_grace_ms: None,
        }));
    }

    pub fn submit_app(&mut self, desc: AppDescription) -> AppId {
        match self
            .ok(Op::SubmitApp(SubmitApp {
                desc,
                executor_limit: None,
            }))
            .outcome
        {
            Outcome::AppSubmitted { id } => id,
            other => panic!("unexpected outcome {other:?}"),
        }
    }

    pub fn submit_driver(&mut self, desc: DriverDescription) -> DriverId {
        match self.ok(Op::SubmitDriver(SubmitDriver { desc })).outcome {
            Outcome::DriverSubmitted { id } => id,
            other => panic!("unexpected outcome {other:?}"),
        }
    }

    /// One scheduling pass with worker-id placement, applied as one plan.
    pub fn schedule(&mut self) -> Response {
        let config = PassConfig {
            worker_selection: muster_core::model::WorkerSelection::WorkerId,
            ..PassConfig::default()
        };
        let plan = muster_core::schedule(&self.state.scheduling_snapshot(config))
            .expect("the state gives a valid snapshot");
        let response = self.ok(plan_op(&plan));
        match &response.outcome {
            Outcome::PlanApplied { rejected, .. } => assert!(
                rejected.is_empty(),
                "a fresh plan was rejected: {rejected:?}"
            ),
            other => panic!("unexpected outcome {other:?}"),
        }
        response
    }
}

/// The state as its accessors show it (the request log aside).
fn visible(state: &ClusterState) -> String {
    format!(
        "{:?}{:?}{:?}{:?}{:?}{:?}{:?}",
        state.users(),
        state.workers(),
        state.apps(),
        state.drivers(),
        state.queues(),
        state.completed_apps(),
        state.completed_drivers()
    )
}

/// What an earlier build wrote to `fixtures/NAME` in the log's encoding, read whole.
pub fn fixture<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let bytes = fixture_bytes(name);
    let (value, read): (T, usize) =
        bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap();
    assert_eq!(read, bytes.len(), "{name} has trailing bytes");
    value
}

/// The bytes an earlier build wrote to `fixtures/NAME`.
pub fn fixture_bytes(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/lifecycle/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn app_desc(
    cores_max: Option<u32>,
    executor_cores: Option<u32>,
    memory_mb: u64,
) -> AppDescription {
    AppDescription {
        name: "test-app".into(),
        user: "alice".into(),
        queue: QueueName::default(),
        cores_max,
        executor_cores,
        executor_memory_mb: memory_mb,
        executor_resources: BTreeMap::new(),
        command: "/bin/executor".into(),
        args: vec!["--verbose".into()],
        env: BTreeMap::new(),
    }
}

pub fn driver_desc(cores: u32, memory_mb: u64, supervise: bool) -> DriverDescription {
    DriverDescription {
        name: "test-driver".into(),
        queue: QueueName::default(),
        resources: Resources::new(cores, memory_mb),
        command: "/bin/driver".into(),
        args: Vec::new(),
        env: BTreeMap::new(),
        supervise,
    }
}
