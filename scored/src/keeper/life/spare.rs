//! A keeper between jobs: once its job is over and nothing of it is left,
//! it rests (lets go of all of it and says it is idle) rather than end,
//! and scored may give it its next job (`Adopt`), sparing that launch the
//! zygote's fork and a keeper's set-up.
#![forbid(unsafe_code)]

use std::os::fd::AsRawFd;
use std::path::Path;

use super::{Keeper, LISTENER};
use crate::keeper::order::JobFds;
use crate::keeper::FromKeeper;
use crate::sys;

impl Keeper {
    /// Whether, its job over, it may keep another rather than end: its
    /// link is the zygote's, everything it had to say is said, it has no
    /// child left (no descendant of the job came to it and lives), and
    /// what it holds of the job's descriptors closes at once.
    pub(super) fn may_rest(&self) -> bool {
        self.spare
            && self.link.is_some()
            && self.ending.is_none()
            && self.outbox.is_empty()
            && self.unsent.is_empty()
            && self.fds.as_ref().is_none_or(JobFds::close_at_once)
            && matches!(sys::has_children(), Ok(false))
    }

    /// Its job is over: it lets go of all of it (descriptors, socket,
    /// state) and says it is idle; scored keeps it for the next job, or
    /// closes the link, and it ends.
    pub(super) fn rest(&mut self) {
        // Its socket keeps listening under a name of no job (a scored
        // taking over looks for `ID.sock` alone, and is refused while the
        // zygote's link holds the keeper): renamed, not made again, for
        // the next job.
        let idle = self.sockets().join(format!("idle-{}.sock", self.pid));
        if self.listener.is_some() && std::fs::rename(&self.socket_path, &idle).is_ok() {
            self.socket_path = idle;
        } else {
            if let Some(listener) = self.listener.take() {
                let _ = sys::epoll_remove(&self.epoll, listener.as_raw_fd());
            }
            let _ = std::fs::remove_file(&self.socket_path);
        }
        self.fds = None;
        self.in_flight = 0;
        self.reaped_cpu_us = 0;
        self.reaped_peak.clear();
        self.released = false;
        // Its job's cgroups stay held: with its scored gone, it removes
        // them as it leaves (`leave_files`), unless scored gave them to
        // a later job (renamed to that job's name) or the next launch
        // names this keeper's next cgroups.
        self.cgroup_procs = None;
        self.described = (0, Vec::new(), String::new());
        self.switch_serial = 0;
        self.switched_out = false;
        self.stopping = None;
        self.pending.clear();
        self.restopped.clear();
        // The next job's scored gives it a pipe of its own.
        self.notes = None;
        self.noted = 0;
        self.drop_switch_pipes();
        self.resting = true;
        self.title.set("scored keeper, idle");
        self.unsent.push(FromKeeper::Idle);
        self.flush();
    }

    /// scored's `Adopt`: it keeps `job` from now on, as a keeper the
    /// zygote made for it would.
    pub(super) fn adopt(&mut self, job: u64) {
        self.job = job;
        self.resting = false;
        self.adopting = true;
    }

    /// What the keeper's `Adopt` changes outside it, its title and the
    /// name of its socket: once the first ranks of the job's order are on
    /// their way, as the keeper waits for their execs (its title and
    /// name are read by people and by a daemon that takes over, neither
    /// of which needs them within that millisecond), and before anything
    /// else of the job.
    pub(super) fn settle(&mut self) {
        if std::mem::take(&mut self.adopting) {
            self.settle_adoption();
        }
        self.open_cgroups();
    }

    fn settle_adoption(&mut self) {
        let job = self.job;
        self.title.set(&format!("scored keeper of job {job}"));
        let path = self.sockets().join(format!("{job}.sock"));
        if self.listener.is_some() && std::fs::rename(&self.socket_path, &path).is_ok() {
            self.socket_path = path;
            return;
        }
        if let Some(listener) = self.listener.take() {
            let _ = sys::epoll_remove(&self.epoll, listener.as_raw_fd());
        }
        let _ = std::fs::remove_file(&self.socket_path);
        self.socket_path = path;
        let _ = std::fs::remove_file(&self.socket_path);
        match crate::keeper::listen(&self.socket_path) {
            Ok(listener) => {
                if sys::epoll_add(&self.epoll, listener.as_raw_fd(), LISTENER).is_ok() {
                    self.listener = Some(listener);
                }
            }
            Err(error) => {
                // Its job runs; only a takeover after a crash of scored
                // would not find it.
                tracing::error!(job, %error, "a keeper cannot listen for a scored that takes over");
            }
        }
    }

    /// The directory of the keepers' sockets.
    fn sockets(&self) -> std::path::PathBuf {
        self.socket_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }
}
