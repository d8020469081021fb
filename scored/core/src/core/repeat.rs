//! Whole periods of the gang rotation at once, for a replay: between two
//! events, slice boundaries only rotate the gang queues, and the active
//! sets they choose repeat with some period. A replay that sees the same
//! rotation state ([`Core::rotation_state`]) one period apart moves the
//! core that many periods ahead in one step ([`Core::repeat_rotation`]):
//! each job's run time and switches grow by what one period gave them,
//! times the periods, and the clocks move on.
#![forbid(unsafe_code)]

use super::Core;
use crate::ids::{JobId, Tick};
use crate::job::Phase;
use crate::queue::Queue;
use scored_proto::command::QueueMode;

/// The core at a slice boundary, from which [`Core::repeat_rotation`]
/// repeats the period that ends at a later one.
#[derive(Debug, Clone, Default)]
pub struct RotationMark {
    at: Tick,
    switch_count: u64,
    next_switch: u64,
    /// Each started job of the rotations: its run time of ended stretches
    /// and with the running one (µs), and its switches.
    jobs: Vec<(JobId, u64, u64, u64)>,
}

impl RotationMark {
    /// The boundary it was made at.
    pub fn at(&self) -> Tick {
        self.at
    }

    /// The started jobs it holds.
    pub fn jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.jobs.iter().map(|&(job, ..)| job)
    }
}

/// How many jobs from the front of a queue's order its rotation moves.
fn rotating(queue: &Queue) -> usize {
    if queue.starts_late() {
        queue.n_started()
    } else {
        queue.len()
    }
}

fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl Core {
    /// At a slice boundary: writes to `out` all that the next slices'
    /// decisions depend on while only slice boundaries come (each gang
    /// queue's rotating order, the jobs that took their turn in the slice
    /// and the running jobs), and returns true;
    /// returns false when something else could change them (a kill, a
    /// limit or residency, a stop not yet confirmed, a job that entered
    /// without its turn or waits for one, hosts chosen for a
    /// job that waits, waiting jobs not yet considered, an exclusive queue
    /// with jobs, a journal to write).
    pub fn rotation_state(&self, out: &mut Vec<u64>) -> bool {
        out.clear();
        if self.journal.is_some()
            || self.shutting_down
            || self.state_dir_problem.is_some()
            || self.logged.config.sample_every_slice
            || self.n_stopping != 0
            || !self.turn_pending.is_empty()
            || self.remnant_entries != 0
            || self.switches.open.is_some()
            || !self.waiting_current
            || !self.bound_waiting.is_empty()
            || !self.bindings.is_empty()
            || !self.logged.kill_deadlines.is_empty()
            || !self.logged.crossings.is_empty()
            || self.n_usage_limited > 0
            || self.n_cputime_limited > 0
        {
            return false;
        }
        for queue in self.logged.queues.iter() {
            if queue.residency.is_some()
                || (queue.activated && queue.mode != QueueMode::Gang && !queue.is_empty())
            {
                return false;
            }
            let rotating = rotating(queue);
            out.extend([u64::from(queue.number), queue.len() as u64, rotating as u64]);
            out.extend(queue.order().take(rotating).map(|job| job.0));
        }
        // The jobs that took their turn in the slice, which its end moves
        // to the back, and the running ones.
        out.push(u64::MAX);
        out.extend(self.ran.iter().map(|job| job.0));
        out.push(u64::MAX);
        for job in &self.logged.live {
            match self.logged.jobs.get(&job) {
                Some(record) if !record.is_ending() && record.phase() == Phase::Running => {
                    out.push(job.0);
                }
                _ => return false,
            }
        }
        true
    }

    /// What [`Core::repeat_rotation`] needs of the slice boundary `now`.
    pub fn mark_rotation(&self, now: Tick) -> RotationMark {
        let mut jobs = Vec::new();
        for queue in self.logged.queues.iter() {
            for job in queue.order().take(rotating(queue)) {
                if let Some(record) = self.logged.jobs.get(&job).filter(|record| record.started()) {
                    jobs.push((
                        job,
                        micros(record.run_time),
                        micros(record.run_time_at(now)),
                        record.switches,
                    ));
                }
            }
        }
        RotationMark {
            at: now,
            switch_count: self.switches.count,
            next_switch: self.switches.next_id,
            jobs,
        }
    }

    /// How many more periods like the one from `mark` to the boundary
    /// `now` pass before a job's run time reaches its `-time` limit
    /// (none is reached by their end).
    pub fn rotation_repeats(&self, mark: &RotationMark, now: Tick) -> u64 {
        if now <= mark.at {
            return 0;
        }
        let mut most = u64::MAX;
        for &(job, _, run_at_mark, _) in &mark.jobs {
            let Some(record) = self.logged.jobs.get(&job) else {
                return 0;
            };
            let Some(estimate) = record.estimate else {
                continue;
            };
            let run = micros(record.run_time_at(now));
            let per_period = run.saturating_sub(run_at_mark);
            if per_period == 0 {
                continue;
            }
            let left = micros(estimate).saturating_sub(run);
            most = most.min(left.saturating_sub(1) / per_period);
        }
        most
    }

    /// Moves the core `periods` periods ahead of the slice boundary `now`,
    /// each like the one from `mark` to `now`, as that many periods of
    /// slices would: `now` must be a boundary with the same
    /// [`Core::rotation_state`] as `mark`'s, only slice boundaries must have
    /// come between them, and none must have come after (the core then
    /// stands at the boundary `periods` periods after `now`, as if it had
    /// stepped there).
    pub fn repeat_rotation(&mut self, mark: &RotationMark, now: Tick, periods: u64) {
        let shift = now.0.saturating_sub(mark.at.0).saturating_mul(periods);
        for &(job, run_at_mark, _, switches_at_mark) in &mark.jobs {
            let Some(record) = self.logged.jobs.get_mut(&job) else {
                continue;
            };
            // A job that ran through the whole period keeps its stretch;
            // one that stopped or started in it repeats its stretches.
            let ran = micros(record.run_time).saturating_sub(run_at_mark);
            let switched = record.switches.saturating_sub(switches_at_mark);
            let moved = record
                .running_since()
                .is_some_and(|since| since > mark.at)
                .then_some(shift);
            if let Some((old, new)) = record.repeat(periods, ran, switched, moved) {
                self.logged.time_deadlines.remove(&(old, job));
                self.logged.time_deadlines.insert((new, job));
            }
        }
        let count = self.switches.count.saturating_sub(mark.switch_count);
        self.switches.count = self
            .switches
            .count
            .saturating_add(count.saturating_mul(periods));
        let ids = self.switches.next_id.saturating_sub(mark.next_switch);
        self.switches.next_id = self
            .switches
            .next_id
            .saturating_add(ids.saturating_mul(periods));
        self.next_slice = Tick(self.next_slice.0.saturating_add(shift));
        self.sampled_at = Tick(self.sampled_at.0.saturating_add(shift));
    }
}
