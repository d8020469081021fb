//! The core's state as data, for an in-place restart: every admitted job
//! (phase, queue, hosts, reservations through its placement, holds,
//! limits, accounting and residency clocks so far), the waiting
//! submissions, the queues in rotation order, the cluster limits, the time
//! slice and its cadence, the next job id and the switch statistics.
//!
//! The core's own types carry no serde derives (STYLE 1.8): these types are
//! the boundary, converted from and to the core here. What can be derived
//! again (the ledger of reservations, the live set, clients by job, kill
//! deadlines, the launch interner) is rebuilt on restore (`restore.rs`),
//! and the restored core checks its invariants before it is used.
//!
//! A job's state is written as the flags and times every build has written
//! (`phase`, `started`, `ending`, `kill_deadline`, ...) and made into the
//! job's states on the way in, so that a snapshot an older build wrote is
//! still read (`testdata/` holds one, which a test restores).
//!
//! This snapshot crosses an `execve`; the checkpoint that a panic rolls
//! back to stays in memory and is `checkpoint.rs`.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Core, Outcome};
use crate::ids::{Cred, JobId};
use crate::job::{
    EndCause, ExitStatus, Job, JobRequest, Joiner, Launch, Phase, ProcRequest, Submission,
};
use scored_proto::batch::Batch;
use scored_proto::command::{QueueMode, QueueShare};

mod input;
mod launch;
mod restore;
pub use input::InputRecord;
use launch::LaunchText;
pub use restore::RestoreError;

/// The core's state.
#[derive(Debug, Serialize, Deserialize)]
pub struct CoreSnapshot {
    timeslice_us: u64,
    /// Host names, in order: the topology must be the same after the restart.
    hosts: Vec<String>,
    limits: Vec<(Option<u64>, Option<u64>, Option<u64>)>,
    queues: Vec<QueueSnapshot>,
    /// Packed launch data, each once; jobs refer to it by index.
    launches: Vec<LaunchText>,
    jobs: Vec<JobSnapshot>,
    waiting: Vec<WaiterSnapshot>,
    ran: Vec<u64>,
    /// Jobs given hosts by the last decision that have not started yet.
    #[serde(default)]
    bound_waiting: Vec<u64>,
    next_job: u64,
    slice_anchor: u64,
    next_slice: u64,
    switches: SwitchesSnapshot,
    shutting_down: bool,
    /// The jobs that have their ids and are not admitted yet, and the ends
    /// kept for the jobs that may depend on them (`backlog.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backlog: Option<BacklogSnapshot>,
    /// Where the current slice stands, so that a restored core decides
    /// from here exactly as the core it was taken from: the jobs chosen
    /// at the slice's boundary that wait for stops to enter (they take
    /// their turn then), whether the next decision refills `ran`, entries
    /// in the slice's remnant, whether the waiting jobs of gang queues
    /// with a level were considered since the last input that could let
    /// one start, and when usage was last asked for.
    #[serde(default, skip_serializing_if = "SliceSnapshot::is_start")]
    slice: SliceSnapshot,
}

#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct SliceSnapshot {
    turn_pending: Vec<u64>,
    ran_refill: bool,
    remnant_entries: usize,
    waiting_current: bool,
    sampled_at: u64,
}

impl SliceSnapshot {
    /// As a core starts: written as nothing, as builds before it wrote it.
    fn is_start(&self) -> bool {
        *self == SliceSnapshot::default()
    }
}

/// The backlog: its entries and the ends it keeps.
#[derive(Debug, Serialize, Deserialize)]
struct BacklogSnapshot {
    entries: Vec<EntrySnapshot>,
    /// (job, its owner, how it failed; none for a success), oldest first.
    outcomes: Vec<(u64, u32, Option<String>)>,
}

/// What jobs of the backlog run, while one waits: its launch data among
/// the snapshot's, and its fields (its batch options are its entry's).
#[derive(Debug, Serialize, Deserialize)]
struct EntryRequest {
    launch: usize,
    #[serde(flatten)]
    fields: RequestFields,
}

/// One submission of the backlog (see `backlog::Entry`).
#[derive(Debug, Serialize, Deserialize)]
struct EntrySnapshot {
    first: u64,
    count: u32,
    user: String,
    cred: CredSnapshot,
    /// The client of an interactive job that waits for other jobs.
    client: Option<u64>,
    request: Option<EntryRequest>,
    batch: BatchSnapshot,
    command: String,
    name: String,
    submitted_at: u64,
    waits_for: Vec<(u64, bool)>,
    next: u32,
    skipped: Vec<u32>,
    admitted: u32,
    ended: u32,
    failure: Option<String>,
    short: Option<String>,
    since: u64,
    held: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct QueueSnapshot {
    enabled: bool,
    activated: bool,
    exclusive: bool,
    cputime_us: Option<u64>,
    residency_us: Option<u64>,
    memory_pct: Option<f64>,
    disk_pct: Option<f64>,
    group: Option<u32>,
    group_name: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    backfill: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mpl: Option<u32>,
    /// `share=job` (a gang queue shares its contested hosts between jobs,
    /// not users).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    share_jobs: bool,
    /// The half-life of the usage that orders waiting jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fairshare_us: Option<u64>,
    /// Each user's usage: (uid, host-µs, as of µs), by uid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    usage: Vec<(u32, u64, u64)>,
    order: Vec<u64>,
}

/// A submission's batch options (`scored_proto::batch`) as the options scrun
/// sent, which the validator checks again on the way in.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct BatchSnapshot {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    detach: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The jobs waited for: (id, whatever its end).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    after: Vec<(u64, bool)>,
    /// first, last, step, most at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    array: Option<(u32, u32, u32, Option<u32>)>,
}

/// A job's batch options and its submission's first job id.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SubmissionSnapshot {
    first: u64,
    #[serde(flatten)]
    batch: BatchSnapshot,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// A client's credentials, as the snapshot and the log keep them.
pub struct CredSnapshot {
    pid: i32,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum ProcsSnapshot {
    Nodes(u32),
    Grid(u32, u32),
    Hosts(u32),
}

#[derive(Debug, Serialize, Deserialize)]
enum EndSnapshot {
    Limit(String),
    Killed(String),
    ClientGone,
    Shutdown,
    LaunchFailed(String, i32),
    RankSignalled,
    Lost(String),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// An exit status, as the snapshot and the log keep it.
pub enum StatusSnapshot {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
    /// It was killed by this signal, which dumped core.
    Dumped(i32),
}

#[derive(Debug, Serialize, Deserialize)]
struct JobSnapshot {
    id: u64,
    user: String,
    owner: CredSnapshot,
    client: Option<u64>,
    pipe: bool,
    procs: ProcsSnapshot,
    launch: usize,
    queue: u32,
    queues_visited: Vec<u32>,
    cluster: u32,
    hosts: Vec<u32>,
    layout: Vec<u32>,
    limit_cputime_us: Option<u64>,
    limit_memory: Option<u64>,
    limit_disk: Option<u64>,
    /// `idle`, `running`, `stopping` or `stopped`.
    phase: String,
    operator_hold: bool,
    owner_hold: bool,
    stage: usize,
    ranks_left: u32,
    started: bool,
    ending: Option<EndSnapshot>,
    graceful_kill: bool,
    kill_deadline: Option<u64>,
    failure: Option<StatusSnapshot>,
    #[serde(default)]
    failed_rank: Option<(usize, u32)>,
    /// The run-time estimate and limit (`-time=`), in µs.
    #[serde(default)]
    estimate_us: Option<u64>,
    /// When its run time reaches the estimate, while it runs.
    #[serde(default)]
    time_deadline: Option<u64>,
    submitted_at: u64,
    admitted_at: u64,
    first_run_at: Option<u64>,
    running_since: Option<u64>,
    run_time_us: u64,
    switches: u64,
    cpu_us: u64,
    memory: Vec<u64>,
    disk: u64,
    peak_memory: Vec<u64>,
    peak_disk: u64,
    residency_base_us: u64,
    /// Its batch options; a job without a client (`-batch`) has `detach`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    submission: Option<SubmissionSnapshot>,
    /// Its client is gone with a killed daemon: until when its scrun may
    /// reattach (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reattach_until: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct WaiterSnapshot {
    client: u64,
    cred: CredSnapshot,
    user: String,
    launch: usize,
    #[serde(flatten)]
    request: RequestFields,
    submitted_at: u64,
    held: bool,
}

/// What a submission asked for besides its launch data (programs,
/// environment, directory, what it inherits), which is kept apart: packed
/// once for every job and waiter that shares it in a snapshot, and inline
/// in a logged submission ([`RequestSnapshot`]). A field added to
/// `JobRequest` is added here, and so reaches both.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RequestFields {
    pipe: bool,
    procs: ProcsSnapshot,
    priority: Option<u32>,
    wait: bool,
    memory: Option<u64>,
    disk: Option<u64>,
    /// The run-time estimate and limit (`-time=`), in µs.
    #[serde(default)]
    time_us: Option<u64>,
    /// Its batch options, if it has any (`scrun -batch`, `-name=`,
    /// `-output=`, `-after=`, `-array=`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    batch: Option<BatchSnapshot>,
}

impl RequestFields {
    fn of(request: &JobRequest) -> RequestFields {
        RequestFields {
            pipe: request.joiner == Joiner::Pipe,
            procs: procs_out(request.procs),
            priority: request.priority,
            wait: request.wait,
            memory: request.memory,
            disk: request.disk,
            time_us: request.time.map(us),
            batch: (!request.batch.is_plain()).then(|| batch_out(&request.batch)),
        }
    }
}

/// A whole submission, its launch data inline (hexadecimal, as
/// [`CoreSnapshot`] packs it): a logged `Submit` input.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestSnapshot {
    launch: LaunchText,
    #[serde(flatten)]
    fields: RequestFields,
}

impl RequestSnapshot {
    fn of(request: &JobRequest) -> RequestSnapshot {
        let launch = Launch::pack_with(
            &request.stages,
            &request.env,
            &request.cwd,
            &request.inherited,
        );
        RequestSnapshot {
            launch: LaunchText::Packed(launch),
            fields: RequestFields::of(request),
        }
    }

    fn into_request(self) -> Result<JobRequest, RestoreError> {
        let parts = restore::unpack(&self.launch.bytes()?)?;
        restore::request_in(&self.fields, &parts)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct SwitchesSnapshot {
    next_id: u64,
    open: Option<u64>,
    count: u64,
    recent_us: Vec<u64>,
    max_us: u64,
}

fn us(duration: Duration) -> u64 {
    duration.as_micros().min(u128::from(u64::MAX)) as u64
}

fn batch_out(batch: &Batch) -> BatchSnapshot {
    BatchSnapshot {
        detach: batch.detach,
        name: batch.name.as_deref().map(str::to_string),
        output: batch
            .output
            .stdout
            .as_ref()
            .map(|pattern| pattern.as_str().to_string()),
        error: batch
            .output
            .stderr
            .as_ref()
            .map(|pattern| pattern.as_str().to_string()),
        after: batch.after.iter().map(|dep| (dep.job, dep.any)).collect(),
        array: batch
            .array
            .map(|spec| (spec.first, spec.last, spec.step, spec.max)),
    }
}

fn submission_out(submission: &Submission) -> SubmissionSnapshot {
    SubmissionSnapshot {
        first: submission.first.0,
        batch: batch_out(&submission.batch),
    }
}

fn cred_out(cred: &Cred) -> CredSnapshot {
    CredSnapshot {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
        groups: cred.groups.clone(),
    }
}

fn procs_out(procs: ProcRequest) -> ProcsSnapshot {
    match procs {
        ProcRequest::Nodes(n) => ProcsSnapshot::Nodes(n),
        ProcRequest::Grid { hosts, per_host } => ProcsSnapshot::Grid(hosts, per_host),
        ProcRequest::Hosts(n) => ProcsSnapshot::Hosts(n),
    }
}

fn status_out(status: ExitStatus) -> StatusSnapshot {
    match status {
        ExitStatus::Code(code) => StatusSnapshot::Code(code),
        ExitStatus::Signal(signal) => StatusSnapshot::Signal(signal),
        ExitStatus::Dumped(signal) => StatusSnapshot::Dumped(signal),
    }
}

/// Packed launch data, each distinct one once (launches are equal when
/// their bytes are), shared with the core rather than copied.
#[derive(Default)]
struct Launches {
    texts: Vec<LaunchText>,
    index: HashMap<Launch, usize>,
}

impl Launches {
    fn add(&mut self, launch: &Launch) -> usize {
        // The launch's own packed bytes: `unpack` reads them back, and
        // `Launch::pack_with` of the parts gives the same bytes again.
        if let Some(idx) = self.index.get(launch) {
            return *idx;
        }
        let idx = self.texts.len();
        self.texts.push(LaunchText::Packed(launch.clone()));
        self.index.insert(launch.clone(), idx);
        idx
    }
}

/// A job as the snapshot writes it.
fn job_out(job: &Job, detached: &HashMap<JobId, u64>, launches: &mut Launches) -> JobSnapshot {
    JobSnapshot {
        id: job.id.0,
        user: job.user.to_string(),
        owner: cred_out(&job.owner),
        client: job.client().map(|client| client.0),
        pipe: job.spec.joiner == Joiner::Pipe,
        procs: procs_out(job.spec.procs),
        launch: launches.add(&job.spec.launch),
        queue: job.queue,
        queues_visited: job.queues_visited.to_vec(),
        cluster: job.cluster.0,
        hosts: job.hosts.iter().map(|host| host.0).collect(),
        layout: job.layout.to_vec(),
        limit_cputime_us: job.limits.cputime.map(us),
        limit_memory: job.limits.memory,
        limit_disk: job.limits.disk,
        phase: match job.phase() {
            Phase::Idle => "idle",
            Phase::Running => "running",
            Phase::Stopping => "stopping",
            Phase::Stopped => "stopped",
        }
        .to_string(),
        operator_hold: job.operator_hold,
        owner_hold: job.owner_hold,
        stage: job.stage(),
        ranks_left: job.ranks_left(),
        started: job.started(),
        ending: job.ending().map(|cause| match cause {
            EndCause::Limit(why) => EndSnapshot::Limit(why.clone()),
            EndCause::Killed(by) => EndSnapshot::Killed(by.clone()),
            EndCause::ClientGone => EndSnapshot::ClientGone,
            EndCause::Shutdown => EndSnapshot::Shutdown,
            EndCause::LaunchFailed { message, status } => {
                EndSnapshot::LaunchFailed(message.clone(), *status)
            }
            EndCause::RankSignalled => EndSnapshot::RankSignalled,
            EndCause::Lost(what) => EndSnapshot::Lost(what.clone()),
        }),
        graceful_kill: job.graceful_kill(),
        kill_deadline: job.kill_deadline().map(|tick| tick.0),
        failure: job.failure().map(status_out),
        failed_rank: job
            .failed_rank()
            .map(|(stage, rank)| (stage as usize, rank)),
        estimate_us: job.estimate.map(us),
        time_deadline: job.time_deadline().map(|tick| tick.0),
        submitted_at: job.submitted_at.0,
        admitted_at: job.admitted_at.0,
        first_run_at: job.first_run_at().map(|tick| tick.0),
        running_since: job.running_since().map(|tick| tick.0),
        run_time_us: us(job.run_time),
        switches: job.switches,
        cpu_us: us(job.usage.cpu),
        memory: job.usage.memory.to_vec(),
        disk: job.usage.disk,
        peak_memory: job.peak_memory.to_vec(),
        peak_disk: job.peak_disk,
        residency_base_us: us(job.residency_base),
        submission: job.submission.as_deref().map(submission_out),
        reattach_until: detached.get(&job.id).copied(),
    }
}

impl Core {
    /// The state to hand to the next process.
    pub fn snapshot(&self) -> CoreSnapshot {
        let mut launches = Launches::default();
        let sched = self.sched.snapshot();
        let detached: HashMap<JobId, u64> = (&self.logged.detached)
            .into_iter()
            .map(|(until, job)| (*job, until.0))
            .collect();
        let jobs = self
            .logged
            .jobs
            .values()
            .map(|job| job_out(job, &detached, &mut launches))
            .collect();
        let waiting = self
            .logged
            .waiting
            .iter()
            .map(|waiter| {
                let request = &waiter.request;
                let launch = Launch::pack_with(
                    &request.stages,
                    &request.env,
                    &request.cwd,
                    &request.inherited,
                );
                WaiterSnapshot {
                    // Only clients wait here (see `Waiter`); a batch job
                    // waits in the backlog.
                    client: waiter.client().map_or(0, |client| client.0),
                    cred: cred_out(&waiter.cred),
                    user: waiter.user.to_string(),
                    launch: launches.add(&launch),
                    request: RequestFields::of(request),
                    submitted_at: waiter.submitted_at.0,
                    held: waiter.held,
                }
            })
            .collect();
        let backlog = self.backlog_snapshot(&mut launches);
        CoreSnapshot {
            timeslice_us: us(self.logged.config.timeslice),
            hosts: self
                .logged
                .topology
                .hosts
                .iter()
                .map(|host| host.name.clone())
                .collect(),
            limits: self
                .limits
                .iter()
                .map(|limits| (limits.memory, limits.disk, limits.jobs))
                .collect(),
            queues: self
                .logged
                .queues
                .iter()
                .map(|queue| QueueSnapshot {
                    enabled: queue.enabled,
                    activated: queue.activated,
                    exclusive: queue.mode == QueueMode::Exclusive,
                    cputime_us: queue.cputime.map(us),
                    residency_us: queue.residency.map(us),
                    memory_pct: queue.memory_pct,
                    disk_pct: queue.disk_pct,
                    group: queue.group,
                    group_name: queue.group_name.clone(),
                    backfill: queue.backfill,
                    mpl: queue.mpl,
                    share_jobs: queue.share == QueueShare::Job,
                    fairshare_us: queue.fairshare.map(us),
                    usage: queue.usage.entries().to_vec(),
                    order: queue.order().map(|job| job.0).collect(),
                })
                .collect(),
            launches: launches.texts,
            jobs,
            waiting,
            // In order, so that the same state is written the same way.
            ran: sched.ran.iter().map(|job| job.0).collect(),
            bound_waiting: sched.bound_waiting.iter().map(|job| job.0).collect(),
            next_job: self.next_job,
            slice_anchor: sched.slice_anchor.0,
            next_slice: sched.next_slice.0,
            switches: SwitchesSnapshot {
                next_id: self.switches.next_id,
                open: self.switches.open,
                count: self.switches.count,
                recent_us: self.switches.recent.iter().map(|d| us(*d)).collect(),
                max_us: us(self.switches.max),
            },
            shutting_down: self.shutting_down,
            backlog,
            slice: SliceSnapshot {
                turn_pending: sched.turn_pending.iter().map(|job| job.0).collect(),
                ran_refill: sched.ran_refill,
                remnant_entries: sched.remnant_entries,
                waiting_current: sched.waiting_current,
                sampled_at: self.sampled_at.0,
            },
        }
    }

    /// The backlog as data, its requests' launch data among the others.
    fn backlog_snapshot(&self, launches: &mut Launches) -> Option<BacklogSnapshot> {
        let backlog = &self.logged.backlog;
        if backlog.entries.is_empty() && self.logged.ends.outcomes().next().is_none() {
            return None;
        }
        let entries = backlog
            .entries
            .values()
            .map(|entry| EntrySnapshot {
                first: entry.submission.first.0,
                count: entry.count,
                user: entry.user.to_string(),
                cred: cred_out(&entry.cred),
                client: entry.link.client().map(|client| client.0),
                request: entry.request.as_deref().map(|request| EntryRequest {
                    launch: launches.add(&Launch::pack_with(
                        &request.stages,
                        &request.env,
                        &request.cwd,
                        &request.inherited,
                    )),
                    fields: RequestFields {
                        batch: None,
                        ..RequestFields::of(request)
                    },
                }),
                batch: batch_out(&entry.submission.batch),
                command: entry.command.to_string(),
                name: entry.name.to_string(),
                submitted_at: entry.submitted_at.0,
                waits_for: entry
                    .waits_for
                    .iter()
                    .map(|dep| (dep.job, dep.any))
                    .collect(),
                next: entry.next,
                skipped: entry.skipped.iter().copied().collect(),
                admitted: entry.admitted,
                ended: entry.ended,
                failure: entry.failure.clone(),
                short: entry.short.clone(),
                since: entry.since.0,
                held: entry.held,
            })
            .collect();
        let outcomes = self
            .logged
            .ends
            .outcomes()
            .map(|(job, owner, outcome)| {
                (
                    job.0,
                    *owner,
                    match outcome {
                        Outcome::Success => None,
                        Outcome::Failure(how) => Some(how.clone()),
                    },
                )
            })
            .collect();
        Some(BacklogSnapshot { entries, outcomes })
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::restore::{unhex, unpack, LaunchParts};
    use super::*;
    use scored_proto::inherit::Inherited;

    /// The launch as the snapshot writes it and reads it back: its text
    /// is the bytes in lowercase hexadecimal.
    fn through_text(text: &LaunchText) -> LaunchParts {
        let LaunchText::Packed(launch) = text else {
            panic!("a launch taken from the core holds it");
        };
        let written = serde_json::to_string(text).expect("serialize");
        let digits: String = launch
            .as_bytes()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        assert_eq!(written, format!("\"{digits}\""));
        let read: LaunchText = serde_json::from_str(&written).expect("deserialize");
        assert!(matches!(&read, LaunchText::Text(text) if *text == digits));
        assert_eq!(serde_json::to_string(&read).expect("serialize"), written);
        assert_eq!(
            read.bytes().expect("hexadecimal").as_ref(),
            launch.as_bytes()
        );
        unpack(&read.bytes().expect("hexadecimal")).expect("unpack")
    }

    #[test]
    fn launch_data_round_trips_through_hex() {
        let stages = vec![vec![
            OsString::from("sh"),
            OsString::from("-c"),
            OsString::from("x\u{e9}"),
        ]];
        let env = vec![(OsString::from("A"), OsString::from("1"))];
        let cwd = OsString::from("/tmp");
        let launch = Launch::pack(&stages, &env, &cwd);
        let mut launches = Launches::default();
        let idx = launches.add(&launch);
        assert_eq!(launches.add(&launch.clone()), idx);
        let (s, e, c, i) = through_text(&launches.texts[idx]);
        assert_eq!(
            (s, e, c, i),
            (
                stages.clone(),
                env.clone(),
                cwd.clone(),
                Inherited::default()
            )
        );
        // What the processes inherit from the caller survives too.
        let inherited = Inherited {
            ignored: 1 << 1,
            rlimits: vec![(9, 64, 1024), (15, 8 << 20, u64::MAX)],
            umask: Some(0o077),
            nice: Some(7),
            ioprio: None,
        };
        let launch = Launch::pack_with(&stages, &env, &cwd, &inherited);
        let idx = launches.add(&launch);
        let (s, e, c, i) = through_text(&launches.texts[idx]);
        assert_eq!((s, e, c, i), (stages, env.clone(), cwd.clone(), inherited));
        // Longer than the pieces the text is written in, by an odd count.
        let long = vec![vec![OsString::from("\u{ff}x".repeat(3001))]];
        let launch = Launch::pack(&long, &env, &cwd);
        let idx = launches.add(&launch);
        assert_eq!(through_text(&launches.texts[idx]).0, long);
        assert!(unpack(&[1, 0, 0]).is_err());
        assert!(unhex("zz").is_err());
    }
}
