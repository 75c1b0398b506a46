//! The `muster` command: runs a master replica, talks to the masters, and runs the placement
//! core offline (`muster plan`).

mod app;
mod client;
mod cluster;
mod dev;
mod plan;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
        /// The snapshot file, or `-` for standard input.
        file: PathBuf,
    },
    /// Start a whole local cluster (masters and workers) and stop it on Ctrl-C.
    Dev(dev::DevArgs),
    /// Run a master replica.
    Master(cluster::MasterArgs),
    /// Run a worker: it launches the drivers and executors the leader places on it.
    Worker(cluster::WorkerArgs),
    /// Show the cluster: leader, members, workers, applications, drivers.
    Status(cluster::ReadArgs),
    /// Submit a driver; prints its id.
    Submit(cluster::SubmitArgs),
    /// Run an application: its executors run CMD; Ctrl-C finishes it.
    #[command(subcommand)]
    App(AppCommand),
    /// Kill an application or a driver.
    Kill(cluster::KillArgs),
    /// Show the queues, or replace them with `--set FILE`.
    Queues(cluster::QueuesArgs),
    /// Show the master replicas and their roles.
    Members(cluster::ReadArgs),
    /// Show the workers.
    Workers(cluster::ReadArgs),
    /// Show the applications and their executors.
    Apps(cluster::ReadArgs),
    /// Show the drivers, running and recently ended.
    Drivers(cluster::ReadArgs),
}

#[derive(Subcommand)]
enum AppCommand {
    /// Register an application and stay attached, printing executor events.
    Run(app::AppRunArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Plan { file } => plan::run(&file),
        Command::Dev(args) => dev::run(args),
        Command::Master(args) => cluster::master(args),
        Command::Worker(args) => cluster::worker(args),
        Command::Status(args) => cluster::status(args),
        Command::Submit(args) => cluster::submit(args),
        Command::App(AppCommand::Run(args)) => app::run(args),
        Command::Kill(args) => cluster::kill(args),
        Command::Queues(args) => cluster::queues(args),
        Command::Members(args) => cluster::members(args),
        Command::Workers(args) => cluster::workers(args),
        Command::Apps(args) => cluster::apps(args),
        Command::Drivers(args) => cluster::drivers(args),
    };
    match result {
        Ok(output) => {
            if !output.is_empty() {
                println!("{output}");
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}
