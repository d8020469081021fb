//! Setting the daemon up at start-up: its scheduling priority, its
//! inherited descriptors sealed, the reaper of its jobs' orphans, and the
//! check a new binary makes before an in-place restart.
#![forbid(unsafe_code)]

use std::fs;
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};

use super::sys;

/// Raises the daemon's scheduling priority so that the jobs it stops cannot
/// delay it: SCHED_FIFO at a modest priority, else nice -20, else nothing.
/// Jobs run at normal priority either way: a child drops the daemon's
/// priority as the last step before exec (`drop_daemon_priority`), and
/// under the nice fallback SCHED_RESET_ON_FORK resets it at fork too.
/// Returns what was achieved, for the log.
pub fn elevate_priority() -> String {
    const RT_PRIORITY: i32 = 10;
    // No SCHED_RESET_ON_FORK: a child creating a job's process runs at
    // this priority until just before exec (`drop_daemon_priority`).
    match sys::set_scheduler(Some(RT_PRIORITY), false) {
        Ok(()) => format!("SCHED_FIFO priority {RT_PRIORITY}"),
        Err(rt_error) => {
            let _ = sys::set_scheduler(None, true);
            match sys::set_nice(-20) {
                Ok(()) => format!("nice -20 (real-time refused: {rt_error})"),
                Err(nice_error) => format!(
                    "normal priority (real-time refused: {rt_error}; nice refused: {nice_error})"
                ),
            }
        }
    }
}

/// Runs `exe ARGS --check-state PATH` (a new scored binary checking that it
/// can take over from the handover file `path`) and waits for it. The
/// daemon waits for the check, so the check runs at the daemon's own
/// priority: at normal priority on a loaded machine it waited for the CPU
/// longer than it ran. Where that is refused it runs at normal priority.
pub fn check_handover(
    exe: &Path,
    args: &[std::ffi::OsString],
    path: &Path,
) -> io::Result<std::process::Output> {
    let mut check = Command::new(exe);
    check
        .args(args)
        .arg("--check-state")
        .arg(path)
        .stdin(Stdio::null());
    sys::set_fifo_priority_in_child(&mut check, 10);
    check.output()
}

/// Marks every descriptor the daemon inherited (other than stdio)
/// close-on-exec, so that none of them reaches a job: the daemon's own
/// descriptors are opened close-on-exec, but whatever started it may have
/// left others open. Returns how many were marked, for the log.
pub fn seal_inherited_descriptors() -> usize {
    let Ok(entries) = fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    // Collect first: the directory being read is itself a descriptor.
    let fds: Vec<i32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    fds.into_iter()
        .filter(|fd| sys::set_cloexec(*fd).is_ok())
        .count()
}

/// Makes the daemon the reaper of its jobs' orphaned descendants, so that
/// a process whose parent died is still ours to account for and reap.
pub fn become_subreaper() -> io::Result<()> {
    sys::set_child_subreaper()
}
