//! `muster executor`: the process a worker starts for an application's executor. It opens a
//! stream to the application's driver (TLS, trusting only the CA its driver handed it), says
//! which executor it is, and runs the tasks the driver sends, each answered with how it
//! ended. When the stream ends, so does the
//! executor: its driver is gone, or done with it.
//!
//! Built-in tasks (`sleep`, `pi`, `noop`) run inside the process; command tasks run as child
//! processes, killed when the driver kills the task or the executor goes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use muster_core::ids::millis;
use muster_core::rng::SplitMix64;
use muster_proto::auth::Credential;
use muster_proto::transport::Dialer;
use muster_proto::v1::driver_message::Body as Down;
use muster_proto::v1::executor_message::Body as Up;
use muster_proto::v1::task_link_client::TaskLinkClient;
use muster_proto::v1::task_work::Kind;
use muster_proto::v1::{ExecutorHello, ExecutorMessage, RunTask, TaskEnded, TaskState};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_stream::wrappers::ReceiverStream;

/// The environment variable naming the driver's address, `HOST:PORT`.
pub const DRIVER_VARIABLE: &str = "MUSTER_DRIVER";
/// The environment variable holding the credential the driver gave its executors.
pub const CREDENTIAL_VARIABLE: &str = "MUSTER_DRIVER_CREDENTIAL";
/// The environment variable holding the PEM CA of the driver's certificate.
pub const CA_VARIABLE: &str = "MUSTER_DRIVER_CA";
/// How often the executor checks that its driver's connection is alive.
const KEEPALIVE: Duration = Duration::from_secs(2);
/// How long an executor keeps trying to reach its driver when it starts.
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);

/// Who this executor is and where its driver is.
#[derive(Clone, Debug)]
pub struct ExecutorConfig {
    /// The driver, `HOST:PORT`.
    pub driver: String,
    /// What the driver accepts.
    pub credential: Credential,
    /// The CA of the driver's certificate, PEM: the only one trusted.
    pub driver_ca: String,
    /// The executor's id in its application.
    pub executor_id: u32,
    /// The worker's host name.
    pub host: String,
    /// The worker's rack label, if any.
    pub rack: String,
    /// Tasks run at once.
    pub cores: u32,
}

/// Why an executor stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The driver could not be reached or refused the executor.
    #[error("cannot reach the driver at {driver}: {message}")]
    Unreachable {
        /// Its address.
        driver: String,
        /// Why.
        message: String,
    },
}

/// Runs tasks for the driver until it closes the stream.
///
/// # Errors
///
/// The driver could not be reached within a few seconds, or refused the executor.
pub async fn run(config: ExecutorConfig) -> Result<(), ExecutorError> {
    let unreachable = |message: String| ExecutorError::Unreachable {
        driver: config.driver.clone(),
        message,
    };
    // Keepalives find a driver whose machine vanished without closing the stream.
    let endpoint = Dialer::trusting(&config.driver_ca)
        .endpoint(&config.driver)
        .map_err(|e| unreachable(e.to_string()))?
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE * 3);
    let start = Instant::now();
    let channel = loop {
        match endpoint.connect().await {
            Ok(channel) => break channel,
            Err(e) if start.elapsed() > CONNECT_PATIENCE => return Err(unreachable(e.to_string())),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let (up, outbound) = mpsc::channel(64);
    let hello = ExecutorHello {
        executor_id: config.executor_id,
        host: config.host.clone(),
        rack: config.rack.clone(),
        cores: config.cores,
    };
    let _ = up
        .send(ExecutorMessage {
            body: Some(Up::Hello(hello)),
        })
        .await;
    let mut request = tonic::Request::new(ReceiverStream::new(outbound));
    config.credential.attach(request.metadata_mut());
    let mut orders = TaskLinkClient::new(channel)
        .attach(request)
        .await
        .map_err(|status| unreachable(status.message().to_owned()))?
        .into_inner();
    let mut running: HashMap<u64, AbortHandle> = HashMap::new();
    let (ended, mut ends) = mpsc::unbounded_channel::<TaskEnded>();
    loop {
        tokio::select! {
            order = orders.message() => match order {
                Ok(Some(message)) => match message.body {
                    Some(Down::Run(task)) => {
                        let id = task.task_id;
                        let ended = ended.clone();
                        let handle = tokio::spawn(async move {
                            let _ = ended.send(run_task(task).await);
                        });
                        running.insert(id, handle.abort_handle());
                    }
                    Some(Down::Kill(kill)) => {
                        // Aborting drops the task's child, which kills it.
                        if let Some(handle) = running.remove(&kill.task_id) {
                            handle.abort();
                            let _ = ended.send(TaskEnded {
                                task_id: kill.task_id,
                                state: TaskState::Killed.into(),
                                message: "killed by the driver".into(),
                                ..TaskEnded::default()
                            });
                        }
                    }
                    None => {}
                },
                Ok(None) | Err(_) => break,
            },
            Some(end) = ends.recv() => {
                if running.remove(&end.task_id).is_some() || end.state() == TaskState::Killed {
                    let body = Some(Up::Ended(end));
                    if up.send(ExecutorMessage { body }).await.is_err() {
                        break;
                    }
                }
            }
        }
    }
    for handle in running.values() {
        handle.abort();
    }
    Ok(())
}

/// Runs one task to its end.
async fn run_task(task: RunTask) -> TaskEnded {
    let start = Instant::now();
    let mut end = TaskEnded {
        task_id: task.task_id,
        state: TaskState::Succeeded.into(),
        ..TaskEnded::default()
    };
    match task.work.and_then(|w| w.kind) {
        Some(Kind::SleepMs(ms)) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Some(Kind::PiSamples(samples)) => {
            let seed = task.task_id;
            // A killed task stops its computation too.
            let cancel = Cancel::default();
            let cancelled = cancel.0.clone();
            let estimate =
                tokio::task::spawn_blocking(move || estimate_pi(samples, seed, &cancelled))
                    .await
                    .unwrap_or(f64::NAN);
            drop(cancel);
            end.result = format!("{estimate:.6}");
        }
        Some(Kind::Noop(_)) => {}
        Some(Kind::Command(command)) => {
            let argv: Vec<String> = command
                .argv
                .iter()
                .map(|arg| {
                    arg.replace("{task}", &task.task_id.to_string())
                        .replace("{partition}", &task.partition.to_string())
                        .replace("{attempt}", &task.attempt.to_string())
                })
                .collect();
            match run_command(&argv).await {
                Ok(0) => {}
                Ok(code) => {
                    end.state = TaskState::Failed.into();
                    end.exit_code = Some(code);
                    end.message = format!("exited with code {code}");
                }
                Err(error) => {
                    end.state = TaskState::Failed.into();
                    end.message = error.to_string();
                }
            }
        }
        None => {
            end.state = TaskState::Failed.into();
            end.message = "the task names no work this executor knows".into();
        }
    }
    end.duration_ms = millis(start.elapsed());
    end
}

/// Why a task's command did not run to an exit.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    /// No program to run.
    #[error("an empty command")]
    Empty,
    /// The program could not be started or waited for.
    #[error("cannot {doing} {program}: {source}")]
    Io {
        /// `run` or `wait for`.
        doing: &'static str,
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Runs `argv` as a child of this process in a process group of its own, which is killed
/// when the task ends or is aborted: nothing a task started outlives it. Its exit code, or
/// -1 when a signal ended it.
async fn run_command(argv: &[String]) -> Result<i32, CommandError> {
    let (program, args) = argv.split_first().ok_or(CommandError::Empty)?;
    let failed = |doing, source| CommandError::Io {
        doing,
        program: program.clone(),
        source,
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed("run", e))?;
    let _group = child.id().map(ProcessGroup);
    let status = child.wait().await.map_err(|e| failed("wait for", e))?;
    Ok(status.code().unwrap_or(-1))
}

/// A task's process group, killed when dropped. Its id stays reserved while any member
/// lives, so the signal reaches no one else.
struct ProcessGroup(u32);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.0 as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    }
}

/// Tells a computation on a blocking thread to stop when dropped.
#[derive(Default)]
struct Cancel(Arc<AtomicBool>);

impl Drop for Cancel {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Monte Carlo: the share of `samples` points of the unit square inside the quarter
/// circle, times four. Points come from SplitMix64 seeded with `seed`.
/// Stops early, with NaN, once `cancelled` is set.
fn estimate_pi(samples: u64, seed: u64, cancelled: &AtomicBool) -> f64 {
    let mut rng = SplitMix64::new(seed);
    let mut inside = 0u64;
    for sample in 0..samples {
        if sample % 65_536 == 0 && cancelled.load(Ordering::Relaxed) {
            return f64::NAN;
        }
        let (x, y) = (rng.unit(), rng.unit());
        inside += u64::from(x * x + y * y <= 1.0);
    }
    4.0 * inside as f64 / samples.max(1) as f64
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::estimate_pi;

    #[test]
    fn pi_is_estimated_within_a_percent() {
        let estimate = estimate_pi(1_000_000, 7, &AtomicBool::new(false));
        assert!((estimate - std::f64::consts::PI).abs() < 0.03, "{estimate}");
    }

    #[test]
    fn a_cancelled_estimate_stops() {
        assert!(estimate_pi(u64::MAX, 7, &AtomicBool::new(true)).is_nan());
    }
}
