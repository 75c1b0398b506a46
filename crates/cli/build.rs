//! Records the commit this `muster` is built from, for `muster --version` and for the build
//! each master and worker tells the others: `MUSTER_COMMIT`, empty outside a git checkout.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_default();
    println!("cargo:rustc-env=MUSTER_COMMIT={commit}");
    // Built again when HEAD moves: a commit, a checkout, or a branch's ref moving. Only
    // files that exist are named: cargo takes a missing one as changed, and would run this
    // script again on every build (git writes `packed-refs` only on some operations).
    for path in ["HEAD", "refs/heads", "packed-refs"] {
        if let Some(file) = git(&["rev-parse", "--git-path", path])
            && std::path::Path::new(&file).exists()
        {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
