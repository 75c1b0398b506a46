//! Which build this `muster` is: its release, and the commit it was built from.

use std::sync::{LazyLock, OnceLock};

use muster_proto::v1::BuildInfo;

/// The commit the binary was built from, as its `main` says; empty when built outside a git
/// checkout (or before it says).
static COMMIT: OnceLock<&'static str> = OnceLock::new();

/// Records the commit the binary was built from, once, before anything reads it.
pub(crate) fn set_commit(commit: &'static str) {
    let _ = COMMIT.set(commit);
}

fn commit() -> &'static str {
    COMMIT.get().copied().unwrap_or_default()
}

/// What `muster --version` prints after the name: `0.2.0 (commit 1a72777c4f0e)`.
pub fn version_line() -> &'static str {
    static LINE: LazyLock<String> = LazyLock::new(|| match commit() {
        "" => env!("CARGO_PKG_VERSION").to_owned(),
        commit => format!("{} (commit {commit})", env!("CARGO_PKG_VERSION")),
    });
    &LINE
}

/// The build a master says it runs: with the newest log format it reads.
pub fn master() -> BuildInfo {
    muster_raft::this_build(commit().to_owned())
}

/// The build a worker agent says it runs.
pub fn worker() -> BuildInfo {
    BuildInfo {
        log_format: 0,
        ..master()
    }
}
