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

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io::{self, IoSliceMut, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use mio::net::{UnixListener, UnixStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

use crate::actuator::{Actuator, JobStdio};
use crate::command::{self, GroupRef};
use crate::core::{Action, ClientEvent, Core, Directory, GroupError, Input, Notice};
use crate::ids::{ClientToken, Cred, Tick};
use crate::job::JobRequest;
use crate::journal::Journal;
use crate::proto::{self, Reply, Request};

mod descriptors;
mod restart;
pub use restart::{adopt_listener, RestartSetup};

const LISTENER: Token = Token(0);
const SIGNALS: Token = Token(1);
/// The actuator's set of exec reports (`Actuator::exec_watch_fd`); far
/// above the client tokens, which count up from `FIRST_CLIENT`.
const EXEC_REPORTS: Token = Token(usize::MAX - 1);
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
/// standard ones and the most it may pass on.
const MAX_PENDING_FDS: usize = proto::SUBMIT_FDS + proto::MAX_INHERITED_FDS;
/// The most descriptors one message can carry (SCM_MAX_FD in the kernel's
/// include/net/scm.h). The receive buffer has room for all of them: when it
/// is too small the kernel still installs the descriptors that fit but sets
/// MSG_CTRUNC, and nix will not parse a truncated control buffer
/// (`cmsgs()` fails with ENOBUFS), so those descriptors were never wrapped
/// and leaked: eight with every message that carried more than eight.
const SCM_MAX_FD: usize = 253;
/// The most bytes one `recvmsg` takes from a client.
const READ_CHUNK: usize = 64 * 1024;

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
    /// How long a client may take to send the rest of a request it has
    /// begun; then the connection is closed. A client that has sent whole
    /// requests and waits (scrun during its job, an idle console) is
    /// never cut.
    pub request_timeout: Duration,
}

/// The descriptor limits the daemon found and what it raised them to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimits {
    /// Soft and hard RLIMIT_NOFILE at start, which jobs get back before exec.
    pub original: (u64, u64),
    /// The soft limit the daemon now runs with.
    pub current: u64,
}

/// Raises the daemon's descriptor limit: every admitted job holds its
/// client's socket and three descriptors. Root raises the hard limit too
/// (up to `fs.nr_open`, at most 2^20); others go up to their hard limit.
pub fn raise_fd_limit() -> FdLimits {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return FdLimits {
            original: (1024, 1024),
            current: 1024,
        };
    };
    let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(hard)
        .min(1 << 20);
    let wanted = hard.max(ceiling);
    let current = if setrlimit(Resource::RLIMIT_NOFILE, wanted, wanted).is_ok() {
        wanted
    } else if setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    FdLimits {
        original: (soft, hard),
        current,
    }
}

/// How many connections fit in `fd_limit` descriptors, capped at
/// [`MAX_CONNECTIONS`]. A connection needs its socket; the three descriptors
/// of a job are shared among jobs that pass the same open files (see
/// `FdPool`), and when the table does fill up, a submission is refused
/// with a clear message instead.
pub fn connection_limit(fd_limit: u64) -> usize {
    fd_limit
        .saturating_sub(RESERVED_FDS)
        .clamp(16, MAX_CONNECTIONS as u64) as usize
}

/// Names from the system's user and group databases.
pub struct SystemDirectory;

impl Directory for SystemDirectory {
    fn group(&self, group: &GroupRef) -> Result<(u32, Option<String>), GroupError> {
        match group {
            GroupRef::Gid(gid) => {
                let name = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(*gid))
                    .ok()
                    .flatten()
                    .map(|g| g.name);
                Ok((*gid, name))
            }
            GroupRef::Name(name) => match nix::unistd::Group::from_name(name) {
                Ok(Some(group)) => Ok((group.gid.as_raw(), Some(group.name))),
                Ok(None) => Err(GroupError::NotFound { name: name.clone() }),
                Err(error) => Err(GroupError::Lookup {
                    name: name.clone(),
                    source: Box::new(error),
                }),
            },
        }
    }
}

/// The name of a user, or its number.
pub fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |user| user.name)
}

struct Connection {
    stream: UnixStream,
    cred: Cred,
    user: Rc<str>,
    input: proto::FrameBuffer,
    output: VecDeque<u8>,
    fds: Vec<OwnedFd>,
    stdio: Option<JobStdio>,
    submitted: bool,
    /// Close once the output is flushed.
    closing: bool,
    /// Writable interest is registered.
    writing: bool,
    /// Reading was skipped because too many replies wait: resume once they
    /// are written (the socket will not say it is readable again).
    paused: bool,
    /// Root, the daemon's user or an operator: not held to the per-user limits.
    privileged: bool,
    /// The input and output lengths last counted in the user's totals
    /// (each under 4 GiB: input is bounded by `MAX_REQUEST`, output by
    /// `MAX_REPLY` per reply and the pause), as `u32` to keep an idle
    /// connection small; since when a request is partial is in
    /// `Daemon::partial`.
    counted: (u32, u32),
}

/// What one user's connections hold, for the per-user limits.
#[derive(Debug, Default, Clone, Copy)]
struct UserUse {
    connections: usize,
    input: usize,
    output: usize,
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
    /// When each open switch began, and the wakeup count then.
    switch_starts: HashMap<u64, (Instant, u64)>,
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
    /// The job journal, when the daemon keeps one.
    journal: Option<Journal>,
    /// How to re-execute in place, when the daemon may.
    restart: Option<RestartSetup>,
    /// A restart was asked for (by this console connection, wanting JSON,
    /// or by SIGUSR2 or a caught panic): carried out once the event is handled.
    pending_restart: Option<Option<(Token, bool)>>,
    /// Connections and buffered bytes per uid.
    per_user: HashMap<u32, UserUse>,
    /// Connections holding part of a request, for the request timeout.
    partial: HashMap<Token, Instant>,
    /// The core before the current event, to recover from a panic.
    recovery: restart::Recovery,
    /// The console command the hook panics after, applied in this
    /// event (test only, see `restart::panic_after_line`).
    panic_after: Option<String>,
    /// Console commands given to the core and not answered yet, in order:
    /// how each connection wants its answer.
    console_asks: VecDeque<(Token, ConsoleAsk)>,
    /// Answers to console commands held back, in order, until the stops
    /// under way are confirmed (see `answer`).
    held_answers: Vec<(Token, Reply)>,
    /// Where `read_available` receives, allocated once: a buffer on the
    /// stack would be zeroed at every read (64 KiB, twice per request:
    /// the read and the one that finds the socket drained), which was
    /// the largest single cost of admitting a job.
    read_chunk: Box<[u8]>,
    /// Every connection that may be paused (and some that no longer are,
    /// pruned by `resumable`): the loop looks at these after each round
    /// instead of at every connection, which made each round cost the
    /// number of clients (10,000 scrun waiting in a queue are 10,000).
    maybe_paused: BTreeSet<Token>,
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
            wakeups: 0,
            exiting: false,
            terminations: 0,
            served_a_job: false,
            fd_pool: FdPool::default(),
            dirty: Vec::new(),
            spare_fd: spare_descriptor(),
            idle_since: Instant::now(),
            journal: None,
            restart: None,
            pending_restart: None,
            per_user: HashMap::new(),
            partial: HashMap::new(),
            recovery: restart::Recovery::default(),
            panic_after: None,
            console_asks: VecDeque::new(),
            held_answers: Vec::new(),
            read_chunk: vec![0u8; READ_CHUNK].into_boxed_slice(),
            maybe_paused: BTreeSet::new(),
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

    fn instant(&self, tick: Tick) -> Instant {
        self.start + Duration::from_micros(tick.0)
    }

    /// Runs until the daemon is asked to exit and every job is gone.
    pub fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        self.recovery.event_done(&mut self.core);
        while !self.exiting {
            let mut deadline = self.core.next_deadline().map(|tick| self.instant(tick));
            if let Some(actuator) = self.actuator.next_deadline() {
                deadline = Some(deadline.map_or(actuator, |core| core.min(actuator)));
            }
            // A job's end written to the journal but not synced yet.
            if let Some(sync) = self.journal.as_ref().and_then(|j| j.sync_deadline()) {
                deadline = Some(deadline.map_or(sync, |other| other.min(sync)));
            }
            if let Some(first) = self.partial.values().min() {
                let cut = *first + self.config.request_timeout;
                deadline = Some(deadline.map_or(cut, |other| other.min(cut)));
            }
            if let Some(idle_exit) = self.config.idle_exit {
                let idle = self.idle_since + idle_exit;
                deadline = Some(deadline.map_or(idle, |other| other.min(idle)));
            }
            let mut timeout = poll_timeout(deadline);
            if !self.resumable().is_empty() {
                // A paused client's replies were written: serve its next
                // requests now, since its socket will not wake us.
                timeout = Some(Duration::ZERO);
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
                    token => Some(Event::Client(token)),
                })
                .collect();
            for event in ready {
                self.handle_event_guarded(event);
            }
            for token in self.resumable() {
                self.handle_event_guarded(Event::Client(token));
            }
            self.handle_event_guarded(Event::Deadline);
            self.check_idle();
        }
        self.finish();
        Ok(())
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
                restart::panic_after_exit(&inputs);
            }
            Event::Deadline => {
                let now = Instant::now();
                self.cut_slow_requests(now, &mut inputs);
                self.actuator.poll(now, &mut inputs);
                // A batch of a large launch, between the events of others.
                self.actuator.continue_launches(&mut inputs);
                if self
                    .core
                    .next_deadline()
                    .is_some_and(|tick| self.instant(tick) <= now)
                {
                    inputs.push(Input::Tick);
                }
                self.recovery.note(&inputs);
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
            let actions = self
                .core
                .handle_all(std::mem::take(&mut batch), self.tick());
            let stops = actions
                .iter()
                .any(|action| matches!(action, Action::Stop(_)));
            self.carry_out(actions, &mut batch);
            if stops {
                let before = batch.len();
                self.actuator.await_stops(STOP_WAIT, &mut batch);
                self.recovery.note(&batch[before..]);
            }
        }
        if let Some(line) = self.panic_after.take() {
            restart::panic_after_line(&line);
        }
        self.release_answers(false);
        self.write_journal();
        self.flush_all();
        if let Some(journal) = &mut self.journal {
            if let Err(error) = journal.sync_if_needed() {
                tracing::error!(%error, "cannot sync the job journal");
            }
        }
    }

    fn carry_out(&mut self, actions: Vec<Action>, inputs: &mut Vec<Input>) {
        let mut stops_done = 0;
        for action in actions {
            let before = inputs.len();
            match action {
                Action::Spawn(plan) => {
                    let stdio = self
                        .connections
                        .get(&Token(plan.client.0 as usize))
                        .and_then(|conn| conn.stdio.as_ref());
                    self.actuator.spawn(&plan, stdio, inputs);
                }
                Action::Stop(job) => {
                    if stops_done > 0 {
                        restart::panic_mid_switch();
                    }
                    self.actuator.stop(job, inputs);
                    stops_done += 1;
                }
                Action::Continue(job) => self.actuator.cont(job),
                Action::Signal { job, signal } => self.actuator.signal(job, signal),
                Action::Sample(job) => {
                    if let Some(usage) = self.actuator.sample(job) {
                        inputs.push(Input::Usage { job, usage });
                    }
                }
                Action::Release(job) => self.actuator.release(job),
                Action::SwitchBegin(id) => {
                    self.switch_starts
                        .insert(id, (Instant::now(), self.wakeups));
                }
                Action::SwitchEnd(id) => {
                    if let Some((start, wakeups)) = self.switch_starts.remove(&id) {
                        let latency = start.elapsed();
                        tracing::debug!(
                            switch = id,
                            latency_us = latency.as_micros() as u64,
                            wakeups = self.wakeups - wakeups,
                            "switch complete"
                        );
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

    fn notify(&mut self, client: ClientToken, event: ClientEvent) {
        let token = Token(client.0 as usize);
        self.dirty.push(token);
        let Some(conn) = self.connections.get_mut(&token) else {
            return;
        };
        let (reply, last) = match event {
            ClientEvent::Waiting(reason) => (Reply::Waiting { reason }, false),
            ClientEvent::Admitted {
                job,
                queue,
                cluster,
                hosts,
            } => (
                Reply::Admitted {
                    job: job.0,
                    queue,
                    cluster,
                    hosts,
                },
                false,
            ),
            ClientEvent::Rejected { kind, reason } => (Reply::Rejected { reason, kind }, true),
            ClientEvent::Started(job) => (
                Reply::Started {
                    job: job.0,
                    winch: true,
                    signals: true,
                },
                false,
            ),
            ClientEvent::Held(job) => (Reply::Held { job: job.0 }, false),
            ClientEvent::Answer(reply) => return self.answer(token, reply),
            ClientEvent::Ended(ending) => (
                Reply::Ended {
                    job: ending.job.0,
                    kind: ending.kind,
                    status: ending.status,
                    reason: ending.reason.clone(),
                    signal: ending.signal,
                    accounting: proto::Accounting::from(&ending.accounting),
                },
                true,
            ),
        };
        queue_reply(conn, &reply);
        if last {
            // The job's story is told; the descriptors are not needed any more.
            conn.stdio = None;
        }
        self.recount(token);
    }

    /// Sends a console client the core's answer to its command.
    fn answer(&mut self, token: Token, reply: command::reply::Reply) {
        let ask = self
            .console_asks
            .iter()
            .position(|(asker, _)| *asker == token)
            .and_then(|idx| self.console_asks.remove(idx))
            .map(|(_, ask)| ask);
        let Some(ask) = ask else {
            tracing::error!(
                client = token.0,
                "an answer to a console command nobody asked"
            );
            return;
        };
        if ask.restart && !reply.is_error() {
            self.pending_restart = Some(Some((token, ask.json)));
            return;
        }
        let reply = Reply::Console {
            ok: !reply.is_error(),
            text: reply.to_text(),
            json: ask.json.then(|| reply.to_json()),
        };
        // Sent at the end of the feed (`release_answers`), once the stops
        // the batch asked for are confirmed.
        self.held_answers.push((token, reply));
    }

    /// Sends the held answers once no stop is pending (or now, if `now`).
    /// A command that switched jobs (`suspend`, `queue Q deactivate`, ...)
    /// is so answered once the switch is done, as a program that stops
    /// processes itself returns from waitpid: whoever reads the answer
    /// finds the stopped processes stopped and the entering ones running.
    /// The loop does not wait for it: a stop confirmed later (after
    /// `STOP_WAIT`) releases the answers at the end of that event.
    fn release_answers(&mut self, now: bool) {
        if self.held_answers.is_empty() || (!now && self.actuator.pending_stops() > 0) {
            return;
        }
        for (token, reply) in std::mem::take(&mut self.held_answers) {
            self.send_answer(token, &reply);
        }
    }

    fn send_answer(&mut self, token: Token, reply: &Reply) {
        self.dirty.push(token);
        let Some(conn) = self.connections.get_mut(&token) else {
            return;
        };
        queue_reply(conn, reply);
        self.recount(token);
    }

    // ----- connections -----

    fn accept(&mut self) {
        loop {
            let (mut stream, _) = match self.listener.accept() {
                Ok(pair) => pair,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) if matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    // Out of descriptors: give up the spare one for a moment
                    // to accept the client and tell it so, rather than leave
                    // it waiting in the backlog with no answer.
                    if self.spare_fd.take().is_none() {
                        tracing::warn!(%error, "accept failed");
                        return;
                    }
                    // accept() fails with EMFILE before it looks for a
                    // client, so only a successful accept says one waited.
                    let refused = match self.listener.accept() {
                        Ok((mut stream, _)) => {
                            let frame = proto::encode(&Reply::Error {
                                message: "scored has run out of descriptors; try again later"
                                    .into(),
                            });
                            let _ = stream.write(&frame);
                            tracing::warn!("connection refused: out of descriptors");
                            true
                        }
                        Err(_) => false,
                    };
                    self.spare_fd = spare_descriptor();
                    if !refused {
                        return;
                    }
                    continue;
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    return;
                }
            };
            // Credentials first: the limits depend on who connects.
            let cred = match peer_cred(&stream) {
                Ok(cred) => cred,
                Err(error) => {
                    tracing::warn!(%error, "cannot read a client's credentials; closing it");
                    continue;
                }
            };
            let privileged = self.core.is_privileged(cred.uid);
            if let Err(message) = self.admit_connection(cred.uid, privileged) {
                let frame = proto::encode(&Reply::Error {
                    message: message.clone(),
                });
                let _ = stream.write(&frame);
                tracing::warn!(uid = cred.uid, %message, "connection refused");
                continue;
            }
            let token = Token(self.next_token);
            self.next_token += 1;
            if let Err(error) =
                self.poll
                    .registry()
                    .register(&mut stream, token, Interest::READABLE)
            {
                tracing::warn!(%error, "cannot watch a client");
                continue;
            }
            let user = self.user_name(cred.uid);
            let cred_uid = cred.uid;
            tracing::debug!(
                client = token.0,
                uid = cred.uid,
                pid = cred.pid,
                "client connected"
            );
            self.connections.insert(
                token,
                Box::new(Connection {
                    stream,
                    cred,
                    user,
                    input: proto::FrameBuffer::new(),
                    output: VecDeque::new(),
                    fds: Vec::new(),
                    stdio: None,
                    submitted: false,
                    closing: false,
                    writing: false,
                    paused: false,
                    privileged,
                    counted: (0, 0),
                }),
            );
            self.per_user.entry(cred_uid).or_default().connections += 1;
        }
    }

    fn client_ready(&mut self, token: Token, inputs: &mut Vec<Input>) {
        self.serve_client(token, inputs);
        self.recount(token);
        self.check_user_budget(token, inputs);
    }

    fn serve_client(&mut self, token: Token, inputs: &mut Vec<Input>) {
        self.dirty.push(token);
        let user_output_full = self.user_output_full(token);
        let Some(conn) = self.connections.get_mut(&token) else {
            return;
        };
        // Write first: replies that leave make room to read more requests.
        if flush(conn).is_err() {
            self.close(token, inputs);
            return;
        }
        let mut gone = false;
        conn.paused = conn.output.len() >= PAUSE_OUTPUT || user_output_full;
        if conn.paused {
            self.maybe_paused.insert(token);
        }
        if !conn.closing && !conn.paused {
            match read_available(conn, &mut self.read_chunk) {
                Ok(open) => gone = !open,
                Err(error) => {
                    let message = error.to_string();
                    tracing::info!(client = token.0, %message, "dropping a client");
                    queue_reply(conn, &Reply::Error { message });
                    conn.closing = true;
                }
            }
        }
        if !conn.closing {
            self.process_requests(token, inputs);
        }
        let Some(conn) = self.connections.get_mut(&token) else {
            return;
        };
        if gone {
            self.close(token, inputs);
            return;
        }
        if flush(conn).is_err() || (conn.closing && conn.output.is_empty()) {
            self.close(token, inputs);
        }
    }

    /// Connections that stopped being read because of unread replies and
    /// whose replies have since been written.
    fn resumable(&mut self) -> Vec<Token> {
        let connections = &self.connections;
        self.maybe_paused
            .retain(|token| connections.get(token).is_some_and(|conn| conn.paused));
        self.maybe_paused
            .iter()
            .filter(|token| {
                self.connections[token].output.len() < PAUSE_OUTPUT
                    && !self.user_output_full(**token)
            })
            .copied()
            .collect()
    }

    fn process_requests(&mut self, token: Token, inputs: &mut Vec<Input>) {
        loop {
            let Some(conn) = self.connections.get_mut(&token) else {
                return;
            };
            if conn.closing {
                return;
            }
            if conn.output.len() >= PAUSE_OUTPUT {
                // The rest waits until the client has read its replies.
                conn.paused = true;
                self.maybe_paused.insert(token);
                return;
            }
            let request: Request = match conn.input.decode(proto::MAX_REQUEST) {
                Ok(Some(request)) => request,
                Ok(None) => {
                    if conn.input.is_empty() {
                        conn.input.shrink_if_empty();
                        self.partial.remove(&token);
                    } else {
                        self.partial.entry(token).or_insert_with(Instant::now);
                    }
                    return;
                }
                Err(error) => {
                    tracing::info!(client = token.0, %error, "malformed request; closing the connection");
                    queue_reply(
                        conn,
                        &Reply::Error {
                            message: error.to_string(),
                        },
                    );
                    conn.closing = true;
                    return;
                }
            };
            // A whole request arrived: what follows it starts a new one.
            self.partial.remove(&token);
            self.request(token, request, inputs);
        }
    }

    fn request(&mut self, token: Token, request: Request, inputs: &mut Vec<Input>) {
        let client = ClientToken(token.0 as u64);
        let conn = self.connections.get_mut(&token).expect("caller checked");
        match request {
            Request::Submit { version, submit } => {
                if version != proto::VERSION {
                    return refuse(
                        conn,
                        format!(
                            "protocol version {version} is not {}; use matching scrun and scored",
                            proto::VERSION
                        ),
                    );
                }
                if conn.submitted {
                    return refuse(conn, "a connection may submit one job only".into());
                }
                if conn.fds.len() != submit.descriptor_count() {
                    return refuse(conn, format!(
                        "this submission must carry {} descriptors (the standard ones not closed, then the {} passed), it carried {}",
                        submit.descriptor_count(),
                        submit.fds.len(),
                        conn.fds.len()
                    ));
                }
                let wants_terminal = submit.options.pty;
                let (closed, numbers) = (submit.closed_stdio.clone(), submit.fds.clone());
                // The boundary: the one validator of a submission (the
                // protocol crate's, which scrun runs too), and the only
                // way to the core's request.
                let request = match JobRequest::try_from(submit) {
                    Ok(request) => request,
                    Err(error) => {
                        queue_reply(
                            conn,
                            &Reply::Rejected {
                                reason: error.to_string(),
                                kind: proto::RejectKind::Invalid,
                            },
                        );
                        conn.closing = true;
                        return;
                    }
                };
                let fds = std::mem::take(&mut conn.fds);
                let Some(stdio) = descriptors::job_stdio(
                    fds,
                    &closed,
                    &numbers,
                    wants_terminal,
                    &mut self.fd_pool,
                ) else {
                    return refuse(conn, "descriptors went missing".into());
                };
                if let (true, Some(stdin)) = (wants_terminal, &stdio.stdin) {
                    if let Err(reason) = check_job_terminal(stdin) {
                        queue_reply(
                            conn,
                            &Reply::Rejected {
                                reason,
                                kind: proto::RejectKind::Invalid,
                            },
                        );
                        conn.closing = true;
                        return;
                    }
                }
                conn.stdio = Some(stdio);
                conn.submitted = true;
                self.served_a_job = true;
                self.idle_since = Instant::now();
                inputs.push(Input::Submit {
                    client,
                    cred: conn.cred.clone(),
                    user: conn.user.clone(),
                    request: Box::new(request),
                });
            }
            Request::Console {
                version,
                line,
                json,
            } => {
                if version != proto::VERSION {
                    return refuse(conn, format!("protocol version {version} is not {}; use matching sc_console and scored", proto::VERSION));
                }
                // Test hook: the end-to-end tests make scored panic on a
                // console line of their choice, to check that a panic loses
                // no job. Only the test harness sets the variable.
                restart::panic_on_line(&line);
                let parsed = command::parse_line(&line);
                if let Ok(Some(command)) = &parsed {
                    let cred = conn.cred.clone();
                    if let Some(reply) = self.journal_command(command, json, self.tick(), &cred) {
                        if let Some(conn) = self.connections.get_mut(&token) {
                            queue_reply(conn, &reply);
                        }
                        return;
                    }
                }
                let Some(conn) = self.connections.get_mut(&token) else {
                    return;
                };
                let reply = match parsed {
                    Ok(None) => command::reply::Reply::Done(String::new()),
                    Ok(Some(command)) => {
                        // An input like any other: the core answers with
                        // `ClientEvent::Answer` once the batch is decided.
                        let restart = command == command::Command::Restart;
                        if restart::panics_after_line(&line) {
                            self.panic_after = Some(line.clone());
                        }
                        self.console_asks
                            .push_back((token, ConsoleAsk { json, restart }));
                        inputs.push(Input::Console {
                            client,
                            cred: conn.cred.clone(),
                            command: Box::new(command),
                        });
                        return;
                    }
                    Err(error) => command::reply::Reply::error(error.to_string()),
                };
                queue_reply(
                    conn,
                    &Reply::Console {
                        ok: !reply.is_error(),
                        text: reply.to_text(),
                        json: json.then(|| reply.to_json()),
                    },
                );
            }
            Request::Hold => inputs.push(Input::Hold(client)),
            Request::Release => inputs.push(Input::Release(client)),
            Request::Kill => inputs.push(Input::Interrupt(client)),
            Request::Winch => inputs.push(Input::Deliver {
                client,
                signal: libc::SIGWINCH,
            }),
            Request::Signal { signal } if proto::PASSED_SIGNALS.contains(&signal) => {
                inputs.push(Input::Deliver { client, signal })
            }
            Request::Signal { signal } => refuse(
                conn,
                format!(
                    "signal {signal} cannot be passed to a job (scrun passes SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGTERM and SIGWINCH)"
                ),
            ),
        }
    }

    fn close(&mut self, token: Token, inputs: &mut Vec<Input>) {
        self.partial.remove(&token);
        if let Some(mut conn) = self.connections.remove(&token) {
            let uid = conn.cred.uid;
            if let Some(usage) = self.per_user.get_mut(&uid) {
                usage.connections = usage.connections.saturating_sub(1);
                usage.input = usage.input.saturating_sub(conn.counted.0 as usize);
                usage.output = usage.output.saturating_sub(conn.counted.1 as usize);
                if usage.connections == 0 {
                    self.per_user.remove(&uid);
                }
            }
            let _ = self.poll.registry().deregister(&mut conn.stream);
            tracing::debug!(client = token.0, "client gone");
            inputs.push(Input::ClientGone(ClientToken(token.0 as u64)));
        }
    }

    /// Writes to the clients that have something to send (and only them:
    /// ten thousand idle clients cost nothing here).
    fn flush_all(&mut self) {
        let mut tokens = std::mem::take(&mut self.dirty);
        tokens.sort_unstable();
        tokens.dedup();
        let mut inputs = Vec::new();
        for token in tokens {
            let Some(conn) = self.connections.get_mut(&token) else {
                continue;
            };
            let failed = flush(conn).is_err();
            if failed || (conn.closing && conn.output.is_empty()) || conn.output.len() > MAX_OUTPUT
            {
                self.close(token, &mut inputs);
                continue;
            }
            let want_write = !conn.output.is_empty();
            if !want_write {
                // Give the memory of a drained buffer back: a queued job's
                // connection then costs only its bookkeeping.
                conn.output = VecDeque::new();
            }
            if want_write != conn.writing {
                let interest = if want_write {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                if self
                    .poll
                    .registry()
                    .reregister(&mut conn.stream, token, interest)
                    .is_ok()
                {
                    conn.writing = want_write;
                }
            }
            self.recount(token);
        }
        if !inputs.is_empty() {
            self.feed(inputs);
        }
    }

    /// Whether a new connection of `uid` may be served: the table has
    /// room, and for a plain user, room outside the reserve and under the
    /// per-user limit. The error says which limit, for the client.
    fn admit_connection(&self, uid: u32, privileged: bool) -> Result<(), String> {
        let total = self.connections.len();
        let limit = self.config.max_connections;
        if total >= limit {
            return Err(format!(
                "scored serves at most {limit} connections at once; try again later"
            ));
        }
        if privileged {
            return Ok(());
        }
        let reserve = PRIVILEGED_RESERVE.min(limit / 2);
        if total >= limit - reserve {
            return Err(format!(
                "scored serves at most {} connections at once for users other than root and the \
                 operators ({reserve} more are kept for them); try again later",
                limit - reserve
            ));
        }
        let held = self.per_user.get(&uid).map_or(0, |usage| usage.connections);
        let per_user = self.config.max_connections_per_user;
        if held >= per_user {
            return Err(format!(
                "user {} already holds {held} connections to scored, the most one user may \
                 hold at once (--max-connections-per-user {per_user}); close some and try again",
                user_name(uid)
            ));
        }
        Ok(())
    }

    /// Brings the user's totals up to date with what the connection buffers now.
    fn recount(&mut self, token: Token) {
        let Some(conn) = self.connections.get_mut(&token) else {
            return;
        };
        let clamp = |len: usize| u32::try_from(len).unwrap_or(u32::MAX);
        let now = (clamp(conn.input.len()), clamp(conn.output.len()));
        let before = std::mem::replace(&mut conn.counted, now);
        if let Some(usage) = self.per_user.get_mut(&conn.cred.uid) {
            usage.input = (usage.input + now.0 as usize).saturating_sub(before.0 as usize);
            usage.output = (usage.output + now.1 as usize).saturating_sub(before.1 as usize);
        }
    }

    /// Whether the replies waiting for the user of `token` (a plain user)
    /// fill that user's budget, so that no more of their requests are served.
    fn user_output_full(&self, token: Token) -> bool {
        let Some(conn) = self.connections.get(&token) else {
            return false;
        };
        !conn.privileged
            && self
                .per_user
                .get(&conn.cred.uid)
                .is_some_and(|usage| usage.output >= USER_OUTPUT_BUDGET)
    }

    /// Closes the connection of a plain user whose incomplete requests,
    /// over all of their connections, exceed the user's budget.
    fn check_user_budget(&mut self, token: Token, inputs: &mut Vec<Input>) {
        let Some(conn) = self.connections.get_mut(&token) else {
            return;
        };
        if conn.privileged || conn.closing || conn.input.is_empty() {
            return;
        }
        let held = self
            .per_user
            .get(&conn.cred.uid)
            .map_or(0, |usage| usage.input);
        if held <= USER_INPUT_BUDGET {
            return;
        }
        let message = format!(
            "user {} has {} KiB of unfinished requests on its connections to scored, more than \
             the {} KiB one user may have; closing this connection",
            conn.user,
            held >> 10,
            USER_INPUT_BUDGET >> 10
        );
        tracing::warn!(client = token.0, uid = conn.cred.uid, %message, "dropping a client");
        self.drop_with_error(token, message, inputs);
    }

    /// Tells a client why it is dropped (if its socket takes it) and
    /// closes the connection now, freeing what it buffered.
    fn drop_with_error(&mut self, token: Token, message: String, inputs: &mut Vec<Input>) {
        if let Some(conn) = self.connections.get_mut(&token) {
            queue_reply(conn, &Reply::Error { message });
            let _ = flush(conn);
        }
        self.close(token, inputs);
    }

    /// Closes the connections that began a request longer than the
    /// request timeout ago and have not finished it.
    fn cut_slow_requests(&mut self, now: Instant, inputs: &mut Vec<Input>) {
        let timeout = self.config.request_timeout;
        let late: Vec<Token> = self
            .partial
            .iter()
            .filter(|(_, since)| now.saturating_duration_since(**since) >= timeout)
            .map(|(token, _)| *token)
            .collect();
        for token in late {
            let message = format!(
                "an incomplete request waited more than {} for its end; closing the connection",
                crate::units::format_duration(timeout)
            );
            tracing::info!(client = token.0, %message, "dropping a client");
            self.drop_with_error(token, message, inputs);
        }
    }

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
        if !self.connections.is_empty() || self.core.n_jobs() > 0 {
            self.idle_since = Instant::now();
        } else if self.idle_since.elapsed() >= idle_exit {
            tracing::info!(
                idle = %crate::units::format_duration(idle_exit),
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

/// Keeps one descriptor per open file description among the stdio that
/// clients pass: jobs launched from one terminal share its description, so
/// ten thousand queued jobs need ten thousand sockets, not forty thousand
/// descriptors. Two descriptors are the same description when
/// `kcmp(KCMP_FILE)` says so, which is exact; without kcmp nothing is shared.
#[derive(Default)]
struct FdPool {
    by_inode: HashMap<(u64, u64), Vec<Weak<OwnedFd>>>,
    kcmp_missing: bool,
}

impl FdPool {
    fn intern(&mut self, fd: OwnedFd) -> Rc<OwnedFd> {
        if self.kcmp_missing {
            return Rc::new(fd);
        }
        let Ok(stat) = nix::sys::stat::fstat(&fd) else {
            return Rc::new(fd);
        };
        let key = (stat.st_dev, stat.st_ino);
        let bucket = self.by_inode.entry(key).or_default();
        bucket.retain(|weak| weak.strong_count() > 0);
        for weak in bucket.iter() {
            let Some(existing) = weak.upgrade() else {
                continue;
            };
            match same_description(existing.as_raw_fd(), fd.as_raw_fd()) {
                Ok(true) => return existing,
                Ok(false) => {}
                Err(error) => {
                    tracing::debug!(%error, "kcmp unavailable; passed descriptors are not shared");
                    self.kcmp_missing = true;
                    break;
                }
            }
        }
        let shared = Rc::new(fd);
        bucket.push(Rc::downgrade(&shared));
        if bucket.len() == 1 && self.by_inode.len() > 4096 {
            self.by_inode
                .retain(|_, bucket| bucket.iter().any(|weak| weak.strong_count() > 0));
        }
        shared
    }
}

/// Whether two of our descriptors refer to the same open file description.
fn same_description(first: RawFd, second: RawFd) -> io::Result<bool> {
    const KCMP_FILE: libc::c_long = 0;
    let pid = std::process::id() as libc::c_long;
    // SAFETY: kcmp takes integers only: our own pid twice, the comparison
    // kind and two descriptor numbers; it reads no memory of ours.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            pid,
            pid,
            KCMP_FILE,
            first as libc::c_long,
            second as libc::c_long,
        )
    };
    match ret {
        0 => Ok(true),
        1..=3 => Ok(false),
        _ => Err(io::Error::last_os_error()),
    }
}

fn spare_descriptor() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

fn refuse(conn: &mut Connection, message: String) {
    tracing::info!(uid = conn.cred.uid, %message, "refusing a request");
    queue_reply(conn, &Reply::Error { message });
    conn.closing = true;
}

fn queue_reply(conn: &mut Connection, reply: &Reply) {
    let frame = proto::encode(reply);
    conn.output.extend(frame);
}

/// Writes what the socket takes; `Err` means the client is gone.
fn flush(conn: &mut Connection) -> io::Result<()> {
    while !conn.output.is_empty() {
        let (head, _) = conn.output.as_slices();
        match conn.stream.write(head) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => {
                conn.output.drain(..written);
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Reads until the socket would block, collecting bytes and descriptors.
/// Returns `Ok(false)` when the client closed its end.
fn read_available(conn: &mut Connection, chunk: &mut [u8]) -> io::Result<bool> {
    loop {
        let mut control = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
        let (len, fds, truncated) = {
            let mut iov = [IoSliceMut::new(&mut *chunk)];
            let message = match recvmsg::<()>(
                conn.stream.as_raw_fd(),
                &mut iov,
                Some(&mut control),
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(message) => message,
                Err(nix::errno::Errno::EAGAIN) => return Ok(true),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::ECONNRESET) => return Ok(false),
                Err(error) => return Err(io::Error::from(error)),
            };
            let mut fds = Vec::new();
            if let Ok(cmsgs) = message.cmsgs() {
                for cmsg in cmsgs {
                    if let ControlMessageOwned::ScmRights(raw) = cmsg {
                        for fd in raw {
                            // SAFETY: the kernel just installed this descriptor in our
                            // table for this message (SCM_RIGHTS); nothing else owns it.
                            fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                        }
                    }
                }
            }
            (
                message.bytes,
                fds,
                message.flags.contains(MsgFlags::MSG_CTRUNC),
            )
        };
        if truncated {
            // The kernel could not hand over every descriptor: more than a
            // submission carries, or no room left in our table.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "descriptors could not be received: too many in one message, or scored is out of file descriptors",
            ));
        }
        conn.fds.extend(fds);
        if conn.fds.len() > MAX_PENDING_FDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "too many descriptors sent ({}): a submission carries at most its 3 standard ones and {} others",
                    conn.fds.len(),
                    proto::MAX_INHERITED_FDS
                ),
            ));
        }
        if len == 0 {
            return Ok(false);
        }
        conn.input.extend(&chunk[..len]);
        // Refuse an oversized frame as soon as its length is known, before
        // buffering it.
        if let Err(error) = proto::frame_len(conn.input.pending(), proto::MAX_REQUEST) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                error.to_string(),
            ));
        }
        if conn.input.len() > proto::MAX_REQUEST + 4 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "request too large",
            ));
        }
    }
}

/// The peer's credentials (SO_PEERCRED) and supplementary groups (SO_PEERGROUPS).
fn peer_cred(stream: &UnixStream) -> io::Result<Cred> {
    let creds = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)?;
    Ok(Cred {
        pid: creds.pid(),
        uid: creds.uid(),
        gid: creds.gid(),
        groups: peer_groups(stream.as_raw_fd()),
    })
}

/// SO_PEERGROUPS: the supplementary groups the peer had when it connected.
fn peer_groups(fd: RawFd) -> Vec<u32> {
    let mut groups = vec![0 as libc::gid_t; 256];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: `groups` is a writable buffer of `len` bytes that lives
        // across the call; getsockopt writes at most `len` bytes into it and
        // stores the size it needs in `len`.
        let ret = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let count = len as usize / std::mem::size_of::<libc::gid_t>();
        if ret == 0 {
            groups.truncate(count);
            // Kept for the connection's life: hold only what was returned.
            groups.shrink_to_fit();
            return groups;
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::ERANGE) && count > groups.len() && count <= 65_536 {
            groups.resize(count, 0);
            continue;
        }
        tracing::debug!(%error, "SO_PEERGROUPS failed; supplementary groups unknown");
        return Vec::new();
    }
}

/// Checks the stdin of a `-pty` submission: it must be a terminal that
/// is no session's controlling terminal, which the job's first rank can
/// then take without taking it from anyone (scrun sends the slave of a
/// pseudo-terminal it has just opened).
fn check_job_terminal(stdin: &OwnedFd) -> Result<(), String> {
    if !nix::unistd::isatty(stdin).unwrap_or(false) {
        return Err("-pty: the standard input sent with the job is not a terminal".into());
    }
    match crate::actuator::sys::terminal_session(stdin.as_fd()) {
        Ok(None) => Ok(()),
        Ok(Some(session)) => Err(format!(
            "-pty: the terminal sent with the job is already the controlling terminal of session {session}"
        )),
        Err(error) => Err(format!("-pty: cannot inspect the terminal sent with the job: {error}")),
    }
}

/// Why the daemon's socket could not be bound.
#[derive(Debug)]
pub enum BindError {
    /// A file system call on `path` failed (`doing`: what was tried).
    Io {
        /// What was tried: `create`, `inspect`, ...
        doing: &'static str,
        /// The path it was tried on.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// The socket's directory belongs to someone else.
    DirectoryOwner {
        /// The socket.
        path: PathBuf,
        /// The directory's owner.
        uid: u32,
    },
    /// The socket's directory is writable by other users and not sticky.
    DirectoryWritable {
        /// The socket.
        path: PathBuf,
        /// The directory.
        dir: PathBuf,
    },
    /// Something other than a socket is at the path.
    NotSocket(PathBuf),
    /// A socket of another user is at the path.
    SocketOwner {
        /// The socket.
        path: PathBuf,
        /// Its owner.
        uid: u32,
    },
    /// A daemon answers on the socket.
    InUse(PathBuf),
}

impl std::fmt::Display for BindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindError::Io {
                doing,
                path,
                source,
            } => write!(f, "cannot {doing} {}: {source}", path.display()),
            BindError::DirectoryOwner { path, uid } => write!(
                f,
                "refusing {}: its directory belongs to uid {uid}",
                path.display()
            ),
            BindError::DirectoryWritable { path, dir } => write!(
                f,
                "refusing {}: its directory {} is writable by other users",
                path.display(),
                dir.display()
            ),
            BindError::NotSocket(path) => write!(
                f,
                "refusing {}: it exists and is not a socket",
                path.display()
            ),
            BindError::SocketOwner { path, uid } => {
                write!(f, "refusing {}: it belongs to uid {uid}", path.display())
            }
            BindError::InUse(path) => write!(
                f,
                "another scored is already listening on {}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for BindError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BindError::Io { source, .. } => Some(source),
            _ => None,
        }
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

/// Binds the daemon's socket safely: the directory is created if missing
/// and must not be writable by other users (unless sticky); an existing
/// path must be a socket of ours that nobody answers on (a stale socket is
/// replaced, a live daemon is refused).
pub fn bind(
    path: &std::path::Path,
    uid: u32,
) -> Result<std::os::unix::net::UnixListener, BindError> {
    use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
    let show = path.display();
    let io_error = |doing: &'static str, path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| BindError::Io {
            doing,
            path,
            source,
        }
    };
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.exists() {
        let mode = if uid == 0 { 0o755 } else { 0o700 };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(&parent)
            .map_err(io_error("create", &parent))?;
    }
    let dir = std::fs::metadata(&parent).map_err(io_error("inspect", &parent))?;
    let mode = dir.permissions().mode();
    if dir.uid() != uid && dir.uid() != 0 {
        return Err(BindError::DirectoryOwner {
            path: path.to_path_buf(),
            uid: dir.uid(),
        });
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(BindError::DirectoryWritable {
            path: path.to_path_buf(),
            dir: parent,
        });
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.file_type().is_socket() {
                return Err(BindError::NotSocket(path.to_path_buf()));
            }
            if meta.uid() != uid {
                return Err(BindError::SocketOwner {
                    path: path.to_path_buf(),
                    uid: meta.uid(),
                });
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(BindError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(io_error("remove the stale socket", path))?;
            tracing::info!(path = %show, "replaced a stale socket");
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(io_error("inspect", path)(error)),
    }
    let listener =
        std::os::unix::net::UnixListener::bind(path).map_err(io_error("listen on", path))?;
    // Every local user may connect (read-only commands are open to all and
    // identity comes from the kernel); a user's own daemon stays private.
    let mode = if uid == 0 { 0o666 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io_error("set the permissions of", path))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_taken_before_the_timeout_is_due_at_once() {
        // As the actuator asks while a launch is under way: "now".
        let deadline = Instant::now();
        assert_eq!(poll_timeout(Some(deadline)), Some(Duration::ZERO));
        assert_eq!(poll_timeout(None), None);
        let later = poll_timeout(Some(Instant::now() + Duration::from_secs(60)))
            .expect("a deadline gives a timeout");
        assert!(later > Duration::from_secs(59), "{later:?}");
    }
}
