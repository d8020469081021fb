//! Waiting for children: `wait4` and `waitid` with each child's resource
//! usage, the stops and continues the switch and the defence against an
//! outside SIGCONT read, the ends the reaper takes, SIGCHLD itself, and
//! a short wait for a descriptor to be readable.
//! Part of the daemon's `sys` module: each call wrapped once, with `unsafe`
//! only here and in the rest of `sys`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

/// Waits at most `timeout` (to the nanosecond, unlike `epoll_wait`'s
/// milliseconds) for `fd` to be readable; whether it is.
pub fn readable_within(fd: &OwnedFd, timeout: Duration) -> io::Result<bool> {
    use nix::poll::{ppoll, PollFd, PollFlags};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    match ppoll(
        &mut fds,
        Some(nix::sys::time::TimeSpec::from_duration(timeout)),
        None,
    ) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(errno) => Err(errno.into()),
    }
}

/// How a waited-for child changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEvent {
    /// It exited with a code.
    Exited(i32),
    /// It was killed by a signal; whether it wrote a core file.
    Signaled(i32, bool),
    /// It stopped.
    Stopped,
    /// It continued.
    Continued,
}

/// One result of [`wait_any`].
#[derive(Debug, Clone, Copy)]
pub struct Waited {
    /// The child the event is about.
    pub pid: i32,
    /// What happened.
    pub event: WaitEvent,
    /// CPU time (user + system) of the child and its waited-for descendants,
    /// meaningful when it exited or was killed.
    pub cpu: Duration,
    /// Peak resident memory of the child in bytes (the largest of it and its
    /// waited-for descendants), meaningful when it exited or was killed.
    pub max_rss: u64,
}

impl Waited {
    /// The event with what `usage` (from `wait4` or `waitid`) says the
    /// child used: CPU time as user plus system, peak RSS in bytes.
    fn from_usage(pid: i32, event: WaitEvent, usage: &libc::rusage) -> Waited {
        let time = |tv: libc::timeval| {
            Duration::new(tv.tv_sec.max(0) as u64, (tv.tv_usec.max(0) as u32) * 1000)
        };
        Waited {
            pid,
            event,
            cpu: time(usage.ru_utime) + time(usage.ru_stime),
            max_rss: (usage.ru_maxrss.max(0) as u64).saturating_mul(1024),
        }
    }
}

/// `wait4(-1, WNOHANG | WUNTRACED | WCONTINUED)`: the next stop,
/// continue or end of any child, or `None` when no child has anything to
/// report. Continues matter: one that scored did not send means someone
/// else is running a switched-out job.
///
/// Not for use between fork and exec.
pub fn wait_any() -> io::Result<Option<Waited>> {
    wait4_any(libc::WNOHANG | libc::WCONTINUED)
}

/// `wait4(pid, WUNTRACED)`, blocking until that child stops or ends; `None`
/// when the alarm interrupted it or it is not our child. Waiting for one
/// pid lets the kernel pass over the other children cheaply, where
/// `wait4(-1)` examines each of them under its lock on every call.
///
/// Not for use between fork and exec.
pub fn wait_pid_blocking(pid: i32) -> io::Result<Option<Waited>> {
    match wait4_pid(pid, 0) {
        Err(error) if error.raw_os_error() == Some(libc::EINTR) => Ok(None),
        other => other,
    }
}

fn wait4_any(flags: libc::c_int) -> io::Result<Option<Waited>> {
    wait4_pid(-1, flags)
}

fn wait4_pid(target: i32, flags: libc::c_int) -> io::Result<Option<Waited>> {
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `usage` are valid, writable and live across the
    // call; wait4 writes only into them.
    let pid = unsafe { libc::wait4(target, &mut status, flags | libc::WUNTRACED, &mut usage) };
    if pid == -1 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::ECHILD) => Ok(None),
            _ => Err(error),
        };
    }
    if pid == 0 {
        return Ok(None);
    }
    let event = if libc::WIFEXITED(status) {
        WaitEvent::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        WaitEvent::Signaled(libc::WTERMSIG(status), libc::WCOREDUMP(status))
    } else if libc::WIFSTOPPED(status) {
        WaitEvent::Stopped
    } else {
        WaitEvent::Continued
    };
    Ok(Some(Waited::from_usage(pid, event, &usage)))
}

/// Waits up to `timeout` for SIGCHLD, which must be blocked, and takes it
/// off the pending set: `Ok(true)` if it came, `Ok(false)` on timeout.
///
/// Not for use between fork and exec.
pub fn wait_sigchld(timeout: Duration) -> io::Result<bool> {
    // SAFETY: an all-zero sigset_t is a valid value to initialise.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable sigset_t.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
    }
    let spec = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` and `spec` are valid for the call; a null siginfo
    // pointer is allowed.
    let ret = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &spec) };
    if ret == libc::SIGCHLD {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EAGAIN) => Ok(false),
        // Another signal interrupted the wait: say so as a wakeup.
        Some(libc::EINTR) => Ok(true),
        _ => Err(error),
    }
}

/// A `siginfo_t` from `waitid` as a pid and a [`WaitEvent`].
fn waited_event(info: &libc::siginfo_t) -> Option<(i32, WaitEvent)> {
    // SAFETY: waitid filled `info` for a SIGCHLD-like event, whose pid and
    // status fields these read.
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if pid == 0 {
        return None;
    }
    let event = match info.si_code {
        libc::CLD_EXITED => WaitEvent::Exited(status),
        libc::CLD_KILLED => WaitEvent::Signaled(status, false),
        libc::CLD_DUMPED => WaitEvent::Signaled(status, true),
        libc::CLD_STOPPED | libc::CLD_TRAPPED => WaitEvent::Stopped,
        libc::CLD_CONTINUED => WaitEvent::Continued,
        _ => return None,
    };
    Some((pid, event))
}

/// The raw `waitid(2)`, which takes a `rusage` (glibc's wrapper does not).
fn waitid_raw(
    idtype: libc::idtype_t,
    id: libc::id_t,
    options: libc::c_int,
) -> io::Result<Option<Waited>> {
    // SAFETY: all-zero is a valid value of these plain C structs.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `info` and `usage` are valid and writable across the call;
    // waitid writes only into them.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_waitid,
            idtype as libc::c_long,
            id as libc::c_long,
            &mut info as *mut libc::siginfo_t,
            options as libc::c_long,
            &mut usage as *mut libc::rusage,
        )
    };
    if ret == -1 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::ECHILD) => Ok(None),
            _ => Err(error),
        };
    }
    let Some((pid, event)) = waited_event(&info) else {
        return Ok(None);
    };
    Ok(Some(Waited::from_usage(pid, event, &usage)))
}

/// `waitid(P_PIDFD, pidfd, WEXITED | WNOHANG)`: whether the child behind
/// `pidfd` has ended, how, and what it (with its waited-for descendants)
/// used; with `keep`, it stays a zombie (`WNOWAIT`), its pid still its own.
///
/// Not for use between fork and exec.
pub fn wait_ended(pidfd: &OwnedFd, keep: bool) -> io::Result<Option<Waited>> {
    const P_PIDFD: libc::idtype_t = 3;
    let mut options = libc::WEXITED | libc::WNOHANG;
    if keep {
        options |= libc::WNOWAIT;
    }
    waitid_raw(P_PIDFD, pidfd.as_raw_fd() as libc::id_t, options)
}

/// `waitid(P_PIDFD, pidfd, WSTOPPED)`: blocks until the child behind
/// `pidfd` has stopped and takes its stop report, in one call, at once
/// if it stopped already. Waiting for one child, the caller is woken by
/// that child's change only, as a killpg/waitpid program is, where
/// SIGCHLD wakes it for every child. `Ok(Some(true))` once it stopped;
/// `Ok(Some(false))` when no stop can come: the child has ended (the
/// kernel ends the wait with `ECHILD` as the child dies, and leaves the
/// zombie to [`wait_ended`]) or is none of the caller's; `Ok(None)` when
/// a signal (the alarm of [`set_alarm`](super::set_alarm)) interrupted
/// the wait.
///
/// Not for use between fork and exec.
pub fn wait_stop(pidfd: &OwnedFd) -> io::Result<Option<bool>> {
    const P_PIDFD: libc::idtype_t = 3;
    match waitid_report(P_PIDFD, pidfd.as_raw_fd() as libc::id_t, libc::WSTOPPED) {
        Ok(Some((_, event))) => Ok(Some(event == WaitEvent::Stopped)),
        Ok(None) => Ok(Some(false)),
        Err(error) if error.raw_os_error() == Some(libc::EINTR) => Ok(None),
        Err(error) => Err(error),
    }
}

/// `waitid(2)` for a report alone: the child it is about and what
/// happened, without what it used. A stop, a continue or a zombie left in
/// place (`WNOWAIT`) has no use for the kernel's tally of the child's
/// (and its threads' and waited-for descendants') times, which waitid
/// makes whenever it is given a `rusage`: a keeper takes each rank's stop
/// report in a switch, on a CPU the other ranks need to stop.
fn waitid_report(
    idtype: libc::idtype_t,
    id: libc::id_t,
    options: libc::c_int,
) -> io::Result<Option<(i32, WaitEvent)>> {
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is valid and writable across the call; waitid writes
    // only into it (no rusage is asked for).
    let ret = unsafe { libc::waitid(idtype, id, &mut info, options) };
    if ret == -1 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::ECHILD) => Ok(None),
            _ => Err(error),
        };
    }
    Ok(waited_event(&info))
}

/// `waitid(P_ALL, WSTOPPED | WCONTINUED | WNOHANG)`: the next stop or
/// continue of any child, which it takes (ends are not looked at), and
/// the child's pid.
///
/// Not for use between fork and exec.
pub fn wait_stop_or_continue() -> io::Result<Option<(i32, WaitEvent)>> {
    waitid_report(
        libc::P_ALL,
        0,
        libc::WSTOPPED | libc::WCONTINUED | libc::WNOHANG,
    )
}

/// `waitid(P_ALL, WEXITED | WNOHANG | WNOWAIT)`: some child that has
/// ended, left a zombie.
///
/// Not for use between fork and exec.
pub fn peek_ended() -> io::Result<Option<i32>> {
    Ok(waitid_report(
        libc::P_ALL,
        0,
        libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
    )?
    .map(|(pid, _)| pid))
}

/// Whether this process has a child at all, alive or a zombie
/// (`waitid(P_ALL, WEXITED | WNOHANG | WNOWAIT)` is not `ECHILD`).
///
/// Not for use between fork and exec.
pub fn has_children() -> io::Result<bool> {
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is valid and writable across the call; waitid writes
    // only into it (no usage asked for).
    let ret = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if ret == -1 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::ECHILD) => Ok(false),
            _ => Err(error),
        };
    }
    Ok(true)
}

/// `wait4(pid, WNOHANG)`: reaps that child if it has ended.
///
/// Not for use between fork and exec.
pub fn reap(pid: i32) -> io::Result<Option<Waited>> {
    wait4_pid(pid, libc::WNOHANG)
}
