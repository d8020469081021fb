//! A job's cgroups as its keeper holds them, so that a keeper that leaves
//! with no scored connected (its wait ran out, or its job was over when
//! its scored died) removes them: no scored may ever come back to.
//!
//! The keeper learns its job's cgroups from its first order (the files
//! its ranks write to join them: `.../scored-TAG/job-N/tasks`, in each
//! hierarchy) and opens, there and then, the directory holding the
//! daemon's (`.../`, which must be on a cgroup file system) and the
//! daemon's `scored-TAG` in it, without following a symbolic link, and
//! notes the inodes of `scored-TAG` and `job-N`. Removing is by those
//! handles and names, never by path, and only of directories with the
//! inodes noted: nothing renamed or linked into a path since (even by a
//! user to whom a cgroup above scored's is delegated) makes root remove
//! anything else, and nothing outside a cgroup file system is touched.
//! Only `rmdir`: a cgroup that still holds a process, or another cgroup,
//! is not removed (`EBUSY`, `ENOTEMPTY`).
//!
//! The daemon's `scored-TAG` goes too, once empty, if no live daemon is
//! recorded in the state directory (`instance.rs`). A scored that starts
//! meanwhile makes it again when it needs it (`actuator::cgroup`); a live
//! job's cgroup is never removed: it is its keeper's alone, and it keeps
//! `scored-TAG` from being removed while it is there.
#![forbid(unsafe_code)]

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{open, openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode, SFlag};
use nix::sys::statfs::{fstatfs, CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// How many times, 10 ms apart, a job's cgroup that still holds a
/// process (one killed, still exiting) is tried before it is left for
/// the next scored of the state directory, which removes it.
const BUSY_TRIES: u32 = 100;

const DIR_FLAGS: OFlag = OFlag::O_PATH
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// One hierarchy's cgroup of a job.
#[derive(Debug)]
struct Held {
    /// The directory holding the daemon's.
    above: OwnedFd,
    /// The daemon's (`scored-TAG`), its name and inode.
    daemon: OwnedFd,
    daemon_name: CString,
    daemon_ino: u64,
    /// The job's (`job-N`) name and inode.
    job_name: CString,
    job_ino: u64,
}

/// A job's cgroups, in each hierarchy it has one in.
#[derive(Debug, Default)]
pub struct JobCgroups {
    held: Vec<Held>,
}

impl JobCgroups {
    /// Holds the cgroups of `job` whose join files are `joins` (see the
    /// module's text). A join file that is not `.../scored-TAG/job-JOB/F`
    /// on a cgroup file system is left out, and said.
    pub fn open(job: u64, joins: &[&Path]) -> JobCgroups {
        let held = joins
            .iter()
            .filter_map(|join| match hold(job, join) {
                Ok(held) => Some(held),
                Err(error) => {
                    tracing::warn!(job, path = %join.display(), %error, "the keeper will not remove this cgroup of its job");
                    None
                }
            })
            .collect();
        JobCgroups { held }
    }

    /// Removes the job's cgroups (they must be empty: a process still
    /// exiting is waited for a little), then the daemon's directory of
    /// each hierarchy once it is empty, unless a daemon recorded in
    /// `state_dir` lives. `spare`: the job is over and its keeper was
    /// resting (its scored may keep the job's cgroups for a later job,
    /// `actuator::cgroup`): nothing is removed while that daemon lives.
    pub fn remove(&self, state_dir: Option<&Path>, spare: bool) {
        if self.held.is_empty() {
            return;
        }
        let owned = state_dir.is_some_and(owned);
        if owned && spare {
            return;
        }
        for held in &self.held {
            remove_job(held);
        }
        if owned {
            return;
        }
        for held in &self.held {
            let same = fstatat(
                &held.above,
                held.daemon_name.as_c_str(),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .is_ok_and(|stat| stat.st_ino == held.daemon_ino);
            if same {
                // Another job's cgroup, a spare or a new daemon's job in
                // it: not empty, and kept.
                let _ = unlinkat(
                    &held.above,
                    held.daemon_name.as_c_str(),
                    UnlinkatFlags::RemoveDir,
                );
            }
        }
    }
}

/// Whether a live daemon owns `state_dir`: the one recorded there lives
/// and is not exiting. A daemon killed closes its descriptors (a
/// keeper's link among them) before the kernel shows it dead, but after
/// it marks it exiting (`PF_EXITING` in the flags of /proc/PID/stat);
/// one that executes a new image (an in-place restart) is not exiting.
fn owned(state_dir: &Path) -> bool {
    let Some(daemon) = crate::instance::recorded(state_dir) else {
        return false;
    };
    let (Ok(boot_id), Ok(stat)) = (
        crate::instance::boot_id(),
        std::fs::read_to_string(format!("/proc/{}/stat", daemon.pid)),
    ) else {
        return false;
    };
    daemon.is_alive(&boot_id, Some(&stat)) && !exiting(&stat)
}

/// Whether the process of a /proc/PID/stat line is exiting (or the line
/// does not read): `PF_EXITING` in its flags, the ninth field.
fn exiting(stat: &str) -> bool {
    const PF_EXITING: u64 = 0x4;
    let flags = stat
        .rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().nth(6))
        .and_then(|flags| flags.parse::<u64>().ok());
    flags.is_none_or(|flags| flags & PF_EXITING != 0)
}

/// Removes one hierarchy's cgroup of the job, if it is still the one
/// noted.
fn remove_job(held: &Held) {
    for _ in 0..BUSY_TRIES {
        let same = fstatat(
            &held.daemon,
            held.job_name.as_c_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .is_ok_and(|stat| stat.st_ino == held.job_ino);
        if !same {
            return;
        }
        remove_rest(held);
        match unlinkat(
            &held.daemon,
            held.job_name.as_c_str(),
            UnlinkatFlags::RemoveDir,
        ) {
            Err(Errno::EBUSY) => std::thread::sleep(Duration::from_millis(10)),
            Ok(()) | Err(Errno::ENOENT) => return,
            Err(errno) => {
                tracing::warn!(job = ?held.job_name, %errno, "the keeper cannot remove its job's cgroup");
                return;
            }
        }
    }
    tracing::warn!(job = ?held.job_name, "the keeper's job's cgroup still holds a process; left for the next scored");
}

/// Removes the `rest` cgroup in the job's (`actuator::cgroup::REST`), if
/// there is one and the job's is still the one noted: a cgroup holding
/// another is not removed.
fn remove_rest(held: &Held) {
    let Ok(dir) = openat(
        &held.daemon,
        held.job_name.as_c_str(),
        DIR_FLAGS,
        Mode::empty(),
    ) else {
        return;
    };
    if fstat(&dir).is_ok_and(|stat| stat.st_ino == held.job_ino) {
        let _ = unlinkat(
            &dir,
            crate::actuator::cgroup::REST,
            UnlinkatFlags::RemoveDir,
        );
    }
}

/// Opens what [`Held`] holds of the cgroup whose join file is `join`.
fn hold(job: u64, join: &Path) -> io::Result<Held> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
    let job_dir = join.parent().ok_or_else(|| invalid("no job directory"))?;
    let daemon_dir = job_dir
        .parent()
        .ok_or_else(|| invalid("no daemon directory"))?;
    let above = daemon_dir
        .parent()
        .ok_or_else(|| invalid("nothing above the daemon's"))?;
    let job_name = job_dir.file_name().unwrap_or_default();
    let daemon_name = daemon_dir.file_name().unwrap_or_default();
    if job_name != OsStr::new(&format!("job-{job}")) {
        return Err(invalid("not this job's cgroup"));
    }
    if !daemon_name.as_bytes().starts_with(b"scored-") {
        return Err(invalid("not a daemon's cgroup"));
    }
    let above = open(above, DIR_FLAGS, Mode::empty())?;
    on_cgroup_fs(&above)?;
    let daemon = openat(&above, daemon_name, DIR_FLAGS, Mode::empty())?;
    on_cgroup_fs(&daemon)?;
    let daemon_ino = fstat(&daemon)?.st_ino;
    let stat = fstatat(&daemon, job_name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR {
        return Err(invalid("not a directory"));
    }
    let name = |name: &OsStr| CString::new(name.as_bytes()).map_err(|_| invalid("a NUL in a name"));
    Ok(Held {
        above,
        daemon,
        daemon_name: name(daemon_name)?,
        daemon_ino,
        job_name: name(job_name)?,
        job_ino: stat.st_ino,
    })
}

/// Whether `dir` is on a cgroup file system (v1 or v2).
fn on_cgroup_fs(dir: &impl AsFd) -> io::Result<()> {
    let kind = fstatfs(dir)?.filesystem_type();
    if kind == CGROUP_SUPER_MAGIC || kind == CGROUP2_SUPER_MAGIC {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not on a cgroup file system",
        ))
    }
}

#[cfg(test)]
mod tests;
