//! The previous release's `muster`, built from the repository's own history: the commit the
//! `RELEASES` file names, exported with `git archive` and built with cargo once, then kept in
//! `~/.cache/muster/releases/VERSION-COMMIT/muster` (or under `MUSTER_RELEASES_CACHE`), where
//! later runs find it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// A release: its version and the commit it was made from.
#[derive(Clone, Debug)]
pub struct Release {
    pub version: String,
    pub commit: String,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The releases `RELEASES` lists, oldest first.
pub fn releases() -> Vec<Release> {
    let path = workspace().join("RELEASES");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (version, commit) = line
                .split_once(' ')
                .unwrap_or_else(|| panic!("RELEASES: `{line}` is not VERSION COMMIT"));
            Release {
                version: version.to_owned(),
                commit: commit.trim().to_owned(),
            }
        })
        .collect()
}

/// The newest release other than the build under test's own version.
pub fn previous() -> Release {
    releases()
        .into_iter()
        .rev()
        .find(|release| release.version != env!("CARGO_PKG_VERSION"))
        .expect("RELEASES names a release before this one")
}

/// The `muster` binary of the previous release, built on first use.
pub fn previous_muster() -> &'static Path {
    static BUILT: OnceLock<(Release, PathBuf)> = OnceLock::new();
    &BUILT
        .get_or_init(|| {
            let release = previous();
            let binary = build(&release);
            (release, binary)
        })
        .1
}

fn cache() -> PathBuf {
    match std::env::var_os("MUSTER_RELEASES_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".cache/muster/releases"),
    }
}

/// Builds `release` unless its binary is in the cache already.
fn build(release: &Release) -> PathBuf {
    let short = &release.commit[..release.commit.len().min(12)];
    let dir = cache().join(format!("{}-{short}", release.version));
    let binary = dir.join("muster");
    if binary.exists() {
        return binary;
    }
    let source = dir.join("src");
    let _ = std::fs::remove_dir_all(&source);
    std::fs::create_dir_all(&source).unwrap();
    let archived = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "git -C '{}' archive --format=tar {} | tar -x -C '{}'",
            workspace().display(),
            release.commit,
            source.display()
        ))
        .stderr(Stdio::piped())
        .output()
        .expect("git and tar run");
    assert!(
        archived.status.success() && source.join("Cargo.toml").exists(),
        "release {} ({}) is not in this clone's history: fetch it (`git fetch --unshallow`) \
         and run again: {}",
        release.version,
        release.commit,
        String::from_utf8_lossy(&archived.stderr)
    );
    eprintln!(
        "building release {} from {} (once; kept in {})",
        release.version,
        release.commit,
        dir.display()
    );
    let target = dir.join("target");
    let built = Command::new(env!("CARGO"))
        .args(["build", "--locked", "--bin", "muster", "--target-dir"])
        .arg(&target)
        .current_dir(&source)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .expect("cargo runs");
    assert!(built.success(), "release {} did not build", release.version);
    std::fs::copy(target.join("debug/muster"), &binary).unwrap();
    // The binary is all later runs need.
    let _ = std::fs::remove_dir_all(&source);
    let _ = std::fs::remove_dir_all(&target);
    binary
}
