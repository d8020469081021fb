//! The imperative shell of scrun's PMI server: the socketpairs, their
//! reads and writes, around the pure worlds of [`scrun::pmi`].
//!
//! [`PmiServer::create`] makes one socketpair per rank of each stage; the
//! ranks' ends travel to scored with the submission (`Submit::pmi_ranks`)
//! and scrun keeps the others, non-blocking. [`PmiServer::listen`] serves
//! instead at a loopback port (`Submit::pmi_port`): a connection of this
//! user's says which rank it is in its first line (PMI-1's `initack`),
//! and is served from then on as a descriptor would be; its worlds exist
//! once the rank count is known ([`PmiServer::placed`]). The session's loop polls
//! them ([`PmiServer::poll_fds`]) and hands readiness to
//! [`PmiServer::service`], which returns the end of the job a rank asked
//! for (abort) or caused (a fault), once. Memory is bounded: a read takes
//! at most [`READ_CHUNK`] bytes at a time and only while the rank's
//! decoder is within its limit, and a rank's unread replies are bounded
//! by [`MAX_UNREAD`].
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::socket::{self, AddressFamily, MsgFlags, SockFlag, SockType};
use std::rc::Rc;

use scrun::pmi::names::Names;
use scrun::pmi::wire::{initack_id, initack_reply, MAX_LINE};
use scrun::pmi::{Effect, Mode, World};

use crate::spawner::{SpawnedSide, Spawner};

/// The most bytes one read takes from a rank.
const READ_CHUNK: usize = 4096;
/// The most bytes read from one rank per wake-up, so that a flooding rank
/// cannot keep scrun from the others and from scored.
const READ_PER_WAKE: usize = 64 * 1024;
/// The most bytes of replies a rank may leave unread before it is taken
/// for a rank that floods requests without reading.
const MAX_UNREAD: usize = 256 * 1024;
/// The connections by port open at once beyond one per rank: room for a
/// rank that reconnects, never a table a flood of connections grows.
const SPARE_CONNECTIONS: usize = 16;
/// The poll index of the listening socket (see [`PmiServer::poll_fds`]).
pub const LISTENER: usize = usize::MAX;
/// Poll indices from here on are the sockets of spawned jobs' scruns.
const SPAWNED: usize = usize::MAX / 2;

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
    /// The world and rank; `None` for a connection by port that has not
    /// said which rank it is.
    who: Option<(usize, usize)>,
    /// The first line of a connection by port, until it is whole.
    head: Vec<u8>,
    unread: VecDeque<u8>,
}

/// The server ends of every rank's PMI connection, and the worlds.
pub struct PmiServer {
    mode: Mode,
    stages: usize,
    /// One per stage, once the rank count is known.
    worlds: Vec<World>,
    conns: Vec<Conn>,
    /// The connection of rank `r` of stage `s`, at `s * size + r`.
    by_rank: Vec<Option<usize>>,
    /// Where ranks connect by port, if they do.
    listener: Option<TcpListener>,
    ended: bool,
    /// Starts the jobs that ranks spawn, once told where scored is.
    spawner: Option<Spawner>,
    /// This job was spawned: what its parent said.
    spawned: Option<SpawnedSide>,
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
                    who: Some((world, rank)),
                    head: Vec::new(),
                    unread: VecDeque::new(),
                });
                rank_ends.push(client);
            }
        }
        let mut server = PmiServer {
            mode,
            stages,
            worlds: Vec::new(),
            conns,
            by_rank: Vec::new(),
            listener: None,
            ended: false,
            spawner: None,
            spawned: None,
        };
        server.placed(ranks as u32);
        server.by_rank = (0..ranks * stages).map(Some).collect();
        Ok((server, rank_ends))
    }

    /// Worlds for `stages` stages of `ranks` ranks (`None`: as many as
    /// [`PmiServer::placed`] says), whose ranks connect to the loopback
    /// port returned (their `PMI_PORT`).
    pub fn listen(
        mode: Mode,
        ranks: Option<u32>,
        stages: usize,
    ) -> std::io::Result<(PmiServer, u16)> {
        let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let mut server = PmiServer {
            mode,
            stages,
            worlds: Vec::new(),
            conns: Vec::new(),
            by_rank: Vec::new(),
            listener: Some(listener),
            ended: false,
            spawner: None,
            spawned: None,
        };
        if let Some(ranks) = ranks {
            server.placed(ranks);
        }
        Ok((server, port))
    }

    /// Ranks may spawn jobs, submitted to the scored at `scored`.
    pub fn serve_spawns(&mut self, scored: std::path::PathBuf) {
        self.spawner = Some(Spawner::new(scored, self.mode));
    }

    /// This job was spawned: its worlds start with what the parent put,
    /// and know their spawner.
    pub fn spawned(&mut self, side: SpawnedSide) {
        for world in &mut self.worlds {
            world.set_spawner(side.spawner.clone(), &side.preput);
        }
        self.spawned = Some(side);
    }

    /// scored admitted the job: a spawning parent is told.
    pub fn admitted(&mut self) {
        if let Some(side) = self.spawned.as_mut() {
            side.admitted();
        }
    }

    /// The job ends unadmitted, for the reason `why` (scrun's last
    /// words): a spawning parent is told.
    pub fn refused(&mut self, why: &str) {
        if let Some(side) = self.spawned.as_mut() {
            side.refused(why);
        }
    }

    /// Ends the jobs the ranks spawned (the job has ended).
    pub fn end_spawned(&mut self) {
        if let Some(spawner) = self.spawner.as_mut() {
            spawner.end_all();
        }
    }

    /// The job's stages have `ranks` ranks each, as placed; told once.
    pub fn placed(&mut self, ranks: u32) {
        if !self.worlds.is_empty() || ranks == 0 {
            return;
        }
        let (pid, ranks) = (std::process::id(), ranks as usize);
        let names = Rc::new(RefCell::new(Names::new()));
        self.worlds = (0..self.stages)
            .map(|stage| {
                let mut world = World::new(ranks, format!("scrun_{pid}_{stage}"), self.mode)
                    .sharing_names(Rc::clone(&names), stage);
                if let Some(side) = &self.spawned {
                    world.set_spawner(side.spawner.clone(), &side.preput);
                }
                world
            })
            .collect();
        self.by_rank = vec![None; ranks * self.stages];
    }

    /// The descriptors to poll, each with its index for
    /// [`PmiServer::service`] and what to wait for: the listening socket
    /// ([`LISTENER`]) once the worlds exist, and the connections. None
    /// once the job is ended through PMI: the ranks are being killed.
    pub fn poll_fds(&self) -> Vec<(usize, BorrowedFd<'_>, PollFlags)> {
        if self.ended {
            return Vec::new();
        }
        let listener = self
            .listener
            .as_ref()
            .filter(|_| !self.worlds.is_empty())
            .map(|listener| (LISTENER, listener.as_fd(), PollFlags::POLLIN));
        let spawned = self.spawner.iter().flat_map(|spawner| {
            spawner
                .poll_fds()
                .into_iter()
                .map(|(idx, fd)| (SPAWNED + idx, fd, PollFlags::POLLIN))
        });
        listener
            .into_iter()
            .chain(spawned)
            .chain(self.conns.iter().enumerate().filter_map(|(idx, conn)| {
                let fd = conn.fd.as_ref()?;
                let mut flags = PollFlags::POLLIN;
                if !conn.unread.is_empty() {
                    flags |= PollFlags::POLLOUT;
                }
                Some((idx, fd.as_fd(), flags))
            }))
            .collect()
    }

    /// Serves connection `idx` (or the listening socket) after poll said
    /// `revents`; returns how the job ends if a rank ended it.
    pub fn service(&mut self, idx: usize, revents: PollFlags) -> Option<PmiEnd> {
        if idx == LISTENER && !self.ended {
            self.accept();
            return None;
        }
        if (SPAWNED..LISTENER).contains(&idx) && !self.ended {
            let ((world, rank), result) = self.spawner.as_mut()?.service(idx - SPAWNED)?;
            let effects = self.worlds.get_mut(world)?.spawn_result(rank, result);
            let conn = self.by_rank[world * self.worlds[world].size() + rank]?;
            return self.apply(conn, effects);
        }
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

    /// Takes the connections waiting at the port: each of this user's,
    /// within the budget, waits to say which rank it is; others are closed.
    fn accept(&mut self) {
        let Some(listener) = self.listener.as_ref() else {
            return;
        };
        let uid = nix::unistd::geteuid().as_raw();
        let budget = self.by_rank.len() + SPARE_CONNECTIONS;
        for _ in 0..budget {
            let Ok((stream, peer)) = listener.accept() else {
                return;
            };
            let open = self.conns.iter().filter(|conn| conn.fd.is_some()).count();
            if open >= budget
                || !crate::pmix_server::owned_by(&stream, peer, uid)
                || stream.set_nonblocking(true).is_err()
            {
                continue;
            }
            let conn = Conn {
                fd: Some(OwnedFd::from(stream)),
                who: None,
                head: Vec::new(),
                unread: VecDeque::new(),
            };
            // A closed connection that never said who it was leaves its place.
            match self
                .conns
                .iter()
                .position(|old| old.fd.is_none() && old.who.is_none())
            {
                Some(free) => self.conns[free] = conn,
                None => self.conns.push(conn),
            }
        }
    }

    /// The first bytes of connection `idx` by port: once its first line
    /// names a rank of the job not yet connected, it is that rank's, and
    /// what follows goes to its world; anything else closes it (it is not
    /// a rank of this job, or one already served).
    fn identify(&mut self, idx: usize, bytes: &[u8], effects: &mut Vec<Effect>) {
        let conn = &mut self.conns[idx];
        conn.head.extend_from_slice(bytes);
        let Some(end) = conn.head.iter().position(|&b| b == b'\n') else {
            if conn.head.len() > MAX_LINE {
                conn.fd = None;
                conn.head = Vec::new();
            }
            return;
        };
        let head = std::mem::take(&mut conn.head);
        let size = self.worlds.first().map_or(0, World::size);
        let id = initack_id(&head[..end])
            .filter(|&id| self.by_rank.get(id).is_some_and(Option::is_none));
        let Some(id) = id else {
            self.conns[idx].fd = None;
            return;
        };
        let (world, rank) = (id / size, id % size);
        self.conns[idx].who = Some((world, rank));
        self.by_rank[id] = Some(idx);
        effects.push(Effect::Send {
            rank,
            bytes: initack_reply(size, rank),
        });
        if head.len() > end + 1 {
            effects.extend(self.worlds[world].received(rank, &head[end + 1..]));
        }
    }

    /// Reads what the rank sent, within the bounds, and feeds its world.
    fn read(&mut self, idx: usize, effects: &mut Vec<Effect>) {
        let mut taken = 0;
        let mut chunk = [0u8; READ_CHUNK];
        while taken < READ_PER_WAKE {
            let who = self.conns[idx].who;
            if who.is_some_and(|(world, _)| self.worlds[world].ended()) {
                return;
            }
            let Some(fd) = self.conns[idx].fd.as_ref() else {
                return;
            };
            match socket::recv(fd.as_raw_fd(), &mut chunk, MsgFlags::MSG_DONTWAIT) {
                Ok(0) | Err(Errno::ECONNRESET) => {
                    self.conns[idx].fd = None;
                    if let Some((world, rank)) = who {
                        effects.extend(self.worlds[world].closed(rank));
                    }
                    return;
                }
                Ok(n) => {
                    taken += n;
                    match who {
                        Some((world, rank)) => {
                            effects.extend(self.worlds[world].received(rank, &chunk[..n]))
                        }
                        None => self.identify(idx, &chunk[..n], effects),
                    }
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return,
                Err(errno) => {
                    self.conns[idx].fd = None;
                    if let Some((world, rank)) = who {
                        let message = format!("its PMI connection failed: {}", errno.desc());
                        self.worlds[world].fault(rank, message, effects);
                    }
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
            let Some((world, rank)) = conn.who else {
                return;
            };
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
        let (world, _) = self.conns[idx].who?;
        let ranks = self.worlds[world].size();
        let mut end = None;
        let mut touched = Vec::new();
        let mut later = Vec::new();
        let mut effects = VecDeque::from(effects);
        while let Some(effect) = effects.pop_front() {
            match effect {
                Effect::Spawn { rank, spawn } => {
                    let kvsname = self.worlds[world].kvsname().to_string();
                    let started = match self.spawner.as_mut() {
                        Some(spawner) => spawner.launch((world, rank), &spawn, &kvsname),
                        None => Err("scrun cannot spawn from this job".to_string()),
                    };
                    if let Err(message) = started {
                        effects.extend(self.worlds[world].spawn_result(rank, Err(message)));
                    }
                }
                Effect::Send { rank, bytes } => {
                    let target = self.by_rank.get(world * ranks + rank).copied().flatten();
                    if let Some(target) = target {
                        self.conns[target].unread.extend(bytes);
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
