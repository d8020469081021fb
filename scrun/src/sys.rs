//! The few system calls scrun needs that nix and rustix do not wrap safely,
//! each wrapped once; the rest of scrun forbids `unsafe`.
//!
//! - What scrun's process looked like at its exec: a function in the
//!   executable's `.init_array` runs before `main` and notes the closed
//!   standard descriptors and whether SIGPIPE is ignored ([`at_exec`]),
//!   since `main` then changes both.
//! - scrun's entry point ([`main`]), in place of the Rust runtime's
//!   start (`#![no_main]`): it makes only the two changes of that start
//!   scrun relies on, `/dev/null` on a closed standard descriptor (or a
//!   socket scrun opens could take its number) and SIGPIPE ignored (a
//!   reader gone is an error to report, not scrun's death). The rest of
//!   the runtime's start costs every launch and gives scrun nothing: the
//!   stack's guard found by reading `/proc/self/maps`, an alternate signal
//!   stack and handlers that only turn a stack overflow's SIGSEGV into a
//!   message.
//! - The descriptors scrun inherited ([`inherited_descriptors`]) and the
//!   close-on-exec flag ([`set_cloexec`]), on descriptors by number.
//! - The I/O priority ([`io_priority`]): ioprio_get(2) has no wrapper.
//! - Typed input given back to a terminal ([`push_input`]): TIOCSTI has
//!   no wrapper.
//! - Ending by a signal ([`end_by`]): its disposition back to the default
//!   (SIGPIPE's is the entry point's SIG_IGN) needs sigaction(2), as does
//!   reading a disposition ([`ignores`]).
//!
//! Nothing here keeps state but the one byte the probe writes.
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};

/// Bit `n` (0 to 2): standard descriptor `n` was closed at exec.
const CLOSED_MASK: u8 = 0b111;
/// SIGPIPE was ignored at exec.
const SIGPIPE_IGNORED: u8 = 1 << 3;
/// The probe ran.
const PROBED: u8 = 1 << 4;

/// What the probe saw; zero if it never ran.
static AT_EXEC: AtomicU8 = AtomicU8::new(0);

/// Runs before `main` (from `.init_array`, with the arguments the C
/// runtime gives such functions, unused), as the process was exec'd:
/// notes which standard descriptors are closed and whether SIGPIPE is
/// ignored. One system call per descriptor and one for the signal, no
/// allocation. The test harness's binary runs it too, before its own
/// runtime's start.
extern "C" fn probe_at_exec(
    _argc: libc::c_int,
    _argv: *const *const libc::c_char,
    _envp: *const *const libc::c_char,
) {
    let mut seen = PROBED;
    for fd in 0..3 {
        // SAFETY: F_GETFD reads a descriptor's flags and nothing else; a
        // closed descriptor gives -1 (EBADF).
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            seen |= 1 << fd;
        }
    }
    // SAFETY: an all-zero sigaction is a valid value to be overwritten.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: with a null new action, sigaction only writes the current
    // one into `old`, which is valid for writing.
    let read = unsafe { libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) };
    if read == 0 && old.sa_sigaction == libc::SIG_IGN {
        seen |= SIGPIPE_IGNORED;
    }
    AT_EXEC.store(seen, Ordering::Relaxed);
}

/// The probe, called by the C runtime before `main` (as every function
/// in an executable's `.init_array` is).
#[used]
#[link_section = ".init_array"]
static PROBE_AT_EXEC: extern "C" fn(
    libc::c_int,
    *const *const libc::c_char,
    *const *const libc::c_char,
) = probe_at_exec;

/// scrun's entry point, called by the C runtime with the process as the
/// probe saw it (see the module doc): `/dev/null` opened on each standard
/// descriptor found closed, at its number, SIGPIPE ignored, then
/// `crate::main`. A panic ends scrun with status 101, and either way
/// `std::process::exit` flushes stdout, as under the Rust runtime. The
/// arguments are unused: the standard library reads them from
/// `.init_array` as it does under its runtime.
#[cfg(not(test))]
#[no_mangle]
extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    use std::os::fd::IntoRawFd;
    let seen = AT_EXEC.load(Ordering::Relaxed);
    for fd in 0..3 {
        if seen & CLOSED_MASK & (1 << fd) == 0 {
            continue;
        }
        // The lowest free number: `fd` itself, those below it being open.
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map(IntoRawFd::into_raw_fd);
        if opened.ok() != Some(fd) {
            // As the Rust runtime does: better no scrun than one whose
            // socket could be taken for its caller's stdout.
            std::process::abort();
        }
    }
    // SAFETY: SIG_IGN runs no code of ours, and no other thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let code = match std::panic::catch_unwind(crate::main) {
        Ok(()) => 0,
        Err(_) => 101,
    };
    std::process::exit(code)
}

/// What scrun's process was at its exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtExec {
    /// Standard descriptors 0, 1 and 2 that were closed.
    pub closed: [bool; 3],
    /// SIGPIPE was ignored.
    pub sigpipe_ignored: bool,
}

/// What the probe saw; `None` if it did not run (it always does in the
/// scrun binary).
pub fn at_exec() -> Option<AtExec> {
    let seen = AT_EXEC.load(Ordering::Relaxed);
    (seen & PROBED != 0).then(|| AtExec {
        closed: [0, 1, 2].map(|fd| seen & CLOSED_MASK & (1 << fd) != 0),
        sigpipe_ignored: seen & SIGPIPE_IGNORED != 0,
    })
}

/// The descriptors above 2 that this process has open and that are not
/// close-on-exec, in increasing order: what it inherited, as long as it
/// has opened nothing of its own yet. The listing's own descriptor is
/// left out.
pub fn inherited_descriptors() -> io::Result<Vec<RawFd>> {
    let mut dir = nix::dir::Dir::open(
        "/proc/self/fd",
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let own = dir.as_raw_fd();
    let mut fds = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let Some(fd) = entry
            .file_name()
            .to_str()
            .ok()
            .and_then(|name| name.parse::<RawFd>().ok())
        else {
            continue;
        };
        if fd < 3 || fd == own {
            continue;
        }
        // SAFETY: F_GETFD reads the flags of a descriptor number; one
        // closed meanwhile gives -1 and is left out.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags != -1 && flags & libc::FD_CLOEXEC == 0 {
            fds.push(fd);
        }
    }
    fds.sort_unstable();
    Ok(fds)
}

/// Borrows descriptor `fd`, which the caller listed as open and has not
/// closed since.
pub fn borrow(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: scrun never closes the descriptors it inherited (it only
    // marks them close-on-exec), so one listed as open stays open for the
    // life of the process.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// Marks descriptor `fd` close-on-exec, so that no program scrun starts
/// (a private scored) inherits it.
pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    nix::fcntl::fcntl(
        borrow(fd),
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )?;
    Ok(())
}

/// This process's I/O priority as ioprio_get(2) gives it: the class in
/// bits 13 to 15, the level below.
pub fn io_priority() -> io::Result<u32> {
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    // SAFETY: ioprio_get takes two integers (who: this process) and
    // reads no memory of ours.
    let value =
        unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0 as libc::c_long) };
    if value < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(value).map_err(|_| io::Error::from_raw_os_error(libc::ERANGE))
}

/// Puts `bytes` in the input of the terminal `fd` as if they were typed
/// (TIOCSTI: only on the caller's controlling terminal, and only where the
/// kernel still allows it to users).
pub fn push_input(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
    for byte in bytes {
        // SAFETY: TIOCSTI reads one byte through the pointer, which points
        // at a byte of `bytes`, valid for the call.
        let ret = unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::TIOCSTI,
                byte as *const u8 as *const libc::c_char,
            )
        };
        if ret == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether `signal` is ignored (SIG_IGN) in this process.
pub fn ignores(signal: nix::sys::signal::Signal) -> bool {
    // SAFETY: an all-zero sigaction is a valid value to be overwritten.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: with a null new action, sigaction only writes the current
    // one into `old`, which is valid for writing.
    let read = unsafe { libc::sigaction(signal as libc::c_int, std::ptr::null(), &mut old) };
    read == 0 && old.sa_sigaction == libc::SIG_IGN
}

/// Ends this process by `signal`, as the program scrun ran for the user
/// would have ended: the signal's disposition back to the default, no
/// core file of scrun's own (the job wrote its own, if any), then the
/// signal raised and unblocked. Returns only if that did not end the
/// process.
pub fn end_by(signal: nix::sys::signal::Signal) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    use nix::sys::signal::{raise, sigaction, SaFlags, SigAction, SigHandler, SigSet};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_CORE) {
        let _ = setrlimit(Resource::RLIMIT_CORE, 0, hard);
    }
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: installing the default disposition runs no code of ours in
    // a signal handler.
    let _ = unsafe { sigaction(signal, &default) };
    let _ = raise(signal);
    let mut only = SigSet::empty();
    only.add(signal);
    let _ = only.thread_unblock();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_ran_before_the_runtime() {
        // The test binary is started by cargo with its stdio open.
        let seen = at_exec().expect("the .init_array probe ran");
        assert_eq!(seen.closed, [false, false, false]);
    }

    #[test]
    fn inherited_descriptors_leave_out_close_on_exec_ones() {
        let (read, write) = nix::unistd::pipe().unwrap();
        let listed = inherited_descriptors().unwrap();
        assert!(listed.contains(&read.as_raw_fd()), "{listed:?}");
        set_cloexec(read.as_raw_fd()).unwrap();
        let listed = inherited_descriptors().unwrap();
        assert!(!listed.contains(&read.as_raw_fd()), "{listed:?}");
        assert!(listed.contains(&write.as_raw_fd()), "{listed:?}");
        assert!(listed.iter().all(|fd| *fd > 2));
    }

    #[test]
    fn the_io_priority_reads() {
        let value = io_priority().unwrap();
        assert!(value >> 13 <= 3, "class of {value:#x}");
    }
}
