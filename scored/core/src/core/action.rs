//! What the core asks of the shell: [`Action`]s for the actuator and
//! [`Notice`]s for clients, with the end of a job as a client is told it.
#![forbid(unsafe_code)]

use std::time::Duration;

use crate::cluster::Topology;
use crate::ids::{ClientToken, HostId, JobId};
use crate::job::LaunchPlan;
use scored_proto::command::reply::Reply;

// Why a submission was refused, and how a job ended, are told to clients
// as they are: the core uses the protocol's own types rather than mirrors
// that the loop would translate.
pub use scored_proto::proto::{EndKind, RejectKind as Rejection};

/// The accounting summary of a finished job.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Accounting {
    /// Queues visited.
    pub queues: Vec<u32>,
    /// From submission to first run.
    pub wait: Duration,
    /// From first run to end.
    pub wall: Duration,
    /// CPU time.
    pub cpu: Duration,
    /// Time stopped or held after the first run.
    pub stopped: Duration,
    /// Times switched out.
    pub switches: u64,
    /// Peak memory per host (host, bytes). Hosts are named only when a
    /// client is told: most endings, and every one a replay makes, are
    /// never told, and naming every host of every job cost a string each.
    pub peak_memory: Vec<(HostId, u64)>,
    /// Peak disk use.
    pub peak_disk: u64,
}

impl Accounting {
    /// The accounting as the protocol carries it: durations in seconds,
    /// hosts by their names in `topology` (the one the job ran on: it never
    /// changes).
    pub fn to_proto(&self, topology: &Topology) -> scored_proto::proto::Accounting {
        scored_proto::proto::Accounting {
            queues: self.queues.clone(),
            wait_secs: self.wait.as_secs_f64(),
            wall_secs: self.wall.as_secs_f64(),
            cpu_secs: self.cpu.as_secs_f64(),
            stopped_secs: self.stopped.as_secs_f64(),
            switches: self.switches,
            peak_memory: self
                .peak_memory
                .iter()
                .map(|(host, peak)| (topology.host(*host).name.clone(), *peak))
                .collect(),
            peak_disk: self.peak_disk,
        }
    }
}

/// The end of a job, as told to its client.
#[derive(Debug, Clone, PartialEq)]
pub struct Ending {
    /// The job that ended.
    pub job: JobId,
    /// How it ended.
    pub kind: EndKind,
    /// The status scrun exits with.
    pub status: i32,
    /// A sentence for the user.
    pub reason: String,
    /// The signal that ended the process whose status is the job's, if a
    /// signal did.
    pub signal: Option<i32>,
    /// What it waited, ran, used and how often it was switched out.
    pub accounting: Accounting,
}

/// Something a client is told.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    /// The job waits for resources; the sentence says which.
    Waiting(String),
    /// The submission has its ids: it runs without a client (`-batch`),
    /// or it is not admitted yet (`waits` says why).
    Accepted {
        /// Its first job's id.
        job: JobId,
        /// How many jobs it made (an array's elements).
        count: u32,
        /// Why it is not admitted yet, if it is not.
        waits: Option<String>,
    },
    /// The job was admitted.
    Admitted {
        /// The id it was given.
        job: JobId,
        /// The queue it went to (its priority).
        queue: u32,
        /// Its cluster's name.
        cluster: String,
        /// Its hosts' names.
        hosts: Vec<String>,
        /// The processes of each of its stages, as placed (what scrun's
        /// PMI needs of a `hosts=H` job).
        ranks: u32,
    },
    /// The submission was refused.
    Rejected {
        /// Why.
        kind: Rejection,
        /// What was asked and what exists.
        reason: String,
    },
    /// The job's processes are created (its first scheduling); told
    /// before they exist.
    Started(JobId),
    /// The job is held.
    Held(JobId),
    /// The client is the job's again (`Input::Reattach`).
    Reattached {
        /// The job.
        job: JobId,
        /// It has run (its processes exist, or did).
        started: bool,
        /// Its owner holds it.
        held: bool,
        /// The processes of each of its stages, as placed (as `Admitted`
        /// tells them: a scrun whose daemon died may not have had it).
        ranks: u32,
    },
    /// The job ended: its status, reason and accounting.
    Ended(Box<Ending>),
    /// The reply to the client's console command.
    Answer(Reply),
}

/// Something to tell a client.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// The connection to tell.
    pub client: ClientToken,
    /// What to tell.
    pub event: ClientEvent,
}

// A switch's actions are two words each (see `Action::Notify`).
const _: () = assert!(std::mem::size_of::<Action>() <= 16);

impl Action {
    /// Tells `client` of `event`.
    pub fn notify(client: ClientToken, event: ClientEvent) -> Action {
        Action::Notify(Box::new(Notice { client, event }))
    }
}

/// What the core asks the shell to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create processes. The client's `Started`, when the job has one,
    /// comes before it among the actions and is sent before they are
    /// created: the client hears of the start before anything the
    /// processes do can reach it.
    Spawn(Box<LaunchPlan>),
    /// SIGSTOP every process of the job and report `Input::Stopped` once all are stopped.
    Stop(JobId),
    /// SIGCONT every process of the job.
    Continue(JobId),
    /// Send a signal to every process of the job.
    Signal {
        /// The job whose processes get it.
        job: JobId,
        /// Its number (`SIGTERM`, `SIGKILL`, `SIGWINCH` or one a console
        /// `signal` command names).
        signal: i32,
    },
    /// Measure the job's usage and report `Input::Usage`.
    Sample(JobId),
    /// The job is finished: remove what is left of it (scratch directory, cgroup).
    Release(JobId),
    /// A switch starts: note the time before the first signal of it.
    SwitchBegin(u64),
    /// The switch is complete: report `Input::SwitchMeasured` with the time since `SwitchBegin`.
    SwitchEnd(u64),
    /// Tell a client something (boxed, so that an action is two words:
    /// a switch's actions are pushed and read without a copy through the
    /// stack).
    Notify(Box<Notice>),
    /// Every job is gone after a shutdown: the daemon may exit.
    Exit,
}
