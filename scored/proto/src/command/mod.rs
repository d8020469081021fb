//! The console command language (sc_console, scored.rc): typed commands,
//! the line parser, the help table, and the reply model with its text and
//! JSON renderings.
//!
//! **API boundary.** Command names and `key=value` settings are fixed by
//! sc_console(8) and scored.rc(5); scripts and `scored.rc` files rely on them.
//!
//! Pure: parsing and rendering never touch the system. Executing a command
//! is the scheduling core's job (`core::Core::command`).
#![forbid(unsafe_code)]

use std::time::Duration;

pub mod help;
pub mod parse;
pub mod reply;

pub use parse::{parse_line, ParseError};

/// A setting that may be given a value or cleared with `none`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Setting<T> {
    /// Set to this value.
    Set(T),
    /// `none`: remove the setting.
    Clear,
}

/// A cluster named by index (`0`) or by name (`x86`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterRef {
    /// The cluster's index.
    Index(u32),
    /// The cluster's name.
    Name(String),
}

/// A Unix group by name or number, as `queue Q set group=` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRef {
    /// A group name, resolved to a number by the daemon's shell before execution.
    Name(String),
    /// A group id.
    Gid(u32),
}

/// The scheduling mode of a queue: gang time-sharing, or exclusive runs
/// that keep a started job scheduled until it ends (scored(8), SCHEDULING
/// MODEL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueMode {
    /// Jobs time-share by gang scheduling.
    Gang,
    /// A started job keeps running until it ends, unless a higher queue needs its hosts.
    Exclusive,
}

impl QueueMode {
    /// The word used in the console language.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueMode::Gang => "gang",
            QueueMode::Exclusive => "exclusive",
        }
    }
}

/// What a gang queue shares a contested host between (scored(8),
/// SCHEDULING MODEL): its users, each user's jobs together getting an equal
/// share of the rotation, or its jobs, each getting an equal share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueShare {
    /// Each user's jobs together get an equal share of a contested host.
    #[default]
    User,
    /// Each job gets an equal share, however many its user has.
    Job,
}

impl QueueShare {
    /// The word used in the console language.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueShare::User => "user",
            QueueShare::Job => "job",
        }
    }
}

/// `queue Q enable|disable|activate|deactivate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueAction {
    /// Accept submissions.
    Enable,
    /// Reject submissions.
    Disable,
    /// Schedule the queue's jobs (implies enable).
    Activate,
    /// Keep the queue's jobs stopped or unstarted.
    Deactivate,
}

/// Cluster limits changed by `cluster C limit ...`; `None` leaves a limit as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterLimits {
    /// `memory=SIZE|none`: memory per host in bytes.
    pub memory: Option<Setting<u64>>,
    /// `disk=SIZE|none`: disk for the cluster in bytes.
    pub disk: Option<Setting<u64>>,
    /// `jobs=N|none`: admitted jobs.
    pub jobs: Option<Setting<u64>>,
}

/// Queue attributes changed by `queue Q set ...`; `None` leaves one as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueSettings {
    /// `mode=gang|exclusive`.
    pub mode: Option<QueueMode>,
    /// `cputime=DUR|none`: CPU time limit inherited by jobs at submission.
    pub cputime: Option<Setting<Duration>>,
    /// `residency=DUR|none`: CPU time after which a job sinks to the next queue.
    pub residency: Option<Setting<Duration>>,
    /// `memory=PCT%|none`: share of the cluster memory limit.
    pub memory: Option<Setting<f64>>,
    /// `disk=PCT%|none`: share of the cluster disk limit.
    pub disk: Option<Setting<f64>>,
    /// `group=NAME|GID|none`: only members may submit.
    pub group: Option<Setting<GroupRef>>,
    /// `backfill=on|off`: EASY backfilling in an exclusive queue.
    pub backfill: Option<bool>,
    /// `mpl=N|none`: a gang queue's multiprogramming level.
    pub mpl: Option<Setting<u32>>,
    /// `share=user|job`: what a gang queue shares a contested host between.
    pub share: Option<QueueShare>,
    /// `fairshare=HALFLIFE|none`: waiting jobs ordered by their users'
    /// usage, decaying with this half-life.
    pub fairshare: Option<Setting<Duration>>,
}

/// The job states a listing shows, which `jobs --state` takes.
pub const JOB_STATES: [&str; 8] = [
    "waiting", "queued", "running", "stopped", "held", "ending", "done", "killed",
];

/// Which jobs `jobs` lists or `kill` ends, besides jobs named by id: each
/// given part must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// `--user U`: the owner, by name or uid.
    pub user: Option<String>,
    /// `--name N`: the job's name (`scrun -name=`, or its program's base name).
    pub name: Option<String>,
    /// `--state S` (`jobs` only): one of [`JOB_STATES`].
    pub state: Option<String>,
}

impl JobFilter {
    /// Whether it keeps every job.
    pub fn is_empty(&self) -> bool {
        self.user.is_none() && self.name.is_none() && self.state.is_none()
    }

    /// Whether a job of owner `user` (uid `uid`), named `name`, in state
    /// `state` matches.
    pub fn matches(&self, user: &str, uid: u32, name: &str, state: &str) -> bool {
        self.user
            .as_deref()
            .is_none_or(|wanted| wanted == user || wanted.parse::<u32>() == Ok(uid))
            && self.name.as_deref().is_none_or(|wanted| wanted == name)
            && self.state.as_deref().is_none_or(|wanted| wanted == state)
    }
}

/// The start of the period `history --since` covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// This long before now (`--since 2h`).
    Ago(Duration),
    /// This many seconds after the Unix epoch (`--since 2026-11-23T01:00:00`, UTC).
    Unix(u64),
}

/// One console command (sc_console(8), COMMANDS).
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `help [COMMAND]`.
    Help(Option<String>),
    /// `status`.
    Status,
    /// `hosts`.
    Hosts,
    /// `clusters`.
    Clusters,
    /// `cluster C limit ...`.
    ClusterLimit {
        /// Which cluster.
        cluster: ClusterRef,
        /// What to change.
        limits: ClusterLimits,
    },
    /// `queues`.
    Queues,
    /// `queue Q enable|disable|activate|deactivate`.
    QueueState {
        /// Queue number.
        queue: u32,
        /// What to do.
        action: QueueAction,
    },
    /// `queue Q set ...`.
    QueueSet {
        /// Queue number.
        queue: u32,
        /// What to change.
        settings: QueueSettings,
    },
    /// `jobs [all] [--user U] [--name N] [--state S]`.
    Jobs {
        /// Also list recently finished jobs.
        all: bool,
        /// Only the jobs that match.
        filter: JobFilter,
    },
    /// `job ID`.
    Job(u64),
    /// `kill [-s SIGNAL] ID [ID...]`, `kill [-s SIGNAL] [--user U] [--name N]`,
    /// and `kill ID SIGNAL` with a signal name.
    Kill {
        /// The ids of the jobs to kill, in the order given (none with a filter).
        jobs: Vec<u64>,
        /// The jobs to kill by owner and name (empty with ids).
        filter: JobFilter,
        /// A signal number; `None` means SIGTERM, then SIGKILL after a grace.
        signal: Option<i32>,
    },
    /// `suspend ID`: operator or owner hold.
    Suspend(u64),
    /// `resume ID`: release a hold.
    Resume(u64),
    /// `move ID Q`.
    Move {
        /// The id of the job to move.
        job: u64,
        /// The queue to move it to.
        queue: u32,
    },
    /// `timeslice [DUR]`.
    Timeslice(Option<Duration>),
    /// `history [--user U] [--since T]`: finished jobs from the journal.
    History {
        /// Only this user's jobs (a name or a uid).
        user: Option<String>,
        /// Only jobs that ended at or after this time.
        since: Option<Since>,
    },
    /// `restart`: re-execute scored in place, keeping every job and connection.
    Restart,
    /// `shutdown [now]`.
    Shutdown {
        /// Kill jobs instead of letting them finish.
        now: bool,
    },
}

impl Command {
    /// Whether the command changes state, and so needs the operator's rights.
    /// `kill`, `suspend` and `resume` are also open to a job's owner.
    pub fn is_changing(&self) -> bool {
        !matches!(
            self,
            Command::Help(_)
                | Command::Status
                | Command::Hosts
                | Command::Clusters
                | Command::Queues
                | Command::Jobs { .. }
                | Command::Job(_)
                | Command::History { .. }
                | Command::Timeslice(None)
        )
    }
}
