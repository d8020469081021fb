//! What the core is given at start-up: its settings ([`CoreConfig`]) and
//! where console commands look up names of groups ([`Directory`]).
#![forbid(unsafe_code)]

use std::time::Duration;

use super::budget::{TOTAL_JOBS, TOTAL_WAITING, USER_JOBS, USER_WAITING};
use scored_proto::command::GroupRef;

/// Settings of the core fixed at start-up (the time slice can change later).
#[derive(Debug, Clone, PartialEq)]
pub struct CoreConfig {
    /// Gang time slice.
    pub timeslice: Duration,
    /// Users with operator rights besides root and the daemon's own user.
    pub operators: Vec<u32>,
    /// The daemon's own uid. A daemon that is not root runs only its own
    /// user's jobs.
    pub daemon_uid: u32,
    /// The daemon's user name, for messages.
    pub daemon_user: String,
    /// Time between SIGTERM and SIGKILL when a job is killed gracefully.
    pub kill_grace: Duration,
    /// Disk limit of each cluster at start (free space of its filesystems).
    pub disk: Vec<Option<u64>>,
    /// The machine's total memory, when known: a cluster memory limit above
    /// it is accepted with a warning.
    pub machine_memory: Option<u64>,
    /// Whether every live job is sampled at each slice boundary (the
    /// daemon: its listings show fresh usage), or only the jobs whose
    /// usage can change a decision ([`Core::usage_matters`](super::Core::usage_matters); a replay,
    /// which answers no other sample).
    pub sample_every_slice: bool,
    /// What users other than root, the daemon's user and the operators
    /// may keep in the core.
    pub budgets: Budgets,
}

/// The budgets of unfinished jobs and of submissions waiting for
/// resources that users other than root, the daemon's user and the
/// operators are held to, per user and over all of them (see
/// `budget.rs`); the defaults are [`USER_JOBS`], [`TOTAL_JOBS`],
/// [`USER_WAITING`] and [`TOTAL_WAITING`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Unfinished jobs (queued, running or waiting) one user may have.
    pub user_jobs: usize,
    /// Unfinished jobs all such users may have together.
    pub total_jobs: usize,
    /// Submissions one user may have waiting for resources (`-wait`).
    pub user_waiting: usize,
    /// Submissions all such users may have waiting together.
    pub total_waiting: usize,
}

impl Default for Budgets {
    fn default() -> Budgets {
        Budgets {
            user_jobs: USER_JOBS,
            total_jobs: TOTAL_JOBS,
            user_waiting: USER_WAITING,
            total_waiting: TOTAL_WAITING,
        }
    }
}

impl Default for CoreConfig {
    fn default() -> CoreConfig {
        CoreConfig {
            timeslice: Duration::from_millis(500),
            operators: Vec::new(),
            daemon_uid: 0,
            daemon_user: "root".to_string(),
            kill_grace: Duration::from_secs(5),
            disk: Vec::new(),
            machine_memory: None,
            sample_every_slice: true,
            budgets: Budgets::default(),
        }
    }
}

/// Names of users and groups, looked up by the shell (NSS is I/O).
pub trait Directory {
    /// Resolves a group named in `queue Q set group=`: its id and name.
    fn group(&self, group: &GroupRef) -> Result<(u32, Option<String>), GroupError>;

    /// Whether the user database has a user named `name` (for `--user`):
    /// `Err` with the lookup's own words when it could not be read.
    fn has_user(&self, name: &str) -> Result<bool, String>;
}

/// Why a group named in a console command cannot be used.
#[derive(Debug)]
pub enum GroupError {
    /// The directory knows no names (groups must be given by number).
    NoNames {
        /// The group's name as the command gave it.
        name: String,
    },
    /// The group database has no such group.
    NotFound {
        /// The group's name as the command gave it.
        name: String,
    },
    /// The group database could not be read.
    Lookup {
        /// The group's name as the command gave it.
        name: String,
        /// What the lookup said.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl std::fmt::Display for GroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupError::NoNames { name } => write!(f, "unknown group '{name}'"),
            GroupError::NotFound { name } => write!(f, "no group named '{name}'"),
            GroupError::Lookup { name, source } => {
                write!(f, "cannot look up group '{name}': {source}")
            }
        }
    }
}

impl std::error::Error for GroupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GroupError::Lookup { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

/// A directory that knows no names: groups must be given by number.
pub struct NoDirectory;

impl Directory for NoDirectory {
    fn group(&self, group: &GroupRef) -> Result<(u32, Option<String>), GroupError> {
        match group {
            GroupRef::Gid(gid) => Ok((*gid, None)),
            GroupRef::Name(name) => Err(GroupError::NoNames { name: name.clone() }),
        }
    }

    fn has_user(&self, _name: &str) -> Result<bool, String> {
        Ok(false)
    }
}
