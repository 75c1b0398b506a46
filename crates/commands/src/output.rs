//! What commands print on standard output, and the one rule for a reader that has gone
//! (`muster status | head -1`): the command ends quietly, as it would have ended anyway.

use std::fmt::Display;
use std::io::Write;

/// Prints `text` and a newline. Returns `false` once nobody reads standard output any more
/// (a closed pipe), so that a command which prints as it goes can stop.
pub fn line(text: impl Display) -> bool {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").and_then(|()| out.flush()).is_ok()
}
