//! Hostile input to a master, as bytes: settings and queue files, and a leader's term driven
//! by arbitrary worker, application and client messages. The same harnesses run as fuzz
//! targets (`fuzz/`); here they run as property tests, with inputs built both from raw bytes
//! and from well-formed messages, so the checks past decoding are reached too.

mod config_files;
mod leader_term;

use muster_proto::v1::{self, app_message, worker_message};
use proptest::prelude::*;
use prost::Message;

/// One frame of [`leader_term::leader_term`]'s script.
fn frame(kind: u8, link: u8, body: &[u8]) -> Vec<u8> {
    let length = u16::try_from(body.len()).expect("a short body");
    let mut frame = vec![kind, link];
    frame.extend_from_slice(&length.to_le_bytes());
    frame.extend_from_slice(body);
    frame
}

/// Ids, mostly of what a script's own commands create (the harness's clock starts at
/// 2023-11-14 22:13:20 UTC).
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-c]{1,2}",
        "(app|driver)-2023111422132[0-9]-000[0-3]"
    ]
}

fn resources() -> impl Strategy<Value = Option<v1::Resources>> {
    proptest::option::of(
        (0u32..6, 0u64..5000).prop_map(|(cores, memory_mb)| v1::Resources {
            cores,
            memory_mb,
            custom: Default::default(),
        }),
    )
}

/// Messages a cluster could plausibly see, so that scripts register workers, submit work,
/// place it and report on it.
fn message() -> impl Strategy<Value = Vec<u8>> {
    let worker = (0u8..4, "[a-c]", 1u32..6).prop_map(|(link, worker_id, cores)| {
        let register = v1::Register {
            worker_id,
            host: "h".into(),
            address: "h:1".into(),
            capacity: Some(v1::Resources {
                cores,
                memory_mb: 4096,
                custom: Default::default(),
            }),
            ..Default::default()
        };
        let body = Some(worker_message::Body::Register(register));
        frame(0, link, &v1::WorkerMessage { body }.encode_to_vec())
    });
    let report = (0u8..4, text(), 0u32..4, 0i32..8, 0u64..8).prop_map(
        |(link, app_id, executor_id, state, seq)| {
            let update = v1::ExecutorUpdate {
                app_id,
                executor_id,
                state,
                seq,
                ..Default::default()
            };
            let body = Some(worker_message::Body::Executor(update));
            frame(0, link, &v1::WorkerMessage { body }.encode_to_vec())
        },
    );
    let app = (4u8..8, proptest::option::of(1u32..8)).prop_map(|(link, cores_max)| {
        let register = v1::RegisterApp {
            name: "a".into(),
            cores_max,
            executor_memory_mb: 256,
            command: "/bin/true".into(),
            ..Default::default()
        };
        let body = Some(app_message::Body::Register(register));
        frame(1, link, &v1::AppMessage { body }.encode_to_vec())
    });
    let driver = (resources(), any::<bool>()).prop_map(|(resources, supervise)| {
        let request = v1::SubmitDriverRequest {
            resources,
            command: "/bin/true".into(),
            supervise,
            ..Default::default()
        };
        frame(2, 0, &request.encode_to_vec())
    });
    let kill = text().prop_map(|id| {
        frame(
            3,
            0,
            &v1::KillRequest {
                id,
                ..Default::default()
            }
            .encode_to_vec(),
        )
    });
    let control = (5u8..9, any::<u8>(), 0u16..600).prop_map(|(kind, link, ms)| {
        let mut frame = vec![kind, link];
        frame.extend_from_slice(&ms.to_le_bytes());
        frame
    });
    prop_oneof![3 => worker, 3 => report, 2 => app, 2 => driver, 1 => kill, 4 => control]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn hostile_settings_bytes_are_parsed_or_refused(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        config_files::config_files(&bytes);
    }

    #[test]
    fn hostile_settings_json_is_parsed_or_refused(
        text in r#"\{("[a-z_]{1,20}": (-?[0-9.e]{1,6}|null|true|"[a-z]*"|\[\]|\{\}),? ?){0,4}\}"#,
    ) {
        config_files::config_files(text.as_bytes());
    }

    #[test]
    fn a_leader_term_driven_by_hostile_bytes_never_breaks(
        bytes in proptest::collection::vec(any::<u8>(), 0..1024),
    ) {
        leader_term::leader_term(&bytes);
    }

    #[test]
    fn a_leader_term_driven_by_plausible_messages_never_breaks(
        frames in proptest::collection::vec(message(), 0..40),
    ) {
        // Past the linearizable read, so the leader recovers and schedules.
        let read = frame(7, 0, &[]);
        leader_term::leader_term(&[read, frames.concat()].concat());
    }
}
