//! The driver's state machine (`muster_driver::driver::machine`) driven by scripts
//! (`tests/driver/scripts`), with no streams and no clock: each script loads a job file from
//! `tests/driver/files`, lets time pass, and feeds the driver what executors and the masters
//! say. Every order the driver gives is printed: `link1 ← run t0 (stage 0, index 0, attempt
//! 0)`, `link1 ← kill t3`, `link1 ← close`, `masters ← limit 2`, `masters ← release [1]`.
//!
//! Commands:
//!
//! * `file NAME`: a driver for `files/NAME.toml`, its run starting now;
//! * `time ms=N`: time passes (the driver is ticked when something falls due);
//! * `join link=N executor=N host=H [cores=N] [rack=R]`, `end link=N task=N
//!   succeeded|failed|killed [ms=N] [message=M]`, `gone link=N`: what executors' streams say;
//! * `masters executor=N running|failed|exited|lost|killed [cores=N] [code=N]`,
//!   `preempted executor=N`: what the masters say;
//! * `unreachable executor=N`: a run order could not be sent;
//! * `revive`, `check [allocate=false]`, `not_sent limit=N`;
//! * `tasks`: every attempt as the report has it; `progress`.

use std::error::Error;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use goldenscript::{Command, Context};
use muster_core::ids::ExecutorId;
use muster_driver::driver::machine::{Driver, Input, Order};
use muster_driver::spec::JobFile;
use muster_proto::v1::app_message::Body as AppRequest;
use muster_proto::v1::{
    ExecutorEvent, ExecutorHello, ExecutorState, Resources, TaskEnded, TaskState,
};

fn run_script(path: &std::path::Path) {
    goldenscript::run(&mut Runner::new(), path).expect("goldenscript failed");
}

test_each_file::test_each_path! { in "crates/driver/tests/driver/scripts" as driver => run_script }

type Output = Result<String, Box<dyn Error>>;

struct Runner {
    driver: Option<Driver>,
    /// When the script began: times print relative to it.
    start: Instant,
    now: Instant,
}

impl Runner {
    fn new() -> Self {
        let start = Instant::now();
        Self {
            driver: None,
            start,
            now: start,
        }
    }

    fn driver(&mut self) -> Result<&mut Driver, Box<dyn Error>> {
        self.driver
            .as_mut()
            .ok_or_else(|| "no driver: load a file first".into())
    }

    fn step(&mut self, input: Input) -> Output {
        let now = self.now;
        let orders = self.driver()?.step(now, input);
        Ok(render(&orders))
    }
}

impl goldenscript::Runner for Runner {
    type Command = Command;

    fn run(&mut self, command: &Command, _context: &Context) -> Output {
        let mut args = command.consume_args();
        let output = match command.name.as_str() {
            "file" => {
                let name = args.next_pos().ok_or("file NAME")?;
                let dir =
                    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/driver/files");
                let file = JobFile::read(&dir.join(format!("{name}.toml")))?;
                self.driver = Some(Driver::new(file, self.now));
                String::new()
            }
            "time" => {
                let end = self.now + Duration::from_millis(number(args.take_key("ms"))?);
                let mut out = String::new();
                // Ticked at each moment something falls due, as the shell's timer does.
                while let Some(due) = self.driver()?.next_due().filter(|&due| due <= end) {
                    self.now = self.now.max(due);
                    let now = self.now;
                    let orders = self.driver()?.tick(now);
                    let at = self.now.duration_since(self.start);
                    if !orders.is_empty() {
                        writeln!(out, "t={}ms", at.as_millis())?;
                    }
                    out.push_str(&render(&orders));
                    if self.driver()?.next_due() == Some(due) {
                        break;
                    }
                }
                self.now = end;
                out
            }
            "join" => {
                let hello = ExecutorHello {
                    executor_id: number(args.take_key("executor"))?,
                    host: args.take_key("host").ok_or("host=")?.to_owned(),
                    rack: args.take_key("rack").unwrap_or_default().to_owned(),
                    cores: args.take_key("cores").map_or(Ok(1), |c| c.parse())?,
                };
                let link = number(args.take_key("link"))?;
                self.step(Input::Joined { link, hello })?
            }
            "end" => {
                let link = number(args.take_key("link"))?;
                let state = match args.next_pos().ok_or("end state")? {
                    "succeeded" => TaskState::Succeeded,
                    "failed" => TaskState::Failed,
                    "killed" => TaskState::Killed,
                    other => return Err(format!("unknown task state {other}").into()),
                };
                let end = TaskEnded {
                    task_id: number(args.take_key("task"))?,
                    state: state.into(),
                    duration_ms: args.take_key("ms").map_or(Ok(100), str::parse)?,
                    message: args.take_key("message").unwrap_or_default().to_owned(),
                    ..TaskEnded::default()
                };
                self.step(Input::Ended { link, end })?
            }
            "gone" => self.step(Input::Gone {
                link: number(args.take_key("link"))?,
            })?,
            "masters" => {
                let executor_id = number(args.take_key("executor"))?;
                let state = match args.next_pos().ok_or("executor state")? {
                    "running" => ExecutorState::Running,
                    "failed" => ExecutorState::Failed,
                    "exited" => ExecutorState::Exited,
                    "lost" => ExecutorState::Lost,
                    "killed" => ExecutorState::Killed,
                    other => return Err(format!("unknown executor state {other}").into()),
                };
                let event = ExecutorEvent {
                    executor_id,
                    state: state.into(),
                    exit_code: args.take_key("code").map(str::parse).transpose()?,
                    resources: Some(Resources {
                        cores: args.take_key("cores").map_or(Ok(1), str::parse)?,
                        ..Resources::default()
                    }),
                    ..ExecutorEvent::default()
                };
                self.step(Input::Masters(event))?
            }
            "preempted" => self.step(Input::Preempted(ExecutorId(number(
                args.take_key("executor"),
            )?)))?,
            "unreachable" => self.step(Input::Unreachable(ExecutorId(number(
                args.take_key("executor"),
            )?)))?,
            "revive" => self.step(Input::Revive)?,
            "check" => {
                let allocate = args.take_key("allocate").map_or(Ok(true), str::parse)?;
                self.step(Input::Check { allocate })?
            }
            "not_sent" => self.step(Input::LimitNotSent(number(args.take_key("limit"))?))?,
            "tasks" => {
                let mut out = String::new();
                for task in self.driver()?.report().tasks {
                    write!(
                        out,
                        "{} {} #{}.{} on {} ({}) {:?}",
                        task.job,
                        task.stage,
                        task.index,
                        task.attempt,
                        task.executor,
                        task.locality,
                        task.state
                    )?;
                    if task.speculative {
                        out.push_str(" speculative");
                    }
                    if let Some(reason) = task.reason {
                        write!(out, ": {reason}")?;
                    }
                    out.push('\n');
                }
                out
            }
            "progress" => {
                let driver = self.driver()?;
                let p = driver.progress();
                format!(
                    "jobs {}/{} ended, tasks {}/{} done, {} running, {} executors, done {}\n",
                    p.jobs_ended,
                    p.jobs,
                    p.tasks_done,
                    p.tasks,
                    p.running,
                    p.executors,
                    driver.is_done()
                )
            }
            name => return Err(format!("unknown command {name}").into()),
        };
        args.reject_next()?;
        Ok(output)
    }
}

fn number<T: std::str::FromStr>(value: Option<&str>) -> Result<T, Box<dyn Error>>
where
    T::Err: Error + 'static,
{
    Ok(value.ok_or("missing a number")?.parse()?)
}

/// The orders, one a line.
fn render(orders: &[Order]) -> String {
    let mut out = String::new();
    for order in orders {
        let _ = match order {
            Order::Run { link, task, .. } => writeln!(
                out,
                "link{link} ← run t{} (index {}, attempt {})",
                task.task_id, task.partition, task.attempt
            ),
            Order::Kill { link, task } => writeln!(out, "link{link} ← kill t{}", task.0),
            Order::Close { link } => writeln!(out, "link{link} ← close"),
            Order::Masters(request) => match request.as_ref() {
                AppRequest::SetLimit(limit) => {
                    writeln!(out, "masters ← limit {:?}", limit.executor_limit)
                }
                AppRequest::Release(release) => {
                    writeln!(out, "masters ← release {:?}", release.executor_ids)
                }
                other => writeln!(out, "masters ← {other:?}"),
            },
        };
    }
    out
}
