//! What a job's processes inherit from the scrun that submitted them, beyond
//! the environment and working directory: the signals it had ignored, its
//! resource limits and its umask (SPEC §10: a job sees what the same program
//! started from the submitting shell would see).
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

use crate::proto::WireRlimit;

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
        }
    }
}

impl std::error::Error for InheritError {}

/// Checks the fields of a submission and builds what the job inherits.
/// The submission validator ([`crate::submit`]) calls it; every error
/// names the field and the offending value.
pub fn check(
    ignored_signals: &[i32],
    rlimits: &[WireRlimit],
    umask: Option<u32>,
) -> Result<Inherited, InheritError> {
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
    Ok(inherited)
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
        let inherited = check(
            &[1, 2, 3],
            &[
                limit("nofile", Some(64), Some(1024)),
                limit("stack", None, None),
            ],
            Some(0o077),
        )
        .unwrap();
        assert_eq!(inherited.ignored, 0b111);
        assert!(inherited.ignores(2) && !inherited.ignores(15) && !inherited.ignores(0));
        assert_eq!(inherited.rlimit(NOFILE), Some((64, 1024)));
        assert_eq!(
            inherited.rlimit(rlimit_index("stack").unwrap()),
            Some((UNLIMITED, UNLIMITED))
        );
        assert_eq!(inherited.rlimit(rlimit_index("cpu").unwrap()), None);
        assert_eq!(inherited.umask, Some(0o077));
        assert_eq!(check(&[], &[], None).unwrap(), Inherited::default());
    }

    #[test]
    #[rustfmt::skip]
    fn bad_fields_are_refused_with_a_message_naming_them() {
        let refused = |signals: &[i32], limits: &[WireRlimit], umask| check(signals, limits, umask).unwrap_err().to_string();
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
    }
}
