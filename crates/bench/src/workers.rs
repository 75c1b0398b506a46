//! Thousands of simulated worker agents in this one process, each a
//! real stream to the leader as a worker's: it registers, heartbeats every second and
//! answers launches and kills with process reports (no process runs). Measured: how long
//! all take to register, then over a steady window the answer time of heartbeats and, when
//! the leader runs on this machine, its CPU and memory (from `/proc`); with `--drivers N`,
//! how fast N one-core drivers submitted at once are placed (placements committed per
//! second, from the first submission until every driver's launch, which the leader sends
//! once the plan placing it is committed, has reached its worker), each second's placements,
//! the submissions' latencies, the refusals of a busy leader, leader changes, launches of a
//! driver already launched, and the size of the state's snapshot at the end; with
//! `--driver-s S` each driver ends S seconds after its launch, so that more drivers than the
//! workers hold at once can be placed (a C1M-style run); with `--kill-leader-while-placing
//! S` the leader is killed S seconds into it, and the clients and the workers follow the
//! next (a worker registers again with the drivers it runs); with `--kill-leader`, the time
//! from a SIGKILL of the leader until every worker is registered with the new one and the
//! log has them all ALIVE.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_proto::auth::Credential;
use muster_proto::discovery::{leader_hint, worth_retrying};
use muster_proto::masters::{Client, Masters, PATIENCE_WITH_A_BUSY_LEADER, request_id, while_busy};
use muster_proto::transport::Dialer;
use muster_proto::v1::master_message::Body as Down;
use muster_proto::v1::worker_link_client::WorkerLinkClient;
use muster_proto::v1::worker_message::Body as Up;
use muster_proto::v1::{
    DriverState, DriverUpdate, ExecutorState, ExecutorUpdate, Heartbeat, Register, Resources,
    RunningDriver, SaveSnapshotRequest, StatusRequest, SubmitDriverRequest, WorkerMessage,
    WorkerState,
};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::BenchError;
use crate::load::bench_driver;

/// Streams per connection: below HTTP/2 servers' usual limit of concurrent streams.
const STREAMS_PER_CONNECTION: usize = 100;
/// How often each simulated worker heartbeats.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a phase may take (placing drivers: may go without a placement) before the
/// benchmark gives up.
const PATIENCE: Duration = Duration::from_secs(120);

/// What to measure: the fields are `muster bench workers`'s options of the same names.
pub struct Options {
    /// Simulated workers.
    pub count: usize,
    /// How long to measure steady heartbeats, in seconds.
    pub seconds: u64,
    /// Then submit this many one-core drivers at once and measure until every one is placed.
    pub drivers: usize,
    /// Concurrent clients submitting the drivers, each with its own connection.
    pub clients: usize,
    /// How long each driver runs once launched before it ends (FINISHED); `None`: until the
    /// benchmark ends.
    pub driver_run: Option<Duration>,
    /// Then SIGKILL the leader (it must run on this machine) and measure until every worker
    /// is registered with the new leader and ALIVE in its log.
    pub kill_leader: bool,
    /// SIGKILL the leader (it must run on this machine) this long after the first
    /// submission, while the drivers are submitted and placed.
    pub kill_leader_while_placing: Option<Duration>,
}

/// What the simulated workers measured, as `muster bench workers --json` prints it.
#[derive(Debug, Serialize)]
pub struct WorkersReport {
    /// Simulated workers.
    pub workers: usize,
    /// From the first registration until all were registered.
    pub registration_s: f64,
    /// Heartbeats answered per second in the steady window.
    pub heartbeats_per_s: f64,
    /// The median time to answer a heartbeat (`NaN`, `null` in JSON, without answers).
    pub heartbeat_p50_ms: f64,
    /// The 99th percentile.
    pub heartbeat_p99_ms: f64,
    /// The leader's CPU in that window, in cores, when it runs on this machine.
    pub leader_cores: Option<f64>,
    /// The leader's resident memory after it, in MB, likewise.
    pub leader_rss_mb: Option<f64>,
    /// Drivers submitted at once.
    pub drivers: usize,
    /// Drivers placed per second, from the first submission until the last was placed.
    pub placements_per_s: Option<f64>,
    /// Drivers placed in each second from the first submission.
    pub placed_each_s: Vec<u64>,
    /// From the first submission until all were accepted.
    pub submitted_s: Option<f64>,
    /// The median time from sending a submission until it was accepted, waits for a busy
    /// leader included.
    pub submission_p50_ms: Option<f64>,
    /// The 99th percentile.
    pub submission_p99_ms: Option<f64>,
    /// Submissions sent again, as a client does, after an answer that asked for it (an
    /// election, a leader stepping down, no answer in time).
    pub submission_retries: Option<u64>,
    /// Submissions a busy leader refused (backpressure), each sent again after the wait it
    /// asked for.
    pub busy_refusals: Option<u64>,
    /// Leaders elected while the drivers were submitted and placed.
    pub leader_changes: Option<u64>,
    /// Launches of a driver that had been launched already (never, unless a worker was lost).
    pub duplicate_launches: Option<u64>,
    /// The leader's CPU while the drivers were submitted and placed, in cores.
    pub placement_leader_cores: Option<f64>,
    /// The leader's resident memory once they were placed, in MB.
    pub placement_leader_rss_mb: Option<f64>,
    /// The state's snapshot once they were placed (`muster snapshot save`), in MB.
    pub snapshot_mb: Option<f64>,
    /// How long the leader took to encode and send it.
    pub snapshot_s: Option<f64>,
    /// From the leader's SIGKILL until every worker was ALIVE with the next leader.
    pub failover_s: Option<f64>,
}

/// What the simulated workers share: connections, and what they measured.
struct Fleet {
    credential: Credential,
    dialer: Dialer,
    /// Connections by master address, made on first use.
    connections: tokio::sync::Mutex<HashMap<String, Vec<Channel>>>,
    /// Workers registered with the current leader now.
    registered: AtomicUsize,
    /// Heartbeat answer times, while `measuring`.
    answers: Mutex<Vec<Duration>>,
    /// What this run's drivers are given as their one argument: launches of others (left by
    /// an earlier run on the same cluster) are answered but not counted.
    run: String,
    /// Launches of this run's drivers that reached a simulated worker, by driver: as many
    /// drivers were placed as it has keys.
    launched: Mutex<HashMap<String, u32>>,
    measuring: AtomicBool,
    /// How long a launched driver runs before it ends.
    driver_run: Option<Duration>,
}

/// Runs the simulated workers against `masters`, each with the worker `credential`.
///
/// # Errors
///
/// No workers, no leader, or a phase that did not finish within two minutes.
pub async fn run(
    masters: &Masters,
    credential: Credential,
    options: &Options,
) -> Result<WorkersReport, BenchError> {
    if options.count == 0 {
        return Err(BenchError::BadInput(
            "--count must be at least 1".to_owned(),
        ));
    }
    let leader = leader(masters).await?;
    let fleet = Arc::new(Fleet {
        credential,
        dialer: masters.dialer().clone(),
        connections: tokio::sync::Mutex::new(HashMap::new()),
        registered: AtomicUsize::new(0),
        answers: Mutex::new(Vec::new()),
        run: format!("bench-run-{}", request_id()),
        launched: Mutex::new(HashMap::new()),
        measuring: AtomicBool::new(false),
        driver_run: options.driver_run,
    });
    let addrs = masters.addrs().to_vec();
    let start = Instant::now();
    for id in 0..options.count {
        tokio::spawn(simulate(
            id,
            Arc::clone(&fleet),
            leader.clone(),
            addrs.clone(),
        ));
    }
    wait_until("every worker registered", || {
        fleet.registered.load(Ordering::SeqCst) == options.count
    })
    .await?;
    let registration = start.elapsed();

    let leader_pid = leader_pid(&leader);
    let cpu_before = leader_pid.and_then(cpu_time);
    fleet.measuring.store(true, Ordering::SeqCst);
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs(options.seconds)).await;
    fleet.measuring.store(false, Ordering::SeqCst);
    let elapsed = window.elapsed();
    let cpu = cpu_before
        .zip(leader_pid.and_then(cpu_time))
        .map(|(before, after)| (after - before).as_secs_f64() / elapsed.as_secs_f64());
    let steady_rss_mb = leader_pid.and_then(rss_mb);
    let mut answers = std::mem::take(&mut *fleet.answers.lock().expect("answers lock"));
    answers.sort();

    let placement = if options.drivers > 0 {
        let cpu_before = leader_pid.and_then(cpu_time);
        if let Some(after) = options.kill_leader_while_placing {
            let pid = local_pid(leader_pid, &leader)?;
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let _ = sigkill(pid);
            });
        }
        let mut placement =
            place_drivers(masters, &fleet, &leader, options.drivers, options.clients).await?;
        placement.leader_cores = cpu_before
            .zip(leader_pid.and_then(cpu_time))
            .map(|(before, after)| (after - before).as_secs_f64() / placement.placed.as_secs_f64());
        placement.leader_rss_mb = leader_pid.and_then(rss_mb);
        Some(placement)
    } else {
        None
    };
    let snapshot = if options.drivers > 0 {
        Some(snapshot(masters).await?)
    } else {
        None
    };
    let placements_per_s = placement
        .as_ref()
        .map(|p| options.drivers as f64 / p.placed.as_secs_f64());
    let submitted_s = placement.as_ref().map(|p| p.submitted.as_secs_f64());
    let submission_ms = |p: f64| {
        placement
            .as_ref()
            .map(|placement| percentile_ms(&placement.latencies, p))
    };

    let failover = if options.kill_leader {
        let pid = local_pid(leader_pid, &leader)?;
        Some(failover(masters, &fleet, pid, options.count).await?)
    } else {
        None
    };

    Ok(WorkersReport {
        workers: options.count,
        registration_s: registration.as_secs_f64(),
        heartbeats_per_s: answers.len() as f64 / elapsed.as_secs_f64(),
        heartbeat_p50_ms: percentile_ms(&answers, 0.5),
        heartbeat_p99_ms: percentile_ms(&answers, 0.99),
        leader_cores: cpu,
        leader_rss_mb: steady_rss_mb,
        drivers: options.drivers,
        placements_per_s,
        placed_each_s: placement
            .as_ref()
            .map(|p| p.each_second.clone())
            .unwrap_or_default(),
        submitted_s,
        submission_p50_ms: submission_ms(0.5),
        submission_p99_ms: submission_ms(0.99),
        submission_retries: placement.as_ref().map(|p| p.retries),
        busy_refusals: placement.as_ref().map(|p| p.busy_refusals),
        leader_changes: placement.as_ref().map(|p| p.leader_changes),
        duplicate_launches: placement.as_ref().map(|_| fleet.duplicate_launches()),
        placement_leader_cores: placement.as_ref().and_then(|p| p.leader_cores),
        placement_leader_rss_mb: placement.as_ref().and_then(|p| p.leader_rss_mb),
        snapshot_mb: snapshot.map(|(bytes, _)| bytes as f64 / 1e6),
        snapshot_s: snapshot.map(|(_, took)| took.as_secs_f64()),
        failover_s: failover.map(|d| d.as_secs_f64()),
    })
}

/// The `p` percentile of `sorted`, in milliseconds (`NaN` when empty).
fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    sorted
        .get(((sorted.len().max(1) - 1) as f64 * p).round() as usize)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

/// Saves the state's snapshot from the leader: its size in bytes, and how long it took.
async fn snapshot(masters: &Masters) -> Result<(usize, Duration), BenchError> {
    let start = Instant::now();
    let reply = masters
        .call(async |mut c| c.save_snapshot(SaveSnapshotRequest {}).await)
        .await?;
    Ok((reply.snapshot.len(), start.elapsed()))
}

/// The current term, as the masters' status names it.
async fn term(masters: &Masters) -> Result<u64, BenchError> {
    let status = masters
        .call(async |mut c| c.status(StatusRequest::without_drivers()).await)
        .await?;
    Ok(status.term)
}

/// The leader's address, as its status names it.
async fn leader(masters: &Masters) -> Result<String, BenchError> {
    let status = masters
        .call(async |mut c| c.status(StatusRequest::without_drivers()).await)
        .await?;
    status
        .members
        .iter()
        .find(|m| m.id == status.leader)
        .map(|m| m.addr.clone())
        .ok_or_else(|| BenchError::Unavailable("no leader is known".to_owned()))
}

/// What placing drivers measured.
struct Placement {
    /// From the first submission until all were accepted.
    submitted: Duration,
    /// From the first submission until every driver was placed.
    placed: Duration,
    /// Drivers placed in each second from the first submission.
    each_second: Vec<u64>,
    /// Each accepted submission's time from first sending, sorted.
    latencies: Vec<Duration>,
    /// Submissions sent again.
    retries: u64,
    /// Busy refusals, each followed by the same submission after the wait it asked for.
    busy_refusals: u64,
    /// Leaders elected meanwhile.
    leader_changes: u64,
    /// The leader's CPU meanwhile, in cores, and its memory at the end, in MB.
    leader_cores: Option<f64>,
    leader_rss_mb: Option<f64>,
}

/// What one client submitting drivers measured.
#[derive(Default)]
struct Submitted {
    latencies: Vec<Duration>,
    /// Submissions sent again, to the master that leads then, after an answer that asked
    /// for it.
    retries: u64,
    busy_refusals: u64,
}

/// A connection to the master that leads now, for a client whose call to the last one
/// failed (a leader that stepped down or died, an election); given up [`PATIENCE`] after
/// `since`.
async fn reconnect(masters: &Masters, since: Instant) -> Result<Client, tonic::Status> {
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let leader = leader(masters).await;
        match leader {
            Ok(addr) => match masters.connect(&addr).await {
                Ok(client) => return Ok(client),
                Err(status) if since.elapsed() > PATIENCE => return Err(status),
                Err(_) => {}
            },
            Err(error) if since.elapsed() > PATIENCE => {
                return Err(tonic::Status::unavailable(error.to_string()));
            }
            Err(_) => {}
        }
    }
}

/// Submits `count` one-core drivers from `clients` clients at once, each to the leader on a
/// connection of its own. A submission a busy leader refused is sent again after the wait it
/// asked for; one the leader could not take now (an election, a leader stepping down or
/// killed, no answer in time) is sent again at once, with the same request id, to whichever
/// master leads then, as the CLI does. Measures the time from the first submission until
/// all were accepted, and until every one was placed (its launch, sent once the plan placing
/// it is committed, reached its simulated worker), and the placements of each second.
async fn place_drivers(
    masters: &Masters,
    fleet: &Arc<Fleet>,
    leader: &str,
    count: usize,
    clients: usize,
) -> Result<Placement, BenchError> {
    let clients = clients.clamp(1, count);
    let mut connected = Vec::with_capacity(clients);
    for _ in 0..clients {
        connected.push(masters.connect(leader).await?);
    }
    let first_term = term(masters).await?;
    let start = Instant::now();
    let submitters: Vec<_> = connected
        .into_iter()
        .enumerate()
        .map(|(c, mut client)| {
            let run = fleet.run.clone();
            let masters = masters.clone();
            tokio::spawn(async move {
                let mut submitted = Submitted::default();
                for _ in (c..count).step_by(clients) {
                    let request = SubmitDriverRequest {
                        args: vec![run.clone()],
                        ..bench_driver()
                    };
                    let sent = Instant::now();
                    loop {
                        let (answer, refusals) = while_busy(PATIENCE_WITH_A_BUSY_LEADER, || {
                            let mut client = client.clone();
                            let request = request.clone();
                            async move { client.submit_driver(request).await }
                        })
                        .await;
                        submitted.busy_refusals += refusals;
                        match answer {
                            Ok(_) => break,
                            Err(status) if worth_retrying(&status) => {
                                submitted.retries += 1;
                                client = reconnect(&masters, sent).await?;
                            }
                            Err(status) => return Err(status),
                        }
                    }
                    submitted.latencies.push(sent.elapsed());
                }
                Ok::<_, tonic::Status>(submitted)
            })
        })
        .collect();
    let sampler = tokio::spawn(sample_placements(Arc::clone(fleet), start, count));
    let mut all = Submitted::default();
    for submitter in submitters {
        let submitted = submitter
            .await
            .map_err(|e| BenchError::Failed(format!("a client failed: {e}")))??;
        all.latencies.extend(submitted.latencies);
        all.busy_refusals += submitted.busy_refusals;
        all.retries += submitted.retries;
    }
    let submitted = start.elapsed();
    let each_second = sampler
        .await
        .map_err(|e| BenchError::Failed(format!("the sampler failed: {e}")))??;
    let placed = start.elapsed();
    all.latencies.sort();
    Ok(Placement {
        submitted,
        placed,
        each_second,
        latencies: all.latencies,
        retries: all.retries,
        busy_refusals: all.busy_refusals,
        leader_changes: term(masters).await?.saturating_sub(first_term),
        leader_cores: None,
        leader_rss_mb: None,
    })
}

/// Counts the drivers placed in each second from `start` until `count` are (the last count
/// is of the part of a second that ended it); gives up when none was placed for
/// [`PATIENCE`].
async fn sample_placements(
    fleet: Arc<Fleet>,
    start: Instant,
    count: usize,
) -> Result<Vec<u64>, BenchError> {
    let mut each_second = Vec::new();
    // Placed by the end of the last whole second.
    let mut counted = 0;
    let mut progress = (0, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let placed = fleet.placed();
        while start.elapsed() >= Duration::from_secs(each_second.len() as u64 + 1) {
            each_second.push((placed - counted) as u64);
            counted = placed;
        }
        if placed >= count {
            each_second.push((placed - counted) as u64);
            return Ok(each_second);
        }
        if placed > progress.0 {
            progress = (placed, Instant::now());
        } else if progress.1.elapsed() > PATIENCE {
            return Err(BenchError::Failed(format!(
                "only {placed} of {count} drivers placed, and none for {PATIENCE:?}"
            )));
        }
    }
}

/// SIGKILLs the leader and waits until every simulated worker has registered again and the
/// new leader's log has `count` workers ALIVE.
async fn failover(
    masters: &Masters,
    fleet: &Fleet,
    pid: u32,
    count: usize,
) -> Result<Duration, BenchError> {
    let killed = Instant::now();
    sigkill(pid)?;
    // The old leader's streams break at once; wait for them to be counted.
    wait_until("the old leader's streams closed", || {
        fleet.registered.load(Ordering::SeqCst) < count
    })
    .await?;
    wait_until("every worker registered again", || {
        fleet.registered.load(Ordering::SeqCst) == count
    })
    .await?;
    loop {
        let alive = masters
            .call(async |mut c| c.status(StatusRequest::without_drivers()).await)
            .await
            .map(|s| {
                s.workers
                    .iter()
                    .filter(|w| w.state() == WorkerState::Alive)
                    .count()
            })
            .unwrap_or(0);
        if alive >= count {
            return Ok(killed.elapsed());
        }
        if killed.elapsed() > PATIENCE {
            return Err(BenchError::Failed(format!(
                "only {alive} of {count} workers ALIVE after {PATIENCE:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for `done`, checking every 10 ms, for at most [`PATIENCE`].
async fn wait_until(what: &str, done: impl Fn() -> bool) -> Result<(), BenchError> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > PATIENCE {
            return Err(BenchError::Failed(format!(
                "not {what} within {PATIENCE:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// One simulated worker, for as long as the benchmark runs: attached to the leader, and
/// attached again (following the leader's address the masters name) whenever its stream
/// breaks.
async fn simulate(id: usize, fleet: Arc<Fleet>, mut addr: String, masters: Vec<String>) {
    let mut next = 0;
    let mut agent = Agent::default();
    loop {
        match attach(id, &fleet, &addr, &mut agent).await {
            Ended::LeaderAt(leader) => addr = leader,
            Ended::Broken => {
                tokio::time::sleep(Duration::from_millis(50 + (id % 100) as u64)).await;
                next = (next + 1) % masters.len();
                addr.clone_from(&masters[next]);
            }
        }
    }
}

/// Why a simulated worker's stream ended.
enum Ended {
    /// A follower named the leader.
    LeaderAt(String),
    /// Anything else: try the next master.
    Broken,
}

/// What a simulated worker keeps from one stream to the next, as a worker agent does.
#[derive(Default)]
struct Agent {
    /// The drivers it runs, in launch order, each with when it ends (all or none end, each
    /// the same time after its launch, so they end in this order too).
    drivers: VecDeque<(String, Option<tokio::time::Instant>)>,
    /// The last process change's number.
    seq: u64,
    /// The process changes no leader has acknowledged yet, by number: sent again when it
    /// registers.
    unacked: BTreeMap<u64, Up>,
}

impl Agent {
    /// `change`, numbered and kept until a leader acknowledges it.
    fn change(&mut self, mut change: Up) -> Up {
        self.seq += 1;
        match &mut change {
            Up::Executor(update) => (update.pid, update.seq) = (1, self.seq),
            Up::Driver(update) => (update.pid, update.seq) = (1, self.seq),
            Up::Register(_) | Up::Heartbeat(_) | Up::LogChunk(_) => {}
        }
        self.unacked.insert(self.seq, change.clone());
        change
    }

    /// The registration of worker `id`: what it runs and the changes not acknowledged.
    fn register(&self, id: usize) -> Register {
        Register {
            worker_id: format!("sim-{id:05}"),
            host: format!("sim-{id:05}"),
            address: format!("sim-{id:05}"),
            capacity: Some(Resources {
                cores: 16,
                memory_mb: 65_536,
                ..Resources::default()
            }),
            drivers: self
                .drivers
                .iter()
                .map(|(driver_id, _)| RunningDriver {
                    driver_id: driver_id.clone(),
                    pid: 1,
                    ..RunningDriver::default()
                })
                .collect(),
            ..Register::default()
        }
        .unacknowledged(self.unacked.values())
    }
}

/// One stream: register with what it runs and what no leader acknowledged, then heartbeat
/// and answer until it breaks.
async fn attach(id: usize, fleet: &Fleet, addr: &str, agent: &mut Agent) -> Ended {
    let Some(channel) = fleet.channel(addr, id).await else {
        return Ended::Broken;
    };
    let (up, outbound) = mpsc::channel(16);
    let register = WorkerMessage {
        body: Some(Up::Register(agent.register(id))),
    };
    if up.send(register).await.is_err() {
        return Ended::Broken;
    }
    let mut request = tonic::Request::new(ReceiverStream::new(outbound));
    fleet.credential.attach(request.metadata_mut());
    let mut inbound = match WorkerLinkClient::new(channel).attach(request).await {
        Ok(response) => response.into_inner(),
        Err(status) => {
            return match leader_hint(&status, addr) {
                Some(leader) => Ended::LeaderAt(leader.to_owned()),
                None => Ended::Broken,
            };
        }
    };
    // Spread the heartbeats over the second.
    let phase = Duration::from_millis((id % 1000) as u64);
    let mut heartbeats = tokio::time::interval_at(tokio::time::Instant::now() + phase, HEARTBEAT);
    let mut registered = false;
    let mut sent: Option<Instant> = None;
    let ended = loop {
        let next_end = agent.drivers.front().and_then(|(_, at)| *at);
        tokio::select! {
            () = sleep_until(next_end) => {
                let (driver_id, _) = agent.drivers.pop_front().expect("a driver that ends");
                let finished = agent.change(Up::Driver(DriverUpdate {
                    driver_id,
                    state: DriverState::Finished.into(),
                    exit_code: Some(0),
                    ..DriverUpdate::default()
                }));
                if up.send(WorkerMessage { body: Some(finished) }).await.is_err() {
                    break Ended::Broken;
                }
            }
            _ = heartbeats.tick(), if registered => {
                sent.get_or_insert_with(Instant::now);
                let heartbeat = WorkerMessage { body: Some(Up::Heartbeat(Heartbeat::default())) };
                if up.send(heartbeat).await.is_err() {
                    break Ended::Broken;
                }
            }
            message = inbound.message() => {
                let Ok(Some(message)) = message else { break Ended::Broken };
                let report = match message.body {
                    Some(Down::Registered(_)) if !registered => {
                        registered = true;
                        fleet.registered.fetch_add(1, Ordering::SeqCst);
                        None
                    }
                    Some(Down::Acknowledged(acknowledged)) => {
                        for seq in acknowledged.seqs {
                            agent.unacked.remove(&seq);
                        }
                        None
                    }
                    Some(Down::HeartbeatAck(_)) => {
                        if let Some(at) = sent.take()
                            && fleet.measuring.load(Ordering::Relaxed)
                        {
                            fleet.answers.lock().expect("answers lock").push(at.elapsed());
                        }
                        None
                    }
                    Some(Down::LaunchExecutor(launch)) => Some(Up::Executor(ExecutorUpdate {
                        app_id: launch.app_id,
                        executor_id: launch.executor_id,
                        state: ExecutorState::Running.into(),
                        ..ExecutorUpdate::default()
                    })),
                    Some(Down::KillExecutor(kill)) => Some(Up::Executor(ExecutorUpdate {
                        app_id: kill.app_id,
                        executor_id: kill.executor_id,
                        state: ExecutorState::Killed.into(),
                        ..ExecutorUpdate::default()
                    })),
                    Some(Down::LaunchDriver(launch)) => {
                        if launch.args == [fleet.run.as_str()] {
                            fleet.launch(&launch.driver_id);
                        }
                        let ends = fleet.driver_run.map(|run| tokio::time::Instant::now() + run);
                        agent.drivers.push_back((launch.driver_id.clone(), ends));
                        Some(Up::Driver(DriverUpdate {
                            driver_id: launch.driver_id,
                            state: DriverState::Running.into(),
                            ..DriverUpdate::default()
                        }))
                    }
                    Some(Down::KillDriver(kill)) => {
                        agent.drivers.retain(|(id, _)| *id != kill.driver_id);
                        Some(Up::Driver(DriverUpdate {
                            driver_id: kill.driver_id,
                            state: DriverState::Killed.into(),
                            ..DriverUpdate::default()
                        }))
                    }
                    _ => None,
                };
                if let Some(report) = report {
                    let report = agent.change(report);
                    if up.send(WorkerMessage { body: Some(report) }).await.is_err() {
                        break Ended::Broken;
                    }
                }
            }
        }
    };
    if registered {
        fleet.registered.fetch_sub(1, Ordering::SeqCst);
    }
    ended
}

/// Sleeps until `at`; for ever when `None`.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Fleet {
    /// A launch of `driver` reached a simulated worker.
    fn launch(&self, driver: &str) {
        let mut launched = self.launched.lock().expect("launched lock");
        *launched.entry(driver.to_owned()).or_default() += 1;
    }

    /// Drivers launched at least once.
    fn placed(&self) -> usize {
        self.launched.lock().expect("launched lock").len()
    }

    /// Launches of drivers launched before.
    fn duplicate_launches(&self) -> u64 {
        let launched = self.launched.lock().expect("launched lock");
        launched.values().map(|&n| u64::from(n - 1)).sum()
    }

    /// The connection to `addr` that worker `id` shares with a hundred others.
    async fn channel(&self, addr: &str, id: usize) -> Option<Channel> {
        let mut connections = self.connections.lock().await;
        let pool = connections.entry(addr.to_owned()).or_default();
        let slot = id / STREAMS_PER_CONNECTION;
        while pool.len() <= slot {
            let endpoint = self.dialer.endpoint(addr).ok()?;
            let channel = endpoint
                .connect_timeout(Duration::from_secs(2))
                .connect()
                .await
                .ok()?;
            pool.push(channel);
        }
        Some(pool[slot].clone())
    }
}

/// The leader's process, `pid`, when it runs on this machine (at `leader`).
fn local_pid(pid: Option<u32>, leader: &str) -> Result<u32, BenchError> {
    pid.ok_or_else(|| {
        BenchError::BadInput(format!(
            "the leader at {leader} does not run on this machine: it cannot be killed"
        ))
    })
}

/// SIGKILLs the leader's process `pid`.
fn sigkill(pid: u32) -> Result<(), BenchError> {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .map_err(|e| BenchError::Failed(format!("cannot kill the leader: {e}")))
}

/// The process on this machine that serves the master at `addr` (`--listen ADDR`).
fn leader_pid(addr: &str) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let serves = args.iter().any(|a| *a == b"master")
                && args
                    .windows(2)
                    .any(|w| w[0] == b"--listen" && w[1] == addr.as_bytes());
            serves.then_some(pid)
        })
}

/// The CPU time `pid` has used (user and system).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at its closing paren.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    Some(Duration::from_secs_f64(ticks as f64 / per_second as f64))
}

/// The resident memory of `pid`, in MB.
fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}
