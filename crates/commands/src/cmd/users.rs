//! `muster users`: the named users, and `muster users add NAME --out FILE` (a new user and
//! their credential file) and `muster users revoke NAME`, for admins.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use muster_proto::v1::{AddUserRequest, RevokeUserRequest};

use super::status::{self, ReadArgs};
use super::{MastersArg, runtime};
use crate::error::CliError;
use crate::render;
use muster_proto::masters::request_id;

/// `muster users`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct UsersArgs {
    #[command(subcommand)]
    action: Option<UsersAction>,
    #[command(flatten)]
    read: ReadArgs,
}

#[derive(Subcommand)]
enum UsersAction {
    /// Add a user (or add a revoked one again) and write their credential file, which they
    /// give as --secret-file (MUSTER_SECRET_FILE).
    Add {
        #[command(flatten)]
        masters: MastersArg,
        /// Their name: letters, digits, `.`, `_` or `-`.
        name: String,
        /// They may do anything the cluster's own credential may.
        #[arg(long)]
        admin: bool,
        /// Where to write their credential (a new file, readable by its owner only).
        #[arg(long)]
        out: PathBuf,
    },
    /// Revoke a user's credential: every master refuses it from now on.
    Revoke {
        #[command(flatten)]
        masters: MastersArg,
        /// Their name.
        name: String,
    },
}

/// Shows the users, or adds or revokes one and says so.
///
/// # Errors
///
/// An existing `--out` file, a refusal (not an admin, a malformed or existing name), or no
/// master answered.
pub fn run(args: UsersArgs) -> Result<String, CliError> {
    match args.action {
        None => status::part(args.read, "users", render::users),
        Some(UsersAction::Add {
            masters,
            name,
            admin,
            out,
        }) => {
            // The file is made first, so that a credential is never issued with nowhere to go.
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&out)
                .map_err(|e| CliError::BadInput(format!("--out {}: {e}", out.display())))?;
            let request = AddUserRequest {
                request_id: request_id(),
                name,
                admin,
            };
            let masters = masters.parse()?;
            let added =
                runtime()?.block_on(masters.call(async |mut c| c.add_user(request.clone()).await));
            let reply = match added {
                Ok(reply) => reply,
                Err(error) => {
                    let _ = std::fs::remove_file(&out);
                    return Err(error.into());
                }
            };
            writeln!(file, "{}", reply.credential)
                .map_err(|e| CliError::Failed(format!("{}: {e}", out.display())))?;
            let role = if admin { "admin" } else { "user" };
            Ok(format!(
                "{} added ({role}): their credential is in {}",
                request.name,
                out.display()
            ))
        }
        Some(UsersAction::Revoke { masters, name }) => {
            let request = RevokeUserRequest {
                request_id: request_id(),
                name,
            };
            let masters = masters.parse()?;
            runtime()?
                .block_on(masters.call(async |mut c| c.revoke_user(request.clone()).await))?;
            Ok(format!(
                "{} revoked: every master refuses their credential",
                request.name
            ))
        }
    }
}
