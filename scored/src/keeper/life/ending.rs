//! A keeper ending its job alone: every process of it killed, when
//! scored says so or when no scored came back within the wait; and,
//! leaving with no scored connected, what it holds of its job (every
//! rank's end, and why it ended the job if it did) left in
//! `STATE_DIR/keepers/ID.held` (`keeper::heldfile`), so that the next
//! scored records the job as it ended rather than as lost.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::Keeper;
use crate::actuator::procfs;
use crate::keeper::cgroups::JobCgroups;
use crate::keeper::heldfile::{self, HeldFile};
use crate::keeper::order::Order;
use crate::keeper::{Event, RankHeld, PROTOCOL};
use crate::sys;

/// A job its keeper ends because no scored came back: the ends of its
/// ranks, kept for the file the keeper leaves, and whether the keeper
/// killed any (some had not ended when its wait ran out).
pub(super) struct Ending {
    ends: Vec<RankHeld>,
    killed: bool,
}

impl Keeper {
    /// SIGKILL to every process of the job: the ranks' groups (each led
    /// by an unreaped child of ours), the ranks themselves, and every
    /// other descendant of the keeper (orphans come to it: it is their
    /// subreaper) or member of the job's cgroup, each through a pidfd
    /// checked against the start time it was listed with.
    pub(super) fn kill_all(&mut self) {
        // Nothing more is created, and scored must hear that the launch is
        // over: a job whose processes are gone ends only then.
        if self.launch.take().is_some() {
            self.outbox.push(Event::Launched);
        }
        for pid in self.ranks.keys() {
            let _ = killpg(Pid::from_raw(*pid), Signal::SIGKILL);
            let _ = nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        let all = procfs::all_processes();
        let parents: HashMap<i32, i32> = all.iter().map(|stat| (stat.pid, stat.ppid)).collect();
        let descends = |mut pid: i32| {
            for _ in 0..4096 {
                match parents.get(&pid) {
                    Some(&parent) if parent == self.pid => return true,
                    Some(&parent) if parent > 1 => pid = parent,
                    _ => return false,
                }
            }
            false
        };
        // The job's cgroup and its rest (`actuator::cgroup::REST`).
        let dir = self.cgroup_procs.as_deref().and_then(Path::parent);
        let rest = dir.map(|dir| dir.join(crate::actuator::cgroup::REST));
        let members: Vec<i32> = self
            .cgroup_procs
            .iter()
            .cloned()
            .chain(rest.as_ref().map(|rest| rest.join("cgroup.procs")))
            .filter_map(|path| std::fs::read_to_string(path).ok())
            .flat_map(|text| {
                text.lines()
                    .filter_map(|line| line.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        for stat in &all {
            if stat.pid == self.pid || !(descends(stat.pid) || members.contains(&stat.pid)) {
                continue;
            }
            let Ok(pidfd) = sys::pidfd_open(stat.pid) else {
                continue;
            };
            if procfs::read_stat(stat.pid).map(|again| again.start) == Some(stat.start) {
                let _ = sys::pidfd_send_signal(&pidfd, libc::SIGKILL);
            }
        }
        // A process the freezer holds takes its SIGKILL only once thawed.
        // scored thaws a job it kills; a keeper that ends its job alone
        // (its scored never came back) thaws the job's cgroup itself, after
        // the signals, so that nothing of the job runs again but to die.
        for dir in rest.iter().map(PathBuf::as_path).chain(dir) {
            for (file, value) in [("freezer.state", "THAWED"), ("cgroup.freeze", "0")] {
                let path = dir.join(file);
                if path.exists() {
                    let _ = std::fs::write(&path, value);
                }
            }
        }
    }

    /// No scored came back within the wait: the job ends.
    pub(super) fn check_wait(&mut self) {
        let Some(since) = self.lost_since else {
            return;
        };
        if self.ending.is_some() || since.elapsed() < self.wait {
            return;
        }
        tracing::warn!(
            job = self.job,
            wait_s = self.wait.as_secs(),
            "no scored took the keeper's job over in time; ending the job"
        );
        let killed = self.launch.is_some() || self.ranks.values().any(|rank| rank.ended.is_none());
        self.ending = Some(Ending {
            ends: Vec::new(),
            killed,
        });
        self.listener = None;
        let _ = std::fs::remove_file(&self.socket_path);
        // The ends kept for a scored that did not come go to the file the
        // keeper leaves once the rest are gone.
        let ended: Vec<i32> = self
            .ranks
            .iter()
            .filter(|(_, rank)| rank.ended.is_some())
            .map(|(pid, _)| *pid)
            .collect();
        for pid in ended {
            self.keep_end_for_file(pid);
        }
        self.kill_all();
    }

    /// A rank ended, or had ended, while the keeper ends its job: it is
    /// let go of, its end kept for the file.
    pub(super) fn keep_end_for_file(&mut self, pid: i32) {
        let Some(rank) = self.ranks.remove(&pid) else {
            return;
        };
        let (Some(ending), Some(_)) = (&mut self.ending, rank.ended) else {
            return;
        };
        ending.ends.push(RankHeld {
            pid,
            start: rank.start,
            stage: rank.stage,
            rank: rank.rank,
            slot: rank.slot,
            execd: rank.execd,
            stopped: rank.stopped,
            ended: rank.ended,
        });
    }

    /// As it leaves: with no scored connected and its job not released,
    /// it writes what it holds for the next scored (a keeper whose state
    /// directory is gone cannot, and says so); then its socket goes, and,
    /// with no scored connected, its job's cgroups (`keeper::cgroups`;
    /// those of its last job, resting, unless its daemon lives).
    pub(super) fn leave_files(&mut self) {
        if self.link.is_none() && !self.released && !self.resting {
            self.leave_held();
        }
        let _ = std::fs::remove_file(&self.socket_path);
        if self.link.is_none() {
            // An order's cgroups not opened yet are opened to be removed.
            self.open_cgroups();
            let state_dir = self.socket_path.parent().and_then(Path::parent);
            self.cgroups.remove(state_dir, self.resting);
        }
    }

    /// Notes the job's cgroups from an order: the files its ranks join,
    /// and, the first time, the cgroups to open (`open_cgroups`).
    pub(super) fn note_cgroups(&mut self, order: &Order) {
        let Some(procs) = &order.cgroup_procs else {
            return;
        };
        let procs = PathBuf::from(procs.to_os());
        if self.cgroup_procs.as_ref() != Some(&procs) {
            let pids = order
                .pids_procs
                .as_ref()
                .map(|path| PathBuf::from(path.to_os()));
            self.cgroups_to_open = Some(std::iter::once(procs.clone()).chain(pids).collect());
        }
        self.cgroup_procs = Some(procs);
    }

    /// Opens the cgroups that `note_cgroups` noted: once the order's
    /// first ranks are on their way, as the keeper waits for their execs,
    /// not before (opening them takes a third of the order's handling).
    pub(super) fn open_cgroups(&mut self) {
        if let Some(joins) = self.cgroups_to_open.take() {
            let joins: Vec<&Path> = joins.iter().map(PathBuf::as_path).collect();
            self.cgroups = JobCgroups::open(self.job, &joins);
        }
    }

    fn leave_held(&mut self) {
        let mut held = self.held();
        if let Some(ending) = &mut self.ending {
            held.ranks.append(&mut ending.ends);
        }
        held.ranks
            .sort_by_key(|rank| (rank.stage, rank.rank, rank.pid));
        // What the job's orphans used, which no scored was told.
        for event in &self.outbox {
            if let Event::Orphan { cpu_us, .. } = event {
                held.reaped_cpu_us = held.reaped_cpu_us.saturating_add(*cpu_us);
            }
        }
        let killed = self.ending.as_ref().is_some_and(|ending| ending.killed);
        let file = HeldFile {
            protocol: PROTOCOL,
            job: self.job,
            pid: self.pid,
            start: self.start,
            held,
            killed: killed.then(|| {
                format!(
                    "no scored took it over within {} (--keeper-wait)",
                    scored_proto::units::format_duration_exact(self.wait)
                )
            }),
        };
        let Some(keepers) = self.socket_path.parent() else {
            return;
        };
        match heldfile::write(keepers, &file) {
            Ok(path) => tracing::info!(
                job = self.job,
                path = %path.display(),
                "the keeper left its job's ends for the next scored"
            ),
            Err(error) => tracing::warn!(
                job = self.job,
                dir = %keepers.display(),
                %error,
                "the keeper cannot leave its job's ends for the next scored"
            ),
        }
    }
}
