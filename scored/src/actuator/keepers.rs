//! scored's side of the keepers (`crate::keeper`): one link per job, made
//! through the zygote at the job's first launch; the orders sent on it;
//! what comes back turned into what the actuator learnt from `wait4` when
//! it was the ranks' parent; a keeper's death; and the takeover of the
//! keepers of a daemon that died.
//!
//! The links are watched as one epoll set, which the event loop watches
//! as one source (`Actuator::exec_watch_fd`): a readable set makes the
//! loop `poll`, which reads every link that has something.
//!
//! Ranks' ends are acknowledged to their keeper (`ToKeeper::Reap`) only
//! after the inputs they caused are on disk (`Actuator::recorded`), so that
//! a crash in between leaves the zombie, and its end, for the next daemon.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::rc::Rc;
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
use crate::keeper::{self, Event, FromKeeper, Held, ToKeeper};

/// How long a new daemon waits for the keepers it connects to to say who
/// they are and what they hold.
const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

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
    /// Keepers that said who they are since the daemon's state last
    /// recorded them: job, pid, start time.
    pub(super) fresh: Vec<(u64, i32, u64)>,
    buffer: Vec<u8>,
}

/// One keeper.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) socket: OwnedFd,
    /// Its pid and start time, once it said.
    pub(super) id: Option<(i32, u64)>,
    /// Its job's descriptors went with an order.
    pub(super) has_fds: bool,
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
            fresh: Vec::new(),
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
/// order's memfd), or a copy of one a user handed over, which, like every
/// such descriptor, the daemon lets go of through the closer once sent.
#[derive(Debug)]
pub(super) enum Carried {
    Own(OwnedFd),
    User(UserFd),
}

impl AsRawFd for Carried {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Carried::Own(fd) => fd.as_raw_fd(),
            Carried::User(fd) => fd.as_raw_fd(),
        }
    }
}

impl Link {
    fn new(socket: OwnedFd, ours: bool) -> Link {
        Link {
            socket,
            id: None,
            has_fds: false,
            unsent: Vec::new(),
            released: false,
            ours,
            closed: false,
        }
    }

    /// Sends `message` (with `fds`), or keeps it for when the socket has
    /// room; an error means the keeper is gone.
    pub(super) fn send(&mut self, message: ToKeeper, fds: Vec<Carried>) -> io::Result<()> {
        if self.unsent.is_empty() {
            let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
            if keeper::send(self.socket.as_fd(), &message, &raw)? {
                return Ok(());
            }
        }
        self.unsent.push((message, fds));
        Ok(())
    }

    /// Sends what found the socket full.
    fn flush(&mut self) -> io::Result<()> {
        while let Some((message, fds)) = self.unsent.first() {
            let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
            if !keeper::send(self.socket.as_fd(), message, &raw)? {
                return Ok(());
            }
            self.unsent.remove(0);
        }
        Ok(())
    }
}

/// The data of a keeper's link in the watched set: its job.
fn token(job: JobId) -> u64 {
    job.0
}

impl OsActuator {
    /// The link to `job`'s keeper, made through the zygote at its first
    /// launch.
    pub(super) fn keeper_of(&mut self, job: JobId) -> io::Result<&mut Link> {
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
            self.keepers.links.insert(job, Link::new(socket, true));
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
                let dup = |fd: &UserFd| {
                    let copy = fd.as_fd().try_clone_to_owned()?;
                    Ok::<_, io::Error>(Carried::User(UserFd::new(copy, fd.uid())))
                };
                let mut standard = [false; 3];
                for (idx, fd) in [&io.stdin, &io.stdout, &io.stderr].into_iter().enumerate() {
                    if let Some(fd) = fd {
                        fds.push(dup(fd).map_err(fail)?);
                        standard[idx] = true;
                    }
                }
                let mut inherited = Vec::new();
                for (number, fd) in &io.inherited {
                    fds.push(dup(fd).map_err(fail)?);
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
        link.send(ToKeeper::Launch, carried).map_err(fail)
    }

    /// Tells `job`'s keeper something; a keeper that is gone shows as
    /// gone when its link is read.
    pub(super) fn tell_keeper(&mut self, job: JobId, message: ToKeeper) {
        if let Some(link) = self.keepers.links.get_mut(&job) {
            if let Err(error) = link.send(message, Vec::new()) {
                tracing::debug!(job = %job, %error, "cannot tell the keeper");
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

    /// Sends the keepers the acknowledgements of the ends now recorded.
    pub(super) fn acknowledge_ends(&mut self) {
        for (job, pids) in std::mem::take(&mut self.keepers.reaps) {
            self.tell_keeper(job, ToKeeper::Reap(pids));
        }
    }

    /// Reads every link that has something and handles what it says;
    /// a link that ended is a keeper gone.
    pub(super) fn collect_keeper_events(&mut self, out: &mut Vec<Input>) {
        let mut ready = [0u64; 64];
        loop {
            let n = sys::epoll_ready(&self.exec_watch, &mut ready).unwrap_or(0);
            for &data in &ready[..n] {
                self.read_link(JobId(data), out);
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
            FromKeeper::Events(events) => {
                for event in events {
                    self.keeper_event(job, event, out);
                }
            }
        }
    }

    /// One event of `job`'s keeper, handled as the actuator handled what
    /// `wait4` and a rank's report pipe said when it was the ranks' parent.
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
            Event::Stopped(pid) => self.handle_waited(waited(pid, sys::WaitEvent::Stopped), out),
            Event::Continued(pid) => {
                self.handle_waited(waited(pid, sys::WaitEvent::Continued), out)
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
            Event::Paused => {
                if let Some(wait) = self
                    .jobs
                    .get_mut(&job)
                    .and_then(|procs| procs.stop_wait.as_mut())
                {
                    wait.pausing = false;
                }
                self.check_stop(job, out);
            }
            Event::LaunchFailed { message, status } => {
                self.fail_launch(job, LaunchError::Keeper { message, status }, out);
            }
        }
    }

    /// A rank of `job` exists: it is recorded as a rank forked by scored
    /// was (its group, its host slot, its exec awaited).
    fn rank_spawned(
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
                stopped: false,
                start,
                cont_sent: false,
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
        let _ = sys::epoll_remove(&self.exec_watch, link.socket.as_raw_fd());
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
        let Some(job) = self.keepers.by_pid.remove(&pid) else {
            return;
        };
        let released = self
            .keepers
            .links
            .get(&job)
            .is_none_or(|link| link.released);
        if let Some(link) = self.keepers.links.remove(&job) {
            let _ = sys::epoll_remove(&self.exec_watch, link.socket.as_raw_fd());
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
            || self
                .keepers
                .zygote
                .as_ref()
                .is_some_and(|zygote| zygote.pid() == pid)
    }

    /// Takes over the keepers of a daemon that died (or of the image
    /// before an in-place restart): for each job of `jobs` (id, its
    /// keeper's recorded pid and start time), connects to the keeper's
    /// socket, checks that it is that keeper (scored's own user, that pid,
    /// that start time), and rebuilds what the actuator knows of the job
    /// from what the keeper holds. Returns the jobs taken over with what
    /// each keeper holds; a job whose keeper cannot be found or checked is
    /// left out, and the caller loses it. Keepers of jobs not asked for
    /// are told to end their jobs.
    pub fn take_over_keepers(
        &mut self,
        jobs: &[(JobId, Option<(i32, u64)>)],
    ) -> Vec<(JobId, Held)> {
        let mut connected = Vec::new();
        for (job, recorded) in jobs {
            let path = self.keepers.sockets.join(format!("{}.sock", job.0));
            match connect_keeper(&path, *recorded, self.daemon_uid) {
                Ok((socket, pid, start)) => {
                    if sys::epoll_add(&self.exec_watch, socket.as_raw_fd(), token(*job)).is_err() {
                        continue;
                    }
                    let mut link = Link::new(socket, false);
                    link.id = Some((pid, start));
                    link.has_fds = true;
                    self.keepers.by_pid.insert(pid, *job);
                    self.keepers.links.insert(*job, link);
                    connected.push(*job);
                }
                Err(why) => {
                    tracing::warn!(job = %job, path = %path.display(), %why, "cannot take over the job's keeper");
                }
            }
        }
        self.stray_keepers(jobs);
        // Each keeper says `Hello` then `State`; the events after them wait
        // in the socket for the loop.
        let deadline = Instant::now() + TAKEOVER_WAIT;
        let mut held: HashMap<JobId, Held> = HashMap::new();
        while held.len() < connected.len() && Instant::now() < deadline {
            for job in &connected {
                if held.contains_key(job) {
                    continue;
                }
                let Some(link) = self.keepers.links.get(job) else {
                    continue;
                };
                loop {
                    match keeper::receive::<FromKeeper>(
                        link.socket.as_fd(),
                        &mut self.keepers.buffer,
                    ) {
                        Ok(Some((FromKeeper::State(state), _))) => {
                            held.insert(*job, state);
                            break;
                        }
                        Ok(Some(_)) => continue,
                        _ => break,
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut taken = Vec::new();
        for job in connected {
            match held.remove(&job) {
                Some(state) => taken.push((job, state)),
                None => {
                    tracing::warn!(job = %job, "its keeper did not say what it holds in time");
                    if let Some(link) = self.keepers.links.remove(&job) {
                        let _ = sys::epoll_remove(&self.exec_watch, link.socket.as_raw_fd());
                    }
                }
            }
        }
        taken
    }

    /// Keepers in the socket directory whose jobs are not taken over: each
    /// that is really a keeper of scored's user is told to end its job.
    fn stray_keepers(&mut self, jobs: &[(JobId, Option<(i32, u64)>)]) {
        let Ok(entries) = std::fs::read_dir(&self.keepers.sockets) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(job) = name
                .to_str()
                .and_then(|name| name.strip_suffix(".sock"))
                .and_then(|id| id.parse::<u64>().ok())
            else {
                continue;
            };
            if jobs.iter().any(|(taken, _)| taken.0 == job) {
                continue;
            }
            let Ok((socket, pid, _)) = connect_keeper(&entry.path(), None, self.daemon_uid) else {
                continue;
            };
            tracing::warn!(
                job,
                pid,
                "a keeper of a job this daemon does not hold; ending it"
            );
            let _ = keeper::send(socket.as_fd(), &ToKeeper::Kill, &[]);
            let _ = keeper::send(socket.as_fd(), &ToKeeper::Release, &[]);
        }
    }

    /// Takes over the processes of `jobs` (see `Actuator::take_over`):
    /// each job's record made again (its scratch directory, its cgroup),
    /// then what its keeper holds; the ends of the job's current stage the
    /// core has not seen (the keeper reports the ends scored did not
    /// acknowledge, which may include ends recorded just before the
    /// crash: only the last `ranks_left - alive` are new) go to the core.
    pub(super) fn take_over_jobs(&mut self, jobs: &[super::Adopt], out: &mut Vec<Input>) {
        let ids: Vec<(JobId, Option<(i32, u64)>)> =
            jobs.iter().map(|adopt| (adopt.job, adopt.keeper)).collect();
        let held: HashMap<JobId, Held> = self.take_over_keepers(&ids).into_iter().collect();
        let mut kept = Vec::new();
        let mut held = held;
        for adopt in jobs {
            let Some(state) = held.remove(&adopt.job) else {
                // What its processes left in their scratch directory goes.
                if let Ok(Some(removal)) = self.state.take_scratch(adopt.job) {
                    self.removals.push_back(removal);
                }
                out.push(Input::ProcessesLost {
                    job: adopt.job,
                    reason: "scored was killed, and the job's keeper could not be found again"
                        .into(),
                });
                continue;
            };
            kept.push(adopt.job);
            let scratch = self.state.scratch_path(adopt.job);
            let (cgroup_procs, pids_procs) = self
                .cgroups
                .as_ref()
                .and_then(|cgroups| cgroups.add_job(adopt.job).ok())
                .map_or((None, None), |(procs, pids)| (Some(procs), pids));
            self.jobs.insert(
                adopt.job,
                super::JobProcs::new(scratch, cgroup_procs, pids_procs, adopt.uid, adopt.slots),
            );
            let ends = self.adopt(adopt.job, state, adopt.switched_out);
            // A job the dead daemon froze (something outside kept
            // continuing it) stays held so: its stops are confirmed by the
            // freezer, as before.
            let frozen = self
                .cgroups
                .as_ref()
                .is_some_and(|cgroups| cgroups.is_frozen(adopt.job));
            if let Some(procs) = self.jobs.get_mut(&adopt.job) {
                if frozen && procs.cgroup_procs.is_some() {
                    procs.hold.frozen = true;
                    procs.hold.freeze_on_stop = true;
                }
            }
            let alive = self
                .children
                .values()
                .filter(|child| child.job == adopt.job && child.stage == adopt.stage)
                .count() as u32;
            let unseen = adopt.ranks_left.saturating_sub(alive) as usize;
            let current: Vec<usize> = ends
                .iter()
                .enumerate()
                .filter(|(_, end)| end.1 == adopt.stage)
                .map(|(idx, _)| idx)
                .collect();
            let new_from = current.len().saturating_sub(unseen);
            let new: Vec<usize> = current[new_from..].to_vec();
            for (idx, (_, stage, rank, waited)) in ends.into_iter().enumerate() {
                if let Some(procs) = self.jobs.get_mut(&adopt.job) {
                    procs.reaped_cpu += waited.cpu;
                }
                if !new.contains(&idx) {
                    continue;
                }
                let status = match waited.event {
                    sys::WaitEvent::Exited(code) => scored_core::job::ExitStatus::Code(code),
                    sys::WaitEvent::Signaled(signal, false) => {
                        scored_core::job::ExitStatus::Signal(signal)
                    }
                    sys::WaitEvent::Signaled(signal, true) => {
                        scored_core::job::ExitStatus::Dumped(signal)
                    }
                    _ => scored_core::job::ExitStatus::Code(0),
                };
                out.push(Input::RankExited {
                    job: adopt.job,
                    stage,
                    rank,
                    status,
                });
            }
            let idle = self
                .jobs
                .get(&adopt.job)
                .is_some_and(|procs| procs.children.is_empty() && procs.launch.is_none());
            if idle {
                self.last_child_gone(adopt.job, out);
            }
        }
        if let Some(cgroups) = &self.cgroups {
            cgroups.remove_unheld(&kept);
        }
        tracing::info!(
            jobs = kept.len(),
            of = jobs.len(),
            "took over the keepers of the jobs"
        );
    }

    /// Records what `held` says of `job`'s processes, as the actuator
    /// knew them before the daemon died: its ranks (their groups, host
    /// slots, stops, execs awaited), what its reaped processes used, and
    /// a launch in progress. Returns the ends the keeper holds, in order.
    pub fn adopt(
        &mut self,
        job: JobId,
        held: Held,
        switched_out: bool,
    ) -> Vec<(i32, usize, u32, sys::Waited)> {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return Vec::new();
        };
        procs.reaped_cpu = Duration::from_micros(held.reaped_cpu_us);
        if procs.reaped_peak.len() < held.reaped_peak.len() {
            procs.reaped_peak.resize(held.reaped_peak.len(), 0);
        }
        for (peak, kept) in procs.reaped_peak.iter_mut().zip(&held.reaped_peak) {
            *peak = (*peak).max(*kept);
        }
        procs.hold.switched_out = switched_out;
        if held.launching {
            tracing::info!(job = %job, "took over a keeper still creating the job's processes");
            procs.launch = Some(super::launch::LaunchInProgress::adopted(&held.described));
        }
        let mut ends = Vec::new();
        for rank in held.ranks {
            if let Some(ended) = rank.ended {
                let event = match (ended.code, ended.signal) {
                    (Some(code), _) => sys::WaitEvent::Exited(code),
                    (None, Some((signal, core))) => sys::WaitEvent::Signaled(signal, core),
                    (None, None) => sys::WaitEvent::Exited(0),
                };
                self.keepers.reaps.entry(job).or_default().push(rank.pid);
                ends.push((
                    rank.pid,
                    rank.stage,
                    rank.rank,
                    sys::Waited {
                        pid: rank.pid,
                        event,
                        cpu: Duration::from_micros(ended.cpu_us),
                        max_rss: ended.max_rss,
                    },
                ));
                continue;
            }
            let Some(procs) = self.jobs.get_mut(&job) else {
                break;
            };
            procs.groups.insert(rank.pid, rank.slot);
            procs.children.insert(rank.pid);
            self.children.insert(
                rank.pid,
                Child {
                    job,
                    stage: rank.stage,
                    rank: rank.rank,
                    slot: rank.slot,
                    stopped: rank.stopped,
                    start: rank.start,
                    cont_sent: false,
                },
            );
            if !rank.execd {
                procs.execs_in_flight += 1;
                self.execs.insert(
                    rank.pid,
                    PendingExec {
                        job,
                        rank: rank.rank,
                        awaiting: true,
                        deadline: self.clock.now() + super::EXEC_TIMEOUT,
                        machine_waits: 0,
                        failed: false,
                        program: Rc::from(
                            rank.stage
                                .checked_sub(held.described.0)
                                .and_then(|idx| held.described.1.get(idx))
                                .map_or("?", String::as_str),
                        ),
                        cwd: Rc::from(held.described.2.as_str()),
                        files: None,
                    },
                );
            }
        }
        ends
    }
}

/// A waited-for stop or continue of `pid`.
fn waited(pid: i32, event: sys::WaitEvent) -> sys::Waited {
    sys::Waited {
        pid,
        event,
        cpu: Duration::ZERO,
        max_rss: 0,
    }
}

/// Connects to the keeper socket at `path` and checks whom it reached:
/// a process of scored's user (`uid`) and, when recorded, the keeper's
/// pid and start time. Returns the connection, the pid and the start time.
fn connect_keeper(
    path: &std::path::Path,
    recorded: Option<(i32, u64)>,
    uid: u32,
) -> Result<(OwnedFd, i32, u64), String> {
    let stream = keeper::connect(path).map_err(|error| error.to_string())?;
    let cred = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|errno| format!("cannot read its credentials: {errno}"))?;
    if cred.uid() != uid {
        return Err(format!("it runs as uid {}, not scored's {uid}", cred.uid()));
    }
    let pid = cred.pid();
    let start = procfs::read_stat(pid)
        .map(|stat| stat.start)
        .ok_or_else(|| format!("its process {pid} is gone"))?;
    if let Some((recorded_pid, recorded_start)) = recorded {
        if (recorded_pid, recorded_start) != (pid, start) {
            return Err(format!(
                "it is process {pid} started at {start}, not the keeper recorded (process {recorded_pid} started at {recorded_start})"
            ));
        }
    }
    Ok((stream, pid, start))
}

/// A memfd holding `order` as JSON, sealed against changes, read from its
/// start.
fn order_memfd(order: &Order) -> io::Result<OwnedFd> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fd = memfd_create(
        "scored-order",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )?;
    let mut file = std::fs::File::from(fd);
    serde_json::to_writer(&mut file, order).map_err(io::Error::other)?;
    file.flush()?;
    use std::io::Seek;
    file.seek(io::SeekFrom::Start(0))?;
    Ok(OwnedFd::from(file))
}
