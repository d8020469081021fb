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
//! its job), and is killed only when scored exits.
//!
//! The hierarchy's directory is the state directory's (`scored-TAG`), not
//! a daemon's: jobs outlive a daemon killed with SIGKILL (their keepers
//! hold them), and the next daemon of the state directory takes their
//! cgroups over with them. What it does not take over (a job whose keeper
//! is gone) it kills, thawing it first, and removes; so it does with the
//! cgroups of older daemons, named `scored-TAG-PID`. A keeper that leaves
//! with no daemon connected removes its job's cgroups itself, and
//! `scored-TAG` once empty if no daemon owns the state directory
//! (`keeper::cgroups`); so a daemon keeps `scored-TAG` only while a job's
//! cgroup is in it (or until it exits), and makes it again when it is
//! gone.
//!
//! A job's cgroup that ended empty, never frozen and with no fork
//! refused is kept, under its job's name, for a later job, which renames
//! it to its own (v1 alone renames cgroups): making and removing a cgroup
//! costs the kernel more than a job of `true` costs the daemon, and an
//! array of thousands of short jobs made and removed one per element.
//!
//! The cgroup v1 freezer hierarchy is used where mounted; otherwise a pure
//! cgroup v2 hierarchy at /sys/fs/cgroup. Membership is what we use on the
//! fast path; the freezer (v1 `freezer.state`, v2 `cgroup.freeze`) holds a
//! switched-out job that something outside it keeps continuing with
//! SIGCONT, which a frozen process ignores until it is thawed.
//!
//! A job with hundreds of processes besides its ranks is switched by its
//! ranks alone; the others wait in a child cgroup, `job-N/rest`, frozen
//! while the job is switched out. Freezing or thawing goes over every
//! process of a cgroup (1.5 ms to freeze 3,000 sleeping ones, 1 ms to
//! thaw them), so it is done once the switch is over: the ranks hold the
//! job's place in the gang, and a rest that runs a little after they
//! stopped, or starts a little after they continued, takes no host from
//! another job. Processes forked since are moved into `rest` while the
//! whole job is frozen, when none of them can exit and have its pid
//! reused ([`Cgroups::hold_rest`]).
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::{BTreeSet, HashSet};
use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use scored_core::ids::JobId;

use super::max_job_processes;
use super::procfs::parse_pids;

/// How many cgroups of ended jobs are kept for later jobs.
const SPARES: usize = 8;

/// The child cgroup of a job's that holds its processes other than its
/// ranks, where its switches signal the ranks alone.
pub const REST: &str = "rest";

/// How many times, `FROZEN_WAIT` apart, a job's cgroup frozen to gather
/// its rest is read before the rest is left where it is: a process
/// running on another CPU takes a few microseconds to freeze.
const FROZEN_READS: u32 = 4;
const FROZEN_WAIT: std::time::Duration = std::time::Duration::from_micros(50);

/// The daemon's own directory in a cgroup hierarchy.
#[derive(Debug)]
pub struct Cgroups {
    base: PathBuf,
    /// The v1 freezer hierarchy (`freezer.state`), else v2 (`cgroup.freeze`).
    v1_freezer: bool,
    /// The daemon's directory in the v1 pids hierarchy, when the pids
    /// controller is mounted apart (v2 has it in `base`, when enabled).
    pids_base: Option<PathBuf>,
    /// Jobs whose cgroup this daemon made (or took from a spare) and never
    /// froze: what a later job may take once they end empty.
    fresh: RefCell<HashSet<JobId>>,
    /// Ended jobs whose cgroups, empty and thawed, with their limit of
    /// processes set and no fork refused, wait under their names for a
    /// later job ([`Cgroups::add_job`]).
    spares: RefCell<Vec<JobId>>,
}

impl Cgroups {
    /// Finds a writable hierarchy and creates (or finds) the state
    /// directory's directory in it, inside the daemon's own cgroup (so that
    /// under a service manager the jobs stay within the service), named by
    /// a tag of the state directory: one daemon at a time uses a state
    /// directory (`instance.rs`), and the next one takes over the jobs the
    /// last one left, never touching the cgroups of unrelated daemons.
    pub fn create(state_dir: &Path) -> Option<Cgroups> {
        let tag = state_tag(state_dir);
        let own_cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let own = &own_cgroups;
        let candidates = [
            (
                PathBuf::from("/sys/fs/cgroup/freezer"),
                own_path(own, Some("freezer")),
            ),
            (PathBuf::from("/sys/fs/cgroup"), own_path(own, None)),
        ];
        for (root, own) in candidates {
            let usable = root.join("cgroup.procs").exists()
                && (root.ends_with("freezer") || root.join("cgroup.controllers").exists());
            if !usable {
                continue;
            }
            let parent = root.join(own.trim_start_matches('/'));
            remove_stale(&parent, &tag);
            let base = parent.join(format!("scored-{tag}"));
            let v1_freezer = root.ends_with("freezer");
            match fs::create_dir(&base) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => {
                    tracing::debug!(path = %base.display(), %error, "no cgroup here");
                    continue;
                }
            }
            let pids_base = if v1_freezer {
                pids_hierarchy(&own_cgroups, &tag)
            } else {
                enable_pids(&base);
                None
            };
            // Made to see that the hierarchy takes it; kept only while it
            // holds a job's cgroup (one taken over): a daemon killed with
            // no job in a cgroup leaves nothing, and the first job's
            // cgroup makes it again (`make_job_dir`).
            for dir in std::iter::once(&base).chain(&pids_base) {
                let _ = fs::remove_dir(dir);
            }
            return Some(Cgroups {
                base,
                v1_freezer,
                pids_base,
                fresh: RefCell::new(HashSet::new()),
                spares: RefCell::new(Vec::new()),
            });
        }
        None
    }

    /// Whether the hierarchy is the v1 freezer's (else v2).
    pub fn v1_freezer(&self) -> bool {
        self.v1_freezer
    }

    /// The hierarchy directory in use.
    pub fn base(&self) -> &Path {
        &self.base
    }

    fn dir(&self, job: JobId) -> PathBuf {
        self.base.join(format!("job-{job}"))
    }

    /// Creates the job's cgroup, with its limit of processes where the
    /// pids controller is there; returns the files each rank writes to
    /// join it (the job's, and its v1 pids cgroup's when the pids
    /// controller is mounted apart: see [`join_path`]), as C strings ready
    /// to be written between fork and exec.
    pub fn add_job(&self, job: JobId) -> io::Result<(CString, Option<CString>)> {
        let dir = self.dir(job);
        if let Some(joins) = self.take_spare(job) {
            return Ok(joins);
        }
        // One that was there already (a job taken over) may be frozen.
        if make_job_dir(&self.base, &dir, !self.v1_freezer)? {
            self.fresh.borrow_mut().insert(job);
        }
        let limit = max_job_processes().to_string();
        let pids_procs = match &self.pids_base {
            Some(pids_base) => {
                let pids_dir = pids_base.join(format!("job-{job}"));
                make_job_dir(pids_base, &pids_dir, false)?;
                fs::write(pids_dir.join("pids.max"), &limit)?;
                Some(join_path(&pids_dir, true)?)
            }
            None => {
                if dir.join("pids.max").exists() {
                    fs::write(dir.join("pids.max"), &limit)?;
                }
                None
            }
        };
        Ok((join_path(&dir, self.v1_freezer)?, pids_procs))
    }

    /// A spare cgroup (see [`Cgroups::remove_job`]) renamed to `job`'s,
    /// in each hierarchy: the files its ranks write to join it. `None`
    /// when there is none, or a rename failed (the spare is then removed).
    fn take_spare(&self, job: JobId) -> Option<(CString, Option<CString>)> {
        let spare = self.spares.borrow_mut().pop()?;
        let renamed = fs::rename(self.dir(spare), self.dir(job)).and_then(|()| {
            if let Some(pids_base) = &self.pids_base {
                let pids = |id: JobId| pids_base.join(format!("job-{id}"));
                if let Err(error) = fs::rename(pids(spare), pids(job)) {
                    let _ = fs::rename(self.dir(job), self.dir(spare));
                    return Err(error);
                }
            }
            Ok(())
        });
        if let Err(error) = renamed {
            tracing::debug!(job = %job, spare = %spare, %error, "cannot rename a spare cgroup; making a new one");
            self.remove_dirs(spare);
            return None;
        }
        self.fresh.borrow_mut().insert(job);
        let pids_procs = match &self.pids_base {
            Some(pids_base) => Some(join_path(&pids_base.join(format!("job-{job}")), true).ok()?),
            None => None,
        };
        Some((join_path(&self.dir(job), self.v1_freezer).ok()?, pids_procs))
    }

    /// The file a rank writes to join the job's v1 pids cgroup, if it has one.
    pub fn pids_procs(&self, job: JobId) -> Option<CString> {
        let dir = self.pids_base.as_ref()?.join(format!("job-{job}"));
        dir.is_dir().then(|| join_path(&dir, true).ok()).flatten()
    }

    /// Whether the pids controller refused a fork of the job's (its
    /// `pids.events` counts one at its `pids.max`).
    pub fn forks_refused(&self, job: JobId) -> bool {
        let dir = match &self.pids_base {
            Some(pids_base) => pids_base.join(format!("job-{job}")),
            None => self.dir(job),
        };
        fs::read_to_string(dir.join("pids.events")).is_ok_and(|events| {
            events
                .lines()
                .filter_map(|line| line.strip_prefix("max "))
                .any(|count| count.trim() != "0")
        })
    }

    /// Sends SIGKILL to every process of the job's cgroup, each through a
    /// pidfd taken before its membership is checked (so that a pid reused
    /// meanwhile is never signalled); holds no descriptor afterwards.
    /// Returns how many processes the cgroup listed.
    pub fn kill_job(&self, job: JobId) -> usize {
        let dir = self.dir(job);
        let marker = format!(
            "/{}/job-{job}",
            self.base.file_name().unwrap_or_default().to_string_lossy()
        );
        kill_listed(&dir, &marker, false)
            + kill_listed(&dir.join(REST), &format!("{marker}/{REST}"), false)
    }

    /// The processes in the job's cgroup (and its `rest`).
    pub fn pids(&self, job: JobId) -> Vec<i32> {
        let dir = self.dir(job);
        let mut pids = self.pids_of(&dir);
        pids.extend(self.pids_of(&dir.join(REST)));
        pids
    }

    /// Freezes (or thaws) every process of the job's cgroup. Freezing is
    /// asynchronous: [`Cgroups::is_frozen`] says when it is complete.
    pub fn set_frozen(&self, job: JobId, frozen: bool) -> io::Result<()> {
        if frozen {
            self.fresh.borrow_mut().remove(&job);
        }
        write_frozen(&self.dir(job), self.v1_freezer, frozen)
    }

    /// Whether every process of the job's cgroup is frozen.
    pub fn is_frozen(&self, job: JobId) -> bool {
        dir_frozen(&self.dir(job), self.v1_freezer)
    }

    /// Whether the job has a `rest` cgroup (its switches signal its ranks
    /// alone).
    pub fn has_rest(&self, job: JobId) -> bool {
        self.dir(job).join(REST).is_dir()
    }

    /// Whether the job's `rest` cgroup was asked to freeze.
    pub fn rest_freeze_asked(&self, job: JobId) -> bool {
        freeze_asked(&self.dir(job).join(REST))
    }

    /// Thaws the job's `rest` cgroup, if it has one.
    pub fn release_rest(&self, job: JobId) -> io::Result<()> {
        let rest = self.dir(job).join(REST);
        match write_frozen(&rest, self.v1_freezer, false) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
            done => done,
        }
    }

    /// Holds a switched-out job's processes other than its `ranks`: its
    /// `rest` cgroup (made the first time) is frozen, and any other
    /// process found in the job's own cgroup is moved there. That move
    /// is by pid, so it is made only while the job's cgroup reads frozen:
    /// none of its processes can then exit, be reaped and have its pid
    /// taken by a process of someone else's. `frozen`: the job's cgroup
    /// is frozen already (and stays so). Returns whether the job's
    /// cgroup is left frozen: when a process in it would not freeze at
    /// once, or would not move, it is held by that freeze until the
    /// job's continue thaws it. An error (the rest could not be frozen,
    /// nor the job's cgroup) leaves the job's cgroup as it was.
    pub fn hold_rest(&self, job: JobId, ranks: &BTreeSet<i32>, frozen: bool) -> io::Result<bool> {
        let dir = self.dir(job);
        let rest = dir.join(REST);
        match fs::create_dir(&rest) {
            Err(error) if error.kind() != io::ErrorKind::AlreadyExists => return Err(error),
            _ => {}
        }
        self.fresh.borrow_mut().remove(&job);
        write_frozen(&rest, self.v1_freezer, true)?;
        let others = |pids: Vec<i32>| -> Vec<i32> {
            pids.into_iter()
                .filter(|pid| !ranks.contains(pid))
                .collect()
        };
        if others(self.pids_of(&dir)).is_empty() {
            return Ok(frozen);
        }
        if !frozen {
            write_frozen(&dir, self.v1_freezer, true)?;
        }
        // From here on the job's cgroup is frozen: what fails leaves it so.
        let mut reads = 0;
        while !dir_frozen(&dir, self.v1_freezer) {
            reads += 1;
            if reads == FROZEN_READS {
                return Ok(true);
            }
            std::thread::sleep(FROZEN_WAIT);
        }
        let Ok(procs) = fs::OpenOptions::new()
            .write(true)
            .open(rest.join("cgroup.procs"))
        else {
            return Ok(true);
        };
        let mut moved_all = true;
        for pid in others(self.pids_of(&dir)) {
            match (&procs).write_all(pid.to_string().as_bytes()) {
                Ok(()) => {}
                Err(error) if error.raw_os_error() == Some(libc::ESRCH) => {}
                Err(error) => {
                    tracing::debug!(job = %job, pid, %error, "cannot move a process into the job's rest");
                    moved_all = false;
                }
            }
        }
        if frozen || !moved_all {
            return Ok(true);
        }
        Ok(write_frozen(&dir, self.v1_freezer, false).is_err())
    }

    fn pids_of(&self, dir: &Path) -> Vec<i32> {
        fs::read_to_string(dir.join("cgroup.procs"))
            .map(|text| parse_pids(&text))
            .unwrap_or_default()
    }

    /// Whether the job's cgroup was asked to freeze (frozen, or still
    /// freezing) and not thawed since.
    pub fn freeze_asked(&self, job: JobId) -> bool {
        freeze_asked(&self.dir(job))
    }

    /// Kills what is left in the cgroups of jobs not in `held` (a dead
    /// daemon's jobs whose keepers are gone), and removes them.
    pub fn remove_unheld(&self, held: &[JobId]) {
        let Ok(entries) = fs::read_dir(&self.base) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(job) = name
                .to_str()
                .and_then(|name| name.strip_prefix("job-"))
                .and_then(|id| id.parse::<u64>().ok())
            else {
                continue;
            };
            let kept = held.contains(&JobId(job)) || self.spares.borrow().contains(&JobId(job));
            if kept || !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                continue;
            }
            kill_members(&entry.path());
            let _ = fs::remove_dir(entry.path());
            if let Some(pids_base) = &self.pids_base {
                let _ = fs::remove_dir(pids_base.join(format!("job-{job}")));
            }
        }
        // Kept while a job's cgroup is in it (see `Cgroups::create`).
        for dir in std::iter::once(&self.base).chain(&self.pids_base) {
            let _ = fs::remove_dir(dir);
        }
    }

    /// Removes the job's cgroup; it must be empty. `clean`: its job ended
    /// with the cgroup found empty and no fork refused, so that, if this
    /// daemon made it and never froze it, it is kept for a later job
    /// while fewer than [`SPARES`] are (v1 only, which renames cgroups).
    pub fn remove_job(&self, job: JobId, clean: bool) {
        let fresh = self.fresh.borrow_mut().remove(&job);
        if clean && fresh && self.v1_freezer && self.spares.borrow().len() < SPARES {
            self.spares.borrow_mut().push(job);
            return;
        }
        // A frozen cgroup's processes could never die and leave it.
        if !fresh {
            let _ = self.release_rest(job);
            let _ = self.set_frozen(job, false);
        }
        self.remove_dirs(job);
    }

    /// Removes the job's cgroup directories, in each hierarchy.
    fn remove_dirs(&self, job: JobId) {
        if let Some(pids_base) = &self.pids_base {
            let _ = fs::remove_dir(pids_base.join(format!("job-{job}")));
        }
        let dir = self.dir(job);
        let _ = fs::remove_dir(dir.join(REST));
        if let Err(error) = fs::remove_dir(&dir) {
            if error.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %dir.display(), %error, "failed to remove a job's cgroup");
            }
        }
    }
}

/// A short tag of a state directory (FNV-1a of its canonical path), so that
/// the cgroups of one installation can be told from another's.
fn state_tag(state_dir: &Path) -> String {
    let path = fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    let mut hash: u32 = 0x811c_9dc5;
    for byte in path.as_os_str().as_bytes() {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{hash:08x}")
}

/// The cgroup path of this process in a hierarchy: the v1 line naming
/// `controller`, or the v2 line (`0::PATH`) when `controller` is `None`.
fn own_path(proc_self_cgroup: &str, controller: Option<&str>) -> String {
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let matches = match controller {
            Some(name) => controllers.split(',').any(|c| c == name),
            None => id == "0" && controllers.is_empty(),
        };
        if matches {
            return path.to_string();
        }
    }
    "/".to_string()
}

/// Cleans up after daemons of this installation that died without doing
/// it themselves (killed with SIGKILL): every process still in one of
/// their job cgroups is a descendant of a job that nothing owns any more;
/// it is killed, then the directories are removed.
///
/// Every `scored-TAG-PID` is such a leftover: a daemon starts only once
/// `instance::claim` has found that no daemon of its state directory is
/// alive, judged by boot id and start time rather than by whether the pid
/// is in /proc (a killed daemon stays there as a zombie until reaped, and
/// its pid may have been reused, even by this very daemon).
fn remove_stale(parent: &Path, tag: &str) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let prefix = format!("scored-{tag}-");
        let Some(_pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(prefix.as_str()))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        if let Ok(jobs) = fs::read_dir(&dir) {
            for job in jobs.flatten() {
                if job.file_type().is_ok_and(|kind| kind.is_dir()) {
                    kill_members(&job.path());
                    let _ = fs::remove_dir(job.path());
                }
            }
        }
        if fs::remove_dir(&dir).is_ok() {
            tracing::info!(path = %dir.display(), "removed the cgroup of a daemon that is gone");
        }
    }
}

/// Kills the processes of an abandoned job cgroup (its `rest` too, which
/// it removes) and waits (briefly) for it to empty. Each process is held
/// through a pidfd and signalled only if it is still in that cgroup, so a
/// pid reused meanwhile is never touched.
fn kill_members(dir: &Path) {
    // The tail a member's /proc/PID/cgroup line ends with: scored-PID/job-N.
    let parts: Vec<String> = dir
        .iter()
        .rev()
        .take(2)
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    let marker = match parts.as_slice() {
        [job, daemon] => format!("/{daemon}/{job}"),
        _ => return,
    };
    let rest = dir.join(REST);
    let rest_marker = format!("{marker}/{REST}");
    for _ in 0..100 {
        let listed = kill_listed(dir, &marker, true) + kill_listed(&rest, &rest_marker, true);
        if listed == 0 {
            let _ = fs::remove_dir(&rest);
            return;
        }
        // The dead daemon may have frozen the job (a rank continued from
        // outside while switched out, or its rest while switched out): a
        // frozen process keeps its SIGKILL, the parent-death signal
        // included, pending until it is thawed. Thawed only now, it dies
        // before it runs a single instruction.
        thaw(&rest);
        thaw(dir);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Sends SIGKILL to each process that the cgroup `dir` lists, through a
/// pidfd, once its /proc/PID/cgroup says it is a member (a line ending
/// with `marker`): the pidfd pins the process before that check, so a pid
/// reused meanwhile is never signalled. Returns how many were listed.
/// `left_by_dead` logs each as left by a daemon that is gone.
fn kill_listed(dir: &Path, marker: &str, left_by_dead: bool) -> usize {
    let pids = fs::read_to_string(dir.join("cgroup.procs"))
        .map(|text| parse_pids(&text))
        .unwrap_or_default();
    for &pid in &pids {
        let Ok(pidfd) = super::sys::pidfd_open(pid) else {
            continue;
        };
        let member = fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .is_ok_and(|text| text.lines().any(|line| line.ends_with(marker)));
        if member {
            if left_by_dead {
                tracing::info!(pid, cgroup = %dir.display(), "killing a process left by a daemon that is gone");
            }
            let _ = super::sys::pidfd_send_signal(&pidfd, libc::SIGKILL);
        }
    }
    pids.len()
}

/// Where the v1 pids controller is mounted apart.
const V1_PIDS: &str = "/sys/fs/cgroup/pids";

/// The daemon's directory in the v1 pids hierarchy, created (after
/// cleaning those of dead daemons of its installation), or `None` where
/// that hierarchy is not there or not writable.
fn pids_hierarchy(own_cgroups: &str, tag: &str) -> Option<PathBuf> {
    let root = Path::new(V1_PIDS);
    if !root.join("cgroup.procs").exists() {
        return None;
    }
    let parent = root.join(own_path(own_cgroups, Some("pids")).trim_start_matches('/'));
    remove_stale(&parent, tag);
    let dir = parent.join(format!("scored-{tag}"));
    match fs::create_dir(&dir) {
        Ok(()) => Some(dir),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Some(dir),
        Err(error) => {
            tracing::debug!(path = %dir.display(), %error, "no pids cgroup here");
            None
        }
    }
}

/// The file of `dir` a rank writes `0` to between fork and exec to join
/// that cgroup, as a C string. In a v1 hierarchy, `tasks`: the rank is
/// one thread there (the daemon has no other), so moving that thread moves
/// the whole process, and the kernel moves the caller's own thread without
/// the machine-wide lock that a write to `cgroup.procs` takes, whose
/// release waits for an RCU grace period (0.4 ms idle, tens of ms under
/// load, paid by every launch). v2 has no `tasks`, and its
/// `cgroup.threads` is refused outside threaded cgroups.
fn join_path(dir: &Path, v1: bool) -> io::Result<CString> {
    let file = if v1 { "tasks" } else { "cgroup.procs" };
    CString::new(dir.join(file).as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "cgroup path contains NUL"))
}

/// Makes a job's cgroup `dir` in the daemon's directory `base`, and
/// `base` too when it is not there: the daemon keeps it only while it
/// holds a job's cgroup, and a keeper that leaves with no daemon removes
/// it once empty (`keeper::cgroups`), perhaps just as this daemon starts.
/// `v2`: `base` is a v2 cgroup, whose jobs' cgroups get the pids
/// controller. Whether `dir` was made (not there already).
fn make_job_dir(base: &Path, dir: &Path, v2: bool) -> io::Result<bool> {
    let mut tries = 0;
    loop {
        match fs::create_dir(dir) {
            Ok(()) => return Ok(true),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(error) if error.kind() == io::ErrorKind::NotFound && tries < 3 => {
                tries += 1;
                match fs::create_dir(base) {
                    Ok(()) if v2 => enable_pids(base),
                    Err(error) if error.kind() != io::ErrorKind::AlreadyExists => {
                        return Err(error)
                    }
                    _ => {}
                }
            }
            Err(error) => return Err(error),
        }
    }
}

/// Enables the pids controller, where the daemon's v2 cgroup passes it
/// on, for the jobs' cgroups in `base`.
fn enable_pids(base: &Path) {
    let _ = fs::write(base.join("cgroup.subtree_control"), "+pids");
}

/// Freezes (or thaws) the cgroup `dir`, of the v1 freezer hierarchy
/// (`freezer.state`) or v2 (`cgroup.freeze`).
fn write_frozen(dir: &Path, v1: bool, frozen: bool) -> io::Result<()> {
    let (file, value): (&str, &[u8]) = match (v1, frozen) {
        (true, true) => ("freezer.state", b"FROZEN"),
        (true, false) => ("freezer.state", b"THAWED"),
        (false, true) => ("cgroup.freeze", b"1"),
        (false, false) => ("cgroup.freeze", b"0"),
    };
    fs::write(dir.join(file), value)
}

/// Whether every process of the cgroup `dir` (and of the cgroups below
/// it) is frozen.
fn dir_frozen(dir: &Path, v1: bool) -> bool {
    if v1 {
        fs::read_to_string(dir.join("freezer.state")).is_ok_and(|state| state.trim() == "FROZEN")
    } else {
        fs::read_to_string(dir.join("cgroup.events"))
            .is_ok_and(|events| events.lines().any(|line| line.trim() == "frozen 1"))
    }
}

/// Whether the cgroup `dir` was asked to freeze (frozen, or still
/// freezing), whichever freezer it has. A process of such a cgroup that
/// sleeps uninterruptibly (`D`: frozen, or in a system call) freezes
/// before it can return to user code.
pub fn freeze_asked(dir: &Path) -> bool {
    let read = |file: &str| fs::read_to_string(dir.join(file)).ok();
    match (read("freezer.state"), read("cgroup.freeze")) {
        (Some(state), _) => state.trim() != "THAWED",
        (None, Some(value)) => value.trim() == "1",
        (None, None) => false,
    }
}

/// Thaws an abandoned job cgroup, whichever freezer it has (v1
/// `freezer.state`, v2 `cgroup.freeze`); files the cgroup does not have
/// are left alone.
fn thaw(dir: &Path) {
    for (file, value) in [("freezer.state", "THAWED"), ("cgroup.freeze", "0")] {
        let path = dir.join(file);
        if path.exists() {
            let _ = fs::write(&path, value);
        }
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for base in std::iter::once(&self.base).chain(&self.pids_base) {
            if let Ok(entries) = fs::read_dir(base) {
                for entry in entries.flatten() {
                    if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                        let _ = fs::remove_dir(entry.path().join(REST));
                        let _ = fs::remove_dir(entry.path());
                    }
                }
            }
            let _ = fs::remove_dir(base);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_paths_from_proc_self_cgroup() {
        let text = "9:name=systemd:/\n6:freezer:/jobs/a\n4:memory,cpu:/x\n0::/system.slice/scored.service\n";
        assert_eq!(own_path(text, Some("freezer")), "/jobs/a");
        assert_eq!(own_path(text, Some("cpu")), "/x");
        assert_eq!(own_path(text, None), "/system.slice/scored.service");
        assert_eq!(own_path("", None), "/");
    }

    #[test]
    fn a_jobs_cgroup_makes_the_daemons_directory_again_once_it_is_gone() {
        let dir = std::env::temp_dir().join(format!("scored-cgroup-base-{}", std::process::id()));
        let base = dir.join("scored-00000000");
        let job = base.join("job-1");
        fs::create_dir_all(&dir).expect("a directory");
        let made = make_job_dir(&base, &job, false);
        let again = make_job_dir(&base, &job, false);
        let there = job.is_dir();
        let _ = fs::remove_dir_all(&dir);
        assert!(made.expect("made"), "the job's directory was not made");
        assert!(
            !again.expect("found"),
            "a directory there was taken as made"
        );
        assert!(there);
    }

    #[test]
    fn state_tags_tell_installations_apart() {
        let a = state_tag(Path::new("/nonexistent/a/state"));
        assert_eq!(a.len(), 8);
        assert_eq!(a, state_tag(Path::new("/nonexistent/a/state")));
        assert_ne!(a, state_tag(Path::new("/nonexistent/b/state")));
    }
}
