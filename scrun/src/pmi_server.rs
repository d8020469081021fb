//! The imperative shell of scrun's PMI server: the socketpairs, their
//! reads and writes, around the pure worlds of [`scrun::pmi`].
//!
//! [`PmiServer::create`] makes one socketpair per rank of each stage; the
//! ranks' ends travel to scored with the submission (`Submit::pmi_ranks`)
//! and scrun keeps the others, non-blocking. The session's loop polls
//! them ([`PmiServer::poll_fds`]) and hands readiness to
//! [`PmiServer::service`], which returns the end of the job a rank asked
//! for (abort) or caused (a fault), once. Memory is bounded: a read takes
//! at most [`READ_CHUNK`] bytes at a time and only while the rank's
//! decoder is within its limit, and a rank's unread replies are bounded
//! by [`MAX_UNREAD`].
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::socket::{self, AddressFamily, MsgFlags, SockFlag, SockType};
use std::rc::Rc;

use scrun::pmi::names::Names;
use scrun::pmi::{Effect, Mode, World};

/// The most bytes one read takes from a rank.
const READ_CHUNK: usize = 4096;
/// The most bytes read from one rank per wake-up, so that a flooding rank
/// cannot keep scrun from the others and from scored.
const READ_PER_WAKE: usize = 64 * 1024;
/// The most bytes of replies a rank may leave unread before it is taken
/// for a rank that floods requests without reading.
const MAX_UNREAD: usize = 256 * 1024;

/// How a rank ended the job through PMI: the status scrun exits with and
/// the line it prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmiEnd {
    /// scrun's exit status.
    pub code: i32,
    /// What happened, naming the rank (without the `scrun: ` prefix).
    pub message: String,
}

struct Conn {
    fd: Option<OwnedFd>,
    world: usize,
    rank: usize,
    unread: VecDeque<u8>,
}

/// The server ends of every rank's PMI connection, and the worlds.
pub struct PmiServer {
    worlds: Vec<World>,
    conns: Vec<Conn>,
    ended: bool,
}

impl PmiServer {
    /// Worlds of `ranks` ranks for each of `stages` stages, serving
    /// `mode`; returns the server and the ranks' ends, stage by stage in
    /// rank order (the order `Submit::pmi_ranks` gives them).
    pub fn create(
        mode: Mode,
        ranks: usize,
        stages: usize,
    ) -> std::io::Result<(PmiServer, Vec<OwnedFd>)> {
        let pid = std::process::id();
        let mut conns = Vec::with_capacity(ranks * stages);
        let mut rank_ends = Vec::with_capacity(ranks * stages);
        for world in 0..stages {
            for rank in 0..ranks {
                let (server, client) = socket::socketpair(
                    AddressFamily::Unix,
                    SockType::Stream,
                    None,
                    SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
                )?;
                // The rank's end blocks, as MPICH's client expects (the
                // flag is the open file's, so the rank would see it).
                nix::fcntl::fcntl(
                    &client,
                    nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
                )?;
                conns.push(Conn {
                    fd: Some(server),
                    world,
                    rank,
                    unread: VecDeque::new(),
                });
                rank_ends.push(client);
            }
        }
        let names = Rc::new(RefCell::new(Names::new()));
        let worlds = (0..stages)
            .map(|stage| {
                World::new(ranks, format!("scrun_{pid}_{stage}"), mode)
                    .sharing_names(Rc::clone(&names), stage)
            })
            .collect();
        Ok((
            PmiServer {
                worlds,
                conns,
                ended: false,
            },
            rank_ends,
        ))
    }

    /// The descriptors to poll, each with its index for
    /// [`PmiServer::service`] and what to wait for. None once the job is
    /// ended through PMI: the ranks are being killed.
    pub fn poll_fds(&self) -> Vec<(usize, BorrowedFd<'_>, PollFlags)> {
        if self.ended {
            return Vec::new();
        }
        self.conns
            .iter()
            .enumerate()
            .filter_map(|(idx, conn)| {
                let fd = conn.fd.as_ref()?;
                let mut flags = PollFlags::POLLIN;
                if !conn.unread.is_empty() {
                    flags |= PollFlags::POLLOUT;
                }
                Some((idx, fd.as_fd(), flags))
            })
            .collect()
    }

    /// Serves connection `idx` after poll said `revents`; returns how the
    /// job ends if a rank ended it.
    pub fn service(&mut self, idx: usize, revents: PollFlags) -> Option<PmiEnd> {
        if self.ended || idx >= self.conns.len() {
            return None;
        }
        let mut effects = Vec::new();
        if revents.intersects(PollFlags::POLLOUT) {
            self.flush(idx, &mut effects);
        }
        if revents.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
            self.read(idx, &mut effects);
        }
        self.apply(idx, effects)
    }

    /// Reads what the rank sent, within the bounds, and feeds its world.
    fn read(&mut self, idx: usize, effects: &mut Vec<Effect>) {
        let (world, rank) = (self.conns[idx].world, self.conns[idx].rank);
        let mut taken = 0;
        let mut chunk = [0u8; READ_CHUNK];
        while taken < READ_PER_WAKE && !self.worlds[world].ended() {
            let Some(fd) = self.conns[idx].fd.as_ref() else {
                return;
            };
            match socket::recv(fd.as_raw_fd(), &mut chunk, MsgFlags::MSG_DONTWAIT) {
                Ok(0) | Err(Errno::ECONNRESET) => {
                    self.conns[idx].fd = None;
                    effects.extend(self.worlds[world].closed(rank));
                    return;
                }
                Ok(n) => {
                    taken += n;
                    effects.extend(self.worlds[world].received(rank, &chunk[..n]));
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return,
                Err(errno) => {
                    let message = format!("its PMI connection failed: {}", errno.desc());
                    self.worlds[world].fault(rank, message, effects);
                    return;
                }
            }
        }
    }

    /// Writes what the rank has not read yet, as far as it takes it.
    fn flush(&mut self, idx: usize, effects: &mut Vec<Effect>) {
        let conn = &mut self.conns[idx];
        while !conn.unread.is_empty() {
            let Some(fd) = conn.fd.as_ref() else {
                conn.unread.clear();
                return;
            };
            let (front, _) = conn.unread.as_slices();
            match socket::send(
                fd.as_raw_fd(),
                front,
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            ) {
                Ok(n) => {
                    conn.unread.drain(..n);
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => break,
                // The rank went away; its end shows as end of file.
                Err(_) => {
                    conn.unread.clear();
                    break;
                }
            }
        }
        if conn.unread.len() > MAX_UNREAD {
            let (world, rank) = (conn.world, conn.rank);
            let message = format!(
                "left more than {} KiB of PMI replies unread (a flood of requests)",
                MAX_UNREAD / 1024
            );
            self.worlds[world].fault(rank, message, effects);
        }
    }

    /// Queues the replies, writes them, and turns an abort or a fault into
    /// the job's end.
    fn apply(&mut self, idx: usize, effects: Vec<Effect>) -> Option<PmiEnd> {
        let world = self.conns[idx].world;
        let ranks = self.worlds[world].size();
        let mut end = None;
        let mut touched = Vec::new();
        let mut later = Vec::new();
        for effect in effects {
            match effect {
                Effect::Send { rank, bytes } => {
                    let target = world * ranks + rank;
                    if let Some(conn) = self.conns.get_mut(target) {
                        conn.unread.extend(bytes);
                        touched.push(target);
                    }
                }
                Effect::Abort {
                    rank,
                    code,
                    message,
                } => {
                    let status = code.rem_euclid(256);
                    let what = match message {
                        Some(message) => format!(": {}", message.escape_debug()),
                        None => String::new(),
                    };
                    end.get_or_insert(PmiEnd {
                        code: status,
                        message: format!(
                            "{}rank {rank} called abort with exit code {code}{what}",
                            self.stage_prefix(world)
                        ),
                    });
                }
                Effect::Fault { rank, message } => {
                    end.get_or_insert(PmiEnd {
                        code: scored_proto::exitcode::FAILURE,
                        message: format!("{}rank {rank} {message}", self.stage_prefix(world)),
                    });
                }
            }
        }
        touched.dedup();
        for target in touched {
            self.flush(target, &mut later);
        }
        for effect in later {
            if let Effect::Fault { rank, message } = effect {
                end.get_or_insert(PmiEnd {
                    code: scored_proto::exitcode::FAILURE,
                    message: format!("{}rank {rank} {message}", self.stage_prefix(world)),
                });
            }
        }
        if end.is_some() {
            self.ended = true;
        }
        end
    }

    /// `stage S: ` for a job of several stages, nothing otherwise.
    fn stage_prefix(&self, world: usize) -> String {
        if self.worlds.len() > 1 {
            format!("stage {}: ", world + 1)
        } else {
            String::new()
        }
    }
}
