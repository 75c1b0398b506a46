//! What the `muster` command does: runs masters, workers and a whole local cluster, talks
//! to the masters, and runs the placement core offline (`muster plan`). The binary
//! (`muster-cli`) is only [`main`] with the commit it is built from, so that a commit
//! rebuilds that alone.
//!
//! # Layout
//!
//! * `cmd`: one module per subcommand, with its arguments; calls go to whichever master
//!   answers ([`muster_proto::masters`]), measurements to [`muster_bench`].
//! * `render`: the tables client commands print.
//! * `output`: printing, and ending quietly once the reader has gone.
//! * `error`: the one error type and its exit codes.
//! * `reference`: the book's references (commands, files, metrics, gRPC API), checked
//!   against the code.

mod build;
mod cmd;
mod error;
mod output;
#[cfg(test)]
mod reference;
mod render;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use cmd::{
    app, apps, bench, dev, executor, experiment, job, kill, logs, master, members, plan, queues,
    rest_token, secrets, simulate, snapshot, status, submit, users, worker, workers,
};

#[derive(Parser)]
#[command(
    name = "muster",
    version,
    about = "A highly available cluster manager for Spark-style work"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one scheduling pass over a JSON cluster snapshot and print the plan as JSON.
    Plan {
        /// The pass's input as JSON, or a `muster snapshot save` file; `-` for standard
        /// input.
        file: PathBuf,
        /// Print the pass's input (JSON, as `muster plan` reads it) instead of the plan.
        #[arg(long)]
        input: bool,
    },
    /// Start a whole local cluster (masters and workers) and stop it on Ctrl-C.
    ///
    /// Typed on its standard input, `kill leader` (or `kill master-2`, `kill worker-1`) kills
    /// a member with SIGKILL, and `restart NAME` starts it again with its data.
    Dev(dev::DevArgs),
    /// Run a master replica.
    Master(master::MasterArgs),
    /// Run a worker: it launches the drivers and executors the leader places on it.
    Worker(worker::WorkerArgs),
    /// Show the cluster: leader, members, workers, applications, drivers.
    Status(status::ReadArgs),
    /// Submit a driver; prints its id.
    Submit(submit::SubmitArgs),
    /// Run an application: its executors run CMD; Ctrl-C finishes it.
    #[command(subcommand)]
    App(AppCommand),
    /// Run a job file's jobs: this process is the driver.
    #[command(subcommand)]
    Job(JobCommand),
    /// An application's executor, as workers start it for `muster job run`.
    #[command(hide = true)]
    Executor,
    /// Run a trace through Muster's own scheduling code in virtual time, on simulated
    /// workers; `muster simulate generate` writes built-in workloads.
    Simulate(simulate::SimulateArgs),
    /// Reproduce an experiment on a local cluster of its own.
    #[command(subcommand)]
    Experiment(ExperimentCommand),
    /// Kill an application or a driver.
    Kill(kill::KillArgs),
    /// Print what a driver or an executor wrote (`--stderr`, `--follow`).
    Logs(logs::LogsArgs),
    /// Show the queues, or replace them with `--set FILE`.
    Queues(queues::QueuesArgs),
    /// Show the master replicas and their roles, add or remove one, or move the lead.
    Members(members::MembersArgs),
    /// Show the workers, or drain one (`muster workers drain ID`).
    Workers(workers::WorkersArgs),
    /// Show the named users, or add (`--out FILE` gets their credential) or revoke one.
    Users(users::UsersArgs),
    /// Show the applications and their executors, then the ended ones the masters retain,
    /// or set one's priority (`muster apps priority ID N`).
    Apps(apps::AppsArgs),
    /// Show the drivers, running and recently ended.
    Drivers(status::DriversArgs),
    /// Put load on a running cluster and measure it.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Write a new cluster's secret and TLS files.
    Secrets(secrets::SecretsArgs),
    /// Print the token of the Spark REST gateway for --secret-file's credential.
    RestToken(rest_token::RestTokenArgs),
    /// Save the cluster's state for disaster recovery (`muster master --restore`).
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
    /// Print a completion script for a shell, e.g. `muster completions bash >
    /// /etc/bash_completion.d/muster`.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand)]
enum AppCommand {
    /// Register an application and stay attached, printing executor events.
    Run(app::AppRunArgs),
}

#[derive(Subcommand)]
enum ExperimentCommand {
    /// The YARN high-priority paper's experiment: prior jobs under full ordinary load.
    Priority(experiment::PriorityArgs),
}

#[derive(Subcommand)]
enum JobCommand {
    /// Run the jobs of a job file (TOML) as an application whose driver is this process.
    Run(job::JobRunArgs),
}

/// Runs `muster` with the process's arguments, as the build from `commit` (empty outside a
/// git checkout), and says how it ended.
pub fn main(commit: &'static str) -> ExitCode {
    build::set_commit(commit);
    let matches = Cli::command()
        .version(build::version_line())
        .get_matches_from(connection_flags_after_command(std::env::args_os()));
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    let result = match cli.command {
        Command::Plan { file, input } => plan::run(&file, input),
        Command::Dev(args) => dev::run(args),
        Command::Master(args) => master::run(args),
        Command::Worker(args) => worker::run(args),
        Command::Status(args) => status::run(args),
        Command::Submit(args) => submit::run(args),
        Command::App(AppCommand::Run(args)) => app::run(args),
        Command::Job(JobCommand::Run(args)) => job::run(args),
        Command::Executor => executor::run(),
        Command::Experiment(ExperimentCommand::Priority(args)) => experiment::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Kill(args) => kill::run(args),
        Command::Logs(args) => logs::run(args),
        Command::Queues(args) => queues::run(args),
        Command::Members(args) => members::run(args),
        Command::Workers(args) => workers::run(args),
        Command::Users(args) => users::run(args),
        Command::Apps(args) => apps::run(args),
        Command::Drivers(args) => status::drivers(args),
        Command::Bench(command) => bench::run(command),
        Command::Snapshot(command) => snapshot::run(command),
        Command::Secrets(args) => secrets::run(args),
        Command::RestToken(args) => rest_token::run(args),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "muster", &mut script);
            Ok(String::from_utf8_lossy(&script).trim_end().to_owned())
        }
    };
    match result {
        Ok(output) => {
            if !output.is_empty() {
                output::line(output);
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

/// Flags that say how to reach the cluster, which every command calling the masters takes.
const CONNECTION_FLAGS: [&str; 3] = ["--masters", "--secret-file", "--tls-ca"];

/// The arguments with connection flags given before the subcommand (`muster --masters LIST
/// --secret-file FILE status`) moved after it, where every command that calls the masters
/// takes them: before a `--` that starts a program's own arguments, or at the end.
fn connection_flags_after_command(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let mut moved = Vec::new();
    let mut i = 1;
    while i < args.len() {
        let arg = args[i].to_string_lossy();
        let flag = arg.split_once('=').map_or(&*arg, |(flag, _)| flag);
        if !CONNECTION_FLAGS.contains(&flag) {
            if !arg.starts_with('-') {
                break;
            }
            i += 1;
        } else if arg.contains('=') {
            moved.push(args.remove(i));
        } else if i + 1 < args.len() {
            moved.extend(args.drain(i..i + 2));
        } else {
            i += 1;
        }
    }
    if !moved.is_empty() {
        let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
        args.splice(at..at, moved);
    }
    args
}

#[cfg(test)]
mod tests {
    use super::connection_flags_after_command;

    fn moved(args: &str) -> String {
        let args = args.split(' ').map(Into::into);
        let out: Vec<String> = connection_flags_after_command(args)
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        out.join(" ")
    }

    #[test]
    fn connection_flags_before_the_command_move_after_it() {
        assert_eq!(
            moved("muster --masters a:1 status --json"),
            "muster status --json --masters a:1"
        );
        assert_eq!(
            moved("muster --masters=a:1 workers drain w1"),
            "muster workers drain w1 --masters=a:1"
        );
        assert_eq!(
            moved("muster --masters a:1 submit --cores 2 -- /bin/echo --masters x"),
            "muster submit --cores 2 --masters a:1 -- /bin/echo --masters x"
        );
        assert_eq!(
            moved("muster --secret-file s --tls-ca=c.pem --masters a:1 apps"),
            "muster apps --secret-file s --tls-ca=c.pem --masters a:1"
        );
        // After the command, or absent, nothing moves.
        assert_eq!(
            moved("muster status --masters a:1"),
            "muster status --masters a:1"
        );
        assert_eq!(moved("muster --help"), "muster --help");
        assert_eq!(moved("muster --masters"), "muster --masters");
    }
}
