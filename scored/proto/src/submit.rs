//! The one validator of a job submission: each rule a [`Submit`] must keep
//! is checked here, in one function, and [`JobRequest`] is what passes.
//!
//! **API boundary.** scored turns every `Submit` it receives into a
//! [`JobRequest`] with `JobRequest::try_from` before the scheduling core
//! sees it, and the core takes nothing else; scrun checks the request it
//! built with [`check`] before sending it, and its option parser applies
//! the rules on single values ([`check_counts`], [`check_time`],
//! [`check_limit`], [`check_stages`]) to what the user typed. So a user is
//! told the same thing whether scrun or scored notices a mistake, and a
//! search for a message finds the one place that makes it.
//!
//! The rules: one to [`MAX_STAGES`] stages, each with a program whose name
//! is not empty, no NUL byte in an argument; one to [`MAX_PROCS`]
//! processes; memory and disk limits of at least one byte, a time limit of
//! at least one millisecond; an absolute working directory without a NUL
//! byte, at most [`MAX_PATH_BYTES`] long; arguments and environment entries
//! of at most [`MAX_STRING_BYTES`] each; and the inherited fields of [`crate::inherit::check`].
//! Environment entries that no process environment can hold (a NUL byte
//! anywhere, an empty name, or `=` in the name) are left out rather than
//! refused, as execve(2) would have no way to pass them; scrun never sends
//! one, since it reads its own environment.
//!
//! Checks only: no system call, no clock.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

use crate::inherit::{self, InheritError, Inherited};
use crate::proto::{Joiner, ProcRequest, Submit, WireBytes, MAX_PMI_FDS, MAX_PROCS, MAX_STAGES};

/// A submission that keeps every rule, as the scheduling core takes it.
///
/// Made from the wire by `JobRequest::try_from(submit)`. The fields are
/// public so that the restart and the workload replay can rebuild requests
/// from data that passed this validator before.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRequest {
    /// One argument vector per stage: 1 to [`MAX_STAGES`], each with a
    /// non-empty program name, no argument holding a NUL byte.
    pub stages: Vec<Vec<OsString>>,
    /// How stages follow each other.
    pub joiner: Joiner,
    /// Processes and placement: 1 to [`MAX_PROCS`] processes.
    pub procs: ProcRequest,
    /// The queue asked for.
    pub priority: Option<u32>,
    /// Wait for admission rather than be rejected.
    pub wait: bool,
    /// The user's memory limit per host, at least one byte.
    pub memory: Option<u64>,
    /// The user's disk limit, at least one byte.
    pub disk: Option<u64>,
    /// The job's wall-clock estimate (`-time=`), enforced as a limit on the
    /// time it runs; at least one millisecond.
    pub time: Option<Duration>,
    /// The caller's environment, without entries no environment can hold.
    pub env: Vec<(OsString, OsString)>,
    /// The caller's working directory: absolute, without a NUL byte.
    pub cwd: OsString,
    /// Signal dispositions, limits and umask of the caller.
    pub inherited: Inherited,
}

impl JobRequest {
    /// Processes per stage the request asks for.
    pub fn procs_total(&self) -> u32 {
        match self.procs {
            ProcRequest::Nodes(n) | ProcRequest::Hosts(n) => n,
            ProcRequest::Grid { hosts, per_host } => hosts.saturating_mul(per_host),
        }
    }
}

/// Why a submission was refused. Its `Display` is the sentence both scrun
/// and scored show (lowercase, naming the stage, option or value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitError {
    /// No stage at all.
    NoProgram,
    /// More than [`MAX_STAGES`] stages.
    TooManyStages {
        /// How many were sent.
        count: usize,
    },
    /// A stage with no words (1-based).
    StageWithoutProgram {
        /// The stage, counted from 1.
        stage: usize,
    },
    /// A stage whose program name is empty.
    EmptyProgram {
        /// The stage, counted from 1.
        stage: usize,
    },
    /// An argument holding a NUL byte, which no argument vector can pass.
    NulInArgument {
        /// The stage, counted from 1.
        stage: usize,
    },
    /// A process request of no processes, or of too many.
    Procs {
        /// The request as the user spelled it (`nodes=0`, or scrun's
        /// quoted option value).
        asked: String,
        /// What is wrong with it.
        problem: ProcsProblem,
    },
    /// A memory or disk limit of zero bytes, which could only kill the job.
    ZeroLimit {
        /// The limit as the user spelled it.
        asked: String,
    },
    /// A time limit under a millisecond.
    ZeroTime {
        /// The limit as the user spelled it.
        asked: String,
    },
    /// A working directory that is not an absolute path.
    RelativeCwd,
    /// A working directory holding a NUL byte.
    NulInCwd,
    /// A working directory longer than any path the kernel takes.
    CwdTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// An argument or environment entry longer than execve(2) passes.
    StringTooLong {
        /// `an argument of stage N` or `environment variable NAME`.
        what: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A bad ignored signal, resource limit or umask.
    Inherit(InheritError),
    /// PMI descriptors for a count of ranks the request does not have.
    PmiRanks {
        /// Ranks per stage given a PMI descriptor.
        pmi_ranks: u32,
        /// The request, as scrun spells it.
        asked: String,
    },
    /// A PMIx namespace that is empty, too long, or holds a character
    /// other than a letter, a digit, `.`, `_` or `-`.
    BadPmixNamespace {
        /// The namespace, shortened and escaped.
        shown: String,
    },
    /// More PMI descriptors than [`MAX_PMI_FDS`] in all.
    TooManyPmi {
        /// Ranks per stage given a PMI descriptor.
        pmi_ranks: u32,
        /// The number of stages.
        stages: usize,
    },
}

/// What is wrong with the numbers of a process request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcsProblem {
    /// `nodes=0`.
    NoProcesses,
    /// `nodes=0xM` or `nodes=Nx0`.
    NoGridProcesses,
    /// `hosts=0`.
    NoHosts,
    /// More than [`MAX_PROCS`] processes.
    TooManyProcesses,
    /// More than [`MAX_PROCS`] hosts.
    TooManyHosts,
}

impl fmt::Display for ProcsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcsProblem::NoProcesses => {
                f.write_str("asks for no processes: the count must be at least 1")
            }
            ProcsProblem::NoGridProcesses => f.write_str(
                "asks for no processes: hosts and processes per host must be at least 1",
            ),
            ProcsProblem::NoHosts => f.write_str("asks for no hosts: the count must be at least 1"),
            ProcsProblem::TooManyProcesses => write!(
                f,
                "asks for too many processes: at most {MAX_PROCS} are allowed"
            ),
            ProcsProblem::TooManyHosts => {
                write!(
                    f,
                    "asks for too many hosts: at most {MAX_PROCS} are allowed"
                )
            }
        }
    }
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubmitError::NoProgram => f.write_str("the job has no program"),
            SubmitError::TooManyStages { count } => write!(
                f,
                "the job has {count} stages; at most {MAX_STAGES} are allowed"
            ),
            SubmitError::StageWithoutProgram { stage } => {
                write!(f, "stage {stage} has no program")
            }
            SubmitError::EmptyProgram { stage } => {
                write!(f, "stage {stage} has an empty program name")
            }
            SubmitError::NulInArgument { stage } => {
                write!(f, "an argument of stage {stage} contains a NUL byte")
            }
            SubmitError::Procs { asked, problem } => write!(f, "{asked} {problem}"),
            SubmitError::ZeroLimit { asked } => {
                write!(f, "limit {asked} must be at least 1 byte")
            }
            SubmitError::ZeroTime { asked } => {
                write!(f, "time limit {asked} must be at least 1ms")
            }
            SubmitError::RelativeCwd => {
                f.write_str("the working directory must be an absolute path")
            }
            SubmitError::NulInCwd => f.write_str("the working directory contains a NUL byte"),
            SubmitError::CwdTooLong { len } => write!(
                f,
                "the working directory is {len} bytes long; the budget for a path is {} bytes \
                 (PATH_MAX)",
                MAX_PATH_BYTES
            ),
            SubmitError::StringTooLong { what, len } => write!(
                f,
                "{what} is {len} bytes long; the budget for one argument or environment entry \
                 is {MAX_STRING_BYTES} bytes (MAX_ARG_STRLEN)"
            ),
            SubmitError::Inherit(error) => error.fmt(f),
            SubmitError::PmiRanks { pmi_ranks, asked } => write!(
                f,
                "PMI descriptors for {pmi_ranks} ranks do not match {asked}: a PMI world needs the rank count of nodes=N or nodes=NxM"
            ),
            SubmitError::BadPmixNamespace { shown } => write!(
                f,
                "PMIx namespace {shown} is not 1 to {MAX_PMIX_NAMESPACE} letters, digits, '.', '_' or '-'"
            ),
            SubmitError::TooManyPmi { pmi_ranks, stages } => write!(
                f,
                "PMI for {pmi_ranks} ranks in each of {stages} stages is over the limit of {MAX_PMI_FDS} ranks in all"
            ),
        }
    }
}

impl std::error::Error for SubmitError {}

impl From<InheritError> for SubmitError {
    fn from(error: InheritError) -> SubmitError {
        SubmitError::Inherit(error)
    }
}

/// A process request with counts as wide as a user can type them, so that
/// scrun applies the rule to what was typed before narrowing it to the
/// wire's `u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcCounts {
    /// `nodes=N`.
    Nodes(u64),
    /// `nodes=NxM`.
    Grid {
        /// Hosts.
        hosts: u64,
        /// Processes on each.
        per_host: u64,
    },
    /// `hosts=H`.
    Hosts(u64),
}

impl From<ProcRequest> for ProcCounts {
    fn from(procs: ProcRequest) -> ProcCounts {
        match procs {
            ProcRequest::Nodes(n) => ProcCounts::Nodes(u64::from(n)),
            ProcRequest::Grid { hosts, per_host } => ProcCounts::Grid {
                hosts: u64::from(hosts),
                per_host: u64::from(per_host),
            },
            ProcRequest::Hosts(h) => ProcCounts::Hosts(u64::from(h)),
        }
    }
}

/// The rule on the number of processes: at least one, at most
/// [`MAX_PROCS`] (hosts, for `hosts=H`, whose processes per host depend on
/// the cluster). Returns the total.
pub fn check_counts(counts: ProcCounts) -> Result<u64, ProcsProblem> {
    match counts {
        ProcCounts::Nodes(0) => Err(ProcsProblem::NoProcesses),
        ProcCounts::Nodes(n) if n > MAX_PROCS => Err(ProcsProblem::TooManyProcesses),
        ProcCounts::Nodes(n) => Ok(n),
        ProcCounts::Grid { hosts, per_host } if hosts == 0 || per_host == 0 => {
            Err(ProcsProblem::NoGridProcesses)
        }
        ProcCounts::Grid { hosts, per_host } => match hosts.checked_mul(per_host) {
            Some(total) if total <= MAX_PROCS => Ok(total),
            _ => Err(ProcsProblem::TooManyProcesses),
        },
        ProcCounts::Hosts(0) => Err(ProcsProblem::NoHosts),
        ProcCounts::Hosts(h) if h > MAX_PROCS => Err(ProcsProblem::TooManyHosts),
        ProcCounts::Hosts(h) => Ok(h),
    }
}

/// The rule on the stages: 1 to [`MAX_STAGES`], each with a program whose
/// name is not empty, and no argument holding a NUL byte.
pub fn check_stages<A: AsRef<[u8]>>(stages: &[Vec<A>]) -> Result<(), SubmitError> {
    if stages.is_empty() {
        return Err(SubmitError::NoProgram);
    }
    if stages.len() > MAX_STAGES {
        return Err(SubmitError::TooManyStages {
            count: stages.len(),
        });
    }
    for (stage_idx, argv) in stages.iter().enumerate() {
        let stage = stage_idx + 1;
        match argv.first() {
            None => return Err(SubmitError::StageWithoutProgram { stage }),
            Some(program) if program.as_ref().is_empty() => {
                return Err(SubmitError::EmptyProgram { stage })
            }
            Some(_) => {}
        }
        if argv.iter().any(|arg| arg.as_ref().contains(&0)) {
            return Err(SubmitError::NulInArgument { stage });
        }
    }
    Ok(())
}

/// The rule on a memory or disk limit: at least one byte. `asked` is the
/// limit as the user spelled it, for the message.
pub fn check_limit(bytes: u64, asked: impl FnOnce() -> String) -> Result<u64, SubmitError> {
    if bytes == 0 {
        return Err(SubmitError::ZeroLimit { asked: asked() });
    }
    Ok(bytes)
}

/// The rule on a time limit: at least one millisecond. `asked` is the
/// limit as the user spelled it, for the message.
pub fn check_time(ms: u64, asked: impl FnOnce() -> String) -> Result<u64, SubmitError> {
    if ms == 0 {
        return Err(SubmitError::ZeroTime { asked: asked() });
    }
    Ok(ms)
}

/// The longest working directory a submission may name: PATH_MAX (4096,
/// with its terminating NUL), the longest path the kernel takes.
pub const MAX_PATH_BYTES: usize = 4095;
/// The longest argument or environment entry (`NAME=value`):
/// MAX_ARG_STRLEN, the longest string execve(2) passes.
pub const MAX_STRING_BYTES: usize = 128 * 1024;

/// The rule on the working directory: an absolute path without a NUL
/// byte, at most [`MAX_PATH_BYTES`] long.
fn check_cwd(cwd: &[u8]) -> Result<(), SubmitError> {
    if cwd.len() > MAX_PATH_BYTES {
        return Err(SubmitError::CwdTooLong { len: cwd.len() });
    }
    if cwd.first() != Some(&b'/') {
        return Err(SubmitError::RelativeCwd);
    }
    if cwd.contains(&0) {
        return Err(SubmitError::NulInCwd);
    }
    Ok(())
}

/// The rule on PMI descriptors: none, or one per rank of each stage of a
/// request whose rank count is known before admission (`nodes=N`,
/// `nodes=NxM`), [`MAX_PMI_FDS`] at most in all.
pub fn check_pmi(submit: &Submit) -> Result<(), SubmitError> {
    let pmi_ranks = submit.pmi_ranks;
    if pmi_ranks == 0 {
        return Ok(());
    }
    let procs = submit.options.procs;
    let ranks = match procs {
        ProcRequest::Nodes(n) => Some(u64::from(n)),
        ProcRequest::Grid { hosts, per_host } => Some(u64::from(hosts) * u64::from(per_host)),
        ProcRequest::Hosts(_) => None,
    };
    if ranks != Some(u64::from(pmi_ranks)) {
        return Err(SubmitError::PmiRanks {
            pmi_ranks,
            asked: procs.describe(),
        });
    }
    if submit.pmi_fd_count() > MAX_PMI_FDS {
        return Err(SubmitError::TooManyPmi {
            pmi_ranks,
            stages: submit.stages.len(),
        });
    }
    Ok(())
}

/// The longest PMIx namespace a submission may name: room for `.STAGE`
/// within PMIx's 255 bytes.
pub const MAX_PMIX_NAMESPACE: usize = 200;

/// The rule on the PMIx namespace: none, or 1 to [`MAX_PMIX_NAMESPACE`]
/// letters, digits, `.`, `_` or `-` (it goes into the ranks'
/// environment and names their PMIx world).
pub fn check_pmix(submit: &Submit) -> Result<(), SubmitError> {
    check_pmix_namespace(submit.pmix_namespace.as_deref())
}

/// [`check_pmix`] on a namespace alone (a reattach names its job's).
pub fn check_pmix_namespace(namespace: Option<&str>) -> Result<(), SubmitError> {
    let Some(namespace) = namespace else {
        return Ok(());
    };
    let good = !namespace.is_empty()
        && namespace.len() <= MAX_PMIX_NAMESPACE
        && namespace
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if good {
        return Ok(());
    }
    let mut shown: String = namespace.chars().take(40).collect();
    if shown.len() < namespace.len() {
        shown.push_str("...");
    }
    Err(SubmitError::BadPmixNamespace {
        shown: format!("{shown:?}"),
    })
}

/// The rule on the length of each argument and environment entry: at
/// most [`MAX_STRING_BYTES`], which is all execve(2) would pass.
fn check_strings(submit: &Submit) -> Result<(), SubmitError> {
    for (stage_idx, argv) in submit.stages.iter().enumerate() {
        if let Some(arg) = argv
            .iter()
            .find(|arg| arg.as_bytes().len() > MAX_STRING_BYTES)
        {
            return Err(SubmitError::StringTooLong {
                what: format!("an argument of stage {}", stage_idx + 1),
                len: arg.as_bytes().len(),
            });
        }
    }
    for (key, value) in &submit.env {
        let len = key.as_bytes().len() + 1 + value.as_bytes().len();
        if len > MAX_STRING_BYTES {
            let name = String::from_utf8_lossy(key.as_bytes());
            let mut shown: String = name.chars().take(64).collect();
            if shown.len() < name.len() {
                shown.push_str("...");
            }
            return Err(SubmitError::StringTooLong {
                what: format!("environment variable {shown}"),
                len,
            });
        }
    }
    Ok(())
}

/// Whether an environment entry can be passed to a process: no NUL byte,
/// and a name that is not empty and holds no `=`.
pub fn passes_environment(key: &[u8], value: &[u8]) -> bool {
    !key.is_empty() && !key.contains(&b'=') && !key.contains(&0) && !value.contains(&0)
}

/// Applies every rule to `submit`, in the order a user would fix them, and
/// returns what the job inherits.
fn validate(submit: &Submit) -> Result<Inherited, SubmitError> {
    check_stages(&submit.stages)?;
    let procs = submit.options.procs;
    check_counts(procs.into()).map_err(|problem| SubmitError::Procs {
        asked: procs.describe(),
        problem,
    })?;
    if let Some(memory) = submit.options.memory {
        check_limit(memory, || format!("memory={memory}"))?;
    }
    if let Some(disk) = submit.options.disk {
        check_limit(disk, || format!("disk={disk}"))?;
    }
    if let Some(ms) = submit.options.time_ms {
        check_time(ms, || format!("{ms}ms"))?;
    }
    check_cwd(submit.cwd.as_bytes())?;
    check_strings(submit)?;
    check_pmi(submit)?;
    check_pmix(submit)?;
    inherit::check_descriptors(&submit.closed_stdio, &submit.fds, submit.options.pty)?;
    Ok(inherit::check(
        &submit.ignored_signals,
        &submit.rlimits,
        inherit::ProcessState {
            umask: submit.umask,
            nice: submit.nice,
            ioprio: submit.ioprio,
        },
    )?)
}

/// Checks a submission without converting it: what scrun calls on the
/// request it is about to send.
pub fn check(submit: &Submit) -> Result<(), SubmitError> {
    validate(submit).map(drop)
}

impl TryFrom<Submit> for JobRequest {
    type Error = SubmitError;

    fn try_from(submit: Submit) -> Result<JobRequest, SubmitError> {
        let inherited = validate(&submit)?;
        let options = submit.options;
        Ok(JobRequest {
            stages: submit
                .stages
                .into_iter()
                .map(|argv| argv.into_iter().map(WireBytes::into_os).collect())
                .collect(),
            joiner: submit.joiner,
            procs: options.procs,
            priority: options.priority,
            wait: options.wait,
            memory: options.memory,
            disk: options.disk,
            time: options.time_ms.map(Duration::from_millis),
            env: submit
                .env
                .into_iter()
                .filter(|(key, value)| passes_environment(key.as_bytes(), value.as_bytes()))
                .map(|(key, value)| (key.into_os(), value.into_os()))
                .collect(),
            cwd: submit.cwd.into_os(),
            inherited,
        })
    }
}

#[cfg(test)]
mod tests;
