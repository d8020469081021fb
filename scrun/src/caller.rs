//! What scrun's own start says about the process environment its job must
//! get: the descriptors it inherited open and the standard ones it found
//! closed, the signals it inherited as ignored, its resource limits, its
//! umask, its nice value and I/O priority. A shell passes exactly these on
//! to a program it starts; scrun reads them before it changes anything and
//! sends them with the job, and it leaves the ignored signals ignored for
//! itself too (see [`crate::signals::Signals::block`]).
//!
//! The descriptors are listed first, before scrun opens any of its own,
//! and marked close-on-exec, so that no program scrun starts (a private
//! scored) holds them. The signal dispositions and the umask come from
//! `/proc/self/status` (`SigIgn:` and `Umask:`), which reads them without
//! changing them; what scrun's entry point changed before `main` (a closed
//! standard descriptor opened on /dev/null, SIGPIPE ignored) comes from
//! [`crate::sys::at_exec`], which saw the process as it was exec'd.
#![forbid(unsafe_code)]

use nix::sys::resource::getrlimit;
use nix::sys::signal::Signal;
use scored_proto::inherit::{RESOURCES, RLIMIT_NAMES, UNLIMITED};
use scored_proto::proto::WireRlimit;

/// The caller's process environment, as the job is to inherit it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// Descriptors above 2 that were open and not close-on-exec, in
    /// increasing order.
    pub descriptors: Vec<i32>,
    /// Standard descriptors (0, 1, 2) that were closed.
    pub closed_stdio: Vec<i32>,
    /// The nice value, if it could be read.
    pub nice: Option<i32>,
    /// The I/O priority, if it could be read.
    pub ioprio: Option<u32>,
    /// Signals that were ignored at scrun's start, by number.
    pub ignored_signals: Vec<i32>,
    /// Every resource limit scrun has.
    pub rlimits: Vec<WireRlimit>,
    /// The file mode creation mask, if it could be read.
    pub umask: Option<u32>,
}

/// Reads the caller's state. Call it first, before scrun opens a file,
/// changes any disposition or starts a thread.
pub fn read() -> Caller {
    // First of all, while every descriptor open is one scrun inherited.
    let descriptors = crate::sys::inherited_descriptors().unwrap_or_default();
    for &fd in &descriptors {
        let _ = crate::sys::set_cloexec(fd);
    }
    let at_exec = crate::sys::at_exec();
    let closed_stdio = at_exec
        .map(|seen| (0..3).filter(|&fd| seen.closed[fd as usize]).collect())
        .unwrap_or_default();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let (mut ignored, umask) = parse_status(&status);
    if at_exec.is_some_and(|seen| seen.sigpipe_ignored) {
        ignored.push(Signal::SIGPIPE as i32);
        ignored.sort_unstable();
    }
    let umask = umask.or_else(umask_without_proc);
    let rlimits = RLIMIT_NAMES
        .iter()
        .zip(RESOURCES)
        .filter_map(|(name, resource)| {
            let (soft, hard) = getrlimit(resource).ok()?;
            let finite = |value: u64| (value != UNLIMITED).then_some(value);
            Some(WireRlimit {
                resource: (*name).to_string(),
                soft: finite(soft),
                hard: finite(hard),
            })
        })
        .collect();
    Caller {
        descriptors,
        closed_stdio,
        nice: rustix::process::getpriority_process(None).ok(),
        ioprio: crate::sys::io_priority().ok(),
        ignored_signals: ignored,
        rlimits,
        umask,
    }
}

/// The umask where /proc has no `Umask:` line (kernels before 4.7):
/// umask(2) can only be read by setting it, so it is set back at once.
/// scrun has no other thread yet, so nothing can create a file between.
fn umask_without_proc() -> Option<u32> {
    use nix::sys::stat::{umask, Mode};
    let mask = umask(Mode::from_bits_truncate(0o077));
    umask(mask);
    Some(mask.bits())
}

/// The ignored signals (SIGPIPE left out: scrun's start ignored it, and
/// whether the caller did is known from [`crate::sys::at_exec`]) and the
/// umask of a `/proc/PID/status` text; what is missing or malformed is
/// left out.
pub fn parse_status(status: &str) -> (Vec<i32>, Option<u32>) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
    };
    let ignored = field("SigIgn:")
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .map(|mask| {
            (1..=64)
                .filter(|&signal| mask & (1u64 << (signal - 1)) != 0)
                .filter(|&signal| signal != Signal::SIGPIPE as i32)
                .collect()
        })
        .unwrap_or_default();
    let umask = field("Umask:").and_then(|octal| u32::from_str_radix(octal, 8).ok());
    (ignored, umask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_give_ignored_signals_and_umask() {
        let status = "Name:\tscrun\nUmask:\t0077\nSigBlk:\t0000000000000000\n\
                      SigIgn:\t0000000000001007\nSigCgt:\t0000000000000000\n";
        // SIGHUP, SIGINT, SIGQUIT and SIGPIPE (13) ignored; SIGPIPE is
        // scrun's own, not the caller's.
        assert_eq!(parse_status(status), (vec![1, 2, 3], Some(0o077)));
        assert_eq!(
            parse_status("SigIgn:\t8000000000000000\n"),
            (vec![64], None)
        );
        assert_eq!(parse_status(""), (vec![], None));
        assert_eq!(parse_status("SigIgn:\tzz\nUmask:\t9\n"), (vec![], None));
    }

    #[test]
    fn the_running_test_reads_its_own_limits_and_umask() {
        let caller = read();
        assert_eq!(caller.rlimits.len(), RLIMIT_NAMES.len());
        let nofile = caller
            .rlimits
            .iter()
            .find(|limit| limit.resource == "nofile")
            .expect("nofile is read");
        let (soft, hard) = getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!((nofile.soft, nofile.hard), (Some(soft), Some(hard)));
        assert!(caller.umask.is_some_and(|mask| mask <= 0o777));
        assert!(caller.nice.is_some_and(|nice| (-20..=19).contains(&nice)));
        assert!(caller.ioprio.is_some());
        assert!(caller.closed_stdio.is_empty());
    }
}
