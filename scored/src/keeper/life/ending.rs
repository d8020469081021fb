//! A keeper ending its job alone: every process of it killed, when
//! scored says so or when no scored came back within the wait.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::Keeper;
use crate::actuator::procfs;
use crate::keeper::Event;
use crate::sys;

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
        let members: Vec<i32> = self
            .cgroup_procs
            .as_ref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .map(|text| {
                text.lines()
                    .filter_map(|line| line.trim().parse().ok())
                    .collect()
            })
            .unwrap_or_default();
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
        if let Some(dir) = self.cgroup_procs.as_deref().and_then(Path::parent) {
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
        self.ending = Some(Instant::now());
        self.listener = None;
        let _ = std::fs::remove_file(&self.socket_path);
        // The ends kept for a scored that did not come: no one will hear
        // of them, and the keeper leaves once the rest are gone.
        self.ranks.retain(|_, rank| rank.ended.is_none());
        self.kill_all();
    }
}
