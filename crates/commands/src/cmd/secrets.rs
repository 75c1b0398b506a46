//! `muster secrets DIR --host NAME ...`: what a new cluster's processes need to trust each
//! other: a secret (`DIR/secret`) and TLS files (`DIR/tls/`: a CA, and one certificate and
//! key for the masters, valid for the names given), each readable by its owner only where it
//! must be. The deploy files in `deploy/` read them from there.

use std::path::PathBuf;

use clap::Args;
use muster_proto::auth::Secret;
use muster_proto::transport::TlsFiles;

use crate::error::CliError;

/// `muster secrets`.
#[derive(Args)]
pub struct SecretsArgs {
    /// The directory to write them to (created if missing; existing files are refused).
    dir: PathBuf,
    /// A name the masters are reached by (host name or IP address); repeat for each.
    /// `localhost` and `127.0.0.1` are always included.
    #[arg(long = "host", value_name = "NAME")]
    hosts: Vec<String>,
}

/// Writes the secret and the TLS files; says where.
///
/// # Errors
///
/// A file exists already or cannot be written.
pub fn run(args: SecretsArgs) -> Result<String, CliError> {
    let failed = |e: &dyn std::fmt::Display| CliError::Failed(e.to_string());
    let tls_dir = args.dir.join("tls");
    if tls_dir.join("ca.pem").exists() {
        return Err(CliError::BadInput(format!(
            "{} holds TLS files already: remove them first",
            tls_dir.display()
        )));
    }
    std::fs::create_dir_all(&tls_dir).map_err(|e| failed(&e))?;
    let secret = args.dir.join("secret");
    Secret::create(&secret).map_err(|e| failed(&e))?;
    let mut names: Vec<&str> = vec!["localhost", "127.0.0.1"];
    names.extend(args.hosts.iter().map(String::as_str));
    TlsFiles::generate(&tls_dir, &names).map_err(|e| failed(&e))?;
    Ok(format!(
        "{}\n{}/{{ca,cert,key}}.pem for {}\nthe Spark REST gateway's token: muster rest-token --secret-file {0}; its key, as Spark's JWSFilter takes it: muster rest-token --key --secret-file {0}",
        secret.display(),
        tls_dir.display(),
        names.join(", ")
    ))
}
