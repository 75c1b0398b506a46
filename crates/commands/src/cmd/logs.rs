//! `muster logs`: what a driver or an executor wrote to its stdout or stderr, read from the
//! worker that ran it through the leader; `--follow` keeps reading, as `tail -f` does, until
//! the process has ended and everything it wrote is out.

use std::io::Write;
use std::os::fd::AsFd;
use std::time::Duration;

use clap::Args;
use muster_core::limits::MAX_LOG_CHUNK_BYTES;
use muster_proto::v1::{LogStream, ReadLogRequest};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::{MastersArg, runtime};
use crate::error::CliError;

/// How long `--follow` waits before reading again when nothing new was written.
const FOLLOW_PERIOD: Duration = Duration::from_millis(500);

/// `muster logs`.
#[derive(Args)]
pub struct LogsArgs {
    #[command(flatten)]
    masters: MastersArg,
    /// A driver id, or an executor as `APP_ID/EXECUTOR_ID`.
    id: String,
    /// Its standard error instead of its standard output.
    #[arg(long)]
    stderr: bool,
    /// Keep printing what it writes until it ends.
    #[arg(long, short)]
    follow: bool,
    /// The worker that ran it: needed for an executor that ended, which the masters no
    /// longer keep.
    #[arg(long, value_name = "WORKER_ID")]
    worker: Option<String>,
}

/// Prints the output, chunk by chunk, as it is read.
///
/// # Errors
///
/// No such process, a worker out of reach, or no master answered.
pub fn run(args: LogsArgs) -> Result<String, CliError> {
    let masters = args.masters.parse()?;
    let stream = if args.stderr {
        LogStream::Stderr
    } else {
        LogStream::Stdout
    };
    let mut request = ReadLogRequest {
        id: args.id,
        stream: stream.into(),
        worker_id: args.worker.unwrap_or_default(),
        max_bytes: MAX_LOG_CHUNK_BYTES,
        ..ReadLogRequest::default()
    };
    let mut out = std::io::stdout().lock();
    runtime()?.block_on(async {
        loop {
            let chunk = masters
                .call(async |mut c| c.read_log(request.clone()).await)
                .await?;
            // Once placed, asked of the same worker even after the masters forget the
            // process (an executor that ended).
            if request.worker_id.is_empty() {
                request.worker_id = chunk.worker_id;
            }
            match out.write_all(&chunk.data).and_then(|()| out.flush()) {
                Ok(()) => {}
                // The reader left (`muster logs ID | head`): nothing more is wanted.
                Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                    return Ok(String::new());
                }
                Err(error) => {
                    return Err(CliError::Failed(format!("writing the output: {error}")));
                }
            }
            request.offset += chunk.data.len() as u64;
            // Whatever the file held past this chunk is read at once.
            if request.offset < chunk.size {
                continue;
            }
            if !args.follow && request.worker_id.is_empty() && chunk.running {
                eprintln!(
                    "{}: not started on a worker yet; nothing written",
                    request.id
                );
            }
            // A process that no longer ran before the read has nothing more to write.
            if !args.follow || !chunk.running {
                return Ok(String::new());
            }
            // While nothing comes, a reader that left (`| head`) is noticed here.
            if reader_left(&out) {
                return Ok(String::new());
            }
            tokio::time::sleep(FOLLOW_PERIOD).await;
        }
    })
}

/// Whether the read end of `out` is closed (a pipe whose reader exited), without writing.
fn reader_left(out: &impl AsFd) -> bool {
    let mut fds = [PollFd::new(out.as_fd(), PollFlags::empty())];
    poll(&mut fds, PollTimeout::ZERO).is_ok()
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP))
}
