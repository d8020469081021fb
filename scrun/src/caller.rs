//! What scrun's own start says about the process environment its job must
//! get: the signals it inherited as ignored, its resource limits and its
//! umask. A shell passes exactly these on to a program it starts; scrun
//! reads them before it changes anything and sends them with the job, and
//! it leaves the ignored signals ignored for itself too (see
//! [`crate::signals::Signals::block`]).
//!
//! The signal dispositions and the umask come from `/proc/self/status`
//! (`SigIgn:` and `Umask:`), which reads them without changing them. The
//! Rust runtime ignores SIGPIPE before `main` runs, so whether scrun
//! inherited SIGPIPE ignored cannot be known: the job gets SIGPIPE at its
//! default, as most programs expect.
#![forbid(unsafe_code)]

use nix::sys::resource::getrlimit;
use nix::sys::signal::Signal;
use scored_proto::inherit::{RESOURCES, RLIMIT_NAMES, UNLIMITED};
use scored_proto::proto::WireRlimit;

/// The caller's process environment, as the job is to inherit it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// Signals that were ignored at scrun's start, by number.
    pub ignored_signals: Vec<i32>,
    /// Every resource limit scrun has.
    pub rlimits: Vec<WireRlimit>,
    /// The file mode creation mask, if it could be read.
    pub umask: Option<u32>,
}

/// Reads the caller's state. Call it first, before scrun changes any
/// disposition or starts a thread.
pub fn read() -> Caller {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let (ignored, umask) = parse_status(&status);
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

/// The ignored signals (SIGPIPE left out, see the module doc) and the
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
        // SIGHUP, SIGINT, SIGQUIT and SIGPIPE (13) ignored; SIGPIPE is the
        // runtime's, not the caller's.
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
    }
}
