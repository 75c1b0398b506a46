//! `muster plan`: one scheduling pass over a snapshot file, offline. The same input always
//! prints the same plan, so it doubles as a way to ask "where would this go, and why not?".
//! A snapshot with `preemption` also shows which executors prior queues would stop.

use std::io::Read;
use std::path::Path;

use muster_core::access::{QueueAccess, QueueSpec};
use muster_core::preempt::Preemption;
use muster_core::{Plan, Snapshot};
use serde::Serialize;

use crate::error::CliError;

/// Reads the snapshot at `path` (`-` is standard input) and returns the plan as pretty JSON.
///
/// # Errors
///
/// One line naming the file or the offending field: unreadable input, malformed JSON, an
/// unknown field or enum value, or a snapshot that fails validation.
pub fn run(path: &Path) -> Result<String, CliError> {
    let text = read(path)?;
    let snapshot = parse(&text)?;
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

/// The plan, and with `preemption` in the snapshot, what it would preempt.
#[derive(Serialize)]
struct Output<'a> {
    #[serde(flatten)]
    plan: &'a Plan,
    #[serde(skip_serializing_if = "Option::is_none")]
    preempt: Option<Preemption>,
}

fn read(path: &Path) -> Result<String, CliError> {
    let mut text = String::new();
    let result = if path == Path::new("-") {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::File::open(path)
            .and_then(|mut file| file.read_to_string(&mut text))
            .map(|_| ())
    };
    result
        .map_err(|error| CliError::BadInput(format!("cannot read {}: {error}", path.display())))?;
    Ok(text)
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
