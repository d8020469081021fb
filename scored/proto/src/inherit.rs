//! What a job's processes inherit from the scrun that submitted them, beyond
//! the environment and working directory: the signals it had ignored, its
//! resource limits, its umask, its nice value and I/O priority, and which
//! descriptors it had open or closed: a job sees what the same program
//! started from the submitting shell would see (scrun(1), THE JOB'S
//! PROCESSES).
//!
//! scrun reads these at its start and sends them in the `Submit` request
//! ([`crate::proto::Submit`]); [`check`], called by the submission
//! validator ([`crate::submit`]), validates them and turns them into
//! [`Inherited`], which the core carries in the job's packed
//! launch data and the actuator applies between fork and exec. Limits travel
//! by name (`nofile`, `stack`, as prlimit(1) names them), so that the
//! numbering of one architecture never leaks onto the wire.
//!
//! This module only names and checks; nothing here reads or changes a
//! process.
#![forbid(unsafe_code)]

#[cfg(feature = "client")]
use nix::sys::resource::Resource;

use crate::proto::{WireRlimit, MAX_FD_NUMBER, MAX_INHERITED_FDS};

/// The resource limits a job inherits, by their prlimit(1) names. The index
/// in this table is the core's resource number ([`Inherited::rlimits`]);
/// the actuator and scrun map it to the machine's own constant.
pub const RLIMIT_NAMES: [&str; 16] = [
    "as",
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
];

/// The machine's resource numbers, in the order of [`RLIMIT_NAMES`]: scrun
/// reads its limits and the actuator sets the job's through this table.
#[cfg(feature = "client")]
pub const RESOURCES: [Resource; 16] = [
    Resource::RLIMIT_AS,
    Resource::RLIMIT_CORE,
    Resource::RLIMIT_CPU,
    Resource::RLIMIT_DATA,
    Resource::RLIMIT_FSIZE,
    Resource::RLIMIT_LOCKS,
    Resource::RLIMIT_MEMLOCK,
    Resource::RLIMIT_MSGQUEUE,
    Resource::RLIMIT_NICE,
    Resource::RLIMIT_NOFILE,
    Resource::RLIMIT_NPROC,
    Resource::RLIMIT_RSS,
    Resource::RLIMIT_RTPRIO,
    Resource::RLIMIT_RTTIME,
    Resource::RLIMIT_SIGPENDING,
    Resource::RLIMIT_STACK,
];

/// The index in [`RLIMIT_NAMES`] of `nofile`.
pub const NOFILE: u8 = 9;

/// The highest signal number of Linux (SIGRTMAX).
pub const MAX_SIGNAL: i32 = 64;

/// The value of an unlimited limit in [`Inherited::rlimits`] (RLIM_INFINITY).
pub const UNLIMITED: u64 = u64::MAX;

/// What the job's processes get from their submitter, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Inherited {
    /// Signals left ignored in the job: bit `n - 1` for signal `n`. Every
    /// other signal starts at its default disposition.
    pub ignored: u64,
    /// Limits to set after the change of credentials: (index in
    /// [`RLIMIT_NAMES`], soft, hard), with [`UNLIMITED`] for no limit.
    /// Resources not listed keep what the daemon's own start gave them.
    pub rlimits: Vec<(u8, u64, u64)>,
    /// The file mode creation mask, when the submitter sent one.
    pub umask: Option<u32>,
    /// The nice value (-20 to 19), when the submitter sent one.
    pub nice: Option<i32>,
    /// The I/O priority (ioprio_get(2)'s value), when the submitter sent one.
    pub ioprio: Option<u32>,
}

impl Inherited {
    /// Whether signal `signal` is to stay ignored in the job.
    pub fn ignores(&self, signal: i32) -> bool {
        (1..=MAX_SIGNAL).contains(&signal) && self.ignored & (1 << (signal - 1)) != 0
    }

    /// The limit of resource `index`, if the submitter sent one.
    pub fn rlimit(&self, index: u8) -> Option<(u64, u64)> {
        self.rlimits
            .iter()
            .find(|(resource, _, _)| *resource == index)
            .map(|&(_, soft, hard)| (soft, hard))
    }
}

/// The index of a limit's name in [`RLIMIT_NAMES`].
pub fn rlimit_index(name: &str) -> Option<u8> {
    RLIMIT_NAMES
        .iter()
        .position(|known| *known == name)
        .map(|idx| idx as u8)
}

/// Why the inherited fields of a submission were refused. Its `Display`
/// names the field and the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InheritError {
    /// An ignored signal outside 1 to [`MAX_SIGNAL`].
    NotASignal(i32),
    /// SIGKILL or SIGSTOP, which no process can ignore.
    CannotBeIgnored(i32),
    /// A limit name not in [`RLIMIT_NAMES`].
    UnknownLimit(String),
    /// A limit sent twice.
    LimitTwice(String),
    /// A soft limit above its hard limit.
    SoftAboveHard {
        /// The limit's name.
        resource: String,
        /// The soft limit ([`UNLIMITED`] for none).
        soft: u64,
        /// The hard limit ([`UNLIMITED`] for none).
        hard: u64,
    },
    /// A umask with bits beyond the file mode bits.
    NotAUmask(u32),
    /// A nice value outside -20 to 19.
    NotANice(i32),
    /// An I/O priority whose class or level does not exist.
    NotAnIoPriority(u32),
    /// A closed standard descriptor that is not 0, 1 or 2.
    ClosedNotStandard(i32),
    /// A standard descriptor said closed twice.
    ClosedTwice(i32),
    /// A closed standard descriptor with `pty`, which gives all three.
    ClosedWithTerminal,
    /// A passed descriptor numbered 0 to 2 or above [`MAX_FD_NUMBER`].
    DescriptorNumber(i32),
    /// Passed descriptors not in increasing order, or one twice.
    DescriptorOrder(i32),
    /// More passed descriptors than [`MAX_INHERITED_FDS`].
    TooManyDescriptors(usize),
}

impl std::fmt::Display for InheritError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InheritError::NotASignal(signal) => write!(
                f,
                "ignored signal {signal} is not a signal number (1-{MAX_SIGNAL})"
            ),
            InheritError::CannotBeIgnored(signal) => {
                write!(f, "signal {signal} cannot be ignored")
            }
            InheritError::UnknownLimit(name) => write!(
                f,
                "unknown resource limit {name:?} (known: {})",
                RLIMIT_NAMES.join(", ")
            ),
            InheritError::LimitTwice(name) => write!(f, "resource limit {name} is given twice"),
            InheritError::SoftAboveHard {
                resource,
                soft,
                hard,
            } => write!(
                f,
                "resource limit {resource}: soft limit {} is above the hard limit {}",
                show(*soft),
                show(*hard)
            ),
            InheritError::NotAUmask(mask) => {
                write!(f, "umask {mask:o} is not a file mode mask (0-777)")
            }
            InheritError::NotANice(nice) => {
                write!(f, "nice value {nice} is not between -20 and 19")
            }
            InheritError::NotAnIoPriority(value) => write!(
                f,
                "I/O priority {value:#x} is not one of ioprio_get(2): class 0 to 3, level 0 to 7"
            ),
            InheritError::ClosedNotStandard(fd) => write!(
                f,
                "closed descriptor {fd} is not a standard one (0, 1 or 2)"
            ),
            InheritError::ClosedTwice(fd) => write!(f, "descriptor {fd} is said closed twice"),
            InheritError::ClosedWithTerminal => write!(
                f,
                "a job on a pseudo-terminal gets it as stdin, stdout and stderr: none can be closed"
            ),
            InheritError::DescriptorNumber(fd) => write!(
                f,
                "passed descriptor {fd} is not between 3 and {MAX_FD_NUMBER}"
            ),
            InheritError::DescriptorOrder(fd) => write!(
                f,
                "passed descriptor {fd} is out of order or given twice (numbers must increase)"
            ),
            InheritError::TooManyDescriptors(count) => write!(
                f,
                "{count} descriptors passed, over the limit of {MAX_INHERITED_FDS}"
            ),
        }
    }
}

impl std::error::Error for InheritError {}

/// The process state a submission sends besides its limits: umask, nice
/// value and I/O priority.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessState {
    /// The file mode creation mask.
    pub umask: Option<u32>,
    /// The nice value.
    pub nice: Option<i32>,
    /// The I/O priority.
    pub ioprio: Option<u32>,
}

/// Checks the fields of a submission and builds what the job inherits.
/// The submission validator ([`crate::submit`]) calls it; every error
/// names the field and the offending value.
pub fn check(
    ignored_signals: &[i32],
    rlimits: &[WireRlimit],
    state: ProcessState,
) -> Result<Inherited, InheritError> {
    let ProcessState {
        umask,
        nice,
        ioprio,
    } = state;
    let mut inherited = Inherited::default();
    for &signal in ignored_signals {
        if !(1..=MAX_SIGNAL).contains(&signal) {
            return Err(InheritError::NotASignal(signal));
        }
        // SIGKILL (9) and SIGSTOP (19) cannot be ignored.
        if signal == 9 || signal == 19 {
            return Err(InheritError::CannotBeIgnored(signal));
        }
        inherited.ignored |= 1 << (signal - 1);
    }
    for limit in rlimits {
        let Some(index) = rlimit_index(&limit.resource) else {
            return Err(InheritError::UnknownLimit(limit.resource.clone()));
        };
        if inherited.rlimit(index).is_some() {
            return Err(InheritError::LimitTwice(limit.resource.clone()));
        }
        let soft = limit.soft.unwrap_or(UNLIMITED);
        let hard = limit.hard.unwrap_or(UNLIMITED);
        if soft > hard {
            return Err(InheritError::SoftAboveHard {
                resource: limit.resource.clone(),
                soft,
                hard,
            });
        }
        inherited.rlimits.push((index, soft, hard));
    }
    if let Some(mask) = umask {
        if mask > 0o777 {
            return Err(InheritError::NotAUmask(mask));
        }
    }
    inherited.umask = umask;
    if let Some(nice) = nice {
        if !(-20..=19).contains(&nice) {
            return Err(InheritError::NotANice(nice));
        }
    }
    inherited.nice = nice;
    if let Some(value) = ioprio {
        if value >> 13 > 3 || value & 0x1fff > 7 {
            return Err(InheritError::NotAnIoPriority(value));
        }
    }
    inherited.ioprio = ioprio;
    Ok(inherited)
}

/// Checks which standard descriptors a submission says are closed and
/// which others it passes (see `Submit::closed_stdio` and `Submit::fds`).
pub fn check_descriptors(closed: &[i32], fds: &[i32], pty: bool) -> Result<(), InheritError> {
    for (idx, &fd) in closed.iter().enumerate() {
        if !(0..=2).contains(&fd) {
            return Err(InheritError::ClosedNotStandard(fd));
        }
        if closed[..idx].contains(&fd) {
            return Err(InheritError::ClosedTwice(fd));
        }
    }
    if pty && !closed.is_empty() {
        return Err(InheritError::ClosedWithTerminal);
    }
    if fds.len() > MAX_INHERITED_FDS {
        return Err(InheritError::TooManyDescriptors(fds.len()));
    }
    let mut last = 2;
    for &fd in fds {
        if !(3..=MAX_FD_NUMBER).contains(&fd) {
            return Err(InheritError::DescriptorNumber(fd));
        }
        if fd <= last {
            return Err(InheritError::DescriptorOrder(fd));
        }
        last = fd;
    }
    Ok(())
}

fn show(value: u64) -> String {
    if value == UNLIMITED {
        "unlimited".to_string()
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(resource: &str, soft: Option<u64>, hard: Option<u64>) -> WireRlimit {
        WireRlimit {
            resource: resource.to_string(),
            soft,
            hard,
        }
    }

    #[test]
    fn good_fields_become_the_inherited_set() {
        let state = ProcessState {
            umask: Some(0o077),
            nice: Some(-3),
            ioprio: Some(3 << 13),
        };
        let inherited = check(
            &[1, 2, 3],
            &[
                limit("nofile", Some(64), Some(1024)),
                limit("stack", None, None),
            ],
            state,
        )
        .unwrap();
        assert_eq!((inherited.nice, inherited.ioprio), (Some(-3), Some(0x6000)));
        assert_eq!(inherited.ignored, 0b111);
        assert!(inherited.ignores(2) && !inherited.ignores(15) && !inherited.ignores(0));
        assert_eq!(inherited.rlimit(NOFILE), Some((64, 1024)));
        assert_eq!(
            inherited.rlimit(rlimit_index("stack").unwrap()),
            Some((UNLIMITED, UNLIMITED))
        );
        assert_eq!(inherited.rlimit(rlimit_index("cpu").unwrap()), None);
        assert_eq!(inherited.umask, Some(0o077));
        assert_eq!(
            check(&[], &[], ProcessState::default()).unwrap(),
            Inherited::default()
        );
    }

    #[test]
    #[rustfmt::skip]
    fn bad_fields_are_refused_with_a_message_naming_them() {
        let refused = |signals: &[i32], limits: &[WireRlimit], umask| check(signals, limits, ProcessState { umask, ..ProcessState::default() }).unwrap_err().to_string();
        assert_eq!(refused(&[0], &[], None), "ignored signal 0 is not a signal number (1-64)");
        assert_eq!(refused(&[65], &[], None), "ignored signal 65 is not a signal number (1-64)");
        assert_eq!(refused(&[-3], &[], None), "ignored signal -3 is not a signal number (1-64)");
        assert_eq!(refused(&[9], &[], None), "signal 9 cannot be ignored");
        assert_eq!(refused(&[19], &[], None), "signal 19 cannot be ignored");
        assert_eq!(refused(&[], &[limit("nofile", Some(10), Some(5))], None), "resource limit nofile: soft limit 10 is above the hard limit 5");
        assert_eq!(refused(&[], &[limit("stack", None, Some(5))], None), "resource limit stack: soft limit unlimited is above the hard limit 5");
        assert!(refused(&[], &[limit("nofiles", None, None)], None).starts_with("unknown resource limit \"nofiles\" (known: as, core,"));
        assert_eq!(refused(&[], &[limit("cpu", None, None), limit("cpu", Some(1), Some(1))], None), "resource limit cpu is given twice");
        assert_eq!(refused(&[], &[], Some(0o1000)), "umask 1000 is not a file mode mask (0-777)");
        let priority = |nice, ioprio| check(&[], &[], ProcessState { umask: None, nice, ioprio }).unwrap_err().to_string();
        assert_eq!(priority(Some(20), None), "nice value 20 is not between -20 and 19");
        assert_eq!(priority(Some(-21), None), "nice value -21 is not between -20 and 19");
        assert_eq!(priority(None, Some(4 << 13)), "I/O priority 0x8000 is not one of ioprio_get(2): class 0 to 3, level 0 to 7");
        assert_eq!(priority(None, Some((2 << 13) | 8)), "I/O priority 0x4008 is not one of ioprio_get(2): class 0 to 3, level 0 to 7");
    }

    #[test]
    #[rustfmt::skip]
    fn descriptors_are_standard_closed_ones_and_increasing_others() {
        assert_eq!(check_descriptors(&[1], &[3, 4, 63], false), Ok(()));
        assert_eq!(check_descriptors(&[0, 1, 2], &[], false), Ok(()));
        assert_eq!(check_descriptors(&[], &[5], true), Ok(()));
        let refused = |closed: &[i32], fds: &[i32], pty| check_descriptors(closed, fds, pty).unwrap_err().to_string();
        assert_eq!(refused(&[3], &[], false), "closed descriptor 3 is not a standard one (0, 1 or 2)");
        assert_eq!(refused(&[-1], &[], false), "closed descriptor -1 is not a standard one (0, 1 or 2)");
        assert_eq!(refused(&[1, 1], &[], false), "descriptor 1 is said closed twice");
        assert_eq!(refused(&[0], &[], true), "a job on a pseudo-terminal gets it as stdin, stdout and stderr: none can be closed");
        assert_eq!(refused(&[], &[2], false), "passed descriptor 2 is not between 3 and 1048576");
        assert_eq!(refused(&[], &[1 << 21], false), "passed descriptor 2097152 is not between 3 and 1048576");
        assert_eq!(refused(&[], &[4, 4], false), "passed descriptor 4 is out of order or given twice (numbers must increase)");
        assert_eq!(refused(&[], &[5, 4], false), "passed descriptor 4 is out of order or given twice (numbers must increase)");
        let many: Vec<i32> = (3..3 + MAX_INHERITED_FDS as i32 + 1).collect();
        assert_eq!(refused(&[], &many, false), "65 descriptors passed, over the limit of 64");
    }
}
