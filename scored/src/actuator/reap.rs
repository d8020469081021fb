//! The ends of a job's processes: each rank's state change (as its keeper
//! reports it) turned into core inputs, the processes a finished job left
//! behind killed and drained, its final accounting, and what is left of it
//! removed; and scored's own children (keepers, the zygote, removers, and
//! the orphans of a keeper that died) reaped.
#![forbid(unsafe_code)]

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use scored_core::core::Input;
use scored_core::ids::JobId;
use scored_core::job::ExitStatus;

use super::procfs::Stat;
use super::{
    procfs, sample, spawn, statedir, sys, Actuator, Drain, JobProcs, OsActuator,
    DISK_ENTRIES_PER_SAMPLE, MAX_REMOVERS, SWEEP_SLICE, SWEEP_STEP,
};

impl OsActuator {
    pub(super) fn reap_children(&mut self, out: &mut Vec<Input>) {
        loop {
            match sys::wait_any() {
                Ok(Some(waited))
                    if self.children.contains_key(&waited.pid)
                        && matches!(
                            waited.event,
                            sys::WaitEvent::Exited(_) | sys::WaitEvent::Signaled(..)
                        ) =>
                {
                    self.orphaned_rank_reaped(waited, out);
                }
                Ok(Some(waited)) => self.handle_waited(waited, out),
                Ok(None) => break,
                Err(error) => {
                    tracing::error!(%error, "wait4 failed");
                    break;
                }
            }
        }
        self.poll_processes(self.clock.now(), out);
    }

    /// scored reaped a rank itself: ranks are their keeper's children,
    /// so its keeper died, and the rank came to scored, the subreaper
    /// (killed by its parent-death signal). How it ended is the keeper's
    /// doing, not the job's: its time is counted and its job is lost with
    /// how the keeper ended, which the keeper's zombie, already there,
    /// tells (else its reaping does, later).
    fn orphaned_rank_reaped(&mut self, waited: sys::Waited, out: &mut Vec<Input>) {
        let Some(child) = self.children.remove(&waited.pid) else {
            return;
        };
        self.execs.remove(&waited.pid);
        tracing::debug!(job = %child.job, pid = waited.pid, rank = child.rank, "a rank outlived its keeper");
        if let Some(procs) = self.jobs.get_mut(&child.job) {
            procs.reaped_cpu += waited.cpu;
            procs.reaped_peak[child.slot] += waited.max_rss;
            procs.children.remove(&waited.pid);
            procs.groups.remove(&waited.pid);
            procfs::forget_status(waited.pid);
            if let Some(wait) = procs.stop_wait.as_mut() {
                wait.children.remove(&waited.pid);
            }
        }
        let keeper = self
            .keepers
            .links
            .get(&child.job)
            .filter(|link| link.ours)
            .and_then(|link| link.id)
            .map(|(pid, _)| pid);
        if let Some(keeper) = keeper {
            if let Ok(Some(ended)) = sys::reap(keeper) {
                self.handle_waited(ended, out);
            }
        }
    }

    pub(super) fn release_job(&mut self, job: JobId) {
        if let Some(procs) = self.jobs.remove(&job) {
            self.let_go_of_job(job, procs);
        }
        // Its keeper ends once what it holds is gone; told last, so that
        // the end of the client's descriptors it holds (what a reader of
        // the job's output waits for) comes after the scratch directory
        // is taken from the user.
        self.tell_keeper(job, crate::keeper::ToKeeper::Release);
        if let Some(link) = self.keepers.links.get_mut(&job) {
            link.released = true;
        }
    }

    /// What [`OsActuator::release_job`] takes from a job: its processes
    /// (none should be left), its scratch directory and its cgroups.
    fn let_go_of_job(&mut self, job: JobId, procs: JobProcs) {
        if !procs.children.is_empty() {
            tracing::error!(job = %job, n = procs.children.len(), "releasing a job whose processes are alive; killing them");
            for pid in &procs.children {
                let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
            }
        }
        // Taken from the user now, removed in slices (`sweep`); handles,
        // not paths: the user may have planted links in the tree. An empty
        // one is kept for the same user's next job.
        let user = if self.daemon_uid == 0 {
            procs.uid
        } else {
            self.daemon_uid
        };
        match self.state.take_scratch(job, Some(user)) {
            Ok(Some(removal)) => self.removals.push_back(removal),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(job = %job, path = %procs.scratch.display(), %error, "cannot take the job's scratch directory away for removal");
            }
        }
        if let Some(cgroups) = &self.cgroups {
            let clean = procs.cgroup_clean
                && !procs.over_limit
                && procs.children.is_empty()
                && procs.drain.is_none()
                && procs.launch.is_none();
            cgroups.remove_job(job, clean);
        }
    }

    /// Removes finished jobs' scratch trees for at most [`SWEEP_SLICE`],
    /// and hands a large tree (see `Removal::is_large`) to a child process
    /// of its own, up to [`MAX_REMOVERS`] at once: one system call on a
    /// directory that held hundreds of thousands of entries can take most
    /// of a second, which no slice can divide. Should the fork fail, the
    /// tree goes on being removed in slices.
    pub(super) fn sweep(&mut self) {
        let start = self.clock.now();
        while let Some(removal) = self.removals.front_mut() {
            if removal.is_large() {
                if self.removers.len() >= MAX_REMOVERS {
                    break;
                }
                match spawn::spawn_remover(removal) {
                    Ok(pid) => {
                        let name = removal.name().to_string();
                        tracing::debug!(tree = %name, pid, "a large scratch tree is removed by a child process");
                        self.removers.insert(pid, name);
                        self.removals.pop_front();
                        continue;
                    }
                    Err(error) => {
                        tracing::warn!(tree = removal.name(), %error, "cannot fork a remover; removing the tree in slices");
                    }
                }
            }
            match removal.step(SWEEP_STEP) {
                Ok(false) => {}
                Ok(true) => {
                    tracing::debug!(
                        tree = removal.name(),
                        entries = removal.removed,
                        "scratch tree removed"
                    );
                    self.removals.pop_front();
                }
                Err(error) => {
                    tracing::warn!(tree = removal.name(), %error, "cannot remove a finished job's scratch tree");
                    self.removals.pop_front();
                }
            }
            if self.clock.now().duration_since(start) >= SWEEP_SLICE {
                break;
            }
        }
    }

    pub(super) fn kill_all_jobs(&mut self) {
        for procs in self.jobs.values_mut() {
            procs.launch = None;
        }
        let jobs: Vec<JobId> = self.jobs.keys().copied().collect();
        let kept: Vec<JobId> = self.keepers.links.keys().copied().collect();
        for job in kept {
            self.tell_keeper(job, crate::keeper::ToKeeper::Kill);
        }
        for job in &jobs {
            // Pick up what escaped since the last sample, so it dies too.
            self.discover(*job);
            self.send(*job, Signal::SIGKILL);
            self.kill_descendants(*job);
        }
        // Any other child of ours but the closer is a job descendant that
        // came to us as an orphan, or a remover of scratch trees. Signalling it by pid is safe,
        // since an unreaped child's pid cannot be reused.
        for pid in self.orphans() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let deadline = self.clock.now() + Duration::from_secs(5);
        let mut events = Vec::new();
        while (!self.children.is_empty() || !self.orphans().is_empty())
            && self.clock.now() < deadline
        {
            self.reap(&mut events);
            self.collect_keeper_events(&mut events);
            self.acknowledge_ends();
            std::thread::sleep(Duration::from_millis(1));
        }
        for job in jobs {
            self.release(job);
        }
        self.acknowledge_ends();
        self.flush_keepers(Duration::from_secs(1));
    }

    /// Turns one state change of a child into core inputs.
    pub(super) fn handle_waited(&mut self, waited: sys::Waited, out: &mut Vec<Input>) {
        let pid = waited.pid;
        match (self.children.get(&pid).copied(), waited.event) {
            // A rank's stops and continues are its keeper's to see (it
            // answers stops once per switch, and reports continues from
            // outside): a rank is never scored's own child.
            (Some(_), sys::WaitEvent::Stopped | sys::WaitEvent::Continued) => {}
            (Some(child), sys::WaitEvent::Exited(_) | sys::WaitEvent::Signaled(..))
                if self.exec_never_happened(pid) =>
            {
                // It failed before its exec (its launch failure is
                // reported): not a rank's exit.
                self.children.remove(&pid);
                self.rank_reaped(child.job, pid, out);
            }
            (Some(child), sys::WaitEvent::Exited(_) | sys::WaitEvent::Signaled(..)) => {
                self.children.remove(&pid);
                let status = match waited.event {
                    sys::WaitEvent::Exited(code) => ExitStatus::Code(code),
                    sys::WaitEvent::Signaled(signal, false) => ExitStatus::Signal(signal),
                    sys::WaitEvent::Signaled(signal, true) => ExitStatus::Dumped(signal),
                    _ => unreachable!("matched above"),
                };
                tracing::debug!(job = %child.job, pid, rank = child.rank, ?status, "rank exited");
                out.push(Input::RankExited {
                    job: child.job,
                    stage: child.stage,
                    rank: child.rank,
                    status,
                });
                if let Some(procs) = self.jobs.get_mut(&child.job) {
                    procs.reaped_cpu += waited.cpu;
                    procs.reaped_peak[child.slot] += waited.max_rss;
                }
                self.rank_reaped(child.job, pid, out);
            }
            (None, sys::WaitEvent::Exited(code)) if self.removers.contains_key(&pid) => {
                let tree = self.removers.remove(&pid).unwrap_or_default();
                if code == 0 {
                    tracing::debug!(%tree, "scratch tree removed");
                } else {
                    tracing::warn!(%tree, "cannot remove a finished job's scratch tree; it is left for the next start");
                }
            }
            (None, sys::WaitEvent::Signaled(signal, _)) if self.removers.contains_key(&pid) => {
                let tree = self.removers.remove(&pid).unwrap_or_default();
                tracing::warn!(%tree, signal, "the remover of a scratch tree was killed; the tree is left for the next start");
            }
            (None, event) if self.is_keeper(pid) => {
                if matches!(
                    event,
                    sys::WaitEvent::Exited(_) | sys::WaitEvent::Signaled(..)
                ) {
                    self.child_keeper_ended(pid, event, out);
                }
            }
            (None, event) => {
                // A descendant that was orphaned and came to us (we are
                // the child subreaper: the orphans of a keeper that died):
                // account its CPU to its job.
                if matches!(
                    event,
                    sys::WaitEvent::Exited(_) | sys::WaitEvent::Signaled(..)
                ) {
                    for procs in self.jobs.values_mut() {
                        if procs.extras.remove(&pid).is_some() {
                            procs.reaped_cpu += waited.cpu;
                            if let Some(wait) = procs.stop_wait.as_mut() {
                                wait.extras.remove(&pid);
                            }
                            break;
                        }
                    }
                }
            }
        }
    }

    /// The last rank of the job is gone: kill whatever is left, then wait
    /// for it before reporting the job's processes gone.
    /// A reaped rank of `job` leaves its job's books: its pid, and so its
    /// group's id, may now be reused. Ends the job's processes if it was
    /// the last, else sees whether a stop under way is now complete.
    pub(super) fn rank_reaped(&mut self, job: JobId, pid: i32, out: &mut Vec<Input>) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        procs.children.remove(&pid);
        procs.groups.remove(&pid);
        procfs::forget_status(pid);
        // The members of its group are outside every rank's group now.
        let left: Vec<Stat> = procs
            .members
            .values()
            .map(|member| member.stat)
            .filter(|stat| stat.pgrp == pid)
            .collect();
        for stat in left {
            sample::hold_outside(job, procs, stat);
        }
        if let Some(wait) = procs.stop_wait.as_mut() {
            wait.children.remove(&pid);
        }
        if procs.children.is_empty() && procs.launch.is_none() {
            self.last_child_gone(job, out);
        } else {
            self.check_stop(job, out);
        }
    }

    pub(super) fn last_child_gone(&mut self, job: JobId, out: &mut Vec<Input>) {
        self.thaw(job);
        let in_cgroup = self.cgroups.is_some()
            && self
                .jobs
                .get(&job)
                .is_some_and(|procs| procs.cgroup_procs.is_some());
        // With a cgroup, what is left is what it lists; else what the walk
        // of /proc finds.
        let leftovers: Vec<Stat> = if in_cgroup {
            Vec::new()
        } else {
            self.discover(job)
        };
        let listed = self.kill_descendants(job);
        // A frozen process acts on its SIGKILL once thawed, before it runs
        // a single instruction.
        self.release_rest(job);
        let refused = in_cgroup
            && self
                .cgroups
                .as_ref()
                .is_some_and(|cgroups| cgroups.forks_refused(job));
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if refused {
            // Its end may come from the refused fork: say so.
            sample::over_limit(job, procs, listed, out);
        }
        procs.cgroup_clean = false;
        procs.stop_wait = None;
        let pids: Vec<(i32, u64)> = leftovers
            .iter()
            .filter(|stat| !stat.is_dead())
            .map(|stat| (stat.pid, stat.start))
            .collect();
        if !pids.is_empty() || listed > 0 {
            tracing::debug!(job = %job, n = pids.len().max(listed), "killing processes left behind by the job");
            let now = self.clock.now();
            procs.drain = Some(Drain {
                pids,
                since: now,
                in_cgroup,
                killed: now,
            });
        } else {
            procs.extras.clear();
            procs.members.clear();
            // Found empty, with no fork refused: a later job may take it.
            procs.cgroup_clean = in_cgroup && !refused;
            Self::gone(job, procs, &self.state, out);
        }
    }

    /// SIGKILL to the job's descendants: those held through a pidfd, and
    /// with a cgroup every process it lists (each through a pidfd taken
    /// for the signal). Returns how many the cgroup listed.
    pub(super) fn kill_descendants(&self, job: JobId) -> usize {
        let Some(procs) = self.jobs.get(&job) else {
            return 0;
        };
        for extra in procs.extras.values() {
            let _ = sys::pidfd_send_signal(&extra.pidfd, libc::SIGKILL);
        }
        match (&self.cgroups, &procs.cgroup_procs) {
            (Some(cgroups), Some(_)) => cgroups.kill_job(job),
            _ => 0,
        }
    }

    /// Reports the job's final accounting, then that its processes are gone.
    /// The scratch directory's size comes from one more step of its walk
    /// (bounded like a sample), so that a job too short to be sampled
    /// still reports it.
    pub(super) fn gone(
        job: JobId,
        procs: &mut JobProcs,
        state: &statedir::StateDir,
        out: &mut Vec<Input>,
    ) {
        let mut spent = 0;
        let scratch_size = procs.disk_walk.advance(
            || state.open_scratch(job),
            DISK_ENTRIES_PER_SAMPLE,
            &mut spent,
        );
        out.push(Input::FinalUsage {
            job,
            cpu: procs.reaped_cpu,
            peak_memory: procs.reaped_peak.clone(),
            disk: procs.exe_bytes + scratch_size,
        });
        match procs.lost.take() {
            Some(reason) => out.push(Input::ProcessesLost { job, reason }),
            None => out.push(Input::ProcessesGone(job)),
        }
    }

    /// Our children that are neither keepers, the zygote, removers, the
    /// closer of users' descriptors nor the daemon's replacing tasks
    /// (`crate::closer`): orphaned job
    /// descendants (of a keeper that died), not yet reaped.
    pub(super) fn orphans(&self) -> Vec<i32> {
        let closer = crate::closer::pid();
        procfs::all_processes()
            .into_iter()
            .filter(|stat| {
                stat.ppid == self.daemon_pid
                    && !self.children.contains_key(&stat.pid)
                    && !self.is_keeper(stat.pid)
                    && !self.removers.contains_key(&stat.pid)
                    && Some(stat.pid) != closer
                    && !crate::closer::is_task(stat.pid)
            })
            .map(|stat| stat.pid)
            .collect()
    }
}
