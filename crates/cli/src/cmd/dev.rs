//! `muster dev`: a whole cluster on this machine, as child processes of this command:
//! masters and workers on free loopback ports, their data and logs in one directory.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use muster_proto::v1::StatusRequest;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::runtime;
use muster_proto::auth::{Role, Secret};
use muster_proto::transport::TlsFiles;

use crate::error::CliError;
use crate::output;
use muster_proto::masters::Masters;

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
    /// The Spark plug-in jar (`integrations/spark/build` prints it) for the drivers of
    /// Spark REST submissions; unset, it must lie in $SPARK_HOME/jars.
    #[arg(long, value_name = "PATH")]
    spark_plugin: Option<String>,
}

/// A child of `muster dev`, stopped with SIGTERM when dropped.
struct DevChild {
    /// `master-1`, `worker-2`, ...
    name: String,
    /// Its command line, to start it again.
    args: Vec<String>,
    process: Child,
    /// Whether its exit has been reported.
    reported: bool,
}

impl Drop for DevChild {
    fn drop(&mut self) {
        stop(&mut self.process, &self.name);
    }
}

/// Stops `process` (called `name` in what is printed): SIGTERM, then SIGKILL if it has not
/// exited within a few seconds; nothing if it has exited already (its pid may belong to
/// another process by now).
pub(crate) fn stop(process: &mut Child, name: &str) {
    if let Ok(Some(_)) = process.try_wait() {
        return;
    }
    let _ = kill(Pid::from_raw(process.id() as i32), Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = process.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("{name} did not stop on SIGTERM; killing it");
    let _ = process.kill();
    let _ = process.wait();
}

fn free_port() -> Result<u16, CliError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| CliError::Failed(format!("no free port: {e}")))?;
    Ok(listener.local_addr()?.port())
}

/// Starts `muster ARGS` as `name`, its standard error appended to `DIR/NAME.log`.
fn spawn(name: &str, dir: &Path, args: Vec<String>) -> Result<DevChild, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Failed(format!("cannot find the muster binary: {e}")))?;
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log_path(dir, name))?;
    let process = Command::new(exe)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| CliError::Failed(format!("cannot start {name}: {e}")))?;
    Ok(DevChild {
        name: name.to_owned(),
        args,
        process,
        reported: false,
    })
}

fn log_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.log"))
}

/// The cluster's secret in `dir`, made on first use: 32 random bytes as hex, readable by
/// this user only.
fn dev_secret(dir: &Path) -> Result<PathBuf, CliError> {
    let path = dir.join("secret");
    if !path.exists() {
        Secret::create(&path).map_err(|e| CliError::Failed(e.to_string()))?;
    }
    Ok(path)
}

/// What a local cluster is made of.
pub struct Shape {
    /// How many masters (odd).
    pub masters: usize,
    /// How many workers, `worker-1`, `worker-2`, ...
    pub workers: usize,
    /// Cores per worker.
    pub cores: u32,
    /// Memory per worker, in MB.
    pub memory: u64,
    /// Where data and logs go; a new temporary directory when unset.
    pub data_dir: Option<PathBuf>,
    /// More arguments for every master (`--config FILE`, ...).
    pub master_args: Vec<String>,
    /// Whether each master serves Spark's REST submission protocol (`--spark-rest`).
    pub spark_rest: bool,
}

/// A cluster of child processes on loopback ports, with the secret and TLS on: what `muster
/// dev` runs, and what experiments measure. Dropping it stops every process.
pub struct LocalCluster {
    /// Data and logs.
    pub dir: PathBuf,
    /// The masters, called as a client.
    pub masters: Masters,
    /// `HOST:PORT,...`.
    pub masters_list: String,
    /// The secret file.
    pub secret_path: String,
    /// The CA file.
    pub ca: String,
    /// The masters' status pages.
    pub pages: Vec<String>,
    /// The masters' Spark REST gateways, `HOST:PORT`.
    pub spark_rest: Vec<String>,
    /// The first leader.
    pub leader: u64,
    children: Vec<DevChild>,
    /// The data dir, when it is a temporary one (removed when the cluster is dropped).
    temporary: Option<tempfile::TempDir>,
}

impl LocalCluster {
    /// Starts the masters, waits for a leader, then starts the workers.
    ///
    /// # Errors
    ///
    /// A bad shape, or a process that cannot start.
    pub fn start(shape: Shape, runtime: &tokio::runtime::Runtime) -> Result<Self, CliError> {
        let args = shape;
        if args.masters == 0 || args.masters.is_multiple_of(2) {
            return Err(CliError::BadInput(format!(
                "--masters {}: use an odd number, such as 3",
                args.masters
            )));
        }
        let (dir, temporary) = match args.data_dir {
            Some(dir) => (dir, None),
            None => {
                let temporary = tempfile::Builder::new().prefix("muster-dev-").tempdir()?;
                (temporary.path().to_owned(), Some(temporary))
            }
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| CliError::Failed(format!("{}: {e}", dir.display())))?;
        let addrs: Vec<String> = (0..args.masters)
            .map(|_| free_port().map(|p| format!("127.0.0.1:{p}")))
            .collect::<Result<_, _>>()?;
        let peers = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let masters_list = addrs.join(",");
        let secret_file = dev_secret(&dir)?;
        let secret = Secret::read(&secret_file).map_err(|e| CliError::Failed(e.to_string()))?;
        let secret_path = secret_file.display().to_string();
        let tls_dir = dir.join("tls");
        std::fs::create_dir_all(&tls_dir)?;
        let tls = TlsFiles::generate(&tls_dir, &["127.0.0.1", "localhost"])
            .map_err(|e| CliError::Failed(e.to_string()))?;
        let [cert, key, ca] = [&tls.cert, &tls.key, &tls.ca]
            .map(|path| path.as_deref().expect("generated").display().to_string());

        let mut children = Vec::new();
        let mut pages = Vec::new();
        let mut spark_rest = Vec::new();
        for (i, addr) in addrs.iter().enumerate() {
            let id = (i + 1).to_string();
            let data = dir.join(format!("master-{id}")).display().to_string();
            let http = format!("127.0.0.1:{}", free_port()?);
            pages.push(format!("https://{http}/"));
            let gateway = match args.spark_rest {
                true => Some(format!("127.0.0.1:{}", free_port()?)),
                false => None,
            };
            spark_rest.extend(gateway.clone());
            let master_args = [
                "master",
                "--id",
                &id,
                "--listen",
                addr,
                "--peers",
                &peers,
                "--data-dir",
                &data,
                "--http",
                &http,
                "--secret-file",
                &secret_path,
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--tls-ca",
                &ca,
            ];
            let mut master_args: Vec<String> = master_args.map(str::to_owned).to_vec();
            master_args.extend(
                gateway
                    .iter()
                    .flat_map(|g| ["--spark-rest".to_owned(), g.clone()]),
            );
            master_args.extend(args.master_args.iter().cloned());
            children.push(spawn(&format!("master-{id}"), &dir, master_args)?);
        }
        let dialer = tls.dialer().map_err(|e| CliError::Failed(e.to_string()))?;
        let masters = Masters::parse(&masters_list, secret.credential(Role::Client), dialer)?;
        let status = runtime
            .block_on(masters.call(async |mut c| c.status(StatusRequest { local: false }).await))?;
        for i in 1..=args.workers {
            let work = dir.join(format!("worker-{i}")).display().to_string();
            let worker_args = [
                "worker",
                "--masters",
                &masters_list,
                "--cores",
                &args.cores.to_string(),
                "--memory",
                &args.memory.to_string(),
                "--work-dir",
                &work,
                "--host",
                &format!("worker-{i}"),
                "--secret-file",
                &secret_path,
                "--tls-ca",
                &ca,
            ];
            children.push(spawn(
                &format!("worker-{i}"),
                &dir,
                worker_args.map(str::to_owned).to_vec(),
            )?);
        }
        Ok(Self {
            dir,
            masters,
            masters_list,
            secret_path,
            ca,
            pages,
            spark_rest,
            leader: status.leader,
            children,
            temporary,
        })
    }
}

impl LocalCluster {
    /// Starts the member `name` (`master-1`, or `1` for short; `worker-2`) again with its
    /// command line, once it has exited.
    ///
    /// # Errors
    ///
    /// No such member, it still runs, or it cannot start.
    pub fn restart(&mut self, name: &str) -> Result<String, CliError> {
        let name = match name.parse::<usize>() {
            Ok(id) => format!("master-{id}"),
            Err(_) => name.to_owned(),
        };
        let Some(child) = self.children.iter_mut().find(|c| c.name == name) else {
            let names: Vec<&str> = self.children.iter().map(|c| c.name.as_str()).collect();
            return Err(CliError::BadInput(format!(
                "no member {name}: the members are {}",
                names.join(", ")
            )));
        };
        if child.process.try_wait()?.is_none() {
            return Err(CliError::Refused(format!("{name} is running")));
        }
        *child = spawn(&name, &self.dir, child.args.clone())?;
        Ok(format!("{name} started again (pid {})", child.process.id()))
    }

    /// Keeps the data and logs after the cluster stops, when they are in a temporary
    /// directory (which is otherwise removed).
    pub fn keep_dir(&mut self) {
        if let Some(temporary) = self.temporary.take() {
            let _ = temporary.keep();
        }
    }
}

/// Starts the cluster, prints how to reach it, and runs until Ctrl-C or SIGTERM, starting a
/// member again when `restart NAME` is typed on standard input.
pub fn run(args: DevArgs) -> Result<String, CliError> {
    let runtime = runtime()?;
    let shape = Shape {
        masters: args.masters,
        workers: args.workers,
        cores: args.cores,
        memory: args.memory,
        data_dir: args.data_dir,
        master_args: args
            .spark_plugin
            .iter()
            .flat_map(|jar| ["--spark-plugin".to_owned(), jar.clone()])
            .collect(),
        spark_rest: true,
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
    let urls: Vec<String> = cluster
        .spark_rest
        .iter()
        .map(|gateway| format!("{gateway}/$T"))
        .collect();
    output::line(format_args!(
        "Spark in cluster mode (workers use $SPARK_HOME): T=$(muster rest-token); \
         $SPARK_HOME/bin/spark-submit --master spark://{} --deploy-mode cluster \
         --conf spark.master.rest.enabled=true --class CLASS APP.jar",
        urls.join(",")
    ));
    output::line("Ctrl-C stops everything; `restart NAME` starts a stopped member again.");

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
                        ["restart", name] => cluster.restart(name),
                        _ => Err(CliError::BadInput(format!("`{line}`: type `restart NAME`, such as `restart master-1`"))),
                    };
                    match answer {
                        Ok(done) => {
                            output::line(done);
                        }
                        Err(error) => eprintln!("error: {error}"),
                    }
                }
                _ = check.tick() => {
                    for child in &mut cluster.children {
                        if !child.reported
                            && let Ok(Some(status)) = child.process.try_wait()
                        {
                            died = true;
                            child.reported = true;
                            output::line(format_args!(
                                "{} exited ({status}); see {}; `restart {}` starts it again",
                                child.name,
                                log_path(&dir, &child.name).display(),
                                child.name
                            ));
                        }
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
