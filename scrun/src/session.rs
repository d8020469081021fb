//! scrun's conversation with scored once the job is submitted: replies and
//! signals in, requests and messages out, until the job ends.
//!
//! [`Session`] is the pure core. It turns each [`Event`] into a list of
//! [`Action`]s and never touches a descriptor, the clock or a signal; the
//! time comes in as an argument, and the one deadline it keeps (the wait
//! for `Held` after Ctrl-Z) goes out through [`Session::deadline`].
//! [`run`] is the imperative shell: it polls the connection and the
//! signalfd (and, for a `-pty` job, the pty master and scrun's stdin,
//! whose bytes it relays without involving the core; with PMI, the
//! ranks' PMI connections, served by [`PmiServer`]), feeds what it reads
//! to the core, and carries out the actions. It never sleeps; `poll` waits
//! for data, a signal or the core's deadline.
#![forbid(unsafe_code)]

use std::io;
use std::io::Write;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use scored_proto::client::Connection;
use scored_proto::exitcode;
use scored_proto::proto::{Reply, Request, ENDED_BEFORE_START};

use crate::pmi_server::PmiServer;
use crate::pmix_server::PmixServer;
use crate::report::{final_report, lost_connection, Final};
use crate::signals::{exit_status, is_terminating, Signals};
use crate::terminal::{in_foreground, RawMode};

/// How long scrun waits for scored to confirm a hold before it stops anyway.
pub const HOLD_TIMEOUT: Duration = Duration::from_secs(2);
/// The same interrupt twice within this time kills the job (SIGTERM, then
/// SIGKILL after the daemon's kill grace) instead of passing it on again:
/// the way out of a job that handles the signal and does not end (as
/// `srun` does on a second Ctrl-C within a second). SIGHUP excepted.
pub const ESCALATE_WITHIN: Duration = Duration::from_secs(1);
/// How long an admitted job may go without starting before scrun asks
/// scored why and says it (as `srun` says a job is queued, and why).
pub const QUEUED_NOTICE: Duration = Duration::from_secs(1);

/// Something that happened to the session.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A reply from scored.
    Reply(Reply),
    /// A signal to scrun.
    Signal(Signal),
    /// scrun's standard output is a pipe whose reader went away (`-pty`:
    /// scrun writes the job's output there, so the job would have got
    /// SIGPIPE).
    OutputGone,
    /// scrun's terminal went away (`-pty`: its stdin, a terminal, hung up).
    TerminalGone,
    /// scored closed the connection (or it broke).
    Lost,
    /// The connection broke (a reset, say) rather than closed; [`Event::Lost`] follows.
    Broken(String),
    /// scored sent bytes that are not a reply; the text says what was wrong.
    Garbled(String),
    /// The shell connected to scored again and asked for the job back
    /// (after [`Action::Reconnect`]).
    Connected,
    /// The shell could not connect to scored again; the text says why.
    ConnectFailed(String),
    /// A rank ended the job through PMI (its abort, or a fault of it):
    /// the job is killed and scrun exits with `code`.
    Pmi {
        /// scrun's exit status.
        code: i32,
        /// What happened, naming the rank.
        message: String,
    },
    /// Time passed; the core checks its deadline.
    Tick,
}

/// Something the shell must do.
// The session sends only the small requests (a submission is sent before
// it starts); a few actions per event are not worth boxing them.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send a request to scored. A failure is ignored: the connection's
    /// end shows up as [`Event::Lost`], and scored may still have sent the
    /// job's end first.
    Send(Request),
    /// Print one line on stderr (without the `scrun: ` prefix).
    Say(String),
    /// Stop scrun itself with SIGSTOP, returning when it is continued.
    StopSelf,
    /// Copy the size of scrun's terminal to the job's pty (`-pty`); the
    /// kernel signals the job.
    FollowSize,
    /// Connect to scored again and ask for `job` back, with the job's
    /// descriptors if `descriptors` (it has not started: the daemon that
    /// died held them); then report [`Event::Connected`] or
    /// [`Event::ConnectFailed`].
    Reconnect {
        /// The job.
        job: u64,
        /// Send the job's descriptors again.
        descriptors: bool,
    },
    /// The session is over.
    Finish(Final),
}

/// Where scrun stands with a Ctrl-Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// No suspension in progress.
    Idle,
    /// `Hold` was sent; scrun stops itself on `Held` or at the deadline.
    Awaiting { deadline: Instant },
}

/// How often scrun tries to reach a daemon that went away.
pub const RECONNECT_EVERY: Duration = Duration::from_millis(200);

/// Where scrun stands with its daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    /// Connected.
    Up,
    /// The daemon went away: scrun tries to reach it again at `next_try`,
    /// until `until`.
    Away { until: Instant, next_try: Instant },
    /// Connected again and `Reattach` sent; its answer awaited until `until`.
    Reattaching { until: Instant },
}

/// The state of one submission, from `Submit` sent to the job's end.
#[derive(Debug)]
pub struct Session {
    stat: bool,
    pty: bool,
    job: Option<u64>,
    /// The job has processes (scored said `Started`).
    started: bool,
    /// scored takes `Winch` for the job (it said so when the job started).
    winch: bool,
    /// scored takes `Signal` for the job (it said so when the job started).
    signals: bool,
    /// The reader of scrun's output went away before scored said the job
    /// started: what the job gets for it waits for `Started`, which says
    /// whether scored can pass it SIGPIPE.
    output_gone_early: bool,
    told_waiting: bool,
    /// When to say that the admitted job waits for its hosts.
    queued_notice: Option<Instant>,
    /// scrun asked scored why the job waits (`job ID`), and says it when
    /// the answer comes.
    asked_why: bool,
    /// The last signal passed on to the job, and when: if the job ends by
    /// it, scrun ends by it too.
    passed: Option<(Signal, Instant)>,
    /// scrun asked scored to kill the job; one more interrupt makes it
    /// leave at once.
    killing: bool,
    /// The status a rank's PMI abort or fault gave the job, which scrun
    /// exits with once scored confirms the job's end.
    pmi_end: Option<i32>,
    hold: Hold,
    /// How long to wait for a daemon that went away (`-reattach=`); zero:
    /// the session ends with it.
    reattach: Duration,
    /// Say on stderr when the daemon went away and when scrun is back
    /// (`-v`).
    verbose: bool,
    link: Link,
    /// Requests made while the daemon was away, sent once it is back.
    queued: Vec<Request>,
}

impl Session {
    /// A session whose job is submitted; `stat` asks for the accounting
    /// block, `pty` says that the job runs on a pty that scrun relays.
    pub fn new(stat: bool, pty: bool) -> Session {
        Session {
            stat,
            pty,
            job: None,
            started: false,
            winch: false,
            signals: false,
            output_gone_early: false,
            told_waiting: false,
            queued_notice: None,
            asked_why: false,
            passed: None,
            killing: false,
            pmi_end: None,
            hold: Hold::Idle,
            reattach: Duration::ZERO,
            verbose: false,
            link: Link::Up,
            queued: Vec::new(),
        }
    }

    /// If scored goes away, wait up to `window` for it to come back and
    /// reattach to the job; `verbose` says so on stderr.
    pub fn reattach(mut self, window: Duration, verbose: bool) -> Session {
        self.reattach = window;
        self.verbose = verbose;
        self
    }

    /// Whether scrun is connected to scored (the shell polls the
    /// connection only then).
    pub fn connected(&self) -> bool {
        !matches!(self.link, Link::Away { .. })
    }

    /// When the shell must deliver [`Event::Tick`] at the latest.
    pub fn deadline(&self) -> Option<Instant> {
        let hold = match self.hold {
            Hold::Idle => None,
            Hold::Awaiting { deadline } => Some(deadline),
        };
        let link = match self.link {
            Link::Up => None,
            Link::Away { until, next_try } => Some(until.min(next_try)),
            Link::Reattaching { until } => Some(until),
        };
        [hold, self.queued_notice, link].into_iter().flatten().min()
    }

    /// Whether the shell reads the job's output now: not while the end of
    /// its reader waits for `Started`. The job then waits on its full
    /// terminal, as it cannot run on past a write to a pipe without a
    /// reader, instead of running on to an end of its own before the
    /// SIGPIPE reaches it.
    pub fn reads_output(&self) -> bool {
        !self.output_gone_early
    }

    /// Handles one event at time `now`.
    pub fn handle(&mut self, event: Event, now: Instant) -> Vec<Action> {
        let actions = match event {
            Event::Reply(reply) => self.on_reply(reply, now),
            Event::Signal(signal) => self.on_signal(signal, now),
            Event::OutputGone => self.on_output_gone(now),
            Event::TerminalGone => self.on_terminal_gone(now),
            Event::Lost => self.on_lost(now),
            Event::Broken(why) => self.on_broken(why),
            Event::Garbled(why) => vec![Action::Finish(Final::line(exitcode::INTERNAL, why))],
            Event::Pmi { code, message } => self.on_pmi_end(code, message),
            Event::Connected => {
                if let Link::Away { until, .. } = self.link {
                    self.link = Link::Reattaching { until };
                }
                Vec::new()
            }
            Event::ConnectFailed(_) => Vec::new(),
            Event::Tick => self.on_tick(now),
        };
        if self.link == Link::Up {
            return actions;
        }
        // The daemon is away: what would go to it waits for its return.
        let mut kept = Vec::with_capacity(actions.len());
        for action in actions {
            match action {
                Action::Send(request) => self.queued.push(request),
                other => kept.push(other),
            }
        }
        kept
    }

    /// The connection to scored broke. Without a job id (not admitted
    /// yet) or with `-reattach=0`, the session ends as the daemon did;
    /// otherwise scrun keeps the job's terminal and PMI and waits for a
    /// daemon to take the job over.
    fn on_lost(&mut self, now: Instant) -> Vec<Action> {
        let Some(job) = self.job.filter(|_| !self.reattach.is_zero()) else {
            return vec![Action::Finish(lost_connection(self.job))];
        };
        let until = match self.link {
            Link::Up => now + self.reattach,
            Link::Away { until, .. } | Link::Reattaching { until } => until,
        };
        let first = self.link == Link::Up;
        self.link = Link::Away {
            until,
            next_try: now,
        };
        if first && self.verbose {
            return vec![Action::Say(format!(
                "scored went away; waiting up to {} for it to come back to job {job}",
                scored_proto::units::format_duration_exact(self.reattach)
            ))];
        }
        Vec::new()
    }

    /// Tries to reach the daemon again, or gives up once out of time.
    fn on_link_tick(&mut self, now: Instant) -> Vec<Action> {
        let Some(job) = self.job else {
            return Vec::new();
        };
        let until = match self.link {
            Link::Up => return Vec::new(),
            Link::Away { until, .. } | Link::Reattaching { until } => until,
        };
        if now >= until {
            return vec![Action::Finish(Final::line(
                exitcode::UNREACHABLE,
                format!(
                    "scored did not come back within {} (-reattach); leaving job {job}, \
                     which is killed when scored returns",
                    scored_proto::units::format_duration_exact(self.reattach)
                ),
            ))];
        }
        match self.link {
            Link::Away { next_try, .. } if now >= next_try => {
                self.link = Link::Away {
                    until,
                    next_try: now + RECONNECT_EVERY,
                };
                vec![Action::Reconnect {
                    job,
                    descriptors: !self.started,
                }]
            }
            _ => Vec::new(),
        }
    }

    /// scored has the job back for scrun: the requests made meanwhile go
    /// out, and a start missed while away is taken as heard.
    fn on_reattached(&mut self, job: u64, started: bool, now: Instant) -> Vec<Action> {
        self.link = Link::Up;
        if let Hold::Awaiting { .. } = self.hold {
            self.hold = Hold::Awaiting {
                deadline: now + HOLD_TIMEOUT,
            };
        }
        let mut actions = Vec::new();
        if self.verbose {
            actions.push(Action::Say(format!("reattached to job {job}")));
        }
        if started && !self.started {
            actions.extend(self.on_reply(
                Reply::Started {
                    job,
                    winch: true,
                    signals: true,
                },
                now,
            ));
        }
        actions.extend(
            std::mem::take(&mut self.queued)
                .into_iter()
                .map(Action::Send),
        );
        actions
    }

    /// A rank aborted, or broke the PMI protocol: the message now, the job
    /// killed, and scrun's status the rank's (see scrun(1), MPI).
    fn on_pmi_end(&mut self, code: i32, message: String) -> Vec<Action> {
        if self.pmi_end.is_some() {
            return Vec::new();
        }
        self.pmi_end = Some(code);
        self.killing = true;
        vec![Action::Say(message), Action::Send(Request::Kill)]
    }

    fn on_reply(&mut self, reply: Reply, now: Instant) -> Vec<Action> {
        let mut said = Vec::new();
        if let Link::Reattaching { .. } = self.link {
            match reply {
                Reply::Reattached { job, started, .. } => {
                    return self.on_reattached(job, started, now)
                }
                // The job ended before a daemon took it back: its end
                // ends scrun, and what waited to be sent is moot.
                Reply::Ended { job, .. } => {
                    self.link = Link::Up;
                    self.queued.clear();
                    let line = format!("reattached to job {job}, which ended meanwhile");
                    said.extend(self.verbose.then_some(Action::Say(line)));
                }
                Reply::Rejected { reason, .. } | Reply::Error { message: reason } => {
                    let (code, what) = if reason.contains(ENDED_BEFORE_START) {
                        (exitcode::REJECTED, "job rejected")
                    } else {
                        (exitcode::UNREACHABLE, "scored came back, but")
                    };
                    let end = Final::line(code, format!("{what}: {reason}"));
                    return vec![Action::Finish(end)];
                }
                _ => {}
            }
        }
        if let Reply::Console { json, .. } = &reply {
            if std::mem::take(&mut self.asked_why) {
                return self.on_why(json.as_ref());
            }
        }
        let passed = self.passed.map(|(signal, _)| signal as i32);
        if let Some(mut end) = final_report(&reply, self.stat, passed) {
            if let (Some(code), Reply::Ended { .. }) = (self.pmi_end, &reply) {
                // The kill was scrun's, for the rank's PMI end said
                // already: its status, and no second story.
                end = Final {
                    stderr: if self.stat { end.stderr } else { String::new() },
                    code,
                    reraise: None,
                };
            }
            said.push(Action::Finish(end));
            return said;
        }
        match reply {
            Reply::Waiting { reason } if !self.told_waiting => {
                self.told_waiting = true;
                vec![Action::Say(format!("waiting for resources: {reason}"))]
            }
            // An interactive job that waits for other jobs (`-after=`).
            Reply::Accepted {
                job,
                waits: Some(why),
                ..
            } => {
                self.job.get_or_insert(job);
                vec![Action::Say(format!("job {job} {why}"))]
            }
            Reply::Admitted { job, .. } => {
                self.job.get_or_insert(job);
                if !self.started {
                    self.queued_notice = Some(now + QUEUED_NOTICE);
                }
                Vec::new()
            }
            Reply::Started {
                job,
                winch,
                signals,
            } => {
                self.job.get_or_insert(job);
                self.started = true;
                self.queued_notice = None;
                self.winch = winch;
                self.signals = signals;
                if std::mem::take(&mut self.output_gone_early) {
                    return self.on_output_gone(now);
                }
                Vec::new()
            }
            // A `Held` that comes after the deadline (or unasked) changes
            // nothing: scrun has already stopped, or was never stopping.
            Reply::Held { .. } if matches!(self.hold, Hold::Awaiting { .. }) => {
                self.hold = Hold::Idle;
                vec![Action::StopSelf]
            }
            _ => Vec::new(),
        }
    }

    fn on_signal(&mut self, signal: Signal, now: Instant) -> Vec<Action> {
        if is_terminating(signal) {
            return self.on_interrupt(signal, now);
        }
        match signal {
            Signal::SIGTSTP => self.on_suspend(now),
            // Sent for every continue, including ones not preceded by our
            // own stop; releasing a job that is not held is a no-op in scored.
            Signal::SIGCONT => vec![Action::Send(Request::Release)],
            // The terminal changed size. On a pty, the new size is copied
            // to it and the kernel tells the job; otherwise the job shares
            // scrun's terminal from another session, where the kernel does
            // not signal it, so scored is asked to. Before the job has
            // processes there is nobody to tell: they start with the
            // terminal's size as it is then. A daemon that did not say it
            // takes the request is not sent it.
            Signal::SIGWINCH if self.pty => vec![Action::FollowSize],
            Signal::SIGWINCH if self.winch => vec![Action::Send(Request::Winch)],
            _ => Vec::new(),
        }
    }

    /// SIGINT, SIGQUIT, SIGHUP or SIGTERM: what the terminal or the shell
    /// would have sent the program goes to the job's processes, and if it
    /// ends the job, it ends scrun too. A job that has not started is
    /// withdrawn, and scrun ends by the signal at once, as the program
    /// would have if it had been run directly.
    fn on_interrupt(&mut self, signal: Signal, now: Instant) -> Vec<Action> {
        if self.killing {
            return vec![Action::Finish(Final::line(
                exit_status(signal),
                "interrupted again; leaving",
            ))];
        }
        let Some(job) = self.job.filter(|_| self.started) else {
            // Closing the connection withdraws the submission too; the
            // request makes it explicit (and kills a job whose start
            // crossed this signal).
            return vec![
                Action::Send(Request::Kill),
                Action::Finish(Final::by_signal(signal)),
            ];
        };
        if !self.signals {
            // A daemon that cannot deliver the signal: kill the job.
            self.killing = true;
            return vec![
                Action::Send(Request::Kill),
                Action::Say(format!("interrupted; killing job {job}")),
            ];
        }
        // A hang-up often comes twice (from the terminal, and from the
        // shell passing it on to its jobs), as it does to the program run
        // directly: it never escalates.
        if let Some((last, at)) = self.passed.filter(|_| signal != Signal::SIGHUP) {
            if last == signal && now.saturating_duration_since(at) < ESCALATE_WITHIN {
                self.killing = true;
                return vec![
                    Action::Send(Request::Kill),
                    Action::Say(format!(
                        "{} twice within {}s; killing job {job}",
                        signal.as_str(),
                        ESCALATE_WITHIN.as_secs()
                    )),
                ];
            }
        }
        self.passed = Some((signal, now));
        vec![Action::Send(Request::Signal {
            signal: signal as i32,
        })]
    }

    /// scrun's terminal went away: the job gets SIGHUP, once. When that
    /// terminal is scrun's controlling one, the kernel's SIGHUP comes too
    /// (and has been passed on); when it is not (`su -c`, `setsid`),
    /// nothing else would tell the job, whose own terminal stays.
    fn on_terminal_gone(&mut self, now: Instant) -> Vec<Action> {
        if matches!(self.passed, Some((Signal::SIGHUP, _))) {
            return Vec::new();
        }
        self.on_interrupt(Signal::SIGHUP, now)
    }

    /// The reader of scrun's output went away: the job gets SIGPIPE, as it
    /// would writing to that pipe itself, and if that ends it, scrun ends
    /// by SIGPIPE too. scored spawns a job's processes before it tells
    /// scrun that they started, so their output (and its reader's end) can
    /// come first: then the SIGPIPE waits for `Started`. A job that never
    /// starts had no output; its end or withdrawal ends the session as
    /// ever, and a job whose scrun dies meanwhile is killed by scored.
    fn on_output_gone(&mut self, now: Instant) -> Vec<Action> {
        if self.killing || matches!(self.passed, Some((Signal::SIGPIPE, _))) {
            return Vec::new();
        }
        if !self.started {
            self.output_gone_early = true;
            return Vec::new();
        }
        if !self.signals {
            self.killing = true;
            return vec![Action::Send(Request::Kill)];
        }
        self.passed = Some((Signal::SIGPIPE, now));
        vec![Action::Send(Request::Signal {
            signal: Signal::SIGPIPE as i32,
        })]
    }

    /// The answer to `job ID` asked when the job had waited a while: what
    /// keeps it waiting (`waits`), unless it has started meanwhile.
    fn on_why(&mut self, record: Option<&serde_json::Value>) -> Vec<Action> {
        let (Some(job), false) = (self.job, self.started) else {
            return Vec::new();
        };
        if self.hold != Hold::Idle {
            return Vec::new();
        }
        let why = record
            .and_then(|record| record.get("waits"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("for its hosts");
        vec![Action::Say(format!(
            "job {job} waits {why} (Ctrl-C withdraws it)"
        ))]
    }

    fn on_suspend(&mut self, now: Instant) -> Vec<Action> {
        // A job the user holds is not waiting for its hosts.
        self.queued_notice = None;
        if matches!(self.hold, Hold::Awaiting { .. }) {
            return Vec::new();
        }
        if self.job.is_none() {
            // Nothing runs yet, so there is nothing to confirm; the hold
            // still goes out so that the job does not start behind our back.
            return vec![Action::Send(Request::Hold), Action::StopSelf];
        }
        if let (Link::Away { until, .. } | Link::Reattaching { until }, Some(job)) =
            (self.link, self.job)
        {
            // A stopped scrun could not reattach, and the job would run on
            // (or be killed as left): the hold waits for the daemon.
            self.hold = Hold::Awaiting { deadline: until };
            return vec![
                Action::Send(Request::Hold),
                Action::Say(format!(
                    "scored is away; job {job} is suspended once it is back"
                )),
            ];
        }
        self.hold = Hold::Awaiting {
            deadline: now + HOLD_TIMEOUT,
        };
        vec![Action::Send(Request::Hold)]
    }

    fn on_tick(&mut self, now: Instant) -> Vec<Action> {
        let mut actions = self.on_link_tick(now);
        if actions
            .iter()
            .any(|action| matches!(action, Action::Finish(_)))
        {
            return actions;
        }
        if let (Some(at), Some(job)) = (self.queued_notice, self.job) {
            if now >= at {
                self.queued_notice = None;
                self.asked_why = true;
                actions.push(Action::Send(Request::Console {
                    version: scored_proto::proto::VERSION,
                    line: format!("job {job}"),
                    json: true,
                }));
            }
        }
        if let Hold::Awaiting { deadline } = self.hold {
            if now >= deadline {
                self.hold = Hold::Idle;
                let job = self.job.map(|job| format!(" {job}")).unwrap_or_default();
                actions.push(Action::Say(format!(
                    "scored did not confirm the hold of job{job} within {}s; stopping anyway",
                    HOLD_TIMEOUT.as_secs()
                )));
                actions.push(Action::StopSelf);
            }
        }
        actions
    }
}

/// How scrun reaches scored again after it went away: the shell's side of
/// [`Action::Reconnect`].
pub trait Reconnect {
    /// Connects to scored again and sends `Reattach` for `job`, with the
    /// job's descriptors if `descriptors` (`pty`: the job's terminal).
    fn reconnect(
        &mut self,
        job: u64,
        descriptors: bool,
        pty: Option<&crate::terminal::Pty>,
    ) -> io::Result<Connection>;
    /// The job has started: its processes hold their descriptors, and
    /// scrun lets go of its copies.
    fn started(&mut self);
}

/// Talks to scored until the job ends, and returns how scrun ends. The
/// `Submit` must already have been sent on `connection`. If scored goes
/// away, `reconnect` reaches it again (within `-reattach=`).
#[allow(clippy::too_many_arguments)]
pub fn run(
    connection: &mut Connection,
    signals: &Signals,
    stat: bool,
    mut pty: Option<&mut PtySide>,
    mut pmi: Option<&mut PmiServer>,
    mut pmix: Option<&mut PmixServer>,
    reconnect: &mut dyn Reconnect,
    window: Duration,
    verbose: bool,
) -> Final {
    let mut session = Session::new(stat, pty.is_some()).reattach(window, verbose);
    let mut pending = std::collections::VecDeque::new();
    loop {
        let events = match wait(
            session.connected().then_some(&mut *connection),
            signals,
            session.deadline(),
            session.reads_output(),
            pty.as_deref_mut(),
            pmi.as_deref_mut(),
            pmix.as_deref_mut(),
        ) {
            Ok(events) => events,
            Err(end) => return end,
        };
        if let Some(side) = pty.as_deref_mut() {
            side.sync_raw();
            side.note_typed(&mut session);
        }
        pending.extend(events);
        while let Some(event) = pending.pop_front() {
            if let Event::Reply(Reply::Admitted { ranks, .. } | Reply::Reattached { ranks, .. }) =
                &event
            {
                if let Some(server) = pmix.as_deref_mut() {
                    server.placed(*ranks);
                }
                if let Some(server) = pmi.as_deref_mut() {
                    server.placed(*ranks);
                    server.admitted();
                }
            }
            let started = matches!(
                &event,
                Event::Reply(Reply::Started { .. })
                    | Event::Reply(Reply::Reattached { started: true, .. })
            );
            if started {
                reconnect.started();
            }
            if let Some(side) = pty.as_deref_mut() {
                match &event {
                    _ if started => {
                        // The job's processes hold the slave now.
                        side.relay.pty_mut().close_slave();
                        side.started = true;
                        side.sync_raw();
                    }
                    Event::Signal(Signal::SIGCONT) => {
                        side.relay.continued();
                        side.sync_raw();
                    }
                    Event::Signal(signal) if is_terminating(*signal) => side.relay.interrupted(),
                    _ => {}
                }
            }
            for action in session.handle(event, Instant::now()) {
                match action {
                    Action::Send(request) => {
                        // See `Action::Send`: the reply stream tells the end.
                        let _ = connection.send(&request);
                    }
                    Action::Say(line) => {
                        let raw = pty
                            .as_deref()
                            .and_then(|side| side.raw.as_ref())
                            .is_some_and(RawMode::is_active);
                        if raw {
                            // No output processing in raw mode: the line
                            // brings its own carriage return.
                            let _ = write!(io::stderr().lock(), "scrun: {line}\r\n");
                        } else {
                            say(&line);
                        }
                    }
                    Action::StopSelf => {
                        // The user's shell takes the terminal back while
                        // scrun is stopped: leave raw mode first.
                        if let Some(raw) = pty.as_deref_mut().and_then(|side| side.raw.as_mut()) {
                            raw.suspend();
                        }
                        // The SIGCONT that continues scrun then waits on the
                        // signalfd.
                        if let Err(errno) = crate::signals::stop_self() {
                            say(&format!("cannot stop scrun: {}", errno.desc()));
                        }
                        if let Some(side) = pty.as_deref_mut() {
                            side.sync_raw();
                            // The window may have changed meanwhile.
                            side.relay.pty().follow_size();
                        }
                    }
                    Action::FollowSize => {
                        if let Some(side) = pty.as_deref_mut() {
                            side.relay.pty().follow_size();
                        }
                    }
                    Action::Reconnect { job, descriptors } => {
                        let terminal = pty.as_deref().map(|side| side.relay.pty());
                        match reconnect.reconnect(job, descriptors, terminal) {
                            Ok(fresh) => {
                                *connection = fresh;
                                pending.push_back(Event::Connected);
                            }
                            Err(error) => {
                                pending.push_back(Event::ConnectFailed(error.to_string()));
                            }
                        }
                    }
                    Action::Finish(end) => {
                        if let Some(side) = pty.as_deref_mut() {
                            side.relay.job_ended();
                            give_back_typed(side);
                            drain_pty(&mut side.relay);
                        }
                        return end;
                    }
                }
            }
        }
    }
}

/// Waits for the connection, a signal, the deadline or (with a pty) the
/// terminal, and returns what happened: replies first (so that a job's end
/// that raced a signal wins), then signals, then a tick. Bytes between
/// scrun's terminal and the pty are moved here, as they come; the job's
/// output only if `read_output`.
fn wait(
    connection: Option<&mut Connection>,
    signals: &Signals,
    deadline: Option<Instant>,
    read_output: bool,
    pty: Option<&mut PtySide>,
    pmi: Option<&mut PmiServer>,
    pmix: Option<&mut PmixServer>,
) -> Result<Vec<Event>, Final> {
    let hold = pty.as_deref().and_then(|side| side.relay.hold_deadline());
    let look = pty
        .as_deref()
        .filter(|side| side.awaits_foreground())
        .map(|_| Instant::now() + FOREGROUND_LOOK);
    let deadline = [deadline, hold, look].into_iter().flatten().min();
    let timeout = match deadline {
        None => PollTimeout::NONE,
        Some(deadline) => {
            let left = deadline.saturating_duration_since(Instant::now());
            // Round up, so that the tick after the wait finds the deadline passed.
            let millis = left.as_millis() + u128::from(left.subsec_nanos() % 1_000_000 != 0);
            PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX)
        }
    };
    let relay = pty.map(|side| &mut side.relay);
    let (connection_ready, signals_ready, master_ready, stdin_ready, pmi_ready, pmix_ready) = {
        let stdin = io::stdin();
        // While scored is away there is no connection to poll: the
        // signalfd stands in its place, and its readiness counts once.
        let polled = match &connection {
            Some(connection) => connection.as_fd(),
            None => signals.as_fd(),
        };
        let mut fds = vec![
            PollFd::new(polled, PollFlags::POLLIN),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        ];
        let (mut master_idx, mut stdin_idx) = (None, None);
        if let Some(relay) = relay.as_deref() {
            let interest = relay.interest();
            if relay.master_open() && read_output && !relay.holding() {
                let mut flags = PollFlags::POLLIN;
                if interest.master_out {
                    flags |= PollFlags::POLLOUT;
                }
                master_idx = Some(fds.len());
                fds.push(PollFd::new(relay.master(), flags));
            }
            // Read only in the foreground: a background program that
            // reads its terminal is stopped, and scrun reads for the job.
            if interest.stdin && in_foreground() {
                stdin_idx = Some(fds.len());
                fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
            }
        }
        let pmix_idx = pmix.as_deref().and_then(PmixServer::poll_fd).map(|fd| {
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
            fds.len() - 1
        });
        let pmi_fds = pmi.as_deref().map(PmiServer::poll_fds).unwrap_or_default();
        let pmi_first = fds.len();
        fds.extend(
            pmi_fds
                .iter()
                .map(|(_, fd, flags)| PollFd::new(*fd, *flags)),
        );
        match poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(Errno::EINTR) => return Ok(vec![Event::Tick]),
            Err(errno) => {
                return Err(Final::line(
                    exitcode::INTERNAL,
                    format!("cannot wait for scored: {}", errno.desc()),
                ))
            }
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|revents| !revents.is_empty());
        let pmi_ready: Vec<(usize, PollFlags)> = pmi_fds
            .iter()
            .zip(&fds[pmi_first..])
            .filter_map(|((idx, _, _), fd)| {
                fd.revents()
                    .filter(|revents| !revents.is_empty())
                    .map(|revents| (*idx, revents))
            })
            .collect();
        (
            ready(&fds[0]),
            ready(&fds[1]),
            master_idx.is_some_and(|idx| ready(&fds[idx])),
            stdin_idx.is_some_and(|idx| ready(&fds[idx])),
            pmi_ready,
            pmix_idx.is_some_and(|idx| ready(&fds[idx])),
        )
    };
    let (mut output_gone, mut terminal_gone) = (false, false);
    if let Some(relay) = relay {
        // Signals first: relaying output may stop a background scrun (see
        // `Relay::relay_output`), which must not keep it from a SIGTERM.
        if master_ready && !signals_ready {
            relay.relay_output();
            relay.flush_typed();
            output_gone = relay.take_output_gone();
        }
        if stdin_ready {
            relay.relay_typed();
            terminal_gone = relay.take_terminal_gone();
        }
    }
    let mut events = Vec::new();
    if let (true, Some(connection)) = (connection_ready, connection) {
        read_replies(connection, &mut events);
    }
    if let Some(server) = pmi {
        for (idx, revents) in pmi_ready {
            if let Some(end) = server.service(idx, revents) {
                events.push(Event::Pmi {
                    code: end.code,
                    message: end.message,
                });
            }
        }
    }
    if let Some(server) = pmix.filter(|_| pmix_ready) {
        if let Some(end) = server.service() {
            events.push(Event::Pmi {
                code: end.code,
                message: end.message,
            });
        }
    }
    if signals_ready {
        match signals.drain() {
            Ok(received) => events.extend(received.into_iter().map(Event::Signal)),
            Err(errno) => {
                return Err(Final::line(
                    exitcode::INTERNAL,
                    format!("cannot read signals: {}", errno.desc()),
                ))
            }
        }
    }
    if output_gone {
        events.push(Event::OutputGone);
    }
    if terminal_gone {
        events.push(Event::TerminalGone);
    }
    events.push(Event::Tick);
    Ok(events)
}

/// Prints one `scrun:` line on stderr. A closed stderr is no reason to
/// fail: the exit status still tells the story.
///
/// A background scrun whose stderr is its terminal with `tostop` is
/// stopped by this write, as any program is; meanwhile SIGINT, SIGTERM and
/// SIGHUP act as they would on that program, since a write the kernel
/// stopped is restarted by the continue that comes with them and stops
/// again before scrun could read them from its signalfd.
pub fn say(line: &str) {
    let stderr = io::stderr();
    let write = || {
        let _ = writeln!(stderr.lock(), "scrun: {line}");
    };
    if crate::terminal::write_would_stop(stderr.as_fd()) {
        crate::signals::stoppable(write);
    } else {
        write();
    }
}

mod pty;
mod replies;
#[cfg(test)]
mod tests;

pub use pty::PtySide;
use pty::{drain_pty, give_back_typed, FOREGROUND_LOOK};
use replies::read_replies;
