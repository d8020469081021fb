//! The event loop: the only module that owns the `mio::Poll`, the Unix
//! listener, client connections and signal delivery.
//!
//! Every input is reduced to an [`Event`]; [`Daemon::handle_event`] turns it
//! into core inputs, feeds the core, and carries out the actions the core
//! returns (through the actuator, or as messages to clients) until nothing
//! more follows. Nothing here blocks: sockets are non-blocking with a buffer
//! each way, and the poll timeout is the nearest deadline of the core and
//! the actuator.
//!
//! One bad client never takes the daemon down: a malformed or oversized
//! frame gets an error reply and closes that connection only.
//!
//! No descriptor a user handed over is closed here, nor asked anything
//! of its file system or peer: the last close of a lingering TCP socket
//! sleeps for as long as its owner likes. Every descriptor
//! received is a [`closer::UserFd`] from the moment it arrives, and every
//! client's socket (whose unread messages may carry more) is let go of
//! through [`closer::discard`], unless it was read to its end; both go to the closer process
//! (`crate::closer`), which closes them where a stall hurts no one. A new
//! surface that takes descriptors from users does the same.
//!
//! What may still hold the loop, and what bounds it:
//! - confirming a switch's stops (`Actuator::await_stops`): a wait in
//!   `wait4` for each stopping rank, bounded by an interval timer and
//!   `STOP_WAIT`; the rest is confirmed later through SIGCHLD and /proc;
//! - usage samples at a slice boundary: one read of /proc per process, and
//!   a scratch walk bounded in entries per sample and per window;
//! - a launch: one order to the job's keeper, which forks the ranks; the
//!   loop never waits for a fork or an exec;
//! - removing a finished job's scratch tree: renamed aside at once, then
//!   removed in slices of `actuator::SWEEP_SLICE` per wakeup;
//! - the journal: one `write` per record; its `fdatasync` and the state
//!   log's are the closer's (`closer::sync`), or, without a closer that
//!   syncs, the loop's, at most one each per `journal::SYNC_INTERVAL`;
//!   `history` and `job ID` read only the lines they show, through the
//!   index, at most `journal::HISTORY_BYTES`;
//! - a user-name lookup through NSS, once per uid for the daemon's life;
//! - an in-place restart: writing the handover and the new binary's check;
//! - console views, in proportion to the jobs they list;
//! - clients' requests: each user's are served up to
//!   [`USER_REQUESTS_PER_WAKEUP`] and [`USER_TIME_PER_WAKEUP`] per wakeup,
//!   a user at a time, with due ticks run between users at least every
//!   `TICK_EVERY`; the rest wait for the next wakeup (`serve_round`).
//!
//! Answers to console commands wait until no stop is pending, so that a
//! command that switched jobs (`suspend`, `queue Q deactivate`) is answered
//! once its switch is done; a stop never confirmed is given up after
//! `actuator::STOP_TIMEOUT`, which bounds the wait.
//!
//! Where to look: this file holds the [`Daemon`], its poll loop and the
//! carrying out of the core's actions. Connections and their requests are
//! in `connection.rs`, what one user may hold of the daemon in
//! `budget.rs`, descriptors (the daemon's limit, and those clients pass) in
//! `fds.rs`, peer credentials and names in `peer.rs`, the listening socket
//! in `bind.rs`, the loop's side of the job journal in `journal.rs`, the
//! in-place restart in `restart.rs`, the recovery from a panic in
//! `recovery.rs`, and the faults the end-to-end tests inject in `faults.rs`.
#![forbid(unsafe_code)]

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use mio::net::UnixListener;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::actuator::Actuator;
use crate::closer;
use crate::journal::Journal;
use scored_core::core::{Action, Core, Input, Notice};
use scored_core::ids::Tick;
use scored_proto::proto::{self, Reply};

mod bind;
mod budget;
mod connection;
mod descriptors;
mod durable;
pub(crate) mod faults;
mod fds;
mod journal;
mod peer;
mod recovery;
mod restart;
mod switch;

pub use bind::{bind, BindError};
use budget::UserUse;
pub use budget::{connection_limit, plain_descriptor_limit};
use connection::{flush, queue_reply, Connection};
pub use fds::{raise_fd_limit, FdLimits};
use fds::{spare_descriptor, FdPool};
pub use peer::{user_name, SystemDirectory};
pub use restart::{adopt_listener, RestartSetup};
use switch::OpenSwitch;

const LISTENER: Token = Token(0);
const SIGNALS: Token = Token(1);
/// The actuator's set of exec reports (`Actuator::exec_watch_fd`); far
/// above the client tokens, which count up from `FIRST_CLIENT`.
const EXEC_REPORTS: Token = Token(usize::MAX - 1);
/// The closer's socket (`crate::closer`): its reports, and room to send.
const CLOSER: Token = Token(usize::MAX - 2);
const FIRST_CLIENT: usize = 2;

/// How long the loop waits, right after sending SIGSTOP, for the stops to
/// be confirmed before going back to serving clients. Stopping processes
/// need the CPU, and a daemon woken through its event loop for each
/// stopping child spent more on wakeups than the kernel spent stopping
/// them; waiting in the kernel (sigtimedwait) as a plain
/// killpg/waitpid/killpg program does costs one return per child. Stops
/// not confirmed within this time are confirmed asynchronously.
const STOP_WAIT: Duration = Duration::from_millis(5);

/// The most connections served at once, whatever the descriptor limit;
/// one more is told so and closed.
pub const MAX_CONNECTIONS: usize = 65_536;
/// While clients wait in the backlog for a free descriptor, the longest
/// between two tries to accept them.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);
/// Descriptors kept free for the daemon itself (listener, signalfd, pipes,
/// /proc reads, spawning).
const RESERVED_FDS: u64 = 256;
/// Replies queued for a client that does not read; beyond this it is
/// dropped. Requests are served only while less than [`PAUSE_OUTPUT`]
/// waits, so this is never reached by a client that reads its replies.
const MAX_OUTPUT: usize = proto::MAX_REPLY + 2 * PAUSE_OUTPUT;
/// Connections kept for root, the daemon's user and the operators (at
/// most half of the table): a plain user who takes every other connection
/// cannot keep them from the console.
pub const PRIVILEGED_RESERVE: usize = 64;
/// The bytes of incomplete requests scored holds for one plain user over
/// all of that user's connections; past this, the connection that read
/// more is closed.
const USER_INPUT_BUDGET: usize = 4 * proto::MAX_REQUEST;
/// The bytes of replies that may wait for one plain user over all of that
/// user's connections; past this, the user's requests wait until some are
/// read, as for one connection past [`PAUSE_OUTPUT`].
const USER_OUTPUT_BUDGET: usize = 16 << 20;
/// A client's requests are read and answered only while fewer bytes than
/// this wait in its output: a client that sends requests and never reads
/// the replies is not served more until it reads, so it costs at most this
/// plus one reply, instead of every reply to everything it sent.
const PAUSE_OUTPUT: usize = 64 * 1024;
/// Descriptors a client may have sent and not yet used: a submission's
/// standard ones, the most it may pass on, and its PMI descriptors.
const MAX_PENDING_FDS: usize = proto::SUBMIT_FDS + proto::MAX_INHERITED_FDS + proto::MAX_PMI_FDS;
/// The most descriptors one message can carry (SCM_MAX_FD in the kernel's
/// include/net/scm.h). The receive buffer has room for all of them: when it
/// is too small the kernel still installs the descriptors that fit but sets
/// MSG_CTRUNC, and nix will not parse a truncated control buffer
/// (`cmsgs()` fails with ENOBUFS), so those descriptors were never wrapped
/// and leaked: eight with every message that carried more than eight.
const SCM_MAX_FD: usize = 253;
/// The most bytes one `recvmsg` takes from a client.
const READ_CHUNK: usize = 64 * 1024;
/// The requests of one user served per wakeup of the loop, over all of
/// their connections; the rest wait for the next wakeup (at once), after
/// every other user's turn and the ticks that are due.
pub const USER_REQUESTS_PER_WAKEUP: usize = 16;
/// The time one user's requests may take per wakeup (a request begun is
/// finished).
pub const USER_TIME_PER_WAKEUP: Duration = Duration::from_millis(5);
/// While clients are served, due ticks and the actuator's work run at least
/// this often.
const TICK_EVERY: Duration = Duration::from_millis(5);
/// The requests of users other than root and the operators are served for
/// at most [`PLAIN_BUSY_PER_WINDOW`] of each such window; the rest wait
/// for the next one. The daemon runs at real-time priority, which the
/// kernel lets hold a CPU against every ordinary process: a flood of
/// requests would otherwise take that CPU from everyone for as long as it
/// lasts.
pub const PLAIN_WINDOW: Duration = Duration::from_millis(100);
/// See [`PLAIN_WINDOW`]: half a CPU at most.
pub const PLAIN_BUSY_PER_WINDOW: Duration = Duration::from_millis(50);

/// Everything the loop reacts to.
#[derive(Debug, Clone, Copy)]
pub enum Event {
    /// The listener is readable.
    Accept,
    /// A client is readable or writable.
    Client(Token),
    /// A signal arrived.
    Signal(i32),
    /// A deadline passed.
    Deadline,
}

/// How the loop was set up.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// The socket path (removed at exit).
    pub socket: PathBuf,
    /// Exit once the daemon has had no job and no client for this long
    /// (`--idle-exit`; a private daemon's by default); `None`: never.
    pub idle_exit: Option<Duration>,
    /// Connections served at once (see [`connection_limit`]).
    pub max_connections: usize,
    /// Connections one user other than root and the operators may hold.
    pub max_connections_per_user: usize,
    /// Descriptors scored holds at most for one user other than root and
    /// the operators (see `budget.rs`).
    pub max_descriptors_per_user: usize,
    /// Descriptors scored holds at most for all such users together: the
    /// descriptor limit less what is kept for the daemon, root and the
    /// operators (see [`plain_descriptor_limit`]).
    pub max_plain_descriptors: usize,
    /// How long a client may take to send the rest of a request it has
    /// begun; then the connection is closed. A client that has sent whole
    /// requests and waits (scrun during its job, an idle console) is
    /// never cut.
    pub request_timeout: Duration,
}

/// The daemon: its core, its actuator and its clients.
pub struct Daemon<A: Actuator> {
    core: Core,
    actuator: A,
    config: LoopConfig,
    poll: Poll,
    listener: UnixListener,
    signals: SignalFd,
    /// Boxed: an idle connection then costs the map a pointer.
    connections: HashMap<Token, Box<Connection>>,
    /// User names by uid, looked up once.
    user_names: HashMap<u32, Rc<str>>,
    next_token: usize,
    start: Instant,
    /// The open switches, with the times of their phases so far.
    switch_starts: HashMap<u64, OpenSwitch>,
    /// Jobs continued as their switch's stops were confirmed, whose
    /// `Continue` from the core is still to come (`switch.rs`).
    continued_early: Vec<scored_core::ids::JobId>,
    /// Jobs the core holds running that a takeover or a recovery
    /// continues only once every stop in flight is confirmed
    /// (`continue_after_stops`), as a switch does.
    continue_after_stops: Vec<scored_core::ids::JobId>,
    /// Finished jobs whose cgroup, scratch directory and keeper are let go
    /// of once the batch's replies are sent: a job's client hears of its
    /// end without waiting for that work.
    releases: Vec<scored_core::ids::JobId>,
    /// Times the loop woke from poll (for the switch log).
    wakeups: u64,
    exiting: bool,
    terminations: u32,
    served_a_job: bool,
    idle_since: Instant,
    fd_pool: FdPool,
    /// Connections that may have output to send or are closing.
    dirty: Vec<Token>,
    /// A descriptor given up when the table is full, to refuse a client politely.
    spare_fd: Option<std::fs::File>,
    /// The last accept left clients in the backlog (out of descriptors
    /// and the spare not back yet): accepting is tried again at every
    /// wakeup and at least every [`ACCEPT_RETRY`], since the listener
    /// says nothing more until another client connects.
    accept_waits: bool,
    /// The job journal, when the daemon keeps one.
    journal: Option<Journal>,
    /// The core's state on disk (`durable.rs`), when the daemon keeps it.
    durable: Option<crate::durable::Durable>,
    /// How to re-execute in place, when the daemon may.
    restart: Option<RestartSetup>,
    /// A restart was asked for (by this console connection, wanting JSON,
    /// or by SIGUSR2 or a caught panic): carried out once the event is handled.
    pending_restart: Option<Option<(Token, bool)>>,
    /// Connections and buffered bytes per uid.
    per_user: HashMap<u32, UserUse>,
    /// Connections of users other than root and the operators, which
    /// alone count against the users' share of the connection table.
    plain_connections: usize,
    /// Connections holding part of a request, for the request timeout.
    partial: HashMap<Token, Instant>,
    /// The closer's socket as registered with the poll.
    closer_watched: Option<(std::os::fd::RawFd, u64)>,
    /// The core before the current event, to recover from a panic.
    recovery: recovery::Recovery,
    /// The console command the hook panics after, applied in this
    /// event (test only, see `faults::panic_after_line`).
    panic_after: Option<String>,
    /// Console commands given to the core and not answered yet, in order:
    /// how each connection wants its answer.
    console_asks: VecDeque<(Token, ConsoleAsk)>,
    /// Answers to console commands held back, in order, until the stops
    /// under way are confirmed (see `answer`).
    held_answers: Vec<(Token, Reply)>,
    /// Where `read_available` receives, allocated once: a buffer on the
    /// stack would be zeroed at every read (64 KiB, twice per request:
    /// the read and the one that finds the socket drained), more than
    /// any other part of admitting a job costs.
    read_chunk: Box<[u8]>,
    /// Every connection that may be paused (and some that no longer are,
    /// pruned by `resumable`): the loop looks at these after each round
    /// rather than at every connection, so that a round does not cost the
    /// number of clients (10,000 scrun waiting in a queue are 10,000).
    maybe_paused: BTreeSet<Token>,
    /// Connections with requests left over when their user's turn ran out:
    /// served first at the next wakeup, which comes at once (for a user
    /// whose share of the [`PLAIN_WINDOW`] is spent, when the next opens).
    deferred: BTreeSet<Token>,
    /// The turn of the user whose connections are being served: requests
    /// left and until when (`None` outside a round).
    turn: Option<(usize, Instant)>,
    /// Where the next round of users starts, so that no user is always first.
    round_start: u32,
    /// The start of the current [`PLAIN_WINDOW`] and the time spent in it
    /// serving users other than root and the operators.
    plain_window: (Instant, Duration),
}

/// How a console client wants the answer to the command it sent.
#[derive(Debug, Clone, Copy)]
struct ConsoleAsk {
    /// With the JSON form too.
    json: bool,
    /// The command is `restart`: an accepted one is answered by the new
    /// image, or with the reason it could not take over.
    restart: bool,
}

/// Blocks the signals the loop reads through its signalfd, and only those:
/// a mask inherited from the parent (scrun blocks its own signals before
/// it starts a private scored) is replaced, so that SIGALRM and the rest
/// keep working. Must run before any thread exists, so that no thread
/// receives them the default way.
pub fn block_signals() -> nix::Result<SigSet> {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR2,
    ] {
        set.add(signal);
    }
    set.thread_set_mask()?;
    Ok(set)
}

impl<A: Actuator> Daemon<A> {
    /// Wires a core, an actuator and a bound listener into a loop.
    pub fn new(
        core: Core,
        actuator: A,
        listener: std::os::unix::net::UnixListener,
        config: LoopConfig,
        signals: SigSet,
    ) -> io::Result<Daemon<A>> {
        let poll = Poll::new()?;
        listener.set_nonblocking(true)?;
        let mut listener = UnixListener::from_std(listener);
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let signals =
            SignalFd::with_flags(&signals, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        poll.registry().register(
            &mut SourceFd(&signals.as_fd().as_raw_fd()),
            SIGNALS,
            Interest::READABLE,
        )?;
        // Ranks report their exec (or why it failed) without the loop ever
        // waiting for them: the actuator reads the reports in `poll`.
        if let Some(fd) = actuator.exec_watch_fd() {
            poll.registry()
                .register(&mut SourceFd(&fd), EXEC_REPORTS, Interest::READABLE)?;
        }
        Ok(Daemon {
            core,
            actuator,
            config,
            poll,
            listener,
            signals,
            connections: HashMap::new(),
            user_names: HashMap::new(),
            next_token: FIRST_CLIENT,
            start: Instant::now(),
            switch_starts: HashMap::new(),
            continued_early: Vec::new(),
            releases: Vec::new(),
            continue_after_stops: Vec::new(),
            wakeups: 0,
            exiting: false,
            terminations: 0,
            served_a_job: false,
            fd_pool: FdPool::default(),
            dirty: Vec::new(),
            spare_fd: spare_descriptor(),
            accept_waits: false,
            idle_since: Instant::now(),
            journal: None,
            durable: None,
            restart: None,
            pending_restart: None,
            per_user: HashMap::new(),
            plain_connections: 0,
            partial: HashMap::new(),
            closer_watched: None,
            recovery: recovery::Recovery::default(),
            panic_after: None,
            console_asks: VecDeque::new(),
            held_answers: Vec::new(),
            read_chunk: vec![0u8; READ_CHUNK].into_boxed_slice(),
            maybe_paused: BTreeSet::new(),
            deferred: BTreeSet::new(),
            turn: None,
            round_start: 0,
            plain_window: (Instant::now(), Duration::ZERO),
        })
    }

    /// Carries out what the start-up script asked of the shell
    /// ([`Core::run_script`]), before the first event, as any other
    /// actions: stops it asks for are waited for as a tick's are.
    pub fn start_with(mut self, actions: Vec<Action>) -> Daemon<A> {
        let stops = actions
            .iter()
            .any(|action| matches!(action, Action::Stop(_)));
        let mut inputs = Vec::new();
        self.carry_out(actions, &mut inputs);
        if stops {
            self.actuator.await_stops(STOP_WAIT, &mut inputs);
        }
        self.feed(inputs);
        self
    }

    fn tick(&self) -> Tick {
        Tick(self.start.elapsed().as_micros() as u64)
    }

    /// When the loop must wake with no event: the earliest of the core's
    /// deadline, the closer's restart, the actuator's, a sync due, a
    /// request's timeout and the idle exit.
    fn next_deadline(&self) -> Option<Instant> {
        let mut deadline = self.core.next_deadline().map(|tick| self.instant(tick));
        if let Some(restart) = closer::next_deadline() {
            deadline = Some(deadline.map_or(restart, |other| other.min(restart)));
        }
        if let Some(actuator) = self.actuator.next_deadline() {
            deadline = Some(deadline.map_or(actuator, |core| core.min(actuator)));
        }
        // A job's end written to the journal but not synced yet, or the
        // state log: once no switch awaits its stops (`sync_files`).
        let syncs = [
            self.journal.as_ref().and_then(|j| j.sync_deadline()),
            self.durable.as_ref().and_then(|d| d.sync_deadline()),
        ];
        if !self.core.stops_in_flight() {
            for sync in syncs.into_iter().flatten() {
                deadline = Some(deadline.map_or(sync, |other| other.min(sync)));
            }
        }
        if let Some(first) = self.partial.values().min() {
            let cut = *first + self.config.request_timeout;
            deadline = Some(deadline.map_or(cut, |other| other.min(cut)));
        }
        if let Some(idle_exit) = self.config.idle_exit {
            let idle = self.idle_since + idle_exit;
            deadline = Some(deadline.map_or(idle, |other| other.min(idle)));
        }
        deadline
    }

    fn instant(&self, tick: Tick) -> Instant {
        self.start + Duration::from_micros(tick.0)
    }

    /// Runs until the daemon is asked to exit and every job is gone.
    pub fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        self.recovery.event_done(&mut self.core);
        while !self.exiting {
            // What was let go of in the last round goes to the closer
            // before the loop sleeps.
            self.watch_closer();
            let deadline = self.next_deadline();
            let mut timeout = poll_timeout(deadline);
            if self.accept_waits {
                timeout = Some(timeout.map_or(ACCEPT_RETRY, |other| other.min(ACCEPT_RETRY)));
            }
            let mut waiting = self.resumable();
            waiting.extend(self.deferred.iter().copied());
            if !waiting.is_empty() {
                // A paused client's replies were written, or a client's
                // turn was over: serve its next requests now, since its
                // socket will not wake us; if only users whose share of
                // this window is spent wait, when the next window opens.
                let now = Instant::now();
                let wait = if waiting.iter().any(|token| self.served_now(*token, now)) {
                    Duration::ZERO
                } else {
                    (self.plain_window.0 + PLAIN_WINDOW).saturating_duration_since(now)
                };
                timeout = Some(timeout.map_or(wait, |other| other.min(wait)));
            }
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => self.wakeups += 1,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            }
            let ready: Vec<Event> = events
                .iter()
                .filter_map(|event| match event.token() {
                    LISTENER => Some(Event::Accept),
                    SIGNALS => Some(Event::Signal(0)),
                    // Read by `actuator.poll` in the `Deadline` event that
                    // follows every wakeup.
                    EXEC_REPORTS => None,
                    CLOSER => {
                        closer::flush();
                        None
                    }
                    token => Some(Event::Client(token)),
                })
                .collect();
            let mut clients = std::mem::take(&mut self.deferred);
            let mut accept = false;
            for event in ready {
                match event {
                    Event::Client(token) => {
                        clients.insert(token);
                    }
                    Event::Accept => accept = true,
                    event => self.handle_event_guarded(event),
                }
            }
            clients.extend(self.resumable());
            self.serve_round(clients);
            // New clients after the ready ones: a connection that hung up
            // in this wake-up frees its place for them, so a client that
            // connects at the cap just as another leaves is not refused.
            if accept || self.accept_waits {
                self.handle_event_guarded(Event::Accept);
            }
            self.handle_event_guarded(Event::Deadline);
            self.check_idle();
        }
        self.finish();
        Ok(())
    }

    /// Serves the connections that are ready, a user at a time (starting
    /// with a different user each round): each user's requests up to
    /// [`USER_REQUESTS_PER_WAKEUP`] and [`USER_TIME_PER_WAKEUP`], the rest
    /// deferred to the next wakeup; due ticks run at least every
    /// [`TICK_EVERY`] meanwhile. So one user's flood of requests delays that
    /// user's own, and neither other users' nor the schedule. Users other
    /// than root and the operators are served at most
    /// [`PLAIN_BUSY_PER_WINDOW`] of each [`PLAIN_WINDOW`], so that their
    /// requests cannot hold a CPU at the daemon's real-time priority.
    fn serve_round(&mut self, clients: BTreeSet<Token>) {
        let mut by_user: std::collections::BTreeMap<u32, Vec<Token>> = Default::default();
        for token in clients {
            let uid = self
                .connections
                .get(&token)
                .map_or(u32::MAX, |conn| conn.cred.uid);
            by_user.entry(uid).or_default().push(token);
        }
        let start = self.round_start;
        self.round_start = self.round_start.wrapping_add(1);
        let (after, before): (Vec<_>, Vec<_>) =
            by_user.into_iter().partition(|(uid, _)| *uid >= start);
        let mut ticked = Instant::now();
        for (uid, tokens) in after.into_iter().chain(before) {
            let began = Instant::now();
            let plain = !self.core.is_privileged(uid);
            if plain {
                if began.saturating_duration_since(self.plain_window.0) >= PLAIN_WINDOW {
                    self.plain_window = (began, Duration::ZERO);
                }
                if self.plain_window.1 >= PLAIN_BUSY_PER_WINDOW {
                    self.deferred.extend(tokens);
                    continue;
                }
            }
            self.turn = Some((USER_REQUESTS_PER_WAKEUP, began + USER_TIME_PER_WAKEUP));
            for token in tokens {
                if self.turn_over() {
                    self.deferred.insert(token);
                    continue;
                }
                self.handle_event_guarded(Event::Client(token));
                if ticked.elapsed() >= TICK_EVERY {
                    let turn = self.turn.take();
                    self.handle_event_guarded(Event::Deadline);
                    self.turn = turn;
                    ticked = Instant::now();
                }
            }
            if plain {
                self.plain_window.1 += began.elapsed();
            }
        }
        self.turn = None;
    }

    /// Whether a waiting client would be served if the loop went round
    /// now: root's and the operators' always, other users' while their
    /// share of the [`PLAIN_WINDOW`] is not spent.
    fn served_now(&self, token: Token, now: Instant) -> bool {
        let uid = self
            .connections
            .get(&token)
            .map_or(u32::MAX, |conn| conn.cred.uid);
        self.core.is_privileged(uid)
            || now.saturating_duration_since(self.plain_window.0) >= PLAIN_WINDOW
            || self.plain_window.1 < PLAIN_BUSY_PER_WINDOW
    }

    /// Whether the current user's turn has no request or time left.
    fn turn_over(&self) -> bool {
        self.turn
            .is_some_and(|(left, until)| left == 0 || Instant::now() >= until)
    }

    /// The one place where the daemon's state changes.
    pub fn handle_event(&mut self, event: Event) {
        let _span = tracing::trace_span!("event", ?event).entered();
        let mut inputs = Vec::new();
        match event {
            Event::Accept => self.accept(),
            Event::Client(token) => self.client_ready(token, &mut inputs),
            Event::Signal(_) => {
                self.read_signals(&mut inputs);
                self.recovery.note(&inputs);
                faults::panic_after_exit(&inputs);
            }
            Event::Deadline => {
                let now = Instant::now();
                self.cut_slow_requests(now, &mut inputs);
                self.actuator.poll(now, &mut inputs);
                // Ranks' ends come from their keepers, read here.
                self.recovery.note(&inputs);
                faults::panic_after_exit(&inputs);
                if self
                    .core
                    .next_deadline()
                    .is_some_and(|tick| self.instant(tick) <= now)
                {
                    inputs.push(Input::Tick);
                }
            }
        }
        self.feed(inputs);
        if let Some(requester) = self.pending_restart.take() {
            // The new image knows nothing of answers held here.
            self.release_answers(true);
            self.restart_in_place(requester);
        }
    }

    /// Feeds inputs to the core and carries out its actions, until quiet.
    fn feed(&mut self, inputs: Vec<Input>) {
        let mut batch = inputs;
        // Inputs that arrived together go to the core together; what its
        // actions report back forms the next batch.
        while !batch.is_empty() {
            self.recovery.changed = true;
            let tick = self.tick();
            if let Some(durable) = &mut self.durable {
                durable.note(tick, &batch);
            }
            let actions = self.core.handle_all(std::mem::take(&mut batch), tick);
            let stops = actions
                .iter()
                .any(|action| matches!(action, Action::Stop(_)));
            self.carry_out(actions, &mut batch);
            if stops {
                let before = batch.len();
                self.actuator.await_stops(STOP_WAIT, &mut batch);
                self.stops_awaited(&batch);
                self.recovery.note(&batch[before..]);
            }
        }
        // Each job continued early is one the core continued: a job left
        // would run while the core holds it stopped, which the recovery
        // from this panic puts right (it stops every such job again).
        assert!(
            self.continued_early.is_empty(),
            "jobs continued early that the core did not continue"
        );
        self.actuator.settled();
        self.continue_after_stops();
        if let Some(line) = self.panic_after.take() {
            faults::panic_after_line(&line);
        }
        self.release_answers(false);
        // Before anything of these inputs leaves the daemon.
        self.write_durable();
        self.write_journal();
        self.flush_all();
        for job in std::mem::take(&mut self.releases) {
            self.actuator.release(job);
        }
        self.sync_files();
        self.fold_if_needed();
    }

    fn carry_out(&mut self, actions: Vec<Action>, inputs: &mut Vec<Input>) {
        let mut stops_done = 0;
        for action in actions {
            let before = inputs.len();
            match action {
                Action::Spawn(plan) => {
                    // The decision to start the job is on disk before its
                    // processes or its client hear of it.
                    self.write_durable();
                    let token = plan.client.map(|client| Token(client.0 as usize));
                    if let Some(conn) = token.and_then(|token| self.connections.get_mut(&token)) {
                        // What the client was told, the job's start among
                        // it, goes out before the processes exist (see
                        // `Action::Spawn`). A failure is left to the flush
                        // at the end of the batch, which closes the
                        // connection.
                        let _ = flush(conn);
                    }
                    let stdio = token
                        .and_then(|token| self.connections.get(&token))
                        .and_then(|conn| conn.stdio.as_ref());
                    self.actuator.spawn(&plan, stdio, inputs);
                }
                Action::Stop(job) => {
                    if stops_done > 0 {
                        faults::panic_mid_switch();
                    }
                    self.actuator.stop(job, inputs);
                    stops_done += 1;
                    let now = Instant::now();
                    for open in self.switch_starts.values_mut() {
                        open.stops_sent = Some(now);
                    }
                }
                Action::Continue(job) => self.continue_job(job),
                Action::Signal { job, signal } => self.actuator.signal(job, signal),
                Action::Sample(job) => {
                    if let Some(usage) = self.actuator.sample(job) {
                        inputs.push(Input::Usage { job, usage });
                    }
                }
                Action::Release(job) => self.releases.push(job),
                Action::SwitchBegin(id) => {
                    self.switch_starts
                        .insert(id, OpenSwitch::new(Instant::now(), self.wakeups));
                }
                Action::SwitchEnd(id) => {
                    if let Some(open) = self.switch_starts.remove(&id) {
                        let end = open.continued.unwrap_or_else(Instant::now);
                        let latency = end.duration_since(open.start);
                        open.log(id, end, self.wakeups);
                        inputs.push(Input::SwitchMeasured { id, latency });
                    }
                }
                Action::Notify(notice) => {
                    let Notice { client, event } = *notice;
                    self.notify(client, event);
                }
                Action::Exit => self.exiting = true,
            }
            if inputs.len() > before {
                // What the processes said must survive a panic later in this event.
                self.recovery.note(&inputs[before..]);
            }
        }
    }

    // ----- connections -----

    // ----- signals -----

    fn read_signals(&mut self, inputs: &mut Vec<Input>) {
        loop {
            match self.signals.read_signal() {
                Ok(Some(info)) => {
                    let signal = info.ssi_signo as i32;
                    match Signal::try_from(signal) {
                        Ok(Signal::SIGCHLD) => self.actuator.reap(inputs),
                        Ok(Signal::SIGTERM | Signal::SIGINT) => {
                            self.terminations += 1;
                            if self.terminations == 1 {
                                tracing::info!(signal, "asked to stop: killing jobs, then exiting");
                                inputs.push(Input::Shutdown { now: true });
                            } else {
                                tracing::warn!(signal, "asked again: killing everything now");
                                self.actuator.kill_everything();
                                self.exiting = true;
                            }
                        }
                        Ok(Signal::SIGUSR2) => {
                            tracing::info!("SIGUSR2: restarting in place");
                            self.pending_restart = Some(None);
                        }
                        Ok(Signal::SIGHUP) => {
                            tracing::info!("SIGHUP ignored: scored has no configuration to reload")
                        }
                        _ => {}
                    }
                }
                Ok(None) => return,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(error) => {
                    tracing::error!(%error, "reading the signalfd failed");
                    return;
                }
            }
        }
    }

    /// Sends the closer what was let go of, and watches its socket (a new
    /// one, if the closer was started again).
    fn watch_closer(&mut self) {
        closer::flush();
        let socket = closer::socket();
        if socket == self.closer_watched {
            return;
        }
        self.closer_watched = None;
        if let Some((fd, generation)) = socket {
            // Edge-triggered: readable when it reports, writable when a
            // full socket has room again.
            match self.poll.registry().register(
                &mut SourceFd(&fd),
                CLOSER,
                Interest::READABLE | Interest::WRITABLE,
            ) {
                Ok(()) => self.closer_watched = Some((fd, generation)),
                Err(error) => tracing::warn!(%error, "cannot watch the closer's socket"),
            }
        }
    }

    /// Ends the loop once nothing has been there for the idle time: no
    /// job (running, stopped or waiting for its hosts) and no connection
    /// (a scrun waiting for admission, an idle console). Anything present
    /// starts the idle time again.
    fn check_idle(&mut self) {
        let Some(idle_exit) = self.config.idle_exit else {
            return;
        };
        if self.exiting {
            return;
        }
        if !self.connections.is_empty() || !self.core.no_jobs() {
            self.idle_since = Instant::now();
        } else if self.idle_since.elapsed() >= idle_exit {
            tracing::info!(
                idle = %scored_proto::units::format_duration(idle_exit),
                "no job and no client for the idle time; exiting"
            );
            self.exiting = true;
        }
    }

    fn finish(&mut self) {
        // Give clients a moment to receive their last messages.
        let deadline = Instant::now() + Duration::from_millis(200);
        while Instant::now() < deadline
            && self
                .connections
                .values()
                .any(|conn| !conn.output.is_empty())
        {
            for conn in self.connections.values_mut() {
                let _ = flush(conn);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.actuator.kill_everything();
        // Clients that connected and were never accepted may have sent
        // descriptors: the listener's last close, which drops them, is
        // the closer's (this copy goes there; the loop's own is then not
        // the last).
        match self.listener.as_fd().try_clone_to_owned() {
            Ok(copy) => closer::discard(copy, u32::MAX),
            Err(error) => tracing::warn!(%error, "cannot hand the listening socket to the closer"),
        }
        if let Err(error) = std::fs::remove_file(&self.config.socket) {
            if error.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %self.config.socket.display(), %error, "cannot remove the socket");
            }
        }
        tracing::info!("scored exits");
    }

    /// The name of a user, looked up once per uid.
    fn user_name(&mut self, uid: u32) -> Rc<str> {
        self.user_names
            .entry(uid)
            .or_insert_with(|| user_name(uid).into())
            .clone()
    }

    /// The core, for tests.
    pub fn core(&self) -> &Core {
        &self.core
    }
}

/// How long the loop may wait for readiness before `deadline`, read
/// against the clock after the deadline was taken: one already due (a
/// launch batch asks for "now") gives zero. Taken against an earlier
/// reading, a due deadline left a few microseconds, which mio rounds up
/// to a whole millisecond, so the loop slept 1 ms between launch batches
/// (and 2 ms instead of 1 between polls for unconfirmed stops).
fn poll_timeout(deadline: Option<Instant>) -> Option<Duration> {
    let now = Instant::now();
    deadline.map(|deadline| deadline.saturating_duration_since(now))
}

#[cfg(test)]
mod tests;
