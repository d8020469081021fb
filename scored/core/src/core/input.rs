//! What the shell tells the core: [`Input`]s, and the steps of a job's
//! life that the core hands back for the job journal ([`JobEvent`]).
#![forbid(unsafe_code)]

use std::rc::Rc;
use std::time::Duration;

use crate::ids::{ClientToken, Cred, JobId, Tick};
use crate::job::{ExitStatus, JobRequest, Usage};
use scored_proto::command::reply::Value;
use scored_proto::command::Command;

use super::Outcome;

/// A step of a job's life, for the job journal (`Core::record_journal`).
/// The shell stamps each with the wall-clock time and appends it.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    /// The job was admitted (it was submitted `waited` earlier).
    Admitted {
        /// The id it was given.
        job: JobId,
        /// How long it waited for admission.
        waited: Duration,
        /// Its `job ID` facts at admission.
        record: Vec<(String, Value)>,
    },
    /// A submission was taken into the backlog with ids `first` to
    /// `last` (`backlog.rs`): they are handed out, whether or not the
    /// jobs are ever admitted.
    Submitted {
        /// Its first job's id.
        first: JobId,
        /// Its last job's id (the same for one job).
        last: JobId,
        /// The first job's `job ID` facts.
        record: Vec<(String, Value)>,
    },
    /// Its processes were created for the first time.
    Started(JobId),
    /// It moved to another queue.
    Moved {
        /// The job that moved.
        job: JobId,
        /// From this queue.
        from: u32,
        /// To this queue.
        to: u32,
        /// `residency` or `operator`.
        by: &'static str,
    },
    /// It was held (`by`: `operator` or `owner`).
    Held {
        /// The job now held.
        job: JobId,
        /// Who holds it.
        by: &'static str,
    },
    /// Its holds were released.
    Released(JobId),
    /// It ended: its whole `job ID` record, with `exit` and `reason`.
    Ended {
        /// The job that ended.
        job: JobId,
        /// Every field of its `job ID` record, in the order shown.
        record: Vec<(String, Value)>,
        /// How long before now it ended (a job whose processes ended
        /// while no daemon ran); zero for one that ends now.
        early: std::time::Duration,
    },
}

/// An input to the core.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Whether the state directory can hold jobs' scratch directories:
    /// `Some` names the path and the problem (jobs are refused meanwhile),
    /// `None` says that it works again.
    StateDir(Option<String>),
    /// A job submission, already validated.
    Submit {
        /// The connection it came on, which is told what becomes of it.
        client: ClientToken,
        /// The submitting process's credentials, from the kernel.
        cred: Cred,
        /// The submitting user's name.
        user: Rc<str>,
        /// The job (boxed: an input is moved several times on its way in,
        /// and the others are a few words).
        request: Box<JobRequest>,
    },
    /// How a job that ended before the core's memory of it ended, from
    /// the journal: the loop gives it before a submission that depends on
    /// that job ([`Core::unknown_ends`](super::Core::unknown_ends)).
    KnownEnd {
        /// The job.
        job: JobId,
        /// Its owner.
        owner: u32,
        /// How it ended.
        outcome: Outcome,
    },
    /// A connection closed: its job, if it has one, is killed.
    ClientGone(ClientToken),
    /// scrun was suspended: hold its job.
    Hold(ClientToken),
    /// scrun was continued: release its job.
    Release(ClientToken),
    /// scrun was interrupted: kill its job.
    Interrupt(ClientToken),
    /// scrun passes on a signal it received (a key of its terminal, a
    /// window change, a hang-up, a reader gone): deliver it to every
    /// process of its job.
    Deliver {
        /// The submitting connection.
        client: ClientToken,
        /// The signal.
        signal: i32,
    },
    /// Every process of a job is stopped.
    Stopped(JobId),
    /// A rank exited (it was reaped).
    RankExited {
        /// The job it belongs to.
        job: JobId,
        /// Its stage, from 0 (`SCORE_STAGE`).
        stage: usize,
        /// Its rank within the stage (`SCORE_RANK`).
        rank: u32,
        /// How it ended.
        status: ExitStatus,
    },
    /// Creating the job's processes failed; the actuator killed the ones it made.
    SpawnFailed {
        /// The job whose launch failed.
        job: JobId,
        /// What failed.
        message: String,
        /// 126 (cannot execute) or 127 (not found).
        status: i32,
    },
    /// The job has no process left (ranks and their descendants).
    ProcessesGone(JobId),
    /// The job's processes ended `ago` before now, while no daemon ran:
    /// its end, which follows, is recorded at that time.
    EndedAway {
        /// The job.
        job: JobId,
        /// How long ago its last process ended.
        ago: std::time::Duration,
    },
    /// The job could not be kept stopped (its stop was not confirmed in
    /// time, or something outside it kept continuing it while it was
    /// switched out, with no freezer to hold it), or it reached the limit
    /// of processes a job may have: it is killed, so that the jobs sharing
    /// its hosts get them.
    StopFailed {
        /// The job that could not be kept stopped.
        job: JobId,
        /// Why, for the job's end reason.
        reason: String,
    },
    /// A usage sample, which limits and residency are checked against.
    Usage {
        /// The job sampled.
        job: JobId,
        /// Its CPU time so far, memory per host and disk use.
        usage: Usage,
    },
    /// The kernel's final word on a job's processes once they are all
    /// reaped: their CPU time and, per host, the sum of their peak memory.
    /// It only completes the accounting; no limit is checked against it.
    FinalUsage {
        /// The job whose processes are all reaped.
        job: JobId,
        /// CPU time of every reaped process.
        cpu: Duration,
        /// Peak memory per host slot.
        peak_memory: Vec<u64>,
        /// Disk use at the end (executables and scratch directory).
        disk: u64,
    },
    /// A switch's latency, measured by the shell.
    SwitchMeasured {
        /// The number `Action::SwitchBegin` gave it.
        id: u64,
        /// From its first SIGSTOP to its last SIGCONT.
        latency: Duration,
    },
    /// A deadline the core asked for passed (see `Core::next_deadline`).
    Tick,
    /// A console command (from `sc_console`, or a line of the start-up
    /// script): its reply goes to `client` as [`ClientEvent::Answer`](super::ClientEvent::Answer), its
    /// effects come out as actions like those of any other input.
    Console {
        /// Who gets the reply.
        client: ClientToken,
        /// Who asks: rights are checked against it.
        cred: Cred,
        /// The command (boxed, as a submission's request).
        command: Box<Command>,
    },
    /// A new daemon took over the core of a killed one, whose clients are
    /// gone: a job with a client waits for its scrun to reattach until
    /// `reattach_until`, and submissions waiting for admission are dropped.
    Takeover {
        /// Until when a job's scrun may reattach.
        reattach_until: Tick,
        /// Jobs whose scrun the new daemon found gone (it gave up waiting,
        /// or was killed): they are not waited for.
        gone: Vec<JobId>,
    },
    /// No daemon took the job over within its keeper's wait, and the
    /// keeper killed what was left of it (the keeper's file says so): the
    /// job ends killed for `reason`. Its processes' ends follow.
    KeeperEnded {
        /// The job.
        job: JobId,
        /// Why its keeper ended it, for its end reason.
        reason: String,
    },
    /// A job's processes are gone and nothing says how they ended: the
    /// job ends, lost.
    ProcessesLost {
        /// The job.
        job: JobId,
        /// What happened, for its end reason.
        reason: String,
    },
    /// A scrun whose daemon was killed asks to be its job's client again.
    Reattach {
        /// The connection it asks on.
        client: ClientToken,
        /// Its credentials: only the job's owner may.
        cred: Cred,
        /// The job.
        job: JobId,
    },
    /// A signal asked the daemon to stop.
    Shutdown {
        /// Kill jobs rather than let them finish.
        now: bool,
    },
}
