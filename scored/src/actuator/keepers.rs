//! scored's side of the keepers (`crate::keeper`): one link per job, made
//! through the zygote at the job's first launch; the orders sent on it;
//! what comes back turned into what the actuator learnt from `wait4` when
//! it was the ranks' parent; and a keeper's death. The takeover of the
//! keepers of a daemon that died is in `keepers/takeover.rs`.
//!
//! The links (and their answers pipes, `keepers/pipes.rs`) are watched
//! as one epoll set, which the event loop watches
//! as one source (`Actuator::exec_watch_fd`): a readable set makes the
//! loop `poll`, which reads every link that has something.
//!
//! Ranks' ends are acknowledged to their keeper (`ToKeeper::Reap`) only
//! after the inputs they caused are on disk (`Actuator::recorded`), so that
//! a crash in between leaves the zombie, and its end, for the next daemon.
#![forbid(unsafe_code)]

mod pipes;
mod takeover;

use std::collections::HashMap;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use scored_core::core::Input;
use scored_core::ids::JobId;
use scored_core::job::LaunchPlan;

use super::failure::LaunchError;
use super::{procfs, sys, Child, JobStdio, OsActuator, PendingExec};
use std::os::unix::ffi::OsStrExt;

use scored_proto::proto::WireBytes;

use crate::closer::UserFd;
use crate::keeper::order::{Order, StdioLayout};
use crate::keeper::zygote::{MakeKeeper, Zygote};
use crate::keeper::{self, Event, FromKeeper, ToKeeper};

/// The keepers, and how to make more.
#[derive(Debug)]
pub(super) struct Keepers {
    zygote: Option<Zygote>,
    /// `STATE_DIR/keepers`.
    sockets: PathBuf,
    /// How long a keeper waits for a scored once its own died.
    wait: Duration,
    pub(super) links: HashMap<JobId, Link>,
    /// Keepers by pid, for their deaths.
    pub(super) by_pid: HashMap<i32, JobId>,
    /// Ranks whose ends are handled, to acknowledge once recorded.
    pub(super) reaps: HashMap<JobId, Vec<i32>>,
    /// The files of keepers that ended with no scored connected whose
    /// ends are handled, to remove once recorded.
    pub(super) left_files: Vec<PathBuf>,
    /// Keepers that said who they are since the daemon's state last
    /// recorded them: job, pid, start time.
    pub(super) fresh: Vec<(u64, i32, u64)>,
    /// Keepers whose job is over, kept for the next jobs (at most
    /// [`SPARES`]), the last idle first.
    spares: Vec<Spare>,
    /// The pids of keepers that keep no job (spares, and those let go),
    /// until they are reaped.
    idle: std::collections::HashSet<i32>,
    buffer: Vec<u8>,
}

/// How many idle keepers scored keeps for the next jobs: a launch through
/// one skips the zygote's fork and the keeper's set-up; each costs what it
/// wrote of its pages.
const SPARES: usize = 8;

/// An idle keeper (`FromKeeper::Idle`), its link no longer watched.
#[derive(Debug)]
struct Spare {
    socket: OwnedFd,
    pid: i32,
    start: u64,
}

/// One keeper.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) socket: OwnedFd,
    /// Its pid and start time, once it said.
    pub(super) id: Option<(i32, u64)>,
    /// Its job's descriptors went with an order.
    pub(super) has_fds: bool,
    /// They were the client connection's, sent by this daemon (not a
    /// keeper taken over, whose copies a reattached client's need not be).
    gave_stdio: bool,
    /// Messages that found its socket full.
    unsent: Vec<(ToKeeper, Vec<Carried>)>,
    /// It was told the job is over.
    pub(super) released: bool,
    /// It is scored's child (made by this daemon's zygote), so scored
    /// reaps it when it dies.
    pub(super) ours: bool,
    /// Its end of the link is closed: it is dying, and how it ended comes
    /// with its reaping (`child_keeper_ended`).
    closed: bool,
    /// The write end of its notes pipe (see `ToKeeper::Notes`), once the
    /// keeper is known to read one.
    notes: Option<OwnedFd>,
    /// The write end of its stops pipe and the read end of its answers
    /// pipe (the latter watched with the link), once it is known to read
    /// and write them.
    stops: Option<OwnedFd>,
    answers: Option<OwnedFd>,
}

impl Keepers {
    pub(super) fn new(zygote: Option<Zygote>, sockets: PathBuf, wait: Duration) -> Keepers {
        Keepers {
            zygote,
            sockets,
            wait,
            links: HashMap::new(),
            by_pid: HashMap::new(),
            reaps: HashMap::new(),
            left_files: Vec::new(),
            fresh: Vec::new(),
            spares: Vec::new(),
            idle: std::collections::HashSet::new(),
            buffer: vec![0u8; keeper::MAX_MESSAGE],
        }
    }

    /// Every keeper with a known identity: job, pid, start time.
    pub(super) fn identities(&self) -> Vec<(u64, i32, u64)> {
        let mut ids: Vec<(u64, i32, u64)> = self
            .links
            .iter()
            .filter_map(|(job, link)| link.id.map(|(pid, start)| (job.0, pid, start)))
            .collect();
        ids.sort_unstable();
        ids
    }
}

/// A descriptor a message to a keeper carries: the daemon's own (the
/// order's memfd), one a user handed over that the daemon keeps no more
/// once sent (a PMI end), or one the job's client connection still holds
/// (its standard and inherited ones), shared rather than copied: a copy
/// would cost a batch of the closer, a fork, in the middle of the launch.
/// A message that waits for room in the socket holds the shared
/// descriptor open until it is sent.
///
/// A PMI end sent is closed in the daemon at once where that cannot wait
/// (`UserFd::close_beside_held_copy`), not batched for the closer, a fork
/// a job: the keeper holds its copy, in flight and then received, until
/// the daemon tells it of that rank's end or the job's (`keeper::life`,
/// `Rank::pmi`), so the daemon's close is never the last. One that is not
/// sent (the keeper gone) goes to the closer, as a drop sends it.
#[derive(Debug)]
pub(super) enum Carried {
    Own(OwnedFd),
    User(UserFd),
    Shared(std::rc::Rc<UserFd>),
}

impl AsRawFd for Carried {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Carried::Own(fd) => fd.as_raw_fd(),
            Carried::User(fd) => fd.as_raw_fd(),
            Carried::Shared(fd) => fd.as_raw_fd(),
        }
    }
}

impl Link {
    pub(super) fn new(socket: OwnedFd, ours: bool) -> Link {
        Link {
            socket,
            id: None,
            has_fds: false,
            gave_stdio: false,
            unsent: Vec::new(),
            released: false,
            ours,
            closed: false,
            notes: None,
            stops: None,
            answers: None,
        }
    }

    /// Sends `message` (with `fds`), or keeps it for when the socket has
    /// room; an error means the keeper is gone. A `Stop` goes on the
    /// stops pipe when there is one and nothing waits before it.
    pub(super) fn send(&mut self, message: ToKeeper, fds: Vec<Carried>) -> io::Result<()> {
        if let ToKeeper::Stop(serial) = message {
            if self.note_stop(serial) {
                return Ok(());
            }
        }
        if self.unsent.is_empty() {
            let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
            if keeper::send(self.socket.as_fd(), &message, &raw)? {
                let_go_sent(fds);
                return Ok(());
            }
        }
        self.unsent.push((message, fds));
        Ok(())
    }

    /// It was sent the client's descriptors (with the job's first order,
    /// which no longer waits here), is alive as far as scored knows and
    /// was not told the job is over: a keeper holds them until then
    /// (`keeper::life`, `rest`).
    pub(super) fn holds_stdio(&self) -> bool {
        self.gave_stdio && self.unsent.is_empty() && !self.released && !self.closed
    }

    /// Sends what found the socket full.
    fn flush(&mut self) -> io::Result<()> {
        while let Some((message, fds)) = self.unsent.first() {
            let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
            if !keeper::send(self.socket.as_fd(), message, &raw)? {
                return Ok(());
            }
            let (_, fds) = self.unsent.remove(0);
            let_go_sent(fds);
        }
        Ok(())
    }
}

/// Lets go of the daemon's copies of descriptors a keeper was sent: a
/// user's is closed beside the keeper's copy (see [`Carried`]).
fn let_go_sent(fds: Vec<Carried>) {
    for fd in fds {
        if let Carried::User(fd) = fd {
            fd.close_beside_held_copy();
        }
    }
}

/// The data of a keeper's link in the watched set: its job.
fn token(job: JobId) -> u64 {
    job.0
}

impl OsActuator {
    /// The link to `job`'s keeper, at its first launch an idle keeper's
    /// (told to keep it) or one made through the zygote.
    pub(super) fn keeper_of(&mut self, job: JobId) -> io::Result<&mut Link> {
        while !self.keepers.links.contains_key(&job) {
            let Some(spare) = self.keepers.spares.pop() else {
                break;
            };
            // A spare that cannot take it (gone, or its socket full) is
            // let go: its link closes and it ends.
            if !matches!(
                keeper::send(spare.socket.as_fd(), &ToKeeper::Adopt(job.0), &[]),
                Ok(true)
            ) {
                continue;
            }
            sys::epoll_add(&self.exec_watch, spare.socket.as_raw_fd(), token(job))?;
            self.keepers.idle.remove(&spare.pid);
            self.keepers.by_pid.insert(spare.pid, job);
            self.keepers.fresh.push((job.0, spare.pid, spare.start));
            let mut link = Link::new(spare.socket, true);
            link.id = Some((spare.pid, spare.start));
            link.open_notes(keeper::PROTOCOL, &self.exec_watch, job);
            self.keepers.links.insert(job, link);
        }
        if !self.keepers.links.contains_key(&job) {
            let zygote = self.keepers.zygote.as_ref().ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotConnected, "no zygote to make keepers")
            })?;
            let socket = zygote.make(&MakeKeeper {
                job: job.0,
                sockets: self.keepers.sockets.clone(),
                wait_ms: self.keepers.wait.as_millis() as u64,
            })?;
            sys::epoll_add(&self.exec_watch, socket.as_raw_fd(), token(job))?;
            let mut link = Link::new(socket, true);
            link.open_notes(keeper::PROTOCOL, &self.exec_watch, job);
            self.keepers.links.insert(job, link);
        }
        Ok(self.keepers.links.get_mut(&job).expect("inserted above"))
    }

    /// Sends the keeper of `plan`'s job the order to create its processes,
    /// with the job's descriptors at its first order.
    pub(super) fn send_order(
        &mut self,
        plan: &LaunchPlan,
        stdio: Option<&JobStdio>,
        files: Vec<[Option<std::ffi::CString>; 2]>,
    ) -> Result<(), LaunchError> {
        let job = plan.job;
        let fail = |error: io::Error| LaunchError::Prepare {
            job,
            problem: format!("cannot reach the job's keeper: {error}"),
        };
        let procs = self.jobs.get(&job).expect("prepared before the order");
        let hosts: Vec<(u32, String, Vec<u32>)> = {
            let mut ids: Vec<u32> = plan.procs.iter().map(|p| p.host.0).collect();
            ids.sort_unstable();
            ids.dedup();
            ids.into_iter()
                .filter_map(|id| {
                    let (name, mask) = self.hosts.get(id as usize)?;
                    let cpus = (0..nix::sched::CpuSet::count())
                        .filter(|cpu| mask.is_set(*cpu).unwrap_or(false))
                        .map(|cpu| cpu as u32)
                        .collect();
                    Some((id, name.clone(), cpus))
                })
                .collect()
        };
        let cgroup = procs
            .cgroup_procs
            .as_ref()
            .map(|path| path.as_bytes().to_vec());
        let pids = procs
            .pids_procs
            .as_ref()
            .map(|path| path.as_bytes().to_vec());
        let files = files
            .into_iter()
            .map(|pair| {
                pair.map(|path| {
                    path.map(|path| {
                        WireBytes::from_os(std::ffi::OsStr::from_bytes(path.as_bytes()))
                    })
                })
            })
            .collect();
        let scratch = procs.scratch.clone();
        let become_user = self.daemon_uid == 0 && plan.user.uid != 0;
        let first = !self
            .keepers
            .links
            .get(&job)
            .is_some_and(|link| link.has_fds);
        let mut fds: Vec<Carried> = Vec::new();
        let layout = match (first, stdio) {
            (false, _) => None,
            (true, Some(io)) => {
                let shared = |fd: &std::rc::Rc<UserFd>| Carried::Shared(std::rc::Rc::clone(fd));
                let mut standard = [false; 3];
                for (idx, fd) in [&io.stdin, &io.stdout, &io.stderr].into_iter().enumerate() {
                    if let Some(fd) = fd {
                        fds.push(shared(fd));
                        standard[idx] = true;
                    }
                }
                let mut inherited = Vec::new();
                for (number, fd) in &io.inherited {
                    fds.push(shared(fd));
                    inherited.push(*number);
                }
                // The PMI ends of every stage go to the keeper, and scored
                // keeps no copy: a rank's end is then the end of its
                // connection.
                let per_stage = io.pmi.per_stage();
                let stages = io.pmi.raw().len().checked_div(per_stage).unwrap_or(0);
                let mut pmi = Vec::new();
                for stage in 0..stages {
                    for rank in 0..per_stage {
                        match io.pmi.take(stage, rank) {
                            Some(fd) => {
                                fds.push(Carried::User(fd));
                                pmi.push(true);
                            }
                            None => pmi.push(false),
                        }
                    }
                }
                Some(StdioLayout {
                    client: true,
                    standard,
                    controlling_terminal: io.controlling_terminal,
                    inherited,
                    pmi_per_stage: per_stage,
                    pmi_port: io.pmi.port(),
                    pmi,
                    pmix: io.pmi.pmix().map(str::to_string),
                })
            }
            // No client (a batch job): /dev/null, as the order says.
            (true, None) => Some(StdioLayout {
                client: false,
                standard: [false; 3],
                controlling_terminal: false,
                inherited: Vec::new(),
                pmi_per_stage: 0,
                pmi_port: false,
                pmi: Vec::new(),
                pmix: None,
            }),
        };
        let order = Order::of(
            plan,
            hosts,
            become_user,
            self.config.job_nofile,
            self.ignored_signals,
            scratch.as_os_str(),
            (cgroup.as_deref(), pids.as_deref()),
            files,
            layout,
        );
        let memfd = order_memfd(&order).map_err(fail)?;
        let mut carried = vec![Carried::Own(memfd)];
        carried.extend(fds);
        let link = self.keeper_of(job).map_err(fail)?;
        link.has_fds = true;
        let sent = link.send(ToKeeper::Launch, carried);
        link.gave_stdio |= sent.is_ok() && first && stdio.is_some();
        sent.map_err(fail)
    }

    /// Tells `job`'s keeper something; a keeper that is gone shows as
    /// gone when its link is read.
    pub(super) fn tell_keeper(&mut self, job: JobId, message: ToKeeper) {
        // A continue, then a stop, not told yet come first: the keeper
        // hears of every stop and continue in the order scored made them
        // (a continue is noted only when no stop waits to be told).
        self.tell_untold(job);
        if let Some(link) = self.keepers.links.get_mut(&job) {
            if let Err(error) = link.send(message, Vec::new()) {
                tracing::debug!(job = %job, %error, "cannot tell the keeper");
            }
        }
    }

    /// Tells `job`'s keeper on its link the continue, then the stop, it
    /// has not heard of there yet.
    pub(super) fn tell_untold(&mut self, job: JobId) {
        let (continued, stopped) = self.jobs.get_mut(&job).map_or((None, None), |procs| {
            (
                procs.hold.untold_continue.take(),
                procs.hold.untold_stop.take(),
            )
        });
        let told = continued
            .map(ToKeeper::Continue)
            .into_iter()
            .chain(stopped.map(ToKeeper::Stop));
        for message in told {
            if let Some(link) = self.keepers.links.get_mut(&job) {
                if let Err(error) = link.send(message, Vec::new()) {
                    tracing::debug!(job = %job, %error, "cannot tell the keeper");
                }
            }
        }
    }

    /// Before scored exits: sends what found the keepers' sockets full,
    /// for at most `wait`, so that each keeper hears that its job is over.
    pub(super) fn flush_keepers(&mut self, wait: Duration) {
        let deadline = Instant::now() + wait;
        loop {
            let mut left = false;
            for link in self.keepers.links.values_mut().filter(|link| !link.closed) {
                if link.flush().is_ok() && !link.unsent.is_empty() {
                    left = true;
                }
            }
            if !left || Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Sends the keepers the acknowledgements of the ends now recorded,
    /// and removes the files of those that left them.
    pub(super) fn acknowledge_ends(&mut self) {
        for (job, pids) in std::mem::take(&mut self.keepers.reaps) {
            self.tell_keeper(job, ToKeeper::Reap(pids));
        }
        for path in std::mem::take(&mut self.keepers.left_files) {
            if let Err(error) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), %error, "cannot remove the file a keeper left");
            }
        }
    }

    /// Reads every link that has something and handles what it says;
    /// a link that ended is a keeper gone.
    pub(super) fn collect_keeper_events(&mut self, out: &mut Vec<Input>) {
        let mut ready = [0u64; 64];
        loop {
            let n = sys::epoll_ready(&self.exec_watch, &mut ready).unwrap_or(0);
            for &data in &ready[..n] {
                self.keeper_ready(data, out);
            }
            if n < ready.len() {
                break;
            }
        }
        let jobs: Vec<JobId> = self
            .keepers
            .links
            .iter()
            .filter(|(_, link)| !link.unsent.is_empty())
            .map(|(job, _)| *job)
            .collect();
        for job in jobs {
            if let Some(link) = self.keepers.links.get_mut(&job) {
                let _ = link.flush();
            }
        }
    }

    /// Reads `job`'s link until nothing waits.
    pub(super) fn read_link(&mut self, job: JobId, out: &mut Vec<Input>) {
        loop {
            let Some(link) = self.keepers.links.get(&job).filter(|link| !link.closed) else {
                return;
            };
            let message =
                keeper::receive::<FromKeeper>(link.socket.as_fd(), &mut self.keepers.buffer);
            match message {
                Ok(Some((message, _fds))) => self.keeper_said(job, message, out),
                Ok(None) => return,
                Err(error) if error.kind() == io::ErrorKind::InvalidData => {
                    tracing::error!(job = %job, %error, "a keeper said something scored cannot read");
                }
                Err(_) => {
                    self.link_ended(job, out);
                    return;
                }
            }
        }
    }

    fn keeper_said(&mut self, job: JobId, message: FromKeeper, out: &mut Vec<Input>) {
        match message {
            FromKeeper::Hello { pid, start, .. } => {
                if let Some(link) = self.keepers.links.get_mut(&job) {
                    if link.id.is_none() {
                        link.id = Some((pid, start));
                        self.keepers.by_pid.insert(pid, job);
                        self.keepers.fresh.push((job.0, pid, start));
                    }
                }
            }
            FromKeeper::State(_) => {}
            FromKeeper::Idle => self.keeper_idle(job),
            FromKeeper::Events(events) => {
                for event in events {
                    self.keeper_event(job, event, out);
                }
            }
        }
    }

    /// `job`'s keeper is idle, its job over and nothing of it left: it is
    /// kept for the next job while there is room, or let go (its link
    /// closes, and it ends).
    fn keeper_idle(&mut self, job: JobId) {
        // Only a keeper scored made and told the job is over rests.
        let idle =
            self.keepers.links.get(&job).is_some_and(|link| {
                link.ours && link.released && !link.closed && link.id.is_some()
            });
        if !idle {
            return;
        }
        let Some(link) = self.keepers.links.remove(&job) else {
            return;
        };
        link.unwatch(&self.exec_watch);
        let Some((pid, start)) = link.id else {
            return;
        };
        let keep = self.keepers.spares.len() < SPARES && link.unsent.is_empty();
        self.keepers.by_pid.remove(&pid);
        self.keepers.idle.insert(pid);
        if keep {
            self.keepers.spares.push(Spare {
                socket: link.socket,
                pid,
                start,
            });
        }
    }

    /// One event of `job`'s keeper, handled as the actuator handled what
    /// `wait4` and a rank's report said when it was the ranks' parent.
    fn keeper_event(&mut self, job: JobId, event: Event, out: &mut Vec<Input>) {
        match event {
            Event::Spawned {
                pid,
                start,
                stage,
                rank,
                slot,
            } => self.rank_spawned(job, pid, start, stage, rank, slot),
            Event::Execd(pid) => {
                if let Some(pending) = self.execs.remove(&pid) {
                    self.exec_settled(pending.job);
                    self.count_executable(pending.job, pid);
                }
            }
            Event::Failed { pid, step, errno } => {
                if let Some(pending) = self.execs.get_mut(&pid) {
                    pending.awaiting = false;
                }
                self.exec_failed(pid, super::spawn::Step::from_number(step), errno, out);
            }
            Event::Stopped(serial) => {
                let Some(procs) = self.jobs.get_mut(&job) else {
                    return;
                };
                if procs.hold.switch_serial != serial {
                    return;
                }
                if let Some(wait) = procs.stop_wait.as_mut() {
                    wait.children.clear();
                    wait.pausing = false;
                }
                self.check_stop(job, out);
            }
            Event::ContinuedOutside { pid, serial } => {
                let current = self.jobs.get(&job).is_some_and(|procs| {
                    procs.hold.switched_out && procs.hold.switch_serial == serial
                });
                if current {
                    self.continued_from_outside(job, pid, out);
                }
            }
            Event::Exited { pid, ended } => {
                let event = match (ended.code, ended.signal) {
                    (Some(code), _) => sys::WaitEvent::Exited(code),
                    (None, Some((signal, core))) => sys::WaitEvent::Signaled(signal, core),
                    (None, None) => sys::WaitEvent::Exited(0),
                };
                self.keepers.reaps.entry(job).or_default().push(pid);
                self.handle_waited(
                    sys::Waited {
                        pid,
                        event,
                        cpu: Duration::from_micros(ended.cpu_us),
                        max_rss: ended.max_rss,
                    },
                    out,
                );
            }
            Event::Orphan { pid, cpu_us } => {
                if let Some(procs) = self.jobs.get_mut(&job) {
                    procs.extras.remove(&pid);
                    procs.reaped_cpu += Duration::from_micros(cpu_us);
                    if let Some(wait) = procs.stop_wait.as_mut() {
                        wait.extras.remove(&pid);
                    }
                }
            }
            Event::Launched => {
                let Some(procs) = self.jobs.get_mut(&job) else {
                    return;
                };
                if procs.launch.take().is_some() && procs.children.is_empty() {
                    self.last_child_gone(job, out);
                }
            }
            Event::LaunchFailed { message, status } => {
                self.fail_launch(job, LaunchError::Keeper { message, status }, out);
            }
        }
    }

    /// A rank of `job` exists: it is recorded as a rank forked by scored
    /// was (its group, its host slot, its exec awaited).
    pub(in crate::actuator) fn rank_spawned(
        &mut self,
        job: JobId,
        pid: i32,
        start: u64,
        stage: usize,
        rank: u32,
        slot: usize,
    ) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            // A job released meanwhile: its keeper kills what it made.
            self.tell_keeper(job, ToKeeper::Kill);
            return;
        };
        procs.groups.insert(pid, slot);
        procs.children.insert(pid);
        procs.execs_in_flight += 1;
        let (program, cwd) = procs
            .launch
            .as_ref()
            .map(|launch| launch.describe(stage))
            .unwrap_or_default();
        let files = procs
            .launch
            .as_ref()
            .and_then(|launch| launch.files(stage, rank));
        self.children.insert(
            pid,
            Child {
                job,
                stage,
                rank,
                slot,
                start,
            },
        );
        self.execs.insert(
            pid,
            PendingExec {
                job,
                rank,
                awaiting: true,
                deadline: self.clock.now() + super::EXEC_TIMEOUT,
                machine_waits: 0,
                failed: false,
                program,
                cwd,
                files,
            },
        );
        tracing::debug!(job = %job, pid, rank, stage, "spawned");
        // Signals asked for the job since its launch began reached the
        // ranks known then; this one, before its exec, gets them by pid.
        let signals = self
            .jobs
            .get(&job)
            .and_then(|procs| procs.launch.as_ref())
            .map(|launch| launch.signals.clone())
            .unwrap_or_default();
        for signal in signals {
            if let Err(error) = sys::kill_number(pid, signal) {
                tracing::debug!(job = %job, pid, signal, %error, "a signal to a new rank failed");
            }
        }
    }

    /// `job`'s link ended: its keeper is gone (or scored's end of it was
    /// dropped). A keeper that was told the job is over and has nothing
    /// left goes quietly; otherwise its job's processes are lost with it.
    ///
    /// A keeper that is scored's own child closes its link as it dies,
    /// before its parent can reap it: its job is then lost once it is
    /// reaped, with how it ended (`child_keeper_ended`).
    pub(super) fn link_ended(&mut self, job: JobId, out: &mut Vec<Input>) {
        let Some(mut link) = self.keepers.links.remove(&job) else {
            return;
        };
        link.unwatch(&self.exec_watch);
        let reaped_later = link.ours
            && link
                .id
                .is_some_and(|(pid, _)| self.keepers.by_pid.contains_key(&pid));
        if reaped_later && !link.released && self.jobs.contains_key(&job) {
            link.closed = true;
            self.keepers.links.insert(job, link);
            return;
        }
        if let Some((pid, _)) = link.id {
            if !link.ours {
                self.keepers.by_pid.remove(&pid);
            }
        }
        if link.released || !self.jobs.contains_key(&job) {
            return;
        }
        let who = link.id.map_or_else(
            || "its keeper".to_string(),
            |(pid, _)| format!("its keeper (pid {pid})"),
        );
        self.lose_job(job, format!("{who} ended before the job did"), out);
    }

    /// A child of scored that is a keeper, or the zygote, ended (its
    /// status from `wait4`). Without a zygote no job can start: a new
    /// one is forked (from scored as it is now, so it holds a copy of
    /// scored's memory for its life).
    pub(super) fn child_keeper_ended(
        &mut self,
        pid: i32,
        event: sys::WaitEvent,
        out: &mut Vec<Input>,
    ) {
        if self
            .keepers
            .zygote
            .as_ref()
            .is_some_and(|zygote| zygote.pid() == pid)
        {
            tracing::error!(
                pid,
                ?event,
                "the zygote that makes keepers died; making another"
            );
            self.keepers.zygote = match Zygote::start() {
                Ok(zygote) => Some(zygote),
                Err(error) => {
                    tracing::error!(%error, "cannot make a zygote: no job can start");
                    None
                }
            };
            return;
        }
        if self.keepers.idle.remove(&pid) {
            self.keepers.spares.retain(|spare| spare.pid != pid);
            return;
        }
        let Some(job) = self.keepers.by_pid.remove(&pid) else {
            return;
        };
        let released = self
            .keepers
            .links
            .get(&job)
            .is_none_or(|link| link.released);
        if let Some(link) = self.keepers.links.remove(&job) {
            link.unwatch(&self.exec_watch);
        }
        if released || !self.jobs.contains_key(&job) {
            return;
        }
        let how = match event {
            sys::WaitEvent::Signaled(signal, _) => format!(
                "was killed by {}",
                Signal::try_from(signal)
                    .map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_string())
            ),
            sys::WaitEvent::Exited(code) => format!("exited with status {code}"),
            _ => "ended".to_string(),
        };
        tracing::warn!(job = %job, pid, %how, "a job's keeper died; the job ends");
        self.lose_job(job, format!("its keeper (pid {pid}) {how}"), out);
    }

    /// The processes of `job` lost their keeper: its ranks died with it
    /// (their parent-death signal) or are killed now, with every other
    /// process of the job; once all are gone the job ends, lost, with
    /// `reason`. No process group of it is signalled from now on: its
    /// leaders are no longer unreaped children of a keeper scored talks to.
    pub(super) fn lose_job(&mut self, job: JobId, reason: String, out: &mut Vec<Input>) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        procs.launch = None;
        procs.groups.clear();
        procs.lost = Some(reason);
        let ranks: Vec<i32> = procs.children.iter().copied().collect();
        for pid in &ranks {
            self.execs.remove(pid);
            procfs::forget_status(*pid);
            let start = self.children.remove(pid).map(|child| child.start);
            // Each through a pidfd checked against its start time: its
            // pid is no longer pinned by an unreaped keeper's child.
            if let (Ok(pidfd), Some(start)) = (sys::pidfd_open(*pid), start) {
                if procfs::read_stat(*pid).is_some_and(|stat| stat.start == start) {
                    let _ = sys::pidfd_send_signal(&pidfd, libc::SIGKILL);
                }
            }
        }
        if let Some(procs) = self.jobs.get_mut(&job) {
            procs.children.clear();
            procs.execs_in_flight = 0;
        }
        self.last_child_gone(job, out);
    }

    /// Reaps a keeper that scored forked, if `pid` is one; whether it was.
    pub(super) fn is_keeper(&self, pid: i32) -> bool {
        self.keepers.by_pid.contains_key(&pid)
            || self.keepers.idle.contains(&pid)
            || self
                .keepers
                .zygote
                .as_ref()
                .is_some_and(|zygote| zygote.pid() == pid)
    }
}

/// A memfd holding `order` as JSON, sealed against changes, read from its
/// start. The JSON is made in memory and written at once: written as
/// serde makes it, each token would be a `write` of its own.
fn order_memfd(order: &Order) -> io::Result<OwnedFd> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let text = serde_json::to_vec(order).map_err(io::Error::other)?;
    let fd = memfd_create(
        "scored-order",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )?;
    let mut file = std::fs::File::from(fd);
    file.write_all(&text)?;
    use std::io::Seek;
    file.seek(io::SeekFrom::Start(0))?;
    Ok(OwnedFd::from(file))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

    use super::*;

    /// A user's descriptor sent to a keeper (a PMI end) is closed in the
    /// daemon beside the copy in flight, not batched for the closer; the
    /// keeper's copy is the same open file.
    #[test]
    fn a_user_descriptor_sent_to_a_keeper_is_closed_without_the_closer() {
        crate::closer::queue_only();
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        )
        .unwrap();
        let mut link = Link::new(ours, true);
        let (read, write) = nix::unistd::pipe().unwrap();
        let sent = Carried::User(UserFd::new(write, 1000));
        link.send(ToKeeper::Launch, vec![sent]).unwrap();
        assert!(link.unsent.is_empty());
        assert_eq!(crate::closer::queued(), 0);
        let mut buffer = [0u8; 256];
        let (message, fds) = keeper::receive::<ToKeeper>(theirs.as_fd(), &mut buffer)
            .unwrap()
            .expect("the launch is there");
        assert!(matches!(message, ToKeeper::Launch));
        let [copy]: [OwnedFd; 1] = fds.try_into().expect("one descriptor");
        std::fs::File::from(copy).write_all(b"rank").unwrap();
        let mut text = String::new();
        std::fs::File::from(read).read_to_string(&mut text).unwrap();
        assert_eq!(text, "rank", "the keeper's copy was the last writer");
    }
}
