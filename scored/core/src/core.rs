//! The scheduling core: the daemon's whole state and the only place it changes.
//!
//! Every input (a submission, a process exit, a stop confirmation, a clock
//! tick, a console command, a line of the start-up script) goes through
//! [`Core::handle`], together with the current [`Tick`]. The core answers
//! with [`Action`]s for the actuator (spawn, stop, continue, signal, sample)
//! and for clients (notifications, and the reply to a console command), and
//! with the next deadline it needs.
//!
//! A switch is two-phase: leaving jobs get `Stop`; a job enters (`Continue`
//! or `Spawn`) only once no job that is running or still stopping holds any
//! of its hosts, i.e. after the actuator has confirmed the stops. So two
//! jobs that share a host never run at once.
//!
//! Architecture invariant: no system calls, no clock reads, no I/O. Time
//! comes in as a `Tick`; names of users and groups come in through
//! [`Directory`].
#![forbid(unsafe_code)]

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::rc::Rc;
use std::time::Duration;

use crate::admission::{self, Ask, ClusterLimits, Decision, Ledger, Placement};
use crate::cluster::Topology;
use crate::command::reply::{Reply, Value};
use crate::command::{Command, GroupRef, QueueMode};
use crate::ids::{ClientToken, Cred, HostId, JobId, Tick};
use crate::job::{
    EndCause, ExitStatus, Job, JobLimits, JobRequest, JobSpec, JobState, Joiner, Launch,
    LaunchPlan, Life, Phase, ProcPlan, Usage,
};
use crate::jobset::{JobIdHasher, JobSet};
use crate::queue::Queue;
use crate::sched::{self, Scratch};
use crate::sorted::SortedSet;
use crate::undo::{Undo, UndoCell, UndoDeque, UndoLedger, UndoMap, UndoQueues, UndoSet};
use crate::units::{format_duration, format_size};

/// SIGTERM, SIGKILL: the two signals the core itself decides to send.
pub const SIGTERM: i32 = 15;
/// See [`SIGTERM`].
pub const SIGKILL: i32 = 9;
/// SIGPIPE's number: a producer's normal end in a pipeline.
pub const SIGPIPE: i32 = 13;

/// SIGSTOP, SIGTSTP, SIGCONT, SIGTTIN, SIGTTOU: only the scheduler stops and
/// continues jobs, or two jobs could run on one host.
const JOB_CONTROL_SIGNALS: [i32; 5] = [19, 20, 18, 21, 22];

/// How many finished jobs `jobs all` and `job ID` remember.
pub const HISTORY: usize = 1000;
/// How many recent switch latencies the median is taken over.
const LATENCY_WINDOW: usize = 1024;

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
    /// usage can change a decision ([`Core::usage_matters`]; a replay,
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
        /// The name given.
        name: String,
    },
    /// The group database has no such group.
    NotFound {
        /// The name given.
        name: String,
    },
    /// The group database could not be read.
    Lookup {
        /// The name given.
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

// Why a submission was refused, and how a job ended, are told to clients
// as they are: the core uses the protocol's own types rather than mirrors
// that the loop would translate.
pub use crate::proto::{EndKind, RejectKind as Rejection};

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
    /// Peak memory per host (host name, bytes).
    pub peak_memory: Vec<(String, u64)>,
    /// Peak disk use.
    pub peak_disk: u64,
}

impl From<&Accounting> for crate::proto::Accounting {
    /// The accounting as the protocol carries it: durations in seconds.
    fn from(accounting: &Accounting) -> crate::proto::Accounting {
        crate::proto::Accounting {
            queues: accounting.queues.clone(),
            wait_secs: accounting.wait.as_secs_f64(),
            wall_secs: accounting.wall.as_secs_f64(),
            cpu_secs: accounting.cpu.as_secs_f64(),
            stopped_secs: accounting.stopped.as_secs_f64(),
            switches: accounting.switches,
            peak_memory: accounting.peak_memory.clone(),
            peak_disk: accounting.peak_disk,
        }
    }
}

/// The end of a job, as told to its client.
#[derive(Debug, Clone, PartialEq)]
pub struct Ending {
    /// The job.
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
    /// Its accounting.
    pub accounting: Accounting,
}

/// Something a client is told.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    /// The job waits for resources.
    Waiting(String),
    /// The job was admitted.
    Admitted {
        /// Its id.
        job: JobId,
        /// Its queue.
        queue: u32,
        /// Its cluster's name.
        cluster: String,
        /// Its hosts' names.
        hosts: Vec<String>,
    },
    /// The submission was refused.
    Rejected {
        /// Why.
        kind: Rejection,
        /// What was asked and what exists.
        reason: String,
    },
    /// The job's processes were created.
    Started(JobId),
    /// The job is held.
    Held(JobId),
    /// The job ended.
    Ended(Box<Ending>),
    /// The reply to the client's console command.
    Answer(Reply),
}

/// Something to tell a client.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// The client.
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
    /// Create processes.
    Spawn(Box<LaunchPlan>),
    /// SIGSTOP every process of the job and report `Input::Stopped` once all are stopped.
    Stop(JobId),
    /// SIGCONT every process of the job.
    Continue(JobId),
    /// Send a signal to every process of the job.
    Signal {
        /// The job.
        job: JobId,
        /// The signal number.
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

/// What a job without a disk limit of its own may use at most: half of
/// its cluster's disk limit (by default the free space of the state
/// directory's filesystem at start-up), so that no single job fills it.
pub fn unlimited_disk_backstop(cluster_disk_limit: u64) -> u64 {
    cluster_disk_limit / 2
}

/// A step of a job's life, for the job journal (`Core::record_journal`).
/// The shell stamps each with the wall-clock time and appends it.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    /// The job was admitted (it was submitted `waited` earlier).
    Admitted {
        /// The job.
        job: JobId,
        /// How long it waited for admission.
        waited: Duration,
        /// Its `job ID` facts at admission.
        record: Vec<(String, Value)>,
    },
    /// Its processes were created for the first time.
    Started(JobId),
    /// It moved to another queue.
    Moved {
        /// The job.
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
        /// The job.
        job: JobId,
        /// Who holds it.
        by: &'static str,
    },
    /// Its holds were released.
    Released(JobId),
    /// It ended: its whole `job ID` record, with `exit` and `reason`.
    Ended {
        /// The job.
        job: JobId,
        /// The record.
        record: Vec<(String, Value)>,
    },
}

/// An input to the core.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Whether the state directory can hold jobs' scratch directories:
    /// `Some` names the path and the problem (jobs are refused meanwhile),
    /// `None` says that it works again.
    StateDir(Option<String>),
    /// A job submission.
    Submit {
        /// The submitting connection.
        client: ClientToken,
        /// Its credentials.
        cred: Cred,
        /// The submitting user's name.
        user: Rc<str>,
        /// The job (boxed: an input is moved several times on its way in,
        /// and the others are a few words).
        request: Box<JobRequest>,
    },
    /// A connection closed.
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
    /// A rank exited.
    RankExited {
        /// The job.
        job: JobId,
        /// The stage.
        stage: usize,
        /// The rank within the stage.
        rank: u32,
        /// How it ended.
        status: ExitStatus,
    },
    /// Creating the job's processes failed; the actuator killed the ones it made.
    SpawnFailed {
        /// The job.
        job: JobId,
        /// What failed.
        message: String,
        /// 126 (cannot execute) or 127 (not found).
        status: i32,
    },
    /// The job has no process left (ranks and their descendants).
    ProcessesGone(JobId),
    /// The job could not be kept stopped (its stop was not confirmed in
    /// time, or something outside it kept continuing it while it was
    /// switched out, with no freezer to hold it): it is killed, so that
    /// the jobs sharing its hosts get them.
    StopFailed {
        /// The job.
        job: JobId,
        /// Why, for the job's end reason.
        reason: String,
    },
    /// A usage measurement.
    Usage {
        /// The job.
        job: JobId,
        /// What was measured.
        usage: Usage,
    },
    /// The kernel's final word on a job's processes once they are all
    /// reaped: their CPU time and, per host, the sum of their peak memory.
    /// It only completes the accounting; no limit is checked against it.
    FinalUsage {
        /// The job.
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
        /// The switch.
        id: u64,
        /// From its first SIGSTOP to its last SIGCONT.
        latency: Duration,
    },
    /// A deadline passed.
    Tick,
    /// A console command (from `sc_console`, or a line of the start-up
    /// script): its reply goes to `client` as [`ClientEvent::Answer`], its
    /// effects come out as actions like those of any other input.
    Console {
        /// Who gets the reply.
        client: ClientToken,
        /// Who asks: rights are checked against it.
        cred: Cred,
        /// The command (boxed, as a submission's request).
        command: Box<Command>,
    },
    /// A signal asked the daemon to stop.
    Shutdown {
        /// Kill jobs rather than let them finish.
        now: bool,
    },
}

/// A client waiting for admission (the `wait` option).
#[derive(Debug, Clone)]
struct Waiter {
    client: ClientToken,
    cred: Cred,
    user: Rc<str>,
    request: JobRequest,
    submitted_at: Tick,
    /// Its scrun was suspended while it waited: admit it held.
    held: bool,
}

/// A finished job, remembered for `jobs all` and `job ID`.
#[derive(Debug, Clone)]
struct Finished {
    job: Job,
    /// Its command line as listings show it (the launch data is dropped).
    command: String,
    state: JobState,
    ended_at: Tick,
    ending: Ending,
}

/// Switch counting and latency statistics.
#[derive(Debug, Default, Clone)]
struct Switches {
    next_id: u64,
    open: Option<u64>,
    count: u64,
    /// Shared with the checkpoint (`Core::commit`) and copied when it
    /// changes, so that a commit does not copy the window.
    recent: Rc<VecDeque<Duration>>,
    max: Duration,
}

/// Admitted jobs by id. Ids are handed out in order and only grow, so a
/// deque indexed by `id - base` finds a job in constant time and costs a
/// pointer per slot; slots of finished jobs at the front are dropped as the
/// oldest jobs end. (A `BTreeMap` of jobs, filled in increasing order,
/// leaves its nodes half empty: twice the memory, and slower lookups in the
/// scheduling decision.)
///
/// Once the core keeps a checkpoint (`Core::commit`), the table logs each
/// job's record as it was before the first change since the commit: the
/// record is shared (`Rc`) between the log and the table, and the table's
/// copy is made when it is changed (copy on write). A rollback puts the
/// logged records back; a commit drops them. So the checkpoint costs a
/// pointer and a copy of the record for each job an event changed, and
/// nothing for the others.
#[derive(Debug, Default, Clone)]
struct JobTable {
    base: u64,
    slots: VecDeque<Option<Rc<Job>>>,
    len: usize,
    /// Records as they were at the last commit, of the jobs changed since.
    log: Vec<(JobId, Option<Rc<Job>>)>,
    /// The jobs already in `log`.
    logged: JobSet,
    recording: bool,
}

impl JobTable {
    fn slot(&self, id: &JobId) -> Option<usize> {
        let idx = id.0.checked_sub(self.base)?;
        (idx < self.slots.len() as u64).then_some(idx as usize)
    }

    fn get(&self, id: &JobId) -> Option<&Job> {
        self.slots.get(self.slot(id)?)?.as_deref()
    }

    /// Keeps the record `id` has now, if this is the first change to it
    /// since the commit.
    #[inline]
    fn note(&mut self, id: JobId) {
        if self.recording {
            self.note_recorded(id);
        }
    }

    /// Out of line, so that the look-ups of a core that keeps no
    /// checkpoint (a replay) stay as small as they were.
    #[cold]
    #[inline(never)]
    fn note_recorded(&mut self, id: JobId) {
        if self.logged.insert(id) {
            let before = self.slot(&id).and_then(|slot| self.slots[slot].clone());
            self.log.push((id, before));
        }
    }

    #[inline]
    fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        let slot = self.slot(id)?;
        if self.recording && self.slots[slot].is_some() {
            self.note_recorded(*id);
        }
        self.slots.get_mut(slot)?.as_mut().map(Rc::make_mut)
    }

    fn contains_key(&self, id: &JobId) -> bool {
        self.get(id).is_some()
    }

    /// Adds a job; its id must be above every id the table has seen.
    fn insert(&mut self, id: JobId, job: Job) {
        self.note(id);
        self.put(id, Some(Rc::new(job)));
    }

    /// Sets the slot of `id`, growing the deque at either end as needed
    /// and dropping empty slots at the front.
    fn put(&mut self, id: JobId, job: Option<Rc<Job>>) {
        if self.slots.is_empty() {
            if job.is_none() {
                return;
            }
            self.base = id.0;
        }
        while id.0 < self.base {
            self.slots.push_front(None);
            self.base -= 1;
        }
        let idx = (id.0 - self.base) as usize;
        while self.slots.len() <= idx {
            self.slots.push_back(None);
        }
        let had = self.slots[idx].is_some();
        let has = job.is_some();
        self.slots[idx] = job;
        match (had, has) {
            (false, true) => self.len += 1,
            (true, false) => self.len -= 1,
            _ => {}
        }
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        while matches!(self.slots.back(), Some(None)) {
            self.slots.pop_back();
        }
    }

    fn remove(&mut self, id: &JobId) -> Option<Job> {
        let slot = self.slot(id)?;
        self.slots[slot].as_ref()?;
        self.note(*id);
        let job = self.slots[slot].take()?;
        self.len -= 1;
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        Some(Rc::try_unwrap(job).unwrap_or_else(|shared| Job::clone(&shared)))
    }

    fn values(&self) -> impl Iterator<Item = &Job> {
        self.slots.iter().filter_map(|slot| slot.as_deref())
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Undo for JobTable {
    fn commit(&mut self) {
        self.recording = true;
        self.log.clear();
        self.logged.clear();
    }

    fn rollback(&mut self) {
        while let Some((id, before)) = self.log.pop() {
            self.put(id, before);
        }
        self.logged.clear();
    }
}

impl std::ops::Index<&JobId> for JobTable {
    type Output = Job;

    fn index(&self, id: &JobId) -> &Job {
        self.get(id).expect("the job is in the table")
    }
}

/// The daemon's state. A clone shares the jobs and the finished ones
/// (see `Core::commit`, which keeps such a copy of what does not log its
/// own changes).
#[derive(Clone)]
pub struct Core {
    config: UndoCell<CoreConfig>,
    topology: UndoCell<Topology>,
    limits: Vec<ClusterLimits>,
    ledger: UndoLedger,
    queues: UndoQueues,
    jobs: JobTable,
    by_client: UndoMap<ClientToken, JobId>,
    waiting: UndoDeque<Rc<Waiter>>,
    finished: UndoDeque<Rc<Finished>>,
    /// Jobs whose processes may be running: phase Running or Stopping.
    live: UndoSet<SortedSet<JobId>>,
    /// How many of them are Stopping: with none, and every job live,
    /// nothing waits to run (`next_decision` need not look at the queues).
    n_stopping: usize,
    /// Graceful kills in progress, by the time they turn into SIGKILL.
    kill_deadlines: UndoSet<SortedSet<(Tick, JobId)>>,
    /// Running jobs with a `-time` limit, by the time it is reached.
    time_deadlines: UndoSet<SortedSet<(Tick, JobId)>>,
    /// Jobs whose hosts were chosen by the last decision but that have not
    /// started yet (their hosts were still being vacated); they choose again
    /// at the next decision.
    bound_waiting: BTreeSet<JobId>,
    /// Hosts chosen for jobs that had none, from the last decision.
    bindings: Vec<(JobId, Vec<HostId>)>,
    /// When usage was last asked for (each slice boundary with live jobs).
    sampled_at: Tick,
    /// `ran` was emptied by a slice boundary: the next decision refills it
    /// with every running job (later ones add only the jobs that enter).
    ran_refill: bool,
    /// Unfinished jobs with a CPU time limit.
    n_cputime_limited: usize,
    /// Unfinished jobs being killed (whose `ending` is set): with none, a
    /// decision places no job ahead of the queues.
    n_ending: usize,
    /// Unfinished jobs with a CPU time, memory or disk limit (whose usage
    /// samples can change a decision).
    n_usage_limited: usize,
    /// Live jobs with a CPU time limit or a residency to cross, by how far
    /// from it their last sample left them ([`Core::crossing_key`]), so
    /// that `next_decision` finds the earliest crossing without looking at
    /// every running job.
    crossings: UndoSet<BTreeSet<(u64, JobId)>>,
    /// Each indexed job's key in `crossings`.
    crossing_of: UndoMap<JobId, u64, BuildHasherDefault<JobIdHasher>>,
    /// Jobs that ran during the current slice (gang rotation), in no
    /// order and perhaps more than once: a switch adds a few, where a
    /// hashed set would hash each (the slice boundary sorts them once).
    ran: Vec<JobId>,
    /// Past this length, `ran` is sorted and its repeats dropped, so that
    /// it cannot grow with the switches of a slice that is not ending.
    ran_compact_at: usize,
    /// Launch data of unfinished jobs by content hash, so identical
    /// submissions share one copy.
    launches: UndoMap<u64, Vec<Launch>>,
    next_job: u64,
    slice_anchor: Tick,
    next_slice: Tick,
    switches: Switches,
    shutting_down: bool,
    /// Why jobs cannot be run now, when the state directory is unusable.
    state_dir_problem: Option<String>,
    scratch: Scratch,
    active: Vec<JobId>,
    /// Job events not yet taken by the shell, when recording is on.
    journal: Option<Vec<JobEvent>>,
    /// The running binary's version and how many in-place restarts this
    /// daemon has made, for `status`.
    build: (String, u64),
    /// Names of groups for console commands (`NoDirectory` until the shell
    /// gives one).
    directory: Rc<dyn Directory>,
    /// The last decision's active set still holds: since it was computed
    /// only stops of jobs not being killed were confirmed, and the active
    /// set of gang queues depends on nothing those change (see
    /// `reschedule`). The switch's second decision, once the stops are
    /// confirmed, then costs no walk of the queues.
    decision_current: bool,
    /// Hosts where a job's processes run or are being stopped: the hosts of
    /// the live jobs (which never share one), kept as jobs enter and leave
    /// `live` so that a decision does not gather them again.
    /// One bit a host (64 hosts a word).
    busy: Vec<u64>,
    /// Buffers the scheduling decision reuses (see [`Spare`]).
    spare: Spare,
    /// The state of the last `commit` but for the containers that log
    /// their changes (see `Core::commit`).
    saved: Option<Box<Core>>,
}

/// Lists the scheduling decision fills and empties again at every switch,
/// kept so that a switch allocates nothing (a replay makes tens of millions
/// of them). Empty between decisions, so a copy of the core copies nothing
/// of them.
#[derive(Debug, Default, Clone)]
struct Spare {
    /// Jobs placed before any queue.
    first: Vec<JobId>,
    /// Running jobs that left the active set.
    leaving: Vec<JobId>,
    /// Chosen jobs whose hosts are free.
    entering: Vec<JobId>,
    /// The jobs that ran, set aside by a queue's rotation.
    rotated: Vec<JobId>,
    /// The jobs that ran in the slice, when they are few ([`FEW_RAN`]).
    ran: Vec<JobId>,
    /// The jobs that ran in the slice, when they are many.
    ran_set: JobSet,
    /// How many of those each queue holds.
    ran_per_queue: Vec<usize>,
    /// Positions in a queue's order, for a rotation.
    positions: Vec<usize>,
}

/// Up to this many jobs that ran in a slice, a rotation compares queued
/// jobs with a list of them rather than looking each up in a hashed set.
const FEW_RAN: usize = 16;

/// The least length at which the list of jobs that ran is compacted.
const RAN_COMPACT_AT: usize = 64;

impl Core {
    /// A core with the default queues.
    pub fn new(config: CoreConfig, topology: Topology, memory_limits: Vec<Option<u64>>) -> Core {
        let n_hosts = topology.hosts.len();
        let limits = topology
            .clusters
            .iter()
            .map(|cluster| ClusterLimits {
                memory: memory_limits.get(cluster.id.idx()).copied().flatten(),
                disk: config.disk.get(cluster.id.idx()).copied().flatten(),
                jobs: None,
            })
            .collect();
        let ledger = Ledger::new(&topology);
        Core {
            next_slice: Tick::default().after(config.timeslice),
            config: UndoCell::new(config),
            topology: UndoCell::new(topology),
            limits,
            ledger: UndoLedger::new(ledger),
            queues: UndoQueues::new(Queue::defaults()),
            jobs: JobTable::default(),
            by_client: UndoMap::default(),
            waiting: UndoDeque::default(),
            finished: UndoDeque::default(),
            live: UndoSet::default(),
            n_stopping: 0,
            kill_deadlines: UndoSet::default(),
            time_deadlines: UndoSet::default(),
            bound_waiting: BTreeSet::new(),
            bindings: Vec::new(),
            sampled_at: Tick::default(),
            ran_refill: false,
            n_cputime_limited: 0,
            n_ending: 0,
            n_usage_limited: 0,
            crossings: UndoSet::default(),
            crossing_of: UndoMap::default(),
            ran: Vec::new(),
            ran_compact_at: RAN_COMPACT_AT,
            launches: UndoMap::default(),
            next_job: 1,
            slice_anchor: Tick::default(),
            switches: Switches::default(),
            shutting_down: false,
            state_dir_problem: None,
            scratch: Scratch::default(),
            active: Vec::new(),
            journal: None,
            build: (env!("CARGO_PKG_VERSION").to_string(), 0),
            directory: Rc::new(NoDirectory),
            decision_current: false,
            busy: vec![0; n_hosts.div_ceil(64)],
            spare: Spare::default(),
            saved: None,
        }
    }

    /// Sets where console commands look up names of groups.
    pub fn set_directory(&mut self, directory: Box<dyn Directory>) {
        self.directory = Rc::from(directory);
    }

    /// Sets what `status` shows as `version` and `restarts`.
    pub fn set_build(&mut self, version: String, restarts: u64) {
        self.build = (version, restarts);
    }

    /// Starts recording job events for the journal; the shell takes them
    /// with [`Core::take_journal`] after each input or command.
    pub fn record_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// The job events recorded since the last call.
    pub fn take_journal(&mut self) -> Vec<JobEvent> {
        match &mut self.journal {
            Some(events) => std::mem::take(events),
            None => Vec::new(),
        }
    }

    fn journal(&mut self, event: JobEvent) {
        if let Some(events) = &mut self.journal {
            events.push(event);
        }
    }

    /// Job ids continue after `last` (the highest id an earlier daemon of
    /// this state directory handed out), so that no id is ever reused.
    /// Only raises the next id, and only before any job is admitted.
    pub fn continue_ids_after(&mut self, last: u64) {
        if self.jobs.is_empty() {
            self.next_job = self.next_job.max(last.saturating_add(1));
        }
    }

    /// The id the next admitted job gets.
    pub fn next_job_id(&self) -> u64 {
        self.next_job
    }

    /// The `job ID` facts of every unfinished job, for the head of a new
    /// journal file.
    pub fn open_records(&self, now: Tick) -> Vec<Vec<(String, Value)>> {
        self.jobs
            .values()
            .map(|job| self.job_fields(job, command_line(job), job.state(), None, now, true))
            .collect()
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The queues.
    pub fn queues(&self) -> &[Queue] {
        &self.queues
    }

    /// An admitted, unfinished job.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }

    /// Admitted, unfinished jobs.
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }

    /// Number of admitted, unfinished jobs.
    pub fn n_jobs(&self) -> usize {
        self.jobs.len()
    }

    /// Whether a shutdown is under way.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// The current time slice.
    pub fn timeslice(&self) -> Duration {
        self.config.timeslice
    }

    /// The next time the core needs a `Tick`, if any.
    pub fn next_deadline(&self) -> Option<Tick> {
        let slice = if self.jobs.is_empty() {
            None
        } else {
            Some(self.next_slice)
        };
        Tick::earliest(self.timer_deadline(), slice)
    }

    /// The earliest graceful-kill escalation or `-time` limit.
    fn timer_deadline(&self) -> Option<Tick> {
        let kill = self.kill_deadlines.first().map(|(deadline, _)| *deadline);
        let time = self.time_deadlines.first().map(|(deadline, _)| *deadline);
        Tick::earliest(kill, time)
    }

    /// The next time at which a `Tick` could change what runs, which can be
    /// much later than [`Core::next_deadline`]: a slice boundary matters
    /// only while a gang queue has a runnable job that is not running (the
    /// rotation then changes the active set), or when a limit on CPU time
    /// or residency could be crossed by then, assuming a job's CPU time
    /// grows by at most one second per process per second of running and
    /// its memory and disk use stay as last sampled. The daemon ticks at
    /// every slice (its listings show fresh usage); a replay with a virtual
    /// clock jumps to this time instead, which changes no decision.
    pub fn next_decision(&self, now: Tick) -> Option<Tick> {
        let timers = self.timer_deadline();
        if self.jobs.is_empty() {
            return timers;
        }
        // Every job running (all live, none being stopped): none waits.
        let all_running = self.n_stopping == 0 && self.live.len() == self.jobs.len();
        let rotation_matters = !all_running
            && self.queues.iter().any(|queue| {
                queue.activated
                    && queue.mode == QueueMode::Gang
                    && queue.order().any(|job| {
                        self.jobs.get(&job).is_some_and(|record| {
                            record.phase() != Phase::Running
                                && !record.is_ending()
                                && !record.held()
                        })
                    })
            });
        if rotation_matters {
            return Tick::earliest(timers, Some(self.next_slice));
        }
        // The earliest time a sample could show a CPU time or residency
        // limit crossed: a job's CPU time grows by at most one second per
        // process per second since the last sample, so the job with the
        // least left per process crosses first.
        let crossing = self.crossings.first().map(|&(left, _)| {
            if now >= self.sampled_at {
                Tick(self.sampled_at.0.saturating_add(left)).max(now)
            } else {
                Tick(now.0.saturating_add(left))
            }
        });
        let slice = crossing.map(|at| {
            if at <= self.next_slice {
                return self.next_slice;
            }
            let length = self.config.timeslice.as_micros().max(1) as u64;
            let elapsed = at.0.saturating_sub(self.slice_anchor.0);
            Tick(self.slice_anchor.0 + elapsed.div_ceil(length) * length)
        });
        Tick::earliest(timers, slice)
    }

    /// Whether a usage sample of `job` can change a decision: the job has
    /// a CPU time, memory or disk limit, or its queue demotes by residency.
    /// (The daemon samples every running job each slice anyway, for its
    /// listings; a replay answers only the samples that matter.)
    pub fn usage_matters(&self, job: JobId) -> bool {
        self.jobs.get(&job).is_some_and(|record| {
            usage_limited(&record.limits)
                || self
                    .queues
                    .get(record.queue as usize)
                    .is_some_and(|queue| queue.residency.is_some())
        })
    }

    /// How much CPU time per process a live job has left before it crosses
    /// its CPU time limit or its queue's residency, in microseconds, by its
    /// last sample; `None` if it has neither.
    fn crossing_key(&self, record: &Job) -> Option<u64> {
        let residency = self
            .queues
            .get(record.queue as usize)
            .and_then(|queue| queue.residency)
            .filter(|_| (record.queue as usize) + 1 < self.queues.len())
            .map(|residency| residency + record.residency_base);
        let per_second = u64::from(record.nprocs().max(1));
        let cpu = record.usage.cpu.as_micros() as u64;
        [record.limits.cputime, residency]
            .into_iter()
            .flatten()
            .map(|threshold| (threshold.as_micros() as u64).saturating_sub(cpu) / per_second)
            .min()
    }

    /// Brings a job's entry in `crossings` up to date: after it becomes
    /// live or stops being live, after a sample, after a move.
    #[inline]
    fn refresh_crossing(&mut self, job: JobId) {
        // Nothing indexed, and nothing to index: no job has a CPU time
        // limit and no queue demotes by residency (a job enters and leaves
        // `live` at every switch; this keeps that free of look-ups).
        if self.crossing_of.is_empty()
            && self.n_cputime_limited == 0
            && self.queues.iter().all(|queue| queue.residency.is_none())
        {
            return;
        }
        self.refresh_crossing_of(job);
    }

    #[inline(never)]
    fn refresh_crossing_of(&mut self, job: JobId) {
        let key = self
            .live
            .contains(&job)
            .then(|| self.jobs.get(&job))
            .flatten()
            .and_then(|record| self.crossing_key(record));
        let old = match key {
            Some(key) => self.crossing_of.insert(job, key),
            None => self.crossing_of.remove(&job),
        };
        if old != key {
            if let Some(old) = old {
                self.crossings.remove(&(old, job));
            }
            if let Some(key) = key {
                self.crossings.insert((key, job));
            }
        }
    }

    /// Recomputes from the jobs themselves what the scheduling path keeps
    /// up to date as jobs change (the busy hosts, the count of stopping
    /// jobs, the crossing index), for a core rebuilt from a snapshot.
    fn rebuild_schedule_state(&mut self) {
        self.busy = vec![0; self.topology.hosts.len().div_ceil(64)];
        self.n_stopping = 0;
        self.crossings.clear();
        self.crossing_of.clear();
        self.decision_current = false;
        let live: Vec<JobId> = self.live.iter().copied().collect();
        for job in live {
            let Some(record) = self.jobs.get(&job) else {
                continue;
            };
            for host in &record.hosts {
                set_busy(&mut self.busy, None, std::slice::from_ref(host), true);
            }
            if record.phase() == Phase::Stopping {
                self.n_stopping += 1;
            }
            self.refresh_crossing(job);
        }
    }

    /// How many switches the core has made.
    pub fn switch_count(&self) -> u64 {
        self.switches.count
    }

    /// Feeds one input; returns the actions to carry out, in order.
    pub fn handle(&mut self, input: Input, now: Tick) -> Vec<Action> {
        self.handle_all([input], now)
    }

    /// Feeds inputs that arrived together (one event's worth: every child
    /// reaped after one SIGCHLD, say), then decides once: a switch of many
    /// jobs costs one scheduling decision, not one per confirmation.
    pub fn handle_all(
        &mut self,
        inputs: impl IntoIterator<Item = Input>,
        now: Tick,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        self.handle_all_into(inputs, now, &mut out);
        out
    }

    /// [`Core::handle_all`], appending the actions to `out`, so that a
    /// caller feeding many events reuses one list.
    pub fn handle_all_into(
        &mut self,
        inputs: impl IntoIterator<Item = Input>,
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        for input in inputs {
            self.apply(input, now, out);
        }
        self.reschedule(now, out);
    }

    fn apply(&mut self, input: Input, now: Tick, out: &mut Vec<Action>) {
        // Only a confirmed stop of a job that is not being killed leaves the
        // last active set standing (a job being killed is placed first).
        let keeps_decision = match &input {
            Input::Stopped(job) => self
                .jobs
                .get(job)
                .is_some_and(|record| !record.is_ending() && record.kill_deadline().is_none()),
            _ => false,
        };
        if !keeps_decision {
            self.decision_current = false;
        }
        match input {
            Input::Submit {
                client,
                cred,
                user,
                request,
            } => self.submit(client, cred, user, *request, now, out),
            Input::ClientGone(client) => self.client_gone(client, now, out),
            Input::Hold(client) => {
                if let Some(&job) = self.by_client.get(&client) {
                    if let Some(record) = self.jobs.get_mut(&job) {
                        if !record.is_ending() && !record.owner_hold {
                            record.owner_hold = true;
                            self.journal(JobEvent::Held { job, by: "owner" });
                        }
                    }
                    out.push(Action::notify(client, ClientEvent::Held(job)));
                } else if let Some(idx) = self.waiting.iter().position(|w| w.client == client) {
                    self.waiting
                        .modify(|waiting| Rc::make_mut(&mut waiting[idx]).held = true);
                }
            }
            Input::Release(client) => {
                if let Some(record) = self
                    .by_client
                    .get(&client)
                    .and_then(|job| self.jobs.get_mut(job))
                {
                    if record.owner_hold {
                        record.owner_hold = false;
                        let job = record.id;
                        self.journal(JobEvent::Released(job));
                    }
                } else if let Some(idx) = self.waiting.iter().position(|w| w.client == client) {
                    self.waiting
                        .modify(|waiting| Rc::make_mut(&mut waiting[idx]).held = false);
                }
            }
            Input::Interrupt(client) => {
                if let Some(&job) = self.by_client.get(&client) {
                    self.begin_kill(
                        job,
                        EndCause::Killed("by its scrun (interrupted)".into()),
                        true,
                        now,
                        out,
                    );
                } else if let Some(idx) = self.waiting.iter().position(|w| w.client == client) {
                    self.waiting.modify(|waiting| waiting.remove(idx));
                    out.push(Action::notify(
                        client,
                        ClientEvent::Rejected {
                            kind: Rejection::Resources,
                            reason: "interrupted while waiting for admission".into(),
                        },
                    ));
                }
            }
            Input::Deliver { client, signal } => {
                // Only a job with processes, and not one being killed; a
                // stopped job gets the signal when it is continued.
                let job = self.by_client.get(&client).copied();
                if let Some(record) = job.and_then(|job| self.jobs.get(&job)) {
                    if record.phase() != Phase::Idle && !record.is_ending() {
                        out.push(Action::Signal {
                            job: record.id,
                            signal,
                        });
                    }
                }
            }
            Input::Stopped(job) => {
                if let Some(record) = self.jobs.get_mut(&job) {
                    if record.stopped() {
                        self.n_stopping -= 1;
                        self.live.remove(&job);
                        let mask = self.scratch.mask_of(job);
                        set_busy(&mut self.busy, mask, &record.hosts, false);
                        self.refresh_crossing(job);
                    }
                }
            }
            Input::RankExited {
                job,
                stage,
                rank,
                status,
            } => self.rank_exited(job, stage, rank, status, out),
            Input::SpawnFailed {
                job,
                message,
                status,
            } => {
                if let Some(record) = self.jobs.get_mut(&job) {
                    if !record.is_ending() {
                        self.n_ending += 1;
                    }
                    record.end_unless_ending(EndCause::LaunchFailed { message, status });
                }
            }
            Input::ProcessesGone(job) => self.processes_gone(job, now, out),
            Input::StopFailed { job, reason } => {
                self.begin_kill(job, EndCause::Limit(reason), false, now, out);
            }
            Input::Usage { job, usage } => {
                self.usage(job, usage, now, out);
                self.refresh_crossing(job);
            }
            Input::FinalUsage {
                job,
                cpu,
                peak_memory,
                disk,
            } => {
                if let Some(record) = self.jobs.get_mut(&job) {
                    record.usage.cpu = record.usage.cpu.max(cpu);
                    record.peak_disk = record.peak_disk.max(disk);
                    for (peak, last) in record.peak_memory.iter_mut().zip(peak_memory) {
                        *peak = (*peak).max(last);
                    }
                }
                self.refresh_crossing(job);
            }
            Input::SwitchMeasured { latency, .. } => {
                let switches = &mut self.switches;
                let recent = Rc::make_mut(&mut switches.recent);
                if recent.len() == LATENCY_WINDOW {
                    recent.pop_front();
                }
                recent.push_back(latency);
                switches.max = switches.max.max(latency);
            }
            Input::Tick => self.tick(now, out),
            Input::Console {
                client,
                cred,
                command,
            } => self.console(client, &cred, *command, now, out),
            Input::StateDir(problem) => {
                if self.state_dir_problem != problem {
                    match &problem {
                        Some(message) => tracing::error!(%message, "not accepting jobs"),
                        None => tracing::info!("the state directory works again; accepting jobs"),
                    }
                }
                self.state_dir_problem = problem;
            }
            Input::Shutdown { now: kill } => {
                self.shutdown(kill, now, out);
            }
        }
    }

    /// Whether `uid` is root, the daemon's own user or an operator: the
    /// event loop holds these to no per-user connection limit and keeps a
    /// reserve of connections for them.
    pub fn is_privileged(&self, uid: u32) -> bool {
        uid == 0 || uid == self.config.daemon_uid || self.config.operators.contains(&uid)
    }

    /// Whether `cred` is root, the daemon's user or an operator.
    pub fn is_operator(&self, cred: &Cred) -> bool {
        cred.uid == 0
            || cred.uid == self.config.daemon_uid
            || self.config.operators.contains(&cred.uid)
    }

    fn default_queue(&self) -> u32 {
        if self.queues.len() > 1 {
            1
        } else {
            self.queues.len().saturating_sub(1) as u32
        }
    }

    // ----- submission and admission -----

    fn submit(
        &mut self,
        client: ClientToken,
        cred: Cred,
        user: Rc<str>,
        request: JobRequest,
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        let reject = |kind, reason: String, out: &mut Vec<Action>| {
            out.push(Action::notify(
                client,
                ClientEvent::Rejected { kind, reason },
            ));
        };
        let duplicate =
            self.by_client.contains_key(&client) || self.waiting.iter().any(|w| w.client == client);
        if duplicate {
            // The loop lets a connection submit once (its "one job only"
            // refusal), so this is a bug: the job that came first keeps its
            // client, and nothing is replaced.
            debug_assert!(!duplicate, "client {} submitted twice", client.0);
            tracing::error!(
                client = client.0,
                "a second submission from one client reached the core; ignored"
            );
            return;
        }
        if self.config.daemon_uid != 0 && cred.uid != self.config.daemon_uid {
            // A daemon that is not root cannot change credentials, so it
            // would run the job as itself.
            return reject(
                Rejection::Permission,
                format!(
                    "this scored runs as {} and can only run that user's jobs",
                    self.config.daemon_user
                ),
                out,
            );
        }
        if self.shutting_down {
            return reject(
                Rejection::ShuttingDown,
                "scored is shutting down".into(),
                out,
            );
        }
        if let Some(problem) = &self.state_dir_problem {
            // The wire has no kind of its own for this; like a shutdown, the
            // daemon takes no jobs now, and the reason says why.
            return reject(
                Rejection::ShuttingDown,
                format!("scored cannot run jobs now: {problem}"),
                out,
            );
        }
        let waiter = Waiter {
            client,
            cred,
            user,
            request,
            submitted_at: now,
            held: false,
        };
        if let Err((kind, reason)) = self.check_queue(&waiter) {
            return reject(kind, reason, out);
        }
        let decision = self.decide(&waiter);
        // Waiting jobs are admitted in submission order: a newcomer may not
        // take what they wait for. One that reserves nothing (no memory,
        // no disk, no job-count limit) takes nothing from them.
        if !self.waiting.is_empty()
            && !matches!(&decision, Decision::Admit(placement) if self.reserves_nothing(placement))
        {
            if let Decision::TooBig(reason) = decision {
                return reject(Rejection::TooBig, reason, out);
            }
            let reason = format!(
                "{} job{} already wait{} for resources ahead of this one",
                self.waiting.len(),
                if self.waiting.len() == 1 { "" } else { "s" },
                if self.waiting.len() == 1 { "s" } else { "" }
            );
            return self.short(waiter, reason, out);
        }
        match decision {
            Decision::Admit(placement) => self.admit(waiter, placement, now, out),
            Decision::TooBig(reason) => reject(Rejection::TooBig, reason, out),
            Decision::Short(reason) => self.short(waiter, reason, out),
        }
    }

    /// Whether admitting a job with this placement takes nothing that a
    /// waiting job could need.
    fn reserves_nothing(&self, placement: &Placement) -> bool {
        placement.limits.memory.is_none()
            && placement.limits.disk.is_none()
            && self.limits[placement.cluster.idx()].jobs.is_none()
    }

    fn short(&mut self, waiter: Waiter, reason: String, out: &mut Vec<Action>) {
        let client = waiter.client;
        if waiter.request.wait {
            self.waiting.push_back(Rc::new(waiter));
            out.push(Action::notify(client, ClientEvent::Waiting(reason)));
        } else {
            out.push(Action::notify(
                client,
                ClientEvent::Rejected {
                    kind: Rejection::Resources,
                    reason,
                },
            ));
        }
    }

    fn queue_of(&self, request: &JobRequest) -> u32 {
        request.priority.unwrap_or_else(|| self.default_queue())
    }

    fn check_queue(&self, waiter: &Waiter) -> Result<(), (Rejection, String)> {
        let number = self.queue_of(&waiter.request);
        let Some(queue) = self.queues.get(number as usize) else {
            return Err((
                Rejection::Invalid,
                format!(
                    "no queue {number}: queues are 0 to {}",
                    self.queues.len().saturating_sub(1)
                ),
            ));
        };
        if !queue.enabled {
            return Err((
                Rejection::QueueDisabled,
                format!("queue {number} is disabled"),
            ));
        }
        if let Some(gid) = queue.group {
            if waiter.cred.uid != 0 && !waiter.cred.in_group(gid) {
                return Err((
                    Rejection::Permission,
                    format!(
                        "queue {number} is restricted to group {}; user {} (uid {}) is not a member",
                        queue_group_name(queue),
                        waiter.user,
                        waiter.cred.uid
                    ),
                ));
            }
        }
        Ok(())
    }

    fn decide(&self, waiter: &Waiter) -> Decision {
        let queue = &self.queues[self.queue_of(&waiter.request) as usize];
        let ask = Ask {
            procs: waiter.request.procs,
            memory: waiter.request.memory,
            disk: waiter.request.disk,
        };
        admission::decide(ask, queue, &self.topology, &self.limits, &self.ledger)
    }

    fn admit(&mut self, waiter: Waiter, placement: Placement, now: Tick, out: &mut Vec<Action>) {
        let id = JobId(self.next_job);
        self.next_job += 1;
        let queue = self.queue_of(&waiter.request);
        self.ledger.reserve(&placement);
        let n_slots = placement.hosts.len();
        let job = Job {
            id,
            user: waiter.user,
            owner: waiter.cred,
            client: Some(waiter.client),
            queue,
            queues_visited: smallvec::smallvec![queue],
            cluster: placement.cluster,
            hosts: placement.hosts,
            layout: placement.layout.into(),
            limits: placement.limits,
            estimate: waiter.request.time,
            operator_hold: false,
            owner_hold: waiter.held,
            life: Life::Queued,
            ending: None,
            submitted_at: waiter.submitted_at,
            admitted_at: now,
            run_time: Duration::ZERO,
            switches: 0,
            usage: Usage::default(),
            peak_memory: smallvec::smallvec![0; n_slots],
            peak_disk: 0,
            residency_base: Duration::ZERO,
            spec: JobSpec {
                joiner: waiter.request.joiner,
                procs: waiter.request.procs,
                launch: self.intern_launch(&waiter.request),
            },
        };
        let hosts = job
            .hosts
            .iter()
            .map(|host| self.topology.host(*host).name.clone())
            .collect();
        let cluster = self.topology.cluster(job.cluster).name.clone();
        out.push(Action::notify(
            waiter.client,
            ClientEvent::Admitted {
                job: id,
                queue,
                cluster,
                hosts,
            },
        ));
        if self.jobs.is_empty() {
            // Restart the slice cadence when the daemon leaves idleness, so
            // that the first job gets a whole slice.
            self.slice_anchor = now;
            self.next_slice = now.after(self.config.timeslice);
        }
        self.queues.push_job(queue as usize, id, false);
        self.by_client.insert(waiter.client, id);
        if self.journal.is_some() {
            let record = self.job_fields(&job, command_line(&job), job.state(), None, now, true);
            self.journal(JobEvent::Admitted {
                job: id,
                waited: now.since(job.submitted_at),
                record,
            });
        }
        if job.limits.cputime.is_some() {
            self.n_cputime_limited += 1;
        }
        if usage_limited(&job.limits) {
            self.n_usage_limited += 1;
        }
        self.jobs.insert(id, job);
    }

    fn admit_waiters(&mut self, now: Tick, out: &mut Vec<Action>) {
        while let Some(front) = self.waiting.front() {
            if let Err((kind, reason)) = self.check_queue(front) {
                let client = front.client;
                self.waiting.pop_front();
                out.push(Action::notify(
                    client,
                    ClientEvent::Rejected { kind, reason },
                ));
                continue;
            }
            match self.decide(front) {
                Decision::Admit(placement) => {
                    let waiter = self.waiting.pop_front().expect("front exists");
                    let waiter = Rc::try_unwrap(waiter).unwrap_or_else(|shared| (*shared).clone());
                    self.admit(waiter, placement, now, out);
                }
                Decision::TooBig(reason) => {
                    let client = front.client;
                    self.waiting.pop_front();
                    out.push(Action::notify(
                        client,
                        ClientEvent::Rejected {
                            kind: Rejection::TooBig,
                            reason,
                        },
                    ));
                }
                Decision::Short(_) => break,
            }
        }
    }

    /// The packed launch data of a request, shared with any identical one.
    fn intern_launch(&mut self, request: &JobRequest) -> Launch {
        let launch = Launch::pack_with(
            &request.stages,
            &request.env,
            &request.cwd,
            &request.inherited,
        );
        let key = launch_key(&launch);
        if let Some(existing) = self
            .launches
            .get(&key)
            .and_then(|bucket| bucket.iter().find(|known| **known == launch))
        {
            return existing.clone();
        }
        match self.launches.get_mut(&key) {
            Some(bucket) => bucket.push(launch.clone()),
            None => {
                self.launches.insert(key, vec![launch.clone()]);
            }
        }
        launch
    }

    /// Drops the interner's copy once no unfinished job holds it (finished
    /// jobs keep theirs for listings). Held by the interner, the finishing
    /// job and no one else: 2 holders.
    fn forget_launch(&mut self, launch: &Launch) {
        if launch.holders() > 2 {
            return;
        }
        let key = launch_key(launch);
        if let Some(bucket) = self.launches.get_mut(&key) {
            bucket.retain(|known| !known.same(launch));
            if bucket.is_empty() {
                self.launches.remove(&key);
            }
        }
    }

    // ----- process events -----

    fn rank_exited(
        &mut self,
        job: JobId,
        stage: usize,
        rank: u32,
        status: ExitStatus,
        out: &mut Vec<Action>,
    ) {
        let Some(record) = self.jobs.get_mut(&job) else {
            return;
        };
        record.rank_exited();
        // In a pipeline (`==`), as in a shell without `set -o pipefail`,
        // the job's status is that of its last stage: an earlier stage's
        // exit code does not count, nor does the signal of a kill already
        // under way, and SIGPIPE, the normal end of a producer whose
        // consumer stopped reading, is no failure at all.
        let producer =
            record.spec.joiner == Joiner::Pipe && stage + 1 < record.spec.launch.n_stages();
        let normal = matches!(status, ExitStatus::Code(_) | ExitStatus::Signal(SIGPIPE));
        if producer && (normal || record.is_ending()) {
            return;
        }
        if !status.success() {
            record.rank_failed(status, stage, rank);
        }
        // A rank killed by a signal is an abnormal end of the parallel
        // program: the others would wait for it forever, so the job ends.
        if let ExitStatus::Signal(signal) = status {
            if !record.is_ending() {
                self.n_ending += 1;
                record.begin_end(EndCause::RankSignalled, None);
                tracing::debug!(job = %job, stage, rank, signal, "rank killed by a signal; killing the job");
                if record.ranks_left() > 0 {
                    out.push(Action::Signal {
                        job,
                        signal: SIGKILL,
                    });
                }
            }
        }
    }

    fn processes_gone(&mut self, job: JobId, now: Tick, out: &mut Vec<Action>) {
        let Some(record) = self.jobs.get_mut(&job) else {
            return;
        };
        let (phase, time_deadline) = record.processes_gone(now);
        if phase == Phase::Stopping {
            self.n_stopping -= 1;
        }
        if let Some(deadline) = time_deadline {
            self.time_deadlines.remove(&(deadline, job));
        }
        if self.live.remove(&job) {
            let mask = self.scratch.mask_of(job);
            set_busy(&mut self.busy, mask, &record.hosts, false);
        }
        self.refresh_crossing(job);
        let Some(record) = self.jobs.get_mut(&job) else {
            return;
        };
        let more_stages = record.spec.joiner == Joiner::Sequence
            && record.stage() + 1 < record.spec.launch.n_stages();
        if !record.is_ending() && record.failure().is_none() && more_stages {
            record.next_stage();
            return;
        }
        self.finish(job, now, out);
    }

    fn usage(&mut self, job: JobId, usage: Usage, now: Tick, out: &mut Vec<Action>) {
        let Some(record) = self.jobs.get_mut(&job) else {
            return;
        };
        for (peak, current) in record.peak_memory.iter_mut().zip(&usage.memory) {
            *peak = (*peak).max(*current);
        }
        record.peak_disk = record.peak_disk.max(usage.disk);
        // CPU time never goes back, even if a sample missed a process.
        let cpu = usage.cpu.max(record.usage.cpu);
        record.usage = Usage { cpu, ..usage };
        if record.is_ending() {
            return;
        }
        let mut violation = None;
        if let Some(limit) = record.limits.cputime {
            if cpu > limit {
                violation = Some(format!(
                    "CPU time {} over the limit of {}",
                    format_duration(cpu),
                    format_duration(limit)
                ));
            }
        }
        if let Some(limit) = record.limits.memory {
            for (slot, used) in record.usage.memory.iter().enumerate() {
                if *used > limit && violation.is_none() {
                    let host = record
                        .hosts
                        .get(slot)
                        .map(|h| self.topology.host(*h).name.as_str())
                        .unwrap_or("?");
                    violation = Some(format!(
                        "memory {} over the limit of {} on {host}",
                        format_size(*used),
                        format_size(limit)
                    ));
                }
            }
        }
        if let Some(limit) = record.limits.disk {
            if record.usage.disk > limit && violation.is_none() {
                violation = Some(format!(
                    "disk {} over the limit of {}",
                    format_size(record.usage.disk),
                    format_size(limit)
                ));
            }
        } else if let Some(backstop) = self
            .limits
            .get(record.cluster.idx())
            .and_then(|limits| limits.disk)
            .map(unlimited_disk_backstop)
        {
            // A job without a disk limit of its own (the queue sets no disk
            // percentage) reserves nothing, but it may still not fill the
            // filesystems the cluster's disk pool is measured on.
            if record.usage.disk > backstop && violation.is_none() {
                violation = Some(format!(
                    "disk {} over {}, half of cluster {}'s disk limit (the job has no disk limit of its own)",
                    format_size(record.usage.disk),
                    format_size(backstop),
                    self.topology.cluster(record.cluster).name
                ));
            }
        }
        if let Some(why) = violation {
            tracing::info!(job = %job, reason = %why, "limit exceeded; killing the job");
            self.begin_kill(job, EndCause::Limit(why), false, now, out);
            return;
        }
        // Residency: a job whose CPU time in its queue exceeds the queue's
        // residency time sinks to the next lower queue, and the clock restarts.
        let queue = record.queue;
        if let Some(residency) = self.queues.get(queue as usize).and_then(|q| q.residency) {
            if cpu.saturating_sub(record.residency_base) > residency
                && (queue as usize) + 1 < self.queues.len()
            {
                tracing::info!(job = %job, from = queue, to = queue + 1, "residency exceeded; moving down");
                self.move_job(job, queue + 1);
                self.journal(JobEvent::Moved {
                    job,
                    from: queue,
                    to: queue + 1,
                    by: "residency",
                });
            }
        }
    }

    fn move_job(&mut self, job: JobId, to: u32) {
        let Some(record) = self.jobs.get_mut(&job) else {
            return;
        };
        let from = record.queue;
        record.queue = to;
        record.queues_visited.push(to);
        record.residency_base = record.usage.cpu;
        let started = record.started();
        self.queues[from as usize].remove(job);
        self.queues.push_job(to as usize, job, started);
    }

    fn tick(&mut self, now: Tick, out: &mut Vec<Action>) {
        // Escalate graceful kills whose grace is over.
        while let Some(&(deadline, job)) = self.kill_deadlines.first() {
            if deadline > now {
                break;
            }
            self.kill_deadlines.pop_first();
            if let Some(record) = self.jobs.get_mut(&job) {
                record.harden_kill();
                out.push(Action::Signal {
                    job,
                    signal: SIGKILL,
                });
            }
        }
        // End jobs whose run time reached their -time limit.
        while let Some(&(deadline, job)) = self.time_deadlines.first() {
            if deadline > now {
                break;
            }
            self.time_deadlines.pop_first();
            let Some(record) = self.jobs.get_mut(&job) else {
                continue;
            };
            record.time_limit_reached();
            let limit = record.estimate.unwrap_or_default();
            let why = format!(
                "run time reached the time limit of {} (-time)",
                format_duration(limit)
            );
            tracing::info!(job = %job, reason = %why, "time limit reached; killing the job");
            self.begin_kill(job, EndCause::Limit(why), false, now, out);
        }
        if now < self.next_slice {
            return;
        }
        // Slice boundaries keep a fixed cadence from the anchor, however
        // late this tick is and however long the last switch took.
        let slice = self.config.timeslice.as_micros().max(1) as u64;
        let elapsed = now.0.saturating_sub(self.slice_anchor.0);
        self.next_slice = Tick(self.slice_anchor.0 + (elapsed / slice + 1) * slice);
        let mut ran = std::mem::take(&mut self.ran);
        ran.sort_unstable();
        ran.dedup();
        if !ran.is_empty() {
            // A few jobs ran (gang jobs of a busy machine): comparing each
            // queued job with them costs less than hashing it.
            let mut few = std::mem::take(&mut self.spare.ran);
            few.clear();
            let mut many = std::mem::take(&mut self.spare.ran_set);
            many.clear();
            if ran.len() <= FEW_RAN {
                few.extend(ran.iter().copied());
            } else {
                many.extend(ran.iter().copied());
            }
            // Most queued jobs did not run: one bit per id modulo 64 tells
            // most of them apart from the few that did with one AND.
            let filter = few
                .iter()
                .fold(0u64, |bits, job| bits | (1 << (job.0 % 64)));
            // How many of the few are in each queue (a job's record names
            // its queue, which holds it once), so that a rotation stops at
            // the last of them; one whose record is gone counts for all.
            let mut per_queue = std::mem::take(&mut self.spare.ran_per_queue);
            per_queue.clear();
            per_queue.resize(self.queues.len(), 0);
            for job in &few {
                match self.jobs.get(job) {
                    Some(record) => {
                        if let Some(count) = per_queue.get_mut(record.queue as usize) {
                            *count += 1;
                        }
                    }
                    None => per_queue.iter_mut().for_each(|count| *count += 1),
                }
            }
            let rotated = &mut self.spare.rotated;
            let positions = &mut self.spare.positions;
            let scratch = &self.scratch;
            self.queues.modify_all(|queues| {
                for (idx, (queue, at_most)) in queues.iter_mut().zip(&per_queue).enumerate() {
                    // Debug builds check the shortcuts against a full pass.
                    let expected = cfg!(debug_assertions).then(|| {
                        let mut copy = queue.clone();
                        copy.rotate(|job| ran.contains(&job));
                        copy
                    });
                    if ran.len() <= FEW_RAN {
                        let ran =
                            |job: JobId| filter & (1 << (job.0 % 64)) != 0 && few.contains(&job);
                        // Where the last decision took them, if that still
                        // holds; else a pass up to the last of them.
                        if !queue.rotate_placed(
                            scratch.placed_in(idx),
                            *at_most,
                            ran,
                            rotated,
                            positions,
                        ) {
                            queue.rotate_at_most(ran, *at_most, rotated);
                        }
                    } else {
                        queue.rotate_with(|job| many.contains(&job), rotated);
                    }
                    if let Some(expected) = expected {
                        assert_eq!(*queue, expected, "the rotation of queue {idx}");
                    }
                }
            });
            self.spare.ran_per_queue = per_queue;
            few.clear();
            self.spare.ran = few;
            many.clear();
            self.spare.ran_set = many;
        }
        // The set is refilled at once by `reschedule`: keep its table.
        ran.clear();
        self.ran = ran;
        self.ran_compact_at = RAN_COMPACT_AT;
        self.ran_refill = true;
        // The set restarts with the new slice; `reschedule`, which always
        // follows, fills it again with every job that runs in it.
        self.sampled_at = now;
        // Without a limit or a residency anywhere, no sample matters.
        let every = self.config.sample_every_slice;
        if every
            || self.n_usage_limited > 0
            || self.queues.iter().any(|queue| queue.residency.is_some())
        {
            for &job in &self.live {
                if every || self.usage_matters(job) {
                    out.push(Action::Sample(job));
                }
            }
        }
    }

    // ----- killing and finishing -----

    /// Starts killing a job. A graceful kill sends SIGTERM and lets the job
    /// run (ahead of every queue) to handle it, then SIGKILL after the grace.
    fn begin_kill(
        &mut self,
        job: JobId,
        cause: EndCause,
        graceful: bool,
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        let grace = self.config.kill_grace;
        let Some(record) = self.jobs.get_mut(&job) else {
            return;
        };
        if !record.is_ending() {
            // Every path below sets its ending but the one that returns at
            // once, for a job already ending.
            self.n_ending += 1;
        }
        if record.is_ending() && !matches!(record.ending(), Some(EndCause::RankSignalled)) {
            // Already being killed; a harder kill may still escalate it.
            if !graceful {
                if let Some(deadline) = record.harden_kill() {
                    self.kill_deadlines.remove(&(deadline, job));
                    out.push(Action::Signal {
                        job,
                        signal: SIGKILL,
                    });
                }
            }
            return;
        }
        if record.phase() == Phase::Idle {
            // No process exists: nothing to signal.
            record.begin_end(cause, None);
            self.finish(job, now, out);
            return;
        }
        if graceful {
            record.begin_end(cause, Some(now.after(grace)));
            self.kill_deadlines.insert((now.after(grace), job));
            out.push(Action::Signal {
                job,
                signal: SIGTERM,
            });
        } else {
            record.begin_end(cause, None);
            out.push(Action::Signal {
                job,
                signal: SIGKILL,
            });
        }
    }

    fn finish(&mut self, job: JobId, now: Tick, out: &mut Vec<Action>) {
        let Some(mut record) = self.jobs.remove(&job) else {
            return;
        };
        if record.is_ending() {
            self.n_ending -= 1;
        }
        self.scratch.forget(job);
        let (phase, time_deadline) = record.processes_gone(now);
        if phase == Phase::Stopping {
            self.n_stopping -= 1;
        }
        if let Some(deadline) = record.harden_kill() {
            self.kill_deadlines.remove(&(deadline, job));
        }
        if let Some(deadline) = time_deadline {
            self.time_deadlines.remove(&(deadline, job));
        }
        self.bound_waiting.remove(&job);
        if record.limits.cputime.is_some() {
            self.n_cputime_limited = self.n_cputime_limited.saturating_sub(1);
        }
        if usage_limited(&record.limits) {
            self.n_usage_limited = self.n_usage_limited.saturating_sub(1);
        }
        self.ran.retain(|other| *other != job);
        if self.live.remove(&job) {
            let mask = self.scratch.mask_of(job);
            set_busy(&mut self.busy, mask, &record.hosts, false);
        }
        self.refresh_crossing(job);
        self.queues[record.queue as usize].remove(job);
        self.ledger.release(&Placement {
            cluster: record.cluster,
            hosts: record.hosts.clone(),
            layout: record.layout.to_vec(),
            limits: record.limits,
        });
        if let Some(client) = record.client {
            self.by_client.remove(&client);
        }
        let first_failure = record.failure().map(ExitStatus::as_shell);
        let (kind, status, reason, state) = match record.ending() {
            None => {
                let status = first_failure.unwrap_or(0);
                (
                    EndKind::Exited,
                    status,
                    describe_exit(&record),
                    JobState::Done,
                )
            }
            Some(EndCause::RankSignalled) => {
                let together = match record.spec.joiner {
                    Joiner::Pipe => record.spec.launch.n_stages() as u32,
                    Joiner::Sequence => 1,
                };
                let mut reason = describe_exit(&record);
                if record.nprocs() * together > 1 {
                    reason.push_str("; the other processes were killed");
                }
                (
                    EndKind::Exited,
                    first_failure.unwrap_or(crate::exitcode::from_signal(SIGKILL)),
                    reason,
                    JobState::Done,
                )
            }
            Some(EndCause::Limit(why)) => (
                EndKind::Limit,
                crate::exitcode::LIMIT,
                format!("killed: {why}"),
                JobState::Killed,
            ),
            Some(EndCause::Killed(by)) => {
                let (status, reason) = asked_to_end(&record, by, SIGTERM);
                (EndKind::Killed, status, reason, JobState::Killed)
            }
            Some(EndCause::ClientGone) => {
                let (status, reason) =
                    asked_to_end(&record, "because its scrun went away", SIGKILL);
                (EndKind::Killed, status, reason, JobState::Killed)
            }
            Some(EndCause::Shutdown) => {
                let (status, reason) =
                    asked_to_end(&record, "because scored is shutting down", SIGTERM);
                (EndKind::Shutdown, status, reason, JobState::Killed)
            }
            Some(EndCause::LaunchFailed { message, status }) => (
                EndKind::LaunchFailed,
                *status,
                format!("launch failed: {message}"),
                JobState::Done,
            ),
        };
        let signal = match (record.ending(), record.failure()) {
            (Some(EndCause::LaunchFailed { .. } | EndCause::Limit(_)), _) => None,
            (_, Some(ExitStatus::Signal(signal))) => Some(signal),
            _ => None,
        };
        let accounting = self.accounting(&record, now);
        let ending = Ending {
            job,
            kind,
            status,
            reason,
            signal,
            accounting,
        };
        tracing::info!(job = %job, status, reason = %ending.reason, "job ended");
        if self.journal.is_some() {
            let record = self.job_fields(
                &record,
                command_line(&record),
                state,
                Some(&ending),
                now,
                true,
            );
            self.journal(JobEvent::Ended { job, record });
        }
        if let Some(client) = record.client {
            out.push(Action::notify(
                client,
                ClientEvent::Ended(Box::new(ending.clone())),
            ));
        }
        if record.started() {
            out.push(Action::Release(job));
        }
        let command = command_line(&record);
        self.forget_launch(&record.spec.launch);
        record.spec.launch = Launch::pack(&[], &[], std::ffi::OsStr::new(""));
        if self.finished.len() == HISTORY {
            self.finished.pop_front();
        }
        self.finished.push_back(Rc::new(Finished {
            job: record,
            command,
            state,
            ended_at: now,
            ending,
        }));
        self.admit_waiters(now, out);
    }

    fn accounting(&self, job: &Job, now: Tick) -> Accounting {
        let wait = job.first_run_at().unwrap_or(now).since(job.submitted_at);
        let wall = job
            .first_run_at()
            .map_or(Duration::ZERO, |first| now.since(first));
        Accounting {
            queues: job.queues_visited.to_vec(),
            wait,
            wall,
            cpu: job.usage.cpu,
            stopped: job.stopped_time(now),
            switches: job.switches,
            peak_memory: job
                .hosts
                .iter()
                .zip(&job.peak_memory)
                .map(|(host, peak)| (self.topology.host(*host).name.clone(), *peak))
                .collect(),
            peak_disk: job.peak_disk,
        }
    }

    fn client_gone(&mut self, client: ClientToken, now: Tick, out: &mut Vec<Action>) {
        if self.waiting.iter().any(|waiter| waiter.client == client) {
            self.waiting
                .modify(|waiting| waiting.retain(|waiter| waiter.client != client));
        }
        if let Some(job) = self.by_client.remove(&client) {
            if let Some(record) = self.jobs.get_mut(&job) {
                record.client = None;
            }
            self.begin_kill(job, EndCause::ClientGone, false, now, out);
        }
    }

    /// Starts a shutdown; returns how many jobs are being killed.
    fn shutdown(&mut self, now_kill: bool, now: Tick, out: &mut Vec<Action>) -> usize {
        if !self.shutting_down {
            tracing::info!(kill = now_kill, jobs = self.jobs.len(), "shutting down");
        }
        self.shutting_down = true;
        for waiter in self.waiting.modify(std::mem::take) {
            out.push(Action::notify(
                waiter.client,
                ClientEvent::Rejected {
                    kind: Rejection::ShuttingDown,
                    reason: "scored is shutting down".into(),
                },
            ));
        }
        // Jobs that cannot progress (held, or in a deactivated queue) would
        // keep a graceful shutdown waiting forever: they are killed too.
        let victims: Vec<JobId> = self
            .jobs
            .values()
            .filter(|job| now_kill || job.held() || !self.queues[job.queue as usize].activated)
            .map(|job| job.id)
            .collect();
        let n_victims = victims.len();
        for job in victims {
            self.begin_kill(job, EndCause::Shutdown, true, now, out);
        }
        n_victims
    }

    // ----- the switch -----

    /// Recomputes the active set and moves the jobs towards it.
    fn reschedule(&mut self, now: Tick, out: &mut Vec<Action>) {
        // Jobs given hosts by the last decision that could not start yet
        // choose again, so that none waits for particular hosts.
        for job in std::mem::take(&mut self.bound_waiting) {
            self.unbind(job);
        }
        let mut busy = std::mem::take(&mut self.busy);
        let mut active = std::mem::take(&mut self.active);
        let mut bindings = std::mem::take(&mut self.bindings);
        // Gang queues place jobs on the hosts they were given at admission,
        // so their active set is a function of the queues' order, which jobs
        // are runnable and which are placed first; a confirmed stop changes
        // none of these. Exclusive queues choose among free hosts and
        // reserve by the clock, so with any of them (or with hosts chosen
        // by the last decision) the set is computed afresh.
        let reuse = std::mem::take(&mut self.decision_current);
        if !reuse {
            self.decide_active(now, &busy, &mut active, &mut bindings);
        } else if cfg!(debug_assertions) {
            let mut fresh = Vec::new();
            self.decide_active(now, &busy, &mut fresh, &mut bindings);
            assert_eq!(fresh, active, "the kept active set is out of date");
            assert!(bindings.is_empty(), "the kept active set binds no host");
        }
        let keep = bindings.is_empty()
            && self
                .queues
                .iter()
                .all(|queue| !queue.activated || queue.mode == QueueMode::Gang || queue.is_empty());
        for (job, hosts) in bindings.drain(..) {
            self.bind(job, hosts);
        }
        self.bindings = bindings;
        self.decision_current = keep;

        // Phase one: stop every running job that left the active set (the
        // decision's scratch says which job took each chosen job's first host).
        // With the last decision kept, none leaves: its stops were sent
        // when it was made, and only stops were confirmed since.
        let mut leaving = std::mem::take(&mut self.spare.leaving);
        if !reuse || cfg!(debug_assertions) {
            leaving.extend(self.live.iter().copied().filter(|job| {
                let record = &self.jobs[job];
                record.phase() == Phase::Running
                    && !record
                        .hosts
                        .first()
                        .is_some_and(|host| self.scratch.holds(*job, *host))
            }));
            assert!(
                !reuse || leaving.is_empty(),
                "a running job left a kept active set"
            );
        }
        for job in leaving.drain(..) {
            if self.switches.open.is_none() {
                let id = self.switches.next_id;
                self.switches.next_id += 1;
                self.switches.open = Some(id);
                self.switches.count += 1;
                out.push(Action::SwitchBegin(id));
            }
            let record = self.jobs.get_mut(&job).expect("live jobs exist");
            let time_deadline = record.stop(now);
            self.n_stopping += 1;
            if let Some(deadline) = time_deadline {
                self.time_deadlines.remove(&(deadline, job));
            }
            out.push(Action::Stop(job));
        }
        self.spare.leaving = leaving;

        // Phase two: start or continue chosen jobs whose hosts are free of
        // every job that is running or still stopping.
        // With no job being stopped, every live job is running and chosen
        // (phase one stopped the others), and chosen jobs share no host:
        // no chosen job can be blocked, and its hosts need no look (the
        // second decision of a switch, once the stops are confirmed).
        let none_stopping = self.n_stopping == 0;
        let mut blocked = false;
        let mut entering = std::mem::take(&mut self.spare.entering);
        for &job in &active {
            let record = &self.jobs[&job];
            if matches!(record.phase(), Phase::Running | Phase::Stopping) {
                continue;
            }
            let mask = self.scratch.mask_of(job);
            if none_stopping {
                debug_assert!(
                    !any_busy(&busy, mask, &record.hosts),
                    "job {job} is chosen on a host a running job holds"
                );
                entering.push(job);
                continue;
            }
            if any_busy(&busy, mask, &record.hosts) {
                blocked = true;
                continue;
            }
            set_busy(&mut busy, mask, &record.hosts, true);
            entering.push(job);
        }
        self.active = active;
        self.busy = busy;
        // Continue the stopped jobs first, then close the switch (its
        // latency runs from the first SIGSTOP to the last SIGCONT), and only
        // then create the processes of jobs that run for the first time, so
        // that fork and exec delay no waiting job.
        // (Entering jobs are Stopped or Idle, and continuing one changes
        // no other's phase: the second pass takes exactly the Idle ones.)
        for &job in &entering {
            if self.jobs[&job].phase() == Phase::Stopped {
                self.enter(job, now, out);
            }
        }
        if let Some(id) = self.switches.open {
            if self.n_stopping == 0 && !blocked {
                self.switches.open = None;
                out.push(Action::SwitchEnd(id));
            }
        }
        for job in entering.drain(..) {
            if self.jobs[&job].phase() == Phase::Idle {
                self.enter(job, now, out);
            }
        }
        self.spare.entering = entering;
        if std::mem::take(&mut self.ran_refill) {
            // Every running job is a chosen one: phase one stopped the others.
            for job in &self.active {
                if self
                    .jobs
                    .get(job)
                    .is_some_and(|record| record.phase() == Phase::Running)
                {
                    self.ran.push(*job);
                }
            }
            debug_assert!(
                self.live
                    .iter()
                    .all(|job| self.jobs[job].phase() != Phase::Running || self.ran.contains(job)),
                "a running job is missing from the jobs that ran"
            );
        }
        if self.shutting_down && self.jobs.is_empty() {
            out.push(Action::Exit);
        }
        #[cfg(debug_assertions)]
        self.check_invariants();
    }

    /// Computes the active set into `active`, and in `bindings` the hosts
    /// chosen for jobs that had none.
    fn decide_active(
        &mut self,
        now: Tick,
        busy: &[u64],
        active: &mut Vec<JobId>,
        bindings: &mut Vec<(JobId, Vec<HostId>)>,
    ) {
        let jobs = &self.jobs;
        let queues = &self.queues;
        // Jobs being killed take their hosts first: a graceful kill must
        // let the job run to handle SIGTERM, and a job whose processes
        // may still run must keep its hosts until they are gone.
        let mut first = std::mem::take(&mut self.spare.first);
        first.extend(self.kill_deadlines.iter().map(|(_, job)| *job));
        if self.n_ending > 0 {
            first.extend(
                self.live
                    .iter()
                    .copied()
                    .filter(|job| jobs[job].is_ending()),
            );
        }
        first.sort_unstable();
        first.dedup();
        let view = View {
            jobs,
            topology: &self.topology,
            ledger: &self.ledger,
            limits: &self.limits,
            busy,
            now,
        };
        sched::active_set(
            queues,
            self.topology.hosts.len(),
            first.drain(..),
            &view,
            now.0,
            &mut self.scratch,
            active,
            bindings,
        );
        self.spare.first = first;
    }

    /// Gives a job that had none the hosts the decision chose for it.
    fn bind(&mut self, job: JobId, hosts: Vec<HostId>) {
        let Some(record) = self.jobs.get_mut(&job) else {
            return;
        };
        self.scratch.forget(job);
        self.ledger
            .bind(record.cluster, &hosts, &record.layout, record.limits.memory);
        record.peak_memory = smallvec::smallvec![0; hosts.len()];
        record.hosts = hosts;
        if !record.started() {
            self.bound_waiting.insert(job);
        }
    }

    /// Takes back the hosts of a job that never started.
    fn unbind(&mut self, job: JobId) {
        let Some(record) = self.jobs.get_mut(&job) else {
            return;
        };
        if record.started() || record.phase() != Phase::Idle {
            return;
        }
        let hosts = std::mem::take(&mut record.hosts);
        self.scratch.forget(job);
        self.ledger
            .unbind(record.cluster, &hosts, &record.layout, record.limits.memory);
        record.peak_memory.clear();
    }

    /// Continues a stopped job or creates the processes of an idle one.
    fn enter(&mut self, job: JobId, now: Tick, out: &mut Vec<Action>) {
        self.bound_waiting.remove(&job);
        let record = self.jobs.get_mut(&job).expect("chosen jobs exist");
        let phase = record.phase();
        if phase == Phase::Stopping {
            self.n_stopping -= 1;
        }
        let time_deadline = record
            .estimate
            .map(|estimate| now.after(estimate.saturating_sub(record.run_time)));
        let first_time = record.run(now, time_deadline);
        self.ran.push(job);
        if self.ran.len() >= self.ran_compact_at {
            self.ran.sort_unstable();
            self.ran.dedup();
            self.ran_compact_at = (2 * self.ran.len()).max(RAN_COMPACT_AT);
        }
        if let Some(deadline) = time_deadline {
            self.time_deadlines.insert((deadline, job));
        }
        self.live.insert(job);
        let mask = self.scratch.mask_of(job);
        set_busy(&mut self.busy, mask, &record.hosts, true);
        match phase {
            Phase::Stopped => out.push(Action::Continue(job)),
            Phase::Idle => {
                let plan = launch_plan(record);
                record.spawned(plan.procs.len() as u32);
                let client = record.client;
                let queue = record.queue;
                out.push(Action::Spawn(Box::new(plan)));
                if first_time {
                    self.journal(JobEvent::Started(job));
                    self.queues[queue as usize].mark_started(job);
                    if let Some(client) = client {
                        out.push(Action::notify(client, ClientEvent::Started(job)));
                    }
                }
            }
            Phase::Running | Phase::Stopping => {}
        }
        self.refresh_crossing(job);
    }

    /// Checks the core's invariants; tests call it after every step.
    pub fn check_invariants(&self) {
        let mut owner: HashMap<HostId, JobId> = HashMap::new();
        for job in self.jobs.values() {
            let live = matches!(job.phase(), Phase::Running | Phase::Stopping);
            assert_eq!(
                live,
                self.live.contains(&job.id),
                "live set out of date for job {}",
                job.id
            );
            if live {
                for host in &job.hosts {
                    if let Some(other) = owner.insert(*host, job.id) {
                        panic!("jobs {other} and {} both hold host {host}", job.id);
                    }
                }
            }
            let in_queue = self.queues[job.queue as usize]
                .order()
                .filter(|&queued| queued == job.id)
                .count();
            assert_eq!(
                in_queue, 1,
                "job {} must be in queue {} once",
                job.id, job.queue
            );
        }
        let stopping = self
            .jobs
            .values()
            .filter(|job| job.phase() == Phase::Stopping)
            .count();
        assert_eq!(stopping, self.n_stopping, "count of stopping jobs");
        let cputime = self
            .jobs
            .values()
            .filter(|job| job.limits.cputime.is_some());
        assert_eq!(
            cputime.count(),
            self.n_cputime_limited,
            "jobs with a CPU time limit"
        );
        let limited = self.jobs.values().filter(|job| usage_limited(&job.limits));
        assert_eq!(
            limited.count(),
            self.n_usage_limited,
            "jobs with a usage limit"
        );
        let ending = self.jobs.values().filter(|job| job.is_ending());
        assert_eq!(ending.count(), self.n_ending, "jobs being killed");
        for job in self.jobs.values() {
            let key = self
                .live
                .contains(&job.id)
                .then(|| self.crossing_key(job))
                .flatten();
            assert_eq!(
                self.crossing_of.get(&job.id).copied(),
                key,
                "crossing of job {} out of date",
                job.id
            );
        }
        assert_eq!(self.crossing_of.len(), self.crossings.len());
        let mut busy = vec![0; self.topology.hosts.len().div_ceil(64)];
        for job in &self.live {
            set_busy(&mut busy, None, &self.jobs[job].hosts, true);
        }
        assert_eq!(busy, self.busy, "busy hosts are the live jobs' hosts");
        for (key, job) in &self.crossings {
            assert_eq!(
                self.crossing_of.get(job),
                Some(key),
                "crossing of job {job}"
            );
        }
        let queued: usize = self.queues.iter().map(Queue::len).sum();
        assert_eq!(
            queued,
            self.jobs.len(),
            "queues hold exactly the unfinished jobs"
        );
        let mut ledger = Ledger::new(&self.topology);
        for job in self.jobs.values() {
            ledger.reserve(&Placement {
                cluster: job.cluster,
                hosts: job.hosts.clone(),
                layout: job.layout.to_vec(),
                limits: job.limits,
            });
        }
        assert_eq!(ledger, *self.ledger, "the ledger matches the admitted jobs");
        // The deadline indexes hold exactly the jobs' own deadlines.
        let kill: SortedSet<(Tick, JobId)> = self
            .jobs
            .values()
            .filter_map(|job| job.kill_deadline().map(|deadline| (deadline, job.id)))
            .collect();
        assert_eq!(kill, *self.kill_deadlines, "graceful kills in progress");
        let time: SortedSet<(Tick, JobId)> = self
            .jobs
            .values()
            .filter_map(|job| job.time_deadline().map(|deadline| (deadline, job.id)))
            .collect();
        assert_eq!(time, *self.time_deadlines, "-time limits of running jobs");
    }
}

fn queue_group_name(queue: &Queue) -> String {
    match (&queue.group_name, queue.group) {
        (Some(name), Some(gid)) => format!("{name}({gid})"),
        (_, Some(gid)) => gid.to_string(),
        _ => "-".to_string(),
    }
}

/// Which process failed: `rank 2`, or `rank 0 of stage 1` in a job of
/// several stages (numbered as `SCORE_RANK` and `SCORE_STAGE`).
fn failed_process(job: &Job) -> String {
    match job.failed_rank() {
        Some((stage, rank)) if job.spec.launch.n_stages() > 1 => {
            format!("rank {rank} of stage {stage}")
        }
        Some((_, rank)) => format!("rank {rank}"),
        None => "a process".to_string(),
    }
}

/// How a job's processes ended by themselves: `rank 0 killed by SIGSEGV
/// (segmentation fault)`.
fn describe_exit(job: &Job) -> String {
    match job.failure() {
        None => "all processes exited with status 0".to_string(),
        Some(ExitStatus::Code(code)) => {
            format!("{} exited with status {code}", failed_process(job))
        }
        Some(ExitStatus::Signal(signal)) => format!(
            "{} killed by {}",
            failed_process(job),
            crate::signame::describe(signal)
        ),
    }
}

/// The status and sentence of a job that was asked to end (`who`: `by its
/// owner`, `because scored is shutting down`, ...). A job that handled
/// the request and exited has its own status, as scrun passes on any
/// other; one whose processes a signal ended has that signal's; one that
/// never ran has `default_signal`'s.
fn asked_to_end(job: &Job, who: &str, default_signal: i32) -> (i32, String) {
    if !job.started() {
        return (
            crate::exitcode::from_signal(default_signal),
            format!("killed {who} before it started"),
        );
    }
    match job.failure() {
        None => (0, format!("asked to end {who}; it exited with status 0")),
        Some(ExitStatus::Code(code)) => (
            code,
            format!(
                "asked to end {who}; {} exited with status {code}",
                failed_process(job)
            ),
        ),
        Some(ExitStatus::Signal(signal)) => (
            crate::exitcode::from_signal(signal),
            format!(
                "killed {who}: {} ended by {}",
                failed_process(job),
                crate::signame::describe(signal)
            ),
        ),
    }
}

fn launch_key(launch: &Launch) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    launch.hash(&mut hasher);
    hasher.finish()
}

fn command_line(job: &Job) -> String {
    let sep = match job.spec.joiner {
        Joiner::Sequence => " :: ",
        Joiner::Pipe => " == ",
    };
    let text = job
        .spec
        .launch
        .stages()
        .iter()
        .map(|argv| {
            argv.iter()
                .map(|arg| arg.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join(sep);
    const MAX: usize = 60;
    if text.chars().count() > MAX {
        let mut short: String = text.chars().take(MAX - 3).collect();
        short.push_str("...");
        short
    } else {
        text
    }
}

/// The processes to create for the job's current stage (or all stages of a pipe).
fn launch_plan(job: &Job) -> LaunchPlan {
    let stages: Vec<usize> = match job.spec.joiner {
        Joiner::Sequence => vec![job.stage()],
        Joiner::Pipe => (0..job.spec.launch.n_stages()).collect(),
    };
    let mut procs = Vec::new();
    for &stage in &stages {
        let mut rank = 0u32;
        for (slot, (host, count)) in job.hosts.iter().zip(&job.layout).enumerate() {
            for _ in 0..*count {
                procs.push(ProcPlan {
                    stage,
                    rank,
                    host: *host,
                    host_slot: slot,
                });
                rank += 1;
            }
        }
    }
    LaunchPlan {
        job: job.id,
        client: job.client.unwrap_or(ClientToken(0)),
        user: job.owner.clone(),
        argv: stages
            .iter()
            .map(|&stage| job.spec.launch.stage(stage))
            .collect(),
        first_stage: stages[0],
        pipe: job.spec.joiner == Joiner::Pipe,
        nprocs: job.nprocs(),
        procs,
        hosts: job.hosts.clone(),
        env: job.spec.launch.env(),
        cwd: job.spec.launch.cwd(),
        inherited: job.spec.launch.inherited(),
    }
}

/// The core's jobs and hosts as the scheduling decision sees them.
struct View<'a> {
    jobs: &'a JobTable,
    topology: &'a Topology,
    ledger: &'a Ledger,
    limits: &'a [ClusterLimits],
    /// Hosts where a job's processes run or are being stopped.
    busy: &'a [u64],
    now: Tick,
}

impl sched::JobView for View<'_> {
    fn seen(&self, job: JobId) -> sched::Seen<'_> {
        match self.jobs.get(&job) {
            Some(record) => sched::Seen {
                hosts: &record.hosts,
                runnable: !record.is_ending() && !record.held(),
                started: record.started(),
            },
            None => sched::Seen {
                hosts: &[],
                runnable: false,
                started: false,
            },
        }
    }

    fn need(&self, job: JobId) -> (usize, usize) {
        self.jobs
            .get(&job)
            .map_or((0, 0), |record| (record.cluster.idx(), record.layout.len()))
    }

    fn cluster_hosts(&self, cluster: usize) -> &[HostId] {
        self.topology
            .clusters
            .get(cluster)
            .map_or(&[][..], |cluster| cluster.hosts.as_slice())
    }

    fn fits_on(&self, job: JobId, host: HostId) -> bool {
        self.jobs.get(&job).is_some_and(|record| {
            let limit = self
                .limits
                .get(record.cluster.idx())
                .and_then(|limits| limits.memory);
            self.ledger.memory_fits(host, record.limits.memory, limit)
        })
    }

    fn checks_memory(&self, job: JobId) -> bool {
        self.jobs.get(&job).is_some_and(|record| {
            record.limits.memory.is_some()
                && self
                    .limits
                    .get(record.cluster.idx())
                    .is_some_and(|limits| limits.memory.is_some())
        })
    }

    fn host_rank(&self, host: HostId) -> (bool, u64, u32) {
        (
            any_busy(self.busy, None, std::slice::from_ref(&host)),
            self.ledger.host_procs.get(host.idx()).copied().unwrap_or(0),
            host.0,
        )
    }

    fn estimate(&self, job: JobId) -> Option<u64> {
        let estimate = self.jobs.get(&job)?.estimate?;
        Some(estimate.as_micros() as u64)
    }

    fn expected_end(&self, job: JobId) -> Option<u64> {
        let record = self.jobs.get(&job)?;
        let left = record
            .estimate?
            .saturating_sub(record.run_time_at(self.now));
        Some(self.now.after(left).0)
    }
}

/// Marks a job's hosts busy (`on`) or free in the busy bits: a word at a
/// time with the job's mask of hosts (from the decision's scratch), else
/// host by host.
#[inline]
fn set_busy(busy: &mut [u64], mask: Option<&[u64]>, hosts: &[HostId], on: bool) {
    match mask {
        Some(mask) => {
            debug_assert_eq!(mask, &host_bits(busy.len(), hosts)[..mask.len()]);
            for (word, bits) in busy.iter_mut().zip(mask) {
                if on {
                    *word |= bits;
                } else {
                    *word &= !bits;
                }
            }
        }
        None => {
            for host in hosts {
                if let Some(word) = busy.get_mut(host.idx() / 64) {
                    let bit = 1u64 << (host.idx() % 64);
                    if on {
                        *word |= bit;
                    } else {
                        *word &= !bit;
                    }
                }
            }
        }
    }
}

/// Whether one of a job's hosts is busy (a host beyond the machine is).
#[inline]
fn any_busy(busy: &[u64], mask: Option<&[u64]>, hosts: &[HostId]) -> bool {
    match mask {
        Some(mask) => busy.iter().zip(mask).any(|(word, bits)| word & bits != 0),
        None => hosts.iter().any(|host| {
            busy.get(host.idx() / 64)
                .is_none_or(|word| word & (1 << (host.idx() % 64)) != 0)
        }),
    }
}

/// Hosts as bits, in `words` words (for checks).
fn host_bits(words: usize, hosts: &[HostId]) -> Vec<u64> {
    let mut bits = vec![0; words.max(1)];
    set_busy(&mut bits, None, hosts, true);
    bits
}

/// Whether a job has a limit that its usage samples are checked against.
fn usage_limited(limits: &JobLimits) -> bool {
    limits.cputime.is_some() || limits.memory.is_some() || limits.disk.is_some()
}

/// The limits a job would carry, for tests and listings.
pub fn limits_of(job: &Job) -> JobLimits {
    job.limits
}

mod commands;
mod script;
mod snapshot;
mod views;
pub use script::{ScriptError, ScriptProblem, ScriptRun};
pub use snapshot::{CoreSnapshot, RestoreError};

#[cfg(test)]
mod tests;
