//! The closer: the one way the daemon lets go of a descriptor that a user
//! handed over.
//!
//! The last close of some files sleeps in the kernel for as long as
//! someone else likes: a TCP socket with `SO_LINGER` and unsent data waits
//! for its peer to read (`sk_stream_wait_close`), a file system's release
//! for its server. (A FUSE file's server is asked to FLUSH at every close,
//! not only the last, so no process that holds a copy can let go of it
//! without waiting for that server: scored relies on plain users being
//! unable to mount FUSE file systems, as scored(8) says.) Users choose what
//! they pass to scored (a job's standard and inherited descriptors, PMI
//! descriptors, and the socket of their connection, whose queue may still
//! hold descriptors in flight that a close would drop), so the loop never
//! makes that last close itself:
//!
//! - Every descriptor received from a client is a [`UserFd`] from the
//!   moment it is received, and every client's socket not read to its end
//!   is let go through [`discard`]. Dropping a `UserFd` does not close it: it joins a queue,
//!   and [`flush`] sends the queue to the closer (SCM_RIGHTS over a
//!   socketpair, never blocking). Once a descriptor is in flight, the
//!   daemon's own close is not the last and costs nothing.
//! - The closer is a process the daemon starts with it ([`start`]): this
//!   binary again, named `scored-closer`, with nothing of the daemon's but
//!   its end of the socket; it runs no user code. For each batch it receives it forks a child that does
//!   nothing but exit (`sys::fork_exiter`) once the closer has closed its
//!   own copies, and the batch is closed by that exit: an exiting process
//!   never lingers on a socket (the kernel skips `SO_LINGER` for a task
//!   that is exiting), and a last close that still waits holds that child
//!   alone, never the closer or the daemon. Each
//!   user's batches are apart, so one user's stuck close delays no one
//!   else's (another job's pipe still sees its end).
//! - The closer says which batches it has closed, so that [`held`] counts
//!   what each user makes root hold, in the daemon and in the closer, for
//!   the per-user descriptor budget (`evloop::budget`).
//! - While the closer's socket is full, or the closer is gone, the queue
//!   waits in the daemon (and still counts against its users). A closer
//!   that dies is started again, at most every [`RESTART_EVERY`]; an
//!   in-place restart hands its socket, its pid and the queue to the new
//!   image ([`hand_over`], [`resume`]).
//! - Without a closer (the loop's unit tests start none), descriptors are
//!   closed at once.
//! - The daemon's own files that want an `fdatasync` (the job journal, the
//!   log of the core's state) go to the closer too ([`sync`]): it syncs
//!   them in a child of its own, one at a time, so that the loop never
//!   waits for the disk. A sync asked for while one runs waits for it,
//!   each file once.
//!
//! The rule for every surface that takes a descriptor from a user, now and
//! to come: make it a [`UserFd`] as it arrives (or give it to [`discard`]
//! when done with it), and make no system call on it in the loop that
//! asks its file system or its peer anything (`fstat` is
//! `sys::cached_identity`, which asks no server; reads and writes are the
//! job's business).
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};
use serde::{Deserialize, Serialize};

use crate::sys;

/// The most descriptors one message carries (SCM_MAX_FD in the kernel's
/// include/net/scm.h).
const SCM_MAX_FD: usize = 253;
/// A closer that died is started again at most this often.
pub const RESTART_EVERY: Duration = Duration::from_secs(1);
/// How long the daemon, as it exits, waits for the closer to take what is
/// still queued; what it has not taken is closed by the daemon's exit.
pub const EXIT_WAIT: Duration = Duration::from_secs(1);
/// How long the closer waits before trying a fork again that failed.
const FORK_RETRY: Duration = Duration::from_millis(100);
/// The payload of a message that asks the closer to sync the files it
/// carries: longer than the uid that a batch of descriptors to close
/// carries, so that the two cannot be taken for each other.
const SYNC: &[u8; 8] = b"fdatasyn";

/// A descriptor a user handed over. Dropping it hands it to the closer;
/// it is never closed in the daemon (see the module doc).
pub struct UserFd {
    /// `None` only while it is being dropped.
    fd: Option<OwnedFd>,
    uid: u32,
}

impl UserFd {
    /// Takes `fd`, which user `uid` handed over (or the daemon holds on
    /// that user's behalf), counting it against that user.
    pub fn new(fd: OwnedFd, uid: u32) -> UserFd {
        with_state(|state| *state.in_daemon.entry(uid).or_default() += 1);
        UserFd { fd: Some(fd), uid }
    }

    /// The user it is counted against.
    pub fn uid(&self) -> u32 {
        self.uid
    }
}

impl AsFd for UserFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.fd {
            Some(fd) => fd.as_fd(),
            None => unreachable!("a UserFd holds its descriptor until it is dropped"),
        }
    }
}

impl AsRawFd for UserFd {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

impl std::fmt::Debug for UserFd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserFd")
            .field("fd", &self.fd.as_ref().map(AsRawFd::as_raw_fd))
            .field("uid", &self.uid)
            .finish()
    }
}

impl Drop for UserFd {
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            release(fd, self.uid);
        }
    }
}

/// Lets go of `fd`, which user `uid` handed over (or which may hold what
/// that user handed over, as a client's socket does), without closing it
/// in the daemon: it goes to the closer. Never blocks.
pub fn discard(fd: OwnedFd, uid: u32) {
    with_state(|state| *state.in_daemon.entry(uid).or_default() += 1);
    release(fd, uid);
}

/// The descriptors the daemon holds for user `uid` or has given to the
/// closer and the closer has not closed yet.
pub fn held(uid: u32) -> usize {
    with_state(|state| {
        state.in_daemon.get(&uid).copied().unwrap_or(0)
            + state.in_closer.get(&uid).copied().unwrap_or(0)
    })
    .unwrap_or(0)
}

/// [`held`] summed over the users `counted` picks.
pub fn held_where(counted: impl Fn(u32) -> bool) -> usize {
    with_state(|state| {
        state
            .in_daemon
            .iter()
            .chain(&state.in_closer)
            .filter(|(uid, _)| counted(**uid))
            .map(|(_, n)| n)
            .sum()
    })
    .unwrap_or(0)
}

/// How many descriptors wait in the daemon to be sent to the closer.
pub fn queued() -> usize {
    with_state(|state| state.queued).unwrap_or(0)
}

/// Queues what is let go of as though a closer had just been started and
/// died (it is not started again for a while): for tests of what goes to
/// the closer.
#[cfg(test)]
pub fn queue_only() {
    with_state(|state| {
        state.enabled = true;
        state.started_at = Some(Instant::now());
    });
}

/// The closer's pid, while there is one.
pub fn pid() -> Option<i32> {
    with_state(|state| state.pid).flatten()
}

/// The daemon's end of the closer's socket, to watch for the closer's
/// reports (readable) and for room to send (writable), with the number of
/// the closer it leads to (a closer started again may get the same
/// descriptor number, which must be watched again).
pub fn socket() -> Option<(RawFd, u64)> {
    with_state(|state| {
        state
            .socket
            .as_ref()
            .map(|socket| (socket.as_raw_fd(), state.generation))
    })
    .flatten()
}

/// When [`flush`] should next run to start a closer again, if one is due.
pub fn next_deadline() -> Option<Instant> {
    with_state(|state| {
        (state.enabled && state.socket.is_none() && state.queued > 0)
            .then(|| state.restart_at().unwrap_or_else(Instant::now))
    })
    .flatten()
}

/// Asks the closer to `fdatasync` each of `files` (the daemon's own,
/// never a user's), in a child of its own; never blocks. `false` when no
/// closer takes it (none runs, its socket is full, or an earlier image of
/// scored started it and it knows nothing of syncs): the caller syncs
/// them itself.
pub fn sync(files: &[BorrowedFd<'_>]) -> bool {
    !files.is_empty() && with_state(|state| state.sync(files)).unwrap_or(false)
}

/// Starts the closer; from now on descriptors let go of go to it.
pub fn start() -> io::Result<()> {
    with_state(|state| {
        state.enabled = true;
        state.start()
    })
    .unwrap_or_else(|| Err(io::Error::other("the closer's state is gone")))
}

/// Sends what is queued to the closer, as far as its socket takes it
/// (starting a closer again if the last one died and one is due), and
/// reads what the closer has closed. Never blocks.
pub fn flush() {
    with_state(|state| {
        state.read_reports();
        state.flush();
    });
}

/// Sends what is queued, if anything is, as far as the socket takes it:
/// before the fork of a helper that lives a while (a remover of scratch
/// trees), so that it does not inherit copies of what the daemon has let
/// go of (a copy that outlives the others would make the last close, and
/// keep a pipe from its end). A rank needs none: it closes what it
/// inherited first thing after its fork.
pub fn send_queued() {
    with_state(|state| {
        if state.queued > 0 {
            state.flush();
        }
    });
}

/// At the daemon's exit: sends what is still queued, waiting up to
/// [`EXIT_WAIT`] for room. What is left is closed by the exit itself.
pub fn finish() {
    let deadline = Instant::now() + EXIT_WAIT;
    let more = || {
        with_state(|state| {
            state.read_reports();
            state.flush();
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(socket) = &state.socket else {
                return false;
            };
            if state.queued == 0 || left.is_zero() {
                return false;
            }
            let mut poll = [nix::poll::PollFd::new(
                socket.as_fd(),
                nix::poll::PollFlags::POLLOUT,
            )];
            let millis = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
            let _ = nix::poll::poll(&mut poll, nix::poll::PollTimeout::from(millis));
            true
        }) == Some(true)
    };
    while more() {}
}

/// What the closer's part of an in-place restart hands to the new image.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct CloserSnapshot {
    /// The daemon's end of the closer's socket, kept open across execve.
    pub socket: Option<RawFd>,
    /// The closer's pid.
    pub pid: Option<i32>,
    /// Descriptors not yet sent, with the user each counts against.
    pub queued: Vec<(u32, RawFd)>,
    /// Descriptors the closer has not yet said it closed, per user.
    pub in_closer: Vec<(u32, usize)>,
    /// The closer syncs files ([`sync`]); one that an image without this
    /// field started does not.
    #[serde(default)]
    pub syncs: bool,
}

/// The closer's state for the next image, and the descriptors it needs
/// kept open across the execve. Changes nothing: should the restart fail,
/// the daemon carries on with its closer.
pub fn hand_over() -> (CloserSnapshot, Vec<RawFd>) {
    with_state(|state| {
        state.read_reports();
        state.flush();
        let queued: Vec<(u32, RawFd)> = state
            .queue
            .iter()
            .flat_map(|(uid, fds)| fds.iter().map(|fd| (*uid, fd.as_raw_fd())))
            .collect();
        let socket = state.socket.as_ref().map(AsRawFd::as_raw_fd);
        let mut keep: Vec<RawFd> = queued.iter().map(|(_, fd)| *fd).collect();
        keep.extend(socket);
        let snapshot = CloserSnapshot {
            socket,
            pid: state.pid,
            queued,
            in_closer: state.in_closer.iter().map(|(u, n)| (*u, *n)).collect(),
            syncs: state.syncs,
        };
        (snapshot, keep)
    })
    .unwrap_or_default()
}

/// Takes over the closer an earlier image of this process handed over
/// (or starts one, if it had none).
pub fn resume(snapshot: CloserSnapshot) -> io::Result<()> {
    with_state(|state| {
        state.enabled = true;
        for (uid, raw) in snapshot.queued {
            let fd = sys::adopt_descriptor(raw)?;
            *state.in_daemon.entry(uid).or_default() += 1;
            state.queue.entry(uid).or_default().push(fd);
            state.queued += 1;
        }
        for (uid, n) in snapshot.in_closer {
            *state.in_closer.entry(uid).or_default() += n;
        }
        match snapshot.socket {
            Some(raw) => {
                state.socket = Some(sys::adopt_descriptor(raw)?);
                state.pid = snapshot.pid;
                state.syncs = snapshot.syncs;
                state.generation += 1;
                Ok(())
            }
            None => state.start(),
        }
    })
    .unwrap_or_else(|| Err(io::Error::other("the closer's state is gone")))
}

/// The daemon's side.
#[derive(Default)]
struct State {
    /// A closer was started: descriptors go to it (or wait for it).
    enabled: bool,
    /// The daemon's end of the closer's socket (non-blocking).
    socket: Option<OwnedFd>,
    /// The closer's pid, for the log.
    pid: Option<i32>,
    /// When the last closer was started.
    started_at: Option<Instant>,
    /// Closers started or taken over so far.
    generation: u64,
    /// The closer syncs files ([`sync`]).
    syncs: bool,
    /// Descriptors let go of and not yet sent, by user.
    queue: BTreeMap<u32, Vec<OwnedFd>>,
    /// How many descriptors `queue` holds.
    queued: usize,
    /// Per user: `UserFd`s alive and descriptors queued.
    in_daemon: HashMap<u32, usize>,
    /// Per user: descriptors sent that the closer has not closed yet.
    in_closer: HashMap<u32, usize>,
}

thread_local! {
    /// The daemon is single-threaded: this is its one closer state.
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// Runs `f` on the state; `None` once the thread's state is gone (at exit).
fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> Option<T> {
    STATE
        .try_with(|state| state.try_borrow_mut().ok().map(|mut state| f(&mut state)))
        .ok()
        .flatten()
}

fn release(fd: OwnedFd, uid: u32) {
    let left = with_state(|state| {
        if !state.enabled {
            state.forget(uid, 1, false);
            return Some(fd);
        }
        state.queue.entry(uid).or_default().push(fd);
        state.queued += 1;
        None
    });
    // No closer (unit tests), or the state is gone (the process exits):
    // closed here.
    drop(left);
}

fn decrement(map: &mut HashMap<u32, usize>, uid: u32, n: usize) {
    if let Some(count) = map.get_mut(&uid) {
        *count = count.saturating_sub(n);
        if *count == 0 {
            map.remove(&uid);
        }
    }
}

impl State {
    /// Takes `n` descriptors of `uid` off the daemon's count (onto the
    /// closer's, when `to_closer`).
    fn forget(&mut self, uid: u32, n: usize, to_closer: bool) {
        decrement(&mut self.in_daemon, uid, n);
        if to_closer {
            *self.in_closer.entry(uid).or_default() += n;
        }
    }

    /// When a closer may be started again (`None`: now).
    fn restart_at(&self) -> Option<Instant> {
        self.started_at.map(|at| at + RESTART_EVERY)
    }

    fn start(&mut self) -> io::Result<()> {
        self.started_at = Some(Instant::now());
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        nix::fcntl::fcntl(
            &ours,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )?;
        let pid = crate::actuator::spawn_closer(theirs.as_raw_fd(), CLOSER_NAME)?;
        drop(theirs);
        tracing::debug!(pid, "the closer of users' descriptors started");
        self.generation += 1;
        self.socket = Some(ours);
        self.pid = Some(pid);
        self.syncs = true;
        Ok(())
    }

    /// Sends the closer `files` to sync, if it syncs and its socket has
    /// room; whether it took them.
    fn sync(&mut self, files: &[BorrowedFd<'_>]) -> bool {
        if !self.syncs {
            return false;
        }
        let Some(socket) = &self.socket else {
            return false;
        };
        let raws: Vec<RawFd> = files.iter().map(AsRawFd::as_raw_fd).collect();
        loop {
            let sent = sendmsg::<()>(
                socket.as_raw_fd(),
                &[IoSlice::new(SYNC)],
                &[ControlMessage::ScmRights(&raws)],
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
                None,
            );
            match sent {
                Ok(_) => return true,
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return false,
                Err(error) => {
                    self.lost(&error);
                    return false;
                }
            }
        }
    }

    /// The closer is gone: what it held is its children's to close, and
    /// another one is started when due.
    fn lost(&mut self, error: &dyn std::fmt::Display) {
        tracing::warn!(pid = ?self.pid, %error, queued = self.queued, "the closer of users' descriptors is gone; another is started");
        self.socket = None;
        self.pid = None;
        self.in_closer.clear();
    }

    fn flush(&mut self) {
        if !self.enabled {
            return;
        }
        if self.socket.is_none() {
            if self.queued == 0 || self.restart_at().is_some_and(|at| Instant::now() < at) {
                return;
            }
            if let Err(error) = self.start() {
                tracing::error!(%error, queued = self.queued, "cannot start the closer of users' descriptors; its queue waits");
                return;
            }
        }
        while let Some(mut entry) = self.queue.first_entry() {
            let Some(socket) = &self.socket else {
                return;
            };
            let uid = *entry.key();
            let batch = entry.get_mut();
            let n = batch.len().min(SCM_MAX_FD);
            let raws: Vec<RawFd> = batch[..n].iter().map(AsRawFd::as_raw_fd).collect();
            let bytes = uid.to_le_bytes();
            let sent = sendmsg::<()>(
                socket.as_raw_fd(),
                &[IoSlice::new(&bytes)],
                &[ControlMessage::ScmRights(&raws)],
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
                None,
            );
            match sent {
                Ok(_) => {
                    // In flight now: these closes are not the last ones.
                    let sent: Vec<OwnedFd> = batch.drain(..n).collect();
                    if batch.is_empty() {
                        entry.remove();
                    }
                    self.queued -= n;
                    self.forget(uid, n, true);
                    drop(sent);
                }
                Err(Errno::EAGAIN) => return,
                Err(Errno::EINTR) => {}
                Err(error) => {
                    self.lost(&error);
                    return;
                }
            }
        }
    }

    /// Reads the closer's reports of batches closed.
    fn read_reports(&mut self) {
        loop {
            let Some(socket) = &self.socket else {
                return;
            };
            let mut report = [0u8; 8];
            match nix::sys::socket::recv(socket.as_raw_fd(), &mut report, MsgFlags::MSG_DONTWAIT) {
                Ok(8) => {
                    let (uid, n) = parse_report(report);
                    decrement(&mut self.in_closer, uid, n);
                }
                Ok(0) => {
                    self.lost(&"its socket was closed");
                    return;
                }
                Ok(_) => {}
                Err(Errno::EAGAIN) => return,
                Err(Errno::EINTR) => {}
                Err(error) => {
                    self.lost(&error);
                    return;
                }
            }
        }
    }
}

fn parse_report(report: [u8; 8]) -> (u32, usize) {
    let uid = u32::from_le_bytes([report[0], report[1], report[2], report[3]]);
    let n = u32::from_le_bytes([report[4], report[5], report[6], report[7]]);
    (uid, n as usize)
}

/// The closer's command name (`argv[0]`), which tells the binary to be
/// the closer, and `ps` to show it apart from the daemon.
const CLOSER_NAME: &std::ffi::CStr = c"scored-closer";

/// Whether this process was started as the closer (see [`serve_inherited`]).
pub fn invoked_as_closer() -> bool {
    std::env::args_os()
        .next()
        .is_some_and(|arg0| arg0.as_encoded_bytes() == CLOSER_NAME.to_bytes())
}

/// The closer process, started by the daemon (`actuator::spawn_closer`)
/// with its end of the socket as descriptor 3 and nothing else of the
/// daemon's: serves until the daemon is gone, and returns the exit status.
pub fn serve_inherited() -> i32 {
    match sys::adopt_descriptor(3) {
        Ok(socket) => serve(socket),
        Err(_) => 1,
    }
}

/// The closer process: receives batches of one user's descriptors, hands
/// each to a child that exits at once, and reports each batch closed once
/// its child is reaped. Returns (and so exits) when the daemon's end is
/// closed: the daemon is gone.
fn serve(socket: OwnedFd) -> i32 {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::signal::{SigSet, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};

    // Started from /proc/self/exe, whose name the kernel took as its own.
    let _ = nix::sys::prctl::set_name(CLOSER_NAME);
    // Children's ends through a signalfd; every other signal as for any
    // process, so that root can end the closer like any other.
    let mut children_set = SigSet::empty();
    children_set.add(Signal::SIGCHLD);
    if children_set.thread_set_mask().is_err() {
        return 1;
    }
    let Ok(signals) = SignalFd::with_flags(
        &children_set,
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    ) else {
        return 1;
    };
    let mut children: HashMap<i32, (u32, u32)> = HashMap::new();
    let mut reports: VecDeque<[u8; 8]> = VecDeque::new();
    let mut waiting: VecDeque<(u32, Vec<OwnedFd>)> = VecDeque::new();
    // The child syncing files, and the files to sync once it is done.
    let mut syncer: Option<i32> = None;
    let mut to_sync: Vec<OwnedFd> = Vec::new();
    let mut control = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
    loop {
        while let Some((uid, batch)) = waiting.front() {
            match sys::fork_exiter() {
                Ok((pid, release)) => {
                    children.insert(pid, (*uid, batch.len() as u32));
                    // The child holds the batch and exits once released:
                    // these copies close first, so they are not the last.
                    waiting.pop_front();
                    drop(release);
                }
                Err(_) => break,
            }
        }
        // Forked while no user's descriptor is held here, so that the
        // child, which waits for the disk, keeps no copy of one.
        if syncer.is_none() && !to_sync.is_empty() && waiting.is_empty() {
            match sys::fork_process() {
                Ok(Some(pid)) => {
                    syncer = Some(pid);
                    // The child syncs them; these copies, of the daemon's
                    // own files, close at once.
                    to_sync.clear();
                }
                Ok(None) => {
                    for file in to_sync.drain(..) {
                        let _ = std::fs::File::from(file).sync_data();
                    }
                    sys::exit_now(0)
                }
                Err(_) => {}
            }
        }
        while let Ok(Some(_)) = signals.read_signal() {}
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, ..)) => {
                    if syncer == Some(pid.as_raw()) {
                        syncer = None;
                    }
                    if let Some((uid, n)) = children.remove(&pid.as_raw()) {
                        let mut report = [0u8; 8];
                        report[..4].copy_from_slice(&uid.to_le_bytes());
                        report[4..].copy_from_slice(&n.to_le_bytes());
                        reports.push_back(report);
                    }
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
        while let Some(report) = reports.front() {
            match nix::sys::socket::send(
                socket.as_raw_fd(),
                report,
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            ) {
                Ok(_) => {
                    reports.pop_front();
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => break,
                Err(_) => return 0,
            }
        }
        // Take no more while a batch waits for a fork: the table stays
        // small, so that receiving never fails for want of room (the
        // kernel would then close what did not fit, here).
        let mut socket_events = PollFlags::empty();
        if waiting.is_empty() {
            socket_events |= PollFlags::POLLIN;
        }
        if !reports.is_empty() {
            socket_events |= PollFlags::POLLOUT;
        }
        let mut fds = [
            PollFd::new(socket.as_fd(), socket_events),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        ];
        let fork_failed = syncer.is_none() && !to_sync.is_empty();
        let timeout = if waiting.is_empty() && !fork_failed {
            PollTimeout::NONE
        } else {
            PollTimeout::from(FORK_RETRY.as_millis() as u16)
        };
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return 1,
        }
        let hung_up = fds[0]
            .revents()
            .is_some_and(|events| events.intersects(PollFlags::POLLHUP | PollFlags::POLLERR));
        if !waiting.is_empty() && !hung_up {
            continue;
        }
        loop {
            let mut payload = [0u8; SYNC.len()];
            let mut batch = Vec::new();
            let bytes = {
                let mut iov = [IoSliceMut::new(&mut payload)];
                let message = match recvmsg::<()>(
                    socket.as_raw_fd(),
                    &mut iov,
                    Some(&mut control),
                    MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
                ) {
                    Ok(message) => message,
                    Err(Errno::EINTR) => continue,
                    Err(Errno::EAGAIN) => break,
                    Err(_) => return 0,
                };
                if let Ok(cmsgs) = message.cmsgs() {
                    for cmsg in cmsgs {
                        if let ControlMessageOwned::ScmRights(raw) = cmsg {
                            batch.extend(raw.into_iter().map(sys::own_received_descriptor));
                        }
                    }
                }
                message.bytes
            };
            if bytes == 0 && batch.is_empty() {
                // The daemon is gone: what waits is closed by our exit.
                return 0;
            }
            if bytes == SYNC.len() && payload == *SYNC {
                add_files(&mut to_sync, batch);
                continue;
            }
            if !batch.is_empty() {
                let uid = [payload[0], payload[1], payload[2], payload[3]];
                waiting.push_back((u32::from_le_bytes(uid), batch));
                break;
            }
        }
    }
}

/// Adds `files` to those waiting for a sync, each file once (a sync
/// asked for again while one runs adds nothing): the list holds as many
/// descriptors as the daemon has files to sync, however long a sync
/// takes.
fn add_files(to_sync: &mut Vec<OwnedFd>, files: Vec<OwnedFd>) {
    let identity = |fd: &OwnedFd| {
        nix::sys::stat::fstat(fd)
            .ok()
            .map(|stat| (stat.st_dev, stat.st_ino))
    };
    for file in files {
        let id = identity(&file);
        if id.is_none() || !to_sync.iter().any(|held| identity(held) == id) {
            to_sync.push(file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_waits_for_its_sync_once_however_often_it_is_asked() {
        let dir = std::env::temp_dir().join(format!("scored-closer-sync-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let open = |name: &str| {
            OwnedFd::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.join(name))
                    .unwrap(),
            )
        };
        let mut to_sync = Vec::new();
        add_files(&mut to_sync, vec![open("journal"), open("state.log")]);
        add_files(&mut to_sync, vec![open("journal")]);
        add_files(&mut to_sync, vec![open("journal"), open("state.log")]);
        assert_eq!(to_sync.len(), 2);
        add_files(&mut to_sync, vec![open("journal.1")]);
        assert_eq!(to_sync.len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_report_names_the_user_and_the_count() {
        let mut report = [0u8; 8];
        report[..4].copy_from_slice(&1234u32.to_le_bytes());
        report[4..].copy_from_slice(&17u32.to_le_bytes());
        assert_eq!(parse_report(report), (1234, 17));
    }

    #[test]
    fn without_a_closer_a_user_fd_is_counted_then_closed_at_once() {
        let (read, write) = nix::unistd::pipe().unwrap();
        let fd = UserFd::new(write, 4242);
        assert_eq!(held(4242), 1);
        drop(fd);
        assert_eq!(held(4242), 0);
        // The write end is closed: the read end sees its end.
        let mut byte = [0u8; 1];
        assert_eq!(nix::unistd::read(&read, &mut byte).unwrap(), 0);
    }
}
