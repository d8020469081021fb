//! A keeper's life: it creates its job's ranks as scored orders, is their
//! parent and the subreaper of their descendants, and tells scored what
//! only the parent sees; it outlives scored, and tells the scored that
//! takes its job over what it holds.
//!
//! One epoll set holds everything that can happen: scored's messages (or
//! its end), a scored connecting to the keeper's socket, SIGCHLD (through
//! a signalfd: stops and continues of ranks, ends of orphaned
//! descendants), each rank's pidfd (readable once it ended) and the
//! spawner's pipe, written once each rank has exec'd or failed to (its
//! `spawn::ExecWord` then says which). At most `actuator::EXEC_WINDOW`
//! ranks are between fork and exec at once.
//!
//! The switch: scored tells the keeper `Stop` just before its SIGSTOPs
//! where only the keeper's answer confirms them (more ranks than CPUs,
//! or a launch in progress), after them otherwise, and a continue's serial before its SIGCONTs on the notes
//! pipe (`ToKeeper::Notes`; `Continue` follows on the link once the
//! switch is over, or comes first on it where there is no pipe), so the
//! keeper, which alone sees the ranks' stops and continues (`waitid`),
//! answers each stop once (`Stopped`, when every rank it holds stopped),
//! and tells scored's continues from anyone else's: a continue reported
//! while the job is switched out is scored's only if a `Continue` waits
//! on the link or the pipe holds a later serial (scored wrote it before
//! its SIGCONT, so it is there by the time the kernel reports the
//! continue); otherwise it came from outside,
//! and the rank is stopped again at once, whether a scored is connected
//! or not. Before taking a `Stop` the keeper reads every report the
//! kernel holds, so that none of scored's earlier continues is taken for
//! one from outside; a rank they show continued (by scored before the
//! stop, or by someone else since its SIGSTOP) is sent SIGSTOP again,
//! which the `Continue` after undoes. A rank that cannot stop yet (a vfork parent whose
//! child is stopped) is confirmed through /proc, and one found running
//! there is sent SIGSTOP again.
//!
//! A rank that ended stays a zombie until scored says its end is recorded
//! (`Reap`): its process group, which scored signals, keeps its id. While
//! no scored is connected, ends are reaped at once and kept for the next
//! one. A keeper whose scored does not come back within its wait ends the
//! job (SIGKILL to every process of it) and then itself, its ends left
//! in a file (`ending.rs`); so does one whose socket no scored can reach.
#![forbid(unsafe_code)]

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;

use super::order::{prepare, spawn_rank, JobFds, Order, Prepared};
use super::{batches, receive, send, Ended, Event, FromKeeper, Held, RankHeld, ToKeeper, PROTOCOL};
use crate::actuator::{procfs, spawn, EXEC_WINDOW};
use crate::sys;

mod ending;
mod spare;
mod stopping;

const LINK: u64 = 1;
const LISTENER: u64 = 2;
const SIGNALS: u64 = 3;
const SPAWNER: u64 = 4;
const STOPS: u64 = 5;
const PIDFD: u64 = 1 << 32;
const KIND: u64 = 0xffff_ffff << 32;
/// How long a stop waits for `waitid` before the ranks still to stop are
/// looked at in /proc (and sent SIGSTOP again if they run).
const STOP_CHECK: Duration = Duration::from_millis(20);
/// How long a stop may hold the keeper in the kernel, waiting for its
/// ranks one at a time (see `await_stops`) before it goes back to its
/// loop; scored waits as long for the answer before it goes on with its
/// own loop.
const STOP_BLOCK: Duration = Duration::from_millis(5);
/// How long a keeper waits for the exec of the last rank of an order
/// before it tells scored of the rank, so as to tell both at once.
const LAST_EXEC_WAIT: Duration = Duration::from_micros(500);
/// The alarm that interrupts that wait, so that it ends in time (within
/// two of its periods). Longer than a scheduler tick (4 ms at 250 Hz), so
/// that arming and disarming it mostly reprogram no CPU timer: a timer
/// due before the next tick costs each a reprogramming, about 10 µs on
/// this kind of VM (traced), on a CPU the stopping ranks need.
const STOP_ALARM: Duration = STOP_BLOCK;

/// One rank the keeper holds.
struct Rank {
    start: u64,
    stage: usize,
    rank: u32,
    slot: usize,
    /// Open until the rank is reaped.
    pidfd: Option<OwnedFd>,
    /// Its PMI descriptor, closed when it is reaped: the daemon closes its
    /// own copy as soon as it has sent it, and a rank is reaped only once
    /// the daemon has recorded its end (or with no daemon there), so this
    /// copy outlives the daemon's, whose close is then never the last (the
    /// last close of a Unix socket releases what a user queued in it).
    #[expect(dead_code, reason = "held to be closed with the record")]
    pmi: Option<OwnedFd>,
    /// Its word on its exec, until it exec'd or failed before.
    report: Option<Arc<spawn::ExecWord>>,
    execd: bool,
    stopped: bool,
    /// How it ended, once it did.
    ended: Option<Ended>,
}

/// A launch in progress.
struct Launching {
    order: Order,
    prepared: Prepared,
    next: usize,
    paused: bool,
    /// Each output file a process of the launch opens, with the first
    /// process that named it: that one empties it, and the others are
    /// created only once it has exec'd, so that none writes before it is
    /// emptied.
    opened: HashMap<Vec<u8>, i32>,
}

struct Keeper {
    job: u64,
    pid: i32,
    start: u64,
    link: Option<OwnedFd>,
    listener: Option<OwnedFd>,
    socket_path: PathBuf,
    epoll: OwnedFd,
    signals: SignalFd,
    ranks: HashMap<i32, Rank>,
    fds: Option<JobFds>,
    launch: Option<Launching>,
    in_flight: usize,
    outbox: Vec<Event>,
    unsent: Vec<FromKeeper>,
    reaped_cpu_us: u64,
    reaped_peak: Vec<u64>,
    released: bool,
    /// Since when no scored is connected, and how long to wait for one.
    lost_since: Option<Instant>,
    wait: Duration,
    /// The job is being ended (no scored came back), with its ends.
    ending: Option<ending::Ending>,
    /// The job's `cgroup.procs`, from its first order.
    cgroup_procs: Option<PathBuf>,
    /// Its cgroups, removed if it leaves with no scored (`cgroups.rs`),
    /// and those of its first order, until they are opened (`settle`).
    cgroups: super::cgroups::JobCgroups,
    cgroups_to_open: Option<Vec<PathBuf>>,
    /// What its last order runs (see `Held::described`).
    described: (usize, Vec<String>, String),
    /// The serial of scored's last `Stop` or `Continue`.
    switch_serial: u64,
    /// The last of them was a `Stop`: a continue seen now is someone
    /// else's.
    switched_out: bool,
    /// The ranks whose stop the last `Stop` awaits, and when they are
    /// next looked at in /proc; `None` once it is answered.
    stopping: Option<Instant>,
    pending: BTreeSet<i32>,
    /// It is reading the reports the kernel holds as it takes a `Stop`.
    taking_stop: bool,
    /// The read end of scored's notes pipe (`ToKeeper::Notes`), and the
    /// highest continue serial read on it.
    notes: Option<OwnedFd>,
    noted: u64,
    /// The read end of scored's stops pipe and the write end of the
    /// answers pipe (`ToKeeper::Notes`).
    stops: Option<OwnedFd>,
    answers: Option<OwnedFd>,
    /// Ranks it stopped again after a continue from outside, since the
    /// last `Continue`: that continue may have been scored's, reported
    /// before its message could be read, so the `Continue` continues them.
    restopped: BTreeSet<i32>,
    /// Its link is the one the zygote gave it (no scored was lost): once
    /// its job is over it may keep another (`rest`).
    spare: bool,
    /// It keeps no job: it waits for `Adopt`, or for its link to close.
    resting: bool,
    /// It was given a job whose title and socket are not set (`settle`).
    adopting: bool,
    /// Its title, set at each job it keeps.
    title: super::Title,
    buffer: Vec<u8>,
}

/// Runs the keeper of `job`, talking to scored on `link`; never returns.
pub fn run(job: u64, link: OwnedFd, sockets: PathBuf, wait: Duration) -> ! {
    match Keeper::new(job, link, sockets, wait) {
        Ok(mut keeper) => keeper.serve(),
        Err(error) => {
            tracing::error!(job, %error, "a keeper cannot start");
            sys::exit_now(1)
        }
    }
}

impl Keeper {
    fn new(job: u64, link: OwnedFd, sockets: PathBuf, wait: Duration) -> std::io::Result<Keeper> {
        let pid = std::process::id() as i32;
        // Its orphaned descendants come to it, not to scored.
        sys::set_child_subreaper()?;
        // SIGALRM ends a wait for stops in time (`await_stops`).
        sys::install_alarm_handler()?;
        // Nothing of scored's but the link; the standard streams log.
        let _ = sys::close_from_3_except(&[], link.as_raw_fd(), false);
        let title = super::Title::open();
        title.set(&format!("scored keeper of job {job}"));
        let mut mask = SigSet::empty();
        mask.add(Signal::SIGCHLD);
        let _ = SigSet::all().thread_unblock();
        mask.thread_block()?;
        let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        // A rank's pidfd for each: room for the largest jobs.
        if let Ok((_, hard)) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        {
            let _ = nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_NOFILE,
                hard,
                hard,
            );
        }
        let socket_path = sockets.join(format!("{job}.sock"));
        let _ = std::fs::remove_file(&socket_path);
        let listener = super::listen(&socket_path)?;
        let epoll = sys::epoll_create()?;
        sys::epoll_add(&epoll, link.as_raw_fd(), LINK)?;
        sys::epoll_add(&epoll, listener.as_raw_fd(), LISTENER)?;
        sys::epoll_add(&epoll, signals.as_fd().as_raw_fd(), SIGNALS)?;
        sys::epoll_add(&epoll, spawn::freed_fd()?, SPAWNER)?;
        let start = procfs::read_stat(pid).map_or(0, |stat| stat.start);
        let mut keeper = Keeper {
            job,
            pid,
            start,
            link: Some(link),
            listener: Some(listener),
            socket_path,
            epoll,
            signals,
            ranks: HashMap::new(),
            fds: None,
            launch: None,
            in_flight: 0,
            outbox: Vec::new(),
            unsent: Vec::new(),
            reaped_cpu_us: 0,
            reaped_peak: Vec::new(),
            released: false,
            lost_since: None,
            wait,
            ending: None,
            cgroup_procs: None,
            cgroups: Default::default(),
            cgroups_to_open: None,
            described: (0, Vec::new(), String::new()),
            switch_serial: 0,
            switched_out: false,
            stopping: None,
            pending: BTreeSet::new(),
            taking_stop: false,
            restopped: BTreeSet::new(),
            notes: None,
            noted: 0,
            stops: None,
            answers: None,
            spare: true,
            resting: false,
            adopting: false,
            title,
            buffer: vec![0u8; super::MAX_MESSAGE],
        };
        keeper.hello(false);
        Ok(keeper)
    }

    fn serve(&mut self) -> ! {
        let mut ready = [0u64; 64];
        loop {
            self.continue_launch();
            self.settle();
            self.flush();
            if self.done() {
                if self.may_rest() {
                    self.rest();
                } else {
                    self.leave(0);
                }
            }
            let timeout = self.timeout();
            let n = sys::epoll_wait_for(&self.epoll, &mut ready, timeout).unwrap_or(0);
            for &token in &ready[..n] {
                match token {
                    LINK => self.read_scored(),
                    LISTENER => self.accept(),
                    SIGNALS => self.children_changed(),
                    STOPS => self.read_stops(),
                    SPAWNER => {
                        spawn::drain();
                        self.exec_reports();
                    }
                    _ if token & KIND == PIDFD => self.rank_ended((token & !KIND) as i32),
                    _ => {}
                }
            }
            self.check_stopping();
            self.check_wait();
        }
    }

    /// How long the loop may wait: not at all while a launch has room,
    /// a millisecond while messages wait for room in the socket, until
    /// the end of the wait for a scored, or for ever.
    fn timeout(&self) -> Option<Duration> {
        if self.launch_has_room() {
            return Some(Duration::ZERO);
        }
        if !self.unsent.is_empty() {
            return Some(Duration::from_millis(1));
        }
        if self.ending.is_some() {
            return Some(Duration::from_millis(100));
        }
        let lost = self
            .lost_since
            .map(|since| (since + self.wait).saturating_duration_since(Instant::now()));
        let stopping = self
            .stopping
            .map(|at| at.saturating_duration_since(Instant::now()));
        match (lost, stopping) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn launch_has_room(&self) -> bool {
        self.launch.as_ref().is_some_and(|launch| {
            !launch.paused
                && launch.next < launch.order.len()
                && self.in_flight < EXEC_WINDOW
                && spawn::ready()
                && self.truncation(launch).is_some()
        }) && self.ending.is_none()
    }

    /// Which output files the next process of `launch` empties, or `None`
    /// while a file it names is still to be emptied by a process that has
    /// not yet exec'd. A `::` stage after the first empties none.
    fn truncation(&self, launch: &Launching) -> Option<[bool; 2]> {
        let mut truncate = [false; 2];
        for (slot, path) in launch.prepared.files(launch.next).into_iter().enumerate() {
            let Some(path) = path else { continue };
            match launch.opened.get(path) {
                None => truncate[slot] = launch.order.first_stage == 0,
                Some(pid)
                    if self
                        .ranks
                        .get(pid)
                        .is_some_and(|rank| rank.report.is_some()) =>
                {
                    return None
                }
                Some(_) => {}
            }
        }
        Some(truncate)
    }

    /// Everything is over: scored released the job (or no scored came
    /// back) and no process of it is left unreaped or untold.
    fn done(&self) -> bool {
        let idle = self.launch.is_none() && self.ranks.is_empty();
        idle && (self.released || self.ending.is_some())
    }

    fn leave(&mut self, code: i32) -> ! {
        self.leave_files();
        tracing::debug!(job = self.job, "the keeper ends");
        sys::exit_now(code)
    }

    // ----- scored -----

    fn hello(&mut self, taking_over: bool) {
        self.unsent.push(FromKeeper::Hello {
            protocol: PROTOCOL,
            job: self.job,
            pid: self.pid,
            start: self.start,
        });
        if taking_over {
            let held = self.held();
            self.unsent.push(FromKeeper::State(held));
        }
    }

    /// What it holds, for a scored that takes the job over: every rank
    /// not yet told to have ended.
    fn held(&self) -> Held {
        let mut ranks: Vec<RankHeld> = self
            .ranks
            .iter()
            .map(|(pid, rank)| RankHeld {
                pid: *pid,
                start: rank.start,
                stage: rank.stage,
                rank: rank.rank,
                slot: rank.slot,
                execd: rank.execd,
                stopped: rank.stopped,
                ended: rank.ended,
            })
            .collect();
        ranks.sort_by_key(|rank| (rank.stage, rank.rank, rank.pid));
        Held {
            ranks,
            reaped_cpu_us: self.reaped_cpu_us,
            reaped_peak: self.reaped_peak.clone(),
            launching: self.launch.is_some(),
            switch: (self.switch_serial, self.switched_out),
            described: self.described.clone(),
        }
    }

    /// Sends what waits, if scored is connected.
    fn flush(&mut self) {
        let Some(link) = &self.link else {
            return;
        };
        if !self.outbox.is_empty() {
            let events = std::mem::take(&mut self.outbox);
            self.unsent.extend(batches(events));
        }
        while let Some(message) = self.unsent.first() {
            match send(link.as_fd(), message, &[]) {
                Ok(true) => {
                    self.unsent.remove(0);
                }
                Ok(false) => return,
                Err(_) => {
                    // scored is gone; its end shows as the link's end.
                    return;
                }
            }
        }
    }

    fn read_scored(&mut self) {
        while self.read_one() {}
    }

    /// Reads and carries out one message of scored's, if one waits;
    /// whether one did.
    fn read_one(&mut self) -> bool {
        let Some(link) = &self.link else {
            return false;
        };
        match receive::<ToKeeper>(link.as_fd(), &mut self.buffer) {
            Ok(Some((message, fds))) => {
                self.order(message, fds);
                true
            }
            Ok(None) => false,
            Err(error) if error.kind() == std::io::ErrorKind::InvalidData => {
                tracing::error!(job = self.job, %error, "the keeper got a message it cannot read");
                true
            }
            Err(_) => {
                self.scored_lost();
                false
            }
        }
    }

    /// scored is gone: only the keeper signals the job now (see
    /// `rank_continued`). What ended is reaped
    /// and kept for the next scored, which has `wait` to come.
    fn scored_lost(&mut self) {
        if let Some(link) = self.link.take() {
            let _ = sys::epoll_remove(&self.epoll, link.as_raw_fd());
        }
        // A stop scored noted before it died is taken, as one it sent on
        // the link would be.
        self.take_stop_notes();
        self.drop_switch_pipes();
        if self.resting {
            // No job: nothing to keep for anyone.
            self.leave(0);
        }
        self.spare = false;
        self.unsent.clear();
        self.outbox.clear();
        self.lost_since = Some(Instant::now());
        tracing::info!(
            job = self.job,
            "the keeper lost its scored; it waits for one to take the job over"
        );
        let ended: Vec<i32> = self
            .ranks
            .iter()
            .filter(|(_, rank)| rank.ended.is_some() && rank.pidfd.is_some())
            .map(|(pid, _)| *pid)
            .collect();
        for pid in ended {
            self.reap_rank(pid, false);
        }
        if self.released && self.ranks.is_empty() {
            // Nothing to keep for anyone.
            self.leave(0);
        }
    }

    fn accept(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        loop {
            let link = match super::accept(listener.as_fd()) {
                Ok(Some(link)) => link,
                _ => return,
            };
            let cred =
                nix::sys::socket::getsockopt(&link, nix::sys::socket::sockopt::PeerCredentials);
            let ours = nix::unistd::geteuid().as_raw();
            let trusted = cred.is_ok_and(|cred| cred.uid() == ours);
            if !trusted || self.link.is_some() || self.ending.is_some() {
                // Only scored's user may take the job over, one at a time.
                continue;
            }
            if sys::epoll_add(&self.epoll, link.as_raw_fd(), LINK).is_err() {
                continue;
            }
            tracing::info!(job = self.job, "a scored took the keeper's job over");
            self.link = Some(link);
            self.lost_since = None;
            self.hello(true);
            return;
        }
    }

    fn order(&mut self, message: ToKeeper, fds: Vec<OwnedFd>) {
        if self.resting {
            // Only a job to keep; what scored sent for the job before
            // hearing that it is over concerns nothing left.
            if let ToKeeper::Adopt(job) = message {
                self.adopt(job);
            }
            return;
        }
        match message {
            ToKeeper::Launch => self.launch(fds),
            ToKeeper::Stop(serial) => self.stop(serial),
            ToKeeper::Notes => self.take_pipes(fds),
            ToKeeper::Continue(serial) => self.continued(serial),
            ToKeeper::Reap(pids) => {
                for pid in pids {
                    self.reap_rank(pid, true);
                }
                self.reap_orphans();
            }
            ToKeeper::Release => {
                // Nothing more is created for a job that is over.
                self.released = true;
                self.launch = None;
            }
            ToKeeper::Kill => self.kill_all(),
            ToKeeper::Adopt(job) => {
                tracing::error!(
                    job = self.job,
                    other = job,
                    "a keeper with a job was told to keep another"
                );
            }
        }
    }

    fn launch(&mut self, mut fds: Vec<OwnedFd>) {
        if fds.is_empty() {
            self.fail_launch("internal error: a launch without its order".into(), 70);
            return;
        }
        let memfd = fds.remove(0);
        let mut text = Vec::new();
        let read = std::fs::File::from(memfd).read_to_end(&mut text);
        let order: Order = match read
            .map_err(|error| error.to_string())
            .and_then(|_| serde_json::from_slice(&text).map_err(|error| error.to_string()))
        {
            Ok(order) => order,
            Err(error) => {
                self.keep(fds);
                self.fail_launch(
                    format!("internal error: an order that does not read: {error}"),
                    70,
                );
                return;
            }
        };
        self.note_cgroups(&order);
        if let Some(layout) = &order.stdio {
            match JobFds::from_layout(layout, fds) {
                Ok(job_fds) => self.fds = Some(job_fds),
                Err(fds) => {
                    self.keep(fds);
                    self.fail_launch(
                        "internal error: descriptors missing from an order".into(),
                        70,
                    );
                    return;
                }
            }
        }
        let fds = self.fds.get_or_insert_with(JobFds::default);
        let slots = order.procs.iter().map(|p| p.3 + 1).max().unwrap_or(0);
        if self.reaped_peak.len() < slots {
            self.reaped_peak.resize(slots, 0);
        }
        // A new stage is limited on its own.
        self.reaped_peak.iter_mut().for_each(|peak| *peak = 0);
        match prepare(&order, fds) {
            Ok(prepared) => {
                self.described = (order.first_stage, prepared.programs(), prepared.cwd());
                self.launch = Some(Launching {
                    order,
                    prepared,
                    next: 0,
                    paused: false,
                    opened: HashMap::new(),
                });
            }
            Err(failure) => self.fail_launch(failure.message, failure.status),
        }
    }

    /// Keeps the descriptors of an order that could not be carried out
    /// until the job's descriptors go (see `JobFds::kept`).
    fn keep(&mut self, fds: Vec<OwnedFd>) {
        self.fds
            .get_or_insert_with(JobFds::default)
            .kept
            .extend(fds);
    }

    fn fail_launch(&mut self, message: String, status: i32) {
        self.launch = None;
        self.outbox.push(Event::LaunchFailed { message, status });
        self.outbox.push(Event::Launched);
    }

    /// Creates the next ranks of the launch, as many as its window allows.
    fn continue_launch(&mut self) {
        while self.launch_has_room() {
            let Some(truncate) = self
                .launch
                .as_ref()
                .and_then(|launch| self.truncation(launch))
            else {
                return;
            };
            let Some(launch) = &mut self.launch else {
                return;
            };
            let idx = launch.next;
            launch.next += 1;
            let (stage, rank, _, slot) = launch.order.procs[idx];
            let stage_idx = stage - launch.order.first_stage;
            let fds = self.fds.get_or_insert_with(JobFds::default);
            let mut pmi = fds.take_pmi(stage, rank as usize);
            let spawned = spawn_rank(
                &launch.order,
                &mut launch.prepared,
                fds,
                (idx, pmi.as_ref().map(AsFd::as_fd)),
                truncate,
                self.pid,
            );
            if spawned.is_err() {
                fds.kept.extend(pmi.take());
            }
            match spawned {
                Ok((pid, report)) => {
                    for path in launch.prepared.files(idx).into_iter().flatten() {
                        launch.opened.entry(path.to_vec()).or_insert(pid);
                    }
                    let pidfd = sys::pidfd_open(pid).ok();
                    if let Some(pidfd) = &pidfd {
                        let _ = sys::epoll_add(&self.epoll, pidfd.as_raw_fd(), PIDFD | pid as u64);
                    }
                    let start = procfs::read_stat(pid).map_or(0, |stat| stat.start);
                    self.ranks.insert(
                        pid,
                        Rank {
                            start,
                            stage,
                            rank,
                            slot,
                            pidfd,
                            pmi,
                            report: Some(report),
                            execd: false,
                            stopped: false,
                            ended: None,
                        },
                    );
                    self.in_flight += 1;
                    self.outbox.push(Event::Spawned {
                        pid,
                        start,
                        stage,
                        rank,
                        slot,
                    });
                }
                Err(error) => {
                    let message = format!(
                        "cannot run '{}' in {}: {error}",
                        launch.prepared.program(stage_idx),
                        launch.prepared.cwd()
                    );
                    let status = if error.kind() == std::io::ErrorKind::NotFound {
                        scored_proto::exitcode::NOT_FOUND
                    } else {
                        scored_proto::exitcode::NOT_EXECUTABLE
                    };
                    self.fail_launch(message, status);
                    return;
                }
            }
        }
        let complete = self
            .launch
            .as_ref()
            .is_some_and(|launch| launch.next >= launch.order.len());
        if complete {
            // The last rank's exec usually follows within a fraction of a
            // millisecond: told with its creation, it costs scored one
            // wakeup, not two. The wait is bounded, once an order.
            self.settle();
            if spawn::await_free(LAST_EXEC_WAIT) {
                spawn::drain();
                self.exec_reports();
            }
            self.launch = None;
            self.outbox.push(Event::Launched);
        }
    }

    // ----- the processes -----

    /// The spawner is free again: what the ranks it created since said of
    /// their execs.
    fn exec_reports(&mut self) {
        let waiting: Vec<i32> = self
            .ranks
            .iter()
            .filter(|(_, rank)| rank.report.is_some())
            .map(|(pid, _)| *pid)
            .collect();
        for pid in waiting {
            self.exec_report(pid);
        }
    }

    fn exec_report(&mut self, pid: i32) {
        let Some(rank) = self.ranks.get_mut(&pid) else {
            return;
        };
        let Some(report) = &rank.report else {
            return;
        };
        let event = match report.report() {
            spawn::Report::Pending => return,
            spawn::Report::Execd => {
                rank.execd = true;
                Event::Execd(pid)
            }
            spawn::Report::Failed(step, errno) => Event::Failed {
                pid,
                step: step as u32,
                errno,
            },
        };
        rank.report = None;
        self.in_flight = self.in_flight.saturating_sub(1);
        self.outbox.push(event);
    }

    /// A rank's pidfd is readable: it ended. It stays a zombie (its
    /// process group keeps its id) until scored has recorded it.
    fn rank_ended(&mut self, pid: i32) {
        // What it said before its end comes first.
        self.exec_report(pid);
        let keep = self.link.is_some();
        let Some(rank) = self.ranks.get_mut(&pid) else {
            return;
        };
        if rank.ended.is_some() {
            return;
        }
        let Some(pidfd) = &rank.pidfd else {
            return;
        };
        let waited = match sys::wait_ended(pidfd, keep) {
            Ok(Some(waited)) => waited,
            _ => return,
        };
        if rank.report.take().is_some() {
            // Ended before the spawner marked its exec: the end says it.
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        let ended = ended_of(&waited);
        rank.ended = Some(ended);
        if self.pending.remove(&pid) {
            self.answer_stop();
        }
        let Some(rank) = self.ranks.get_mut(&pid) else {
            return;
        };
        if self.ending.is_some() {
            // No scored will hear of it but through the file it leaves.
            self.keep_end_for_file(pid);
            return;
        }
        if !keep {
            if let Some(pidfd) = rank.pidfd.take() {
                let _ = sys::epoll_remove(&self.epoll, pidfd.as_raw_fd());
            }
        } else if let Some(pidfd) = &rank.pidfd {
            // Told once; the zombie waits for `Reap`.
            let _ = sys::epoll_remove(&self.epoll, pidfd.as_raw_fd());
        }
        self.outbox.push(Event::Exited { pid, ended });
    }

    /// Reaps a rank whose end scored has recorded (`told`), or that no
    /// scored is there to record.
    fn reap_rank(&mut self, pid: i32, told: bool) {
        let Some(rank) = self.ranks.get_mut(&pid) else {
            return;
        };
        let Some(ended) = rank.ended else {
            return;
        };
        if let Some(pidfd) = rank.pidfd.take() {
            let _ = sys::wait_ended(&pidfd, false);
        }
        // A released job's ends are no scored's concern any more.
        if told || self.ending.is_some() || self.released {
            let slot = rank.slot;
            self.ranks.remove(&pid);
            self.reaped_cpu_us = self.reaped_cpu_us.saturating_add(ended.cpu_us);
            if let Some(peak) = self.reaped_peak.get_mut(slot) {
                *peak = peak.saturating_add(ended.max_rss);
            }
        }
    }

    /// SIGCHLD: stops and continues of ranks; ends of orphaned descendants.
    fn children_changed(&mut self) {
        while let Ok(Some(_)) = self.signals.read_signal() {}
        while let Ok(Some((pid, event))) = sys::wait_stop_or_continue() {
            let Some(rank) = self.ranks.get_mut(&pid) else {
                continue;
            };
            match event {
                sys::WaitEvent::Stopped => {
                    rank.stopped = true;
                    if self.pending.remove(&pid) {
                        self.answer_stop();
                    }
                }
                sys::WaitEvent::Continued => {
                    rank.stopped = false;
                    self.rank_continued(pid);
                }
                _ => {}
            }
        }
        self.reap_orphans();
    }

    /// A rank continued. While its job is switched out that is scored's
    /// continue only if scored's `Continue` waits on the link (it is
    /// written before the SIGCONT); scored's messages are read up to it.
    /// Otherwise someone else continued it: it is stopped again and
    /// scored is told.
    fn rank_continued(&mut self, pid: i32) {
        while self.switched_out && self.read_one() {}
        if self.switched_out && !self.taking_stop && self.read_notes() > self.switch_serial {
            // scored's continue, noted before its SIGCONT; its `Continue`
            // follows on the link.
            self.order(ToKeeper::Continue(self.noted), Vec::new());
            return;
        }
        if self.taking_stop {
            // Read with the `Stop`, after scored's SIGSTOP: a continue
            // since then (from outside, or scored's last continue still
            // unread if the rank has not taken the stop yet) would leave
            // the rank running. It is stopped again, which is harmless if
            // the stop is on its way anyway; scored's next `Continue`
            // continues it. The group of a rank whose cgroup scored asked
            // to freeze is the freezer's to hold, as in `check_stopping`.
            let freezing = self
                .cgroup_procs
                .as_deref()
                .and_then(std::path::Path::parent)
                .is_some_and(crate::actuator::cgroup::freeze_asked);
            if !freezing {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGSTOP);
            }
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGSTOP);
            self.restopped.insert(pid);
            return;
        }
        if !self.switched_out {
            return;
        }
        let _ = killpg(Pid::from_raw(pid), Signal::SIGSTOP);
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGSTOP);
        self.restopped.insert(pid);
        if self.stopping.is_some() {
            self.pending.insert(pid);
        }
        tracing::debug!(
            job = self.job,
            pid,
            "a switched-out rank was continued from outside; stopped again"
        );
        self.outbox.push(Event::ContinuedOutside {
            pid,
            serial: self.switch_serial,
        });
    }

    /// Reaps the descendants that came to the keeper and ended, up to the
    /// first rank's zombie (which waits for scored).
    fn reap_orphans(&mut self) {
        loop {
            let pid = match sys::peek_ended() {
                Ok(Some(pid)) => pid,
                _ => return,
            };
            if self.ranks.contains_key(&pid) {
                let unseen = self
                    .ranks
                    .get(&pid)
                    .is_some_and(|rank| rank.ended.is_none());
                if unseen {
                    self.rank_ended(pid);
                    continue;
                }
                return;
            }
            match sys::reap(pid) {
                Ok(Some(waited)) => self.outbox.push(Event::Orphan {
                    pid,
                    cpu_us: waited.cpu.as_micros() as u64,
                }),
                _ => return,
            }
        }
    }
}

/// How a waited-for process ended, with what it used.
fn ended_of(waited: &sys::Waited) -> Ended {
    let (code, signal) = match waited.event {
        sys::WaitEvent::Exited(code) => (Some(code), None),
        sys::WaitEvent::Signaled(signal, core) => (None, Some((signal, core))),
        _ => (None, None),
    };
    Ended {
        code,
        signal,
        cpu_us: waited.cpu.as_micros() as u64,
        max_rss: waited.max_rss,
        at_us: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as u64),
    }
}
