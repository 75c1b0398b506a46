//! `muster dev`: a whole cluster on this machine, as child processes of this command
//! ([`muster_bench::cluster`]), until Ctrl-C; a member that exits is reported and can be
//! started again.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use muster_bench::cluster::{LocalCluster, Shape};

use super::{runtime, this_program};
use crate::error::CliError;
use crate::output;

/// `muster dev`.
#[derive(Args)]
pub struct DevArgs {
    /// How many masters (an odd number: 1, 3 or 5).
    #[arg(long, default_value_t = 3)]
    masters: usize,
    /// How many workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Cores per worker.
    #[arg(long, default_value_t = 4)]
    cores: u32,
    /// Memory per worker, in MB.
    #[arg(long, default_value_t = 4096)]
    memory: u64,
    /// Where data and logs go; a new temporary directory by default.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The Spark plug-in jar for the drivers of Spark REST submissions; by default where
    /// `integrations/spark/build` puts it (~/.cache/muster/spark/muster-spark.jar).
    #[arg(long, value_name = "PATH")]
    spark_plugin: Option<PathBuf>,
    /// The worker runs Spark's external shuffle service from $SPARK_HOME, for applications
    /// that set spark.shuffle.service.enabled=true. Spark takes one per host: with one
    /// worker only.
    #[arg(long)]
    shuffle_service: bool,
}

/// Where `integrations/spark/build` puts the plug-in and the examples by default.
fn spark_build_dir() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(cache.join("muster/spark"))
}

/// What the banner says of Spark's REST submissions, whose drivers run the workers'
/// `$SPARK_HOME/bin/spark-submit` with `plugin`: the workers are this command's children,
/// so they have its `SPARK_HOME`, or none.
fn spark_lines(plugin: Option<&Path>, gateways: &[String]) -> Vec<String> {
    let mut lines = Vec::new();
    match std::env::var_os("SPARK_HOME") {
        Some(home) => lines.push(format!(
            "Spark REST submissions: drivers run {}/bin/spark-submit",
            home.display()
        )),
        None => lines.push(
            "Spark REST submissions: SPARK_HOME is not set here, so the workers have none and \
             submitted drivers fail; set it and start muster dev again"
                .to_owned(),
        ),
    }
    let Some(plugin) = plugin else {
        lines.push("the Spark plug-in: give --spark-plugin PATH (no HOME to look in)".to_owned());
        return lines;
    };
    if !plugin.exists() {
        lines.push(format!(
            "the Spark plug-in {} is not built yet: run integrations/spark/build",
            plugin.display()
        ));
    }
    let urls: Vec<String> = gateways.iter().map(|g| format!("{g}/$T")).collect();
    lines.push(format!(
        "T=$(muster rest-token); $SPARK_HOME/bin/spark-submit --master spark://{} \
         --deploy-mode cluster --conf spark.master.rest.enabled=true --class SquareSums {} 100000",
        urls.join(","),
        plugin.with_file_name("muster-spark-examples.jar").display()
    ));
    lines
}

/// Starts the cluster, prints how to reach it, and runs until Ctrl-C or SIGTERM, killing a
/// member when `kill leader` or `kill NAME` is typed on standard input and starting one again
/// on `restart NAME`.
pub fn run(args: DevArgs) -> Result<String, CliError> {
    if args.shuffle_service && std::env::var_os("SPARK_HOME").is_none() {
        return Err(CliError::BadInput(
            "--shuffle-service runs Spark's own service: set SPARK_HOME to a Spark".to_owned(),
        ));
    }
    if args.shuffle_service && args.workers > 1 {
        // Spark reads a same-host executor's shuffle files through the reader's own host's
        // service, which knows only its own worker's executors.
        return Err(CliError::BadInput(
            "--shuffle-service: Spark takes one shuffle service per host, and these workers \
             share one: use --workers 1"
                .to_owned(),
        ));
    }
    let runtime = runtime()?;
    let spark_plugin = args
        .spark_plugin
        .or_else(|| Some(spark_build_dir()?.join("muster-spark.jar")));
    let shape = Shape {
        program: this_program()?,
        masters: args.masters,
        workers: args.workers,
        cores: args.cores,
        memory: args.memory,
        data_dir: args.data_dir,
        master_args: spark_plugin
            .iter()
            .flat_map(|jar| ["--spark-plugin".to_owned(), jar.display().to_string()])
            .collect(),
        spark_rest: true,
        shuffle_service: args.shuffle_service,
    };
    let mut cluster = LocalCluster::start(shape, &runtime)?;
    let (dir, leader) = (cluster.dir.clone(), cluster.leader);
    output::line(format_args!(
        "muster dev: {} masters (leader {leader}), {} workers",
        args.masters, args.workers
    ));
    output::line(format_args!("data and logs: {}", dir.display()));
    output::line(format_args!("status pages: {}", cluster.pages.join(" ")));
    output::line(format_args!(
        "export MUSTER_MASTERS={}",
        cluster.masters_list
    ));
    output::line(format_args!(
        "export MUSTER_SECRET_FILE={}",
        cluster.secret_path
    ));
    output::line(format_args!("export MUSTER_TLS_CA={}", cluster.ca));
    for line in spark_lines(spark_plugin.as_deref(), &cluster.spark_rest) {
        output::line(line);
    }
    output::line(
        "Ctrl-C stops everything; type `kill leader` (or `kill NAME`) to kill a member, \
         `restart NAME` to start it again.",
    );

    let (typed, mut commands) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { return };
            if typed.send(line).is_err() {
                return;
            }
        }
    });
    // A child that dies is reported, not fatal: killing a master to watch the failover is
    // the point of a local cluster.
    let died = runtime.block_on(async {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        let mut check = tokio::time::interval(Duration::from_millis(500));
        let mut died = false;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return died,
                _ = terminate.recv() => return died,
                Some(line) = commands.recv() => {
                    let line = line.trim();
                    let answer = match line.split_whitespace().collect::<Vec<_>>()[..] {
                        [] => continue,
                        ["restart", name] => cluster.restart(name).map_err(CliError::from),
                        ["kill", name] => cluster.kill(name).await.map_err(CliError::from),
                        _ => Err(CliError::BadInput(format!("`{line}`: type `kill leader`, `kill NAME` or `restart NAME`, such as `restart master-1`"))),
                    };
                    match answer {
                        Ok(done) => {
                            output::line(done);
                        }
                        Err(error) => eprintln!("error: {error}"),
                    }
                }
                _ = check.tick() => {
                    for exited in cluster.exited() {
                        died = true;
                        output::line(format_args!(
                            "{} exited ({}); see {}; `restart {}` starts it again",
                            exited.name,
                            exited.status,
                            exited.log.display(),
                            exited.name
                        ));
                    }
                }
            }
        }
    });
    let started = Instant::now();
    if died {
        cluster.keep_dir();
    }
    drop(cluster);
    let kept = if died {
        format!(
            "; a member had exited, so its data and logs stay in {}",
            dir.display()
        )
    } else {
        String::new()
    };
    Ok(format!("stopped in {:?}{kept}", started.elapsed()))
}
