//! Keepers: the processes that own a job's processes, so that a job
//! outlives scored.
//!
//! Only a process's parent learns its exit status and resource usage, and
//! sees its stops and continues (`waitid`); when the parent dies, that is
//! lost with it. So the ranks of a job are the children of a **keeper**,
//! one small process per job, as Slurm's slurmstepd holds a job step:
//! it creates the job's ranks, is their parent and the subreaper of
//! their descendants, and relays to scored what only the parent sees
//! (each rank's exec or its failure, stops and continues, and exits with
//! status and usage). It runs no user code. scored keeps signalling the
//! ranks' process groups itself (the switch stays scored's own killpg),
//! and tells the keeper of each: `Continue` before its SIGCONT, `Stop`
//! just before its SIGSTOP where only the keeper's answer can confirm the
//! stop, else after it (once the switch is over, or before scored waits
//! for the answer). The keeper answers a stop once, when every rank
//! stopped, unless /proc has shown scored every rank stopped first; and
//! it alone tells a continue of scored's from one sent by someone else
//! (see `life.rs`).
//!
//! Keepers are made by the **zygote**, a fork of scored taken at the very
//! start of `main` (before scored's heap holds anything), which forks one
//! keeper per job on scored's request, each as scored's own child
//! (`clone(CLONE_PARENT)`): a keeper costs what it writes of a small
//! process's pages, never a copy of scored's heap, and scored, their
//! parent and subreaper, learns when one dies and inherits its orphans.
//! A keeper whose job is over, with no child left and no descriptor
//! whose close could wait, says so (`FromKeeper::Idle`); scored keeps a
//! few such keepers and gives each its next job (`ToKeeper::Adopt`), so
//! that a launch skips the zygote's fork and a keeper's set-up. An idle
//! keeper holds nothing of any job and ends when its link closes.
//!
//! Who owns what: scored owns the decisions and the signals; a keeper owns
//! its job's processes (their creation, their reaping and what only the
//! parent sees) and the descriptors the processes are given (stdio, PMI),
//! holding the client's until scored releases the job (scored then closes
//! its own copies beside them, `closer::UserFd::close_beside_held_copy`);
//! the state directory holds the core's state (`durable.rs`) and, in
//! `STATE_DIR/keepers/ID.sock`, each keeper's socket (a directory only
//! scored's user can enter).
//!
//! The invariant that makes a crash of scored harmless: **a keeper reaps a
//! rank only once scored has recorded its exit (and dropped its process
//! group, which it then never signals again), or while no scored is
//! connected**; and scored records an exit only after the log of the
//! inputs it caused is written. So a process group scored signals always
//! has its rank, a keeper's unreaped child, as leader (its id cannot be
//! reused), no exit is ever lost, and a new scored learns every rank
//! from its keeper: alive (stopped or running), or ended with its status.
//! While no scored runs, nothing but their keepers signals the jobs:
//! running ones run, switched-out ones stay stopped (a keeper stops again
//! a rank of a switched-out job continued from outside). A keeper that
//! ends with no scored connected (its wait ran out) leaves its job's ends
//! in `STATE_DIR/keepers/ID.held` for the next one, and removes its job's
//! cgroups (and the daemon's directory above them, once empty, if no
//! daemon owns the state directory).
//!
//! Where to look: the messages and their framing are here; the zygote is
//! `zygote.rs`; a keeper's life is `life.rs` (between jobs
//! `life/spare.rs`, ending its job alone and the file it then leaves
//! `life/ending.rs`, `heldfile.rs` and `cgroups.rs`), and the creation of its ranks
//! from scored's order `order.rs`. scored's side (a
//! link per keeper, their events turned into the actuator's) is
//! `actuator/keepers.rs`.
#![forbid(unsafe_code)]

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};

pub mod cgroups;
pub mod heldfile;
pub mod life;
pub mod order;
pub mod zygote;

/// The protocol between scored and its keepers; a keeper of another
/// protocol is not taken over.
pub const PROTOCOL: u32 = 4;
/// The first protocol whose keepers read a notes pipe (`ToKeeper::Notes`).
pub const NOTES_PROTOCOL: u32 = 3;
/// The first protocol whose keepers take stops and answer them on pipes
/// (`ToKeeper::Notes`).
pub const SWITCH_PIPES_PROTOCOL: u32 = 4;
/// The largest message either side sends; events beyond it go in the
/// next message.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// The most descriptors one message carries (the kernel's SCM_MAX_FD).
pub const MAX_FDS: usize = 253;
/// The default of `--keeper-wait`: how long a keeper whose scored died
/// waits for one to take its job over before it ends the job.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(600);
/// The directory of the keepers' sockets in the state directory.
pub const SOCKETS: &str = "keepers";

/// What scored tells a keeper.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToKeeper {
    /// Create processes. The message carries a memfd holding the
    /// [`order::Order`] (JSON), then the descriptors it lists.
    Launch,
    /// The job is being switched out (scored's SIGSTOP follows this
    /// message at once, or went before it): create no more processes, and answer `Stopped` with the
    /// serial once every rank has stopped. A rank found continued as the
    /// message is taken is stopped again; a continue seen from then until
    /// the next `Continue` is someone else's.
    Stop(u64),
    /// The job is being continued (scored's SIGCONT follows this
    /// message); creating processes goes on.
    Continue(u64),
    /// These ranks' ends are recorded: reap them.
    Reap(Vec<i32>),
    /// The job is over: once its processes are gone, end.
    Release,
    /// End the job: kill every process of it.
    Kill,
    /// Keep this job (a spare keeper, see [`FromKeeper::Idle`]): its
    /// orders follow.
    Adopt(u64),
    /// The message carries the read end of a pipe on which scored writes
    /// the serial of a continue (8 bytes, native byte order) before its
    /// SIGCONT, in place of a `Continue` first on the link, which would
    /// wake the keeper in the middle of the switch: the keeper reads it
    /// when it sees a rank of its switched-out job continued and finds no
    /// `Continue` on the link. The `Continue` follows on the link once
    /// the switch is over.
    ///
    /// From [`SWITCH_PIPES_PROTOCOL`] on, it also carries the read end of
    /// a **stops pipe** and the write end of an **answers pipe**: scored
    /// writes the serial of a `Stop` (8 bytes) on the first in place of
    /// the message, and the keeper answers it with the serial on the
    /// second in place of `Events([Stopped])`. A pipe's read and write
    /// cost a third of a socket's `recvmsg` and `sendmsg` and need no
    /// JSON, and both are on the switch's critical path. Each side writes
    /// on its pipe only once nothing waits to be sent on the link before
    /// it, and reads its link before the pipe, so that everything keeps
    /// the order it was said in.
    Notes,
}

/// What a keeper tells scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromKeeper {
    /// Who it is; the first message on every connection.
    Hello {
        /// [`PROTOCOL`].
        protocol: u32,
        /// The job it keeps.
        job: u64,
        /// Its pid.
        pid: i32,
        /// Its start time (clock ticks after boot, /proc/PID/stat).
        start: u64,
    },
    /// What it holds, after `Hello` on a connection of a new scored.
    State(Held),
    /// What happened since it last said.
    Events(Vec<Event>),
    /// Its job is over and nothing of it is left (no child, no descriptor
    /// that could hold a close): it may keep another job (`Adopt`), and
    /// ends when its link closes. Said only on the link the zygote gave it.
    Idle,
}

/// What a keeper holds, for a scored that takes its job over.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Held {
    /// Ranks not reaped, or reaped while no scored was connected and not
    /// yet told: pid, start time, stage, rank, host slot, whether stopped,
    /// and how it ended if it did.
    pub ranks: Vec<RankHeld>,
    /// CPU time of the processes it reaped and scored has recorded (µs).
    pub reaped_cpu_us: u64,
    /// Per host slot, the peak memory of its reaped ranks.
    pub reaped_peak: Vec<u64>,
    /// It is still creating processes.
    pub launching: bool,
    /// The serial of scored's last `Stop` or `Continue`, and whether it
    /// was a `Stop`.
    #[serde(default)]
    pub switch: (u64, bool),
    /// What its last order runs, for the messages of a rank that fails
    /// to start: the first stage of the order, each stage's program, and
    /// the working directory.
    #[serde(default)]
    pub described: (usize, Vec<String>, String),
}

/// One rank a keeper holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankHeld {
    /// Its pid (and process group, and session).
    pub pid: i32,
    /// Its start time.
    pub start: u64,
    /// Its stage.
    pub stage: usize,
    /// Its rank.
    pub rank: u32,
    /// Its host slot.
    pub slot: usize,
    /// It has exec'd its program (or ended).
    pub execd: bool,
    /// It is stopped.
    pub stopped: bool,
    /// How it ended, if it did.
    pub ended: Option<Ended>,
}

/// How a process ended, with what it used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    /// Its exit code, or its signal.
    pub code: Option<i32>,
    /// The signal that killed it, and whether it dumped core.
    pub signal: Option<(i32, bool)>,
    /// CPU time of it and its waited-for descendants (µs).
    pub cpu_us: u64,
    /// Its peak memory (bytes).
    pub max_rss: u64,
    /// When its keeper saw it end (µs since the epoch; 0: not known), so
    /// that an end while no scored ran is recorded at its time.
    #[serde(default)]
    pub at_us: u64,
}

/// One thing that happened to a keeper's processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// A rank was created.
    Spawned {
        /// Its pid.
        pid: i32,
        /// Its start time.
        start: u64,
        /// Its stage.
        stage: usize,
        /// Its rank.
        rank: u32,
        /// Its host slot.
        slot: usize,
    },
    /// A rank exec'd its program.
    Execd(i32),
    /// A step before a rank's exec failed (`actuator::spawn::Step`), with
    /// its errno; the rank ends.
    Failed {
        /// The rank.
        pid: i32,
        /// The step, as its number.
        step: u32,
        /// The errno.
        errno: i32,
    },
    /// Every rank stopped after the `Stop` of this serial (or ended).
    Stopped(u64),
    /// A rank was continued by someone other than scored while its job
    /// was switched out (after the `Stop` of `serial`); the keeper has
    /// stopped it again.
    ContinuedOutside {
        /// The rank.
        pid: i32,
        /// The serial of the `Stop` it was continued after.
        serial: u64,
    },
    /// A rank ended (its zombie waits for `Reap`).
    Exited {
        /// The rank.
        pid: i32,
        /// How.
        ended: Ended,
    },
    /// A descendant of the job whose parent died came to the keeper and
    /// ended; it is reaped.
    Orphan {
        /// Its pid.
        pid: i32,
        /// Its CPU time (µs).
        cpu_us: u64,
    },
    /// The launch has created every process (or stopped for good).
    Launched,
    /// The launch failed before a rank could be created (a pipe, a fork,
    /// a descriptor); the text says what, with the status.
    LaunchFailed {
        /// What failed.
        message: String,
        /// The exit status (126, 127 or 70).
        status: i32,
    },
}

/// Sends one message with `fds`, without blocking: `Ok(false)` if the
/// socket's buffer is full (try again once it is writable).
pub fn send<T: Serialize>(socket: BorrowedFd<'_>, message: &T, fds: &[RawFd]) -> io::Result<bool> {
    let bytes = serde_json::to_vec(message).map_err(io::Error::other)?;
    let control = [ControlMessage::ScmRights(fds)];
    let control: &[ControlMessage] = if fds.is_empty() { &[] } else { &control };
    match sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(&bytes)],
        control,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        None,
    ) {
        Ok(_) => Ok(true),
        Err(nix::errno::Errno::EAGAIN) => Ok(false),
        Err(errno) => Err(errno.into()),
    }
}

/// Receives one message and the descriptors it carried, without blocking:
/// `Ok(None)` if none waits; end of file is `UnexpectedEof`; a message
/// that does not read is `InvalidData`.
pub fn receive<T: for<'de> Deserialize<'de>>(
    socket: BorrowedFd<'_>,
    buffer: &mut [u8],
) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let (len, fds, truncated) = {
        let mut iov = [IoSliceMut::new(buffer)];
        let received = match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(received) => received,
            Err(nix::errno::Errno::EAGAIN) => return Ok(None),
            Err(errno) => return Err(errno.into()),
        };
        let mut fds = Vec::new();
        if let Ok(messages) = received.cmsgs() {
            for message in messages {
                if let ControlMessageOwned::ScmRights(raw) = message {
                    for fd in raw {
                        fds.push(crate::sys::own_received_descriptor(fd));
                    }
                }
            }
        }
        let truncated = received.flags.contains(MsgFlags::MSG_TRUNC);
        (received.bytes, fds, truncated)
    };
    if len == 0 && fds.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    if truncated {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a message longer than the largest allowed",
        ));
    }
    let message = serde_json::from_slice(&buffer[..len])
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error.to_string()))?;
    Ok(Some((message, fds)))
}

/// Reads the serials a pipe of [`ToKeeper::Notes`] holds (each one write
/// of 8 bytes, which a pipe never splits), and whether its writer is gone.
pub fn read_serials(pipe: BorrowedFd<'_>) -> (Vec<u64>, bool) {
    let mut serials = Vec::new();
    let mut buffer = [0u8; 512];
    loop {
        match nix::unistd::read(pipe, &mut buffer) {
            Ok(0) => return (serials, true),
            Ok(len) => {
                serials.extend(
                    buffer[..len]
                        .chunks_exact(8)
                        .map(|note| u64::from_ne_bytes(note.try_into().unwrap_or_default())),
                );
                // Less than asked for: the pipe is empty.
                if len < buffer.len() {
                    return (serials, false);
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => return (serials, false),
            Err(_) => return (serials, true),
        }
    }
}

/// A pair of connected, close-on-exec message sockets.
pub fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )?;
    Ok((a, b))
}

/// A message socket listening at `path` (a keeper's, for the scored that
/// takes its job over), non-blocking and close-on-exec.
pub fn listen(path: &std::path::Path) -> io::Result<OwnedFd> {
    use nix::sys::socket::{
        bind, listen as listen_on, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
    };
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    bind(fd.as_raw_fd(), &UnixAddr::new(path)?)?;
    listen_on(&fd, Backlog::new(4).unwrap_or(Backlog::MAXCONN))?;
    Ok(fd)
}

/// Accepts a connection on `listener`, non-blocking and close-on-exec, if
/// one waits.
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    use nix::sys::socket::{accept4, SockFlag};
    match accept4(
        listener.as_raw_fd(),
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    ) {
        Ok(fd) => Ok(Some(crate::sys::own_received_descriptor(fd))),
        Err(nix::errno::Errno::EAGAIN) => Ok(None),
        Err(errno) => Err(errno.into()),
    }
}

/// Connects a message socket to the keeper listening at `path`; the
/// connection is non-blocking and close-on-exec.
pub fn connect(path: &std::path::Path) -> io::Result<OwnedFd> {
    use nix::sys::socket::{
        connect as connect_to, socket, AddressFamily, SockFlag, SockType, UnixAddr,
    };
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    connect_to(fd.as_raw_fd(), &UnixAddr::new(path)?)?;
    nix::fcntl::fcntl(
        &fd,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )?;
    Ok(fd)
}

/// Names this process as `ps` shows it: its command line becomes `title`
/// (written over the memory of the original arguments through
/// /proc/self/mem, as setproctitle does, cut to fit) and its name the
/// first 15 bytes of `title`. A zygote or keeper would otherwise show
/// scored's own command line.
pub fn retitle(title: &str) {
    Title::open().set(title);
}

/// This process's /proc/self/mem, held open to retitle it again and again
/// (a keeper at each job it keeps) without opening it each time. It is
/// this process's: one inherited across a fork would write the parent's
/// memory.
pub struct Title {
    mem: Option<std::fs::File>,
}

impl Title {
    /// Opens this process's memory for its titles.
    pub fn open() -> Title {
        let mem = std::fs::OpenOptions::new()
            .write(true)
            .open("/proc/self/mem")
            .ok();
        Title { mem }
    }

    /// See [`retitle`].
    pub fn set(&self, title: &str) {
        let name: String = title.chars().filter(|c| *c != '\0').take(15).collect();
        if let Ok(name) = std::ffi::CString::new(name) {
            let _ = nix::sys::prctl::set_name(&name);
        }
        // Where the arguments lie does not change: read once (by the
        // zygote, whose keepers inherit it).
        static ARGUMENTS: std::sync::OnceLock<Option<(u64, u64)>> = std::sync::OnceLock::new();
        let Some((start, end)) = *ARGUMENTS.get_or_init(arguments_area) else {
            return;
        };
        let room = end.saturating_sub(start) as usize;
        let Some(mem) = self.mem.as_ref().filter(|_| room > 0) else {
            return;
        };
        let mut bytes = vec![0u8; room];
        let len = title.len().min(room - 1);
        bytes[..len].copy_from_slice(&title.as_bytes()[..len]);
        use std::os::unix::fs::FileExt;
        let _ = mem.write_at(&bytes, start);
    }
}

/// Where this process's arguments lie in its memory (`arg_start`,
/// `arg_end` of /proc/self/stat).
fn arguments_area() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 48 and 49 of proc(5), counted from field 3 after the name.
    Some((fields.get(45)?.parse().ok()?, fields.get(46)?.parse().ok()?))
}

/// Events split into messages under [`MAX_MESSAGE`].
pub fn batches(events: Vec<Event>) -> Vec<FromKeeper> {
    // An event serializes to well under 256 bytes.
    const PER_MESSAGE: usize = MAX_MESSAGE / 256;
    let mut out = Vec::new();
    let mut events = events.into_iter().peekable();
    while events.peek().is_some() {
        out.push(FromKeeper::Events(
            events.by_ref().take(PER_MESSAGE).collect(),
        ));
    }
    out
}

#[cfg(test)]
mod tests;
