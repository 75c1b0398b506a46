//! The `muster` command: what it does is `muster-commands`; this binary adds the commit it
//! is built from (`MUSTER_COMMIT`, from `build.rs`), so that a commit rebuilds this file
//! alone.

fn main() -> std::process::ExitCode {
    muster_commands::main(env!("MUSTER_COMMIT"))
}
