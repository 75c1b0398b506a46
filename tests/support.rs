//! Real `muster` processes on loopback ports: masters, workers and client commands, each
//! process killed when its handle drops, data in a temporary directory.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const DEADLINE: Duration = Duration::from_secs(30);

/// The `muster` under test.
pub fn muster_binary() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_muster"))
}

/// `muster`, with the test clusters' secret and TLS files: every master, worker and client a
/// test starts runs with authentication and TLS on.
pub fn muster() -> Command {
    muster_from(&muster_binary())
}

/// [`muster`] from `program`, another build of it (an earlier release).
pub fn muster_from(program: &std::path::Path) -> Command {
    let mut command = Command::new(program);
    with_test_cluster_files(&mut command);
    command
}

/// `command` with the test clusters' secret and TLS files in its environment
/// (`MUSTER_SECRET_FILE`, `MUSTER_TLS_*`), as every `muster` process a test starts has them.
/// Its workers stop their work when they stop (`MUSTER_STOP_WORK_ON_EXIT`), so that a test
/// leaves no process behind; the tests of agent restarts take that out.
pub fn with_test_cluster_files(command: &mut Command) -> &mut Command {
    let tls = tls_files();
    command
        .env("MUSTER_STOP_WORK_ON_EXIT", "true")
        .env("MUSTER_SECRET_FILE", secret_file())
        .env("MUSTER_TLS_CERT", tls.cert.as_deref().expect("generated"))
        .env("MUSTER_TLS_KEY", tls.key.as_deref().expect("generated"))
        .env("MUSTER_TLS_CA", tls.ca.as_deref().expect("generated"))
}

/// `command` without the test clusters' secret and TLS files, for a cluster started plain.
pub fn without_security(command: &mut Command) -> &mut Command {
    for key in [
        "MUSTER_SECRET_FILE",
        "MUSTER_TLS_CERT",
        "MUSTER_TLS_KEY",
        "MUSTER_TLS_CA",
    ] {
        command.env_remove(key);
    }
    command
}

/// A throw-away CA and a certificate for 127.0.0.1 that every test master serves, made once
/// per test process.
pub fn tls_files() -> &'static muster_proto::transport::TlsFiles {
    static TLS: std::sync::OnceLock<(tempfile::TempDir, muster_proto::transport::TlsFiles)> =
        std::sync::OnceLock::new();
    &TLS.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("muster-test-tls")
            .tempdir()
            .unwrap();
        let files =
            muster_proto::transport::TlsFiles::generate(dir.path(), &["127.0.0.1", "localhost"])
                .unwrap();
        (dir, files)
    })
    .1
}

/// A valid submission of a one-core, 1 MB driver running `/bin/true`, for calls a test makes
/// itself.
pub fn driver_request() -> muster_proto::v1::SubmitDriverRequest {
    muster_proto::v1::SubmitDriverRequest {
        command: "/bin/true".into(),
        resources: Some(muster_proto::v1::Resources {
            cores: 1,
            memory_mb: 1,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// How a test connects to its masters itself: TLS against the test CA.
pub fn dialer() -> muster_proto::transport::Dialer {
    tls_files().dialer().expect("the test CA")
}

/// The secret every test cluster shares, written once per test process, readable by its
/// owner only.
pub fn secret_file() -> &'static std::path::Path {
    static SECRET: std::sync::OnceLock<(tempfile::TempDir, std::path::PathBuf)> =
        std::sync::OnceLock::new();
    &SECRET
        .get_or_init(|| {
            let dir = tempfile::Builder::new()
                .prefix("muster-test-secret")
                .tempdir()
                .unwrap();
            let path = dir.path().join("secret");
            muster_proto::auth::Secret::create(&path).unwrap();
            (dir, path)
        })
        .1
}

/// The test clusters' credential for `role`, for calls a test makes itself.
pub fn credential(role: muster_proto::auth::Role) -> muster_proto::auth::Credential {
    muster_proto::auth::Secret::read(secret_file())
        .expect("the test secret")
        .credential(role)
}

/// `GET path` from the plain HTTP/1.1 server at `addr` (`host:port`): the whole response,
/// status line and headers included.
pub fn plain_http_get(addr: &str, path: &str) -> String {
    plain_http(addr, "GET", path, &[], "")
}

/// `METHOD path` with `headers` (`Name: value` lines) and `body` to the plain HTTP/1.1
/// server at `addr`: the whole response, status line and headers included.
pub fn plain_http(addr: &str, method: &str, path: &str, headers: &[&str], body: &str) -> String {
    let mut stream =
        TcpStream::connect(addr).unwrap_or_else(|e| panic!("nothing serves HTTP at {addr}: {e}"));
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// `GET path` over HTTPS from the master's status endpoint at `addr` (the test CA), with
/// `headers` (`Name: value`): the status line and headers, and the body; `None` if it could
/// not be had.
pub fn https_request(addr: &str, path: &str, headers: &[&str]) -> Option<(String, String)> {
    https_exchange(addr, "GET", path, headers, "")
}

/// `POST path` of the form `form` (`name=value&...`, URL-encoded) over HTTPS, as
/// [`https_request`].
pub fn https_post(
    addr: &str,
    path: &str,
    headers: &[&str],
    form: &str,
) -> Option<(String, String)> {
    let length = format!("Content-Length: {}", form.len());
    let headers: Vec<&str> = headers
        .iter()
        .copied()
        .chain(["Content-Type: application/x-www-form-urlencoded", &length])
        .collect();
    https_exchange(addr, "POST", path, &headers, form)
}

/// `method path` with `headers` and `body` over HTTPS, as [`https_request`].
fn https_exchange(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> Option<(String, String)> {
    use std::io::{Read, Write};
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    use tokio_rustls::rustls::{ClientConfig, ClientConnection, RootCertStore, Stream};

    let ca = tls_files().ca.as_deref()?;
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(ca).ok()?).ok()?;
    let config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let host = ServerName::try_from(addr.rsplit_once(':')?.0.to_owned()).ok()?;
    let mut connection = ClientConnection::new(std::sync::Arc::new(config), host).ok()?;
    let mut socket = std::net::TcpStream::connect(addr).ok()?;
    let mut stream = Stream::new(&mut connection, &mut socket);
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}Connection: close\r\n\r\n{body}"
    )
    .ok()?;
    let mut response = Vec::new();
    // The server may close without a TLS close_notify: what arrived is the answer.
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8(response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    Some((head.to_owned(), body.to_owned()))
}

/// The body of a successful `GET path` over HTTPS (see [`https_request`]).
pub fn https_get(addr: &str, path: &str) -> Option<String> {
    let (head, body) = https_request(addr, path, &[])?;
    head.starts_with("HTTP/1.1 200").then_some(body)
}

/// A free loopback port (bound, read, released).
pub fn free_port() -> u16 {
    muster_bench::cluster::free_port().unwrap()
}

/// `count` free loopback addresses for masters, and the `--peers` list naming them 1, 2, ...
pub fn master_addresses(count: usize) -> (Vec<String>, String) {
    muster_bench::cluster::master_addresses(count).unwrap()
}

/// `muster master` as replica `id` listening on `listen`, in the group `peers` (`ID=ADDR,...`),
/// with its data in `data_dir`; more arguments may follow.
pub fn master_command(id: u64, listen: &str, peers: &str, data_dir: &std::path::Path) -> Command {
    master_command_from(&muster_binary(), id, listen, peers, data_dir)
}

/// [`master_command`] running `program`, another build of `muster`.
pub fn master_command_from(
    program: &std::path::Path,
    id: u64,
    listen: &str,
    peers: &str,
    data_dir: &std::path::Path,
) -> Command {
    let mut command = muster_from(program);
    command
        .args([
            "master",
            "--id",
            &id.to_string(),
            "--listen",
            listen,
            "--peers",
            peers,
        ])
        .arg("--data-dir")
        .arg(data_dir);
    command
}

/// [`master_command`] for a group of one.
pub fn lone_master_command(listen: &str, data_dir: &std::path::Path) -> Command {
    master_command(1, listen, &format!("1={listen}"), data_dir)
}

/// An application of one-core, 256 MB executors that sleep, as `muster app run` arguments
/// (add `--cores-max N` in front to bound it).
pub const SLEEPERS: &[&str] = &[
    "--executor-cores",
    "1",
    "--executor-memory",
    "256",
    "--",
    "/bin/sleep",
    "1000",
];

/// An application of two one-core executors that sleep, as `muster app run` arguments.
pub const TWO_SLEEPERS: &[&str] = &[
    "--cores-max",
    "2",
    "--executor-cores",
    "1",
    "--executor-memory",
    "256",
    "--",
    "/bin/sleep",
    "1000",
];

/// A child process, stopped when dropped.
pub struct Process(pub Child);

impl Process {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Freezes it (SIGSTOP), as a long pause or a stalled machine would; its children run on.
    pub fn freeze(&self) {
        signal(self.pid(), nix::sys::signal::Signal::SIGSTOP);
    }

    /// Lets a frozen process go on (SIGCONT).
    pub fn thaw(&self) {
        signal(self.pid(), nix::sys::signal::Signal::SIGCONT);
    }

    /// Waits, within [`DEADLINE`], until the process exits by itself; its exit status.
    pub fn exited(&mut self, what: &str) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(start.elapsed() < DEADLINE, "{what}: still running");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ends the process as a crash would: SIGKILL, nothing cleaned up.
    pub fn crash(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The repository's root.
pub fn repository_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The book's page at `page`, under `docs/src`.
pub fn book_page(page: &str) -> String {
    std::fs::read_to_string(repository_root().join("docs/src").join(page)).unwrap()
}

/// The text of the `n`th `sh` block of `markdown` (from 0).
pub fn sh_block(markdown: &str, n: usize) -> &str {
    markdown
        .split("```sh\n")
        .nth(n + 1)
        .and_then(|rest| rest.split("```").next())
        .unwrap_or_else(|| panic!("no sh block {n}"))
}

/// `muster dev` running, started as a reader starts it (none of the test clusters' files in
/// its environment, unless a test gives them): what it prints arrives line by line, what is
/// typed goes to it, and it is stopped with SIGTERM, as Ctrl-C stops it, when dropped.
pub struct Dev {
    /// The `muster dev` process.
    pub process: Process,
    typed: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    /// What it printed up to the line that says how to stop it.
    pub banner: Vec<String>,
}

impl Dev {
    /// `muster dev` with `args` and the extra environment `env`, once it has printed its
    /// banner.
    pub fn start(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Self {
        let mut child = Command::new(muster_binary())
            .arg("dev")
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("muster dev starts");
        let typed = child.stdin.take().unwrap();
        let printed = BufReader::new(child.stdout.take().unwrap());
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in printed.lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        let mut dev = Self {
            process: Process(child),
            typed,
            lines,
            banner: Vec::new(),
        };
        while !dev
            .banner
            .last()
            .is_some_and(|line| line.contains("Ctrl-C"))
        {
            let line = dev.next_line("its banner");
            dev.banner.push(line);
        }
        dev
    }

    /// The value its banner says to export as `name`.
    pub fn exported(&self, name: &str) -> &str {
        let prefix = format!("export {name}=");
        self.banner
            .iter()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.banner))
    }

    /// `command` as a reader's second terminal runs it: the exports made, the client's own
    /// TLS files unset, and this `muster` first on the `PATH`.
    pub fn second_terminal<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        let path = format!(
            "{}:{}",
            muster_binary().parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        for name in ["MUSTER_MASTERS", "MUSTER_SECRET_FILE", "MUSTER_TLS_CA"] {
            command.env(name, self.exported(name));
        }
        command
            .env_remove("MUSTER_TLS_CERT")
            .env_remove("MUSTER_TLS_KEY")
            .env("PATH", path)
    }

    /// The next line it prints, within [`DEADLINE`].
    pub fn next_line(&self, what: &str) -> String {
        self.next_line_by(Instant::now() + DEADLINE, what)
    }

    fn next_line_by(&self, deadline: Instant, what: &str) -> String {
        match self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(line) => line,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("muster dev did not print {what}")
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("muster dev exited before {what}")
            }
        }
    }

    /// The next line it prints that holds `text`, within [`DEADLINE`].
    pub fn line_with(&self, text: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let line = self.next_line_by(deadline, text);
            if line.contains(text) {
                return line;
            }
        }
    }

    /// Types `line` where it runs, and returns the first line it prints that holds `answer`.
    pub fn type_line(&mut self, line: &str, answer: &str) -> String {
        writeln!(self.typed, "{line}").unwrap();
        self.line_with(answer)
    }

    /// Stops it as Ctrl-C does (SIGTERM); its exit status and the last line it printed.
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        signal(self.process.pid(), nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + DEADLINE;
        let mut last = String::new();
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => last = line,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    panic!("muster dev's output did not end within {DEADLINE:?} of SIGTERM")
                }
            }
        }
        (self.process.exited("muster dev"), last)
    }
}

/// The processes whose command line holds `args`, one after another.
pub fn processes_with_args(args: &[&str]) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let given: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            given
                .windows(args.len())
                .any(|w| w.iter().zip(args).all(|(a, b)| *a == b.as_bytes()))
                .then_some(pid)
        })
        .collect()
}

/// Sends `signal` to process `pid`.
pub fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
        .unwrap_or_else(|e| panic!("cannot send {signal} to {pid}: {e}"));
}

impl Drop for Process {
    /// Stops the process as an operator would: SIGTERM (a worker stops its children), then
    /// SIGKILL if it lingers.
    fn drop(&mut self) {
        // A frozen process cannot stop.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGCONT,
        );
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A temporary directory for a cluster's data and logs; kept (and named on stderr) when
/// `MUSTER_TEST_KEEP` is set, to read the logs of a failed run.
fn test_dir() -> tempfile::TempDir {
    let keep = std::env::var_os("MUSTER_TEST_KEEP").is_some();
    let dir = tempfile::Builder::new()
        .prefix("muster-test")
        .disable_cleanup(keep)
        .tempdir()
        .unwrap();
    if keep {
        eprintln!("test data in {}", dir.path().display());
    }
    dir
}

pub struct Masters {
    pub addrs: Vec<String>,
    /// Each master's `--peers` list.
    pub peers: Vec<String>,
    pub running: Vec<Option<Process>>,
    pub dir: tempfile::TempDir,
    extra_args: Vec<String>,
    /// Without secret and TLS: the baseline the security benchmark compares against.
    plain: bool,
    /// Each master's Spark REST gateway (`--spark-rest`), if they serve one.
    pub spark_rest: Vec<String>,
}

/// How a test's masters run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavour {
    /// With the test secret and TLS.
    Secured,
    /// Without secret and TLS.
    Plain,
    /// Secured, each serving Spark's REST submission protocol too.
    SparkRest,
}

impl Masters {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Three masters, each started with `extra_args` as well.
    pub fn start_with(extra_args: &[&str]) -> Self {
        Self::start_as(extra_args, Flavour::Secured)
    }

    /// Three masters, none started yet: [`Masters::spawn_from`] starts each (with the
    /// secret and TLS) from the build of `muster` it is to run, into `running`.
    pub fn stopped() -> Self {
        let (addrs, peers) = master_addresses(3);
        let mut masters = Self::empty(addrs, vec![peers; 3], &[], Flavour::Secured);
        masters.running = vec![None, None, None];
        masters
    }

    /// Three masters without secret and TLS.
    pub fn start_plain() -> Self {
        Self::start_as(&[], Flavour::Plain)
    }

    /// Three masters, each serving Spark's REST submission protocol on a port of its own
    /// (`spark_rest`), started with `extra_args` as well.
    pub fn start_with_spark_rest(extra_args: &[&str]) -> Self {
        Self::start_as(extra_args, Flavour::SparkRest)
    }

    /// Three masters whose `--peers` lists name a proxy for each other master, as a user
    /// writes them for masters that reach each other through proxies; with the proxies,
    /// `proxies[&(from, to)]` the one in master `from`'s list for `to` (1-based). Master 1
    /// bootstraps the group, so its list is the membership: masters 2 and 3 reach master 1
    /// directly and each other through master 1's proxies.
    pub fn start_behind_proxies() -> (Self, BTreeMap<(usize, usize), Proxy>) {
        let (addrs, _) = master_addresses(3);
        let mut proxies = BTreeMap::new();
        for from in 1..=3 {
            for to in (1..=3).filter(|&to| to != from) {
                proxies.insert((from, to), Proxy::start(addrs[to - 1].clone()));
            }
        }
        let peers = (1..=3)
            .map(|from| {
                (1..=3)
                    .map(|to| match proxies.get(&(from, to)) {
                        Some(proxy) => format!("{to}=127.0.0.1:{}", proxy.port),
                        None => format!("{to}={}", addrs[to - 1]),
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        (Self::start_on(addrs, peers, &[], Flavour::Secured), proxies)
    }

    fn start_as(extra_args: &[&str], flavour: Flavour) -> Self {
        let (addrs, peers) = master_addresses(3);
        Self::start_on(addrs, vec![peers; 3], extra_args, flavour)
    }

    /// Three masters listening on `addrs`, each with its own `--peers` list of `peers`.
    fn start_on(
        addrs: Vec<String>,
        peers: Vec<String>,
        extra_args: &[&str],
        flavour: Flavour,
    ) -> Self {
        let mut masters = Self::empty(addrs, peers, extra_args, flavour);
        for id in 1..=3 {
            let master = masters.spawn(id);
            masters.running.push(Some(master));
        }
        masters
    }

    /// Masters to be started on `addrs`, none running yet.
    fn empty(
        addrs: Vec<String>,
        peers: Vec<String>,
        extra_args: &[&str],
        flavour: Flavour,
    ) -> Self {
        let spark_rest = match flavour {
            Flavour::SparkRest => (0..3)
                .map(|_| format!("127.0.0.1:{}", free_port()))
                .collect(),
            Flavour::Secured | Flavour::Plain => Vec::new(),
        };
        Self {
            addrs,
            peers,
            running: Vec::new(),
            dir: test_dir(),
            extra_args: extra_args.iter().map(|a| a.to_string()).collect(),
            plain: flavour == Flavour::Plain,
            spark_rest,
        }
    }

    pub fn spawn(&self, id: usize) -> Process {
        self.spawn_from(id, &muster_binary(), &[])
    }

    /// Starts master `id` from `program` (another build of `muster`), with `args` after the
    /// masters' extra arguments; its log is appended to `master-ID.log`.
    pub fn spawn_from(&self, id: usize, program: &std::path::Path, args: &[&str]) -> Process {
        let data_dir = self.dir.path().join(format!("master-{id}"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("master-{id}.log")))
            .unwrap();
        let mut command = master_command_from(
            program,
            id as u64,
            &self.addrs[id - 1],
            &self.peers[id - 1],
            &data_dir,
        );
        if self.plain {
            without_security(&mut command);
        }
        if let Some(gateway) = self.spark_rest.get(id - 1) {
            command.args(["--spark-rest", gateway]);
        }
        Process(
            command
                .args(&self.extra_args)
                .args(args)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("muster master starts"),
        )
    }

    /// Runs a client command against `masters` (a comma-separated list).
    pub fn client(masters: &str, args: &[&str]) -> Output {
        muster()
            .args(args)
            .env("MUSTER_MASTERS", masters)
            .output()
            .expect("muster runs")
    }

    /// Every master, starting with `first` (1-based).
    pub fn list_from(&self, first: usize) -> String {
        (0..3)
            .map(|i| self.addrs[(first - 1 + i) % 3].clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn status(&self, masters: &str) -> Value {
        let output = Self::client(masters, &["status", "--json"]);
        assert!(
            output.status.success(),
            "status failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("status prints JSON")
    }

    /// Waits until status reports a leader other than `not`, and returns its id.
    pub fn leader(&self, not: u64) -> u64 {
        let start = Instant::now();
        loop {
            let output = Self::client(&self.list_from(1), &["status", "--json"]);
            if output.status.success() {
                let status: Value = serde_json::from_slice(&output.stdout).unwrap();
                let leader = status["leader"].as_u64().unwrap();
                if leader != 0 && leader != not {
                    return leader;
                }
            }
            assert!(
                start.elapsed() < DEADLINE,
                "no new leader within {DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

pub fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "command failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .trim()
        .to_owned()
}

pub fn stderr(output: &Output) -> String {
    assert!(!output.status.success(), "command should fail");
    String::from_utf8(output.stderr.clone())
        .unwrap()
        .trim()
        .to_owned()
}

/// Ids of the drivers that have not ended, in status order.
pub fn driver_ids(status: &Value) -> Vec<&str> {
    status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| matches!(d["state"].as_str(), Some("SUBMITTED" | "RUNNING")))
        .map(|d| d["id"].as_str().unwrap())
        .collect()
}

/// The state status shows for driver `id`.
pub fn driver_state<'s>(status: &'s Value, id: &str) -> &'s str {
    let drivers = status["drivers"].as_array().unwrap();
    drivers
        .iter()
        .find(|d| d["id"] == id)
        .and_then(|d| d["state"].as_str())
        .unwrap_or("missing")
}

/// A worker process with its own work dir under the masters' temporary directory.
pub fn start_worker(masters: &Masters, name: &str, cores: u32) -> Process {
    start_worker_via(masters, name, cores, &masters.list_from(1), &[])
}

/// A worker that reaches the masters at `via` (a comma-separated list), started with
/// `extra_args` as well.
pub fn start_worker_via(
    masters: &Masters,
    name: &str,
    cores: u32,
    via: &str,
    extra_args: &[&str],
) -> Process {
    Process(
        worker_command(masters, name, cores, via, extra_args)
            .spawn()
            .expect("muster worker starts"),
    )
}

/// The command [`start_worker_via`] runs, its standard error in `NAME.log` of the masters'
/// directory.
pub fn worker_command(
    masters: &Masters,
    name: &str,
    cores: u32,
    via: &str,
    extra_args: &[&str],
) -> Command {
    worker_command_from(&muster_binary(), masters, name, cores, via, extra_args)
}

/// [`worker_command`] running `program`, another build of `muster`.
pub fn worker_command_from(
    program: &std::path::Path,
    masters: &Masters,
    name: &str,
    cores: u32,
    via: &str,
    extra_args: &[&str],
) -> Command {
    let work_dir = masters.dir.path().join(name);
    worker_command_at(program, masters, name, &work_dir, cores, via, extra_args)
}

/// [`worker_command_from`] with its work dir at `work_dir`.
pub fn worker_command_at(
    program: &std::path::Path,
    masters: &Masters,
    name: &str,
    work_dir: &std::path::Path,
    cores: u32,
    via: &str,
    extra_args: &[&str],
) -> Command {
    let log = std::fs::File::create(masters.dir.path().join(format!("{name}.log"))).unwrap();
    let mut command = muster_from(program);
    command
        .args(["worker", "--cores", &cores.to_string(), "--memory", "4096"])
        .args(["--host", name])
        .args(extra_args)
        .arg("--work-dir")
        .arg(work_dir)
        .env("MUSTER_MASTERS", via)
        .stdout(Stdio::null())
        .stderr(log);
    command
}

/// A worker that holds its processes to their grants (`--isolation cgroups`), registered;
/// `None` where this machine offers no control groups (the test is then skipped, saying so,
/// unless `MUSTER_REQUIRE_CGROUPS` is set).
pub fn limited_worker(
    masters: &Masters,
    name: &str,
    cores: u32,
    extra_args: &[&str],
) -> Option<Process> {
    let args = [&["--isolation", "cgroups"][..], extra_args].concat();
    let mut worker = Process(
        worker_command(masters, name, cores, &masters.list_from(1), &args)
            .spawn()
            .expect("muster worker starts"),
    );
    let start = Instant::now();
    while alive_workers(&masters.status(&masters.list_from(1))) == 0 {
        if worker.0.try_wait().unwrap().is_some() {
            let log =
                std::fs::read_to_string(masters.dir.path().join(format!("{name}.log"))).unwrap();
            assert!(log.contains("--isolation cgroups"), "{log}");
            assert!(
                std::env::var_os("MUSTER_REQUIRE_CGROUPS").is_none(),
                "MUSTER_REQUIRE_CGROUPS is set, but the worker cannot use control groups: {log}"
            );
            eprintln!("no control groups here: the test is skipped ({log})");
            return None;
        }
        assert!(start.elapsed() < DEADLINE, "the worker never registered");
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(worker)
}

/// Polls `status` until `done` holds for it, within [`DEADLINE`].
pub fn wait_for(masters: &Masters, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    wait_for_at(&masters.list_from(1), what, done)
}

/// [`wait_for`] on the masters at `list` (a comma-separated list).
pub fn wait_for_at(list: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    wait_within(list, what, DEADLINE, done)
}

/// [`wait_for_at`] with a deadline of its own, for work that takes longer than
/// [`DEADLINE`] to run.
pub fn wait_within(
    list: &str,
    what: &str,
    deadline: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let output = Masters::client(list, &["status", "--json"]);
        if output.status.success() {
            let status: Value = serde_json::from_slice(&output.stdout).unwrap();
            if done(&status) {
                return status;
            }
        }
        assert!(
            start.elapsed() < deadline,
            "{what} not seen within {deadline:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How many workers a status has ALIVE.
pub fn alive_workers(status: &Value) -> usize {
    status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["state"] == "ALIVE")
        .count()
}

/// Submits a driver with `args` and returns its id.
pub fn submit(masters: &Masters, args: &[&str]) -> String {
    let mut command = vec!["submit"];
    command.extend_from_slice(args);
    stdout(&Masters::client(&masters.list_from(1), &command))
}

/// Waits until driver `id` runs with a process, and returns its process id.
pub fn driver_pid(masters: &Masters, id: &str) -> u64 {
    let status = wait_for(masters, "the driver running", |s| {
        driver(s, id).is_some_and(|d| d["pid"].is_u64())
    });
    driver(&status, id).unwrap()["pid"].as_u64().unwrap()
}

/// Driver `id` as status shows it.
pub fn driver<'s>(status: &'s Value, id: &str) -> Option<&'s Value> {
    status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == id)
}

/// Whether process `pid` still runs (a zombie does not count).
pub fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// `muster app run` as a child process, and the id it printed. Its standard error goes to
/// `app-run.log` in the cluster's directory.
pub fn app_run(masters: &Masters, args: &[&str]) -> (Process, String, BufReader<ChildStdout>) {
    app_run_from(&muster_binary(), masters, None, args)
}

/// [`app_run`] of `program`, another build of `muster`, with the named user's `credential`
/// if one is given (the cluster's own otherwise).
pub fn app_run_from(
    program: &std::path::Path,
    masters: &Masters,
    credential: Option<&std::path::Path>,
    args: &[&str],
) -> (Process, String, BufReader<ChildStdout>) {
    let mut command = muster_from(program);
    if let Some(credential) = credential {
        command.env("MUSTER_SECRET_FILE", credential);
    }
    let mut child = command
        .args(["app", "run"])
        .args(args)
        .env("MUSTER_MASTERS", masters.list_from(1))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(masters.dir.path().join("app-run.log")).unwrap())
        .spawn()
        .expect("muster app run starts");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut id = String::new();
    out.read_line(&mut id).unwrap();
    (Process(child), id.trim().to_owned(), out)
}

/// The id of the worker on `host`, as status shows it.
pub fn worker_on(status: &Value, host: &str) -> Value {
    status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["host"] == host)
        .unwrap()["id"]
        .clone()
}

/// Application `id` as status shows it.
pub fn app<'s>(status: &'s Value, id: &str) -> Option<&'s Value> {
    status["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
}

/// The RUNNING executors of application `id` that have a process id.
pub fn running_executors(status: &Value, id: &str) -> Vec<Value> {
    app(status, id).map_or(Vec::new(), |a| {
        a["executors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["state"] == "RUNNING" && e["pid"].is_u64())
            .cloned()
            .collect()
    })
}

/// The ids of application `id`'s RUNNING executors, in order.
pub fn running_executor_ids(status: &Value, id: &str) -> Vec<u64> {
    running_executors(status, id)
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect()
}

/// A TCP proxy to one address; blocking it cuts existing connections and refuses new ones,
/// as a network partition would.
pub struct Proxy {
    pub port: u16,
    links: Arc<Mutex<Links>>,
    /// How many connections it has turned away while blocked.
    turned_away: Arc<AtomicU64>,
}

/// A proxy's open connections, each as its client's and its server's stream, by number; a
/// connection leaves when either side closes, so a long run keeps no descriptor of it.
#[derive(Default)]
struct Links {
    blocked: bool,
    opened: u64,
    open: BTreeMap<u64, [TcpStream; 2]>,
}

impl Proxy {
    pub fn start(target: String) -> Self {
        // Never a port given out for a master that has not bound it yet: a proxy on its own
        // target's port would forward to itself until the test ran out of descriptors.
        let listener = muster_bench::cluster::loopback_listener().unwrap();
        let port = listener.local_addr().unwrap().port();
        let links = Arc::new(Mutex::new(Links::default()));
        let turned_away = Arc::new(AtomicU64::new(0));
        let (proxy_links, turning_away) = (Arc::clone(&links), Arc::clone(&turned_away));
        std::thread::spawn(move || {
            for incoming in listener.incoming() {
                let Ok(client) = incoming else {
                    // Out of descriptors, say: the caller sees a refused connection, as on
                    // a network that drops it, and the proxy waits for some to close.
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                // Checked and recorded under the lock `block` takes: no connection slips
                // through between the check and the cut.
                let mut links = proxy_links.lock().unwrap();
                if links.blocked {
                    turning_away.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (Ok(client_kept), Ok(server_kept), Ok(client_out), Ok(server_in)) = (
                    client.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                ) else {
                    continue;
                };
                links.opened += 1;
                let number = links.opened;
                links.open.insert(number, [client_kept, server_kept]);
                for (from, to) in [(client, server_in), (server, client_out)] {
                    let links = Arc::clone(&proxy_links);
                    std::thread::spawn(move || {
                        pipe(from, to);
                        links.lock().unwrap().open.remove(&number);
                    });
                }
            }
        });
        Self {
            port,
            links,
            turned_away,
        }
    }

    /// How many connections it has turned away while blocked.
    pub fn turned_away(&self) -> u64 {
        self.turned_away.load(Ordering::SeqCst)
    }

    /// How many connections it has carried.
    pub fn opened(&self) -> u64 {
        self.links.lock().unwrap().opened
    }

    pub fn block(&self) {
        let mut links = self.links.lock().unwrap();
        links.blocked = true;
        for stream in std::mem::take(&mut links.open).values().flatten() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    pub fn heal(&self) {
        self.links.lock().unwrap().blocked = false;
    }
}

/// Copies `from` to `to` until either side closes, then closes both.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = [0; 64 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Three masters whose prior queue `prod` preempts ordinary executors after waiting 1 s,
/// keeps the room it frees 2 s and stops at most half the cores per round; with the
/// directory holding their settings, which must outlive them.
pub fn preempting_masters() -> (Masters, tempfile::TempDir) {
    configured_masters(
        r#"{"preemption": {"queues": ["prod"], "delay_s": 1, "grace_s": 2, "max_fraction": 0.5}}"#,
        r#"[{"name": "prod", "prior": true}]"#,
    )
}

/// Three masters started with the `--config` file `config` (JSON), once one leads given
/// `queues` (a JSON list); with the directory holding their settings, which must outlive
/// them.
pub fn configured_masters(config: &str, queues: &str) -> (Masters, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("master.json");
    std::fs::write(&file, config).unwrap();
    let masters = Masters::start_with(&["--config", file.to_str().unwrap()]);
    masters.leader(0);
    set_queues(&masters.list_from(1), dir.path(), queues);
    (masters, dir)
}

/// Replaces the queues through the masters at `via` with `queues` (a JSON list), written to
/// a file in `dir` for `muster queues --set`; the command must succeed.
pub fn set_queues(via: &str, dir: &std::path::Path, queues: &str) {
    let file = dir.join("queues.json");
    std::fs::write(&file, queues).unwrap();
    stdout(&Masters::client(
        via,
        &["queues", "--set", file.to_str().unwrap()],
    ));
}

/// Drops what only the leader knows (process ids, wait reasons, what processes use, what
/// worker agents and application clients said of themselves) from a status section, leaving
/// what every replica applied.
pub fn replicated_only(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for leader_only in [
                "pid",
                "waiting",
                "usage",
                "build",
                "ui_address",
                "spark_home",
                "driver",
            ] {
                map.remove(leader_only);
            }
            map.values_mut().for_each(replicated_only);
        }
        Value::Array(items) => items.iter_mut().for_each(replicated_only),
        _ => {}
    }
}

/// A small deterministic generator (xorshift64*), so a seed replays a run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// The seed in `variable`, or one from the clock, printed with how to replay it.
pub fn seed(variable: &str) -> u64 {
    let seed = std::env::var(variable)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("seed {seed} ({variable}={seed} replays it)");
    seed
}

/// Waits, within [`DEADLINE`], until the file at `path` (a process's log) holds what `done`
/// looks for; its text.
pub fn wait_for_text(path: &std::path::Path, what: &str, done: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if done(&text) {
            return text;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{what} not seen within {DEADLINE:?} in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An application stream's first message: a new application's registration (empty id and
/// token), or a re-attach to application `app_id` with its token.
pub fn app_registration(app_id: &str, app_token: &str) -> muster_proto::v1::AppMessage {
    use muster_proto::v1::app_message::Body;
    muster_proto::v1::AppMessage {
        body: Some(Body::Register(muster_proto::v1::RegisterApp {
            app_id: app_id.into(),
            app_token: app_token.into(),
            command: "/bin/true".into(),
            executor_memory_mb: 64,
            ..Default::default()
        })),
    }
}

/// A client of the masters' application streams, calling with a credential.
pub type AppLink = muster_proto::v1::app_link_client::AppLinkClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        muster_proto::auth::Credential,
    >,
>;

/// The application streams of `channel`, called with `credential`.
pub fn app_link(
    channel: tonic::transport::Channel,
    credential: muster_proto::auth::Credential,
) -> AppLink {
    muster_proto::v1::app_link_client::AppLinkClient::with_interceptor(channel, credential)
}

/// Registers a new application over a stream of `apps`. The stream's sender and its events,
/// held to keep it attached, and the registration's answer.
pub async fn register_app(
    apps: &mut AppLink,
) -> (
    tokio::sync::mpsc::Sender<muster_proto::v1::AppMessage>,
    tonic::Streaming<muster_proto::v1::AppEvent>,
    muster_proto::v1::AppRegistered,
) {
    use muster_proto::v1::app_event::Body;
    let (sender, outbound) = tokio::sync::mpsc::channel(4);
    sender.send(app_registration("", "")).await.unwrap();
    let mut events = apps
        .run(tokio_stream::wrappers::ReceiverStream::new(outbound))
        .await
        .unwrap()
        .into_inner();
    let Some(Body::Registered(registered)) = events.message().await.unwrap().unwrap().body else {
        panic!("the registration is answered first");
    };
    (sender, events, registered)
}

/// The metrics the Grafana dashboard in `deploy/grafana` plots, by the name of their `# TYPE`
/// line (without `_total`, `_bucket`, ...): the workers' (`muster_worker_*`), or else the
/// masters'.
pub fn dashboard_metrics(of_workers: bool) -> std::collections::BTreeSet<String> {
    let dashboard = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/muster.json"
    ))
    .expect("the dashboard");
    let names = dashboard
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("muster_"))
        .filter(|name| name.starts_with("muster_worker_") == of_workers)
        .map(|name| {
            ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name)
                .to_owned()
        })
        .collect::<std::collections::BTreeSet<_>>();
    assert!(!names.is_empty(), "the dashboard plots metrics");
    names
}
