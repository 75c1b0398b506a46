//! Exit codes that say more than a program's own, as workers report them for drivers and
//! executors.

/// The kernel killed the process for going over its memory limit (its grant). YARN reports
/// a container's end so, as `ContainerExitStatus.KILLED_EXCEEDED_PMEM`.
pub const OVER_MEMORY_LIMIT: i32 = -104;

/// Why a process that ended with `code` ended, where the code alone does not say.
pub fn reason(code: i32) -> Option<&'static str> {
    (code == OVER_MEMORY_LIMIT).then_some("killed for going over its memory limit")
}

/// `exit CODE`, with why when the code alone does not say: as tables and logs print an end.
pub fn describe(code: i32) -> String {
    match reason(code) {
        Some(reason) => format!("exit {code} ({reason})"),
        None => format!("exit {code}"),
    }
}
