//! What the kernel says about a process (`/proc/PID/stat`), the witness
//! the end-to-end tests believe.

/// The fields of `/proc/PID/stat` the tests look at.
#[derive(Debug, Clone, Copy)]
pub struct ProcStat {
    /// One-letter state.
    pub state: char,
    /// Process group.
    pub pgrp: i32,
    /// Session.
    pub session: i32,
    /// utime + stime in clock ticks.
    pub cpu_ticks: u64,
    /// Scheduling policy (`SCHED_OTHER` 0, `SCHED_FIFO` 1, ...).
    pub policy: i32,
}

/// The freezer file of a process's v1 freezer cgroup, if it is in one.
pub fn freezer_state_file(pid: i32) -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text
        .lines()
        .find_map(|line| line.split_once(":freezer:").map(|(_, path)| path))?;
    Some(std::path::PathBuf::from(format!(
        "/sys/fs/cgroup/freezer{path}/freezer.state"
    )))
}

/// Whether `pid`'s v1 freezer cgroup is freezing or frozen: a process the
/// kernel shows runnable (`R`) in it is on its way into the freezer and
/// runs no more of its own code.
pub fn freezing(pid: i32) -> bool {
    freezer_state_file(pid)
        .and_then(|file| std::fs::read_to_string(file).ok())
        .is_some_and(|state| matches!(state.trim(), "FREEZING" | "FROZEN"))
}

/// Whether `pid` runs no more of its own code until continued or thawed:
/// stopped (`T`, or `t` under a tracer), in a freezing or frozen cgroup,
/// or with a SIGSTOP pending, which it takes before it returns to its code
/// (a loaded machine may leave it runnable, `R`, for a while first).
pub fn held(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|stat| matches!(stat.state, 'T' | 't'))
        || freezing(pid)
        || signal_pending(pid, libc::SIGSTOP).unwrap_or(false)
}

/// What a failed assertion about `pid` should show: its state, parent,
/// signal masks and freezer state, as the kernel gives them.
pub fn describe(pid: i32) -> String {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return format!("process {pid}: gone");
    };
    let lines: Vec<&str> = status
        .lines()
        .filter(|line| {
            [
                "State:", "PPid:", "SigPnd:", "ShdPnd:", "SigBlk:", "SigIgn:",
            ]
            .iter()
            .any(|key| line.starts_with(key))
        })
        .collect();
    let freezer = freezer_state_file(pid)
        .and_then(|file| std::fs::read_to_string(file).ok())
        .unwrap_or_else(|| "none".into());
    format!(
        "process {pid}: {}; freezer: {}",
        lines.join("; "),
        freezer.trim()
    )
}

/// Whether `signal` waits in process `pid`'s pending sets (its own or its
/// thread group's); `None` if the process is gone.
pub fn signal_pending(pid: i32, signal: i32) -> Option<bool> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(
        text.lines()
            .filter_map(|line| {
                let (key, mask) = line.split_once(':')?;
                matches!(key, "SigPnd" | "ShdPnd")
                    .then(|| u64::from_str_radix(mask.trim(), 16).ok())?
            })
            .any(|mask| mask & (1 << (signal - 1)) != 0),
    )
}

/// Whether the kernel shows `pid` stopped (state `T`).
pub fn stopped(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|stat| stat.state == 'T')
}

/// Reads `/proc/PID/stat`, or `None` if the process is gone.
pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = text[text.rfind(')')? + 2..].split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        cpu_ticks: fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?,
        policy: fields.get(38)?.parse().ok()?,
    })
}

/// The CPU time a process's main thread has run, in nanoseconds (the first
/// field of `/proc/PID/schedstat`), or `None` if it is gone: exact where
/// `/proc/PID/stat`'s times count whole clock ticks.
pub fn cpu_ns(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Whether a process exists and is not a zombie, from its
/// `/proc/PID/status`: reading its stat waits while it holds its exec lock
/// (a flush of a FUSE file in the middle of its execve), for as long as
/// the FUSE server likes.
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("State:"))
            .is_some_and(|state| {
                !matches!(state.trim_start().chars().next(), Some('Z' | 'X') | None)
            })
    })
}

/// Runs `read` on a thread of its own, or `None` if it did not end within
/// `deadline` (the thread is left to end when the read does): a read of a
/// process's `environ`, `stat`, `exe` or `fd/N` links and more waits while
/// the process holds its exec lock, for as long as a FUSE server likes.
pub fn within<T: Send + 'static>(
    deadline: std::time::Duration,
    read: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("procfs read".into())
        .spawn(move || {
            let _ = sender.send(read());
        })
        .ok()?;
    receiver.recv_timeout(deadline).ok()
}

/// Reads `path` with [`within`].
pub fn read_within(
    path: std::path::PathBuf,
    deadline: std::time::Duration,
) -> Option<std::io::Result<Vec<u8>>> {
    within(deadline, move || std::fs::read(path))
}

/// Processes whose environment carries `SCORED_TEST_TAG=tag` (and `SCORE_JOBID=job`).
pub fn tagged_processes(tag: &str, job: Option<u64>) -> Vec<i32> {
    let tag_entry = format!("SCORED_TEST_TAG={tag}");
    let job_entry = job.map(|job| format!("SCORE_JOBID={job}"));
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            // A process stuck in an exec (of another test's FUSE file: a
            // test's own are answered before its daemon's end) cannot be
            // told; it is named and passed over rather than hanging here.
            let path = std::path::PathBuf::from(format!("/proc/{pid}/environ"));
            let environ = match read_within(path, std::time::Duration::from_secs(2)) {
                Some(Ok(environ)) => environ,
                Some(Err(_)) => return false,
                None => {
                    eprintln!("process {pid} passed over: its environment was not read within 2 s");
                    return false;
                }
            };
            let vars: Vec<&[u8]> = environ.split(|&b| b == 0).collect();
            vars.contains(&tag_entry.as_bytes())
                && match &job_entry {
                    Some(entry) => vars.contains(&entry.as_bytes()),
                    // Job processes, not the scrun that carries the tag too.
                    None => vars.iter().any(|var| var.starts_with(b"SCORE_JOBID=")),
                }
                && alive(*pid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// The processes other than this one that hold the pipe `fd` is an end
/// of (the other end included): pid, each holding descriptor, and name
/// and command line, to say who kept a pipe open.
pub fn pipe_holders(fd: std::os::fd::BorrowedFd<'_>) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::File::from(fd.try_clone_to_owned().expect("dup")).metadata() else {
        return Vec::new();
    };
    let wanted = format!("pipe:[{}]", meta.ino());
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut holders = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if pid == me || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let held: Vec<String> = fds
            .filter_map(Result::ok)
            .filter(|fd| {
                // The link waits while its process is in an exec.
                let path = fd.path();
                within(std::time::Duration::from_secs(2), move || {
                    std::fs::read_link(path)
                })
                .is_some_and(|link| link.is_ok_and(|link| link.as_os_str() == wanted.as_str()))
            })
            .map(|fd| fd.file_name().to_string_lossy().into_owned())
            .collect();
        if held.is_empty() {
            continue;
        }
        let read = |name: &str| std::fs::read(entry.path().join(name)).unwrap_or_default();
        let cmdline: Vec<String> = read("cmdline")
            .split(|&b| b == 0)
            .filter(|arg| !arg.is_empty())
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect();
        // The status, which never waits (the stat does, in an exec).
        let status = String::from_utf8_lossy(&read("status")).into_owned();
        let ppid = status
            .lines()
            .find_map(|line| line.strip_prefix("PPid:"))
            .map(|ppid| ppid.trim().to_string())
            .unwrap_or_default();
        holders.push(format!(
            "pid {pid} (parent {ppid}, {}) descriptors {} running {:?}",
            String::from_utf8_lossy(&read("comm")).trim(),
            held.join(","),
            cmdline
        ));
    }
    holders
}
