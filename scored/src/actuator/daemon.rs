//! Setting the daemon up at start-up: its scheduling priority, its
//! inherited descriptors sealed, the reaper of its jobs' orphans, and the
//! check a new binary makes before an in-place restart.
#![forbid(unsafe_code)]

use std::fs;
use std::io;
use std::path::Path;

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
/// It is started with no descriptor of the daemon's but its pipes
/// (`sys::spawn_clean`): a copy of a user's FUSE file, closed by its exec,
/// would make the check, and so the daemon, wait for that file's server.
pub fn check_handover(
    exe: &Path,
    args: &[std::ffi::OsString],
    path: &Path,
) -> io::Result<std::process::Output> {
    use std::ffi::CString;
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::ffi::OsStrExt;
    let c_string = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte"))
    };
    let program = c_string(exe.as_os_str().as_bytes())?;
    let mut words = vec![program.clone()];
    for arg in args {
        words.push(c_string(arg.as_bytes())?);
    }
    words.push(c_string(b"--check-state")?);
    words.push(c_string(path.as_os_str().as_bytes())?);
    let mut environment = Vec::new();
    for (key, value) in std::env::vars_os() {
        let mut entry = key.as_bytes().to_vec();
        entry.push(b'=');
        entry.extend_from_slice(value.as_bytes());
        if let Ok(entry) = CString::new(entry) {
            environment.push(entry);
        }
    }
    let pointers = |strings: &[CString]| {
        let mut list: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        list.push(std::ptr::null());
        list
    };
    let null = fs::OpenOptions::new().read(true).open("/dev/null")?;
    let (out_read, out_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (err_read, err_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let pid = sys::spawn_clean(
        &program,
        &pointers(&words),
        &pointers(&environment),
        [
            null.as_raw_fd(),
            out_write.as_raw_fd(),
            err_write.as_raw_fd(),
        ],
        false,
        Some(10),
    )?;
    drop((null, out_write, err_write));
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut open = [Some(out_read), Some(err_read)];
    while open.iter().any(Option::is_some) {
        let mut fds: Vec<nix::poll::PollFd> = open
            .iter()
            .flatten()
            .map(|fd| nix::poll::PollFd::new(fd.as_fd(), nix::poll::PollFlags::POLLIN))
            .collect();
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(error) => return Err(error.into()),
        }
        drop(fds);
        for (slot, sink) in open.iter_mut().zip([&mut stdout, &mut stderr]) {
            let Some(fd) = slot else { continue };
            let mut buffer = [0u8; 4096];
            match nix::unistd::read(&*fd, &mut buffer) {
                Ok(0) => *slot = None,
                Ok(n) => sink.extend_from_slice(&buffer[..n]),
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
                Err(_) => *slot = None,
            }
        }
    }
    let status = loop {
        match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => break code << 8,
            Ok(nix::sys::wait::WaitStatus::Signaled(_, signal, _)) => break signal as i32,
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(error) => return Err(error.into()),
        }
    };
    Ok(std::process::Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(status),
        stdout,
        stderr,
    })
}

/// Opens /dev/null on each of descriptors 0 to 2 that is closed, so that
/// they are always the daemon's own: no descriptor a user hands over is
/// given one of those numbers (`sys::spawn_clean` relies on it).
pub fn fill_standard_descriptors() {
    while let Ok(null) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let fd = std::os::fd::IntoRawFd::into_raw_fd(null);
        if fd > 2 {
            let _ = sys::close(fd);
            return;
        }
        // The lowest free number, one of 0 to 2: kept open for good.
    }
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
