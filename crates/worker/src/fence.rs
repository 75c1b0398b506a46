//! The fencing agent's record of its last contact with a leader, which every process's
//! wrapper reads to fence itself when no agent is left to do it. The time is kept on the
//! host's clock since boot (`/proc/uptime`), which no step of the wall clock moves, so a
//! clock set back or forward neither fences healthy work nor keeps cut-off work running.
//!
//! The contact file holds the boot's id and the seconds since that boot, and has the fence
//! file's modification time, which the agent sets to the same instant. It counts only while
//! both hold: a contact of an earlier boot, or one older than the fence file's time (an
//! older agent, which updates only that, took over), is not read, and the fence file's time
//! is, as older wrappers read it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The file beside the fence file that holds the last contact.
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

/// This boot's id, as Linux gives it.
fn boot_id() -> std::io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_owned())
}

/// Notes a contact with a leader now, beside `fence`, in one step (a reader never sees half
/// of it), with the modification time `at` the agent gave the fence file.
///
/// # Errors
///
/// The boot's id or the time since boot cannot be read, or the file cannot be written.
pub fn note_contact(fence: &Path, at: SystemTime) -> std::io::Result<()> {
    let contact = contact_file(fence);
    let written = contact.with_extension("contact.new");
    // A whole line: `read` fails on a last line without its newline.
    let text = format!("{} {}\n", boot_id()?, since_boot()?.as_secs());
    std::fs::write(&written, text)?;
    std::fs::File::options()
        .write(true)
        .open(&written)?
        .set_modified(at)?;
    std::fs::rename(&written, &contact)
}

/// How long ago the last contact noted beside `fence` was, if one of this boot was noted
/// and the fence file was not touched since by an agent that notes none.
pub fn since_contact(fence: &Path) -> Option<Duration> {
    let contact = contact_file(fence);
    let modified = |path: &Path| std::fs::metadata(path).ok()?.modified().ok();
    if modified(fence)? > modified(&contact)? {
        return None;
    }
    let text = std::fs::read_to_string(&contact).ok()?;
    let (boot, seconds) = text.trim().split_once(' ')?;
    if boot != boot_id().ok()? {
        return None;
    }
    let noted = Duration::from_secs(seconds.parse().ok()?);
    since_boot().ok()?.checked_sub(noted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence_touched(fence: &Path, at: SystemTime) {
        std::fs::File::options()
            .write(true)
            .open(fence)
            .unwrap()
            .set_modified(at)
            .unwrap();
    }

    #[test]
    fn a_contact_noted_now_was_less_than_a_second_ago_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let fence = dir.path().join(".fence");
        std::fs::write(&fence, "15000").unwrap();
        assert_eq!(since_contact(&fence), None);
        let now = SystemTime::now();
        fence_touched(&fence, now);
        note_contact(&fence, now).unwrap();
        assert_eq!(contact_file(&fence), dir.path().join(".fence.contact"));
        assert!(since_contact(&fence).unwrap() < Duration::from_secs(2));
    }

    #[test]
    fn a_contact_of_another_boot_or_older_than_the_fence_file_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let fence = dir.path().join(".fence");
        std::fs::write(&fence, "15000").unwrap();
        let now = SystemTime::now();
        fence_touched(&fence, now);
        note_contact(&fence, now).unwrap();
        // An older agent took over and touched the fence file only.
        fence_touched(&fence, now + Duration::from_secs(1));
        assert_eq!(since_contact(&fence), None);
        // A contact of an earlier boot, from later in it than this boot has lasted.
        fence_touched(&fence, now);
        let contact = contact_file(&fence);
        std::fs::write(&contact, format!("another-boot {}", u32::MAX)).unwrap();
        fence_touched(&contact, now);
        assert_eq!(since_contact(&fence), None);
    }
}
