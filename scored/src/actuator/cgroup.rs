//! One cgroup per job, where the machine offers one: it holds every
//! descendant of the job, including processes that left its process groups
//! with setsid() or setpgid(), so they can be found, stopped and killed.
//!
//! This is a strengthening, never a requirement: without a writable cgroup
//! hierarchy (not root, or no freezer), descendants are found by walking
//! /proc from the job's processes. A process whose parent died before it
//! was first seen has lost that ancestry; it was reparented to scored (the
//! child subreaper) and is attributed to its job by its uid and the
//! `SCORE_JOBID` in its environment. One that also rewrote its environment
//! is missed while the daemon runs (it is neither stopped nor killed with
//! its job), and is killed only when scored exits (ARCHITECTURE.md, Faults).
//!
//! The cgroup v1 freezer hierarchy is used where mounted; otherwise a pure
//! cgroup v2 hierarchy at /sys/fs/cgroup. Membership is all we use.
#![forbid(unsafe_code)]

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::ids::JobId;

use super::procfs::parse_pids;

/// The daemon's own directory in a cgroup hierarchy.
#[derive(Debug)]
pub struct Cgroups {
    base: PathBuf,
}

impl Cgroups {
    /// Finds a writable hierarchy and creates the daemon's directory in it,
    /// named after the daemon's pid so that several daemons never share one.
    pub fn create(daemon_pid: u32) -> Option<Cgroups> {
        let candidates = [
            PathBuf::from("/sys/fs/cgroup/freezer"),
            PathBuf::from("/sys/fs/cgroup"),
        ];
        for root in candidates {
            let usable = root.join("cgroup.procs").exists()
                && (root.ends_with("freezer") || root.join("cgroup.controllers").exists());
            if !usable {
                continue;
            }
            remove_stale(&root);
            let base = root.join(format!("scored-{daemon_pid}"));
            match fs::create_dir(&base) {
                Ok(()) => return Some(Cgroups { base }),
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                    return Some(Cgroups { base })
                }
                Err(error) => {
                    tracing::debug!(path = %base.display(), %error, "no cgroup here");
                }
            }
        }
        None
    }

    /// The hierarchy directory in use.
    pub fn base(&self) -> &Path {
        &self.base
    }

    fn dir(&self, job: JobId) -> PathBuf {
        self.base.join(format!("job-{job}"))
    }

    /// Creates the job's cgroup; returns the path of its `cgroup.procs`, as
    /// a C string ready to be written between fork and exec.
    pub fn add_job(&self, job: JobId) -> io::Result<CString> {
        let dir = self.dir(job);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
        CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "cgroup path contains NUL"))
    }

    /// The processes in the job's cgroup.
    pub fn pids(&self, job: JobId) -> Vec<i32> {
        fs::read_to_string(self.dir(job).join("cgroup.procs"))
            .map(|text| parse_pids(&text))
            .unwrap_or_default()
    }

    /// Removes the job's cgroup; it must be empty.
    pub fn remove_job(&self, job: JobId) {
        let dir = self.dir(job);
        if let Err(error) = fs::remove_dir(&dir) {
            if error.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %dir.display(), %error, "failed to remove a job's cgroup");
            }
        }
    }
}

/// Removes the directories that daemons killed outright (SIGKILL, a
/// crash) left behind: `scored-PID` where no process PID exists. Only
/// empty cgroups can be removed, so one that still holds processes stays.
fn remove_stale(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix("scored-"))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let stale = Cgroups { base: entry.path() };
        tracing::info!(path = %stale.base.display(), "removing the cgroup of a daemon that is gone");
        // Dropping it removes its empty job directories, then itself.
        drop(stale);
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        if let Ok(entries) = fs::read_dir(&self.base) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    let _ = fs::remove_dir(entry.path());
                }
            }
        }
        let _ = fs::remove_dir(&self.base);
    }
}
