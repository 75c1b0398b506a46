//! `muster rest-token`: the token of the Spark REST gateway (`muster master --spark-rest`)
//! for the credential of `--secret-file`: the cluster's own, or a named user's, whose
//! submissions are then theirs.

use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;
use muster_proto::auth::Role;
use muster_proto::rest_token;

use super::SecretArg;
use crate::error::CliError;

/// `muster rest-token`.
#[derive(Args)]
pub struct RestTokenArgs {
    #[command(flatten)]
    secret: SecretArg,
    /// Print the key the token is signed with instead (base64url, as Spark's `JWSFilter`
    /// takes it), for tools that sign their own tokens.
    #[arg(long, conflicts_with = "valid_for")]
    key: bool,
    /// Make the token expire this many seconds from now (its `exp` claim); unset, it is
    /// valid until the credential is revoked.
    #[arg(long, value_name = "SECONDS")]
    valid_for: Option<u64>,
}

/// The token, or its key.
///
/// # Errors
///
/// No secret file, or one that cannot be read.
pub fn run(args: RestTokenArgs) -> Result<String, CliError> {
    let credential = args.secret.credential(Role::Client)?;
    let Some(text) = credential.to_text() else {
        return Err(CliError::BadInput(
            "no credential to make a token of: give --secret-file (or MUSTER_SECRET_FILE), the \
             cluster's secret or a named user's credential file"
                .to_owned(),
        ));
    };
    if args.key {
        return Ok(rest_token::encoded_key(&text));
    }
    let expires_at = args.valid_for.map(|seconds| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        now.saturating_add(seconds)
    });
    Ok(rest_token::token(&text, expires_at))
}
