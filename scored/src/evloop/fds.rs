//! Descriptors: the daemon's limit raised at start-up with a reserve kept
//! for its own files, and the descriptors clients pass with a submission
//! kept once per open file (jobs launched from one terminal share them).

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd};
use std::rc::{Rc, Weak};

use crate::closer::UserFd;

/// The descriptor limits the daemon found and what it raised them to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimits {
    /// Soft and hard RLIMIT_NOFILE at start, which jobs get back before exec.
    pub original: (u64, u64),
    /// The soft limit the daemon now runs with.
    pub current: u64,
}

/// Raises the daemon's descriptor limit: every admitted job holds its
/// client's socket and three descriptors. Root raises the hard limit too
/// (up to `fs.nr_open`, at most 2^20); others go up to their hard limit.
pub fn raise_fd_limit() -> FdLimits {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return FdLimits {
            original: (1024, 1024),
            current: 1024,
        };
    };
    let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(hard)
        .min(1 << 20);
    let wanted = hard.max(ceiling);
    let current = if setrlimit(Resource::RLIMIT_NOFILE, wanted, wanted).is_ok() {
        wanted
    } else if setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    FdLimits {
        original: (soft, hard),
        current,
    }
}

/// Keeps one descriptor per open file description among the stdio that
/// clients pass: jobs launched from one terminal share its description, so
/// ten thousand queued jobs need ten thousand sockets, not forty thousand
/// descriptors. Two descriptors are the same description when
/// `kcmp(KCMP_FILE)` says so, which is exact; without kcmp nothing is
/// shared. Files are told apart first by device and inode as the kernel
/// has them cached (`sys::cached_identity`): an `fstat` could make the
/// loop wait for the server of a user's FUSE or NFS file. A copy found
/// shared is closed beside the one kept (`UserFd::close_beside_held_copy`)
/// where that cannot wait, so that a job started from a terminal, whose
/// stdin, stdout and stderr are one description, costs the closer no
/// fork.
#[derive(Default)]
pub(super) struct FdPool {
    pub(super) by_inode: HashMap<(u64, u64), Vec<Weak<UserFd>>>,
    pub(super) kcmp_missing: bool,
}

impl FdPool {
    pub(super) fn intern(&mut self, fd: UserFd) -> Rc<UserFd> {
        if self.kcmp_missing {
            return Rc::new(fd);
        }
        let Ok((dev, ino, _)) = crate::sys::cached_identity(fd.as_fd()) else {
            return Rc::new(fd);
        };
        let key = (dev, ino);
        let bucket = self.by_inode.entry(key).or_default();
        bucket.retain(|weak| weak.strong_count() > 0);
        for weak in bucket.iter() {
            let Some(existing) = weak.upgrade() else {
                continue;
            };
            match crate::sys::same_description(existing.as_raw_fd(), fd.as_raw_fd()) {
                Ok(true) => {
                    fd.close_beside_held_copy();
                    return existing;
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::debug!(%error, "kcmp unavailable; passed descriptors are not shared");
                    self.kcmp_missing = true;
                    break;
                }
            }
        }
        let shared = Rc::new(fd);
        bucket.push(Rc::downgrade(&shared));
        if bucket.len() == 1 && self.by_inode.len() > 4096 {
            self.by_inode
                .retain(|_, bucket| bucket.iter().any(|weak| weak.strong_count() > 0));
        }
        shared
    }
}

pub(super) fn spare_descriptor() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// Checks the stdin of a `-pty` submission: it must be a terminal that
/// is no session's controlling terminal, which the job's first rank can
/// then take without taking it from anyone (scrun sends the slave of a
/// pseudo-terminal it has just opened).
pub(super) fn check_job_terminal(stdin: &UserFd) -> Result<(), String> {
    // Only a character device can be a terminal; anything else is not
    // asked (an ioctl on a user's FUSE file would go to its server).
    let is_char_device = crate::sys::cached_identity(stdin.as_fd())
        .is_ok_and(|(_, _, mode)| mode & libc::S_IFMT == libc::S_IFCHR);
    if !is_char_device || !nix::unistd::isatty(stdin).unwrap_or(false) {
        return Err("-pty: the standard input sent with the job is not a terminal".into());
    }
    match crate::sys::terminal_session(stdin.as_fd()) {
        Ok(None) => Ok(()),
        Ok(Some(session)) => Err(format!(
            "-pty: the terminal sent with the job is already the controlling terminal of session {session}"
        )),
        Err(error) => Err(format!("-pty: cannot inspect the terminal sent with the job: {error}")),
    }
}
