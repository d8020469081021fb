//! What the core is given at start-up: its settings ([`CoreConfig`]) and
//! where console commands look up names of groups ([`Directory`]).
#![forbid(unsafe_code)]

use std::time::Duration;

use crate::command::GroupRef;

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
        }
    }
}

/// Names of users and groups, looked up by the shell (NSS is I/O).
pub trait Directory {
    /// Resolves a group named in `queue Q set group=`: its id and name.
    fn group(&self, group: &GroupRef) -> Result<(u32, Option<String>), GroupError>;
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
}
