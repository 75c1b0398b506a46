//! `muster plan`: one scheduling pass over a snapshot file, offline. The same input always
//! prints the same plan, so it doubles as a way to ask "where would this go, and why not?".
//! A snapshot with `preemption` also shows which executors prior queues would stop. The file
//! is the pass's input as JSON, or a whole cluster's state as `muster snapshot save` wrote
//! it, from which the pass's input is taken as the leader takes it (with the default master
//! settings); `--input` prints that input instead, to read or edit.

use std::io::Read;
use std::path::Path;

use muster_core::access::{QueueAccess, QueueSpec};
use muster_core::model::PassConfig;
use muster_core::preempt::Preemption;
use muster_core::{Plan, Snapshot};
use muster_state::ClusterState;
use serde::Serialize;

use crate::error::CliError;

/// Reads the snapshot at `path` (`-` is standard input) and returns the plan as pretty JSON,
/// or with `input`, the pass's input.
///
/// # Errors
///
/// One line naming the file or the offending field: unreadable input, malformed JSON, an
/// unknown field or enum value, or a snapshot that fails validation.
pub fn run(path: &Path, input: bool) -> Result<String, CliError> {
    let snapshot = snapshot(path, &read(path)?)?;
    if input {
        return Ok(serde_json::to_string_pretty(&snapshot).expect("a snapshot serializes"));
    }
    let bad = |e: muster_core::InputError| CliError::BadInput(e.to_string());
    // The queues are written here: their names must be the paths of a tree.
    let queues: Vec<QueueSpec> = snapshot
        .queues
        .iter()
        .map(|q| QueueSpec::from((q.clone(), QueueAccess::default())))
        .collect();
    muster_core::queues::check_paths(&queues).map_err(bad)?;
    let plan = muster_core::schedule(&snapshot).map_err(bad)?;
    // With `preemption` set: what the waiting work of those prior queues would stop.
    let preempt = match &snapshot.preemption {
        Some(settings) => Some(
            muster_core::preempt::dry_run(&snapshot, settings)
                .map_err(bad)?
                .unwrap_or_default(),
        ),
        None => None,
    };
    let output = Output {
        plan: &plan,
        preempt,
    };
    Ok(serde_json::to_string_pretty(&output).expect("a plan always serializes"))
}

/// The pass's input in `bytes`: JSON, or else a state `muster snapshot save` wrote.
fn snapshot(path: &Path, bytes: &[u8]) -> Result<Snapshot, CliError> {
    let json = std::str::from_utf8(bytes).map(parse);
    if let Ok(Ok(snapshot)) = json {
        return Ok(snapshot);
    }
    match ClusterState::decode_snapshot(bytes) {
        Ok(state) => Ok(state.scheduling_snapshot(PassConfig::default())),
        // Text that is not a plan input: say what is wrong with it as one.
        Err(_) if json.is_ok() => json.expect("text"),
        Err(error) => Err(CliError::BadInput(format!(
            "{} is neither a plan input (JSON) nor a state `muster snapshot save` wrote: {error}",
            path.display()
        ))),
    }
}

/// The plan, and with `preemption` in the snapshot, what it would preempt.
#[derive(Serialize)]
struct Output<'a> {
    #[serde(flatten)]
    plan: &'a Plan,
    #[serde(skip_serializing_if = "Option::is_none")]
    preempt: Option<Preemption>,
}

fn read(path: &Path) -> Result<Vec<u8>, CliError> {
    let mut bytes = Vec::new();
    let result = if path == Path::new("-") {
        std::io::stdin().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::File::open(path)
            .and_then(|mut file| file.read_to_end(&mut bytes))
            .map(|_| ())
    };
    result
        .map_err(|error| CliError::BadInput(format!("cannot read {}: {error}", path.display())))?;
    Ok(bytes)
}

/// Parses a snapshot, naming the field where the JSON went wrong.
fn parse(text: &str) -> Result<Snapshot, CliError> {
    let bad = CliError::BadInput;
    // serde would also read a struct from an array of its fields in order; a snapshot is an
    // object only.
    if text.trim_start().starts_with('[') {
        return Err(bad(
            "invalid snapshot: expected a JSON object, found an array".to_owned(),
        ));
    }
    let mut json = serde_json::Deserializer::from_str(text);
    let snapshot: Snapshot = serde_path_to_error::deserialize(&mut json).map_err(|error| {
        let field = error.path().to_string();
        let inner = error.into_inner();
        bad(if inner.is_syntax() || inner.is_eof() {
            format!("invalid JSON: {inner}")
        } else if field == "." {
            format!("invalid snapshot: {inner}")
        } else {
            format!("{field}: {inner}")
        })
    })?;
    json.end()
        .map_err(|error| bad(format!("invalid JSON: {error}")))?;
    Ok(snapshot)
}
