//! What a job's processes are and use: its descendants found (from its
//! cgroup, or by walking /proc from its live ranks) and held through
//! pidfds, and its CPU time, memory per host and disk use measured.
#![forbid(unsafe_code)]

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use scored_core::core::Input;
use scored_core::ids::JobId;
use scored_core::job::Usage;

use super::procfs::Stat;
use super::{
    max_job_processes, procfs, sys, Descendant, JobProcs, Member, OsActuator, DISK_ENTRIES_MIN,
    DISK_ENTRIES_PER_SAMPLE, DISK_ENTRIES_PER_WINDOW, DISK_WINDOW, ESCAPE_TICKS,
    FREEZER_SWITCH_ABOVE, HELD_ESCAPED, MEMBER_LIST_EVERY, MEMBER_READS_PER_SAMPLE,
};

impl OsActuator {
    pub(super) fn sample_job(&mut self, job: JobId) -> Option<Usage> {
        self.jobs.get(&job)?;
        let members = self.discover(job);
        let procs = self.jobs.get(&job)?;
        let mut ticks = 0u64;
        let mut memory = vec![0u64; procs.reaped_peak.len()];
        for stat in &members {
            ticks += stat.own_ticks + stat.children_ticks;
            let slot = self
                .children
                .get(&stat.pid)
                .map(|child| child.slot)
                .or_else(|| procs.extras.get(&stat.pid).map(|extra| extra.slot))
                .or_else(|| procs.groups.get(&stat.session).copied())
                .unwrap_or(0);
            if let Some(total) = memory.get_mut(slot) {
                *total += stat.rss_pages * self.page_size;
            }
        }
        // Children that are not in the member list (no cgroup, and /proc
        // raced with us) still count through their own stat.
        for pid in &procs.children {
            if !members.iter().any(|stat| stat.pid == *pid) {
                if let Some(stat) = procfs::read_stat(*pid) {
                    ticks += stat.own_ticks + stat.children_ticks;
                }
            }
        }
        let live_cpu =
            Duration::from_micros(ticks.saturating_mul(1_000_000) / self.clock_ticks.max(1));
        let now = self.clock.now();
        if now.duration_since(self.disk_window) >= DISK_WINDOW {
            self.disk_window = now;
            self.disk_spent = 0;
        }
        let budget = DISK_ENTRIES_PER_WINDOW
            .saturating_sub(self.disk_spent)
            .clamp(DISK_ENTRIES_MIN, DISK_ENTRIES_PER_SAMPLE);
        let state = &self.state;
        let procs = self.jobs.get_mut(&job)?;
        let scratch_size =
            procs
                .disk_walk
                .advance(|| state.open_scratch(job), budget, &mut self.disk_spent);
        let disk = procs.exe_bytes + scratch_size;
        Some(Usage {
            cpu: procs.reaped_cpu + live_cpu,
            memory: memory.into(),
            disk,
            programs: procs.exe_bytes,
        })
    }

    /// Finds the job's processes other than its direct children: from its
    /// cgroup, or by walking /proc down from its live ranks and descendants
    /// already held, taking the members of live ranks' sessions.
    ///
    /// Process, group and session ids are numbers the kernel reuses. None
    /// is trusted unless something pins it: a live rank pins its own pid,
    /// group and session (it is unreaped, and a session leader cannot leave
    /// either); a descendant held by a pidfd counts only while its start
    /// time still matches. A session cannot be joined, only inherited, so
    /// a member of a live rank's session descends from that rank.
    pub(super) fn discover(&mut self, job: JobId) -> Vec<Stat> {
        let Some(procs) = self.jobs.get(&job) else {
            return Vec::new();
        };
        if self.cgroups.is_some() && procs.cgroup_procs.is_some() {
            return self.discover_in_cgroup(job);
        }
        let rank_slots = procs.groups.clone();
        let members: Vec<Stat> = {
            {
                let all = procfs::all_processes();
                let start_of: HashMap<i32, u64> =
                    all.iter().map(|stat| (stat.pid, stat.start)).collect();
                let mut known: BTreeSet<i32> = procs.children.iter().copied().collect();
                known.extend(
                    procs
                        .extras
                        .iter()
                        .filter(|(pid, extra)| start_of.get(pid) == Some(&extra.start))
                        .map(|(pid, _)| *pid),
                );
                // A descendant whose parent died before it was first seen
                // was reparented to scored (the child subreaper), and its
                // ancestry is lost. Such an orphan is taken as this job's if
                // it runs as the job's user and its environment names the
                // job: a process can only mislabel itself onto a job of its
                // own user. Direct children and other jobs' processes are
                // not orphans.
                let elsewhere: BTreeSet<i32> = self
                    .jobs
                    .iter()
                    .filter(|(other, _)| **other != job)
                    .flat_map(|(_, other)| other.extras.keys().copied())
                    .collect();
                known.extend(
                    all.iter()
                        .filter(|stat| {
                            stat.ppid == self.daemon_pid
                                && !self.children.contains_key(&stat.pid)
                                && !known.contains(&stat.pid)
                                && !elsewhere.contains(&stat.pid)
                                && !stat.is_dead()
                        })
                        .filter(|stat| procfs::is_orphan_of(stat.pid, procs.uid, job.0))
                        .map(|stat| stat.pid)
                        .collect::<Vec<i32>>(),
                );
                // The job's own orphans came to its keeper, their
                // subreaper: every child of the keeper is the job's.
                if let Some(keeper) = self
                    .keepers
                    .links
                    .get(&job)
                    .and_then(|link| link.id)
                    .map(|(pid, _)| pid)
                {
                    known.extend(
                        all.iter()
                            .filter(|stat| stat.ppid == keeper && !stat.is_dead())
                            .map(|stat| stat.pid)
                            .collect::<Vec<i32>>(),
                    );
                }
                // Walk down from known members, level by level.
                let mut members: Vec<Stat> = Vec::new();
                let mut changed = true;
                let mut taken: BTreeSet<i32> = BTreeSet::new();
                while changed {
                    changed = false;
                    for stat in &all {
                        if taken.contains(&stat.pid) {
                            continue;
                        }
                        if known.contains(&stat.pid)
                            || known.contains(&stat.ppid)
                            || rank_slots.contains_key(&stat.session)
                        {
                            known.insert(stat.pid);
                            taken.insert(stat.pid);
                            members.push(*stat);
                            changed = true;
                        }
                    }
                }
                members
            }
        };
        let procs = self.jobs.get_mut(&job).expect("checked above");
        procs.discovered_at = Some(self.clock.now());
        let present: HashMap<i32, u64> =
            members.iter().map(|stat| (stat.pid, stat.start)).collect();
        procs
            .extras
            .retain(|pid, extra| present.get(pid) == Some(&extra.start));
        let by_pid: HashMap<i32, Stat> = members.iter().map(|stat| (stat.pid, *stat)).collect();
        for stat in &members {
            if procs.children.contains(&stat.pid)
                || procs.extras.contains_key(&stat.pid)
                || stat.is_dead()
            {
                continue;
            }
            // The host slot: that of the rank whose session it is in, else
            // of its nearest known ancestor.
            let slot = rank_slots.get(&stat.session).copied().or_else(|| {
                let mut cursor = stat.ppid;
                for _ in 0..64 {
                    if let Some(child) = self.children.get(&cursor) {
                        return Some(child.slot);
                    }
                    match by_pid.get(&cursor) {
                        Some(parent) => cursor = parent.ppid,
                        None => break,
                    }
                }
                None
            });
            let Ok(pidfd) = sys::pidfd_open(stat.pid) else {
                continue;
            };
            // The pid could have been reused between the read and the open:
            // only keep the handle if it is the process we read.
            if procfs::read_stat(stat.pid).map(|again| again.start) != Some(stat.start) {
                continue;
            }
            procs.extras.insert(
                stat.pid,
                Descendant {
                    pidfd,
                    start: stat.start,
                    slot: slot.unwrap_or(0),
                    pgrp: stat.pgrp,
                    stopped_by_job: false,
                },
            );
            tracing::debug!(job = %job, pid = stat.pid, escaped = !rank_slots.contains_key(&stat.pgrp), "found a descendant");
        }
        members
    }

    /// With a cgroup, picks up processes that joined the job since the last
    /// sample (one read of `cgroup.procs`, and /proc for at most
    /// `MEMBER_READS_PER_SAMPLE` of them), so that a descendant that just
    /// left its process group is stopped with the rest.
    pub(super) fn adopt_new_members(&mut self, job: JobId) {
        let (Some(cgroups), Some(procs)) = (&self.cgroups, self.jobs.get(&job)) else {
            return;
        };
        if procs.cgroup_procs.is_none() {
            return;
        }
        let new: Vec<i32> = cgroups
            .pids(job)
            .into_iter()
            .filter(|pid| {
                !procs.children.contains(pid)
                    && !procs.members.contains_key(pid)
                    && !procs.extras.contains_key(pid)
            })
            .take(MEMBER_READS_PER_SAMPLE)
            .collect();
        for stat in procfs::read_stats(&new).into_iter().flatten() {
            self.take_member(job, stat);
        }
    }

    /// With a cgroup: the job's processes as its `cgroup.procs` lists
    /// them, its ranks read from /proc, and of the others at most
    /// `MEMBER_READS_PER_SAMPLE`: those not seen yet first, then the rest
    /// in turn; the others count as last read. While the job is held
    /// stopped, a process read twice in the same hold that used CPU time
    /// in between, or that shows a tracing stop, got out of its stop.
    /// Returns every member's reading; the job is noted as over its limit
    /// when it has more than `MAX_JOB_PROCESSES`.
    fn discover_in_cgroup(&mut self, job: JobId) -> Vec<Stat> {
        let now = self.clock.now();
        let (Some(cgroups), Some(procs)) = (&self.cgroups, self.jobs.get_mut(&job)) else {
            return Vec::new();
        };
        // A job its freezer holds is listed every `MEMBER_LIST_EVERY`;
        // in between, its members are those last listed (one that ended
        // leaves when its turn to be read comes).
        let list = !procs.hold.by_freezer
            || procs
                .listed_at
                .is_none_or(|at| now.duration_since(at) >= MEMBER_LIST_EVERY);
        let mut listed = if list {
            procs.listed_at = Some(now);
            cgroups.pids(job)
        } else {
            procs
                .members
                .keys()
                .chain(&procs.children)
                .copied()
                .collect()
        };
        let refused = cgroups.forks_refused(job);
        listed.sort_unstable();
        listed.dedup();
        if listed.len() > max_job_processes() || refused {
            over_limit(job, procs, listed.len(), &mut self.later);
        }
        let others = listed.len().saturating_sub(procs.children.len());
        if others > FREEZER_SWITCH_ABOVE && !procs.hold.by_freezer && !procs.hold.switched_out {
            // Only while it runs: its next stop is its first by freezer.
            procs.hold.by_freezer = true;
            tracing::info!(job = %job, processes = listed.len(), "the job has so many processes that its switches signal its ranks alone and freeze the rest");
        }
        procs.discovered_at = Some(now);
        let is_listed = |pid: &i32| listed.binary_search(pid).is_ok();
        procs.members.retain(|pid, _| is_listed(pid));
        procs.extras.retain(|pid, _| is_listed(pid));
        let mut reads: Vec<i32> = listed
            .iter()
            .copied()
            .filter(|pid| !procs.children.contains(pid) && !procs.members.contains_key(pid))
            .take(MEMBER_READS_PER_SAMPLE)
            .collect();
        let turn = members_in_turn(procs, MEMBER_READS_PER_SAMPLE - reads.len());
        if let Some(last) = turn.last() {
            procs.member_cursor = *last;
        }
        reads.extend(turn);
        let children: Vec<i32> = procs.children.iter().copied().collect();
        let mut stats: Vec<Stat> = procfs::read_stats(&children)
            .into_iter()
            .flatten()
            .collect();
        let read = procfs::read_stats(&reads);
        for (pid, stat) in reads.into_iter().zip(read) {
            match stat {
                Some(stat) => self.take_member(job, stat),
                None => {
                    if let Some(procs) = self.jobs.get_mut(&job) {
                        procs.members.remove(&pid);
                    }
                }
            }
        }
        let Some(procs) = self.jobs.get(&job) else {
            return stats;
        };
        stats.extend(procs.members.values().map(|member| member.stat));
        stats
    }

    /// Records one reading of a process of the job's cgroup that is not
    /// a rank: it is held through a pidfd when outside the ranks' groups
    /// (while fewer than `HELD_ESCAPED` are; beyond, the job is frozen at
    /// each stop), and it is checked against the hold of a stopped job.
    fn take_member(&mut self, job: JobId, stat: Stat) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if procs.children.contains(&stat.pid) {
            return;
        }
        if stat.is_dead() {
            procs.members.remove(&stat.pid);
            return;
        }
        let held = procs.hold.switched_out
            && !procs.hold.frozen
            && procs.hold.stopped_cpu.is_some()
            && procs.stop_wait.is_none();
        let serial = procs.hold.serial;
        let before = procs.members.insert(
            stat.pid,
            Member {
                stat,
                held: held.then_some(serial),
            },
        );
        let escape = before
            .filter(|before| held && before.held == Some(serial))
            .filter(|before| before.stat.start == stat.start)
            .and_then(|before| {
                if stat.state == b't' {
                    Some(format!("process {} is traced", stat.pid))
                } else if stat.own_ticks > before.stat.own_ticks + ESCAPE_TICKS {
                    let ms = (stat.own_ticks - before.stat.own_ticks).saturating_mul(1000)
                        / self.clock_ticks.max(1);
                    Some(format!(
                        "process {} used {ms}ms of CPU time while switched out",
                        stat.pid
                    ))
                } else {
                    None
                }
            });
        hold_outside(job, procs, stat);
        if let Some(what) = escape {
            let mut out = Vec::new();
            self.escaped(job, stat.pid, &what, &mut out);
            self.later.extend(out);
        }
    }
}

/// The next `limit` members of the job's cgroup that a sample reads, in
/// the order of their pids from where the last sample stopped.
pub(super) fn members_in_turn(procs: &JobProcs, limit: usize) -> Vec<i32> {
    let mut known: Vec<i32> = procs.members.keys().copied().collect();
    known.sort_unstable();
    let from = known.partition_point(|pid| *pid <= procs.member_cursor);
    known[from..]
        .iter()
        .chain(&known[..from])
        .take(limit)
        .copied()
        .collect()
}

/// The job reached the limit of processes a job may have (`listed` in its
/// cgroup): it is killed, once, and told why.
pub(super) fn over_limit(job: JobId, procs: &mut JobProcs, listed: usize, out: &mut Vec<Input>) {
    if std::mem::replace(&mut procs.over_limit, true) {
        return;
    }
    let limit = max_job_processes();
    tracing::warn!(job = %job, processes = listed, limit, "the job reached the limit of processes a job may have; killing it");
    out.push(Input::StopFailed {
        job,
        reason: format!("it reached the limit of {limit} processes a job may have"),
    });
}

/// With a cgroup, a process of the job outside its ranks' process groups
/// (which group signals miss) is held through a pidfd, to be signalled
/// alone, while fewer than `HELD_ESCAPED` are; beyond, the job is frozen
/// at each stop.
pub(super) fn hold_outside(job: JobId, procs: &mut JobProcs, stat: Stat) {
    if procs.groups.contains_key(&stat.pgrp) || procs.extras.contains_key(&stat.pid) {
        return;
    }
    if procs.extras.len() >= HELD_ESCAPED {
        if !procs.hold.freeze_on_stop {
            procs.hold.freeze_on_stop = true;
            tracing::info!(job = %job, held = HELD_ESCAPED, "the job has more processes outside its ranks' process groups than are held one by one; it is frozen at each stop");
        }
        return;
    }
    let Some(pidfd) = pin(stat) else {
        return;
    };
    let slot = procs.groups.get(&stat.session).copied().unwrap_or(0);
    procs.extras.insert(
        stat.pid,
        Descendant {
            pidfd,
            start: stat.start,
            slot,
            pgrp: stat.pgrp,
            stopped_by_job: false,
        },
    );
    tracing::debug!(job = %job, pid = stat.pid, "found a descendant outside the ranks' groups");
}

/// A pidfd of the process `stat` was read from, or `None` if that process
/// is gone (its pid may have been reused between the read and the open).
fn pin(stat: Stat) -> Option<std::os::fd::OwnedFd> {
    let pidfd = sys::pidfd_open(stat.pid).ok()?;
    (procfs::read_stat(stat.pid).map(|again| again.start) == Some(stat.start)).then_some(pidfd)
}
