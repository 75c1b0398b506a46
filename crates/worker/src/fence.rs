//! The fencing agent's record of its last contact with a leader, which every process's
//! wrapper reads to fence itself when no agent is left to do it. The time is kept on the
//! host's clock since boot (`/proc/uptime`), which no step of the wall clock moves, so a
//! clock set back or forward neither fences healthy work nor keeps cut-off work running.
//! The fence file's modification time is kept too, for the wrappers of processes an older
//! agent started, which read only that.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file beside the fence file that holds the last contact, in whole seconds since boot.
pub fn contact_file(fence: &Path) -> PathBuf {
    let mut name = fence.as_os_str().to_owned();
    name.push(".contact");
    PathBuf::from(name)
}

/// The time since the host booted, as `/proc/uptime` says.
///
/// # Errors
///
/// `/proc/uptime` cannot be read or is not what Linux writes.
pub fn since_boot() -> std::io::Result<Duration> {
    let text = std::fs::read_to_string("/proc/uptime")?;
    text.split_whitespace()
        .next()
        .and_then(|seconds| seconds.parse::<f64>().ok())
        .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| std::io::Error::other(format!("/proc/uptime holds `{}`", text.trim())))
}

/// Notes a contact with a leader now, beside `fence`, in one step (a reader never sees half
/// of it).
///
/// # Errors
///
/// The time since boot cannot be read, or the file cannot be written.
pub fn note_contact(fence: &Path) -> std::io::Result<()> {
    let contact = contact_file(fence);
    let written = contact.with_extension("contact.new");
    std::fs::write(&written, since_boot()?.as_secs().to_string())?;
    std::fs::rename(&written, &contact)
}

/// How long ago the last contact noted beside `fence` was, if one was noted.
pub fn since_contact(fence: &Path) -> Option<Duration> {
    let contact: u64 = std::fs::read_to_string(contact_file(fence))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(
        since_boot()
            .ok()?
            .saturating_sub(Duration::from_secs(contact)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contact_noted_now_was_less_than_a_second_ago_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let fence = dir.path().join(".fence");
        assert_eq!(since_contact(&fence), None);
        note_contact(&fence).unwrap();
        assert_eq!(contact_file(&fence), dir.path().join(".fence.contact"));
        assert!(since_contact(&fence).unwrap() < Duration::from_secs(2));
        std::fs::write(contact_file(&fence), "0").unwrap();
        assert!(since_contact(&fence).unwrap() > Duration::from_secs(1));
    }
}
