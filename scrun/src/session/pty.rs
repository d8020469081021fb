//! The pty side of a `-pty` session: the relay between scrun's terminal
//! and the job's pty, raw mode while the job runs in the foreground, and
//! what is left in the pty or typed ahead when the job ends.

use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::Session;
use crate::terminal::{in_background, in_foreground, RawMode, Relay};

/// The pty side of a `-pty` session: the relay and scrun's terminal in raw
/// mode (when scrun has one).
pub struct PtySide {
    /// Moves bytes between scrun's stdio and the pty master.
    pub relay: Relay,
    /// scrun's terminal, in raw mode once the job runs (`None` before, and
    /// when scrun has no terminal). Until then keys typed still signal
    /// scrun, so that Ctrl-C withdraws a job waiting for admission.
    pub raw: Option<RawMode>,
    /// The job has started (raw mode is due whenever scrun is in the
    /// foreground).
    pub started: bool,
}

impl PtySide {
    /// A key typed for the job that raised SIGINT or SIGQUIT in its
    /// terminal counts as that signal passed on by scrun: the job's end by
    /// it is scrun's too, as without `-pty` (see scrun(1), SIGNALS).
    pub(super) fn note_typed(&mut self, session: &mut Session) {
        if let Some(signal) = self.relay.take_typed_signal() {
            session.passed = Some((signal, Instant::now()));
        }
    }

    /// Whether raw mode is on.
    pub(super) fn raw_active(&self) -> bool {
        self.raw.as_ref().is_some_and(RawMode::is_active)
    }

    /// Puts scrun's terminal in raw mode if the job runs and scrun is in
    /// the terminal's foreground (after a start, a continue, an `fg`); a
    /// background scrun leaves it alone (see `terminal::in_foreground`).
    pub(super) fn sync_raw(&mut self) {
        if !self.started || self.raw_active() || !in_foreground() {
            return;
        }
        match self.raw.as_mut() {
            None => self.raw = RawMode::enter(),
            Some(raw) => raw.resume(),
        }
    }

    /// Whether scrun waits to be its terminal's foreground again, which
    /// comes without a signal when the shell's `fg` brings a running job
    /// there: scrun then looks every [`FOREGROUND_LOOK`].
    pub(super) fn awaits_foreground(&self) -> bool {
        self.started && !self.raw_active() && in_background()
    }
}

/// How often a `-pty` scrun in its terminal's background looks whether
/// it has become the foreground (see [`PtySide::awaits_foreground`]).
pub(super) const FOREGROUND_LOOK: Duration = Duration::from_millis(100);

/// How long, after the job's end, scrun waits for the pty to hand over the
/// last bytes the job wrote. The kernel moves a pty's output to the master
/// asynchronously; its end (EIO) comes once all is read and nothing holds
/// the slave any more, which is at once unless a stray process kept it.
const PTY_DRAIN: Duration = Duration::from_secs(2);

/// Gives what the user typed and the job did not read back to scrun's
/// terminal, as if typed again, for the shell to read after scrun (see
/// `crate::terminal`). Only while that terminal is in raw mode, which
/// does not echo it a second time; a kernel that refuses TIOCSTI (it can
/// be turned off for users) loses it, as `ssh -t` does.
pub(super) fn give_back_typed(side: &mut PtySide) {
    let typed = side.relay.take_back_typed();
    let raw = side.raw.as_ref().is_some_and(RawMode::is_active);
    if raw && !typed.is_empty() {
        let _ = crate::sys::push_input(io::stdin().as_fd(), &typed);
    }
}

/// Copies what the job left in the pty to scrun's stdout, until the pty
/// reports its end or [`PTY_DRAIN`] passes.
pub(super) fn drain_pty(relay: &mut Relay) {
    let deadline = Instant::now() + PTY_DRAIN;
    while relay.master_open() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let timeout = PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(relay.master(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) => return,
            Ok(_) | Err(Errno::EINTR) => relay.relay_output(),
            Err(_) => return,
        }
    }
}
