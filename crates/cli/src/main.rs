//! The `muster` command. For now it runs the placement core offline (`muster plan`); the
//! cluster commands join it as the master and worker land.

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
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Plan { file } => plan::run(&file),
    };
    match result {
        Ok(output) => {
            println!("{output}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}
