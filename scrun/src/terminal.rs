//! `scrun -pty`: the pseudo-terminal that rank 0 gets as its controlling
//! terminal, scrun's own terminal in raw mode while the job runs, and the
//! relay of bytes between the two, as `ssh -t` and `srun --pty` do.
//!
//! [`Pty::open`] allocates the pair with the size and modes of scrun's
//! terminal; the slave goes to scored as the job's stdin, stdout and stderr,
//! and the master stays here. [`RawMode`] puts scrun's terminal in raw mode
//! and restores it when dropped, so that every way out of scrun (the job's
//! end, an error, a signal read from the signalfd, a panic that unwinds)
//! gives the user back the terminal as it was; the relay leaves it while
//! scrun is stopped. [`Relay`] moves bytes: what the user types goes to the
//! master unchanged (Ctrl-C and Ctrl-Z included, which the pty's line
//! discipline turns into signals for the job's foreground group), and what
//! the job writes goes to scrun's stdout.
//!
//! Keys typed while the job does not read its terminal (`scrun -pty sleep
//! 2`) must not be lost: without scrun they would wait in the terminal for
//! the shell. scrun has read them and passed them on, so at the job's end
//! it takes back what the job left unread in the pty (through a copy of
//! the slave it keeps, [`Relay::take_back_typed`]) and gives it back to
//! its own terminal's input (TIOCSTI, as if typed again) while that is
//! still in raw mode, so that it is not echoed a second time.
//!
//! Nothing here blocks on the master: it is non-blocking, and bytes for it
//! wait in a buffer until it can take them.
//!
//! A scrun in the background of its terminal (`&`, or `timeout` in a
//! script) never makes a terminal call that would stop it: it reads its
//! terminal only in the foreground ([`in_foreground`]), changes no mode
//! there, and where the kernel would stop it in a write of the job's
//! output (`tostop`) it stops itself before the write
//! ([`Relay::relay_output`]). Its signals are blocked for the signalfd, so
//! a system call the kernel stopped would, once continued, restart and
//! stop again before scrun could read the SIGTERM sent with the continue:
//! stopping itself, scrun reads its signals first when continued.
//!
//! Terminal job control and gang scheduling stay apart because they use
//! different tools. The scheduler sends only SIGSTOP and SIGCONT, which are
//! not job-control stops, and ranks lead orphaned process groups (their
//! parent, scored, is in another session), so the kernel discards SIGTSTP,
//! SIGTTIN and SIGTTOU sent to a rank's group. Inside a `-pty` job, a shell
//! stops its foreground program on Ctrl-Z; the gang's stop notes which
//! processes outside the ranks' groups were stopped already, and the
//! gang's continue leaves them stopped, so the shell's `fg` stays the only
//! way to resume them.
#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::signal::Signal;
use nix::sys::termios::{self, SetArg, SpecialCharacterIndices, Termios};

/// The window size given to the pty when scrun has no terminal to copy
/// one from (the classic terminal's, as `ssh -tt` gives).
const DEFAULT_ROWS: u16 = 24;
/// See [`DEFAULT_ROWS`].
const DEFAULT_COLUMNS: u16 = 80;
/// How much typed input may wait for the job before scrun stops reading
/// its stdin.
const MAX_PENDING: usize = 64 * 1024;
/// How long a background scrun holds the job's output, rather than stop
/// for it, after passing on a signal that may end the job.
const OUTPUT_HOLD: std::time::Duration = std::time::Duration::from_secs(1);

/// Applies `read` to the terminal scrun runs on: its stdin if that is
/// one, else its stdout; `None` when neither is a terminal.
fn on_outer_terminal<T>(read: impl Fn(BorrowedFd<'_>) -> Option<T>) -> Option<T> {
    let stdin = io::stdin();
    if nix::unistd::isatty(stdin.as_fd()).unwrap_or(false) {
        return read(stdin.as_fd());
    }
    let stdout = io::stdout();
    if nix::unistd::isatty(stdout.as_fd()).unwrap_or(false) {
        return read(stdout.as_fd());
    }
    None
}

/// Whether scrun may use its stdin as a terminal now: it is not one, it
/// is not scrun's controlling terminal (`su -c`, `setsid`: no job control
/// applies there, and the program run directly would read it and set its
/// modes), or scrun is in its foreground process group. A background
/// scrun leaves the terminal's modes and input alone (changing them, or
/// reading, would stop it, as it stops any background program), and its
/// output is written or stops it as the terminal's `tostop` says.
pub fn in_foreground() -> bool {
    let stdin = io::stdin();
    if !nix::unistd::isatty(stdin.as_fd()).unwrap_or(false) {
        return true;
    }
    match nix::unistd::tcgetpgrp(stdin.as_fd()) {
        Ok(group) => group == nix::unistd::getpgrp(),
        // The kernel's answer for a terminal that is not the caller's
        // controlling one.
        Err(Errno::ENOTTY) => true,
        Err(_) => false,
    }
}

/// Whether scrun's stdin is a terminal that scrun is in the background
/// of: it may become the foreground without a word to scrun (`fg` sends
/// no SIGCONT to a job that runs), so scrun looks again from time to time.
pub fn in_background() -> bool {
    nix::unistd::isatty(io::stdin().as_fd()).unwrap_or(false) && !in_foreground()
}

/// Whether scrun's stdin is a terminal that went away (hung up: its
/// window closed, its `ssh` connection dropped).
fn hung_up() -> bool {
    let stdin = io::stdin();
    if !nix::unistd::isatty(stdin.as_fd()).unwrap_or(false) {
        return false;
    }
    let mut fds = [nix::poll::PollFd::new(
        stdin.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    matches!(
        nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO),
        Ok(1)
    ) && fds[0]
        .revents()
        .is_some_and(|revents| revents.contains(nix::poll::PollFlags::POLLHUP))
}

/// Sets the modes of scrun's terminal with SIGTTOU blocked, which the
/// kernel then treats as ignored: scrun sets them only when it may use
/// its terminal ([`in_foreground`]) or to give back the modes it changed,
/// and a shell that takes the foreground meanwhile must not stop it in
/// the call (restarted by every continue, the call would stop it again
/// before it could read a SIGTERM).
fn set_modes(modes: &Termios) -> bool {
    let mut ttou = nix::sys::signal::SigSet::empty();
    ttou.add(nix::sys::signal::Signal::SIGTTOU);
    let before = ttou.thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK);
    let set = termios::tcsetattr(io::stdin().as_fd(), SetArg::TCSADRAIN, modes).is_ok();
    if let Ok(before) = before {
        let _ = before.thread_set_mask();
    }
    set
}

/// Whether writing to `fd` now would stop scrun, as the kernel stops a
/// background program that writes to its terminal: `fd` is scrun's
/// controlling terminal, scrun's process group is not its foreground one,
/// the terminal has `tostop`, and SIGTTOU is not ignored.
pub fn write_would_stop(fd: BorrowedFd<'_>) -> bool {
    if !nix::unistd::isatty(fd).unwrap_or(false) {
        return false;
    }
    // Fails unless it is scrun's controlling terminal, which alone stops it.
    let Ok(group) = nix::unistd::tcgetpgrp(fd) else {
        return false;
    };
    group != nix::unistd::getpgrp()
        && termios::tcgetattr(fd)
            .is_ok_and(|modes| modes.local_flags.contains(termios::LocalFlags::TOSTOP))
        && !crate::sys::ignores(nix::sys::signal::Signal::SIGTTOU)
}

/// The size of scrun's terminal, if it has one.
fn outer_size() -> Option<rustix::termios::Winsize> {
    on_outer_terminal(|fd| rustix::termios::tcgetwinsize(fd).ok())
}

/// A pseudo-terminal pair allocated for the job.
pub struct Pty {
    /// The side scrun reads and writes; non-blocking.
    master: OwnedFd,
    /// The side the job gets; sent to scored and then dropped.
    slave: Option<OwnedFd>,
    /// scrun's own copy of the slave (close-on-exec), kept until the job
    /// ends to take back the input it left unread.
    peek: Option<OwnedFd>,
    /// The character that ends input in canonical mode (Ctrl-D), written
    /// when scrun's own stdin ends.
    eof: u8,
}

impl Pty {
    /// Opens a pty with the window size and modes of scrun's terminal (or
    /// 24x80 and the kernel's defaults when scrun has none). A scrun in
    /// its terminal's background takes only the size: the modes there are
    /// the foreground program's (an interactive shell's line editor turns
    /// off echo and line editing while it waits at its prompt), not the
    /// ones the job will get when it comes to the foreground.
    pub fn open() -> io::Result<Pty> {
        let modes = on_outer_terminal(|fd| termios::tcgetattr(fd).ok()).filter(|_| in_foreground());
        let size = outer_size();
        let winsize = nix::pty::Winsize {
            ws_row: size.map_or(DEFAULT_ROWS, |size| size.ws_row),
            ws_col: size.map_or(DEFAULT_COLUMNS, |size| size.ws_col),
            ws_xpixel: size.map_or(0, |size| size.ws_xpixel),
            ws_ypixel: size.map_or(0, |size| size.ws_ypixel),
        };
        let pair = nix::pty::openpty(Some(&winsize), modes.as_ref())?;
        let flags = OFlag::from_bits_truncate(fcntl(&pair.master, FcntlArg::F_GETFL)?);
        fcntl(&pair.master, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
        nix::fcntl::fcntl(
            &pair.master,
            FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )?;
        let eof = termios::tcgetattr(&pair.slave)
            .map(|modes| modes.control_chars[SpecialCharacterIndices::VEOF as usize])
            .unwrap_or(4);
        // An open file description of its own, non-blocking: the job's is
        // the slave's, which must stay blocking.
        let peek = nix::fcntl::open(
            &nix::unistd::ttyname(&pair.slave)?,
            OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )?;
        Ok(Pty {
            master: pair.master,
            slave: Some(pair.slave),
            peek: Some(peek),
            eof,
        })
    }

    /// The slave, to send to scored; `None` once [`Pty::close_slave`] ran.
    pub fn slave(&self) -> Option<BorrowedFd<'_>> {
        self.slave.as_ref().map(AsFd::as_fd)
    }

    /// Closes scrun's copy of the slave once scored holds its own.
    pub fn close_slave(&mut self) {
        self.slave = None;
    }

    /// Copies the size of scrun's terminal to the pty; the kernel then
    /// sends SIGWINCH to the job's foreground group if the size changed.
    pub fn follow_size(&self) {
        if let Some(size) = outer_size() {
            let _ = rustix::termios::tcsetwinsize(&self.master, size);
        }
    }
}

/// scrun's terminal in raw mode; dropping it restores the saved modes.
pub struct RawMode {
    saved: Termios,
    active: bool,
}

impl RawMode {
    /// Puts scrun's stdin in raw mode when it is a terminal: no echo, no
    /// line editing, no signals from keys, no output processing, so that
    /// every key reaches the job's terminal and is handled there.
    pub fn enter() -> Option<RawMode> {
        let stdin = io::stdin();
        if !nix::unistd::isatty(stdin.as_fd()).unwrap_or(false) {
            return None;
        }
        let saved = termios::tcgetattr(stdin.as_fd()).ok()?;
        let mut mode = RawMode {
            saved,
            active: false,
        };
        mode.resume();
        Some(mode)
    }

    /// Whether the terminal is in raw mode now.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Gives the terminal back as it was (before scrun stops, at the end).
    pub fn suspend(&mut self) {
        if self.active {
            set_modes(&self.saved);
            self.active = false;
        }
    }

    /// Enters raw mode again (after scrun was continued, or came back to
    /// the foreground).
    pub fn resume(&mut self) {
        let mut raw = self.saved.clone();
        termios::cfmakeraw(&mut raw);
        if set_modes(&raw) {
            self.active = true;
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        self.suspend();
    }
}

/// Reads what a non-blocking descriptor has now.
fn read_all(fd: &OwnedFd, into: &mut Vec<u8>) {
    let mut buffer = [0u8; 4096];
    loop {
        match nix::unistd::read(fd.as_fd(), &mut buffer) {
            Ok(len) if len > 0 => into.extend_from_slice(&buffer[..len]),
            Err(Errno::EINTR) => {}
            _ => return,
        }
    }
}

/// The byte relay between scrun's stdin and stdout and the pty master.
pub struct Relay {
    pty: Pty,
    /// Where the job's output goes: scrun's stdout.
    output: Box<dyn Write>,
    /// Typed bytes the master has not taken yet.
    to_job: Vec<u8>,
    /// scrun's stdin is still open (and worth reading).
    stdin_open: bool,
    /// scrun's stdout still takes output.
    stdout_open: bool,
    /// The master has not reported its end (EIO: nothing holds the slave).
    master_open: bool,
    /// scrun's stdout is a pipe whose reader went away, not yet told.
    output_gone: bool,
    /// The last byte passed on from scrun's stdin.
    last_typed: Option<u8>,
    /// scrun stopped itself before writing the job's output (see
    /// [`Relay::relay_output`]) and has not been continued since.
    stopped_for_output: bool,
    /// Until when a background scrun does not stop itself for output (see
    /// [`Relay::interrupted`]): neither reads nor writes the job's output.
    hold_until: Option<std::time::Instant>,
    /// scrun's stdin is a terminal that hung up, not yet told.
    terminal_gone: bool,
    /// The signal the last key typed for the job's terminal raised there
    /// (its interrupt or quit character), not yet told.
    typed_signal: Option<Signal>,
}

/// What the relay wants `poll` to watch.
pub struct Interest {
    /// Read scrun's stdin.
    pub stdin: bool,
    /// Write to the master (typed bytes wait).
    pub master_out: bool,
}

impl Relay {
    /// A relay for `pty`, whose slave has been handed to scored.
    pub fn new(pty: Pty) -> Relay {
        Relay::writing_to(pty, Box::new(io::stdout()))
    }

    /// A relay for `pty` that writes the job's output to `output`.
    fn writing_to(pty: Pty, output: Box<dyn Write>) -> Relay {
        Relay {
            pty,
            output,
            to_job: Vec::new(),
            stdin_open: true,
            stdout_open: true,
            master_open: true,
            output_gone: false,
            last_typed: None,
            stopped_for_output: false,
            hold_until: None,
            terminal_gone: false,
            typed_signal: None,
        }
    }

    /// The signal a key typed for the job raised in its terminal since
    /// last asked, if any (SIGINT or SIGQUIT).
    pub fn take_typed_signal(&mut self) -> Option<Signal> {
        self.typed_signal.take()
    }

    /// The master, to poll.
    pub fn master(&self) -> BorrowedFd<'_> {
        self.pty.master.as_fd()
    }

    /// The pty, for its size.
    pub fn pty(&self) -> &Pty {
        &self.pty
    }

    /// The pty, to close scrun's copy of its slave.
    pub fn pty_mut(&mut self) -> &mut Pty {
        &mut self.pty
    }

    /// What to wait for besides the master's output.
    pub fn interest(&self) -> Interest {
        Interest {
            stdin: self.stdin_open && self.to_job.len() < MAX_PENDING,
            master_out: !self.to_job.is_empty(),
        }
    }

    /// Reads what the user typed and passes it on. At the end of a stdin
    /// that is not a terminal, the pty's end-of-file character follows, so
    /// that a job reading its terminal sees the input end: twice after a
    /// last line without its newline, since in canonical mode the first
    /// only hands over that line and the second, at the start of a line,
    /// is the end of the input.
    pub fn relay_typed(&mut self) {
        let mut buffer = [0u8; 4096];
        match nix::unistd::read(io::stdin().as_fd(), &mut buffer) {
            Err(Errno::EINTR | Errno::EAGAIN) => {}
            Ok(0) | Err(_) => {
                self.stdin_open = false;
                self.terminal_gone = hung_up();
                let partial = self.last_typed.is_some_and(|byte| byte != b'\n');
                self.to_job.push(self.pty.eof);
                if partial {
                    self.to_job.push(self.pty.eof);
                }
            }
            Ok(len) => {
                self.to_job.extend_from_slice(&buffer[..len]);
                self.last_typed = Some(buffer[len - 1]);
                if let Some(signal) = raised_by(&self.pty.master, &buffer[..len]) {
                    self.typed_signal = Some(signal);
                }
            }
        }
        self.flush_typed();
    }

    /// Writes what waits for the master, as far as it takes it.
    pub fn flush_typed(&mut self) {
        while !self.to_job.is_empty() {
            match nix::unistd::write(&self.pty.master, &self.to_job) {
                Ok(len) => {
                    self.to_job.drain(..len);
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return,
                // The job is gone: typed bytes have no reader.
                Err(_) => {
                    self.to_job.clear();
                    return;
                }
            }
        }
    }

    /// scrun was continued: a stop before writing may be due again.
    pub fn continued(&mut self) {
        self.stopped_for_output = false;
    }

    /// A signal that may end the job was passed on to it: for a moment
    /// ([`OUTPUT_HOLD`]), a background scrun that would stop for the job's
    /// output holds it instead, so that it is not stopped when the job's
    /// end comes (a program killed there would not write it either); a job
    /// that goes on writing stops scrun again after.
    pub fn interrupted(&mut self) {
        self.hold_until = Some(std::time::Instant::now() + OUTPUT_HOLD);
    }

    /// The job has ended. If that was while its output was held, the rest
    /// of it is dropped rather than stop scrun (the job ended by the
    /// signal, as a program killed there would not have written it).
    pub fn job_ended(&mut self) {
        if self.holding() {
            self.stdout_open = false;
        }
        self.hold_until = None;
    }

    /// Whether output is held now (see [`Relay::interrupted`]): only while
    /// writing it would stop scrun.
    pub fn holding(&self) -> bool {
        self.hold_until
            .is_some_and(|until| std::time::Instant::now() < until)
            && self.stdout_open
            && write_would_stop(io::stdout().as_fd())
    }

    /// When the hold ends, while one lasts.
    pub fn hold_deadline(&self) -> Option<std::time::Instant> {
        self.hold_until.filter(|_| self.holding())
    }

    /// Whether the master may still have output (it has not reported its end).
    pub fn master_open(&self) -> bool {
        self.master_open
    }

    /// Copies what the job wrote to scrun's stdout, until the master has
    /// nothing more for now or reports its end, or the output turns out
    /// to have no reader: that is told at once (see
    /// [`Relay::take_output_gone`]), before the job writes more, since a
    /// job that writes without pause could otherwise be read to its very
    /// end before it gets its SIGPIPE.
    ///
    /// A background scrun whose output is its terminal with `tostop` stops
    /// before it writes, as the kernel would stop it in the write, and
    /// reads nothing of the job's output meanwhile: continued, scrun first
    /// reads its signals (a write the kernel stopped would be restarted by
    /// the continue and stop again before scrun could read the SIGTERM
    /// that `timeout` or the shell's `kill` sends with it). If it was not
    /// stopped (an orphaned process group, which the kernel never stops),
    /// the write says what the terminal allows.
    pub fn relay_output(&mut self) {
        if self.holding() {
            return;
        }
        if !self.stopped_for_output && self.stdout_open && write_would_stop(io::stdout().as_fd()) {
            self.stopped_for_output = true;
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGTTOU);
            return;
        }
        let mut buffer = [0u8; 16 * 1024];
        while self.master_open {
            match nix::unistd::read(self.pty.master.as_fd(), &mut buffer) {
                Ok(len) if len > 0 => {
                    if self.write_output(&buffer[..len]) {
                        return;
                    }
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return,
                // EIO (or an end of file): nothing holds the slave any more
                // and all it wrote has been read.
                _ => self.master_open = false,
            }
        }
    }

    /// Writes the job's output to scrun's stdout, or drops it once that
    /// failed; true when this write found that the pipe's reader went away.
    fn write_output(&mut self, bytes: &[u8]) -> bool {
        if !self.stdout_open {
            return false;
        }
        let output = &mut self.output;
        if let Err(error) = output.write_all(bytes).and_then(|()| output.flush()) {
            // The rest of the output is dropped, as a terminal that went
            // away drops it. A pipe whose reader went away is said once:
            // the job would have got SIGPIPE writing there itself.
            self.stdout_open = false;
            self.output_gone = error.kind() == io::ErrorKind::BrokenPipe;
        }
        self.output_gone
    }

    /// What was typed and the job did not read, in order, and forgets it:
    /// what is still in the pty's input (made readable whole by leaving
    /// canonical mode, since a line the job did not finish is still being
    /// edited there), what the master has not taken yet, and what waits
    /// in scrun's own stdin (only in the terminal's foreground: a
    /// background reader is stopped, and what waits there is the shell's).
    /// Closes scrun's copy of the slave, so that the master reports its
    /// end once the job's processes are gone.
    pub fn take_back_typed(&mut self) -> Vec<u8> {
        let mut typed = Vec::new();
        if let Some(peek) = self.pty.peek.take() {
            if let Ok(mut modes) = termios::tcgetattr(&peek) {
                modes.local_flags.remove(termios::LocalFlags::ICANON);
                modes.control_chars[SpecialCharacterIndices::VMIN as usize] = 0;
                modes.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
                let _ = termios::tcsetattr(&peek, SetArg::TCSANOW, &modes);
            }
            read_all(&peek, &mut typed);
        }
        typed.append(&mut self.to_job);
        if self.stdin_open && in_foreground() {
            let stdin = io::stdin();
            let mut fds = [nix::poll::PollFd::new(
                stdin.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            while matches!(
                nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO),
                Ok(1)
            ) {
                let mut buffer = [0u8; 4096];
                match nix::unistd::read(stdin.as_fd(), &mut buffer) {
                    Ok(len) if len > 0 => typed.extend_from_slice(&buffer[..len]),
                    _ => break,
                }
            }
        }
        typed
    }

    /// Whether scrun's terminal hung up (its stdin's end was a hang-up)
    /// since the last call.
    pub fn take_terminal_gone(&mut self) -> bool {
        std::mem::take(&mut self.terminal_gone)
    }

    /// Whether scrun's stdout turned out to be a pipe without a reader
    /// since the last call.
    pub fn take_output_gone(&mut self) -> bool {
        std::mem::take(&mut self.output_gone)
    }
}

/// The signal that the last of `typed`, written to the pty `master`,
/// raises there: its interrupt (SIGINT) or quit (SIGQUIT) character, while
/// the line discipline turns keys into signals.
fn raised_by(master: &OwnedFd, typed: &[u8]) -> Option<Signal> {
    let modes = termios::tcgetattr(master.as_fd()).ok()?;
    if !modes.local_flags.contains(termios::LocalFlags::ISIG) {
        return None;
    }
    let key = |index: SpecialCharacterIndices| modes.control_chars[index as usize];
    let (interrupt, quit) = (
        key(SpecialCharacterIndices::VINTR),
        key(SpecialCharacterIndices::VQUIT),
    );
    // A character of 0 is disabled (_POSIX_VDISABLE).
    typed.iter().rev().find_map(|&byte| match byte {
        0 => None,
        byte if byte == interrupt => Some(Signal::SIGINT),
        byte if byte == quit => Some(Signal::SIGQUIT),
        _ => None,
    })
}

#[cfg(test)]
mod tests;
