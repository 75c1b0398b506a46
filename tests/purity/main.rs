//! The pure crates stay pure: `muster-core`, `muster-state` and `muster-leader` decide
//! everything as functions of their input, which is what lets the simulator and the scripts
//! replay them exactly. None of them may depend, even through another crate, on an async
//! runtime, the network, the Raft library, the disk store, protobuf or randomness from outside,
//! and none of their code (tests apart) may read the clock or touch files, sockets or threads.

use std::path::Path;
use std::process::Command;

/// The crates held pure.
const PURE: [&str; 3] = ["muster-core", "muster-state", "muster-leader"];

/// Crates that do I/O, keep time or draw randomness of their own.
const FORBIDDEN: [&str; 13] = [
    "tokio",
    "mio",
    "tonic",
    "hyper",
    "h2",
    "axum",
    "prost",
    "sled",
    "openraft",
    "rand",
    "getrandom",
    "chrono",
    "tracing-subscriber",
];

/// What reads the clock or the machine from the standard library.
const FORBIDDEN_CALLS: [&str; 6] = [
    "Instant::now",
    "SystemTime::now",
    "std::fs",
    "std::net",
    "std::thread",
    "std::env",
];

fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The names of the crates `package` depends on to build, itself included.
fn normal_dependencies(package: &str) -> Vec<String> {
    let output = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--edges", "normal", "--prefix", "none"])
        .args(["--package", package])
        .current_dir(workspace())
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_pure_crates_depend_on_nothing_that_does_io_or_keeps_time() {
    for package in PURE {
        let dependencies = normal_dependencies(package);
        assert!(
            dependencies.iter().any(|d| d == package),
            "{dependencies:?}"
        );
        let impure: std::collections::BTreeSet<_> = dependencies
            .iter()
            .filter(|d| FORBIDDEN.contains(&d.as_str()))
            .collect();
        assert!(impure.is_empty(), "{package} depends on {impure:?}");
    }
}

/// The `.rs` files under `dir`.
fn sources(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

#[test]
fn the_pure_crates_code_reads_no_clock_and_touches_no_machine() {
    for package in PURE {
        let src = workspace()
            .join("crates")
            .join(package.trim_start_matches("muster-"))
            .join("src");
        let files = sources(&src);
        assert!(!files.is_empty(), "no sources under {}", src.display());
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            // A file's tests come last, after their `#[cfg(test)]`.
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for call in FORBIDDEN_CALLS {
                assert!(
                    !code.contains(call),
                    "{} uses {call}: time and the machine come in as input",
                    file.display()
                );
            }
        }
    }
}
