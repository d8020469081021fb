//! The descriptors a submission carries, laid out as the protocol says
//! (`Submit::descriptor_count`): the standard ones the client had open
//! (stdin, stdout, stderr, each absent when closed), then the others it
//! passes on, numbered by `Submit::fds`. They become the job's
//! [`JobStdio`], each interned in the loop's `FdPool` so that jobs launched
//! from one terminal keep one descriptor per open file; last, the ranks'
//! PMI descriptors (`Submit::pmi_ranks` for each stage), each used once.
//!
//! The submission validator has checked the numbers; the loop has checked
//! that the count matches. Nothing here reads or writes a descriptor.
#![forbid(unsafe_code)]

use std::os::fd::RawFd;

use super::fds::FdPool;
use crate::actuator::{JobStdio, PmiFds};
use crate::closer::UserFd;

/// Builds the job's descriptors from those the frame carried, in order.
/// `None` if there are fewer than the layout needs (the caller checked the
/// count, so only a bug gets here).
pub(super) fn job_stdio(
    fds: Vec<UserFd>,
    closed: &[i32],
    numbers: &[i32],
    pmi_ranks: usize,
    pmix: Option<String>,
    controlling_terminal: bool,
    pool: &mut FdPool,
) -> Option<JobStdio> {
    let mut fds = fds.into_iter();
    let mut standard = [None, None, None];
    for (fd, slot) in standard.iter_mut().enumerate() {
        if !closed.contains(&(fd as i32)) {
            *slot = Some(pool.intern(fds.next()?));
        }
    }
    let inherited = numbers
        .iter()
        .map(|&number| Some((number as RawFd, pool.intern(fds.next()?))))
        .collect::<Option<Vec<_>>>()?;
    let pmi = PmiFds::new(pmi_ranks, fds.map(Some).collect()).with_pmix(pmix);
    let [stdin, stdout, stderr] = standard;
    Some(JobStdio {
        stdin,
        stdout,
        stderr,
        controlling_terminal,
        inherited,
        pmi,
    })
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    fn pipes(n: usize) -> (Vec<UserFd>, Vec<RawFd>) {
        let mut fds = Vec::new();
        for _ in 0..n.div_ceil(2) {
            let (read, write) = nix::unistd::pipe().unwrap();
            fds.push(UserFd::new(read, 1000));
            fds.push(UserFd::new(write, 1000));
        }
        fds.truncate(n);
        let raw = fds.iter().map(AsRawFd::as_raw_fd).collect();
        (fds, raw)
    }

    #[test]
    fn closed_standard_descriptors_are_skipped_and_the_rest_are_numbered() {
        let mut pool = FdPool::default();
        // stdout closed: stdin, stderr, then 3 and 9.
        let (fds, raw) = pipes(4);
        let stdio = job_stdio(fds, &[1], &[3, 9], 0, None, false, &mut pool).unwrap();
        assert_eq!(stdio.stdin.as_ref().map(|fd| fd.as_raw_fd()), Some(raw[0]));
        assert!(stdio.stdout.is_none());
        assert_eq!(stdio.stderr.as_ref().map(|fd| fd.as_raw_fd()), Some(raw[1]));
        let passed: Vec<(RawFd, RawFd)> = stdio
            .inherited
            .iter()
            .map(|(number, fd)| (*number, fd.as_raw_fd()))
            .collect();
        assert_eq!(passed, vec![(3, raw[2]), (9, raw[3])]);
        // Too few for the layout.
        let (fds, _) = pipes(2);
        assert!(job_stdio(fds, &[], &[3], 0, None, false, &mut pool).is_none());
        // Two PMI descriptors after the standard ones: each taken once.
        let (fds, raw) = pipes(5);
        let stdio = job_stdio(fds, &[], &[], 1, None, false, &mut pool).unwrap();
        assert_eq!(stdio.pmi.raw(), vec![raw[3], raw[4]]);
        assert_eq!(stdio.pmi.take(1, 0).map(|fd| fd.as_raw_fd()), Some(raw[4]));
        assert!(stdio.pmi.take(1, 0).is_none() && stdio.pmi.take(0, 1).is_none());
        assert_eq!(stdio.pmi.raw(), vec![raw[3], -1]);
    }

    /// stdin, stdout and stderr of one terminal (here, one pipe's end
    /// thrice): one descriptor is kept, and the other two copies are
    /// closed in the daemon, not sent to the closer.
    #[test]
    fn copies_of_one_description_are_kept_once_and_closed_without_the_closer() {
        crate::closer::queue_only();
        let mut pool = FdPool::default();
        let (read, write) = nix::unistd::pipe().unwrap();
        let copies: Vec<UserFd> = (0..3)
            .map(|_| UserFd::new(write.try_clone().unwrap(), 1000))
            .collect();
        let raw: Vec<RawFd> = copies.iter().map(AsRawFd::as_raw_fd).collect();
        drop(write);
        let stdio = job_stdio(copies, &[], &[], 0, None, false, &mut pool).unwrap();
        let kept = |fd: &Option<std::rc::Rc<UserFd>>| fd.as_ref().map(|fd| fd.as_raw_fd());
        assert_eq!(kept(&stdio.stdin), Some(raw[0]));
        assert_eq!(kept(&stdio.stdout), Some(raw[0]));
        assert_eq!(kept(&stdio.stderr), Some(raw[0]));
        assert_eq!(crate::closer::queued(), 0);
        // The kept copy goes to the closer, as every last copy does.
        drop(stdio);
        assert_eq!(crate::closer::queued(), 1);
        drop(read);
    }
}
