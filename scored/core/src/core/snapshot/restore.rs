//! Restoring the core from a [`CoreSnapshot`](super::CoreSnapshot): every
//! field read back and checked (hosts, clusters, queues, ids, launch data),
//! what can be derived rebuilt, and the restored core's invariants checked
//! before it is used. Every error names what does not fit.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ffi::OsString;
use std::fmt;
use std::os::unix::ffi::OsStringExt;
use std::rc::Rc;
use std::time::Duration;

use super::{
    BacklogSnapshot, BatchSnapshot, CredSnapshot, EndSnapshot, JobSnapshot, ProcsSnapshot,
    QueueSnapshot, RequestFields, StatusSnapshot, SubmissionSnapshot, WaiterSnapshot,
};
use crate::admission::{ClusterLimits, Ledger, Placement};
use crate::cluster::Topology;
use crate::core::backlog::{Backlog, Ends, Entry};
use crate::core::Outcome;
use crate::core::{usage_limited, Core, CoreConfig, CoreSnapshot, Switches, Waiter};
use crate::fairshare::DecayedUsage;
use crate::ids::{ClientToken, ClusterId, Cred, HostId, JobId, Tick};
use crate::job::{
    EndCause, ExitStatus, Failure, Job, JobLimits, JobRequest, JobSpec, Joiner, Killing, Life,
    Link, Phase, ProcRequest, Procs, Started, Stretch, Submission, Usage,
};
use crate::queue::Queue;
use crate::sched::{Scheduler, SchedulerState};
use scored_proto::batch::Dependency;
use scored_proto::batch::{self, Batch, BatchOptions};
use scored_proto::command::{QueueMode, QueueShare};
use scored_proto::inherit::Inherited;

/// Why a snapshot cannot be restored: what does not fit, and where. The
/// texts are the daemon's messages (`scored: cannot take over: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreError {
    /// The hosts database gives other hosts than the state has.
    HostsChanged {
        /// The state's hosts, in order.
        state: Vec<String>,
        /// The hosts database's, in order.
        now: Vec<String>,
    },
    /// The hosts database gives another number of clusters.
    ClustersChanged {
        /// How many the state has.
        state: usize,
        /// How many the hosts database gives.
        now: usize,
    },
    /// The state has no queue at all.
    NoQueue,
    /// The packed launch data cannot be read; the text says how.
    Launch(&'static str),
    /// A job refers to launch data the state does not have.
    LaunchMissing(usize),
    /// A job names a host, cluster or queue that does not exist, or its
    /// hosts and layout disagree.
    JobDoesNotFit(JobId),
    /// A job's phase is none of `idle`, `running`, `stopping`, `stopped`.
    UnknownPhase {
        /// The job whose phase is unknown.
        job: JobId,
        /// The phase it has.
        phase: String,
    },
    /// A job's state flags and times are a combination no build writes.
    JobState {
        /// The job whose state cannot be made.
        job: JobId,
        /// What does not fit (`runs but never started`).
        what: &'static str,
    },
    /// A job appears twice, or has an id not below the next one.
    DuplicateJob(JobId),
    /// A queue's usage by user is not by increasing uid.
    BadUsage {
        /// The queue.
        queue: u32,
    },
    /// A queue holds a job that the state does not have.
    QueueHoldsUnknownJob {
        /// The queue that lists it.
        queue: u32,
        /// The id the state has no job of.
        job: u64,
    },
    /// A queue holds a job that belongs to another queue.
    JobInOtherQueue {
        /// The job listed in the wrong queue.
        job: u64,
        /// The queue that holds it.
        queue: u32,
        /// The queue it belongs to.
        belongs: u32,
    },
    /// Two jobs run on one host.
    HostTaken {
        /// The job that has it first.
        first: JobId,
        /// The job that has it too.
        second: JobId,
        /// The host both hold.
        host: HostId,
    },
    /// A job is not in its queue exactly once.
    NotInQueueOnce {
        /// The job listed twice, or not at all.
        job: JobId,
        /// The queue it belongs to.
        queue: u32,
    },
    /// The queues hold other jobs than the state's.
    QueuesDisagree,
    /// A logged input does not read back; the text says what.
    Input(&'static str),
    /// The reservations of the state's jobs are not the ledger's.
    ReservationsDisagree,
    /// A submission of the backlog does not fit the jobs or the ids.
    Backlog {
        /// Its first job.
        first: JobId,
        /// What does not fit.
        what: &'static str,
    },
    /// A job's batch options break a rule of the submission validator.
    Batch {
        /// The job.
        job: JobId,
        /// The rule, naming the option.
        error: batch::BatchError,
    },
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreError::HostsChanged { state, now } => write!(
                f,
                "the hosts changed: the state has {} host(s) ({}), the hosts database now gives {} ({})",
                state.len(),
                state.join(","),
                now.len(),
                now.join(",")
            ),
            RestoreError::ClustersChanged { state, now } => write!(
                f,
                "the clusters changed: the state has {state}, the hosts database now gives {now}"
            ),
            RestoreError::NoQueue => f.write_str("the state has no queue"),
            RestoreError::Launch(what) => f.write_str(what),
            RestoreError::LaunchMissing(idx) => write!(f, "launch data {idx} is missing"),
            RestoreError::JobDoesNotFit(id) => {
                write!(f, "job {id} does not fit the hosts, clusters or queues")
            }
            RestoreError::UnknownPhase { job, phase } => {
                write!(f, "job {job} has an unknown phase '{phase}'")
            }
            RestoreError::JobState { job, what } => write!(f, "job {job} {what}"),
            RestoreError::DuplicateJob(id) => {
                write!(f, "job {id} appears twice or after the next id")
            }
            RestoreError::BadUsage { queue } => write!(
                f,
                "queue {queue}'s usage by user is not by increasing uid"
            ),
            RestoreError::QueueHoldsUnknownJob { queue, job } => write!(
                f,
                "queue {queue} holds job {job}, which is not in the state"
            ),
            RestoreError::JobInOtherQueue {
                job,
                queue,
                belongs,
            } => write!(
                f,
                "job {job} is in queue {queue} but belongs to queue {belongs}"
            ),
            RestoreError::HostTaken {
                first,
                second,
                host,
            } => write!(f, "jobs {first} and {second} both run on host {host}"),
            RestoreError::NotInQueueOnce { job, queue } => {
                write!(f, "job {job} is not in queue {queue} once")
            }
            RestoreError::Input(what) => write!(f, "a logged input: {what}"),
            RestoreError::QueuesDisagree => {
                f.write_str("the queues do not hold exactly the unfinished jobs")
            }
            RestoreError::ReservationsDisagree => {
                f.write_str("the reservations do not match the jobs")
            }
            RestoreError::Batch { job, error } => write!(f, "job {job}: {error}"),
            RestoreError::Backlog { first, what } => {
                write!(f, "the submission of job {first} {what}")
            }
        }
    }
}

impl std::error::Error for RestoreError {}

pub(super) fn from_us(micros: u64) -> Duration {
    Duration::from_micros(micros)
}

pub(super) fn unhex(text: &str) -> Result<Vec<u8>, RestoreError> {
    let digit = |byte: u8| -> Result<u8, RestoreError> {
        match byte {
            b'0'..=b'9' => Ok(byte - b'0'),
            b'a'..=b'f' => Ok(byte - b'a' + 10),
            _ => Err(RestoreError::Launch("launch data is not hexadecimal")),
        }
    };
    let bytes = text.as_bytes();
    if bytes.len() % 2 != 0 {
        return Err(RestoreError::Launch("launch data has an odd length"));
    }
    bytes
        .chunks(2)
        .map(|pair| Ok(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// Batch options read back through the validator they passed before.
pub(super) fn batch_in(job: JobId, batch: BatchSnapshot) -> Result<Batch, RestoreError> {
    let (after, afterany) = batch.after.iter().partition::<Vec<_>, _>(|(_, any)| !any);
    let options = BatchOptions {
        detach: batch.detach,
        name: batch.name,
        output: batch.output,
        error: batch.error,
        after: after.into_iter().map(|(id, _)| id).collect(),
        afterany: afterany.into_iter().map(|(id, _)| id).collect(),
        array: batch
            .array
            .map(|(first, last, step, max)| batch::ArraySpec {
                first,
                last,
                step,
                max,
            }),
    };
    batch::check(&options).map_err(|error| RestoreError::Batch { job, error })
}

/// A job's submission, shared with the other elements of its array.
pub(super) fn submission_in(
    job: JobId,
    snapshot: SubmissionSnapshot,
    shared: &mut HashMap<u64, Rc<Submission>>,
) -> Result<Rc<Submission>, RestoreError> {
    if let Some(known) = shared.get(&snapshot.first) {
        return Ok(Rc::clone(known));
    }
    let submission = Rc::new(Submission {
        batch: batch_in(job, snapshot.batch)?,
        first: JobId(snapshot.first),
    });
    shared.insert(snapshot.first, Rc::clone(&submission));
    Ok(submission)
}

pub(super) fn cred_in(cred: CredSnapshot) -> Cred {
    Cred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
        groups: cred.groups,
    }
}

pub(super) fn procs_in(procs: ProcsSnapshot) -> ProcRequest {
    match procs {
        ProcsSnapshot::Nodes(n) => ProcRequest::Nodes(n),
        ProcsSnapshot::Grid(hosts, per_host) => ProcRequest::Grid { hosts, per_host },
        ProcsSnapshot::Hosts(n) => ProcRequest::Hosts(n),
    }
}

pub(super) fn status_in(status: &StatusSnapshot) -> ExitStatus {
    match *status {
        StatusSnapshot::Code(code) => ExitStatus::Code(code),
        StatusSnapshot::Signal(signal) => ExitStatus::Signal(signal),
        StatusSnapshot::Dumped(signal) => ExitStatus::Dumped(signal),
    }
}

/// A job record's state as the snapshot keeps it (flags and times side by
/// side, as every build has written them) made into the job's [`Life`] and
/// [`Killing`]. A combination that no build writes (a running job with no
/// start time, say) is refused, naming the job and what does not fit.
pub(super) fn job_state_in(
    id: JobId,
    record: &JobSnapshot,
    phase: Phase,
) -> Result<(Life, Option<Box<Killing>>), RestoreError> {
    let refuse = |what: &'static str| Err(RestoreError::JobState { job: id, what });
    let life = match (record.started, record.first_run_at) {
        (false, None) => {
            if phase != Phase::Idle {
                return refuse("has processes but never started");
            }
            if record.failure.is_some() || record.stage != 0 {
                return refuse("has a failed rank or a later stage but never started");
            }
            if record.running_since.is_some() || record.time_deadline.is_some() {
                return refuse("runs but never started");
            }
            Life::Queued
        }
        (true, Some(first_run_at)) => {
            let procs = match (phase, record.running_since) {
                (Phase::Running, Some(since)) => Procs::Running(Stretch {
                    since: Tick(since),
                    time_deadline: record.time_deadline.map(Tick),
                }),
                (Phase::Running, None) => return refuse("runs but has no start of its stretch"),
                (_, Some(_)) => return refuse("has a running stretch but does not run"),
                (Phase::Idle, None) => Procs::Idle,
                (Phase::Stopping, None) => Procs::Stopping,
                (Phase::Stopped, None) => Procs::Stopped,
            };
            if phase != Phase::Running && record.time_deadline.is_some() {
                return refuse("has a time limit deadline but does not run");
            }
            let Ok(stage) = u32::try_from(record.stage) else {
                return refuse("has a stage out of range");
            };
            let failure = record.failure.as_ref().map(|status| Failure {
                status: status_in(status),
                rank: record
                    .failed_rank
                    .map(|(stage, rank)| (u32::try_from(stage).unwrap_or(u32::MAX), rank)),
            });
            Life::Started(Started::restored(
                Tick(first_run_at),
                stage,
                record.ranks_left,
                procs,
                failure,
            ))
        }
        (true, None) => return refuse("started but has no first run time"),
        (false, Some(_)) => return refuse("has a first run time but never started"),
    };
    if record.graceful_kill != record.kill_deadline.is_some() {
        return refuse("has a graceful kill without a deadline, or a deadline without one");
    }
    let ending = match &record.ending {
        None if record.graceful_kill => return refuse("has a graceful kill but is not ending"),
        None => None,
        Some(cause) => Some(Box::new(Killing {
            cause: match cause {
                EndSnapshot::Limit(why) => EndCause::Limit(why.clone()),
                EndSnapshot::Killed(by) => EndCause::Killed(by.clone()),
                EndSnapshot::ClientGone => EndCause::ClientGone,
                EndSnapshot::Shutdown => EndCause::Shutdown,
                EndSnapshot::LaunchFailed(message, status) => EndCause::LaunchFailed {
                    message: message.clone(),
                    status: *status,
                },
                EndSnapshot::RankSignalled => EndCause::RankSignalled,
                EndSnapshot::Lost(what) => EndCause::Lost(what.clone()),
            },
            kill_deadline: record.kill_deadline.map(Tick),
        })),
    };
    Ok((life, ending))
}

/// The parts of packed launch data (stages, environment, working directory,
/// and what the processes inherit from the caller).
pub(super) type LaunchParts = (
    Vec<Vec<OsString>>,
    Vec<(OsString, OsString)>,
    OsString,
    Inherited,
);

/// A submission from the fields a snapshot or a log keeps of it and its
/// unpacked launch data.
pub(super) fn request_in(
    fields: &RequestFields,
    launch: &LaunchParts,
) -> Result<JobRequest, RestoreError> {
    let (stages, env, cwd, inherited) = launch;
    let batch = match &fields.batch {
        Some(batch) => batch_in(JobId(0), batch.clone())?,
        None => Batch::default(),
    };
    Ok(JobRequest {
        stages: stages.clone(),
        joiner: if fields.pipe {
            Joiner::Pipe
        } else {
            Joiner::Sequence
        },
        procs: procs_in(fields.procs),
        priority: fields.priority,
        wait: fields.wait,
        memory: fields.memory,
        disk: fields.disk,
        time: fields.time_us.map(from_us),
        env: env.clone(),
        cwd: cwd.clone(),
        inherited: inherited.clone(),
        batch,
    })
}

pub(super) fn unpack(bytes: &[u8]) -> Result<LaunchParts, RestoreError> {
    let mut reader = Reader { bytes, at: 0 };
    let n_stages = reader.count()?;
    let mut stages = Vec::new();
    for _ in 0..n_stages {
        let n_args = reader.count()?;
        let mut argv = Vec::new();
        for _ in 0..n_args {
            argv.push(reader.os()?);
        }
        stages.push(argv);
    }
    let n_vars = reader.count()?;
    let mut env = Vec::new();
    for _ in 0..n_vars {
        env.push((reader.os()?, reader.os()?));
    }
    let cwd = reader.os()?;
    let mut inherited = Inherited::default();
    if reader.at != bytes.len() {
        inherited.ignored = reader.u64()?;
        inherited.umask = match reader.count()? as u32 {
            u32::MAX => None,
            mask => Some(mask),
        };
        for _ in 0..reader.count()? {
            let resource = u8::try_from(reader.count()?)
                .map_err(|_| RestoreError::Launch("launch data names an unknown limit"))?;
            inherited
                .rlimits
                .push((resource, reader.u64()?, reader.u64()?));
        }
        if reader.at != bytes.len() {
            let present = reader.count()?;
            let (nice, ioprio) = (reader.count()? as u32 as i32, reader.count()? as u32);
            inherited.nice = (present & 1 != 0).then_some(nice);
            inherited.ioprio = (present & 2 != 0).then_some(ioprio);
        }
    }
    if reader.at != bytes.len() {
        return Err(RestoreError::Launch("launch data has trailing bytes"));
    }
    Ok((stages, env, cwd, inherited))
}

pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn count(&mut self) -> Result<usize, RestoreError> {
        let raw = self
            .bytes
            .get(self.at..self.at + 4)
            .ok_or(RestoreError::Launch("launch data is truncated"))?;
        self.at += 4;
        Ok(u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize)
    }

    fn u64(&mut self) -> Result<u64, RestoreError> {
        let raw = self
            .bytes
            .get(self.at..self.at + 8)
            .ok_or(RestoreError::Launch("launch data is truncated"))?;
        self.at += 8;
        let mut le = [0u8; 8];
        le.copy_from_slice(raw);
        Ok(u64::from_le_bytes(le))
    }

    fn os(&mut self) -> Result<OsString, RestoreError> {
        let len = self.count()?;
        let value = self
            .bytes
            .get(self.at..self.at + len)
            .ok_or(RestoreError::Launch("launch data is truncated"))?;
        self.at += len;
        Ok(OsString::from_vec(value.to_vec()))
    }
}

/// The backlog of a snapshot, each entry checked against the jobs and ids
/// of the restored core.
fn restore_backlog(
    core: &Core,
    snapshot: BacklogSnapshot,
    launches: &[LaunchParts],
    submissions: &mut HashMap<u64, Rc<Submission>>,
) -> Result<(Backlog, Ends), RestoreError> {
    let mut admitted: HashMap<u64, u32> = HashMap::new();
    for job in core.logged.jobs.values() {
        if let Some(submission) = &job.submission {
            *admitted.entry(submission.first.0).or_default() += 1;
        }
    }
    let mut entries = BTreeMap::new();
    for record in snapshot.entries {
        let first = JobId(record.first);
        let refuse = |what| Err(RestoreError::Backlog { first, what });
        let end = record.first.checked_add(u64::from(record.count));
        if record.count == 0 || end.is_none_or(|end| end > core.next_job) {
            return refuse("has ids the state never handed out");
        }
        if record.next > record.count
            || record.ended > record.count
            || admitted.get(&record.first).copied().unwrap_or(0) != record.admitted
        {
            return refuse("does not match its admitted jobs");
        }
        let submission = submission_in(
            first,
            SubmissionSnapshot {
                first: record.first,
                batch: record.batch,
            },
            submissions,
        )?;
        let request = match record.request {
            Some(request) => {
                let launch = launches
                    .get(request.launch)
                    .ok_or(RestoreError::LaunchMissing(request.launch))?;
                let mut request = request_in(&request.fields, launch)?;
                // An entry's batch options are its submission's.
                request.batch = submission.batch.clone();
                Some(Rc::new(request))
            }
            None => None,
        };
        let entry = Entry {
            cred: cred_in(record.cred),
            user: Rc::from(record.user.as_str()),
            link: match record.client {
                Some(client) => Link::Client(ClientToken(client)),
                None => Link::Batch,
            },
            request,
            submission,
            command: Rc::from(record.command.as_str()),
            name: Rc::from(record.name.as_str()),
            count: record.count,
            submitted_at: Tick(record.submitted_at),
            waits_for: record
                .waits_for
                .into_iter()
                .map(|(job, any)| Dependency { job, any })
                .collect(),
            next: record.next,
            skipped: record.skipped.into_iter().collect(),
            admitted: record.admitted,
            ended: record.ended,
            failure: record.failure,
            short: record.short,
            since: Tick(record.since),
            held: record.held,
        };
        if entry.request.is_none() && entry.n_waiting() > 0 {
            return refuse("has jobs to admit but no request");
        }
        entries.insert(first, entry);
    }
    let outcomes = snapshot
        .outcomes
        .into_iter()
        .map(|(job, owner, failure)| {
            (
                JobId(job),
                owner,
                failure.map_or(Outcome::Success, Outcome::Failure),
            )
        })
        .collect();
    Ok((Backlog::restored(entries), Ends::restored(outcomes)))
}

impl Core {
    /// A core with `snapshot`'s state, on `topology` (which must have the
    /// same hosts), with `config`'s settings but the snapshot's time slice.
    /// Every error names what does not fit; nothing is half restored.
    pub fn restore(
        mut config: CoreConfig,
        topology: Topology,
        snapshot: CoreSnapshot,
    ) -> Result<Core, RestoreError> {
        let names: Vec<&str> = topology.hosts.iter().map(|h| h.name.as_str()).collect();
        if names
            != snapshot
                .hosts
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
        {
            return Err(RestoreError::HostsChanged {
                state: snapshot.hosts,
                now: names.iter().map(|name| name.to_string()).collect(),
            });
        }
        if snapshot.limits.len() != topology.clusters.len() {
            return Err(RestoreError::ClustersChanged {
                state: snapshot.limits.len(),
                now: topology.clusters.len(),
            });
        }
        if snapshot.queues.is_empty() {
            return Err(RestoreError::NoQueue);
        }
        config.timeslice = from_us(snapshot.timeslice_us.max(1000));
        let memory_limits = snapshot.limits.iter().map(|limits| limits.0).collect();
        let mut core = Core::new(config, topology, memory_limits);
        core.limits = snapshot
            .limits
            .iter()
            .map(|&(memory, disk, jobs)| ClusterLimits { memory, disk, jobs })
            .collect();
        let launches: Vec<LaunchParts> = snapshot
            .launches
            .iter()
            .map(|text| unpack(&text.bytes()?))
            .collect::<Result<_, RestoreError>>()?;
        let mut started: BTreeSet<u64> = BTreeSet::new();
        let mut submissions: HashMap<u64, Rc<Submission>> = HashMap::new();
        for record in snapshot.jobs {
            if record.started {
                started.insert(record.id);
            }
            let reattach_until = record.reattach_until;
            let job =
                core.restore_job(record, &launches, snapshot.queues.len(), &mut submissions)?;
            let id = job.id;
            if let Some(until) = reattach_until {
                core.logged.detached.insert((Tick(until), id));
            }
            if core.logged.jobs.contains_key(&id) || id.0 >= snapshot.next_job {
                return Err(RestoreError::DuplicateJob(id));
            }
            core.admit_restored(job);
        }
        core.restore_queues(snapshot.queues, &started)?;
        for record in snapshot.waiting {
            let waiter = restore_waiter(record, &launches)?;
            core.logged.waiting.push_back(Rc::new(waiter));
        }
        core.next_job = snapshot.next_job;
        core.switches = Switches {
            next_id: snapshot.switches.next_id,
            open: snapshot.switches.open,
            count: snapshot.switches.count,
            recent: std::rc::Rc::new(
                snapshot
                    .switches
                    .recent_us
                    .into_iter()
                    .map(from_us)
                    .collect::<VecDeque<_>>(),
            ),
            max: from_us(snapshot.switches.max_us),
        };
        core.shutting_down = snapshot.shutting_down;
        if let Some(backlog) = snapshot.backlog {
            let (backlog, ends) = restore_backlog(&core, backlog, &launches, &mut submissions)?;
            core.logged.backlog = backlog;
            core.logged.ends = ends;
        }
        let jobs = &core.logged.jobs;
        core.sampled_at = Tick(snapshot.slice.sampled_at);
        let slice = snapshot.slice;
        core.sched = Scheduler::restored(
            core.logged.topology.hosts.len(),
            SchedulerState {
                slice_anchor: Tick(snapshot.slice_anchor),
                next_slice: Tick(snapshot.next_slice),
                ran: snapshot.ran.into_iter().map(JobId).collect(),
                bound_waiting: snapshot.bound_waiting.into_iter().map(JobId).collect(),
                turn_pending: slice.turn_pending.into_iter().map(JobId).collect(),
                ran_refill: slice.ran_refill,
                remnant_entries: slice.remnant_entries,
                waiting_current: slice.waiting_current,
            },
            core.logged
                .live
                .iter()
                .filter_map(|job| jobs.get(&job))
                .map(|record| (&record.hosts[..], record.phase() == Phase::Stopping)),
        );
        core.rebuild_crossings();
        core.check_restored()?;
        Ok(core)
    }

    /// A job of the snapshot, checked against the topology and the
    /// `n_queues` queues.
    fn restore_job(
        &mut self,
        record: JobSnapshot,
        launches: &[LaunchParts],
        n_queues: usize,
        submissions: &mut HashMap<u64, Rc<Submission>>,
    ) -> Result<Job, RestoreError> {
        let id = JobId(record.id);
        let n_hosts = self.logged.topology.hosts.len() as u32;
        // A job has hosts for each entry of its layout, or, admitted
        // and waiting to be placed (an exclusive queue's job behind
        // another), none yet.
        let bound = record.hosts.len() == record.layout.len()
            && record.hosts.len() == record.peak_memory.len();
        let unbound = record.hosts.is_empty()
            && record.peak_memory.is_empty()
            && !record.started
            && record.phase == "idle";
        if record.hosts.iter().any(|host| *host >= n_hosts)
            || record.cluster as usize >= self.logged.topology.clusters.len()
            || record.queue as usize >= n_queues
            || !(bound || unbound)
        {
            return Err(RestoreError::JobDoesNotFit(id));
        }
        let (stages, env, cwd, inherited) = launches
            .get(record.launch)
            .ok_or(RestoreError::LaunchMissing(record.launch))?;
        let submission = match record.submission.clone() {
            Some(snapshot) => Some(submission_in(id, snapshot, submissions)?),
            None => None,
        };
        let link = match (record.client, &submission) {
            (Some(client), _) => Link::Client(ClientToken(client)),
            (None, Some(submission)) if submission.batch.detach => Link::Batch,
            (None, _) if record.reattach_until.is_some() => Link::Detached,
            (None, _) => Link::Lost,
        };
        let request = JobRequest {
            stages: stages.clone(),
            joiner: if record.pipe {
                Joiner::Pipe
            } else {
                Joiner::Sequence
            },
            procs: procs_in(record.procs),
            priority: Some(record.queue),
            wait: false,
            memory: None,
            disk: None,
            time: record.estimate_us.map(from_us),
            env: env.clone(),
            cwd: cwd.clone(),
            inherited: inherited.clone(),
            batch: Batch::default(),
        };
        let phase = match record.phase.as_str() {
            "idle" => Phase::Idle,
            "running" => Phase::Running,
            "stopping" => Phase::Stopping,
            "stopped" => Phase::Stopped,
            other => {
                return Err(RestoreError::UnknownPhase {
                    job: id,
                    phase: other.to_string(),
                })
            }
        };
        let (life, ending) = job_state_in(id, &record, phase)?;
        let job = Job {
            id,
            user: Rc::from(record.user.as_str()),
            owner: cred_in(record.owner),
            link_kind: link.parts().0,
            link_token: link.parts().1,
            submission,
            spec: JobSpec {
                joiner: request.joiner,
                procs: request.procs,
                launch: self.intern_launch(&request),
            },
            queue: record.queue,
            queues_visited: record.queues_visited.into(),
            cluster: ClusterId(record.cluster),
            hosts: record.hosts.into_iter().map(HostId).collect(),
            layout: record.layout.into(),
            limits: JobLimits {
                cputime: record.limit_cputime_us.map(from_us),
                memory: record.limit_memory,
                disk: record.limit_disk,
            },
            operator_hold: record.operator_hold,
            owner_hold: record.owner_hold,
            awaits_client: record.reattach_until.is_some() && !record.started,
            life,
            ending,
            estimate: record.estimate_us.map(from_us),
            submitted_at: Tick(record.submitted_at),
            admitted_at: Tick(record.admitted_at),
            run_time: from_us(record.run_time_us),
            switches: record.switches,
            usage: Usage {
                cpu: from_us(record.cpu_us),
                memory: record.memory.into(),
                disk: record.disk,
                // Told again by the next sample; only a message reads it.
                programs: 0,
            },
            peak_memory: record.peak_memory.into(),
            peak_disk: record.peak_disk,
            residency_base: from_us(record.residency_base_us),
        };
        Ok(job)
    }

    /// Books a restored job: its reservations, client, live state,
    /// deadlines and limits.
    fn admit_restored(&mut self, job: Job) {
        let id = job.id;
        self.logged.ledger.reserve(&Placement {
            cluster: job.cluster,
            hosts: job.hosts.clone(),
            layout: job.layout.to_vec(),
            limits: job.limits,
        });
        if let Some(client) = job.client() {
            self.logged.by_client.insert(client, id);
        }
        if matches!(job.phase(), Phase::Running | Phase::Stopping) {
            self.logged.live.insert(id);
        }
        if let Some(deadline) = job.kill_deadline() {
            self.logged.kill_deadlines.insert((deadline, id));
        }
        if let Some(deadline) = job.time_deadline() {
            self.logged.time_deadlines.insert((deadline, id));
        }
        if job.limits.cputime.is_some() {
            self.n_cputime_limited += 1;
        }
        if usage_limited(&job.limits) {
            self.n_usage_limited += 1;
        }
        self.logged.jobs.insert(id, job);
    }

    /// The queues of the snapshot, in rotation order (`started`: the jobs
    /// that ran).
    fn restore_queues(
        &mut self,
        queues: Vec<QueueSnapshot>,
        started: &BTreeSet<u64>,
    ) -> Result<(), RestoreError> {
        self.logged.queues = crate::undo::UndoQueues::new(Vec::new());
        for (number, queue) in queues.into_iter().enumerate() {
            let mode = if queue.exclusive {
                QueueMode::Exclusive
            } else {
                QueueMode::Gang
            };
            let mut restored = Queue::new(number as u32, mode);
            restored.enabled = queue.enabled;
            restored.activated = queue.activated;
            restored.cputime = queue.cputime_us.map(from_us);
            restored.residency = queue.residency_us.map(from_us);
            restored.memory_pct = queue.memory_pct;
            restored.disk_pct = queue.disk_pct;
            restored.group = queue.group;
            restored.group_name = queue.group_name;
            restored.backfill = queue.backfill;
            restored.mpl = queue.mpl;
            restored.share = if queue.share_jobs {
                QueueShare::Job
            } else {
                QueueShare::User
            };
            restored.fairshare = queue.fairshare_us.map(from_us);
            restored.usage =
                DecayedUsage::from_entries(queue.usage).ok_or(RestoreError::BadUsage {
                    queue: number as u32,
                })?;
            for id in queue.order {
                let Some(job) = self.logged.jobs.get(&JobId(id)) else {
                    return Err(RestoreError::QueueHoldsUnknownJob {
                        queue: number as u32,
                        job: id,
                    });
                };
                if job.queue != number as u32 {
                    return Err(RestoreError::JobInOtherQueue {
                        job: id,
                        queue: number as u32,
                        belongs: job.queue,
                    });
                }
                // In a gang queue with a level, a job that has its hosts
                // is in the matrix and the rotation, run yet or not.
                let in_matrix = restored.level().is_some() && !job.hosts.is_empty();
                restored.push_by(JobId(id), started.contains(&id) || in_matrix, job.owner.uid);
            }
            self.logged
                .queues
                .modify_all(|queues| queues.push(restored));
        }
        Ok(())
    }

    /// The invariants of `check_invariants`, as an error instead of a panic.
    fn check_restored(&self) -> Result<(), RestoreError> {
        let mut owner: HashMap<HostId, JobId> = HashMap::new();
        for job in self.logged.jobs.values() {
            if matches!(job.phase(), Phase::Running | Phase::Stopping) {
                for host in &job.hosts {
                    if let Some(other) = owner.insert(*host, job.id) {
                        return Err(RestoreError::HostTaken {
                            first: other,
                            second: job.id,
                            host: *host,
                        });
                    }
                }
            }
            let in_queue = self.logged.queues[job.queue as usize]
                .order()
                .filter(|&queued| queued == job.id)
                .count();
            if in_queue != 1 {
                return Err(RestoreError::NotInQueueOnce {
                    job: job.id,
                    queue: job.queue,
                });
            }
        }
        let queued: usize = self.logged.queues.iter().map(Queue::len).sum();
        if queued != self.logged.jobs.len() {
            return Err(RestoreError::QueuesDisagree);
        }
        let mut ledger = Ledger::new(&self.logged.topology);
        for job in self.logged.jobs.values() {
            ledger.reserve(&Placement {
                cluster: job.cluster,
                hosts: job.hosts.clone(),
                layout: job.layout.to_vec(),
                limits: job.limits,
            });
        }
        if ledger != *self.logged.ledger {
            return Err(RestoreError::ReservationsDisagree);
        }
        Ok(())
    }
}

/// A submission of the snapshot that waited for admission.
fn restore_waiter(
    record: WaiterSnapshot,
    launches: &[LaunchParts],
) -> Result<Waiter, RestoreError> {
    let launch = launches
        .get(record.launch)
        .ok_or(RestoreError::LaunchMissing(record.launch))?;
    Ok(Waiter {
        link: Link::Client(ClientToken(record.client)),
        id: None,
        submission: None,
        cred: cred_in(record.cred),
        user: Rc::from(record.user.as_str()),
        request: request_in(&record.request, launch)?,
        submitted_at: Tick(record.submitted_at),
        held: record.held,
    })
}
