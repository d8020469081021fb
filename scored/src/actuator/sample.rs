//! What a job's processes are and use: its descendants found (from its
//! cgroup, or by walking /proc from its live ranks) and held through
//! pidfds, and its CPU time, memory per host and disk use measured.
#![forbid(unsafe_code)]

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use scored_core::ids::JobId;
use scored_core::job::Usage;

use super::procfs::Stat;
use super::{
    procfs, sys, Descendant, OsActuator, DISK_ENTRIES_MIN, DISK_ENTRIES_PER_SAMPLE,
    DISK_ENTRIES_PER_WINDOW, DISK_WINDOW,
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
            memory,
            disk,
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
        let rank_slots = procs.groups.clone();
        let members: Vec<Stat> = match (&self.cgroups, &procs.cgroup_procs) {
            (Some(cgroups), Some(_)) => cgroups
                .pids(job)
                .into_iter()
                .filter_map(procfs::read_stat)
                .collect(),
            _ => {
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
    /// sample (one read of `cgroup.procs`), so that a descendant that just
    /// left its process group is stopped with the rest.
    pub(super) fn adopt_new_members(&mut self, job: JobId) {
        let (Some(cgroups), Some(procs)) = (&self.cgroups, self.jobs.get_mut(&job)) else {
            return;
        };
        if procs.cgroup_procs.is_none() {
            return;
        }
        for pid in cgroups.pids(job) {
            if procs.children.contains(&pid) || procs.extras.contains_key(&pid) {
                continue;
            }
            let Some(stat) = procfs::read_stat(pid) else {
                continue;
            };
            let Ok(pidfd) = sys::pidfd_open(pid) else {
                continue;
            };
            if stat.is_dead() || procfs::read_stat(pid).map(|again| again.start) != Some(stat.start)
            {
                continue;
            }
            let slot = procs.groups.get(&stat.session).copied().unwrap_or(0);
            procs.extras.insert(
                pid,
                Descendant {
                    pidfd,
                    start: stat.start,
                    slot,
                    pgrp: stat.pgrp,
                    stopped_by_job: false,
                },
            );
        }
    }
}
