//! Arbitrary requests, as a client or worker could send them, converted and applied to a
//! replicated state the way a master does: never a panic; a refusal names what is wrong and
//! changes nothing; whatever is accepted keeps every invariant.

use muster_core::ids::Timestamp;
use muster_proto::v1;
use muster_state::commands::{RegisterWorker, SubmitApp, SubmitDriver};
use muster_state::{ClusterState, Command, Op, StateConfig};
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z/ ]{0,12}",
        proptest::collection::vec(any::<char>(), 0..300).prop_map(String::from_iter),
    ]
}

fn resources() -> impl Strategy<Value = Option<v1::Resources>> {
    proptest::option::of(
        (
            any::<u32>(),
            any::<u64>(),
            proptest::collection::hash_map(text(), any::<u32>(), 0..4),
        )
            .prop_map(|(cores, memory_mb, custom)| v1::Resources {
                cores,
                memory_mb,
                custom,
            }),
    )
}

fn request() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            text(),
            text(),
            text(),
            resources(),
            any::<bool>(),
            any::<u64>()
        )
            .prop_map(
                |(worker_id, host, address, capacity, fence, kill_grace_ms)| {
                    Op::RegisterWorker(RegisterWorker::from(&v1::Register {
                        worker_id,
                        host,
                        address,
                        capacity,
                        fence,
                        kill_grace_ms,
                        ..Default::default()
                    }))
                }
            ),
        (
            text(),
            text(),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            any::<u64>(),
            text(),
            proptest::collection::vec(text(), 0..3),
            proptest::option::of(any::<u32>()),
        )
            .prop_map(
                |(name, queue, cores_max, executor_cores, memory, command, args, limit)| {
                    Op::SubmitApp(SubmitApp::from(v1::RegisterApp {
                        name,
                        queue,
                        cores_max,
                        executor_cores,
                        executor_memory_mb: memory,
                        command,
                        args,
                        executor_limit: limit,
                        ..Default::default()
                    }))
                }
            ),
        (text(), text(), resources(), text(), any::<bool>()).prop_map(
            |(name, queue, resources, command, supervise)| {
                Op::SubmitDriver(SubmitDriver::from(v1::SubmitDriverRequest {
                    name,
                    queue,
                    resources,
                    command,
                    supervise,
                    ..Default::default()
                }))
            }
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_requests_are_refused_cleanly_or_applied_consistently(
        requests in proptest::collection::vec(request(), 1..8),
    ) {
        let mut state = ClusterState::new(StateConfig::default());
        for (i, op) in requests.into_iter().enumerate() {
            let before = state.clone();
            let command = Command {
                at: Timestamp(1_700_000_000_000 + i as u64 * 1000),
                request_id: None,
                term: None,
                op,
            };
            match state.apply(&command) {
                Ok(_) => prop_assert!(state.check_invariants().is_ok()),
                Err(refused) => {
                    prop_assert!(!refused.to_string().is_empty());
                    prop_assert_eq!(&state, &before);
                }
            }
        }
    }
}
