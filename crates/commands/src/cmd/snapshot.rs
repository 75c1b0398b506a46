//! `muster snapshot save FILE`: the whole replicated state, as the leader has it, for
//! disaster recovery (`muster master --restore FILE` gives it to a new cluster).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use clap::Subcommand;
use muster_proto::v1::SaveSnapshotRequest;
use muster_raft::MAX_MESSAGE_BYTES;

use super::{MastersArg, runtime};
use crate::error::CliError;

/// `muster snapshot`.
#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Write the cluster's state to FILE (readable by its owner only: it holds
    /// applications' credentials).
    Save {
        #[command(flatten)]
        masters: MastersArg,
        /// Where to write it.
        file: PathBuf,
    },
}

/// Saves the snapshot; prints how many bytes.
///
/// # Errors
///
/// No master answered, or the file cannot be written.
pub fn run(command: SnapshotCommand) -> Result<String, CliError> {
    let SnapshotCommand::Save { masters, file } = command;
    let masters = masters.parse()?;
    let reply = runtime()?.block_on(masters.call(async |c| {
        c.max_decoding_message_size(MAX_MESSAGE_BYTES)
            .save_snapshot(SaveSnapshotRequest {})
            .await
    }))?;
    let cannot =
        |e: std::io::Error| CliError::Failed(format!("cannot write {}: {e}", file.display()));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&file)
        .map_err(cannot)?;
    out.write_all(&reply.snapshot).map_err(cannot)?;
    out.sync_all().map_err(cannot)?;
    Ok(format!(
        "{} bytes written to {}",
        reply.snapshot.len(),
        file.display()
    ))
}
