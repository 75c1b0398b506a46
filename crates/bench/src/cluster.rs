//! A whole cluster on this machine, as child processes: masters and workers on free loopback
//! ports, with the cluster's secret and TLS on, their data and logs in one directory. What
//! `muster dev` runs, and what the experiment measures.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use muster_proto::auth::{Role, Secret};
use muster_proto::masters::Masters;
use muster_proto::transport::TlsFiles;
use muster_proto::v1::StatusRequest;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::BenchError;

/// How long masters just started may take to answer.
const MASTERS_START: Duration = Duration::from_secs(60);

/// A member of the cluster, stopped with SIGTERM when dropped.
struct Member {
    /// `master-1`, `worker-2`, ...
    name: String,
    /// Its command line, to start it again.
    args: Vec<String>,
    process: Child,
    /// Whether its exit has been reported.
    reported: bool,
}

impl Drop for Member {
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

/// A free loopback port (bound, read, released), never one this process was given before:
/// the kernel may hand a released port out again at once, and two clusters started side by
/// side (tests run in parallel) must not share one, or a process of one would reach the
/// other's.
///
/// # Errors
///
/// None is free.
pub fn free_port() -> Result<u16, BenchError> {
    Ok(loopback_listener()?.local_addr()?.port())
}

/// A listener on a loopback port this process was never given before, by this function or
/// [`free_port`]: a listener of the process's own (a test's proxy) must not take a port given
/// out for a process that has not bound it yet, or what is meant for that process reaches
/// the listener (a proxy given its own target's port forwards to itself without end).
///
/// # Errors
///
/// None is free.
pub fn loopback_listener() -> Result<TcpListener, BenchError> {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(PoisonError::into_inner);
    // Held until one is new, so that the kernel hands out others meanwhile.
    let mut refused = Vec::new();
    for _ in 0..1000 {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| BenchError::Failed(format!("no free port: {e}")))?;
        let port = listener.local_addr()?.port();
        if given.insert(port) {
            return Ok(listener);
        }
        refused.push(listener);
    }
    Err(BenchError::Failed(format!(
        "no free port that this process was not given already ({} given)",
        given.len()
    )))
}

/// `count` free loopback addresses for masters, and the `--peers` list naming them 1, 2, ...
///
/// # Errors
///
/// Not enough ports are free.
pub fn master_addresses(count: usize) -> Result<(Vec<String>, String), BenchError> {
    let addrs: Vec<String> = (0..count)
        .map(|_| free_port().map(|p| format!("127.0.0.1:{p}")))
        .collect::<Result<_, _>>()?;
    let peers = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}={a}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    Ok((addrs, peers))
}

/// Starts `PROGRAM ARGS` as `name`, its standard error appended to `DIR/NAME.log`.
fn spawn(program: &Path, name: &str, dir: &Path, args: Vec<String>) -> Result<Member, BenchError> {
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log_path(dir, name))?;
    let process = Command::new(program)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| BenchError::Failed(format!("cannot start {name}: {e}")))?;
    Ok(Member {
        name: name.to_owned(),
        args,
        process,
        reported: false,
    })
}

/// Where the member `name` writes its log.
fn log_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.log"))
}

/// The cluster's secret in `dir`, made on first use: 32 random bytes as hex, readable by
/// this user only.
fn dev_secret(dir: &Path) -> Result<PathBuf, BenchError> {
    let path = dir.join("secret");
    if !path.exists() {
        Secret::create(&path).map_err(|e| BenchError::Failed(e.to_string()))?;
    }
    Ok(path)
}

/// What a local cluster is made of.
pub struct Shape {
    /// The `muster` binary every member runs.
    pub program: PathBuf,
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
    /// Whether each worker runs Spark's shuffle service (from `SPARK_HOME`), on a free port
    /// (Spark takes one per host: one worker only).
    pub shuffle_service: bool,
}

/// A cluster of child processes on loopback ports, with the secret and TLS on: what `muster
/// dev` runs, and what experiments measure. Dropping it stops every process.
pub struct LocalCluster {
    /// The `muster` binary every member runs.
    pub program: PathBuf,
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
    members: Vec<Member>,
    /// The data dir, when it is a temporary one (removed when the cluster is dropped).
    temporary: Option<tempfile::TempDir>,
}

impl LocalCluster {
    /// Starts the masters, waits for a leader, then starts the workers.
    ///
    /// # Errors
    ///
    /// A bad shape, or a process that cannot start.
    pub fn start(shape: Shape, runtime: &tokio::runtime::Runtime) -> Result<Self, BenchError> {
        if shape.masters == 0 || shape.masters.is_multiple_of(2) {
            return Err(BenchError::BadInput(format!(
                "--masters {}: use an odd number, such as 3",
                shape.masters
            )));
        }
        let (dir, temporary) = match shape.data_dir {
            Some(dir) => (dir, None),
            None => {
                let temporary = tempfile::Builder::new().prefix("muster-dev-").tempdir()?;
                (temporary.path().to_owned(), Some(temporary))
            }
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| BenchError::Failed(format!("{}: {e}", dir.display())))?;
        let (addrs, peers) = master_addresses(shape.masters)?;
        let masters_list = addrs.join(",");
        let secret_file = dev_secret(&dir)?;
        let secret = Secret::read(&secret_file).map_err(|e| BenchError::Failed(e.to_string()))?;
        let secret_path = secret_file.display().to_string();
        let tls_dir = dir.join("tls");
        std::fs::create_dir_all(&tls_dir)?;
        let tls = TlsFiles::generate(&tls_dir, &["127.0.0.1", "localhost"])
            .map_err(|e| BenchError::Failed(e.to_string()))?;
        let [cert, key, ca] = [&tls.cert, &tls.key, &tls.ca]
            .map(|path| path.as_deref().expect("generated").display().to_string());

        let mut members = Vec::new();
        let mut pages = Vec::new();
        let mut spark_rest = Vec::new();
        for (i, addr) in addrs.iter().enumerate() {
            let id = (i + 1).to_string();
            let data = dir.join(format!("master-{id}")).display().to_string();
            let http = format!("127.0.0.1:{}", free_port()?);
            pages.push(format!("https://{http}/"));
            let gateway = match shape.spark_rest {
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
            master_args.extend(shape.master_args.iter().cloned());
            members.push(spawn(
                &shape.program,
                &format!("master-{id}"),
                &dir,
                master_args,
            )?);
        }
        let dialer = tls
            .dialer()
            .map_err(|e| BenchError::Failed(e.to_string()))?;
        let masters = Masters::parse(&masters_list, secret.credential(Role::Client), dialer)
            .map_err(|e| BenchError::Failed(e.to_string()))?;
        // Masters just started may not listen yet, and a call gives up early on those.
        let started = Instant::now();
        let status = loop {
            let asked = masters.call(async |mut c| c.status(StatusRequest::default()).await);
            match runtime.block_on(asked) {
                Err(status)
                    if status.code() == tonic::Code::Unavailable
                        && started.elapsed() < MASTERS_START =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                answer => break answer?,
            }
        };
        for i in 1..=shape.workers {
            let work = dir.join(format!("worker-{i}")).display().to_string();
            // A throw-away cluster: stopping it stops its work too.
            let worker_args = [
                "worker",
                "--stop-work-on-exit",
                "--masters",
                &masters_list,
                "--cores",
                &shape.cores.to_string(),
                "--memory",
                &shape.memory.to_string(),
                "--work-dir",
                &work,
                "--host",
                &format!("worker-{i}"),
                "--secret-file",
                &secret_path,
                "--tls-ca",
                &ca,
            ];
            let mut worker_args = worker_args.map(str::to_owned).to_vec();
            if shape.shuffle_service {
                worker_args.extend([
                    "--shuffle-service".to_owned(),
                    "--shuffle-service-port".to_owned(),
                    free_port()?.to_string(),
                ]);
            }
            members.push(spawn(
                &shape.program,
                &format!("worker-{i}"),
                &dir,
                worker_args,
            )?);
        }
        Ok(Self {
            program: shape.program,
            dir,
            masters,
            masters_list,
            secret_path,
            ca,
            pages,
            spark_rest,
            leader: status.leader,
            members,
            temporary,
        })
    }
}

/// The member `name` of `members`, or an error naming which there are.
fn member<'m>(members: &'m mut [Member], name: &str) -> Result<&'m mut Member, BenchError> {
    let names: Vec<String> = members.iter().map(|c| c.name.clone()).collect();
    members.iter_mut().find(|c| c.name == name).ok_or_else(|| {
        BenchError::BadInput(format!(
            "no member {name}: the members are {}",
            names.join(", ")
        ))
    })
}

/// `master-N` for `N`, else `name` as it is.
fn member_name(name: &str) -> String {
    match name.parse::<usize>() {
        Ok(id) => format!("master-{id}"),
        Err(_) => name.to_owned(),
    }
}

/// A member that exited.
pub struct Exited {
    /// `master-1`, `worker-2`, ...
    pub name: String,
    /// How it exited.
    pub status: ExitStatus,
    /// Its log.
    pub log: PathBuf,
}

impl LocalCluster {
    /// Starts the member `name` (`master-1`, or `1` for short; `worker-2`) again with its
    /// command line, once it has exited.
    ///
    /// # Errors
    ///
    /// No such member, it still runs, or it cannot start.
    pub fn restart(&mut self, name: &str) -> Result<String, BenchError> {
        let name = member_name(name);
        let member = member(&mut self.members, &name)?;
        if member.process.try_wait()?.is_none() {
            return Err(BenchError::Refused(format!("{name} is running")));
        }
        *member = spawn(&self.program, &name, &self.dir, member.args.clone())?;
        Ok(format!(
            "{name} started again (pid {})",
            member.process.id()
        ))
    }

    /// Kills the member `name` with SIGKILL, as a machine failing would end it: `leader` is
    /// the master that leads now, `master-1` (or `1` for short) and `worker-2` are members.
    ///
    /// # Errors
    ///
    /// No such member, it has exited already, or no master leads.
    pub async fn kill(&mut self, name: &str) -> Result<String, BenchError> {
        let name = match name {
            "leader" => {
                let status = self
                    .masters
                    .call(async |mut c| c.status(StatusRequest::default()).await)
                    .await?;
                if status.leader == 0 {
                    return Err(BenchError::Refused("no master leads now".to_owned()));
                }
                format!("master-{}", status.leader)
            }
            _ => member_name(name),
        };
        let member = member(&mut self.members, &name)?;
        if member.process.try_wait()?.is_some() {
            return Err(BenchError::Refused(format!("{name} has exited already")));
        }
        member.process.kill()?;
        Ok(format!("{name} killed (pid {})", member.process.id()))
    }

    /// The members that exited since the last call, with how and where their logs are; each
    /// is named once per exit.
    pub fn exited(&mut self) -> Vec<Exited> {
        let mut exited = Vec::new();
        for member in &mut self.members {
            if !member.reported
                && let Ok(Some(status)) = member.process.try_wait()
            {
                member.reported = true;
                exited.push(Exited {
                    name: member.name.clone(),
                    status,
                    log: log_path(&self.dir, &member.name),
                });
            }
        }
        exited
    }

    /// Keeps the data and logs after the cluster stops, when they are in a temporary
    /// directory (which is otherwise removed).
    pub fn keep_dir(&mut self) {
        if let Some(temporary) = self.temporary.take() {
            let _ = temporary.keep();
        }
    }
}
