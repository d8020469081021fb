//! The actuator: the only module that creates processes, sends signals,
//! waits for children and changes credentials.
//!
//! It carries out the core's actions on real processes and turns what the
//! kernel reports into core inputs:
//! - `Spawn`: one process per rank, each the leader of a session (and so
//!   of a process group) of its own, pinned to its host's CPUs, run as the
//!   submitting user with its groups, at normal scheduling priority, in the
//!   job's cgroup when there is one.
//! - `Stop`: SIGSTOP to every process group (and to processes that left
//!   them), then [`Input::Stopped`] once every known process is confirmed
//!   stopped: direct children through `wait4(WUNTRACED)`, other
//!   descendants through /proc.
//! - Exits: [`Input::RankExited`] per rank; when the last rank of a job is
//!   reaped, every process left in its groups or cgroup is killed, and
//!   [`Input::ProcessesGone`] follows once they are all gone.
//!
//! Architecture invariant: a process group is signalled only while its
//! leader, a rank, is our unreaped child. A session leader can never leave
//! its group, and the pid of an unreaped child (the group's id) cannot be
//! handed to another process, so the group signalled is always the rank's.
//! Any other process is signalled only through a pidfd. Processes are
//! attributed to a job by its cgroup, or by ancestry, the session of a live
//! rank, and (for orphans) uid and environment; never by a process group
//! id alone.

pub mod cgroup;
pub mod procfs;
mod recover;
mod snapshot;
mod spawn;
pub mod statedir;
pub mod sys;

pub use recover::input_job;
pub use snapshot::ActuatorSnapshot;

use std::collections::{BTreeSet, HashMap};
use std::ffi::{CString, OsStr};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use crate::cluster::Topology;
use crate::core::Input;
use crate::ids::JobId;
use crate::inherit;
use crate::job::{ExitStatus, LaunchPlan, Usage};

use self::cgroup::Cgroups;
use self::procfs::Stat;

/// How long a stop may go unconfirmed by `wait4` before /proc is consulted.
const CONFIRM_FALLBACK: Duration = Duration::from_millis(20);
/// How often unconfirmed stops and draining jobs are polled.
const POLL_INTERVAL: Duration = Duration::from_millis(1);
/// How long the processes left behind by a job may take to die.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How recent a look for a job's descendants must be for a stop to trust it.
const FRESH_DISCOVERY: Duration = Duration::from_millis(2);
/// How often the alarm interrupts a blocking wait for stops.
const ALARM_EVERY: Duration = Duration::from_millis(1);
/// How often the state directory is checked (and healed) between launches.
const STATE_DIR_CHECK: Duration = Duration::from_secs(1);
/// Disk accounting examines at most this many directory entries per
/// window, across all jobs, so that scratch trees of millions of files cost
/// the daemon a bounded amount of work; walks resume where they stopped.
const DISK_WINDOW: Duration = Duration::from_millis(100);
const DISK_ENTRIES_PER_WINDOW: usize = 20_000;
/// Entries one sample may examine at most, and at least (so that every
/// job's walk advances however many jobs there are).
const DISK_ENTRIES_PER_SAMPLE: usize = 4_096;
const DISK_ENTRIES_MIN: usize = 256;

/// Sets a limit of the calling process. Where the process may not raise
/// its hard limit to `hard` (a user's job, when the caller had a higher
/// one than scored), it gets the most it may have: its current hard limit,
/// and the soft limit no higher. Async-signal-safe (two system calls).
fn lower_rlimit(resource: Resource, soft: u64, hard: u64) -> nix::Result<()> {
    match setrlimit(resource, soft, hard) {
        Err(nix::errno::Errno::EPERM) => {
            let (_, current_hard) = getrlimit(resource)?;
            let hard = hard.min(current_hard);
            setrlimit(resource, soft.min(hard), hard)
        }
        other => other,
    }
}
/// How long a stop may go unconfirmed before the job's cgroup is frozen to
/// finish it (something may be continuing the job's processes as fast as
/// they are stopped, cancelling each SIGSTOP before it takes effect). Well
/// above what a stop takes on a loaded machine, so that ordinary stops
/// stay plain SIGSTOPs (a frozen process shows as `D`, not `T`).
const FREEZE_AFTER: Duration = Duration::from_millis(500);
/// How long a stop may go unconfirmed, freezer or not, before the job is
/// killed so that the jobs sharing its hosts are not kept waiting forever.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one batch of a launch may take before the loop serves other
/// events: a job of thousands of processes is created a batch at a time.
pub const LAUNCH_BATCH: Duration = Duration::from_millis(5);
/// How long a rank may take from its fork to its exec while its job runs
/// (the time it is switched out does not count) before it is killed with
/// SIGKILL and its job's launch fails. A rank takes well under a
/// millisecond; one that takes seconds was stopped by its own user
/// between its change of user and its exec.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(5);
/// How many of a job's ranks may be between fork and exec at once: the
/// next is forked when one of them reports. The daemon does not wait for
/// an exec, so without a bound a launch of thousands of ranks would put
/// them all on the CPUs at once, ahead of every other user's work (each
/// rank leads a session, and so, with `sched_autogroup`, a scheduling
/// group of its own); the bound also bounds the report pipes held open.
pub const EXEC_WINDOW: usize = 16;
/// How many ranks of one user's jobs may be between fork and exec at once.
/// A user who stops their own ranks before their exec holds each one's
/// report pipe until `EXEC_TIMEOUT`; without this bound, many jobs of
/// theirs would hold sixteen descriptors each.
pub const USER_EXEC_WINDOW: usize = 64;
/// Without a freezer, how many times a switched-out job may be found
/// continued by someone else (and stopped again) before it is killed.
const ROGUE_CONTINUE_LIMIT: u32 = 20;

/// Why an actuator cannot hand its processes over to the next image of an
/// in-place restart now; the text is what the operator who asked for the
/// restart is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoverError {
    /// This actuator holds no processes it could hand over (one that
    /// only records actions).
    Unsupported,
    /// The job's processes are still being created: the launch's pipes
    /// and plan cannot be taken over.
    Launching(JobId),
}

impl std::fmt::Display for HandoverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandoverError::Unsupported => {
                write!(f, "this actuator cannot hand its processes over")
            }
            HandoverError::Launching(job) => write!(
                f,
                "job {job} is still being launched; restart once its processes exist"
            ),
        }
    }
}

impl std::error::Error for HandoverError {}

/// The descriptors of a job's client: its stdin, stdout and stderr (each
/// `None` when the client had it closed), and the others it passes on.
/// They are shared (`Rc`) because jobs launched from one terminal pass the
/// same open files, which the event loop keeps only once.
#[derive(Debug)]
pub struct JobStdio {
    /// The client's standard input (rank 0 reads it).
    pub stdin: Option<Rc<OwnedFd>>,
    /// The client's standard output.
    pub stdout: Option<Rc<OwnedFd>>,
    /// The client's standard error.
    pub stderr: Option<Rc<OwnedFd>>,
    /// stdin is a terminal that the process reading it (rank 0 of the
    /// first stage, or of each stage with `::`) takes as its controlling
    /// terminal (`scrun -pty`).
    pub controlling_terminal: bool,
    /// The client's other descriptors, for the process that reads stdin:
    /// the number each has there (increasing, above 2), and the descriptor.
    pub inherited: Vec<(RawFd, Rc<OwnedFd>)>,
}

impl JobStdio {
    /// Another handle on the same descriptors.
    pub fn share(&self) -> JobStdio {
        JobStdio {
            stdin: self.stdin.clone(),
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
            controlling_terminal: self.controlling_terminal,
            inherited: self.inherited.clone(),
        }
    }
}

/// What the actuator needs to know at start-up.
#[derive(Debug, Clone)]
pub struct ActuatorConfig {
    /// Where jobs' scratch directories go (`STATE_DIR/jobs/ID`).
    pub state_dir: PathBuf,
    /// Use a cgroup per job when the machine offers a writable hierarchy.
    pub use_cgroups: bool,
    /// The descriptor limits (soft, hard) jobs get, when the daemon raised its own.
    pub job_nofile: Option<(u64, u64)>,
}

/// The seam between the event loop and the operating system, so that the
/// loop's glue can be tested with a recording fake.
pub trait Actuator {
    /// Creates the processes of a plan; events (failure, exits) go to `out`.
    fn spawn(&mut self, plan: &LaunchPlan, stdio: Option<&JobStdio>, out: &mut Vec<Input>);
    /// SIGSTOPs the job; `Input::Stopped` follows once confirmed.
    fn stop(&mut self, job: JobId, out: &mut Vec<Input>);
    /// SIGCONTs the job.
    fn cont(&mut self, job: JobId);
    /// Sends a signal to every process of the job.
    fn signal(&mut self, job: JobId, signal: i32);
    /// Measures the job's usage.
    fn sample(&mut self, job: JobId) -> Option<Usage>;
    /// Removes what is left of a finished job.
    fn release(&mut self, job: JobId);
    /// Collects child state changes (after SIGCHLD).
    fn reap(&mut self, out: &mut Vec<Input>);
    /// Polls what needs polling (unconfirmed stops, draining jobs).
    fn poll(&mut self, now: Instant, out: &mut Vec<Input>);
    /// When `poll` next needs to run.
    fn next_deadline(&self) -> Option<Instant>;
    /// How many processes have been sent SIGSTOP and not yet confirmed stopped.
    fn pending_stops(&self) -> usize;
    /// Waits (at most `max`) for the pending stops to be confirmed, as a
    /// program that stops and continues processes itself waits in
    /// `waitpid`; events go to `out`. What is still pending afterwards is
    /// confirmed asynchronously.
    fn await_stops(&mut self, max: Duration, out: &mut Vec<Input>);
    /// Kills every process of every job and reaps them (daemon exit).
    fn kill_everything(&mut self);
    /// The state to hand to the next image in an in-place restart, and
    /// the descriptors that must stay open across execve; why not, if this
    /// actuator cannot hand over now.
    fn handover(&self) -> Result<(ActuatorSnapshot, Vec<std::os::fd::RawFd>), HandoverError> {
        Err(HandoverError::Unsupported)
    }
    /// Creates the next batch of processes of launches still in progress
    /// (a job of many processes is created a batch at a time between
    /// events); `next_deadline` is now while one is due.
    fn continue_launches(&mut self, _out: &mut Vec<Input>) {}
    /// Every job with a record here, and whether it has processes now
    /// (for the loop's recovery after a panic).
    fn known_jobs(&self) -> Vec<(JobId, bool)> {
        Vec::new()
    }
    /// Kills and reaps the processes of jobs the core does not hold as
    /// having any (created by an event lost to a panic), dropping what
    /// they report; `true`: forget the job's record as well. Reports of
    /// other jobs go to `out`.
    fn discard_jobs(&mut self, _jobs: &[(JobId, bool)], _out: &mut Vec<Input>) {}
    /// Whether some job's processes are still being created (a batched
    /// launch, which an in-place restart waits for).
    fn launching(&self) -> bool {
        false
    }
    /// A descriptor that is readable while some rank between fork and
    /// exec has something to report (its exec, or a failure); the loop
    /// then calls `poll`.
    fn exec_watch_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// A direct child: one rank.
#[derive(Debug, Clone, Copy)]
struct Child {
    job: JobId,
    stage: usize,
    rank: u32,
    slot: usize,
    stopped: bool,
}

/// A descendant that is not a direct child, held through a pidfd.
#[derive(Debug)]
struct Extra {
    pidfd: OwnedFd,
    start: u64,
    slot: usize,
    /// Its process group when last seen: when that is not the group of a
    /// live rank, group signals miss it and it is signalled through its pidfd.
    pgrp: i32,
    /// It was already stopped when the job's last gang stop began: stopped
    /// by the job's own job control (a shell's Ctrl-Z on a `-pty`
    /// terminal), not by the scheduler, so the gang's continue leaves it
    /// stopped. Only processes signalled through their pidfd can be left
    /// out; one in a rank's group gets the group's SIGCONT.
    stopped_by_job: bool,
}

#[derive(Debug)]
struct StopWait {
    children: BTreeSet<i32>,
    extras: BTreeSet<i32>,
    since: Instant,
    /// The job's cgroup was asked to freeze: its being frozen confirms the stop.
    freezing: bool,
}

/// How a switched-out job is held against SIGCONT from outside it.
#[derive(Debug, Default)]
struct Hold {
    /// The core has been told (or will be) that the job is stopped: until
    /// the next `cont`, any of its ranks seen continued was continued by
    /// someone else.
    switched_out: bool,
    /// Its cgroup is frozen now.
    frozen: bool,
    /// It was continued from outside once: freeze it at every stop.
    freeze_on_stop: bool,
    /// Continues from outside seen since it was switched out.
    rogue_continues: u32,
}

#[derive(Debug)]
struct Drain {
    pids: Vec<(i32, u64)>,
    since: Instant,
}

/// Where a launch stands: what `spawn_all` needs from one batch to the next.
#[derive(Debug, Default)]
struct LaunchProgress {
    /// Index in the plan's `procs` of the next process to create.
    next: usize,
    /// Pipes between `==` stages not yet handed to a process.
    pipes: Vec<Vec<(Option<OwnedFd>, Option<OwnedFd>)>>,
    /// The job's scratch directory, cgroup and pipes are made.
    prepared: bool,
}

/// A launch in progress: the processes of a job are created a batch at a
/// time (at most [`LAUNCH_BATCH`] of work) between events, so that a job
/// of thousands of processes does not stall the loop. The job holds its
/// hosts from the start; while it is switched out no process is created
/// (the ones that exist are stopped like any job's), so no part of it runs
/// outside its slices.
#[derive(Debug)]
struct Launch {
    plan: LaunchPlan,
    stdio: Option<JobStdio>,
    progress: LaunchProgress,
    /// Switched out: create nothing until the job is continued.
    paused: bool,
    /// The job is being killed: create nothing more.
    aborted: bool,
}

/// Everything the actuator tracks about one job.
#[derive(Debug)]
struct JobProcs {
    /// The process group, and session, of each unreaped rank, mapped to
    /// the rank's host slot: the rank's pid, since every rank leads a
    /// session of its own. An entry lives exactly as long as the rank is
    /// unreaped, which is what makes signalling the group safe.
    groups: HashMap<i32, usize>,
    children: BTreeSet<i32>,
    extras: HashMap<i32, Extra>,
    stop_wait: Option<StopWait>,
    drain: Option<Drain>,
    /// CPU time of reaped processes (with their waited-for descendants).
    reaped_cpu: Duration,
    /// When descendants were last looked for (a sample, a stop).
    discovered_at: Option<Instant>,
    /// Per host slot, the sum of the peak memory of its reaped ranks.
    reaped_peak: Vec<u64>,
    /// Size of the executables of the job's programs.
    exe_bytes: u64,
    /// Executables already counted in `exe_bytes` (this stage).
    seen_exes: BTreeSet<PathBuf>,
    scratch: PathBuf,
    /// The size walk of the scratch directory, resumed at each sample.
    disk_walk: statedir::DiskWalk,
    cgroup_procs: Option<CString>,
    /// The user the job runs as.
    uid: u32,
    /// Holding it stopped while it is switched out.
    hold: Hold,
    /// Its processes still being created, a batch at a time.
    launch: Option<Launch>,
    /// Its launch failed (a rank could not exec, or took too long to):
    /// reported once, and the rest is being killed.
    launch_failed: bool,
    /// Its ranks between fork and exec whose report is still awaited (at
    /// most [`EXEC_WINDOW`]).
    execs_in_flight: usize,
}

impl JobProcs {
    /// Whether its launch has processes to create now: not switched out,
    /// with room in its window (or it was aborted, which drops it).
    fn launch_due(&self, execs: &HashMap<i32, PendingExec>) -> bool {
        self.launch.as_ref().is_some_and(|launch| {
            launch.aborted
                || (!launch.paused
                    && self.execs_in_flight < EXEC_WINDOW
                    && user_execs_in_flight(execs, self.uid) < USER_EXEC_WINDOW)
        })
    }
}

/// A rank between its fork and its exec: the read end of its report pipe
/// (see `spawn.rs`), watched through `OsActuator::exec_watch`.
#[derive(Debug)]
struct PendingExec {
    job: JobId,
    rank: u32,
    /// The user it runs as.
    uid: u32,
    /// Open until the pipe said something: end of file (the exec
    /// succeeded) or a failure.
    report: Option<OwnedFd>,
    /// When it is killed if it has not exec'd (pushed back while its job
    /// is switched out).
    deadline: Instant,
    /// It failed (or was killed for taking too long): its exit is not a
    /// rank's exit, and its launch failure has been reported.
    failed: bool,
    /// The program and working directory, for the message.
    program: Rc<str>,
    cwd: Rc<str>,
}

/// The real actuator.
pub struct OsActuator {
    config: ActuatorConfig,
    hosts: Vec<(String, nix::sched::CpuSet)>,
    jobs: HashMap<JobId, JobProcs>,
    children: HashMap<i32, Child>,
    cgroups: Option<Cgroups>,
    /// The state directory and its `jobs` directory, held open.
    state: statedir::StateDir,
    /// Why the state directory cannot be used, while it cannot.
    state_problem: Option<String>,
    /// When the state directory is next checked.
    state_check_at: Instant,
    /// Directory entries the disk walks examined in the current window.
    disk_spent: usize,
    disk_window: Instant,
    daemon_pid: i32,
    daemon_uid: u32,
    clock_ticks: u64,
    page_size: u64,
    /// The signals the daemon ignores (bit `n - 1` for signal `n`), read
    /// once: the daemon never changes a disposition to or from SIG_IGN
    /// after start-up, and reading /proc/self/status for every launch batch
    /// cost more than the rest of the batch's bookkeeping. `None` where it
    /// could not be read (every signal is then set in the child).
    ignored_signals: Option<u64>,
    /// Ranks between fork and exec, by pid.
    execs: HashMap<i32, PendingExec>,
    /// An epoll set of their report pipes, which the event loop watches
    /// as one source (`Actuator::exec_watch_fd`).
    exec_watch: OwnedFd,
}

impl OsActuator {
    /// Prepares the actuator: the scratch root, the cgroup hierarchy, and the
    /// CPU masks of the hosts.
    pub fn new(config: ActuatorConfig, topology: &Topology) -> io::Result<OsActuator> {
        OsActuator::prepare(config, topology, true)
    }

    /// `new`, with a fresh cgroup hierarchy only when `fresh` (an in-place
    /// restart adopts the one in use instead).
    fn prepare(config: ActuatorConfig, topology: &Topology, fresh: bool) -> io::Result<OsActuator> {
        // SIGALRM bounds the blocking wait for stops (`await_stops`).
        sys::install_alarm_handler()?;
        let daemon_uid = nix::unistd::geteuid().as_raw();
        // Scratch directories are created, and handed to users, in `jobs`:
        // nobody else may be able to swap an entry for a symbolic link.
        let state = statedir::StateDir::open(&config.state_dir, daemon_uid)
            .map_err(|error| io::Error::new(io::ErrorKind::PermissionDenied, error.to_string()))?;
        let mut hosts = Vec::new();
        for host in &topology.hosts {
            let mut mask = nix::sched::CpuSet::new();
            for &cpu in host.cpus.cpus() {
                // CPU numbers are bounded by units::MAX_CPU, below CpuSet::count().
                let _ = mask.set(cpu as usize);
            }
            hosts.push((host.name.clone(), mask));
        }
        let cgroups = if fresh && config.use_cgroups && daemon_uid == 0 {
            Cgroups::create(std::process::id(), &config.state_dir)
        } else {
            None
        };
        match &cgroups {
            Some(cgroups) => {
                tracing::info!(path = %cgroups.base().display(), "jobs are held in cgroups")
            }
            None if fresh => {
                tracing::info!("no cgroup hierarchy in use; descendants are found through /proc")
            }
            None => {}
        }
        Ok(OsActuator {
            config,
            hosts,
            jobs: HashMap::new(),
            children: HashMap::new(),
            cgroups,
            state,
            state_problem: None,
            state_check_at: Instant::now() + STATE_DIR_CHECK,
            disk_spent: 0,
            disk_window: Instant::now(),
            daemon_pid: std::process::id() as i32,
            daemon_uid,
            clock_ticks: sys::clock_ticks(),
            page_size: sys::page_size(),
            ignored_signals: sys::ignored_signals(),
            execs: HashMap::new(),
            exec_watch: sys::epoll_create()?,
        })
    }

    /// Whether jobs live in cgroups.
    pub fn has_cgroups(&self) -> bool {
        self.cgroups.is_some()
    }

    /// Number of live direct children (for tests and status).
    pub fn n_children(&self) -> usize {
        self.children.len()
    }

    /// Checks, before a job's first launch, that the state directory is
    /// still there and ours, recreating what was removed; tells the core
    /// when it stops or starts working again.
    fn check_state_dir(&mut self, out: &mut Vec<Input>) -> Result<(), String> {
        self.state_check_at = Instant::now() + STATE_DIR_CHECK;
        match self.state.ensure().map_err(|error| error.to_string()) {
            Ok(reopened) => {
                if reopened {
                    tracing::warn!(path = %self.state.path().display(), "the state directory or its jobs directory was removed or replaced; made it again");
                }
                if self.state_problem.take().is_some() {
                    out.push(Input::StateDir(None));
                }
                Ok(())
            }
            Err(problem) => {
                if self.state_problem.is_none() {
                    out.push(Input::StateDir(Some(problem.clone())));
                }
                self.state_problem = Some(problem.clone());
                Err(problem)
            }
        }
    }

    fn prepare_job(&mut self, plan: &LaunchPlan) -> io::Result<()> {
        if self.jobs.contains_key(&plan.job) {
            return Ok(());
        }
        let owner = (self.daemon_uid == 0).then_some((plan.user.uid, plan.user.gid));
        let scratch = self
            .state
            .create_scratch(plan.job, owner)
            .map_err(|error| {
                io::Error::new(
                    error.kind(),
                    format!(
                        "cannot create the scratch directory {}: {error}",
                        self.state.scratch_path(plan.job).display()
                    ),
                )
            })?;
        let cgroup_procs = match &self.cgroups {
            Some(cgroups) => match cgroups.add_job(plan.job) {
                Ok(path) => Some(path),
                Err(error) => {
                    tracing::warn!(job = %plan.job, %error, "cannot create the job's cgroup; going without");
                    None
                }
            },
            None => None,
        };
        self.jobs.insert(
            plan.job,
            JobProcs {
                groups: HashMap::new(),
                children: BTreeSet::new(),
                extras: HashMap::new(),
                stop_wait: None,
                drain: None,
                reaped_cpu: Duration::ZERO,
                discovered_at: None,
                reaped_peak: vec![0; plan.hosts.len()],
                exe_bytes: 0,
                seen_exes: BTreeSet::new(),
                scratch,
                disk_walk: statedir::DiskWalk::default(),
                cgroup_procs,
                uid: plan.user.uid,
                hold: Hold::default(),
                launch: None,
                launch_failed: false,
                execs_in_flight: 0,
            },
        );
        Ok(())
    }

    /// The start of a launch: the job's scratch directory and cgroup, the
    /// pipes between `==` stages, and fresh process groups and peaks.
    fn start_stage(
        &mut self,
        plan: &LaunchPlan,
        pipes: &mut Vec<Vec<(Option<OwnedFd>, Option<OwnedFd>)>>,
    ) -> Result<(), (String, i32)> {
        // Not the program's fault: the status says the daemon failed.
        self.prepare_job(plan).map_err(|error| {
            (
                format!("cannot prepare job {}: {error}", plan.job),
                crate::exitcode::INTERNAL,
            )
        })?;
        let last_stage = plan.first_stage + plan.argv.len() - 1;
        // Pipes between stages, rank by rank: pipes[s][r] joins stage s's
        // rank r (writer) to stage s+1's rank r (reader).
        if plan.pipe {
            for _ in plan.first_stage..last_stage {
                let mut stage_pipes = Vec::new();
                for _ in 0..plan.nprocs {
                    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                        .map_err(|error| (format!("cannot create a pipe: {error}"), 126))?;
                    stage_pipes.push((Some(read), Some(write)));
                }
                pipes.push(stage_pipes);
            }
        }
        let procs_state = self.jobs.get_mut(&plan.job).expect("prepared above");
        // A new stage: (for `::`) a new peak, since each stage is limited on
        // its own.
        procs_state
            .reaped_peak
            .iter_mut()
            .for_each(|peak| *peak = 0);
        procs_state.exe_bytes = 0;
        procs_state.seen_exes.clear();
        Ok(())
    }

    /// Runs one batch of a launch; keeps it for later batches if it is not
    /// complete, reports a failure as the old single-shot spawn did.
    fn run_launch(&mut self, mut launch: Launch, deadline: Instant, out: &mut Vec<Input>) {
        let job = launch.plan.job;
        let result = self.spawn_all(
            &launch.plan,
            launch.stdio.as_ref(),
            &mut launch.progress,
            deadline,
        );
        if let Err((message, status)) = result {
            tracing::info!(job = %job, %message, "launch failed");
            out.push(Input::SpawnFailed {
                job,
                message,
                status,
            });
            let alive = self
                .jobs
                .get(&job)
                .is_some_and(|procs| !procs.children.is_empty());
            if alive {
                self.send(job, Signal::SIGKILL);
            } else {
                out.push(Input::ProcessesGone(job));
            }
            return;
        }
        let complete = launch.progress.next >= launch.plan.procs.len();
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if complete {
            if launch.plan.procs.len() > 1 {
                tracing::debug!(job = %job, n = launch.plan.procs.len(), "launch complete");
            }
            if procs.children.is_empty() {
                // Every rank has already exited.
                self.last_child_gone(job, out);
            }
        } else {
            procs.launch = Some(launch);
        }
    }

    /// Creates the processes of `plan` from `progress.next` on, until all
    /// exist, `deadline` passes (at least one per call) or a window of
    /// ranks between fork and exec is full; the first call
    /// of a launch also prepares the job and its pipes.
    fn spawn_all(
        &mut self,
        plan: &LaunchPlan,
        stdio: Option<&JobStdio>,
        progress: &mut LaunchProgress,
        deadline: Instant,
    ) -> Result<(), (String, i32)> {
        let first = progress.next;
        if !progress.prepared {
            // Once a launch: its first call may create no process (its
            // user's window is full) and be called again.
            self.start_stage(plan, &mut progress.pipes)?;
            progress.prepared = true;
        }
        // The submission validator refuses a NUL byte in the working
        // directory (scored_proto::submit), so this conversion only fails
        // on a bug; the launch then fails rather than the daemon.
        let cwd = CString::new(plan.cwd.as_bytes()).map_err(|_| {
            (
                "internal error: the job's working directory holds a NUL byte".to_string(),
                126,
            )
        })?;
        let last_stage = plan.first_stage + plan.argv.len() - 1;
        let pipes = &mut progress.pipes;
        let procs_state = self.jobs.get_mut(&plan.job).expect("prepared above");
        let cgroup_procs = procs_state.cgroup_procs.clone();
        let become_user = self.daemon_uid == 0 && plan.user.uid != 0;
        let groups: Vec<libc::gid_t> = plan.user.groups.clone();
        // The signals whose disposition the children must change: those
        // the daemon ignores and the job must not, and the other way
        // round. Handlers are reset by exec; where the daemon's state
        // cannot be read, every signal is set.
        let signals_to_change = self
            .ignored_signals
            .map_or(u64::MAX, |daemon| daemon ^ plan.inherited.ignored);
        // The environment every rank shares, as `std::process::Command`
        // built it: one entry per name (the last given wins, the daemon's
        // `SCORE_*` over the caller's), sorted by name. Built once a batch;
        // each rank adds its own `SCORE_*` entries.
        let mut base: std::collections::BTreeMap<&[u8], &[u8]> = plan
            .env
            .iter()
            .map(|(key, value)| (key.as_bytes(), value.as_bytes()))
            .collect();
        for key in SCORE_KEYS {
            base.remove(key.as_bytes());
        }
        // Entries no environment can hold were left out by the submission
        // validator (scored_proto::submit); one that slips through is
        // dropped rather than failing the launch.
        let base: Vec<(Vec<u8>, CString)> = base
            .into_iter()
            .filter_map(|(key, value)| {
                let mut entry = Vec::with_capacity(key.len() + value.len() + 1);
                entry.extend_from_slice(key);
                entry.push(b'=');
                entry.extend_from_slice(value);
                CString::new(entry).ok().map(|entry| (key.to_vec(), entry))
            })
            .collect();
        let scratch = self.jobs[&plan.job].scratch.as_os_str().as_bytes().to_vec();
        let cwd_text: Rc<str> = Path::new(OsStr::from_bytes(cwd.as_bytes()))
            .display()
            .to_string()
            .into();
        let mut argv_cache: Option<(usize, Vec<CString>, Rc<str>)> = None;
        for proc_plan in &plan.procs[first..] {
            if progress.next > first && Instant::now() >= deadline {
                // The rest in later batches, between events.
                return Ok(());
            }
            if self.jobs[&plan.job].execs_in_flight >= EXEC_WINDOW
                || user_execs_in_flight(&self.execs, plan.user.uid) >= USER_EXEC_WINDOW
            {
                // The rest as the ranks in flight report their exec.
                return Ok(());
            }
            progress.next += 1;
            let stage_idx = proc_plan.stage - plan.first_stage;
            if argv_cache
                .as_ref()
                .is_none_or(|(stage, _, _)| *stage != stage_idx)
            {
                let argv = &plan.argv[stage_idx];
                // The validator refuses NUL bytes in arguments; as above.
                let args: Vec<CString> = argv
                    .iter()
                    .map(|arg| CString::new(arg.as_bytes()))
                    .collect::<Result<_, _>>()
                    .map_err(|_| {
                        (
                            "internal error: an argument holds a NUL byte".to_string(),
                            126,
                        )
                    })?;
                let program: Rc<str> = Path::new(&argv[0]).display().to_string().into();
                argv_cache = Some((stage_idx, args, program));
            }
            let (_, args, program) = argv_cache.as_ref().expect("filled above");
            let host = &self.hosts[proc_plan.host.idx()];
            let mut own: Vec<(&[u8], CString)> = vec![
                (
                    b"SCORE_JOBID",
                    score_entry("SCORE_JOBID", plan.job.to_string().as_bytes()),
                ),
                (
                    b"SCORE_RANK",
                    score_entry("SCORE_RANK", proc_plan.rank.to_string().as_bytes()),
                ),
                (
                    b"SCORE_NPROCS",
                    score_entry("SCORE_NPROCS", plan.nprocs.to_string().as_bytes()),
                ),
                (b"SCORE_HOST", score_entry("SCORE_HOST", host.0.as_bytes())),
                (
                    b"SCORE_HOSTID",
                    score_entry("SCORE_HOSTID", proc_plan.host.0.to_string().as_bytes()),
                ),
                (b"SCORE_TMPDIR", score_entry("SCORE_TMPDIR", &scratch)),
            ];
            if plan.pipe {
                own.push((
                    b"SCORE_STAGE",
                    score_entry("SCORE_STAGE", proc_plan.stage.to_string().as_bytes()),
                ));
            }
            let mut env: Vec<(&[u8], &std::ffi::CStr)> = base
                .iter()
                .map(|(key, entry)| (key.as_slice(), entry.as_c_str()))
                .chain(own.iter().map(|(key, entry)| (*key, entry.as_c_str())))
                .collect();
            env.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let rank = proc_plan.rank as usize;
            // Descriptors handed to this rank alone (pipes between `==`
            // stages, /dev/null) are owned here and closed once it is forked.
            let mut owned: Vec<OwnedFd> = Vec::new();
            let stdin = if plan.pipe && stage_idx > 0 {
                pipes[stage_idx - 1][rank].0.take()
            } else {
                None
            };
            // The process that reads the client's stdin (rank 0 of the
            // first stage, or of each stage with `::`) also gets the
            // client's other descriptors; a standard descriptor the client
            // had closed stays closed (`spawn::CLOSED`).
            let reads_client =
                stdio.is_some() && proc_plan.rank == 0 && !(plan.pipe && stage_idx > 0);
            let closed =
                |fd: &Option<Rc<OwnedFd>>| fd.as_ref().map_or(spawn::CLOSED, |fd| fd.as_raw_fd());
            let stdin_fd = match (stdin, stdio) {
                (Some(pipe), _) => hold(&mut owned, pipe),
                (None, Some(io)) if reads_client => closed(&io.stdin),
                _ => hold(
                    &mut owned,
                    open_null(false).map_err(|error| launch_error(program, &cwd_text, &error))?,
                ),
            };
            let stdout = if plan.pipe && proc_plan.stage < last_stage {
                pipes[stage_idx][rank].1.take()
            } else {
                None
            };
            let stdout_fd = match (stdout, stdio) {
                (Some(pipe), _) => hold(&mut owned, pipe),
                (None, Some(io)) => closed(&io.stdout),
                (None, None) => hold(
                    &mut owned,
                    open_null(true).map_err(|error| launch_error(program, &cwd_text, &error))?,
                ),
            };
            let stderr_fd = match stdio {
                Some(io) => closed(&io.stderr),
                None => hold(
                    &mut owned,
                    open_null(true).map_err(|error| launch_error(program, &cwd_text, &error))?,
                ),
            };
            let mut stdio_fds = [stdin_fd, stdout_fd, stderr_fd];
            for fd in &mut stdio_fds {
                if let Some(copy) = spawn::ChildSetup::stdio_fd(*fd)
                    .map_err(|error| launch_error(program, &cwd_text, &error))?
                {
                    *fd = hold(&mut owned, copy);
                }
            }
            let passed_fds: Vec<(RawFd, RawFd)> = match stdio {
                Some(io) if reads_client => io
                    .inherited
                    .iter()
                    .map(|(target, fd)| (*target, fd.as_raw_fd()))
                    .collect(),
                _ => Vec::new(),
            };
            let slot = proc_plan.host_slot;
            // The process whose stdin is the client's takes it as its
            // controlling terminal when the client asked for that (`-pty`).
            let takes_terminal = stdio.is_some_and(|io| io.controlling_terminal)
                && proc_plan.rank == 0
                && !(plan.pipe && stage_idx > 0);
            // The caller's limits, the descriptor limit last (see
            // `spawn::steps`); without the caller's, the one scored
            // started with.
            let inherited = &plan.inherited;
            let mut rlimits: Vec<(Resource, u64, u64)> = inherited
                .rlimits
                .iter()
                .filter(|(index, _, _)| *index != inherit::NOFILE)
                .filter_map(|&(index, soft, hard)| {
                    inherit::RESOURCES
                        .get(usize::from(index))
                        .map(|&resource| (resource, soft, hard))
                })
                .collect();
            if let Some((soft, hard)) = inherited.rlimit(inherit::NOFILE).or(self.config.job_nofile)
            {
                rlimits.push((Resource::RLIMIT_NOFILE, soft, hard));
            }
            let setup = spawn::ChildSetup {
                program: &args[0],
                args: args.iter().map(CString::as_c_str).collect(),
                env: env.iter().map(|(_, entry)| *entry).collect(),
                stdio: stdio_fds,
                inherited: &passed_fds,
                cpus: host.1,
                cgroup_procs: cgroup_procs.as_deref(),
                credentials: become_user.then_some((
                    plan.user.uid,
                    plan.user.gid,
                    groups.as_slice(),
                )),
                takes_terminal,
                cwd: &cwd,
                daemon_pid: self.daemon_pid,
                umask: inherited.umask,
                nice: inherited.nice,
                ioprio: inherited.ioprio,
                ignored: inherited.ignored,
                signals_to_change,
                rlimits: &rlimits,
            };
            let (pid, report) =
                spawn::spawn(&setup).map_err(|error| launch_error(program, &cwd_text, &error))?;
            drop(owned);
            let watched = sys::epoll_add(&self.exec_watch, report.as_raw_fd(), pid as u64);
            if let Err(error) = watched {
                // Without the watch the exec would be learnt only at the
                // rank's exit or its deadline: say so, and go on.
                tracing::warn!(job = %plan.job, pid, %error, "cannot watch a rank's exec");
            }
            let procs_state = self.jobs.get_mut(&plan.job).expect("prepared above");
            procs_state.groups.insert(pid, slot);
            procs_state.children.insert(pid);
            procs_state.execs_in_flight += 1;
            self.children.insert(
                pid,
                Child {
                    job: plan.job,
                    stage: proc_plan.stage,
                    rank: proc_plan.rank,
                    slot,
                    stopped: false,
                },
            );
            self.execs.insert(
                pid,
                PendingExec {
                    job: plan.job,
                    rank: proc_plan.rank,
                    uid: plan.user.uid,
                    report: Some(report),
                    deadline: Instant::now() + EXEC_TIMEOUT,
                    failed: false,
                    program: Rc::clone(program),
                    cwd: Rc::clone(&cwd_text),
                },
            );
            tracing::debug!(job = %plan.job, pid, rank = proc_plan.rank, stage = proc_plan.stage, host = %host.0, "spawned");
        }
        Ok(())
    }

    /// Reads the report pipes of ranks between fork and exec that are
    /// ready (the loop saw `exec_watch` readable, or it polls).
    fn collect_exec_reports(&mut self, out: &mut Vec<Input>) {
        if self.execs.is_empty() {
            return;
        }
        let mut ready = [0u64; 64];
        loop {
            let n = match sys::epoll_ready(&self.exec_watch, &mut ready) {
                Ok(n) => n,
                Err(error) => {
                    tracing::warn!(%error, "cannot read the set of exec reports");
                    0
                }
            };
            for &pid in &ready[..n] {
                self.exec_report(pid as i32, out);
            }
            if n < ready.len() {
                break;
            }
        }
    }

    /// What a rank's report pipe says now: nothing yet, its exec (its
    /// executable is then counted in the job's disk use), or a failure.
    fn exec_report(&mut self, pid: i32, out: &mut Vec<Input>) {
        let Some(report) = self
            .execs
            .get(&pid)
            .and_then(|pending| pending.report.as_ref())
        else {
            return;
        };
        match spawn::read_report(report) {
            spawn::Report::Pending => {}
            spawn::Report::Execd => {
                if let Some(pending) = self.execs.remove(&pid) {
                    let job = pending.job;
                    close_report(&self.exec_watch, pending.report);
                    self.exec_settled(job);
                    self.count_executable(job, pid);
                }
            }
            spawn::Report::Failed(step, errno) => self.exec_failed(pid, step, errno, out),
        }
    }

    /// One of the job's ranks in flight has reported (or will never):
    /// room for the next in its launch's window.
    fn exec_settled(&mut self, job: JobId) {
        if let Some(procs) = self.jobs.get_mut(&job) {
            procs.execs_in_flight = procs.execs_in_flight.saturating_sub(1);
        }
    }

    /// Adds the size of a rank's executable to its job's disk use, once
    /// per executable and stage.
    fn count_executable(&mut self, job: JobId, pid: i32) {
        let Ok(exe) = fs::read_link(format!("/proc/{pid}/exe")) else {
            return;
        };
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if procs.seen_exes.insert(exe.clone()) {
            procs.exe_bytes += fs::metadata(&exe).map(|meta| meta.len()).unwrap_or(0);
        }
    }

    /// A rank reported that a step before its exec failed: its job's
    /// launch fails with the message a rank that cannot run gets.
    fn exec_failed(&mut self, pid: i32, step: spawn::Step, errno: i32, out: &mut Vec<Input>) {
        let Some(pending) = self.execs.get_mut(&pid) else {
            return;
        };
        let report = pending.report.take();
        let settled = report.is_some();
        close_report(&self.exec_watch, report);
        pending.failed = true;
        let (job, rank) = (pending.job, pending.rank);
        if settled {
            self.exec_settled(job);
        }
        let Some(pending) = self.execs.get(&pid) else {
            return;
        };
        let error = io::Error::from_raw_os_error(errno);
        tracing::info!(job = %job, pid, rank, step = step.describe(), %error, "a rank could not exec");
        let (message, status) =
            if step == spawn::Step::Privileges && errno == sys::PRIVILEGES_REMAIN {
                let uid = self.jobs.get(&job).map_or(0, |procs| procs.uid);
                (
                    format!(
                        "refusing to run '{}' as uid {uid}: capabilities or securebits \
                     remain after the change of user",
                        pending.program
                    ),
                    crate::exitcode::NOT_EXECUTABLE,
                )
            } else if step == spawn::Step::Stdio {
                // A descriptor numbered above what the rank may have
                // (scored's own descriptor limit, when it cannot raise it).
                (
                    format!(
                        "cannot give '{}' the descriptors its scrun passed: {error}",
                        pending.program
                    ),
                    crate::exitcode::NOT_EXECUTABLE,
                )
            } else {
                launch_error(&pending.program, &pending.cwd, &error)
            };
        self.fail_launch(job, message, status, out);
    }

    /// Ranks that have not exec'd within [`EXEC_TIMEOUT`] of running time
    /// are killed, and their jobs' launches fail.
    fn expire_execs(&mut self, now: Instant, out: &mut Vec<Input>) {
        let jobs = &self.jobs;
        let expired: Vec<i32> = self
            .execs
            .iter()
            .filter(|(_, pending)| {
                !pending.failed
                    && pending.deadline <= now
                    && !jobs
                        .get(&pending.job)
                        .is_some_and(|procs| procs.hold.switched_out)
            })
            .map(|(pid, _)| *pid)
            .collect();
        for pid in expired {
            // A last look: it may have exec'd or failed just now.
            self.exec_report(pid, out);
            let Some(pending) = self.execs.get_mut(&pid).filter(|pending| !pending.failed) else {
                continue;
            };
            // An unreaped child of ours: its pid is still its own. SIGKILL
            // ends a stopped process too.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            pending.failed = true;
            close_report(&self.exec_watch, pending.report.take());
            let (job, rank) = (pending.job, pending.rank);
            let program = Rc::clone(&pending.program);
            self.exec_settled(job);
            let message = format!(
                "rank {rank} of job {job} had not started '{}' {}s after it was created \
                 (stopped before its exec?): killed",
                program,
                EXEC_TIMEOUT.as_secs()
            );
            tracing::warn!(job = %job, pid, rank, "a rank did not exec in time; killed");
            self.fail_launch(job, message, crate::exitcode::NOT_EXECUTABLE, out);
        }
    }

    /// The job's launch failed: says so once, creates nothing more, and
    /// kills what exists (the job ends once all of it is reaped).
    fn fail_launch(&mut self, job: JobId, message: String, status: i32, out: &mut Vec<Input>) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if procs.launch_failed {
            return;
        }
        procs.launch_failed = true;
        tracing::info!(job = %job, %message, "launch failed");
        out.push(Input::SpawnFailed {
            job,
            message,
            status,
        });
        if let Some(launch) = procs.launch.as_mut() {
            launch.aborted = true;
        }
        self.send(job, Signal::SIGKILL);
    }

    /// Signals the process group of every unreaped rank (see
    /// `JobProcs::groups` for why that id is still the rank's), and every
    /// other descendant outside those groups through its pidfd.
    fn send(&mut self, job: JobId, signal: Signal) {
        if signal == Signal::SIGKILL {
            // A frozen process acts on no signal, SIGKILL included, until
            // it is thawed.
            self.thaw(job);
        }
        let Some(procs) = self.jobs.get(&job) else {
            return;
        };
        for &pgid in procs.groups.keys() {
            if let Err(error) = killpg(Pid::from_raw(pgid), signal) {
                tracing::debug!(job = %job, pgid, %error, "killpg failed");
            }
        }
        // A rank between fork and exec may not lead its session yet, so
        // that its group's signal misses it: it is signalled by pid too
        // (an unreaped child's pid is still its own).
        if !self.execs.is_empty() {
            for pid in procs
                .children
                .iter()
                .filter(|pid| self.execs.contains_key(pid))
            {
                let _ = kill(Pid::from_raw(*pid), signal);
            }
        }
        for extra in procs.extras.values() {
            if signal == Signal::SIGCONT && extra.stopped_by_job {
                continue;
            }
            if !procs.groups.contains_key(&extra.pgrp) {
                let _ = sys::pidfd_send_signal(&extra.pidfd, signal as i32);
            }
        }
    }

    /// Before a gang stop, looks at every held descendant again: its
    /// process group now (a shell of the job may have moved it into a group
    /// of its own since it was found, out of reach of the ranks' group
    /// signals), and whether it is stopped already. Stopped outside the
    /// ranks' groups means the job stopped it itself (job control in a
    /// shell of the job), and continuing the gang must not undo that; one
    /// found running again loses the mark at the next stop.
    fn note_stopped_by_job(&mut self, job: JobId) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        let groups = &procs.groups;
        for (pid, extra) in procs.extras.iter_mut() {
            let stat = procfs::read_stat(*pid).filter(|stat| stat.start == extra.start);
            if let Some(stat) = stat {
                extra.pgrp = stat.pgrp;
            }
            extra.stopped_by_job = !groups.contains_key(&extra.pgrp)
                && stat.is_some_and(|stat| matches!(stat.state, b'T' | b't'));
        }
    }

    /// Finds the job's processes other than its direct children: from its
    /// cgroup, or by walking /proc down from its live ranks and descendants
    /// already held, taking the members of live ranks' sessions.
    ///
    /// Process, group and session ids are numbers the kernel reuses. None
    /// is trusted unless something pins it: a live rank pins its own pid,
    /// group and session (it is unreaped, and a session leader cannot leave
    /// either); a descendant held by a pidfd counts only while its start
    /// time still matches. A session cannot be joined, only inherited, so
    /// a member of a live rank's session descends from that rank.
    fn discover(&mut self, job: JobId) -> Vec<Stat> {
        let Some(procs) = self.jobs.get(&job) else {
            return Vec::new();
        };
        let rank_slots = procs.groups.clone();
        let members: Vec<Stat> = match (&self.cgroups, &procs.cgroup_procs) {
            (Some(cgroups), Some(_)) => cgroups
                .pids(job)
                .into_iter()
                .filter_map(procfs::read_stat)
                .collect(),
            _ => {
                let all = procfs::all_processes();
                let start_of: HashMap<i32, u64> =
                    all.iter().map(|stat| (stat.pid, stat.start)).collect();
                let mut known: BTreeSet<i32> = procs.children.iter().copied().collect();
                known.extend(
                    procs
                        .extras
                        .iter()
                        .filter(|(pid, extra)| start_of.get(pid) == Some(&extra.start))
                        .map(|(pid, _)| *pid),
                );
                // A descendant whose parent died before it was first seen
                // was reparented to scored (the child subreaper), and its
                // ancestry is lost. Such an orphan is taken as this job's if
                // it runs as the job's user and its environment names the
                // job: a process can only mislabel itself onto a job of its
                // own user. Direct children and other jobs' processes are
                // not orphans.
                let elsewhere: BTreeSet<i32> = self
                    .jobs
                    .iter()
                    .filter(|(other, _)| **other != job)
                    .flat_map(|(_, other)| other.extras.keys().copied())
                    .collect();
                known.extend(
                    all.iter()
                        .filter(|stat| {
                            stat.ppid == self.daemon_pid
                                && !self.children.contains_key(&stat.pid)
                                && !known.contains(&stat.pid)
                                && !elsewhere.contains(&stat.pid)
                                && !stat.is_dead()
                        })
                        .filter(|stat| procfs::is_orphan_of(stat.pid, procs.uid, job.0))
                        .map(|stat| stat.pid)
                        .collect::<Vec<i32>>(),
                );
                // Walk down from known members, level by level.
                let mut members: Vec<Stat> = Vec::new();
                let mut changed = true;
                let mut taken: BTreeSet<i32> = BTreeSet::new();
                while changed {
                    changed = false;
                    for stat in &all {
                        if taken.contains(&stat.pid) {
                            continue;
                        }
                        if known.contains(&stat.pid)
                            || known.contains(&stat.ppid)
                            || rank_slots.contains_key(&stat.session)
                        {
                            known.insert(stat.pid);
                            taken.insert(stat.pid);
                            members.push(*stat);
                            changed = true;
                        }
                    }
                }
                members
            }
        };
        let procs = self.jobs.get_mut(&job).expect("checked above");
        procs.discovered_at = Some(Instant::now());
        let present: HashMap<i32, u64> =
            members.iter().map(|stat| (stat.pid, stat.start)).collect();
        procs
            .extras
            .retain(|pid, extra| present.get(pid) == Some(&extra.start));
        let by_pid: HashMap<i32, Stat> = members.iter().map(|stat| (stat.pid, *stat)).collect();
        for stat in &members {
            if procs.children.contains(&stat.pid)
                || procs.extras.contains_key(&stat.pid)
                || stat.is_dead()
            {
                continue;
            }
            // The host slot: that of the rank whose session it is in, else
            // of its nearest known ancestor.
            let slot = rank_slots.get(&stat.session).copied().or_else(|| {
                let mut cursor = stat.ppid;
                for _ in 0..64 {
                    if let Some(child) = self.children.get(&cursor) {
                        return Some(child.slot);
                    }
                    match by_pid.get(&cursor) {
                        Some(parent) => cursor = parent.ppid,
                        None => break,
                    }
                }
                None
            });
            let Ok(pidfd) = sys::pidfd_open(stat.pid) else {
                continue;
            };
            // The pid could have been reused between the read and the open:
            // only keep the handle if it is the process we read.
            if procfs::read_stat(stat.pid).map(|again| again.start) != Some(stat.start) {
                continue;
            }
            procs.extras.insert(
                stat.pid,
                Extra {
                    pidfd,
                    start: stat.start,
                    slot: slot.unwrap_or(0),
                    pgrp: stat.pgrp,
                    stopped_by_job: false,
                },
            );
            tracing::debug!(job = %job, pid = stat.pid, escaped = !rank_slots.contains_key(&stat.pgrp), "found a descendant");
        }
        members
    }

    /// With a cgroup, picks up processes that joined the job since the last
    /// sample (one read of `cgroup.procs`), so that a descendant that just
    /// left its process group is stopped with the rest.
    fn adopt_new_members(&mut self, job: JobId) {
        let (Some(cgroups), Some(procs)) = (&self.cgroups, self.jobs.get_mut(&job)) else {
            return;
        };
        if procs.cgroup_procs.is_none() {
            return;
        }
        for pid in cgroups.pids(job) {
            if procs.children.contains(&pid) || procs.extras.contains_key(&pid) {
                continue;
            }
            let Some(stat) = procfs::read_stat(pid) else {
                continue;
            };
            let Ok(pidfd) = sys::pidfd_open(pid) else {
                continue;
            };
            if stat.is_dead() || procfs::read_stat(pid).map(|again| again.start) != Some(stat.start)
            {
                continue;
            }
            let slot = procs.groups.get(&stat.session).copied().unwrap_or(0);
            procs.extras.insert(
                pid,
                Extra {
                    pidfd,
                    start: stat.start,
                    slot,
                    pgrp: stat.pgrp,
                    stopped_by_job: false,
                },
            );
        }
    }

    fn check_stop(&mut self, job: JobId, out: &mut Vec<Input>) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        let done = procs
            .stop_wait
            .as_ref()
            .is_some_and(|wait| wait.children.is_empty() && wait.extras.is_empty());
        if done {
            if let Some(wait) = procs.stop_wait.take() {
                tracing::debug!(job = %job, confirm_us = wait.since.elapsed().as_micros() as u64, "stop confirmed");
            }
            out.push(Input::Stopped(job));
        }
    }

    /// The last rank of the job is gone: kill whatever is left, then wait
    /// for it before reporting the job's processes gone.
    /// A reaped rank of `job` leaves its job's books: its pid, and so its
    /// group's id, may now be reused. Ends the job's processes if it was
    /// the last, else sees whether a stop under way is now complete.
    fn rank_reaped(&mut self, job: JobId, pid: i32, out: &mut Vec<Input>) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        procs.children.remove(&pid);
        procs.groups.remove(&pid);
        if let Some(wait) = procs.stop_wait.as_mut() {
            wait.children.remove(&pid);
        }
        if procs.children.is_empty() && procs.launch.is_none() {
            self.last_child_gone(job, out);
        } else {
            self.check_stop(job, out);
        }
    }

    fn last_child_gone(&mut self, job: JobId, out: &mut Vec<Input>) {
        self.thaw(job);
        let leftovers: Vec<Stat> = self.discover(job);
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        procs.stop_wait = None;
        for extra in procs.extras.values() {
            let _ = sys::pidfd_send_signal(&extra.pidfd, libc::SIGKILL);
        }
        let pids: Vec<(i32, u64)> = leftovers
            .iter()
            .filter(|stat| !stat.is_dead())
            .map(|stat| (stat.pid, stat.start))
            .collect();
        if !pids.is_empty() {
            tracing::debug!(job = %job, n = pids.len(), "killing processes left behind by the job");
            procs.drain = Some(Drain {
                pids,
                since: Instant::now(),
            });
        } else {
            procs.extras.clear();
            Self::gone(job, procs, &self.state, out);
        }
    }

    /// Reports the job's final accounting, then that its processes are gone.
    /// The scratch directory's size comes from one more step of its walk
    /// (bounded like a sample), so that a job too short to be sampled
    /// still reports it.
    fn gone(job: JobId, procs: &mut JobProcs, state: &statedir::StateDir, out: &mut Vec<Input>) {
        let mut spent = 0;
        let scratch_size = procs.disk_walk.advance(
            || state.open_scratch(job),
            DISK_ENTRIES_PER_SAMPLE,
            &mut spent,
        );
        out.push(Input::FinalUsage {
            job,
            cpu: procs.reaped_cpu,
            peak_memory: procs.reaped_peak.clone(),
            disk: procs.exe_bytes + scratch_size,
        });
        out.push(Input::ProcessesGone(job));
    }
}

/// Closes a rank's report pipe, first removing it from the set the loop
/// watches: a copy of it in another process would keep its registration,
/// and so its reports, alive after the daemon's descriptor is gone.
fn close_report(watch: &OwnedFd, report: Option<OwnedFd>) {
    if let Some(report) = report {
        if let Err(error) = sys::epoll_remove(watch, report.as_raw_fd()) {
            tracing::debug!(%error, "cannot remove a report pipe from the watched set");
        }
    }
}

/// Between fork and exec, the very last step: never let the daemon's
/// real-time priority (or nice value) reach a job. Until here the child
/// ran at the daemon's priority (the daemon does not set
/// SCHED_RESET_ON_FORK), so that its few hundred microseconds of pre-exec
/// work do not wait for a CPU behind a busy machine's processes. The daemon
/// no longer waits for it (`spawn.rs`), but its launch window does
/// (`EXEC_WINDOW`), and a launch of 1,500 ranks left the console more
/// responsive with real-time children than with children at normal
/// priority (BENCHMARKS.md, *A spawn that does not wait*). Lowering one's
/// own priority needs no privilege, so this works after the change of
/// user too. Then the caller's nice value and I/O priority, as far as the
/// kernel lets the user have them (raising one's priority needs
/// CAP_SYS_NICE or RLIMIT_NICE, an I/O class of real time CAP_SYS_ADMIN):
/// where it refuses, the process keeps what it has, as `nice` and `ionice`
/// leave a program they could not change, never a failed launch. A
/// private daemon started at nice 5 cannot give its jobs nice 0. Only
/// system calls.
fn drop_daemon_priority(nice: Option<i32>, ioprio: Option<u32>) -> io::Result<()> {
    fn unless_refused(result: io::Result<()>) -> io::Result<()> {
        match result {
            Err(error) if matches!(error.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                Ok(())
            }
            other => other,
        }
    }
    sys::set_scheduler(None, false)?;
    unless_refused(sys::set_nice(0))?;
    if let Some(nice) = nice {
        unless_refused(sys::set_nice(nice))?;
    }
    if let Some(ioprio) = ioprio {
        unless_refused(sys::set_io_priority(ioprio))?;
    }
    Ok(())
}

/// How many ranks of `uid`'s jobs are between fork and exec with their
/// report still awaited.
fn user_execs_in_flight(execs: &HashMap<i32, PendingExec>, uid: u32) -> usize {
    execs
        .values()
        .filter(|pending| pending.uid == uid && pending.report.is_some())
        .count()
}

/// The environment variables the daemon sets for each rank, over the
/// caller's.
const SCORE_KEYS: [&str; 7] = [
    "SCORE_JOBID",
    "SCORE_RANK",
    "SCORE_NPROCS",
    "SCORE_HOST",
    "SCORE_HOSTID",
    "SCORE_TMPDIR",
    "SCORE_STAGE",
];

/// `KEY=value` for one of [`SCORE_KEYS`]; its values (numbers, a host
/// name, the scratch path) hold no NUL byte, and one that did would give
/// an empty entry rather than a failed launch.
fn score_entry(key: &str, value: &[u8]) -> CString {
    let mut entry = Vec::with_capacity(key.len() + value.len() + 1);
    entry.extend_from_slice(key.as_bytes());
    entry.push(b'=');
    entry.extend_from_slice(value);
    CString::new(entry).unwrap_or_default()
}

/// Keeps `fd` until the rank is forked, and gives its number.
fn hold(owned: &mut Vec<OwnedFd>, fd: OwnedFd) -> std::os::fd::RawFd {
    let raw = fd.as_raw_fd();
    owned.push(fd);
    raw
}

/// /dev/null for a rank's stdin (read) or stdout and stderr (write), as
/// `std::process::Stdio::null` opens it.
fn open_null(write: bool) -> io::Result<OwnedFd> {
    let file = if write {
        fs::OpenOptions::new().write(true).open("/dev/null")?
    } else {
        fs::File::open("/dev/null")?
    };
    Ok(OwnedFd::from(file))
}

/// A launch that failed in the daemon (a descriptor, a fork), in the words
/// of a rank that failed to run: the program, the directory and why.
fn launch_error(program: &str, cwd: &str, error: &io::Error) -> (String, i32) {
    let status = match error.kind() {
        io::ErrorKind::NotFound => crate::exitcode::NOT_FOUND,
        _ => crate::exitcode::NOT_EXECUTABLE,
    };
    (format!("cannot run '{program}' in {cwd}: {error}"), status)
}

/// Between fork and exec, after the change of user: what a job must not
/// keep of scored's root. A new session keyring of the job's own (it
/// would otherwise possess scored's, and through it any key scored's
/// session holds); and, when the job runs as another user, a check that
/// no capability and no securebit survived `setuid`, which aborts the
/// exec with [`sys::PRIVILEGES_REMAIN`] (reported as such by the parent).
/// Only system calls: safe between fork and exec.
fn shed_root_leftovers(became_user: bool) -> io::Result<()> {
    sys::join_new_session_keyring()?;
    if became_user && sys::privileges_remain()? {
        return Err(io::Error::from_raw_os_error(sys::PRIVILEGES_REMAIN));
    }
    Ok(())
}

fn signal_from(signal: i32) -> Option<Signal> {
    Signal::try_from(signal).ok()
}

impl Actuator for OsActuator {
    fn known_jobs(&self) -> Vec<(JobId, bool)> {
        self.job_records()
    }

    fn discard_jobs(&mut self, jobs: &[(JobId, bool)], out: &mut Vec<Input>) {
        self.discard(jobs, out);
    }

    fn launching(&self) -> bool {
        self.jobs.values().any(|procs| procs.launch.is_some()) || !self.execs.is_empty()
    }

    fn exec_watch_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.exec_watch.as_raw_fd())
    }

    fn handover(&self) -> Result<(ActuatorSnapshot, Vec<std::os::fd::RawFd>), HandoverError> {
        // A launch in progress holds pipes and a plan that the new image
        // could not take over; it lasts a few seconds at most.
        if let Some(job) = self
            .jobs
            .iter()
            .find_map(|(job, procs)| procs.launch.as_ref().map(|_| *job))
        {
            return Err(HandoverError::Launching(job));
        }
        // A rank between fork and exec: its report pipe cannot be taken
        // over either; it lasts under a millisecond, or `EXEC_TIMEOUT`.
        if let Some(pending) = self.execs.values().next() {
            return Err(HandoverError::Launching(pending.job));
        }
        Ok(self.snapshot())
    }

    fn spawn(&mut self, plan: &LaunchPlan, stdio: Option<&JobStdio>, out: &mut Vec<Input>) {
        if !self.jobs.contains_key(&plan.job) {
            // Not the program's fault: the status says the daemon failed.
            if let Err(problem) = self.check_state_dir(out) {
                let message = format!("cannot prepare job {}: {problem}", plan.job);
                tracing::info!(job = %plan.job, %message, "launch failed");
                out.push(Input::SpawnFailed {
                    job: plan.job,
                    message,
                    status: crate::exitcode::INTERNAL,
                });
                out.push(Input::ProcessesGone(plan.job));
                return;
            }
        }
        let launch = Launch {
            plan: plan.clone(),
            stdio: stdio.map(JobStdio::share),
            progress: LaunchProgress::default(),
            paused: false,
            aborted: false,
        };
        self.run_launch(launch, Instant::now() + LAUNCH_BATCH, out);
    }

    fn continue_launches(&mut self, out: &mut Vec<Input>) {
        let deadline = Instant::now() + LAUNCH_BATCH;
        let due: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, procs)| procs.launch_due(&self.execs))
            .map(|(job, _)| *job)
            .collect();
        for job in due {
            let Some(launch) = self
                .jobs
                .get_mut(&job)
                .and_then(|procs| procs.launch.take())
            else {
                continue;
            };
            if launch.aborted {
                // Killed before all its processes existed: what exists is
                // being killed; once it is gone, so is the job.
                drop(launch);
                if self
                    .jobs
                    .get(&job)
                    .is_some_and(|procs| procs.children.is_empty())
                {
                    self.last_child_gone(job, out);
                }
                continue;
            }
            if Instant::now() >= deadline {
                if let Some(procs) = self.jobs.get_mut(&job) {
                    procs.launch = Some(launch);
                }
                continue;
            }
            self.run_launch(launch, deadline, out);
        }
    }

    fn stop(&mut self, job: JobId, out: &mut Vec<Input>) {
        // At a slice boundary the job was sampled just before this stop, so
        // its descendants are known; otherwise look at its cgroup again.
        let fresh = self
            .jobs
            .get(&job)
            .and_then(|procs| procs.discovered_at)
            .is_some_and(|at| at.elapsed() < FRESH_DISCOVERY);
        if !fresh {
            self.adopt_new_members(job);
        }
        self.note_stopped_by_job(job);
        // Our own SIGCONTs of the last `cont` are reported as continues:
        // take them now, so that a continue seen from here on was someone
        // else's.
        self.reap_pending(out);
        self.send(job, Signal::SIGSTOP);
        let freeze = self
            .jobs
            .get(&job)
            .is_some_and(|procs| procs.hold.freeze_on_stop)
            && self.freeze(job);
        let children = &self.children;
        let Some(procs) = self.jobs.get_mut(&job) else {
            out.push(Input::Stopped(job));
            return;
        };
        procs.hold.switched_out = true;
        procs.hold.rogue_continues = 0;
        if let Some(launch) = procs.launch.as_mut() {
            launch.paused = true;
        }
        let pending_children: BTreeSet<i32> = procs
            .children
            .iter()
            .copied()
            .filter(|pid| children.get(pid).is_some_and(|child| !child.stopped))
            .collect();
        // Descendants in the job's groups got the group signal, escaped ones
        // theirs through their pidfd; all are confirmed through /proc.
        let pending_extras: BTreeSet<i32> = procs.extras.keys().copied().collect();
        procs.stop_wait = Some(StopWait {
            children: pending_children,
            extras: pending_extras,
            since: Instant::now(),
            freezing: freeze,
        });
        // Descendants are confirmed through /proc right away when they
        // already stopped; the rest at the next poll.
        self.poll_job(job, Instant::now(), false, out);
    }

    fn cont(&mut self, job: JobId) {
        self.thaw(job);
        // The time a rank spent switched out before its exec does not count.
        let deadline = Instant::now() + EXEC_TIMEOUT;
        for pending in self.execs.values_mut().filter(|pending| pending.job == job) {
            pending.deadline = deadline;
        }
        if let Some(procs) = self.jobs.get_mut(&job) {
            procs.hold.switched_out = false;
            procs.stop_wait = None;
            if let Some(launch) = procs.launch.as_mut() {
                launch.paused = false;
            }
            for pid in &procs.children {
                if let Some(child) = self.children.get_mut(pid) {
                    child.stopped = false;
                }
            }
        }
        self.send(job, Signal::SIGCONT);
    }

    fn signal(&mut self, job: JobId, signal: i32) {
        if signal == libc::SIGKILL || signal == libc::SIGTERM {
            // A job being killed gets no more processes.
            if let Some(launch) = self
                .jobs
                .get_mut(&job)
                .and_then(|procs| procs.launch.as_mut())
            {
                launch.aborted = true;
            }
        }
        match signal_from(signal) {
            Some(signal) => self.send(job, signal),
            None => tracing::warn!(job = %job, signal, "not a signal; nothing sent"),
        }
    }

    fn sample(&mut self, job: JobId) -> Option<Usage> {
        self.jobs.get(&job)?;
        let members = self.discover(job);
        let procs = self.jobs.get(&job)?;
        let mut ticks = 0u64;
        let mut memory = vec![0u64; procs.reaped_peak.len()];
        for stat in &members {
            ticks += stat.own_ticks + stat.children_ticks;
            let slot = self
                .children
                .get(&stat.pid)
                .map(|child| child.slot)
                .or_else(|| procs.extras.get(&stat.pid).map(|extra| extra.slot))
                .or_else(|| procs.groups.get(&stat.session).copied())
                .unwrap_or(0);
            if let Some(total) = memory.get_mut(slot) {
                *total += stat.rss_pages * self.page_size;
            }
        }
        // Children that are not in the member list (no cgroup, and /proc
        // raced with us) still count through their own stat.
        for pid in &procs.children {
            if !members.iter().any(|stat| stat.pid == *pid) {
                if let Some(stat) = procfs::read_stat(*pid) {
                    ticks += stat.own_ticks + stat.children_ticks;
                }
            }
        }
        let live_cpu =
            Duration::from_micros(ticks.saturating_mul(1_000_000) / self.clock_ticks.max(1));
        let now = Instant::now();
        if now.duration_since(self.disk_window) >= DISK_WINDOW {
            self.disk_window = now;
            self.disk_spent = 0;
        }
        let budget = DISK_ENTRIES_PER_WINDOW
            .saturating_sub(self.disk_spent)
            .clamp(DISK_ENTRIES_MIN, DISK_ENTRIES_PER_SAMPLE);
        let state = &self.state;
        let procs = self.jobs.get_mut(&job)?;
        let scratch_size =
            procs
                .disk_walk
                .advance(|| state.open_scratch(job), budget, &mut self.disk_spent);
        let disk = procs.exe_bytes + scratch_size;
        Some(Usage {
            cpu: procs.reaped_cpu + live_cpu,
            memory,
            disk,
        })
    }

    fn release(&mut self, job: JobId) {
        let Some(procs) = self.jobs.remove(&job) else {
            return;
        };
        if !procs.children.is_empty() {
            tracing::error!(job = %job, n = procs.children.len(), "releasing a job whose processes are alive; killing them");
            for pid in &procs.children {
                let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
            }
        }
        // Handles, not paths: the user may have planted links in the tree.
        if let Err(error) = self.state.remove_scratch(job) {
            if error.kind() != io::ErrorKind::NotFound {
                tracing::warn!(job = %job, path = %procs.scratch.display(), %error, "cannot remove the job's scratch directory");
            }
        }
        if let Some(cgroups) = &self.cgroups {
            cgroups.remove_job(job);
        }
    }

    fn reap(&mut self, out: &mut Vec<Input>) {
        loop {
            match sys::wait_any() {
                Ok(Some(waited)) => self.handle_waited(waited, out),
                Ok(None) => break,
                Err(error) => {
                    tracing::error!(%error, "wait4 failed");
                    break;
                }
            }
        }
        self.poll(Instant::now(), out);
    }

    fn poll(&mut self, now: Instant, out: &mut Vec<Input>) {
        self.collect_exec_reports(out);
        self.expire_execs(now, out);
        if now >= self.state_check_at {
            let _ = self.check_state_dir(out);
        }
        self.poll_waiting_jobs(now, out);
    }

    fn next_deadline(&self) -> Option<Instant> {
        let busy = self.jobs.values().any(|procs| {
            procs.drain.is_some()
                || procs
                    .stop_wait
                    .as_ref()
                    .is_some_and(|wait| !wait.extras.is_empty() || !wait.children.is_empty())
        });
        let launching = self
            .jobs
            .values()
            .any(|procs| procs.launch_due(&self.execs));
        if launching {
            return Some(Instant::now());
        }
        let poll = busy.then(|| Instant::now() + POLL_INTERVAL);
        let next = poll.map_or(self.state_check_at, |poll| poll.min(self.state_check_at));
        // The first rank that may still fail to exec in time.
        let exec = self
            .execs
            .values()
            .filter(|pending| {
                !pending.failed
                    && !self
                        .jobs
                        .get(&pending.job)
                        .is_some_and(|procs| procs.hold.switched_out)
            })
            .map(|pending| pending.deadline)
            .min();
        Some(exec.map_or(next, |exec| exec.min(next)))
    }

    fn await_stops(&mut self, max: Duration, out: &mut Vec<Input>) {
        let deadline = Instant::now() + max;
        // Only ranks pending: block in wait4 for them, one system call per
        // child as a plain killpg/waitpid program does, bounded by an alarm.
        let only_ranks = self.jobs.values().all(|procs| {
            procs
                .stop_wait
                .as_ref()
                .is_none_or(|wait| wait.extras.is_empty())
        });
        if only_ranks && self.pending_stops() > 0 && sys::set_alarm(ALARM_EVERY).is_ok() {
            let pending: Vec<i32> = self
                .jobs
                .values()
                .filter_map(|procs| procs.stop_wait.as_ref())
                .flat_map(|wait| wait.children.iter().copied())
                .collect();
            'waiting: for pid in pending {
                // Each pending rank in turn; whatever it reports first (its
                // stop, or its end) is handled. The periodic alarm
                // interrupts every blocking wait, and the deadline is
                // checked after each interruption.
                while self.children.get(&pid).is_some_and(|child| !child.stopped) {
                    match sys::wait_pid_blocking(pid) {
                        Ok(Some(waited)) => self.handle_waited(waited, out),
                        Ok(None) if Instant::now() < deadline => {}
                        // Out of time: the rest is confirmed asynchronously.
                        Ok(None) => break 'waiting,
                        Err(error) => {
                            tracing::warn!(pid, %error, "waiting for a rank failed");
                            break 'waiting;
                        }
                    }
                }
            }
            let _ = sys::set_alarm(Duration::ZERO);
            // Not `poll`: the state directory's check (due every second)
            // would then fall between a switch's stops and its continues.
            self.poll_waiting_jobs(Instant::now(), out);
            return;
        }
        while self.pending_stops() > 0 {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            // Descendants other than ranks send no SIGCHLD: look at /proc
            // for them every so often.
            let step = POLL_INTERVAL.min(deadline - now);
            match sys::wait_sigchld(step) {
                Ok(_) => self.reap(out),
                Err(error) => {
                    tracing::warn!(%error, "waiting for SIGCHLD failed");
                    break;
                }
            }
        }
    }

    fn pending_stops(&self) -> usize {
        self.jobs
            .values()
            .filter_map(|procs| procs.stop_wait.as_ref())
            .map(|wait| wait.children.len() + wait.extras.len())
            .sum()
    }

    fn kill_everything(&mut self) {
        for procs in self.jobs.values_mut() {
            procs.launch = None;
        }
        let jobs: Vec<JobId> = self.jobs.keys().copied().collect();
        for job in &jobs {
            // Pick up what escaped since the last sample, so it dies too.
            self.discover(*job);
            self.send(*job, Signal::SIGKILL);
            if let Some(procs) = self.jobs.get(job) {
                for extra in procs.extras.values() {
                    let _ = sys::pidfd_send_signal(&extra.pidfd, libc::SIGKILL);
                }
            }
        }
        // Any other child of ours is a job descendant that came to us as an
        // orphan: scored forks nothing else. Signalling it by pid is safe,
        // since an unreaped child's pid cannot be reused.
        for pid in self.orphans() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut events = Vec::new();
        while (!self.children.is_empty() || !self.orphans().is_empty()) && Instant::now() < deadline
        {
            self.reap(&mut events);
            std::thread::sleep(Duration::from_millis(1));
        }
        for job in jobs {
            self.release(job);
        }
    }
}

impl OsActuator {
    /// Polls the jobs with stops or a drain to confirm.
    fn poll_waiting_jobs(&mut self, now: Instant, out: &mut Vec<Input>) {
        let jobs: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, procs)| procs.stop_wait.is_some() || procs.drain.is_some())
            .map(|(job, _)| *job)
            .collect();
        for job in jobs {
            self.poll_job(job, now, true, out);
        }
    }

    /// Our children that are not ranks: orphaned job descendants, not yet reaped.
    fn orphans(&self) -> Vec<i32> {
        procfs::all_processes()
            .into_iter()
            .filter(|stat| stat.ppid == self.daemon_pid && !self.children.contains_key(&stat.pid))
            .map(|stat| stat.pid)
            .collect()
    }
}

impl OsActuator {
    /// Turns one state change of a child into core inputs.
    fn handle_waited(&mut self, waited: sys::Waited, out: &mut Vec<Input>) {
        let pid = waited.pid;
        match (self.children.get(&pid).copied(), waited.event) {
            (Some(child), sys::WaitEvent::Stopped) => {
                if let Some(entry) = self.children.get_mut(&pid) {
                    entry.stopped = true;
                }
                if let Some(wait) = self
                    .jobs
                    .get_mut(&child.job)
                    .and_then(|procs| procs.stop_wait.as_mut())
                {
                    wait.children.remove(&pid);
                }
                self.check_stop(child.job, out);
            }
            (Some(child), sys::WaitEvent::Continued) => {
                if let Some(entry) = self.children.get_mut(&pid) {
                    entry.stopped = false;
                }
                let switched_out = self
                    .jobs
                    .get(&child.job)
                    .is_some_and(|procs| procs.hold.switched_out);
                if switched_out {
                    self.continued_from_outside(child.job, pid, out);
                }
            }
            (Some(child), sys::WaitEvent::Exited(_) | sys::WaitEvent::Signaled(_))
                if self.exec_never_happened(pid, out) =>
            {
                // It failed before its exec (its launch failure is
                // reported): not a rank's exit.
                self.children.remove(&pid);
                self.rank_reaped(child.job, pid, out);
            }
            (Some(child), sys::WaitEvent::Exited(_) | sys::WaitEvent::Signaled(_)) => {
                self.children.remove(&pid);
                let status = match waited.event {
                    sys::WaitEvent::Exited(code) => ExitStatus::Code(code),
                    sys::WaitEvent::Signaled(signal) => ExitStatus::Signal(signal),
                    _ => unreachable!("matched above"),
                };
                tracing::debug!(job = %child.job, pid, rank = child.rank, ?status, "rank exited");
                out.push(Input::RankExited {
                    job: child.job,
                    stage: child.stage,
                    rank: child.rank,
                    status,
                });
                if let Some(procs) = self.jobs.get_mut(&child.job) {
                    procs.reaped_cpu += waited.cpu;
                    procs.reaped_peak[child.slot] += waited.max_rss;
                }
                self.rank_reaped(child.job, pid, out);
            }
            (None, event) => {
                // A descendant that was orphaned and came to us (we are
                // the child subreaper): account its CPU to its job.
                if matches!(
                    event,
                    sys::WaitEvent::Exited(_) | sys::WaitEvent::Signaled(_)
                ) {
                    for procs in self.jobs.values_mut() {
                        if procs.extras.remove(&pid).is_some() {
                            procs.reaped_cpu += waited.cpu;
                            if let Some(wait) = procs.stop_wait.as_mut() {
                                wait.extras.remove(&pid);
                            }
                            break;
                        }
                    }
                }
            }
        }
    }

    /// A rank that ended: whether it ended before its exec because a step
    /// failed or it was killed for taking too long (reading its report
    /// now if the loop had not yet). One killed by someone else before
    /// its exec ends as killed by that signal, as it would in a shell.
    fn exec_never_happened(&mut self, pid: i32, out: &mut Vec<Input>) -> bool {
        if !self.execs.contains_key(&pid) {
            return false;
        }
        self.exec_report(pid, out);
        match self.execs.remove(&pid) {
            Some(pending) => {
                let (job, failed) = (pending.job, pending.failed);
                let settled = pending.report.is_some();
                close_report(&self.exec_watch, pending.report);
                if settled {
                    self.exec_settled(job);
                }
                failed
            }
            None => false,
        }
    }

    /// Collects the child state changes already pending, without waiting.
    fn reap_pending(&mut self, out: &mut Vec<Input>) {
        while let Ok(Some(waited)) = sys::wait_any() {
            self.handle_waited(waited, out);
        }
    }

    /// Freezes the job's cgroup; whether it could.
    fn freeze(&mut self, job: JobId) -> bool {
        let (Some(cgroups), Some(procs)) = (&self.cgroups, self.jobs.get_mut(&job)) else {
            return false;
        };
        if procs.cgroup_procs.is_none() {
            return false;
        }
        if procs.hold.frozen {
            return true;
        }
        match cgroups.set_frozen(job, true) {
            Ok(()) => {
                procs.hold.frozen = true;
                true
            }
            Err(error) => {
                tracing::warn!(job = %job, %error, "cannot freeze the job's cgroup");
                false
            }
        }
    }

    /// Thaws the job's cgroup if it is frozen.
    fn thaw(&mut self, job: JobId) {
        let (Some(cgroups), Some(procs)) = (&self.cgroups, self.jobs.get_mut(&job)) else {
            return;
        };
        if !procs.hold.frozen {
            return;
        }
        match cgroups.set_frozen(job, false) {
            Ok(()) => procs.hold.frozen = false,
            Err(error) => tracing::error!(job = %job, %error, "cannot thaw the job's cgroup"),
        }
    }

    /// A rank of a switched-out job was continued, by someone other than
    /// scored (its owner can send its processes SIGCONT): the job must not
    /// run on hosts that another job now holds. Its cgroup is frozen,
    /// which no signal undoes, now and at every later stop; without a
    /// cgroup it is stopped again, and killed if this keeps happening.
    fn continued_from_outside(&mut self, job: JobId, pid: i32, out: &mut Vec<Input>) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        procs.hold.rogue_continues += 1;
        let first = !procs.hold.freeze_on_stop;
        procs.hold.freeze_on_stop = true;
        if first {
            tracing::warn!(job = %job, pid, frozen = procs.cgroup_procs.is_some(), "a switched-out job was continued from outside; freezing it (or stopping it again without a cgroup)");
        }
        if self.freeze(job) {
            return;
        }
        self.send(job, Signal::SIGSTOP);
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if procs.hold.rogue_continues > ROGUE_CONTINUE_LIMIT {
            procs.hold.switched_out = false;
            procs.stop_wait = None;
            out.push(Input::StopFailed {
                job,
                reason: format!(
                    "its processes were continued from outside {} times while it was switched \
                     out, and no freezer can hold it",
                    procs.hold.rogue_continues
                ),
            });
        }
    }

    fn poll_job(&mut self, job: JobId, now: Instant, fallback: bool, out: &mut Vec<Input>) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if let Some(wait) = procs.stop_wait.as_mut() {
            let extras = &procs.extras;
            wait.extras
                .retain(|pid| match (extras.get(pid), procfs::read_stat(*pid)) {
                    (Some(extra), Some(stat)) => {
                        stat.start == extra.start && !procfs::cannot_run(&stat)
                    }
                    _ => false,
                });
            let waited = now.duration_since(wait.since);
            if wait.freezing
                && self
                    .cgroups
                    .as_ref()
                    .is_some_and(|cgroups| cgroups.is_frozen(job))
            {
                // Frozen: none of its processes can run until thawed.
                wait.children.clear();
                wait.extras.clear();
            } else if fallback
                && !wait.freezing
                && waited >= FREEZE_AFTER
                && procs.cgroup_procs.is_some()
                && !(wait.children.is_empty() && wait.extras.is_empty())
            {
                if let Some(cgroups) = &self.cgroups {
                    match cgroups.set_frozen(job, true) {
                        Ok(()) => {
                            tracing::warn!(
                                job = %job,
                                "the job's stop was not confirmed within {}ms (something may be continuing it from outside); freezing it",
                                FREEZE_AFTER.as_millis()
                            );
                            wait.freezing = true;
                            procs.hold.frozen = true;
                            procs.hold.freeze_on_stop = true;
                        }
                        Err(error) => {
                            tracing::warn!(job = %job, %error, "cannot freeze the job's cgroup")
                        }
                    }
                }
            }
            if fallback && waited >= STOP_TIMEOUT {
                let left = wait.children.len() + wait.extras.len();
                if left > 0 {
                    tracing::warn!(job = %job, left, "the job's stop was not confirmed in time; killing it");
                    procs.stop_wait = None;
                    out.push(Input::StopFailed {
                        job,
                        reason: format!(
                            "{left} of its processes did not stop within {}s of being switched \
                             out (something kept continuing them, or they could not stop)",
                            STOP_TIMEOUT.as_secs()
                        ),
                    });
                    return;
                }
            }
        }
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if let Some(wait) = procs.stop_wait.as_mut() {
            if fallback && now.duration_since(wait.since) >= CONFIRM_FALLBACK {
                // wait4 should have reported these; trust /proc if it says
                // stopped, or if the child can only stop later (a vfork()
                // parent whose child is stopped: it never reports a stop
                // until its job is continued, and waiting for it stalled
                // every switch of its hosts).
                wait.children.retain(|pid| {
                    procfs::read_stat(*pid).is_none_or(|stat| !procfs::cannot_run(&stat))
                });
            }
        }
        if let Some(drain) = procs.drain.as_mut() {
            drain.pids.retain(|(pid, start)| {
                procfs::read_stat(*pid).is_some_and(|stat| stat.start == *start && !stat.is_dead())
            });
            let timed_out = now.duration_since(drain.since) >= DRAIN_TIMEOUT;
            if drain.pids.is_empty() || timed_out {
                if timed_out {
                    tracing::warn!(job = %job, left = drain.pids.len(), "processes of a finished job would not die");
                }
                procs.drain = None;
                procs.extras.clear();
                Self::gone(job, procs, &self.state, out);
                return;
            }
        }
        self.check_stop(job, out);
    }
}

/// Raises the daemon's scheduling priority so that the jobs it stops cannot
/// delay it: SCHED_FIFO at a modest priority, else nice -20, else nothing.
/// Jobs run at normal priority either way: a child drops the daemon's
/// priority as the last step before exec (`drop_daemon_priority`), and
/// under the nice fallback SCHED_RESET_ON_FORK resets it at fork too.
/// Returns what was achieved, for the log.
pub fn elevate_priority() -> String {
    const RT_PRIORITY: i32 = 10;
    // No SCHED_RESET_ON_FORK: a child creating a job's process runs at
    // this priority until just before exec (`drop_daemon_priority`).
    match sys::set_scheduler(Some(RT_PRIORITY), false) {
        Ok(()) => format!("SCHED_FIFO priority {RT_PRIORITY}"),
        Err(rt_error) => {
            let _ = sys::set_scheduler(None, true);
            match sys::set_nice(-20) {
                Ok(()) => format!("nice -20 (real-time refused: {rt_error})"),
                Err(nice_error) => format!(
                    "normal priority (real-time refused: {rt_error}; nice refused: {nice_error})"
                ),
            }
        }
    }
}

/// Runs `exe ARGS --check-state PATH` (a new scored binary checking that it
/// can take over from the handover file `path`) and waits for it. The
/// daemon waits for the check, so the check runs at the daemon's own
/// priority: at normal priority on a loaded machine it waited for the CPU
/// longer than it ran. Where that is refused it runs at normal priority.
pub fn check_handover(
    exe: &Path,
    args: &[std::ffi::OsString],
    path: &Path,
) -> io::Result<std::process::Output> {
    let mut check = Command::new(exe);
    check
        .args(args)
        .arg("--check-state")
        .arg(path)
        .stdin(Stdio::null());
    // SAFETY: the closure makes one system call (sched_setscheduler), which
    // allocates nothing and takes no lock, between fork and exec.
    unsafe {
        check.pre_exec(|| {
            let _ = sys::set_scheduler(Some(10), true);
            Ok(())
        });
    }
    check.output()
}

/// Marks every descriptor the daemon inherited (other than stdio)
/// close-on-exec, so that none of them reaches a job: the daemon's own
/// descriptors are opened close-on-exec, but whatever started it may have
/// left others open. Returns how many were marked, for the log.
pub fn seal_inherited_descriptors() -> usize {
    let Ok(entries) = fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    // Collect first: the directory being read is itself a descriptor.
    let fds: Vec<i32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    fds.into_iter()
        .filter(|fd| sys::set_cloexec(*fd).is_ok())
        .count()
}

/// Makes the daemon the reaper of its jobs' orphaned descendants, so that
/// a process whose parent died is still ours to account for and reap.
pub fn become_subreaper() -> io::Result<()> {
    sys::set_child_subreaper()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_handover_says_why_in_the_operators_words() {
        assert_eq!(
            HandoverError::Launching(JobId(42)).to_string(),
            "job 42 is still being launched; restart once its processes exist"
        );
        assert_eq!(
            HandoverError::Unsupported.to_string(),
            "this actuator cannot hand its processes over"
        );
    }
}
