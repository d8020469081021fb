//! The daemon's system calls that `nix` does not wrap safely, each wrapped
//! once so that call sites stay safe: `wait4` (with resource usage),
//! pidfds, scheduling policy, the child-subreaper flag, the parent-death
//! signal, descriptors received or handed over, peer groups; the waits
//! for children are in `sys/wait.rs`. With the child's side of a fork
//! (`actuator/spawn.rs`), the only place of the daemon's crate with
//! `unsafe`.
//!
//! Everything here may be called between `fork` and `exec` unless its doc
//! says otherwise: no allocation, no locks, only the system call.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

mod clone;
mod wait;
pub use clone::{
    clone_vfork, futex_wait, futex_wake, reap_replacing, spawn_clean, ChildStack, ReplacingTask,
};

pub use wait::{
    has_children, peek_ended, readable_within, reap, wait_any, wait_ended, wait_pid_blocking,
    wait_sigchld, wait_stop, wait_stop_or_continue, WaitEvent, Waited,
};

/// Turns a `-1` return into the thread's `errno`.
fn cvt(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

extern "C" fn on_alarm(_signal: libc::c_int) {
    // Nothing: the signal only interrupts a blocking wait.
}

/// Installs a SIGALRM handler that does nothing, without SA_RESTART, so
/// that the alarm of [`set_alarm`] interrupts [`wait_pid_blocking`].
pub fn install_alarm_handler() -> io::Result<()> {
    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_alarm as *const () as libc::sighandler_t;
    action.sa_flags = 0;
    // SAFETY: `action.sa_mask` is a valid sigset_t inside `action`.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is a valid sigaction whose handler is an
    // async-signal-safe function that does nothing.
    cvt(unsafe { libc::sigaction(libc::SIGALRM, &action, std::ptr::null_mut()) } as libc::c_long)?;
    Ok(())
}

/// Arms the real-time interval timer to ring every `every` until disarmed
/// (zero disarms it). A periodic alarm, not a one-shot one: a blocking
/// wait entered just after a single alarm rang would have nothing left to
/// interrupt it.
pub fn set_alarm(every: Duration) -> io::Result<()> {
    let interval = libc::timeval {
        tv_sec: every.as_secs() as libc::time_t,
        tv_usec: every.subsec_micros() as libc::suseconds_t,
    };
    let timer = libc::itimerval {
        it_interval: interval,
        it_value: interval,
    };
    // SAFETY: `timer` is a valid itimerval; the old value is not asked for.
    let ret = unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) };
    cvt(ret as libc::c_long)?;
    Ok(())
}

/// `pidfd_open(pid, 0)`: a handle on a process that stays valid (and
/// refers to that process only) even after its pid is reused.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // or -1; no memory is passed.
    let fd = cvt(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `pidfd_send_signal(pidfd, signal, NULL, 0)`.
pub fn pidfd_send_signal(pidfd: &OwnedFd, signal: i32) -> io::Result<()> {
    // SAFETY: the descriptor is open (borrowed from an OwnedFd) and a null
    // siginfo pointer is allowed by the call.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })?;
    Ok(())
}

/// `kill(pid, signal)` for any signal number, real-time ones included
/// (which nix has no name for); a negative `pid` is a process group, as
/// for kill(2).
pub fn kill_number(pid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: kill takes plain integers.
    cvt(unsafe { libc::kill(pid, signal) } as libc::c_long)?;
    Ok(())
}

/// Sets the calling thread's policy: `SCHED_FIFO` at `priority`, or
/// `SCHED_OTHER` when `priority` is `None`; with `reset_on_fork`, children
/// start at normal policy and non-negative nice.
pub fn set_scheduler(priority: Option<i32>, reset_on_fork: bool) -> io::Result<()> {
    let mut policy = if priority.is_some() {
        libc::SCHED_FIFO
    } else {
        libc::SCHED_OTHER
    };
    if reset_on_fork {
        policy |= libc::SCHED_RESET_ON_FORK;
    }
    let param = libc::sched_param {
        sched_priority: priority.unwrap_or(0),
    };
    // SAFETY: `param` is a valid sched_param that lives across the call.
    cvt(unsafe { libc::sched_setscheduler(0, policy, &param) } as libc::c_long)?;
    Ok(())
}

/// Sets the nice value of the calling process.
pub fn set_nice(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority takes plain integers.
    cvt(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } as libc::c_long)?;
    Ok(())
}

/// Sets the I/O priority of the calling process (ioprio_set(2), the value
/// as ioprio_get gives it).
pub fn set_io_priority(value: u32) -> io::Result<()> {
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    // SAFETY: ioprio_set takes plain integers.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0 as libc::c_long,
            libc::c_long::from(value),
        )
    })?;
    Ok(())
}

/// Makes the calling process the reaper of its orphaned descendants.
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag.
    cvt(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } as libc::c_long)?;
    Ok(())
}

/// Asks the kernel to send `signal` to the calling process when its parent dies.
pub fn set_parent_death_signal(signal: i32) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes an integer signal number.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) } as libc::c_long)?;
    Ok(())
}

/// `setgroups`, `setgid`, `setuid`, in that order, each checked: the only
/// correct order when dropping root for a user (sudo-rs `set_target_user`).
/// Raw system calls, which change the calling thread alone (the C library
/// would signal the threads of the keeper whose memory a child shares).
pub fn become_user(uid: u32, gid: u32, groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: `groups` is a valid slice for the length passed.
    cvt(unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) })?;
    // SAFETY: setgid and setuid take plain integers.
    cvt(unsafe { libc::syscall(libc::SYS_setgid, gid) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::syscall(libc::SYS_setuid, uid) })?;
    Ok(())
}

/// `setsid()`: makes the calling process the leader of a new session and
/// of a new process group, both with its pid as id, and without a
/// controlling terminal.
pub fn new_session() -> io::Result<()> {
    nix::unistd::setsid()?;
    Ok(())
}

/// `ioctl(fd, TIOCSCTTY, 0)`: makes the terminal open on `fd` the
/// controlling terminal of the calling session leader, and its process
/// group the terminal's foreground group. With 0 the kernel never takes
/// the terminal away from another session, even for root.
pub fn take_controlling_terminal(fd: RawFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument; a descriptor that is not
    // an open terminal only makes the call fail.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0 as libc::c_int) } as libc::c_long)?;
    Ok(())
}

/// The session whose controlling terminal the terminal open on `fd` is
/// (`TIOCGSID`), or `None` when it is no session's, or not a terminal.
///
/// Not for use between fork and exec.
pub fn terminal_session(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<Option<i32>> {
    let mut session: libc::pid_t = 0;
    // SAFETY: TIOCGSID writes one pid_t into `session`, which is valid and
    // writable across the call.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGSID, &mut session) };
    if ret == -1 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::ENOTTY) => Ok(None),
            _ => Err(error),
        };
    }
    Ok(Some(session))
}

/// `chdir` to a NUL-terminated path prepared before fork.
pub fn chdir(path: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: `path` is a valid NUL-terminated string.
    cvt(unsafe { libc::chdir(path.as_ptr()) } as libc::c_long)?;
    Ok(())
}

/// Opens a rank's output file (`scrun -output=`) and makes it the
/// descriptor `target` (1 or 2), between fork and exec, once the rank has
/// its user's identity: created with the user's umask if it is missing,
/// emptied if `truncate` (the job's first process to name it), and written
/// at its end (several ranks may share it). A FIFO that no process reads
/// is refused at once (`ENXIO`) rather than waited for; the descriptor the
/// program gets blocks as a shell's redirection would.
pub fn open_output(path: &std::ffi::CStr, truncate: bool, target: RawFd) -> io::Result<()> {
    let mut flags =
        libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_NOCTTY | libc::O_NONBLOCK;
    if truncate {
        flags |= libc::O_TRUNC;
    }
    // SAFETY: `path` is a valid NUL-terminated string; open takes plain
    // integers otherwise.
    let fd =
        cvt(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, 0o666) } as libc::c_long)?
            as RawFd;
    // SAFETY: fcntl on a descriptor this function owns, with plain integers.
    let blocking = cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_APPEND) } as libc::c_long);
    let installed = blocking.and_then(|_| install_stdio(fd, target));
    if fd != target {
        let _ = close(fd);
    }
    installed
}

/// Writes `bytes` to `path` in one `open`+`write`+`close`, for joining a
/// cgroup between fork and exec.
pub fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated; the flags are plain integers.
    let fd = cvt(
        unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) } as libc::c_long,
    )? as i32;
    // SAFETY: `bytes` is valid for its length and `fd` is open.
    let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    let error = io::Error::last_os_error();
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    if written < 0 {
        return Err(error);
    }
    Ok(())
}

/// Closes (or with `cloexec`, marks close-on-exec) every descriptor from
/// 3 up except the first of each pair of `keep` (increasing) and `last`
/// (above them all), with `close_range` (Linux 5.9; `CLOSE_RANGE_CLOEXEC`,
/// 5.11). Fails with ENOSYS or EINVAL on older kernels, where
/// [`set_cloexec`] at start-up has marked the descriptors the daemon
/// inherited. Only system calls: safe between fork and exec.
pub fn close_from_3_except(keep: &[(RawFd, RawFd)], last: RawFd, cloexec: bool) -> io::Result<()> {
    let flags = if cloexec {
        libc::CLOSE_RANGE_CLOEXEC
    } else {
        0
    };
    let range = |first: libc::c_uint, last: libc::c_uint| -> io::Result<()> {
        if first > last {
            return Ok(());
        }
        // SAFETY: close_range takes plain integers and closes (or marks)
        // descriptors of the calling process only.
        cvt(unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) })?;
        Ok(())
    };
    let mut first: libc::c_uint = 3;
    for fd in keep.iter().map(|(fd, _)| *fd).chain(std::iter::once(last)) {
        let Ok(fd) = libc::c_uint::try_from(fd) else {
            continue;
        };
        if fd < first {
            continue;
        }
        range(first, fd - 1)?;
        match fd.checked_add(1) {
            Some(next) => first = next,
            None => return Ok(()),
        }
    }
    range(first, libc::c_uint::MAX)
}

/// A copy of `fd` numbered `floor` or above, close-on-exec. Only a system
/// call.
pub fn dup_above(fd: RawFd, floor: RawFd) -> io::Result<RawFd> {
    // SAFETY: fcntl with F_DUPFD_CLOEXEC takes plain integers.
    let copy = cvt(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, floor) } as libc::c_long)?;
    Ok(copy as RawFd)
}

/// Raises the descriptor limit of the calling process so that numbers
/// below `needed` can be used, as far as it may (a root process raises
/// its hard limit too); what it cannot is left for the `dup` that needs
/// it to report. Only system calls.
pub fn make_room_for_descriptors(needed: RawFd) {
    let needed = needed.max(0) as u64;
    let Ok((soft, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    else {
        return;
    };
    if soft >= needed {
        return;
    }
    let raised = nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_NOFILE,
        needed,
        hard.max(needed),
    );
    if raised.is_err() {
        let _ = nix::sys::resource::setrlimit(
            nix::sys::resource::Resource::RLIMIT_NOFILE,
            needed.min(hard),
            hard,
        );
    }
}

/// Closes a descriptor. Only a system call.
pub fn close(fd: RawFd) -> io::Result<()> {
    // SAFETY: close takes a plain integer; the caller no longer uses `fd`.
    cvt(unsafe { libc::close(fd) } as libc::c_long)?;
    Ok(())
}

/// Removes `fd` from the set `epoll`. Closing a descriptor removes it only
/// once every copy of it is closed, and until then the set would go on
/// reporting it; so a descriptor in a set is removed before it is closed.
///
/// Not for use between fork and exec.
pub fn epoll_remove(epoll: &OwnedFd, fd: RawFd) -> io::Result<()> {
    // SAFETY: both descriptors are open; EPOLL_CTL_DEL ignores the event.
    let ret = unsafe {
        libc::epoll_ctl(
            epoll.as_raw_fd(),
            libc::EPOLL_CTL_DEL,
            fd,
            std::ptr::null_mut(),
        )
    };
    cvt(ret as libc::c_long)?;
    Ok(())
}

/// Makes `fd` the calling process's descriptor `target` (0, 1 or 2) for
/// exec: `dup2`, or, when it is `target` already, clearing its
/// close-on-exec flag, as `std::process::Command` does for stdio.
pub fn install_stdio(fd: RawFd, target: RawFd) -> io::Result<()> {
    if fd == target {
        return keep_on_exec(fd);
    }
    // SAFETY: dup2 takes plain integers; the new descriptor is not
    // close-on-exec.
    cvt(unsafe { libc::dup2(fd, target) } as libc::c_long)?;
    Ok(())
}

/// Sets the close-on-exec flag of a descriptor.
pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl with F_GETFD/F_SETFD takes plain integers; a descriptor
    // that is not open only makes it fail with EBADF.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) } as libc::c_long)?;
    let flags = flags as libc::c_int | libc::FD_CLOEXEC;
    // SAFETY: as above.
    let ret = unsafe { libc::fcntl(fd, libc::F_SETFD, flags) };
    cvt(ret as libc::c_long)?;
    Ok(())
}

/// Clears the close-on-exec flag of a descriptor, so that it survives the
/// daemon's in-place restart (execve of the same process).
pub fn keep_on_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl with F_GETFD/F_SETFD takes plain integers; a descriptor
    // that is not open only makes it fail with EBADF.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) } as libc::c_long)?;
    let flags = flags as libc::c_int & !libc::FD_CLOEXEC;
    // SAFETY: as above.
    let ret = unsafe { libc::fcntl(fd, libc::F_SETFD, flags) };
    cvt(ret as libc::c_long)?;
    Ok(())
}

/// Takes ownership of a descriptor the previous image of this process
/// handed over across an in-place restart, after checking that it is open.
/// The caller adopts each handed-over number once, and only numbers listed
/// in the state the previous image wrote; the flag close-on-exec is set
/// again so that jobs never inherit it.
pub fn adopt_descriptor(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 3 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("descriptor {fd} is a standard stream, not one handed over"),
        ));
    }
    set_cloexec(fd)?;
    // SAFETY: `set_cloexec` succeeded, so `fd` is open; it was opened by the
    // previous image of this process and left open across execve for us,
    // and the caller adopts each number once, so no other owner closes it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The parent process id of the caller.
pub fn parent_pid() -> i32 {
    // SAFETY: getppid cannot fail.
    unsafe { libc::getppid() }
}

/// Clock ticks per second, the unit of CPU times in /proc.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf takes an integer name.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

/// The size of a memory page.
pub fn page_size() -> u64 {
    // SAFETY: sysconf takes an integer name.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as u64
    } else {
        4096
    }
}

/// Gives the calling process the signal state a program started from a
/// shell has: every signal at its default disposition except those in
/// `ignored` (bit `n - 1` for signal `n`), which are ignored, and an empty
/// signal mask. The daemon's own handlers are reset by exec anyway, but
/// its ignored signals and its mask (blocked for the signalfd) are not.
/// Only the signals in `change` are set: the caller passes those whose
/// disposition differs (see [`ignored_signals`]), which spares a launch
/// sixty system calls per process.
///
/// Signals the C library reserves for itself (32 and 33 on glibc) are
/// refused by its `sigaction`; they are set through the system call itself
/// ([`raw_set_disposition`]), since a program inherits them like any other.
pub fn reset_signals(ignored: u64, change: u64) -> io::Result<()> {
    for signal in 1..=64 {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP || change & (1 << (signal - 1)) == 0 {
            continue;
        }
        let handler = if ignored & (1 << (signal - 1)) != 0 {
            libc::SIG_IGN
        } else {
            libc::SIG_DFL
        };
        // SAFETY: an all-zero sigaction is a valid value to fill in.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = handler;
        // SAFETY: `action.sa_mask` is a valid sigset_t inside `action`.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: `action` is a valid sigaction naming SIG_IGN or SIG_DFL;
        // no handler code is installed. A refused number (EINVAL) is one
        // the C library keeps for itself.
        let ret = unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) };
        if ret == -1 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EINVAL) {
                return Err(error);
            }
            raw_set_disposition(signal, handler)?;
        }
    }
    // SAFETY: an all-zero sigset_t is a valid value to initialise.
    let mut empty: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `empty` is a valid, writable sigset_t; a null old-set
    // pointer is allowed.
    let ret = unsafe {
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut())
    };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    Ok(())
}

/// The kernel's `struct sigaction`, as `rt_sigaction(2)` reads it (not the
/// C library's): the handler, the flags, the restorer on the architectures
/// that have one, and a 64-signal mask in words of `unsigned long`: 24
/// bytes on RISC-V, 32 on x86-64 and AArch64 (the crate refuses 32-bit
/// targets, see `lib.rs`).
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    #[cfg(not(target_arch = "riscv64"))]
    restorer: usize,
    mask: [libc::c_ulong; SIGSET_BYTES / std::mem::size_of::<libc::c_ulong>()],
}

/// The size of the kernel's signal set (64 signals), the last argument of
/// `rt_sigaction(2)`.
const SIGSET_BYTES: usize = 8;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const KERNEL_SIGACTION_SIZE: usize = 32;
#[cfg(target_arch = "riscv64")]
const KERNEL_SIGACTION_SIZE: usize = 24;

// The layout above is the kernel's on every architecture it is built for.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
const _: () = assert!(std::mem::size_of::<KernelSigaction>() == KERNEL_SIGACTION_SIZE);

/// `rt_sigaction(signal, {handler, no flags, empty mask})` without the C
/// library, for the signals it keeps to itself.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
fn raw_set_disposition(signal: i32, handler: libc::sighandler_t) -> io::Result<()> {
    let action = KernelSigaction {
        handler,
        flags: 0,
        #[cfg(not(target_arch = "riscv64"))]
        restorer: 0,
        mask: [0; SIGSET_BYTES / std::mem::size_of::<libc::c_ulong>()],
    };
    // SAFETY: `action` outlives the call and has the layout and size of the
    // kernel's sigaction on this architecture (checked above at compile
    // time); its handler is SIG_DFL or SIG_IGN, so no code is installed.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            signal,
            &action as *const KernelSigaction,
            std::ptr::null_mut::<KernelSigaction>(),
            SIGSET_BYTES,
        )
    })?;
    Ok(())
}

/// The signals the calling process ignores (bit `n - 1` for signal `n`),
/// from the `SigIgn:` line of /proc/self/status; `None` if it cannot be read.
///
/// Not for use between fork and exec (it allocates).
pub fn ignored_signals() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// Sets the file mode creation mask of the calling process.
pub fn set_umask(mask: u32) {
    // SAFETY: umask cannot fail; it only replaces the process's mask.
    unsafe { libc::umask(mask as libc::mode_t) };
}

/// `keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)`: gives the calling process
/// a new anonymous session keyring of its own, owned by its current
/// credentials. Without it a job would possess scored's session keyring
/// (possession grants its possessor permissions whatever the key's owner).
/// A kernel built without keys (ENOSYS) has no keyring to share.
pub fn join_new_session_keyring() -> io::Result<()> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    // SAFETY: keyctl with a null name pointer joins a new anonymous
    // keyring; it reads no memory of ours.
    match cvt(unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        )
    }) {
        Ok(_) => Ok(()),
        Err(error) if error.raw_os_error() == Some(libc::ENOSYS) => Ok(()),
        Err(error) => Err(error),
    }
}

/// The error a launch fails with when privileges remain after the change
/// of user: chosen because nothing else between fork and exec returns it,
/// so the parent can name the cause (see [`privileges_remain`]).
pub const PRIVILEGES_REMAIN: i32 = libc::ENOTRECOVERABLE;

/// Whether the calling process still holds anything of root after
/// `setuid` to another user: a capability in its effective, permitted or
/// inheritable set (the kernel clears the first two on setuid unless
/// securebits say otherwise; nothing clears the third), or any securebit.
/// Uses `capget` (version 3, 64 bits) and `prctl(PR_GET_SECUREBITS)`.
pub fn privileges_remain() -> io::Result<bool> {
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: `header` and `data` are valid, writable and live across the
    // call; version 3 makes the kernel write exactly two `Data` entries.
    cvt(unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) })?;
    let caps = data
        .iter()
        .any(|set| set.effective | set.permitted | set.inheritable != 0);
    // SAFETY: prctl with PR_GET_SECUREBITS takes no pointer.
    let securebits =
        cvt(unsafe { libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0) } as libc::c_long)?;
    Ok(caps || securebits != 0)
}

/// `epoll_create1(EPOLL_CLOEXEC)`: a set of descriptors to watch, itself a
/// descriptor that is readable while any of them is ready (so that the
/// event loop can watch the whole set as one source).
///
/// Not for use between fork and exec.
pub fn epoll_create() -> io::Result<OwnedFd> {
    // SAFETY: epoll_create1 takes a flag and returns a new descriptor or -1.
    let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) } as libc::c_long)?;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Adds `fd` to the set `epoll`, readable (or hung up), reported with
/// `data`. Closing `fd` removes it.
///
/// Not for use between fork and exec.
pub fn epoll_add(epoll: &OwnedFd, fd: RawFd, data: u64) -> io::Result<()> {
    let mut event = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: data,
    };
    // SAFETY: `event` is valid for the call; both descriptors are open.
    let ret = unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) };
    cvt(ret as libc::c_long)?;
    Ok(())
}

/// The data of the descriptors of `epoll` that are ready now, without
/// waiting, into `ready`; how many.
///
/// Not for use between fork and exec.
pub fn epoll_ready(epoll: &OwnedFd, ready: &mut [u64]) -> io::Result<usize> {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    let max = ready.len().min(events.len());
    let n = loop {
        // SAFETY: `events` has room for `max` entries and lives across the
        // call; a zero timeout never blocks.
        let ret =
            unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), max as i32, 0) };
        match cvt(ret as libc::c_long) {
            Err(error) if error.raw_os_error() == Some(libc::EINTR) => continue,
            other => break other? as usize,
        }
    };
    for (slot, event) in ready.iter_mut().zip(&events[..n]) {
        *slot = event.u64;
    }
    Ok(n)
}

/// Whether two of our descriptors refer to the same open file description
/// (`kcmp(KCMP_FILE)`). Not for use between fork and exec.
pub fn same_description(first: RawFd, second: RawFd) -> io::Result<bool> {
    const KCMP_FILE: libc::c_long = 0;
    let pid = std::process::id() as libc::c_long;
    // SAFETY: kcmp takes integers only: our own pid twice, the comparison
    // kind and two descriptor numbers; it reads no memory of ours.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            pid,
            pid,
            KCMP_FILE,
            first as libc::c_long,
            second as libc::c_long,
        )
    };
    match ret {
        0 => Ok(true),
        1..=3 => Ok(false),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Takes ownership of a descriptor the kernel has just installed in our
/// table for a message received with SCM_RIGHTS. Only for the numbers of
/// such a message, each once.
pub fn own_received_descriptor(fd: RawFd) -> OwnedFd {
    // SAFETY: the kernel installed this descriptor for the message the
    // caller received (SCM_RIGHTS); no other owner knows its number.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// The device, inode and mode of the file behind `fd`, as the kernel has
/// them cached (`statx` with `AT_STATX_DONT_SYNC`): a file system that asks
/// a server for attributes (FUSE, NFS) is not asked, so that a descriptor a
/// user handed over cannot make the caller wait for its server.
///
/// Not for use between fork and exec.
pub fn cached_identity(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<(u64, u64, u32)> {
    // SAFETY: an all-zero statx is a valid value for the kernel to fill.
    let mut stat: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open for the call, the path is an empty C string
    // (AT_EMPTY_PATH: the descriptor itself) and `stat` is valid for writing.
    cvt(unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC,
            libc::STATX_TYPE | libc::STATX_INO,
            &mut stat,
        )
    } as libc::c_long)?;
    let dev = libc::makedev(stat.stx_dev_major, stat.stx_dev_minor);
    Ok((dev, stat.stx_ino, u32::from(stat.stx_mode)))
}

/// Whether closing `fd` returns at once whatever its other end does: a
/// pipe, a Unix socket (which never lingers), or a terminal or memory
/// device (`/dev/null`, a pseudo-terminal, `/dev/tty`), from the kernel's
/// cached attributes. A network socket may linger on close, and a file
/// system's server or another device may make its release wait.
///
/// Not for use between fork and exec.
pub fn closes_at_once(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    closes_at_once_number(fd.as_raw_fd())
}

/// [`closes_at_once`] for a number of the caller's table, which need not
/// be open (one that is not does not close at once).
pub fn closes_at_once_number(fd: RawFd) -> bool {
    // SAFETY: an all-zero statx is a valid value for the kernel to fill.
    let mut stat: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a number that is not open only makes statx fail (EBADF); the
    // path is an empty C string (AT_EMPTY_PATH: the descriptor itself) and
    // `stat` is valid for writing.
    let ret = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC,
            libc::STATX_TYPE,
            &mut stat,
        )
    };
    if ret != 0 {
        return false;
    }
    match u32::from(stat.stx_mode) & libc::S_IFMT {
        libc::S_IFIFO => true,
        // Memory devices (1), /dev/tty and /dev/ptmx (5), pseudo-terminals
        // (136 to 143).
        libc::S_IFCHR => matches!(stat.stx_rdev_major, 1 | 5 | 136..=143),
        libc::S_IFSOCK => socket_domain(fd) == Some(libc::AF_UNIX),
        _ => false,
    }
}

/// A socket's address family (`SO_DOMAIN`).
fn socket_domain(fd: RawFd) -> Option<libc::c_int> {
    let mut domain: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `domain` is a writable int and `len` its size, both valid
    // across the call; getsockopt writes at most `len` bytes.
    let ret = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut domain as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (ret == 0).then_some(domain)
}

/// SO_PEERGROUPS: the supplementary groups the peer had when it connected.
/// Not for use between fork and exec.
pub fn peer_groups(fd: RawFd) -> Vec<u32> {
    let mut groups = vec![0 as libc::gid_t; 256];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: `groups` is a writable buffer of `len` bytes that lives
        // across the call; getsockopt writes at most `len` bytes into it and
        // stores the size it needs in `len`.
        let ret = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let count = len as usize / std::mem::size_of::<libc::gid_t>();
        if ret == 0 {
            groups.truncate(count);
            // Kept for the connection's life: hold only what was returned.
            groups.shrink_to_fit();
            return groups;
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::ERANGE) && count > groups.len() && count <= 65_536 {
            groups.resize(count, 0);
            continue;
        }
        tracing::debug!(%error, "SO_PEERGROUPS failed; supplementary groups unknown");
        return Vec::new();
    }
}

/// `clone(CLONE_PARENT | SIGCHLD)`: a fork whose child is the child of the
/// caller's parent, not of the caller (a keeper made by the zygote is the
/// daemon's child). `Some(pid)` in the caller, `None` in the child.
///
/// Only in a single-threaded process, as `fork`: the child inherits no
/// lock held by another thread. Not for use between fork and exec.
pub fn fork_sibling() -> io::Result<Option<i32>> {
    let flags = (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_long;
    // SAFETY: with a null stack the child runs on a copy-on-write copy of
    // the caller's, as after fork; the caller is single-threaded, so no
    // lock is held by another thread; no pointer is passed.
    let ret =
        cvt(unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) })?;
    Ok((ret != 0).then_some(ret as i32))
}

/// Waits up to `timeout` (`None`: for ever) for descriptors of `epoll` to
/// be ready; their data into `ready`, how many (0 on timeout or signal).
///
/// Not for use between fork and exec.
pub fn epoll_wait_for(
    epoll: &OwnedFd,
    ready: &mut [u64],
    timeout: Option<Duration>,
) -> io::Result<usize> {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    let max = ready.len().min(events.len());
    let millis = timeout.map_or(-1, |timeout| {
        timeout
            .as_millis()
            .saturating_add(u128::from(timeout.subsec_nanos() % 1_000_000 != 0))
            .min(i32::MAX as u128) as i32
    });
    // SAFETY: `events` has room for `max` entries and lives across the call.
    let ret =
        unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), max as i32, millis) };
    let n = match cvt(ret as libc::c_long) {
        Ok(n) => n as usize,
        Err(error) if error.raw_os_error() == Some(libc::EINTR) => 0,
        Err(error) => return Err(error),
    };
    for (slot, event) in ready.iter_mut().zip(&events[..n]) {
        *slot = event.u64;
    }
    Ok(n)
}

/// `fork()`: `Some(pid)` in the parent, `None` in the child.
///
/// Only in a single-threaded process: the child inherits no lock held by
/// another thread. Not for use between fork and exec.
pub fn fork_process() -> io::Result<Option<i32>> {
    // SAFETY: the caller is single-threaded (the daemon starts no thread,
    // and this runs before anything could), so the child inherits no lock
    // held by another thread.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { child } => Ok(Some(child.as_raw())),
        nix::unistd::ForkResult::Child => Ok(None),
    }
}

/// `_exit(code)`: ends the process without running exit handlers or
/// destructors (a zygote or keeper, whose memory is a copy of scored's).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no memory of ours.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests;
