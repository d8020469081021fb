//! The closer: the one way the daemon lets go of a descriptor that a user
//! handed over.
//!
//! Closing a user's descriptor can sleep in the kernel for as long as
//! someone else likes. The last close of a TCP socket with `SO_LINGER`
//! and unsent data waits for its peer to read (`sk_stream_wait_close`),
//! a file system's release for its server; and every close(2), not only
//! the last, of a FUSE file asks its server to flush (`fuse_flush`, from
//! `filp_close`, also at exec and exit), which a hostile server (any user
//! may mount FUSE where `fusermount3` is setuid) need never answer. Users
//! choose what they pass to scored (a job's standard and inherited
//! descriptors, PMI descriptors, and the socket of their connection,
//! whose queue may still hold descriptors in flight that a close would
//! drop), so no process that serves every user makes a close of one
//! that could wait:
//!
//! - Every descriptor received from a client is a [`UserFd`] from the
//!   moment it is received, and every client's socket not read to its
//!   end is let go through [`discard`]. Dropping a `UserFd` does not
//!   close it: it joins a queue, and [`flush`] sends the queue to the
//!   closer (SCM_RIGHTS over a socketpair, never blocking), one user's
//!   batch at a time, each with the read end of a release pipe.
//! - The daemon closes its own copies of a batch sent that close at once
//!   (`sys::closes_at_once`: a pipe, a Unix socket, a terminal, which
//!   have nothing to flush and, with a copy in flight, are not the last).
//!   The others are let go of by a
//!   replacing task ([`Closing`], `sys::ReplacingTask`): a child that
//!   shares the daemon's memory and descriptor table and puts /dev/null
//!   in place of each (closing what the entry held is then its, and so is
//!   any wait), then of the release pipe's write end, and exits. The
//!   numbers stay the daemon's until the task is reaped (at the next
//!   [`flush`]), so none is reused under a task. At most
//!   [`MAX_TASKS_PER_USER`] tasks run for one user and [`MAX_TASKS`] in
//!   all: a user whose file system holds their closes holds their own
//!   tasks, and their later batches wait in the daemon, counted against
//!   them; no one else's.
//! - At a job's end, its client's descriptors that close at once are
//!   closed in the daemon, not batched, while the job's keeper still holds
//!   its copies (it keeps them until told the job is over): the daemon's
//!   close is then not the last either ([`UserFd::close_beside_held_copy`]),
//!   and an interactive job's end costs the closer no fork.
//! - The closer is a process the daemon starts with it ([`start`]): this
//!   binary again, named `scored-closer`, with nothing of the daemon's but
//!   its end of the socket; it runs no user code and never holds a
//!   user's descriptor (`serve.rs`). For each batch it forks a child that
//!   receives it, waits for the release pipe's end (the daemon's copies
//!   are then gone) and exits, so the batch's last close is that exit: an
//!   exiting process never lingers on a socket (the kernel skips
//!   `SO_LINGER` for a task that is exiting), and a close that still
//!   waits holds that child alone. One child per batch, so one user's
//!   stuck close delays no one else's (another job's pipe still sees its
//!   end).
//! - The closer says which batches it has closed (once their child is
//!   reaped, so after the daemon's copies too), so that [`held`] counts
//!   what each user makes root hold, in the daemon and in the closer, for
//!   the per-user descriptor budget (`evloop::budget`).
//! - While the closer's socket is full, or the closer is gone, the queue
//!   waits in the daemon (and still counts against its users). A closer
//!   that dies is started again, at most every [`RESTART_EVERY`]; an
//!   in-place restart hands its socket, its pid, the queue and the
//!   batches still being let go of to the new image ([`hand_over`],
//!   [`resume`]), which sends those again and reaps the tasks.
//! - At the daemon's exit ([`finish`]), what is left goes to replacing
//!   tasks, so the exit itself closes nothing of a user's while a task
//!   shares the table.
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
//! job's business). A process forked from the daemon holds a copy of
//! every such descriptor and asks each server to flush when it closes its
//! copies, at its exec or exit.
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{
    sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
};
use serde::{Deserialize, Serialize};

use crate::sys;

mod serve;

use serve::CLOSER_NAME;
pub use serve::{invoked_as_closer, serve_inherited};

/// The most descriptors one message carries (SCM_MAX_FD in the kernel's
/// include/net/scm.h).
const SCM_MAX_FD: usize = 253;
/// A closer that died is started again at most this often.
pub const RESTART_EVERY: Duration = Duration::from_secs(1);
/// How long the daemon, as it exits, waits for the closer to take what is
/// still queued; what it has not taken is closed by the daemon's exit.
pub const EXIT_WAIT: Duration = Duration::from_secs(1);
/// The closer's scheduling priority (SCHED_FIFO, below the daemon's and
/// the keepers'), where the daemon has real-time priority: at normal
/// priority, woken while jobs keep every CPU busy, it would wait for a
/// CPU until the next switch's SIGSTOPs free one, and then take that CPU
/// from the ranks that must run to take their stop, lengthening the
/// switch. Its children start at this priority (the one that syncs the
/// daemon's files keeps it); those that close users' descriptors go to
/// normal priority once they have taken their batch.
pub const CLOSER_PRIORITY: i32 = 1;
/// How long the closer waits before trying a fork again that failed.
const FORK_RETRY: Duration = Duration::from_millis(100);
/// The payload of a message that asks the closer to sync the files it
/// carries: longer than the uid that a batch of descriptors to close
/// carries, so that the two cannot be taken for each other.
const SYNC: &[u8; 8] = b"fdatasyn";
/// The flag of a batch's payload (after the uid) that says its last
/// descriptor is the read end of a release pipe, which reaches its end
/// once the daemon's own copies of the batch are gone.
const RELEASE: u32 = 1;
/// The most replacing tasks let go of the daemon's copies at once, and
/// the most for one user: a user whose file system holds their closes
/// holds that many tasks, and their later batches wait in the daemon,
/// counted against them.
const MAX_TASKS: usize = 64;
const MAX_TASKS_PER_USER: usize = 4;

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

impl UserFd {
    /// Closes this copy in the daemon where that cannot wait: it closes at
    /// once (`sys::closes_at_once`: a pipe, a Unix socket, a terminal,
    /// with nothing to flush) and a copy of the same open file outlives
    /// this close (the daemon's own, or that of the process that serves
    /// this one job, its keeper, until the daemon tells it), so that this
    /// close is not the last and releases nothing. Anything else goes to
    /// the closer, as a drop sends it.
    pub fn close_beside_held_copy(mut self) {
        let Some(fd) = self.fd.take() else {
            return;
        };
        if sys::closes_at_once(fd.as_fd()) {
            with_state(|state| state.forget(self.uid, 1, false));
            drop(fd);
        } else {
            release(fd, self.uid);
        }
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

/// Whether `pid` is a replacing task (see [`Closing`]): a child of the
/// daemon's that is neither a job's nor to be signalled.
pub fn is_task(pid: i32) -> bool {
    with_state(|state| {
        state.strays.contains(&pid)
            || state
                .closing
                .iter()
                .any(|closing| closing.task.as_ref().is_some_and(|task| task.pid() == pid))
    })
    .unwrap_or(false)
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
    // What the closer did not take, and every batch without a task, goes
    // to a replacing task: the daemon's exit then closes nothing of a
    // user's while a task shares its table (and the last task's exit
    // closes what is left, in the task).
    with_state(|state| {
        let queue = std::mem::take(&mut state.queue);
        state.queued = 0;
        for (uid, fds) in queue {
            state.closing.push(Closing {
                uid,
                fds,
                release: None,
                task: None,
                done: false,
            });
        }
        state.start_tasks(false);
        state.sweep_at_exit();
    });
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
    /// Replacing tasks still running (see [`Closing`]), for the new
    /// image to reap; their batches are among `queued`.
    #[serde(default)]
    pub tasks: Vec<i32>,
}

/// The closer's state for the next image, and the descriptors it needs
/// kept open across the execve. Changes nothing: should the restart fail,
/// the daemon carries on with its closer.
pub fn hand_over() -> (CloserSnapshot, Vec<RawFd>) {
    with_state(|state| {
        state.read_reports();
        state.flush();
        // The batches whose copies are still being let go of go through
        // the closer again in the new image: which of their numbers a
        // running task has replaced is the task's business (a replaced
        // one holds /dev/null). Their release pipes close with this
        // image (close-on-exec).
        let closing = state
            .closing
            .iter()
            .flat_map(|closing| closing.fds.iter().map(|fd| (closing.uid, fd.as_raw_fd())));
        let queued: Vec<(u32, RawFd)> = state
            .queue
            .iter()
            .flat_map(|(uid, fds)| fds.iter().map(|fd| (*uid, fd.as_raw_fd())))
            .chain(closing)
            .collect();
        let socket = state.socket.as_ref().map(AsRawFd::as_raw_fd);
        let mut keep: Vec<RawFd> = queued.iter().map(|(_, fd)| *fd).collect();
        keep.extend(socket);
        let mut tasks: Vec<i32> = state
            .closing
            .iter()
            .filter_map(|closing| closing.task.as_ref().map(sys::ReplacingTask::pid))
            .chain(state.strays.iter().copied())
            .collect();
        // A task still running (it waits in a close) keeps the table this
        // image leaves behind at its execve, with a copy of every
        // descriptor it holds: a last task puts the placeholder in place
        // of each of those once the exec is done (and does nothing if it
        // is not), so that the old table keeps nothing but the batches
        // still being let go of, and another user's pipe sees its end
        // when the new image lets go of it.
        if state.closing.iter().any(|closing| closing.task.is_some()) {
            if let Some((own, with)) = state.own_descriptors() {
                if let Ok(task) = sys::ReplacingTask::start_after_exec(&own, with) {
                    tasks.push(task.pid());
                    state.strays.push(task.pid());
                    // Its stack and list are in the memory this image
                    // leaves to it (or, without an exec, never freed).
                    std::mem::forget(task);
                }
            }
        }
        let snapshot = CloserSnapshot {
            socket,
            pid: state.pid,
            queued,
            in_closer: state.in_closer.iter().map(|(u, n)| (*u, *n)).collect(),
            syncs: state.syncs,
            tasks,
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
        state.strays.extend(snapshot.tasks);
        state.open_placeholder();
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
    /// Batches sent whose copies in the daemon's table are let go of by
    /// replacing tasks, in the order sent.
    closing: Vec<Closing>,
    /// /dev/null, which replacing tasks put in place of what they let go of.
    placeholder: Option<OwnedFd>,
    /// Replacing tasks an earlier image started, to reap.
    strays: Vec<i32>,
}

/// A batch sent to the closer whose copies in the daemon's table are yet
/// to be let go of. Closing a user's descriptor in the daemon would make
/// the daemon wait: a FUSE file's server is asked to flush at every
/// close, not only the last, and may never answer. So a replacing task
/// (`sys::ReplacingTask`), which shares the daemon's table, puts the
/// placeholder in place of each, and waits, if anything does, in the
/// daemon's stead; each number stays the daemon's (and this batch's)
/// until the task is reaped, and then holds only the placeholder.
struct Closing {
    uid: u32,
    /// The user's descriptors (the placeholder, once replaced).
    fds: Vec<OwnedFd>,
    /// The write end of the batch's release pipe: the closer's child
    /// exits once it reaches its end, after the daemon's copies are gone,
    /// so that the child's exit makes the last close of each.
    release: Option<OwnedFd>,
    task: Option<sys::ReplacingTask>,
    /// Its task replaced every number: closing them closes the
    /// placeholder.
    done: bool,
}

impl Drop for Closing {
    /// Closes the batch's numbers only once a task has replaced them all;
    /// otherwise (the daemon exits first) leaves them to the task, or to
    /// the exit of the last process that shares the table, and leaves a
    /// running task its stack.
    fn drop(&mut self) {
        if self.done {
            return;
        }
        for fd in self.fds.drain(..).chain(self.release.take()) {
            let _ = std::os::fd::IntoRawFd::into_raw_fd(fd);
        }
        if let Some(task) = self.task.take() {
            std::mem::forget(task);
        }
    }
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
        self.open_placeholder();
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
        self.reap_tasks();
        self.send();
        self.start_tasks(true);
    }

    /// Sends what is queued to the closer, as far as its socket takes it
    /// (starting a closer again if the last one died and one is due).
    fn send(&mut self) {
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
            // One place for the release pipe's read end.
            let n = batch.len().min(SCM_MAX_FD - 1);
            let mut raws: Vec<RawFd> = batch[..n].iter().map(AsRawFd::as_raw_fd).collect();
            let release = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok();
            let mut bytes = [0u8; 8];
            bytes[..4].copy_from_slice(&uid.to_le_bytes());
            if let Some((read, _)) = &release {
                raws.push(read.as_raw_fd());
                bytes[4..].copy_from_slice(&RELEASE.to_le_bytes());
            }
            let sent = sendmsg::<()>(
                socket.as_raw_fd(),
                &[IoSlice::new(&bytes)],
                &[ControlMessage::ScmRights(&raws)],
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
                None,
            );
            match sent {
                Ok(_) => {
                    // In flight now: the daemon's closes are not the last
                    // ones. Those of descriptors that close at once (a
                    // pipe, a Unix socket, a terminal: nothing to flush,
                    // no linger) are made here; the others are a
                    // replacing task's, not the loop's.
                    let fds: Vec<OwnedFd> = batch.drain(..n).collect();
                    if batch.is_empty() {
                        entry.remove();
                    }
                    self.queued -= n;
                    self.forget(uid, n, true);
                    let (at_once, fds): (Vec<OwnedFd>, Vec<OwnedFd>) = fds
                        .into_iter()
                        .partition(|fd| sys::closes_at_once(fd.as_fd()));
                    drop(at_once);
                    if !fds.is_empty() {
                        self.closing.push(Closing {
                            uid,
                            fds,
                            release: release.map(|(_, write)| write),
                            task: None,
                            done: false,
                        });
                    }
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

    /// Starts a replacing task for each batch sent that has none, within
    /// [`MAX_TASKS`] and [`MAX_TASKS_PER_USER`] when `bounded`.
    fn start_tasks(&mut self, bounded: bool) {
        if self.closing.iter().all(|closing| closing.task.is_some()) {
            return;
        }
        self.open_placeholder();
        let Some(with) = self.placeholder.as_ref().map(AsRawFd::as_raw_fd) else {
            return;
        };
        let mut per_user: HashMap<u32, usize> = HashMap::new();
        for closing in &self.closing {
            if closing.task.is_some() {
                *per_user.entry(closing.uid).or_default() += 1;
            }
        }
        let mut running: usize = per_user.values().sum();
        for closing in &mut self.closing {
            if closing.task.is_some() {
                continue;
            }
            let mine = per_user.entry(closing.uid).or_default();
            if bounded && (running >= MAX_TASKS || *mine >= MAX_TASKS_PER_USER) {
                continue;
            }
            let raws: Vec<RawFd> = closing
                .fds
                .iter()
                .chain(&closing.release)
                .map(AsRawFd::as_raw_fd)
                .collect();
            match sys::ReplacingTask::start(&raws, with) {
                Ok(task) => {
                    closing.task = Some(task);
                    *mine += 1;
                    running += 1;
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot start a task to let go of users' descriptors; they wait");
                    return;
                }
            }
        }
    }

    /// At the daemon's exit, while a replacing task still runs (it waits
    /// in a close) and so keeps the table the daemon shares with it: a
    /// last task puts the placeholder in place of every other descriptor
    /// of the daemon's (its sockets, keepers' links, the zygote's), so
    /// that what the daemon leaves behind is closed now, not once a
    /// user's file system answers. A descriptor of a user's that got
    /// there (none should) then waits in that task.
    fn sweep_at_exit(&mut self) {
        if self.closing.iter().all(|closing| closing.task.is_none()) {
            return;
        }
        let Some((own, with)) = self.own_descriptors() else {
            return;
        };
        if let Ok(task) = sys::ReplacingTask::start(&own, with) {
            // Its stack and list are its own until the daemon is gone.
            std::mem::forget(task);
        }
    }

    /// The daemon's descriptors but 0 to 2, the placeholder and the
    /// batches being let go of, with the placeholder.
    fn own_descriptors(&self) -> Option<(Vec<RawFd>, RawFd)> {
        let with = self.placeholder.as_ref().map(AsRawFd::as_raw_fd)?;
        let batches: Vec<RawFd> = self
            .closing
            .iter()
            .flat_map(|closing| closing.fds.iter().chain(&closing.release))
            .map(AsRawFd::as_raw_fd)
            .collect();
        // Collected first: the listing is itself a descriptor, closed
        // before a task starts (which then puts /dev/null there).
        let listed: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
            .ok()?
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
            .collect();
        let (mut own, slow): (Vec<RawFd>, Vec<RawFd>) = listed
            .into_iter()
            .filter(|fd| *fd > 2 && *fd != with && !batches.contains(fd))
            .partition(|fd| sys::closes_at_once_number(*fd));
        // What closes at once first (sockets, pipes): a user's file whose
        // close waits then keeps only what comes after it.
        own.extend(slow);
        Some((own, with))
    }

    /// Opens the placeholder if it is not open yet: at start, so that it
    /// is there when the daemon runs out of descriptors.
    fn open_placeholder(&mut self) {
        if self.placeholder.is_some() {
            return;
        }
        match std::fs::File::open("/dev/null") {
            Ok(null) => self.placeholder = Some(OwnedFd::from(null)),
            Err(error) => {
                tracing::warn!(%error, "cannot open /dev/null; the daemon's copies of users' descriptors wait for it");
            }
        }
    }

    /// Reaps the replacing tasks that ended: their batches' numbers hold
    /// the placeholder and are closed; a task killed halfway is started
    /// again on the same batch.
    fn reap_tasks(&mut self) {
        for closing in &mut self.closing {
            let Some(task) = &closing.task else { continue };
            match sys::reap_replacing(task.pid()) {
                None => {}
                Some(true) => {
                    closing.task = None;
                    closing.done = true;
                }
                Some(false) => closing.task = None,
            }
        }
        self.closing.retain(|closing| !closing.done);
        self.strays
            .retain(|pid| sys::reap_replacing(*pid).is_none());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_names_the_user_and_the_count() {
        let mut report = [0u8; 8];
        report[..4].copy_from_slice(&1234u32.to_le_bytes());
        report[4..].copy_from_slice(&17u32.to_le_bytes());
        assert_eq!(parse_report(report), (1234, 17));
    }

    #[test]
    fn beside_a_held_copy_a_pipe_closes_here_and_a_file_goes_to_the_closer() {
        queue_only();
        let (read, write) = nix::unistd::pipe().unwrap();
        let keepers_copy = write.try_clone().unwrap();
        UserFd::new(write, 4343).close_beside_held_copy();
        assert_eq!((held(4343), queued()), (0, 0));
        // Only the holder's copy kept the pipe open.
        drop(keepers_copy);
        let mut byte = [0u8; 1];
        assert_eq!(nix::unistd::read(&read, &mut byte).unwrap(), 0);
        // A regular file may sit on its file system's server: the closer's.
        let file = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
        UserFd::new(OwnedFd::from(file), 4343).close_beside_held_copy();
        assert_eq!((held(4343), queued()), (1, 1));
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
