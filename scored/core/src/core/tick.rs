//! The clock in the core: what a `Tick` does (graceful kills escalated,
//! `-time` limits, the slice boundary with its gang rotation and usage
//! samples), and when the next tick is needed ([`Core::next_deadline`],
//! and for a replay [`Core::next_decision`] with the index of CPU time
//! and residency crossings).
#![forbid(unsafe_code)]

use super::{usage_limited, Action, Core, SIGKILL};
use crate::ids::{JobId, Tick};
use crate::job::{EndCause, Job, Phase};
use scored_proto::command::QueueMode;
use scored_proto::units::format_duration;

impl Core {
    /// The next time the core needs a `Tick`, if any.
    pub fn next_deadline(&self) -> Option<Tick> {
        let slice = if self.logged.jobs.is_empty() {
            None
        } else {
            Some(self.sched.next_boundary())
        };
        Tick::earliest(self.timer_deadline(), slice)
    }

    /// The earliest graceful-kill escalation or `-time` limit, or at once
    /// when the backlog has admissions left from the last event.
    pub(super) fn timer_deadline(&self) -> Option<Tick> {
        if *self.logged.backlog.more {
            return Some(Tick::default());
        }
        let kill = self
            .logged
            .kill_deadlines
            .first()
            .map(|(deadline, _)| *deadline);
        let time = self
            .logged
            .time_deadlines
            .first()
            .map(|(deadline, _)| *deadline);
        Tick::earliest(Tick::earliest(kill, time), self.detached_deadline())
    }

    /// The next time at which a `Tick` could change what runs, which can be
    /// much later than [`Core::next_deadline`]: a slice boundary matters
    /// only while a gang queue has a runnable job that is not running (the
    /// rotation then changes the active set), after a job entered in the
    /// remnant of a slice (counting its turn changes the rotation order),
    /// or when a limit on CPU time
    /// or residency could be crossed by then, assuming a job's CPU time
    /// grows by at most one second per process per second of running and
    /// its memory and disk use stay as last sampled. The daemon ticks at
    /// every slice (its listings show fresh usage); a replay with a virtual
    /// clock jumps to this time instead, which changes no decision.
    pub fn next_decision(&self, now: Tick) -> Option<Tick> {
        let timers = self.timer_deadline();
        if self.logged.jobs.is_empty() {
            return timers;
        }
        // Every job running (all live, none being stopped): none waits.
        let all_running =
            self.logged.live.len() == self.logged.jobs.len() && self.sched.n_stopping() == 0;
        let rotation_matters = !all_running
            && self.logged.queues.iter().any(|queue| {
                queue.activated
                    && queue.mode == QueueMode::Gang
                    // A queue with a level rotates its started jobs only;
                    // its waiting ones start at events, not slices.
                    && queue.order().take(if queue.starts_late() { queue.n_started() } else { usize::MAX }).any(|job| {
                        self.logged.jobs.get(&job).is_some_and(|record| {
                            record.phase() != Phase::Running
                                && !record.is_ending()
                                && !record.held()
                        })
                    })
            });
        // A job that entered in the remnant of a slice is counted at the
        // next boundary, which changes the rotation order.
        if rotation_matters || self.sched.entered_in_remnant() {
            return Tick::earliest(timers, Some(self.sched.next_boundary()));
        }
        // The earliest time a sample could show a CPU time or residency
        // limit crossed: a job's CPU time grows by at most one second per
        // process per second since the last sample, so the job with the
        // least left per process crosses first.
        let crossing = self.logged.crossings.first().map(|&(left, _)| {
            if now >= self.sampled_at {
                Tick(self.sampled_at.0.saturating_add(left)).max(now)
            } else {
                Tick(now.0.saturating_add(left))
            }
        });
        let slice = crossing.map(|at| {
            self.sched
                .boundary_at_or_after(at, self.logged.config.timeslice)
        });
        Tick::earliest(timers, slice)
    }

    /// Whether a usage sample of `job` can change a decision: the job has
    /// a CPU time, memory or disk limit, or its queue demotes by residency.
    /// (The daemon samples every running job each slice anyway, for its
    /// listings; a replay answers only the samples that matter.)
    pub fn usage_matters(&self, job: JobId) -> bool {
        self.logged.jobs.get(&job).is_some_and(|record| {
            usage_limited(&record.limits)
                || self
                    .logged
                    .queues
                    .get(record.queue as usize)
                    .is_some_and(|queue| queue.residency.is_some())
        })
    }

    /// How much CPU time per process a live job has left before it crosses
    /// its CPU time limit or its queue's residency, in microseconds, by its
    /// last sample; `None` if it has neither.
    pub(super) fn crossing_key(&self, record: &Job) -> Option<u64> {
        let residency = self
            .logged
            .queues
            .get(record.queue as usize)
            .and_then(|queue| queue.residency)
            .filter(|_| (record.queue as usize) + 1 < self.logged.queues.len())
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
    pub(super) fn refresh_crossing(&mut self, job: JobId) {
        // Nothing indexed, and nothing to index: no job has a CPU time
        // limit and no queue demotes by residency (a job enters and leaves
        // `live` at every switch; this keeps that free of look-ups).
        if self.logged.crossing_of.is_empty()
            && self.n_cputime_limited == 0
            && self
                .logged
                .queues
                .iter()
                .all(|queue| queue.residency.is_none())
        {
            return;
        }
        self.refresh_crossing_of(job);
    }

    #[inline(never)]
    pub(super) fn refresh_crossing_of(&mut self, job: JobId) {
        let key = self
            .logged
            .live
            .contains(&job)
            .then(|| self.logged.jobs.get(&job))
            .flatten()
            .and_then(|record| self.crossing_key(record));
        let old = match key {
            Some(key) => self.logged.crossing_of.insert(job, key),
            None => self.logged.crossing_of.remove(&job),
        };
        if old != key {
            if let Some(old) = old {
                self.logged.crossings.remove(&(old, job));
            }
            if let Some(key) = key {
                self.logged.crossings.insert((key, job));
            }
        }
    }

    pub(super) fn tick(&mut self, now: Tick, out: &mut Vec<Action>) {
        self.expire_detached(now, out);
        // Admit what the last event left of the backlog's share, and the
        // elements of arrays whose admitted ones have started since.
        if *self.logged.backlog.more || self.backlog_waits_for_starts() {
            self.admit_waiters(now, out);
        }
        // Escalate graceful kills whose grace is over.
        while let Some(&(deadline, job)) = self.logged.kill_deadlines.first() {
            if deadline > now {
                break;
            }
            self.logged.kill_deadlines.pop_first();
            if let Some(record) = self.logged.jobs.get_mut(&job) {
                record.harden_kill();
                out.push(Action::Signal {
                    job,
                    signal: SIGKILL,
                });
            }
        }
        // End jobs whose run time reached their -time limit.
        while let Some(&(deadline, job)) = self.logged.time_deadlines.first() {
            if deadline > now {
                break;
            }
            self.logged.time_deadlines.pop_first();
            let Some(record) = self.logged.jobs.get_mut(&job) else {
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
        // At a slice boundary the gang queues rotate.
        let logged = &mut self.logged;
        let jobs = &logged.jobs;
        let boundary = self.sched.slice_boundary(
            now,
            logged.config.timeslice,
            &mut logged.queues,
            |job| jobs.get(&job).map(|record| record.queue as usize),
            jobs,
        );
        if !boundary {
            return;
        }
        // The set restarts with the new slice; `reschedule`, which always
        // follows, fills it again with every job that runs in it.
        self.sampled_at = now;
        // Without a limit or a residency anywhere, no sample matters.
        let every = self.logged.config.sample_every_slice;
        if every
            || self.n_usage_limited > 0
            || self
                .logged
                .queues
                .iter()
                .any(|queue| queue.residency.is_some())
        {
            for job in &self.logged.live {
                if every || self.usage_matters(job) {
                    out.push(Action::Sample(job));
                }
            }
        }
    }
}
