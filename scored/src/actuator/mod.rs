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
//!
//! Where to look: this file holds the [`Actuator`] trait, what the actuator
//! tracks about each job and its tunable bounds. Creating a job's
//! processes is in `launch.rs`, with the child's side between fork and exec
//! in `spawn.rs` and the reports of ranks not yet exec'd in `exec.rs`;
//! stopping, holding and continuing in `stop.rs` (the freezer in
//! `cgroup.rs`); finding descendants and measuring usage in `sample.rs`
//! (reading /proc in `procfs.rs`); children's ends and a job's release in
//! `reap.rs`; the scratch directories in `statedir.rs`; the daemon's own
//! set-up in `daemon.rs`; the handover of an in-place restart in
//! `snapshot.rs` and `recover.rs`; why a launch fails, with the status
//! its scrun reports, in `failure.rs` ([`LaunchError`]); every system
//! call that needs `unsafe` in the crate's `sys.rs`. Every timeout reads the time
//! through the [`Clock`] the actuator was made with, so that tests move
//! time themselves.

pub mod cgroup;
pub mod procfs;
mod recover;
mod snapshot;
pub(crate) mod spawn;
pub mod statedir;

mod daemon;
mod exec;
mod failure;
mod keepers;
mod launch;
mod reap;
mod sample;
mod stop;

pub use daemon::{
    become_subreaper, check_handover, elevate_priority, fill_standard_descriptors,
    seal_inherited_descriptors,
};
use exec::PendingExec;
pub use failure::LaunchError;
use launch::LaunchInProgress;
pub use recover::input_job;
pub use snapshot::ActuatorSnapshot;
pub use spawn::spawn_closer;
pub use statedir::{invoked_as_remover, remove_inherited};

use std::collections::{BTreeSet, HashMap};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use scored_core::cluster::Topology;
use scored_core::core::Input;
use scored_core::ids::JobId;
use scored_core::job::{LaunchPlan, Usage};

use self::cgroup::Cgroups;
use crate::closer::UserFd;
use crate::sys;

/// How long a stop may go unconfirmed by `wait4` before /proc is consulted.
const CONFIRM_FALLBACK: Duration = Duration::from_millis(20);
/// With a cgroup, how many of a job's processes other than its ranks one
/// sample reads from /proc at most: those not seen yet first, then the
/// others in turn, so that a job of thousands of idle processes costs
/// each slice a bounded amount of work (the rest keep their last reading).
const MEMBER_READS_PER_SAMPLE: usize = 32;
/// With a freezer, how many processes besides its ranks a job may have
/// before its switches hold them by its freezer: its ranks are still
/// stopped and continued by signal, the rest frozen and thawed in one
/// write each once the switch is over (`stop/rest.rs`). Signalling a
/// process costs the kernel a wakeup of it (3,000 idle processes stopped
/// and continued through their groups cost 20 ms of CPU a switch, frozen
/// and thawed 2 ms), while freezing a sleeping process only marks it.
const FREEZER_SWITCH_ABOVE: usize = 256;
/// How often a job switched by its ranks has its `cgroup.procs`
/// listed by a sample (a list of thousands costs more than the rest of
/// the sample): its processes are held whether listed or not, and the
/// pids controller, where present, counts them at each fork.
const MEMBER_LIST_EVERY: Duration = Duration::from_millis(500);
/// With a cgroup, how many of a job's processes outside its ranks'
/// process groups (which group signals miss) are held through a pidfd to
/// be signalled one by one; a job with more is held by its freezer at
/// each stop instead. Processes inside the ranks' groups hold nothing.
const HELD_ESCAPED: usize = 64;
/// The most processes a job may have at once: the kernel's limit on its
/// cgroup where the pids controller is there (a fork beyond it fails),
/// else checked at each sample; a job found beyond it is killed, told why.
pub const MAX_JOB_PROCESSES: usize = 10_000;

/// [`MAX_JOB_PROCESSES`], or the tests' lower limit (see `evloop::faults`).
fn max_job_processes() -> usize {
    crate::evloop::faults::max_job_processes(MAX_JOB_PROCESSES)
}

/// How often unconfirmed stops and draining jobs are polled.
const POLL_INTERVAL: Duration = Duration::from_millis(1);
/// How often the processes a job left in its cgroup are killed again while
/// it drains (those forked while the last kill went through the list).
const DRAIN_KILL_EVERY: Duration = Duration::from_millis(100);
/// How long the processes left behind by a job may take to die.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How recent a look for a job's descendants must be for a stop to trust it.
const FRESH_DISCOVERY: Duration = Duration::from_millis(2);
/// How often the state directory is checked (and healed) between launches.
const STATE_DIR_CHECK: Duration = Duration::from_secs(1);
/// The time one wakeup of the loop spends removing finished jobs' scratch
/// trees; the rest waits for the next wakeup, which comes at once while any
/// is left. A tree of hundreds of thousands of files so costs the loop
/// slices of this length, between which clients and ticks are served.
pub const SWEEP_SLICE: Duration = Duration::from_millis(2);
/// At most this many child processes remove large trees at once; further
/// large trees wait for one to end.
const MAX_REMOVERS: usize = 2;
/// The entries removed between two readings of the clock in a slice.
const SWEEP_STEP: usize = 64;
/// Disk accounting examines at most this many directory entries per
/// window, across all jobs, so that scratch trees of millions of files cost
/// the daemon a bounded amount of work; walks resume where they stopped.
const DISK_WINDOW: Duration = Duration::from_millis(100);
const DISK_ENTRIES_PER_WINDOW: usize = 20_000;
/// Entries one sample may examine at most, and at least (so that every
/// job's walk advances however many jobs there are).
const DISK_ENTRIES_PER_SAMPLE: usize = 4_096;
const DISK_ENTRIES_MIN: usize = 256;

/// How long a stop may go unconfirmed before the job's cgroup is frozen to
/// finish it (something may be continuing the job's processes as fast as
/// they are stopped, cancelling each SIGSTOP before it takes effect). Well
/// above what a stop takes on a loaded machine, so that ordinary stops
/// stay plain SIGSTOPs (a frozen process shows as `D`, not `T`).
const FREEZE_AFTER: Duration = Duration::from_millis(500);
/// How long a stop may go unconfirmed, freezer or not, before the job is
/// killed so that the jobs sharing its hosts are not kept waiting forever.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a rank may take from its fork to its exec while its job runs
/// (the time it is switched out does not count) before it is killed with
/// SIGKILL and its job's launch fails. A rank takes well under a
/// millisecond; one that takes seconds was stopped by its own user
/// between its change of user and its exec; one that is not stopped then
/// waits for the machine (a CPU that real-time work holds) and gets more
/// time (`exec::MACHINE_WAITS`).
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(5);
/// How many of a job's ranks may be between fork and exec at once: the
/// next is forked when one of them reports. The daemon does not wait for
/// an exec, so without a bound a launch of thousands of ranks would put
/// them all on the CPUs at once, ahead of every other user's work (each
/// rank leads a session, and so, with `sched_autogroup`, a scheduling
/// group of its own); it also bounds the execs a keeper awaits.
pub const EXEC_WINDOW: usize = 16;
/// Without a freezer, how many times a switched-out job may be found
/// continued by someone else (and stopped again) before it is killed.
const ROGUE_CONTINUE_LIMIT: u32 = 20;
/// Without a freezer, how many stops a job may get out of otherwise (a
/// tracer resuming its ranks, CPU time used while switched out) until killed.
const ESCAPE_LIMIT: u32 = 3;
/// How often the CPU time of switched-out jobs that are not frozen is
/// looked at: a job that used CPU time while switched out got out of its
/// stop somehow.
const ESCAPE_CHECK_EVERY: Duration = Duration::from_millis(100);
/// CPU time (clock ticks) a stopped job may still be charged: the tick in
/// progress when it stopped.
const ESCAPE_TICKS: u64 = 2;

/// Why an actuator cannot hand its processes over to the next image of an
/// in-place restart; the text is what the operator who asked for the
/// restart is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoverError {
    /// This actuator holds no processes it could hand over (one that
    /// only records actions).
    Unsupported,
}

impl std::fmt::Display for HandoverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandoverError::Unsupported => {
                write!(f, "this actuator cannot hand its processes over")
            }
        }
    }
}

impl std::error::Error for HandoverError {}

/// The descriptors of a job's client: its stdin, stdout and stderr (each
/// `None` when the client had it closed), and the others it passes on.
/// They are shared (`Rc`) because jobs launched from one terminal pass the
/// same open files, which the event loop keeps only once. Each is a
/// [`UserFd`]: dropping the last handle gives it to the closer, never to
/// `close` in the loop.
#[derive(Debug)]
pub struct JobStdio {
    /// The client's standard input (rank 0 reads it).
    pub stdin: Option<Rc<UserFd>>,
    /// The client's standard output.
    pub stdout: Option<Rc<UserFd>>,
    /// The client's standard error.
    pub stderr: Option<Rc<UserFd>>,
    /// stdin is a terminal that the process reading it (rank 0 of the
    /// first stage, or of each stage with `::`) takes as its controlling
    /// terminal (`scrun -pty`).
    pub controlling_terminal: bool,
    /// The client's other descriptors, for the process that reads stdin:
    /// the number each has there (increasing, above 2), and the descriptor.
    pub inherited: Vec<(RawFd, Rc<UserFd>)>,
    /// The ranks' PMI descriptors (`scrun -mpi=`), none without PMI.
    pub pmi: PmiFds,
}

/// A job's PMI descriptors, one per rank of each stage, each connected to
/// scrun's PMI server. Rank `r` of stage `s` takes the one at
/// `s * per_stage + r` as it is spawned, and the daemon keeps no copy
/// after that fork: scrun then sees the end of a rank as the end of its
/// connection. Shared between the client's connection and the launch.
#[derive(Debug, Default, Clone)]
pub struct PmiFds {
    per_stage: usize,
    fds: Rc<std::cell::RefCell<Vec<Option<UserFd>>>>,
    /// The PMIx namespace of the job's ranks (`scrun -mpi=pmix`), if any:
    /// stage `s` is `NAME.s` (`Submit::pmix_namespace`).
    pmix: Option<Rc<str>>,
    /// The ranks reach scrun's PMI server by port (`Submit::pmi_port`).
    port: bool,
}

impl PmiFds {
    /// `per_stage` descriptors for each stage, stage by stage in rank order.
    pub fn new(per_stage: usize, fds: Vec<Option<UserFd>>) -> PmiFds {
        PmiFds {
            per_stage,
            fds: Rc::new(std::cell::RefCell::new(fds)),
            pmix: None,
            port: false,
        }
    }

    /// The same, whose ranks also get the PMIx namespace `namespace`.
    pub fn with_pmix(mut self, namespace: Option<String>) -> PmiFds {
        self.pmix = namespace.map(Rc::from);
        self
    }

    /// The same, whose ranks reach scrun's PMI server by port when `port`.
    pub fn with_port(mut self, port: bool) -> PmiFds {
        self.port = port;
        self
    }

    /// The ranks reach scrun's PMI server by port: each gets `PMI_ID`,
    /// `PMI_RANK` and `PMI_SIZE` instead of a descriptor.
    pub fn port(&self) -> bool {
        self.port
    }

    /// The PMIx namespace of the job's ranks, for the handover of a restart.
    pub fn pmix(&self) -> Option<&str> {
        self.pmix.as_deref()
    }

    /// `PMIX_NAMESPACE` of stage `stage`'s ranks, if the job has PMIx.
    pub fn pmix_namespace(&self, stage: usize) -> Option<String> {
        self.pmix.as_ref().map(|name| format!("{name}.{stage}"))
    }

    /// Ranks of each stage with a PMI descriptor (0 without PMI).
    pub fn per_stage(&self) -> usize {
        self.per_stage
    }

    /// Takes rank `rank`'s descriptor of stage `stage`, if it has one left.
    pub fn take(&self, stage: usize, rank: usize) -> Option<UserFd> {
        if rank >= self.per_stage {
            return None;
        }
        let idx = stage.checked_mul(self.per_stage)?.checked_add(rank)?;
        self.fds.borrow_mut().get_mut(idx).and_then(Option::take)
    }

    /// The numbers of the descriptors not yet taken (-1 for a taken one),
    /// for the handover of a restart.
    pub fn raw(&self) -> Vec<RawFd> {
        self.fds
            .borrow()
            .iter()
            .map(|fd| fd.as_ref().map_or(-1, AsRawFd::as_raw_fd))
            .collect()
    }
}

impl JobStdio {
    /// Lets go of the daemon's copies while the job's keeper holds its
    /// own (see [`UserFd::close_beside_held_copy`]); one still shared in
    /// the daemon, and the PMI ends (not held), go as a drop sends them.
    pub fn close_beside_keeper_copies(self) {
        let standard = [self.stdin, self.stdout, self.stderr].into_iter().flatten();
        for fd in standard.chain(self.inherited.into_iter().map(|(_, fd)| fd)) {
            if let Ok(fd) = Rc::try_unwrap(fd) {
                fd.close_beside_held_copy();
            }
        }
    }

    /// Another handle on the same descriptors.
    pub fn share(&self) -> JobStdio {
        JobStdio {
            stdin: self.stdin.clone(),
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
            controlling_terminal: self.controlling_terminal,
            inherited: self.inherited.clone(),
            pmi: self.pmi.clone(),
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
    /// How long a keeper whose scored died waits for one to take its job
    /// over before it ends the job (`--keeper-wait`).
    pub keeper_wait: Duration,
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
    /// A descriptor that is readable while some keeper has something to
    /// say; the loop then calls `poll`.
    fn exec_watch_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Whether `job`'s keeper holds its copies of the job's standard and
    /// inherited descriptors, and keeps them until it is told the job is
    /// over (`release`).
    fn keeper_holds_stdio(&self, _job: JobId) -> bool {
        false
    }
    /// What the inputs handed back so far caused is on disk: the keepers
    /// may reap the ranks whose ends they reported.
    fn recorded(&mut self) {}
    /// The actions of an event are carried out: what waited for the end
    /// of its switches may go.
    fn settled(&mut self) {}
    /// A submission arrived: a launch may follow at once.
    fn launch_coming(&mut self) {}
    /// The keepers (job, pid, start time) that said who they are since
    /// the last call, for the daemon's state on disk.
    fn fresh_keepers(&mut self) -> Vec<(u64, i32, u64)> {
        Vec::new()
    }
    /// Every keeper (job, pid, start time), for a snapshot of the state.
    fn keepers(&self) -> Vec<(u64, i32, u64)> {
        Vec::new()
    }
    /// Takes over the processes of `jobs` from their keepers (a daemon
    /// that died left them, or the image before an in-place restart); what
    /// the core must hear of them (ends it missed, jobs whose keeper is
    /// gone) goes to `out`.
    fn take_over(&mut self, jobs: &[Adopt], out: &mut Vec<Input>) {
        for adopt in jobs {
            out.push(Input::ProcessesLost {
                job: adopt.job,
                reason: "its processes could not be taken over".into(),
            });
        }
    }
}

/// A job a new daemon holds as started, whose processes (if any) its
/// keeper holds.
#[derive(Debug, Clone)]
pub struct Adopt {
    /// The job.
    pub job: JobId,
    /// Its keeper, as recorded: pid and start time.
    pub keeper: Option<(i32, u64)>,
    /// Its owner.
    pub uid: u32,
    /// Its host slots.
    pub slots: usize,
    /// The stage it is at, and how many of that stage's ranks the core
    /// has not seen end.
    pub stage: usize,
    /// See `stage`.
    pub ranks_left: u32,
    /// The core holds it as switched out (stopped or stopping).
    pub switched_out: bool,
}

/// A rank, its keeper's unreaped child.
#[derive(Debug, Clone, Copy)]
struct Child {
    job: JobId,
    stage: usize,
    rank: u32,
    slot: usize,
    /// Its start time, which tells it from a process that later has its pid.
    start: u64,
}

/// A descendant that is not a direct child, held through a pidfd.
#[derive(Debug)]
struct Descendant {
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
    /// The job's cgroup was asked to freeze: a process of it /proc shows
    /// sleeping uninterruptibly is held, and the cgroup read frozen
    /// confirms the stop.
    freezing: bool,
    /// Its keeper has not yet answered the stop (`keeper::Event::Stopped`):
    /// while its launch is in progress, only that answer confirms the
    /// stop, since only it comes after every rank scored must know of.
    pausing: bool,
}

/// How a switched-out job is held against SIGCONT from outside it.
#[derive(Debug, Default)]
struct SwitchedOutHold {
    /// The core has been told (or will be) that the job is stopped: until
    /// the next `cont`, any of its ranks seen continued was continued by
    /// someone else.
    switched_out: bool,
    /// The serial of the last `Stop` or `Continue` its keeper was told
    /// (or is about to be): its answers and reports of other serials are
    /// stale.
    switch_serial: u64,
    /// The serial of a `Stop` its keeper is still to be told: sent once
    /// the switch is over, before scored waits for the keeper's answer,
    /// or before anything else scored tells that keeper
    /// (`OsActuator::tell_stops`).
    untold_stop: Option<u64>,
    /// A continue its keeper read on its notes pipe only (see
    /// `ToKeeper::Notes`), told on the link once the switch is over.
    untold_continue: Option<u64>,
    /// Its cgroup is frozen now.
    frozen: bool,
    /// It was continued from outside once: freeze it at every stop.
    freeze_on_stop: bool,
    /// It was sent SIGKILL: never frozen again (see `OsActuator::send`).
    killed: bool,
    /// It has more than `FREEZER_SWITCH_ABOVE` processes besides its
    /// ranks, and a freezer: a switch signals its ranks alone, by pid, and
    /// its other processes wait in its `rest` cgroup, frozen once the
    /// switch is over (`OsActuator::hold_rests`). Set while it runs, for
    /// its life.
    by_freezer: bool,
    /// Its `rest` cgroup is frozen.
    rest_frozen: bool,
    /// Its last stop signalled every process group (no freezer switch, or
    /// one whose freeze was slow): its continue does too.
    signalled: bool,
    /// Continues from outside seen since it was switched out.
    rogue_continues: u32,
    /// Stops it got out of other than by SIGCONT (traced ranks, CPU time
    /// used while switched out), over its whole life.
    escapes: u32,
    /// Its processes (pid, start time) and the CPU time each had used
    /// (clock ticks) when its last stop was confirmed, while it is switched
    /// out and not frozen.
    stopped_cpu: Option<Vec<(i32, u64, u64)>>,
    /// Counts its continues: a hold is the time between two of them.
    serial: u64,
}

#[derive(Debug)]
struct Drain {
    pids: Vec<(i32, u64)>,
    since: Instant,
    /// The job has a cgroup: drained once it is empty, what it still holds
    /// killed again every `DRAIN_KILL_EVERY` (nothing is held for them).
    in_cgroup: bool,
    killed: Instant,
}

/// A process of a job's cgroup other than a rank, as last read from /proc.
#[derive(Debug, Clone, Copy)]
struct Member {
    stat: procfs::Stat,
    /// The job's hold serial (`SwitchedOutHold::serial`) when it was read
    /// while its job was held stopped: a later reading in the same hold
    /// that shows CPU time used, or a tracing stop, means it got out.
    held: Option<u64>,
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
    /// Descendants held through a pidfd: with a cgroup, those outside the
    /// ranks' groups (at most `HELD_ESCAPED`); without, every one found.
    extras: HashMap<i32, Descendant>,
    /// With a cgroup, its other processes as last read (`Member`), and the
    /// pid after which the next sample goes on reading them.
    members: HashMap<i32, Member>,
    member_cursor: i32,
    stop_wait: Option<StopWait>,
    drain: Option<Drain>,
    /// CPU time of reaped processes (with their waited-for descendants).
    reaped_cpu: Duration,
    /// When descendants were last looked for (a sample, a stop).
    discovered_at: Option<Instant>,
    /// When its `cgroup.procs` was last listed.
    listed_at: Option<Instant>,
    /// Per host slot, the sum of the peak memory of its reaped ranks.
    reaped_peak: Vec<u64>,
    /// Size of the executables of the job's programs.
    exe_bytes: u64,
    /// Executables already counted in `exe_bytes` (this stage), by device
    /// and inode.
    seen_exes: BTreeSet<(u64, u64)>,
    scratch: PathBuf,
    /// The size walk of the scratch directory, resumed at each sample.
    disk_walk: statedir::DiskWalk,
    cgroup_procs: Option<CString>,
    /// The `cgroup.procs` of its cgroup in the v1 pids hierarchy, which
    /// each rank joins too.
    pids_procs: Option<CString>,
    /// Its cgroup was found empty once its last rank was gone, with no
    /// fork refused (so a later job may take it, `Cgroups::remove_job`).
    cgroup_clean: bool,
    /// The user the job runs as.
    uid: u32,
    /// Holding it stopped while it is switched out.
    hold: SwitchedOutHold,
    /// Its processes still being created, a batch at a time.
    launch: Option<LaunchInProgress>,
    /// Its launch failed (a rank could not exec, or took too long to):
    /// reported once, and the rest is being killed.
    launch_failed: bool,
    /// It was found with more processes than a job may have (reported once).
    over_limit: bool,
    /// Its ranks between fork and exec whose report is still awaited.
    execs_in_flight: usize,
    /// Its keeper is gone, for this reason: once its processes are gone
    /// the job ends lost.
    lost: Option<String>,
}

/// The actuator of real processes: what it knows of each job's ranks and
/// descendants, and the state directory and cgroups it works in.
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
    /// Finished jobs' scratch trees, taken from their users and being
    /// removed a slice at a time (`sweep`).
    removals: std::collections::VecDeque<statedir::Removal>,
    /// Child processes removing large trees (`sweep`): pid to tree name.
    removers: HashMap<i32, String>,
    /// When switched-out jobs are next checked for CPU time used.
    escape_check_at: Instant,
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
    /// An epoll set of the keepers' links, which the event loop watches
    /// as one source (`Actuator::exec_watch_fd`).
    exec_watch: OwnedFd,
    /// The keepers of the jobs, and the zygote that makes them.
    keepers: keepers::Keepers,
    /// Where every timeout and deadline of the actuator reads the time.
    clock: Box<dyn Clock>,
    /// Jobs whose stop was confirmed and whose hold is still to be
    /// checked (`check_held`): at the next poll, after the switch's
    /// continues, so that the check does not delay them.
    held_checks: Vec<JobId>,
    /// What was found where nothing could be reported (a sample: a job
    /// over its limit of processes, or out of its stop), reported at the
    /// next poll.
    later: Vec<Input>,
    /// The CPU latency request (a switch's stops, launches: `stop::LatencyHold`).
    latency: stop::LatencyHold,
}

/// The time as the actuator reads it, so that its timeouts (a stop not
/// confirmed, leftovers that will not die, a rank that does not exec)
/// can be tested with a clock that moves only when a test moves it.
pub trait Clock {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

impl OsActuator {
    /// Prepares the actuator: the scratch root, the cgroup hierarchy, and the
    /// CPU masks of the hosts; its jobs' keepers are made by `zygote`.
    pub fn new(
        config: ActuatorConfig,
        topology: &Topology,
        zygote: Option<crate::keeper::zygote::Zygote>,
    ) -> io::Result<OsActuator> {
        OsActuator::prepare(config, topology, Box::new(SystemClock), zygote)
    }

    /// `new`, reading the time from `clock` for every timeout.
    pub fn with_clock(
        config: ActuatorConfig,
        topology: &Topology,
        clock: Box<dyn Clock>,
    ) -> io::Result<OsActuator> {
        OsActuator::prepare(config, topology, clock, None)
    }

    /// `new`, reading the time from `clock`. The cgroup hierarchy is that
    /// of the state directory, made or found: the jobs a dead daemon (or
    /// the image before an in-place restart) left in it are taken over.
    fn prepare(
        config: ActuatorConfig,
        topology: &Topology,
        clock: Box<dyn Clock>,
        zygote: Option<crate::keeper::zygote::Zygote>,
    ) -> io::Result<OsActuator> {
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
        let cgroups = if config.use_cgroups && daemon_uid == 0 {
            Cgroups::create(&config.state_dir)
        } else {
            None
        };
        match &cgroups {
            Some(cgroups) => {
                tracing::info!(path = %cgroups.base().display(), "jobs are held in cgroups")
            }
            None => {
                tracing::info!("no cgroup hierarchy in use; descendants are found through /proc")
            }
        }
        let removals = state.unfinished_removals().into();
        let keepers = keepers::Keepers::new(zygote, state.keepers_path(), config.keeper_wait);
        Ok(OsActuator {
            config,
            hosts,
            jobs: HashMap::new(),
            children: HashMap::new(),
            cgroups,
            removals,
            removers: HashMap::new(),
            state,
            state_problem: None,
            state_check_at: clock.now() + STATE_DIR_CHECK,
            escape_check_at: clock.now() + ESCAPE_CHECK_EVERY,
            disk_spent: 0,
            disk_window: clock.now(),
            clock,
            daemon_pid: std::process::id() as i32,
            daemon_uid,
            clock_ticks: sys::clock_ticks(),
            page_size: sys::page_size(),
            ignored_signals: sys::ignored_signals(),
            execs: HashMap::new(),
            exec_watch: sys::epoll_create()?,
            held_checks: Vec::new(),
            later: Vec::new(),
            keepers,
            latency: stop::LatencyHold::open(),
        })
    }

    /// What needs polling: exec reports, exec deadlines, launches being
    /// finished, the state directory, unconfirmed stops and draining
    /// jobs, switched-out jobs' CPU time, and scratch trees to remove.
    pub(super) fn poll_processes(&mut self, now: Instant, out: &mut Vec<Input>) {
        self.collect_keeper_events(out);
        self.expire_execs(now, out);
        if now >= self.state_check_at {
            let _ = self.check_state_dir(out);
        }
        self.poll_waiting_jobs(now, out);
        if now >= self.escape_check_at {
            self.escape_check_at = now + ESCAPE_CHECK_EVERY;
            self.check_switched_out(out);
        }
        self.sweep();
    }

    /// Whether jobs live in cgroups.
    pub fn has_cgroups(&self) -> bool {
        self.cgroups.is_some()
    }

    /// Number of live direct children (for tests and status).
    pub fn n_children(&self) -> usize {
        self.children.len()
    }
}

impl Actuator for OsActuator {
    fn known_jobs(&self) -> Vec<(JobId, bool)> {
        self.job_records()
    }

    fn discard_jobs(&mut self, jobs: &[(JobId, bool)], out: &mut Vec<Input>) {
        self.discard(jobs, out);
    }

    fn exec_watch_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.exec_watch.as_raw_fd())
    }

    fn keeper_holds_stdio(&self, job: JobId) -> bool {
        self.keepers
            .links
            .get(&job)
            .is_some_and(keepers::Link::holds_stdio)
    }

    fn recorded(&mut self) {
        self.acknowledge_ends();
    }

    fn settled(&mut self) {
        self.latency.end_switch();
        self.settle_launch_latency();
        self.tell_continues();
        self.tell_stops(false);
        self.hold_rests();
    }

    fn launch_coming(&mut self) {
        self.hold_latency_for_launch();
    }

    fn fresh_keepers(&mut self) -> Vec<(u64, i32, u64)> {
        std::mem::take(&mut self.keepers.fresh)
    }

    fn keepers(&self) -> Vec<(u64, i32, u64)> {
        self.keepers.identities()
    }

    fn handover(&self) -> Result<(ActuatorSnapshot, Vec<std::os::fd::RawFd>), HandoverError> {
        // The processes stay with their keepers, launches in progress
        // included: the new image takes the keepers over as a daemon that
        // takes over from a dead one does.
        Ok(self.snapshot())
    }

    fn poll(&mut self, now: Instant, out: &mut Vec<Input>) {
        self.poll_processes(now, out);
        out.append(&mut self.later);
        // Only here, at the loop's deadline: `poll_processes` also runs
        // when a stopping rank is reaped, before its switch's continues.
        self.check_held_stops(out);
    }

    fn next_deadline(&self) -> Option<Instant> {
        let busy = self.jobs.values().any(|procs| {
            procs.drain.is_some()
                || procs
                    .stop_wait
                    .as_ref()
                    .is_some_and(|wait| !wait.extras.is_empty() || !wait.children.is_empty())
        });
        if !self.held_checks.is_empty() || !self.later.is_empty() {
            return Some(self.clock.now());
        }
        let removing = self
            .removals
            .front()
            .is_some_and(|removal| !removal.is_large() || self.removers.len() < MAX_REMOVERS);
        if removing {
            return Some(self.clock.now());
        }
        let poll = busy.then(|| self.clock.now() + POLL_INTERVAL);
        let mut next = poll.map_or(self.state_check_at, |poll| poll.min(self.state_check_at));
        if self
            .jobs
            .values()
            .any(|procs| procs.hold.stopped_cpu.is_some())
        {
            next = next.min(self.escape_check_at);
        }
        if let Some(until) = self.latency.launch_deadline() {
            next = next.min(until);
        }
        // The first rank that may still fail to exec in time.
        let exec = self
            .execs
            .iter()
            .filter(|(_, pending)| {
                !pending.failed
                    && !self
                        .jobs
                        .get(&pending.job)
                        .is_some_and(|procs| procs.hold.switched_out)
            })
            .map(|(_, pending)| pending.deadline)
            .min();
        Some(exec.map_or(next, |exec| exec.min(next)))
    }

    fn pending_stops(&self) -> usize {
        self.jobs
            .values()
            .filter_map(|procs| procs.stop_wait.as_ref())
            .map(|wait| wait.children.len() + wait.extras.len())
            .sum()
    }

    fn spawn(&mut self, plan: &LaunchPlan, stdio: Option<&JobStdio>, out: &mut Vec<Input>) {
        self.begin_launch(plan, stdio, out);
    }

    fn stop(&mut self, job: JobId, out: &mut Vec<Input>) {
        self.stop_job(job, out);
    }

    fn cont(&mut self, job: JobId) {
        self.continue_job(job);
    }

    fn signal(&mut self, job: JobId, signal: i32) {
        self.signal_job(job, signal);
    }

    fn sample(&mut self, job: JobId) -> Option<Usage> {
        self.sample_job(job)
    }

    fn release(&mut self, job: JobId) {
        self.release_job(job);
    }

    fn reap(&mut self, out: &mut Vec<Input>) {
        self.reap_children(out);
    }

    fn await_stops(&mut self, max: Duration, out: &mut Vec<Input>) {
        self.wait_for_stops(max, out);
    }

    fn kill_everything(&mut self) {
        self.kill_all_jobs();
    }

    fn take_over(&mut self, jobs: &[Adopt], out: &mut Vec<Input>) {
        self.take_over_jobs(jobs, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_handover_says_why_in_the_operators_words() {
        assert_eq!(
            HandoverError::Unsupported.to_string(),
            "this actuator cannot hand its processes over"
        );
    }
}
