//! The takeover of the keepers of a daemon that died (or of the image
//! before an in-place restart): each keeper found from the journal is
//! reached at its socket and checked (scored's own user, the recorded pid
//! and start time) before its jobs are rebuilt from what it holds; keepers
//! of jobs nobody asked for are told to end theirs. A keeper that ended
//! with no scored connected left what it held in a file
//! (`keeper::heldfile`), read instead once checked, and removed once its
//! ends are recorded.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use scored_core::core::Input;
use scored_core::ids::JobId;

use super::super::{procfs, sys, Child, OsActuator, PendingExec};
use super::{token, Link};
use crate::keeper::heldfile::{self, HeldFile};
use crate::keeper::{self, FromKeeper, Held, ToKeeper};

/// How long a new daemon waits for the keepers it connects to to say who
/// they are and what they hold.
const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

impl OsActuator {
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
                let mut said_protocol = None;
                loop {
                    match keeper::receive::<FromKeeper>(
                        link.socket.as_fd(),
                        &mut self.keepers.buffer,
                    ) {
                        Ok(Some((FromKeeper::State(state), _))) => {
                            held.insert(*job, state);
                            break;
                        }
                        Ok(Some((FromKeeper::Hello { protocol, .. }, _))) => {
                            said_protocol = Some(protocol);
                        }
                        Ok(Some(_)) => continue,
                        _ => break,
                    }
                }
                // A keeper that reads notes gets its pipe before anything
                // of a switch is told to it.
                if let (Some(protocol), Some(link)) =
                    (said_protocol, self.keepers.links.get_mut(job))
                {
                    link.open_notes(protocol, &self.exec_watch, *job);
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
                        link.unwatch(&self.exec_watch);
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
            // The file of a keeper of a job not held: its ends were
            // recorded, and it was left only by a crash before its removal.
            let left = name
                .to_str()
                .and_then(|name| name.strip_suffix(".held"))
                .and_then(|id| id.parse::<u64>().ok());
            if let Some(job) = left.filter(|job| !jobs.iter().any(|(held, _)| held.0 == *job)) {
                tracing::info!(
                    job,
                    "removing the file a keeper left of a job no longer held"
                );
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
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
    pub(in crate::actuator) fn take_over_jobs(
        &mut self,
        jobs: &[super::super::Adopt],
        out: &mut Vec<Input>,
    ) {
        let ids: Vec<(JobId, Option<(i32, u64)>)> =
            jobs.iter().map(|adopt| (adopt.job, adopt.keeper)).collect();
        let mut held: HashMap<JobId, Held> = self.take_over_keepers(&ids).into_iter().collect();
        let mut left = self.left_files(&ids, &held);
        let mut kept = Vec::new();
        for adopt in jobs {
            let state = match (held.remove(&adopt.job), left.remove(&adopt.job)) {
                (Some(state), _) => state,
                (None, Some((file, path))) => {
                    // Its keeper ended with no scored connected: its file
                    // says what it held, and why it ended the job if it
                    // did. It goes once the ends are recorded.
                    self.keepers.left_files.push(path);
                    if let Some(why) = file.killed {
                        out.push(Input::KeeperEnded {
                            job: adopt.job,
                            reason: format!("because {why}"),
                        });
                    }
                    file.held
                }
                (None, None) => {
                    // What its processes left in their scratch directory goes.
                    if let Ok(Some(removal)) = self.state.take_scratch(adopt.job, None) {
                        self.removals.push_back(removal);
                    }
                    out.push(Input::ProcessesLost {
                        job: adopt.job,
                        reason: "scored was killed, and the job's keeper could not be found again"
                            .into(),
                    });
                    continue;
                }
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
                super::super::JobProcs::new(
                    scratch,
                    cgroup_procs,
                    pids_procs,
                    adopt.uid,
                    adopt.slots,
                ),
            );
            let ends = self.adopt(adopt.job, state, adopt.switched_out);
            // A job the dead daemon froze (something outside kept
            // continuing it, or a switch that its freezer holds), frozen
            // or still freezing, stays held so: its stops are confirmed by
            // the freezer, and its continue thaws it.
            let frozen = self
                .cgroups
                .as_ref()
                .is_some_and(|cgroups| cgroups.freeze_asked(adopt.job));
            // One switched by its ranks alone still is: its rest is in
            // its `rest` cgroup, perhaps frozen, and thawed once the job
            // runs again (`hold_rests`).
            let (rest, rest_frozen) = self.cgroups.as_ref().map_or((false, false), |cgroups| {
                (
                    cgroups.has_rest(adopt.job),
                    cgroups.rest_freeze_asked(adopt.job),
                )
            });
            if let Some(procs) = self.jobs.get_mut(&adopt.job) {
                if frozen && procs.cgroup_procs.is_some() {
                    procs.hold.frozen = true;
                    procs.hold.freeze_on_stop = true;
                }
                if procs.cgroup_procs.is_some() {
                    procs.hold.by_freezer = rest;
                    procs.hold.rest_frozen = rest_frozen;
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
            let mut last_end = 0;
            for (idx, (_, stage, rank, waited, at_us)) in ends.into_iter().enumerate() {
                if let Some(procs) = self.jobs.get_mut(&adopt.job) {
                    procs.reaped_cpu += waited.cpu;
                }
                if !new.contains(&idx) {
                    continue;
                }
                last_end = last_end.max(at_us);
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
                // Its processes all ended while no scored ran: its end is
                // recorded at the time its keeper saw the last one end.
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |since| since.as_micros() as u64);
                if last_end > 0 && last_end <= now {
                    out.push(Input::EndedAway {
                        job: adopt.job,
                        ago: Duration::from_micros(now - last_end),
                    });
                }
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

    /// The files left by the keepers of `jobs` (id, recorded keeper) that
    /// were not reached (`reached`): each read and checked
    /// (`heldfile::read`), a refused one said with its reason. A keeper
    /// still alive (ending its job: its socket is gone, its file not yet
    /// written) is waited for, up to `TAKEOVER_WAIT`.
    fn left_files(
        &self,
        jobs: &[(JobId, Option<(i32, u64)>)],
        reached: &HashMap<JobId, Held>,
    ) -> HashMap<JobId, (HeldFile, PathBuf)> {
        let mut found = HashMap::new();
        let mut waiting: Vec<(JobId, Option<(i32, u64)>)> = jobs
            .iter()
            .filter(|(job, _)| !reached.contains_key(job))
            .copied()
            .collect();
        let deadline = Instant::now() + TAKEOVER_WAIT;
        while !waiting.is_empty() {
            waiting.retain(|(job, recorded)| {
                let path = heldfile::path(&self.keepers.sockets, job.0);
                if std::fs::symlink_metadata(&path).is_err() {
                    return keeper_alive(*recorded) && Instant::now() < deadline;
                }
                match heldfile::read(&path, self.daemon_uid, job.0, *recorded) {
                    Ok(file) => {
                        found.insert(*job, (file, path));
                    }
                    Err(why) => {
                        tracing::warn!(job = %job, path = %path.display(), %why, "refused the file the job's keeper left");
                    }
                }
                false
            });
            if !waiting.is_empty() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        found
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
    ) -> Vec<(i32, usize, u32, sys::Waited, u64)> {
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
        // The keeper's serial goes on, so that its reports of the dead
        // daemon's last stop count.
        procs.hold.switch_serial = held.switch.0;
        if held.launching {
            tracing::info!(job = %job, "took over a keeper still creating the job's processes");
            procs.launch = Some(super::super::launch::LaunchInProgress::adopted(
                &held.described,
            ));
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
                    ended.at_us,
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
                    start: rank.start,
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
                        deadline: self.clock.now() + super::super::EXEC_TIMEOUT,
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

/// Whether the recorded keeper (pid, start time) still runs.
fn keeper_alive(recorded: Option<(i32, u64)>) -> bool {
    recorded.is_some_and(|(pid, start)| {
        procfs::read_stat(pid).is_some_and(|stat| stat.start == start && !stat.is_dead())
    })
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
