//! A job's life after admission: its processes' exits, its usage checked
//! against its limits, residency moves, kills (graceful or not), its end
//! with the status and sentence its client is told, and shutdown.
#![forbid(unsafe_code)]

use std::rc::Rc;
use std::time::Duration;

use super::{
    command_line, usage_limited, Accounting, Action, ClientChange, ClientEvent, Core, EndKind,
    Ending, Finished, JobEvent, Outcome, Rejection, HISTORY, SIGKILL, SIGPIPE, SIGTERM,
};
use crate::admission::Placement;
use crate::ids::{ClientToken, JobId, Tick};
use crate::job::{EndCause, ExitStatus, Job, JobState, Joiner, Launch, Link, Phase, Usage};
use scored_proto::units::{format_duration, format_size};

/// See [`Core::usage_verdict`].
pub(super) enum UsageVerdict {
    Fine,
    Kill(String),
    MoveDown,
}

impl Core {
    pub(super) fn rank_exited(
        &mut self,
        job: JobId,
        stage: usize,
        rank: u32,
        status: ExitStatus,
        out: &mut Vec<Action>,
    ) {
        let Some(record) = self.logged.jobs.get_mut(&job) else {
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
        let normal = matches!(status, ExitStatus::Code(_)) || status.signal() == Some(SIGPIPE);
        if producer && (normal || record.is_ending()) {
            return;
        }
        if !status.success() {
            record.rank_failed(status, stage, rank);
        }
        // A rank killed by a signal is an abnormal end of the parallel
        // program: the others would wait for it forever, so the job ends.
        if let Some(signal) = status.signal() {
            if !record.is_ending() {
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

    pub(super) fn processes_gone(&mut self, job: JobId, now: Tick, out: &mut Vec<Action>) {
        let away = self.ended_away.get(&job).copied();
        let Some(record) = self.logged.jobs.get_mut(&job) else {
            return;
        };
        if let Some(signal) = record.ending().and_then(kill_signal) {
            record.unreported_ranks_killed(signal);
        }
        let (phase, time_deadline) = record.processes_gone(record.ended_at(away, now).0);
        if let Some(deadline) = time_deadline {
            self.logged.time_deadlines.remove(&(deadline, job));
        }
        let live = self.logged.live.remove(&job);
        self.sched
            .gone(job, &record.hosts, phase == Phase::Stopping, live);
        self.refresh_crossing(job);
        let Some(record) = self.logged.jobs.get_mut(&job) else {
            return;
        };
        let more_stages = record.spec.joiner == Joiner::Sequence
            && record.stage() + 1 < record.spec.launch.n_stages();
        if !record.is_ending() && record.failure().is_none() && more_stages {
            record.next_stage();
            self.ended_away.remove(&job);
            return;
        }
        self.finish(job, now, out);
    }

    /// Takes a sample of the job's usage, and carries out what it calls
    /// for (`usage_verdict`, worked out before the sample is taken).
    pub(super) fn usage(
        &mut self,
        job: JobId,
        usage: Usage,
        verdict: UsageVerdict,
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        let Some(record) = self.logged.jobs.get_mut(&job) else {
            return;
        };
        for (peak, current) in record.peak_memory.iter_mut().zip(&usage.memory) {
            *peak = (*peak).max(*current);
        }
        record.peak_disk = record.peak_disk.max(usage.disk);
        // CPU time never goes back, even if a sample missed a process.
        let cpu = usage.cpu.max(record.usage.cpu);
        record.usage = Usage { cpu, ..usage };
        let queue = record.queue;
        match verdict {
            UsageVerdict::Fine => {}
            UsageVerdict::Kill(why) => {
                tracing::info!(job = %job, reason = %why, "limit exceeded; killing the job");
                self.begin_kill(job, EndCause::Limit(why), false, now, out);
            }
            UsageVerdict::MoveDown => {
                tracing::info!(job = %job, from = queue, to = queue + 1, "residency exceeded; moving down");
                self.move_job(job, queue + 1, now);
                self.journal(JobEvent::Moved {
                    job,
                    from: queue,
                    to: queue + 1,
                    by: "residency",
                });
            }
        }
    }

    /// What a sample of a job's usage calls for: nothing, the job's kill
    /// for a limit it exceeds, or its move to the next lower queue once
    /// its CPU time in its queue exceeds the queue's residency time.
    pub(super) fn usage_verdict(&self, job: JobId, usage: &Usage) -> UsageVerdict {
        let Some(record) = self.logged.jobs.get(&job) else {
            return UsageVerdict::Fine;
        };
        if record.is_ending() {
            return UsageVerdict::Fine;
        }
        let cpu = usage.cpu.max(record.usage.cpu);
        if let Some(limit) = record.limits.cputime {
            if cpu > limit {
                return UsageVerdict::Kill(format!(
                    "CPU time {} over the limit of {}",
                    format_duration(cpu),
                    format_duration(limit)
                ));
            }
        }
        if let Some(limit) = record.limits.memory {
            for (slot, used) in usage.memory.iter().enumerate() {
                if *used > limit {
                    let host = record
                        .hosts
                        .get(slot)
                        .map(|h| self.logged.topology.host(*h).name.as_str())
                        .unwrap_or("?");
                    return UsageVerdict::Kill(format!(
                        "memory {} over the limit of {} on {host}",
                        format_size(*used),
                        format_size(limit)
                    ));
                }
            }
        }
        if let Some(limit) = record.limits.disk {
            if usage.disk > limit {
                return UsageVerdict::Kill(disk_violation(usage, limit));
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
            if usage.disk > backstop {
                return UsageVerdict::Kill(format!(
                    "disk {} over {}, half of cluster {}'s disk limit (the job has no disk limit of its own)",
                    format_size(usage.disk),
                    format_size(backstop),
                    self.logged.topology.cluster(record.cluster).name
                ));
            }
        }
        let queue = record.queue;
        let residency = self
            .logged
            .queues
            .get(queue as usize)
            .and_then(|q| q.residency);
        match residency {
            Some(residency)
                if cpu.saturating_sub(record.residency_base) > residency
                    && (queue as usize) + 1 < self.logged.queues.len() =>
            {
                UsageVerdict::MoveDown
            }
            _ => UsageVerdict::Fine,
        }
    }

    pub(super) fn move_job(&mut self, job: JobId, to: u32, now: Tick) {
        let Some(record) = self.logged.jobs.get_mut(&job) else {
            return;
        };
        let from = record.queue;
        record.queue = to;
        record.queues_visited.push(to);
        record.residency_base = record.usage.cpu;
        let started = record.started();
        let user = record.owner.uid;
        self.logged.queues[from as usize].remove_by(job, user);
        self.logged.queues.push_job(to as usize, job, started, user);
        self.order_by_usage(to as usize, now);
    }
    /// Starts killing a job. A graceful kill sends SIGTERM and lets the job
    /// run (ahead of every queue) to handle it, then SIGKILL after the grace.
    pub(super) fn begin_kill(
        &mut self,
        job: JobId,
        cause: EndCause,
        graceful: bool,
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        let grace = self.logged.config.kill_grace;
        let Some(record) = self.logged.jobs.get_mut(&job) else {
            return;
        };
        if record.is_ending() && !matches!(record.ending(), Some(EndCause::RankSignalled)) {
            // Already being killed; a harder kill may still escalate it.
            if !graceful {
                if let Some(deadline) = record.harden_kill() {
                    self.logged.kill_deadlines.remove(&(deadline, job));
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
            self.logged.kill_deadlines.insert((now.after(grace), job));
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

    pub(super) fn finish(&mut self, job: JobId, now: Tick, out: &mut Vec<Action>) {
        let Some(mut record) = self.logged.jobs.remove(&job) else {
            return;
        };
        let (ended, early) = record.ended_at(self.ended_away.remove(&job), now);
        let (phase, time_deadline) = record.processes_gone(ended);
        if let Some(deadline) = record.harden_kill() {
            self.logged.kill_deadlines.remove(&(deadline, job));
        }
        if let Some(deadline) = time_deadline {
            self.logged.time_deadlines.remove(&(deadline, job));
        }
        if record.limits.cputime.is_some() {
            self.n_cputime_limited = self.n_cputime_limited.saturating_sub(1);
        }
        if usage_limited(&record.limits) {
            self.n_usage_limited = self.n_usage_limited.saturating_sub(1);
        }
        let live = self.logged.live.remove(&job);
        self.sched
            .finished(job, &record.hosts, phase == Phase::Stopping, live);
        self.refresh_crossing(job);
        self.logged.queues[record.queue as usize].remove_by(job, record.owner.uid);
        let run = record.run_time_at(now);
        self.count_usage(record.owner.uid, record.hosts.len(), run, now);
        self.order_all_by_usage(now);
        self.logged.ledger.release(&Placement {
            cluster: record.cluster,
            hosts: record.hosts.clone(),
            layout: record.layout.to_vec(),
            limits: record.limits,
        });
        if let Some(client) = record.client() {
            self.logged.by_client.remove(&client);
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
                    first_failure.unwrap_or(scored_proto::exitcode::from_signal(SIGKILL)),
                    reason,
                    JobState::Done,
                )
            }
            Some(EndCause::Limit(why)) => (
                EndKind::Limit,
                scored_proto::exitcode::LIMIT,
                format!("killed: {why}"),
                JobState::Killed,
            ),
            Some(cause @ EndCause::Killed(by)) => {
                let (status, reason) = asked_to_end(&record, by, cause);
                (EndKind::Killed, status, reason, JobState::Killed)
            }
            Some(cause @ EndCause::ClientGone) => {
                let (status, reason) = asked_to_end(&record, "because its scrun went away", cause);
                (EndKind::Killed, status, reason, JobState::Killed)
            }
            Some(cause @ EndCause::Shutdown) => {
                let (status, reason) =
                    asked_to_end(&record, "because scored is shutting down", cause);
                (EndKind::Shutdown, status, reason, JobState::Killed)
            }
            Some(EndCause::Lost(what)) => (
                EndKind::Killed,
                first_failure.unwrap_or(scored_proto::exitcode::from_signal(SIGKILL)),
                format!("lost: {what}"),
                JobState::Killed,
            ),
            Some(EndCause::LaunchFailed { message, status }) => (
                EndKind::LaunchFailed,
                *status,
                format!("launch failed: {message}"),
                JobState::Done,
            ),
        };
        let signal = match (record.ending(), record.failure()) {
            (Some(EndCause::LaunchFailed { .. } | EndCause::Limit(_)), _) => None,
            (_, Some(status)) => status.signal(),
            _ => None,
        };
        // What a user's paths and programs made long is cut before it is
        // logged, journalled, told or kept.
        let reason = super::cap_reason(reason);
        let accounting = self.accounting(&record, ended);
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
                ended,
                true,
            );
            self.journal(JobEvent::Ended { job, record, early });
        }
        if let Some(client) = record.client() {
            out.push(Action::notify(
                client,
                ClientEvent::Ended(Box::new(ending.clone())),
            ));
        }
        let outcome = Outcome::of(job, state, ending.status, &ending.reason);
        let owner = record.owner.uid;
        if record.started() {
            out.push(Action::Release(job));
        }
        let command = command_line(&record);
        self.forget_launch(&record.spec.launch);
        record.spec.launch = Launch::pack(&[], &[], std::ffi::OsStr::new(""));
        if self.logged.finished.len() == HISTORY {
            self.logged.finished.pop_front();
        }
        self.logged.finished.push_back(Rc::new(Finished {
            job: record,
            command,
            state,
            ended_at: ended,
            ending,
        }));
        self.backlog_job_ended(job, true, owner, outcome, now, out);
        self.admit_waiters(now, out);
    }

    pub(super) fn accounting(&self, job: &Job, now: Tick) -> Accounting {
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
                .copied()
                .zip(job.peak_memory.iter().copied())
                .collect(),
            peak_disk: job.peak_disk,
        }
    }

    pub(super) fn client_gone(&mut self, client: ClientToken, now: Tick, out: &mut Vec<Action>) {
        if self
            .logged
            .waiting
            .iter()
            .any(|waiter| waiter.client() == Some(client))
        {
            self.logged
                .waiting
                .modify(|waiting| waiting.retain(|waiter| waiter.client() != Some(client)));
        }
        self.backlog_client(
            client,
            ClientChange::End("because its scrun went away"),
            now,
            out,
        );
        if let Some(job) = self.logged.by_client.remove(&client) {
            if let Some(record) = self.logged.jobs.get_mut(&job) {
                record.set_link(Link::Lost);
            }
            self.begin_kill(job, EndCause::ClientGone, false, now, out);
        }
    }

    /// Starts a shutdown; returns how many jobs are being killed.
    pub(super) fn shutdown(&mut self, now_kill: bool, now: Tick, out: &mut Vec<Action>) -> usize {
        if !self.shutting_down {
            tracing::info!(
                kill = now_kill,
                jobs = self.logged.jobs.len(),
                "shutting down"
            );
        }
        self.shutting_down = true;
        for waiter in self.logged.waiting.modify(std::mem::take) {
            if let Some(client) = waiter.client() {
                out.push(Action::notify(
                    client,
                    ClientEvent::Rejected {
                        kind: Rejection::ShuttingDown,
                        reason: "scored is shutting down".into(),
                    },
                ));
            }
        }
        // Jobs that cannot progress (held, or in a deactivated queue) would
        // keep a graceful shutdown waiting forever: they are killed too.
        let victims: Vec<JobId> = self
            .logged
            .jobs
            .values()
            .filter(|job| {
                now_kill || job.held() || !self.logged.queues[job.queue as usize].activated
            })
            .map(|job| job.id)
            .collect();
        let n_victims = victims.len();
        for job in victims {
            self.begin_kill(job, EndCause::Shutdown, true, now, out);
        }
        self.end_backlog(now, out);
        n_victims
    }
}

/// Which process failed: `rank 2`, or `rank 0 of stage 1` in a job of
/// several stages (numbered as `SCORE_RANK` and `SCORE_STAGE`).
pub(super) fn failed_process(job: &Job) -> String {
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
pub(super) fn describe_exit(job: &Job) -> String {
    match job.failure() {
        None => "all processes exited with status 0".to_string(),
        Some(ExitStatus::Code(code)) => {
            format!("{} exited with status {code}", failed_process(job))
        }
        Some(status) => format!(
            "{} killed by {}",
            failed_process(job),
            status.describe_signal().unwrap_or_default()
        ),
    }
}

/// The status and sentence of a job that was asked to end (`who`: `by its
/// owner`, `because scored is shutting down`, ...). A job that handled
/// the request and exited has its own status, as scrun passes on any
/// other; one whose processes a signal ended has that signal's; one that
/// never ran, or was killed while its processes were being created, has
/// the status of the kill's first signal ([`kill_signal`]).
pub(super) fn asked_to_end(job: &Job, who: &str, cause: &EndCause) -> (i32, String) {
    let default_signal = kill_signal(cause).unwrap_or(SIGKILL);
    if !job.started() {
        return (
            scored_proto::exitcode::from_signal(default_signal),
            format!("killed {who} before it started"),
        );
    }
    match (job.failure(), job.failed_rank()) {
        (None, _) => (0, format!("asked to end {who}; it exited with status 0")),
        (Some(ExitStatus::Code(code)), _) => (
            code,
            format!(
                "asked to end {who}; {} exited with status {code}",
                failed_process(job)
            ),
        ),
        (Some(status), None) => (
            status.as_shell(),
            format!("killed {who} while its processes were being created"),
        ),
        (Some(status), Some(_)) => (
            status.as_shell(),
            format!(
                "killed {who}: {} ended by {}",
                failed_process(job),
                status.describe_signal().unwrap_or_default()
            ),
        ),
    }
}

/// The signal a kill for `cause` sends first, which is also the status of
/// a job that it ended before its processes existed: SIGTERM for an owner's
/// or operator's kill and a shutdown, SIGKILL for a client gone; none for
/// the other ends, which have statuses of their own.
fn kill_signal(cause: &EndCause) -> Option<i32> {
    match cause {
        EndCause::Killed(_) | EndCause::Shutdown => Some(SIGTERM),
        EndCause::ClientGone => Some(SIGKILL),
        _ => None,
    }
}

/// What a job without a disk limit of its own may use at most: half of
/// its cluster's disk limit (by default the free space of the state
/// directory's filesystem at start-up), so that no single job fills it.
pub fn unlimited_disk_backstop(cluster_disk_limit: u64) -> u64 {
    cluster_disk_limit / 2
}

/// The reason a job over its disk limit is killed: its use, and how much
/// of it is its program files, which count as disk (scored(8), LIMITATIONS) though the
/// job wrote nothing.
fn disk_violation(usage: &Usage, limit: u64) -> String {
    let over = format!(
        "disk {} over the limit of {}",
        format_size(usage.disk),
        format_size(limit)
    );
    if usage.programs == 0 {
        return over;
    }
    format!(
        "{over} ({} of it the job's program files, which count as its disk, the rest its \
         SCORE_TMPDIR)",
        format_size(usage.programs)
    )
}
