//! The signals scrun handles, delivered through a signalfd instead of handlers.
//!
//! [`Signals::block`] blocks them for the (only) thread and opens a
//! non-blocking signalfd, so that they arrive as readable data in the same
//! `poll` as the daemon's replies and no code ever runs inside a signal
//! handler. Blocking must happen before anything else can raise them. A
//! private scored inherits the mask and replaces it with its own at start;
//! the job never sees it, since scored gives every job process an empty
//! mask.
#![forbid(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// The signals scrun reads: the terminating ones, job control, SIGWINCH
/// (passed on to the job), and SIGCHLD to learn without polling when a
/// private scored has exited.
const HANDLED: [Signal; 8] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGTSTP,
    Signal::SIGCONT,
    Signal::SIGCHLD,
    Signal::SIGWINCH,
];

/// The blocked signals and the descriptor that reads them.
pub struct Signals {
    fd: SignalFd,
}

impl Signals {
    /// Blocks the handled signals and opens the signalfd. A signal in
    /// `inherited_ignored` (ignored when scrun started, as under `nohup`,
    /// or SIGINT and SIGQUIT for a background job of a non-interactive
    /// shell) is left ignored, as the program itself would have it: it
    /// neither kills nor holds the job. SIGCONT and SIGCHLD are read
    /// whatever their disposition, since ignoring them changes nothing
    /// scrun relies on.
    pub fn block(inherited_ignored: &[i32]) -> nix::Result<Signals> {
        let mut mask = SigSet::empty();
        for signal in HANDLED {
            let always = matches!(signal, Signal::SIGCONT | Signal::SIGCHLD);
            if always || !inherited_ignored.contains(&(signal as i32)) {
                mask.add(signal);
            }
        }
        mask.thread_block()?;
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(Signals { fd })
    }

    /// Takes every pending signal off the descriptor, in arrival order.
    pub fn drain(&self) -> nix::Result<Vec<Signal>> {
        let mut signals = Vec::new();
        while let Some(info) = self.fd.read_signal()? {
            // The mask holds only known signals, so a number that does not
            // convert cannot come; skipping it is the safe answer anyway.
            if let Ok(signal) = i32::try_from(info.ssi_signo)
                .map_err(|_| nix::errno::Errno::EINVAL)
                .and_then(Signal::try_from)
            {
                signals.push(signal);
            }
        }
        Ok(signals)
    }
}

impl AsFd for Signals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Runs `f` (a write that may stop scrun) with SIGINT, SIGTERM and SIGHUP
/// unblocked, so that while it is stopped they act as on any program:
/// blocked for the signalfd, they would wait behind a write that the
/// continue restarts and that stops again.
pub fn stoppable(f: impl FnOnce()) {
    let mut set = SigSet::empty();
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(signal);
    }
    let _ = set.thread_unblock();
    f();
    let _ = set.thread_block();
}

/// Stops scrun as Ctrl-Z stops a program, by SIGTSTP, so that its parent
/// sees it stopped by that signal (a shell's `$?` is 148, as for the
/// program run without scrun); returns once scrun is continued. SIGTSTP is
/// raised while blocked and delivered by unblocking it for the moment of
/// the stop. The kernel drops SIGTSTP in an orphaned process group, so
/// unless scrun's parent is in another group of its session, which keeps
/// the group from being orphaned, or where SIGTSTP is ignored, scrun stops
/// by SIGSTOP, which nothing drops.
pub fn stop_self() -> nix::Result<()> {
    use nix::unistd::{getpgid, getpgrp, getppid, getsid};
    let parent = getppid();
    let held = getpgid(Some(parent)).is_ok_and(|group| group != getpgrp())
        && getsid(Some(parent)).ok() == getsid(None).ok();
    if !held || crate::sys::ignores(Signal::SIGTSTP) {
        return nix::sys::signal::raise(Signal::SIGSTOP);
    }
    let mut set = SigSet::empty();
    set.add(Signal::SIGTSTP);
    nix::sys::signal::raise(Signal::SIGTSTP)?;
    let unblocked = set.thread_unblock();
    set.thread_block()?;
    unblocked
}

/// Whether `signal` asks scrun to kill its job (and, a second time, to leave).
pub fn is_terminating(signal: Signal) -> bool {
    matches!(
        signal,
        Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP | Signal::SIGQUIT
    )
}

/// The status of a process killed by `signal`, which scrun exits with when
/// a signal makes it leave.
pub fn exit_status(signal: Signal) -> i32 {
    scored_proto::exitcode::from_signal(signal as i32)
}
