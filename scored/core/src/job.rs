//! Jobs as the scheduling core knows them: the request, the record of an
//! admitted job, its state, and what the actuator reports about it.
//!
//! Pure data: no process ids, no descriptors. The actuator maps a job to its
//! processes; the core only knows ranks, hosts and states. A job's
//! programs, environment and working directory are packed into one shared
//! [`Launch`] (`launch.rs`).
//!
//! A job's state is a record of states, each carrying what only it has, so
//! that a combination that means nothing cannot be written: [`Life`] is
//! queued or started (the first run, the current `::` stage, the ranks left
//! and the first failed rank exist only once processes were created); where
//! the processes are is [`Procs`] (a running stretch carries when it began
//! and its `-time` deadline); a job being killed has a [`Killing`] (a
//! graceful kill without a deadline cannot be written). These are changed
//! only through the transitions of [`Job`] and read through accessors, so
//! the core's invariant checks need only cover relations between a job and
//! the rest of the core. Holds (by an operator, by the owner) are two
//! flags, since every combination of them is a state.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::rc::Rc;

pub use smallvec::SmallVec;
use std::time::Duration;

use crate::ids::{ClientToken, ClusterId, Cred, HostId, JobId, Tick};
use scored_proto::batch::{Batch, Expansion, OutputFiles};
use scored_proto::inherit::Inherited;

// The request and its parts are the protocol crate's: a submission is
// validated once, at the boundary, into the very type the core keeps
// (`scored_proto::submit`), so the core neither mirrors nor checks again.
pub use scored_proto::proto::{Joiner, ProcRequest};
pub use scored_proto::submit::JobRequest;

mod launch;
pub use launch::Launch;

/// How a job relates to the client that submitted it: the one place that
/// says whether a client's going away ends the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// An interactive job: the scrun on this connection is told of its
    /// life, and the job is killed when the connection goes away.
    Client(ClientToken),
    /// An interactive job whose scrun went away: it is being killed for it.
    Lost,
    /// An interactive job whose scrun went away with a killed daemon: it
    /// runs on, and waits for its scrun to reattach until a deadline
    /// (`Core::detached_until`), when it is killed as if `Lost`.
    Detached,
    /// A batch job (`scrun -batch`): it has no client, is told to nobody,
    /// and ends only by `kill`, a limit or its own end.
    Batch,
}

/// The kind of a [`Link`], which a job record keeps apart from the
/// client's token: a byte of the record's padding, where a `Link` would
/// take 16 bytes and move the record to the next allocation size class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkKind {
    Client,
    Lost,
    Detached,
    Batch,
}

impl Link {
    /// The connection told of the job's life, if there is one.
    pub fn client(self) -> Option<ClientToken> {
        match self {
            Link::Client(client) => Some(client),
            Link::Lost | Link::Detached | Link::Batch => None,
        }
    }

    /// Whether the job runs without a client.
    pub fn is_batch(self) -> bool {
        self == Link::Batch
    }

    /// The kind and token a job record keeps.
    pub(crate) fn parts(self) -> (LinkKind, u64) {
        match self {
            Link::Client(client) => (LinkKind::Client, client.0),
            Link::Lost => (LinkKind::Lost, 0),
            Link::Detached => (LinkKind::Detached, 0),
            Link::Batch => (LinkKind::Batch, 0),
        }
    }
}

/// What a submission asked beyond its programs and their placement (its
/// batch options: name, output files, dependencies, array), with the id
/// of its first job; an array's elements share one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Submission {
    /// The options, as the submission validator passed them.
    pub batch: Batch,
    /// The id of the submission's first job: an array's id
    /// (`SCORE_ARRAY_JOBID`), or the job's own.
    pub first: JobId,
}

impl Submission {
    /// The array index of job `id`, if the submission is an array.
    pub fn array_index(&self, id: JobId) -> Option<u32> {
        let spec = self.batch.array?;
        let k = u32::try_from(id.0.checked_sub(self.first.0)?).ok()?;
        (k < spec.len()).then(|| spec.index(k))
    }
}

/// What an admitted job keeps of its request.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// How stages follow each other.
    pub joiner: Joiner,
    /// Processes and placement, as asked.
    pub procs: ProcRequest,
    /// Programs, environment and working directory.
    pub launch: Launch,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
    /// It was killed by this signal, which wrote a core file (WCOREDUMP).
    Dumped(i32),
}

impl ExitStatus {
    /// The shell's view: the code, or 128 + the signal.
    pub fn as_shell(self) -> i32 {
        match self {
            ExitStatus::Code(code) => code,
            ExitStatus::Signal(signal) | ExitStatus::Dumped(signal) => {
                scored_proto::exitcode::from_signal(signal)
            }
        }
    }

    /// The signal that killed the process, if one did.
    pub fn signal(self) -> Option<i32> {
        match self {
            ExitStatus::Code(_) => None,
            ExitStatus::Signal(signal) | ExitStatus::Dumped(signal) => Some(signal),
        }
    }

    /// How the signal that killed it reads, with `core dumped` when it
    /// wrote a core file; `None` for an exit.
    pub fn describe_signal(self) -> Option<String> {
        match self {
            ExitStatus::Code(_) => None,
            ExitStatus::Signal(signal) => {
                Some(scored_proto::signame::describe_death(signal, false))
            }
            ExitStatus::Dumped(signal) => Some(scored_proto::signame::describe_death(signal, true)),
        }
    }

    /// Whether the process succeeded.
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }
}

/// What the actuator measured about a job's processes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Usage {
    /// CPU time (user + system) of all processes, finished descendants included.
    pub cpu: Duration,
    /// Resident memory per host of the job, in the order of [`Job::hosts`]
    /// (a boxed slice: the record keeps no spare capacity).
    pub memory: Box<[u64]>,
    /// Disk use: executable sizes plus the job's scratch directory.
    pub disk: u64,
    /// Of `disk`, the program files (scored(8), LIMITATIONS), so that a job killed
    /// for disk it did not write is told why.
    pub programs: u64,
}

/// Why a job ended early, if it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndCause {
    /// A limit was exceeded; the text names it (`memory 80M over the limit of 64M on host0`).
    Limit(String),
    /// Killed by a console command or by its scrun's interrupt.
    Killed(String),
    /// Killed because its scrun went away.
    ClientGone,
    /// Killed by the daemon's shutdown.
    Shutdown,
    /// A process could not be started; the status is 126 or 127.
    LaunchFailed {
        /// What failed.
        message: String,
        /// The shell-like status.
        status: i32,
    },
    /// A rank was killed by a signal, so the rest of the job was killed too.
    RankSignalled,
    /// Its processes are gone and nothing said how they ended (the daemon
    /// or what kept them was killed); the text says what happened.
    Lost(String),
}

/// Where a job's processes are, as the core tracks them (the kind of
/// [`Procs`], without what each kind carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No process exists for the current stage (never run, or between `::` stages).
    Idle,
    /// Processes are running (continued or just spawned).
    Running,
    /// SIGSTOP sent; waiting for the actuator to confirm every process stopped.
    Stopping,
    /// Every process is stopped.
    Stopped,
}

/// Where a started job's processes are, with what only that state has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Procs {
    /// No process exists for the current stage (between `::` stages, or
    /// all gone).
    Idle,
    /// Processes are running (continued or just spawned).
    Running(Stretch),
    /// SIGSTOP sent; waiting for the actuator to confirm every process stopped.
    Stopping,
    /// Every process is stopped.
    Stopped,
}

impl Procs {
    /// The kind, without what it carries.
    pub fn phase(self) -> Phase {
        match self {
            Procs::Idle => Phase::Idle,
            Procs::Running(_) => Phase::Running,
            Procs::Stopping => Phase::Stopping,
            Procs::Stopped => Phase::Stopped,
        }
    }
}

/// One stretch of running: it exists only while the job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stretch {
    /// When the job entered `Running`.
    pub since: Tick,
    /// When its run time reaches its estimate (`-time=`), if it has one.
    pub time_deadline: Option<Tick>,
}

/// The first process of a job that failed, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// How it ended.
    pub status: ExitStatus,
    /// Which process it was: (stage, rank); unknown when processes were
    /// killed before they existed, or in a record restored from a build
    /// that did not keep it. Stages are few (`MAX_STAGES`),
    /// and a `u32` keeps the job record a size class smaller.
    pub rank: Option<(u32, u32)>,
}

/// What a job that has created processes carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// When its processes were first created.
    first_run_at: Tick,
    /// Current stage (for `::`); stages are few (`MAX_STAGES`).
    stage: u32,
    /// Ranks of the running stage(s) that have not exited yet.
    ranks_left: u32,
    /// Where its processes are.
    procs: Procs,
    /// The first failing rank, if any.
    failure: Option<Failure>,
}

/// A job's life: queued until its processes are first created, started
/// from then on. What only a started job has lives in [`Started`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Life {
    /// Admitted; no process was ever created.
    Queued,
    /// Processes were created at least once.
    Started(Started),
}

/// Why a job is being killed (its state is `ending`; the report of its end
/// is `core::Ending`), and whether the kill is still graceful: a graceful
/// kill (SIGTERM first) lets the job run to handle it until its deadline,
/// when it turns into SIGKILL; a hard kill has no deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Killing {
    /// Why.
    pub cause: EndCause,
    /// When a graceful kill turns into SIGKILL; `None` once the kill is hard.
    pub kill_deadline: Option<Tick>,
}

/// The state a job shows in listings (sc_console(8), `jobs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Not admitted yet: it waits for the jobs it depends on, its array's
    /// limit, or resources (a job of the backlog).
    Waiting,
    /// Admitted, never run.
    Queued,
    /// Running now.
    Running,
    /// Switched out by the scheduler.
    Stopped,
    /// Held by its owner or an operator.
    Held,
    /// Being killed; waiting for its processes to go.
    Ending,
    /// Ended by itself.
    Done,
    /// Ended by a kill, a limit, or the loss of its client.
    Killed,
}

impl JobState {
    /// Every state, in the order of a job's life.
    pub const ALL: [JobState; 8] = [
        JobState::Waiting,
        JobState::Queued,
        JobState::Running,
        JobState::Stopped,
        JobState::Held,
        JobState::Ending,
        JobState::Done,
        JobState::Killed,
    ];

    /// The word shown in listings.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Waiting => "waiting",
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Stopped => "stopped",
            JobState::Held => "held",
            JobState::Ending => "ending",
            JobState::Done => "done",
            JobState::Killed => "killed",
        }
    }
}

/// One process of a job as the actuator must create it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcPlan {
    /// The stage it belongs to.
    pub stage: usize,
    /// Its rank within the stage (0-based); `SCORE_RANK`.
    pub rank: u32,
    /// The host it runs on, whose CPUs it is pinned to (`SCORE_HOST`).
    pub host: HostId,
    /// Index of the host among the job's hosts; the process group key.
    pub host_slot: usize,
}

/// Everything the actuator needs to create processes of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchPlan {
    /// The job the processes belong to (`SCORE_JOBID`).
    pub job: JobId,
    /// The client whose descriptors the job uses as stdin, stdout and
    /// stderr; none for a batch job (stdin /dev/null) or one whose client
    /// went away.
    pub client: Option<ClientToken>,
    /// The files its stdout and stderr go to instead, as patterns.
    pub output: OutputFiles,
    /// What the patterns' `%x` stands for: the job's name.
    pub name: String,
    /// Its array index and the array's id (`SCORE_ARRAY_INDEX`,
    /// `SCORE_ARRAY_JOBID`), if it is an array element.
    pub array: Option<(u32, JobId)>,
    /// The user the processes run as.
    pub user: Cred,
    /// The argument vectors of the stages being started (one for `::`, all for `==`).
    pub argv: Vec<Vec<OsString>>,
    /// Index of the first stage in `argv` (for `SCORE_*` and accounting).
    pub first_stage: usize,
    /// Whether the stages are joined with pipes.
    pub pipe: bool,
    /// Processes per stage (`SCORE_NPROCS`).
    pub nprocs: u32,
    /// The processes to create, stage by stage, rank by rank.
    pub procs: Vec<ProcPlan>,
    /// The job's hosts, in slot order.
    pub hosts: Vec<HostId>,
    /// The caller's environment.
    pub env: Vec<(OsString, OsString)>,
    /// The caller's working directory.
    pub cwd: OsString,
    /// Signal dispositions, limits and umask of the caller.
    pub inherited: Inherited,
}

/// Limits a job carries, fixed at admission: the queue's CPU time when it was
/// submitted, and memory and disk as the cluster's limit times the queue's
/// percentage, or the user's smaller value (scored(8), ADMISSION AND LIMITS).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct JobLimits {
    /// CPU time limit inherited from the queue at submission.
    pub cputime: Option<Duration>,
    /// Memory limit per host; also what the job reserves on each host.
    pub memory: Option<u64>,
    /// Disk limit; also what the job reserves from the cluster's pool.
    pub disk: Option<u64>,
}

/// A job's short lists (its layout, queues visited): most jobs have a few
/// entries, kept in the record itself (no allocation of their own; the
/// same 24 bytes as a `Vec`); longer lists go to the heap.
pub type Small<T> = SmallVec<[T; 4]>;

/// An admitted job: what it asked for, where it runs, what it used, and
/// its state (private fields, changed only through its transitions).
#[derive(Debug, Clone)]
pub struct Job {
    /// Its id, handed out in admission order and never reused.
    pub id: JobId,
    /// Its owner's name (shared among the owner's jobs).
    pub user: Rc<str>,
    /// Its owner, from the submitting connection's credentials.
    pub owner: Cred,
    /// Its relation to the client that submitted it ([`Job::link`]): the
    /// kind, and the client's token when it is [`Link::Client`].
    pub(crate) link_kind: LinkKind,
    pub(crate) link_token: u64,
    /// Its batch options (name, output files, dependencies, array), unless
    /// it has none: shared by an array's elements.
    pub submission: Option<Rc<Submission>>,
    /// What it runs.
    pub spec: JobSpec,
    /// Its current queue (residency and `move` change it).
    pub queue: u32,
    /// Queues it has been in, in order.
    pub queues_visited: Small<u32>,
    /// The cluster admission chose, or the one the decision placed it on
    /// (a job whose hosts are chosen when it starts); its hosts are all in it.
    pub cluster: ClusterId,
    /// Its hosts, in slot order. A `Vec`, not a `Small`: the decision
    /// reads every queued job's hosts, and jobs of more and fewer than four
    /// hosts mixed made the inline-or-heap test a branch it mispredicts.
    pub hosts: Vec<HostId>,
    /// Processes per host slot.
    pub layout: Small<u32>,
    /// Limits fixed at admission.
    pub limits: JobLimits,
    /// Its run-time estimate and limit (`-time=`): ended once it has run this long.
    pub estimate: Option<Duration>,
    /// Held by an operator.
    pub operator_hold: bool,
    /// Held by its owner (scrun suspended, or `suspend` by the owner).
    pub owner_hold: bool,
    /// Held until its scrun reattaches: an interactive job that had not
    /// started when a new daemon took over (its processes need the
    /// descriptors that scrun sends again).
    pub awaits_client: bool,
    /// Queued or started, with what a started job carries. Set when the
    /// record is made (admitted, or restored); changed only through the
    /// transitions of [`Job`], which the core calls.
    pub(crate) life: Life,
    /// Set once the job is being killed, with why; same rule as `life`.
    /// Boxed: few jobs are ever killed, and every job record is smaller
    /// for it (a whole `Killing` is 48 bytes, the box 8).
    pub(crate) ending: Option<Box<Killing>>,
    /// When it was submitted.
    pub submitted_at: Tick,
    /// When it was admitted.
    pub admitted_at: Tick,
    /// Time spent running.
    pub run_time: Duration,
    /// Times switched out.
    pub switches: u64,
    /// Last measured usage.
    pub usage: Usage,
    /// Peak memory per host slot.
    pub peak_memory: SmallVec<[u64; 2]>,
    /// Peak disk use.
    pub peak_disk: u64,
    /// CPU time at which the job entered its current queue (residency clock).
    pub residency_base: Duration,
}

impl Started {
    /// What a job restored from a snapshot had: any combination is a
    /// state a started job can be in.
    pub fn restored(
        first_run_at: Tick,
        stage: u32,
        ranks_left: u32,
        procs: Procs,
        failure: Option<Failure>,
    ) -> Started {
        Started {
            first_run_at,
            stage,
            ranks_left,
            procs,
            failure,
        }
    }
}

impl Job {
    /// Its relation to the client that submitted it.
    pub fn link(&self) -> Link {
        match self.link_kind {
            LinkKind::Client => Link::Client(ClientToken(self.link_token)),
            LinkKind::Lost => Link::Lost,
            LinkKind::Detached => Link::Detached,
            LinkKind::Batch => Link::Batch,
        }
    }

    /// Sets its relation to its client.
    pub fn set_link(&mut self, link: Link) {
        (self.link_kind, self.link_token) = link.parts();
    }

    /// The client told of its life, if it has one.
    pub fn client(&self) -> Option<ClientToken> {
        self.link().client()
    }

    /// Its name: the one given (`-name=`), else its program's base name.
    pub fn name(&self) -> String {
        match self
            .submission
            .as_ref()
            .and_then(|sub| sub.batch.name.as_deref())
        {
            Some(name) => name.to_string(),
            None => scored_proto::batch::default_name(
                self.spec
                    .launch
                    .stage(0)
                    .first()
                    .map_or(&[][..], |program| program.as_encoded_bytes()),
            ),
        }
    }

    /// Its array index and the array's id, if it is an array element.
    pub fn array(&self) -> Option<(u32, JobId)> {
        let submission = self.submission.as_ref()?;
        Some((submission.array_index(self.id)?, submission.first))
    }

    /// Where its stdout and stderr go, when to files.
    pub fn output(&self) -> Option<&OutputFiles> {
        self.submission
            .as_ref()
            .map(|sub| &sub.batch.output)
            .filter(|output| !output.is_empty())
    }

    /// The paths of its output files as `job ID` shows them (`%r` kept in
    /// a pattern of one file per rank): stdout's and stderr's.
    pub fn output_paths(&self) -> (Option<String>, Option<String>) {
        let Some(output) = self.output() else {
            return (None, None);
        };
        let name = self.name();
        let with = Expansion {
            job: self.id.0,
            rank: None,
            index: self.array().map(|(index, _)| index),
            name: &name,
        };
        (
            output.stdout.as_ref().map(|pattern| pattern.expand(&with)),
            output.stderr_file().map(|pattern| pattern.expand(&with)),
        )
    }

    /// Whether an operator or the owner holds the job.
    pub fn held(&self) -> bool {
        self.operator_hold || self.owner_hold || self.awaits_client
    }

    /// The state shown in listings.
    pub fn state(&self) -> JobState {
        if self.ending.is_some() {
            return JobState::Ending;
        }
        let phase = self.phase();
        if self.held() && phase != Phase::Running {
            return JobState::Held;
        }
        match (&self.life, phase) {
            (_, Phase::Running) => JobState::Running,
            (_, Phase::Stopping | Phase::Stopped) => JobState::Stopped,
            (Life::Started(_), Phase::Idle) => JobState::Running,
            (Life::Queued, Phase::Idle) => JobState::Queued,
        }
    }

    /// Queued, or started with what a started job carries.
    pub fn life(&self) -> &Life {
        &self.life
    }

    fn started_mut(&mut self) -> Option<&mut Started> {
        match &mut self.life {
            Life::Queued => None,
            Life::Started(started) => Some(started),
        }
    }

    fn started_ref(&self) -> Option<&Started> {
        match &self.life {
            Life::Queued => None,
            Life::Started(started) => Some(started),
        }
    }

    /// Where its processes are (a queued job has none).
    pub fn procs(&self) -> Procs {
        self.started_ref()
            .map_or(Procs::Idle, |started| started.procs)
    }

    /// Where its processes are, without what each state carries.
    pub fn phase(&self) -> Phase {
        self.procs().phase()
    }

    /// Whether processes were ever created.
    pub fn started(&self) -> bool {
        matches!(self.life, Life::Started(_))
    }

    /// When its processes were first created.
    pub fn first_run_at(&self) -> Option<Tick> {
        self.started_ref().map(|started| started.first_run_at)
    }

    /// When it last entered `Running` (None when not running).
    pub fn running_since(&self) -> Option<Tick> {
        match self.procs() {
            Procs::Running(stretch) => Some(stretch.since),
            _ => None,
        }
    }

    /// When its run time reaches `estimate`, while it runs.
    pub fn time_deadline(&self) -> Option<Tick> {
        match self.procs() {
            Procs::Running(stretch) => stretch.time_deadline,
            _ => None,
        }
    }

    /// Current stage (for `::`).
    pub fn stage(&self) -> usize {
        self.started_ref()
            .map_or(0, |started| started.stage as usize)
    }

    /// Ranks of the running stage(s) that have not exited yet.
    pub fn ranks_left(&self) -> u32 {
        self.started_ref().map_or(0, |started| started.ranks_left)
    }

    /// The first failing rank's status.
    pub fn failure(&self) -> Option<ExitStatus> {
        self.started_ref()
            .and_then(|started| started.failure)
            .map(|failure| failure.status)
    }

    /// Which rank that was: (stage, rank), when known.
    pub fn failed_rank(&self) -> Option<(u32, u32)> {
        self.started_ref()
            .and_then(|started| started.failure)
            .and_then(|failure| failure.rank)
    }

    /// Why it is being killed, once it is.
    pub fn ending(&self) -> Option<&EndCause> {
        self.ending.as_ref().map(|ending| &ending.cause)
    }

    /// Whether it is being killed.
    pub fn is_ending(&self) -> bool {
        self.ending.is_some()
    }

    /// When a graceful kill turns into SIGKILL, while it is graceful.
    pub fn kill_deadline(&self) -> Option<Tick> {
        self.ending.as_ref().and_then(|ending| ending.kill_deadline)
    }

    /// Whether the kill is graceful (SIGTERM first): the job is then let
    /// run to handle it.
    pub fn graceful_kill(&self) -> bool {
        self.kill_deadline().is_some()
    }

    /// Number of processes per stage.
    pub fn nprocs(&self) -> u32 {
        self.layout.iter().sum()
    }

    /// When the job ended, its processes gone `now`, and how long before
    /// `now` that was: `away`, when they ended while no daemon ran (no
    /// earlier than its last run's start), else `now`.
    pub fn ended_at(&self, away: Option<Tick>, now: Tick) -> (Tick, Duration) {
        let Some(away) = away else {
            return (now, Duration::ZERO);
        };
        let floor = self
            .running_since()
            .or_else(|| self.first_run_at())
            .unwrap_or(now);
        let ended = Tick(away.0.clamp(floor.0.min(now.0), now.0));
        (ended, now.since(ended))
    }

    /// Time spent stopped or held since the first run.
    pub fn stopped_time(&self, now: Tick) -> Duration {
        match self.first_run_at() {
            Some(first) => now.since(first).saturating_sub(self.run_time_at(now)),
            None => Duration::ZERO,
        }
    }

    /// Running time including the current stretch.
    pub fn run_time_at(&self, now: Tick) -> Duration {
        self.run_time
            + self
                .running_since()
                .map_or(Duration::ZERO, |since| now.since(since))
    }

    // ----- transitions -----

    /// Its processes run from `now` (created, or continued): the job is
    /// started if it was queued. `time_deadline` is when its run time
    /// reaches its estimate. Returns whether this is its first run.
    pub fn run(&mut self, now: Tick, time_deadline: Option<Tick>) -> bool {
        let procs = Procs::Running(Stretch {
            since: now,
            time_deadline,
        });
        match &mut self.life {
            Life::Started(started) => {
                started.procs = procs;
                false
            }
            Life::Queued => {
                self.life = Life::Started(Started {
                    first_run_at: now,
                    stage: 0,
                    ranks_left: 0,
                    procs,
                    failure: None,
                });
                true
            }
        }
    }

    /// Moves a started job `periods` repetitions of a gang rotation period
    /// ahead, as the slices of those periods would: each adds `ran` µs to
    /// its run time and `switched` to its switches, and a running stretch that
    /// began within the period (`moved_by`: the periods' length, else
    /// `None`) begins that much later, with its `-time` deadline from its
    /// new start as [`Job::run`]'s caller computes it. Returns the stretch's
    /// old and new deadline when it moved.
    pub fn repeat(
        &mut self,
        periods: u64,
        ran: u64,
        switched: u64,
        moved_by: Option<u64>,
    ) -> Option<(Tick, Tick)> {
        self.run_time += Duration::from_micros(ran.saturating_mul(periods));
        self.switches = self
            .switches
            .saturating_add(switched.saturating_mul(periods));
        let estimate = self.estimate;
        let run_time = self.run_time;
        let started = self.started_mut()?;
        let (Procs::Running(stretch), Some(moved_by)) = (&mut started.procs, moved_by) else {
            return None;
        };
        stretch.since = Tick(stretch.since.0 + moved_by);
        let old = stretch.time_deadline;
        stretch.time_deadline =
            estimate.map(|estimate| stretch.since.after(estimate.saturating_sub(run_time)));
        old.zip(stretch.time_deadline)
    }

    /// Processes of `ranks` ranks were just created for it.
    pub fn spawned(&mut self, ranks: u32) {
        if let Some(started) = self.started_mut() {
            started.ranks_left = ranks;
        }
    }

    /// The running stretch ends at `now`: its time joins the run time.
    /// Returns the stretch's `-time` deadline, which no longer applies.
    fn end_stretch(&mut self, now: Tick, procs: Procs) -> Option<Tick> {
        let started = self.started_mut()?;
        let left = std::mem::replace(&mut started.procs, procs);
        match left {
            Procs::Running(stretch) => {
                self.run_time += now.since(stretch.since);
                stretch.time_deadline
            }
            _ => None,
        }
    }

    /// SIGSTOP is sent to a running job at `now`: it is `Stopping` until
    /// the actuator confirms. Returns its `-time` deadline, which no longer
    /// applies.
    pub fn stop(&mut self, now: Tick) -> Option<Tick> {
        self.switches += 1;
        self.end_stretch(now, Procs::Stopping)
    }

    /// The actuator confirmed that every process stopped; returns whether
    /// the job was being stopped (a late confirmation changes nothing).
    pub fn stopped(&mut self) -> bool {
        match self.started_mut() {
            Some(started) if started.procs == Procs::Stopping => {
                started.procs = Procs::Stopped;
                true
            }
            _ => false,
        }
    }

    /// Every process of the job is gone at `now` (or it ends): it is idle,
    /// with no rank left. Returns the phase it was in and the `-time`
    /// deadline that no longer applies.
    pub fn processes_gone(&mut self, now: Tick) -> (Phase, Option<Tick>) {
        let phase = self.phase();
        let time_deadline = self.end_stretch(now, Procs::Idle);
        if let Some(started) = self.started_mut() {
            started.ranks_left = 0;
        }
        (phase, time_deadline)
    }

    /// Moves on to the next `::` stage.
    pub fn next_stage(&mut self) {
        if let Some(started) = self.started_mut() {
            started.stage += 1;
        }
    }

    /// A rank exited: one rank fewer left.
    pub fn rank_exited(&mut self) {
        if let Some(started) = self.started_mut() {
            started.ranks_left = started.ranks_left.saturating_sub(1);
        }
    }

    /// A rank failed with `status`: kept if it is the first.
    pub fn rank_failed(&mut self, status: ExitStatus, stage: usize, rank: u32) {
        if let Some(started) = self.started_mut() {
            if started.failure.is_none() {
                started.failure = Some(Failure {
                    status,
                    rank: Some((u32::try_from(stage).unwrap_or(u32::MAX), rank)),
                });
            }
        }
    }

    /// Its processes are gone though some ranks never reported an end:
    /// they were never created, because a kill came while its keeper was
    /// still creating them. Unless a rank failed already, the job failed
    /// as if `signal` had ended those ranks; which rank it was is unknown.
    pub fn unreported_ranks_killed(&mut self, signal: i32) {
        if let Some(started) = self.started_mut() {
            if started.ranks_left > 0 && started.failure.is_none() {
                started.failure = Some(Failure {
                    status: ExitStatus::Signal(signal),
                    rank: None,
                });
            }
        }
    }

    /// Its run time reached its `-time` limit: the deadline is spent.
    pub fn time_limit_reached(&mut self) {
        if let Some(Started {
            procs: Procs::Running(stretch),
            ..
        }) = self.started_mut()
        {
            stretch.time_deadline = None;
        }
    }

    /// It is being killed, for `cause`; a graceful kill turns into
    /// SIGKILL at `kill_deadline`. Replaces any earlier cause.
    pub fn begin_end(&mut self, cause: EndCause, kill_deadline: Option<Tick>) {
        self.ending = Some(Box::new(Killing {
            cause,
            kill_deadline,
        }));
    }

    /// It is being killed for `cause`, unless it already is.
    pub fn end_unless_ending(&mut self, cause: EndCause) {
        if self.ending.is_none() {
            self.begin_end(cause, None);
        }
    }

    /// A graceful kill turns hard (its grace is over, or a hard kill came).
    /// Returns the deadline that no longer applies.
    pub fn harden_kill(&mut self) -> Option<Tick> {
        self.ending
            .as_mut()
            .and_then(|ending| ending.kill_deadline.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_pack_cores_per_host() {
        assert_eq!(ProcRequest::Nodes(5).layout(2), Some(vec![2, 2, 1]));
        assert_eq!(ProcRequest::Nodes(2).layout(1), Some(vec![1, 1]));
        assert_eq!(
            ProcRequest::Grid {
                hosts: 2,
                per_host: 3
            }
            .layout(1),
            Some(vec![3, 3])
        );
        assert_eq!(ProcRequest::Hosts(3).layout(4), Some(vec![4, 4, 4]));
        assert_eq!(ProcRequest::Nodes(0).layout(4), None);
    }
}

#[cfg(test)]
mod size {
    use super::*;

    /// The job record is the largest part of what an admitted job costs
    /// the daemon; its short lists live inside it (`Small`), at the size
    /// of a `Vec` each, and it stays within its malloc size class.
    #[test]
    fn a_job_record_keeps_its_size_and_its_short_lists_inline() {
        assert!(
            std::mem::size_of::<Job>() <= 528,
            "{}",
            std::mem::size_of::<Job>()
        );
        assert_eq!(
            std::mem::size_of::<Small<u32>>(),
            std::mem::size_of::<Vec<u32>>()
        );
        let layout: Small<u32> = (1..=4).collect();
        assert!(
            !layout.spilled(),
            "a layout of four hosts needs no allocation"
        );
    }
}
