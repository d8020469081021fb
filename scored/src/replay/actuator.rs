//! The simulated actuator of a replay: a job's processes make progress
//! only while they run, stop confirmations arrive after the switch cost,
//! and a kill ends them at once.
//!
//! Pure: time is a [`Tick`] handed in; nothing here forks or signals.
#![forbid(unsafe_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use scored_core::jobset::JobMap;

use crate::ids::{JobId, Tick};

/// A simulated job's processes.
#[derive(Debug, Clone, PartialEq)]
struct Procs {
    /// Processes per stage (ranks to report on exit).
    ranks: u32,
    /// Work left, in microseconds of running, at `since` (or now, if stopped).
    left: u64,
    /// Work in total, in microseconds.
    total: u64,
    /// Running since then; `None` while stopped.
    since: Option<Tick>,
}

/// What became of a job's processes at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Happening {
    /// Every process of the job finished its work.
    Finished(JobId),
    /// A stop took effect (the switch cost has passed).
    Stopped(JobId),
}

/// Simulated processes of every job the core started.
///
/// A switch stops and continues jobs by the dozen, tens of millions of
/// times in a replay, so neither costs a search: a stop leaves the job's
/// entry in `ends` where it is (it is stale, and dropped when it comes to
/// the top or when stale entries outnumber the others), and stops are
/// confirmed in the order they were made, since they all take the same
/// switch cost.
#[derive(Debug, Default)]
pub struct SimActuator {
    procs: JobMap<Procs>,
    /// When running jobs finish (earliest first, then by job), with stale
    /// entries of jobs stopped since; the first entry is never stale.
    ends: BinaryHeap<Reverse<(Tick, JobId)>>,
    /// How many entries of `ends` may be stale.
    stale: usize,
    /// When pending stops are confirmed, in the order they were made (so in
    /// time order).
    stops: VecDeque<(Tick, JobId)>,
    switch_cost: Duration,
    /// Processes running now.
    busy: u64,
}

impl SimActuator {
    /// An actuator whose stops take `switch_cost` to be confirmed.
    pub fn new(switch_cost: Duration) -> SimActuator {
        SimActuator {
            switch_cost,
            ..SimActuator::default()
        }
    }

    /// Creates a job's processes with `work` to do; they run from `now`.
    pub fn spawn(&mut self, job: JobId, ranks: u32, work: Duration, now: Tick) {
        let total = work.as_micros().min(u128::from(u64::MAX)) as u64;
        self.procs.insert(
            job,
            Procs {
                ranks,
                left: total,
                total,
                since: Some(now),
            },
        );
        self.busy += u64::from(ranks);
        self.ends
            .push(Reverse((Tick(now.0.saturating_add(total)), job)));
        self.drop_stale();
    }

    /// Whether an entry of `ends` is when its job, running now, finishes.
    fn current(&self, at: Tick, job: JobId) -> bool {
        self.procs.get(&job).is_some_and(|procs| {
            procs
                .since
                .is_some_and(|since| Tick(since.0.saturating_add(procs.left)) == at)
        })
    }

    /// Drops stale entries from the top of `ends`, and all of them once
    /// they outnumber the others.
    fn drop_stale(&mut self) {
        while let Some(&Reverse((at, job))) = self.ends.peek() {
            if self.current(at, job) {
                break;
            }
            self.ends.pop();
            self.stale = self.stale.saturating_sub(1);
        }
        if self.stale > 64 && self.stale > self.ends.len() / 2 {
            let mut ends = std::mem::take(&mut self.ends).into_vec();
            ends.retain(|&Reverse((at, job))| self.current(at, job));
            // A job continued at the instant it stopped has its end listed
            // twice: keep one.
            ends.sort_unstable();
            ends.dedup();
            self.ends = BinaryHeap::from(ends);
            self.stale = 0;
        }
    }

    /// Stops a running job at `now`: its work pauses at once, and the stop
    /// is confirmed after the switch cost.
    pub fn stop(&mut self, job: JobId, now: Tick) {
        let Some(procs) = self.procs.get_mut(&job) else {
            return;
        };
        if let Some(since) = procs.since.take() {
            procs.left = procs.left.saturating_sub(now.0.saturating_sub(since.0));
            self.busy -= u64::from(procs.ranks);
            self.stale += 1;
        }
        self.stops.push_back((now.after(self.switch_cost), job));
        self.drop_stale();
    }

    /// Continues a stopped job at `now`.
    pub fn resume(&mut self, job: JobId, now: Tick) {
        let Some(procs) = self.procs.get_mut(&job) else {
            return;
        };
        if procs.since.is_none() {
            procs.since = Some(now);
            self.busy += u64::from(procs.ranks);
            self.ends
                .push(Reverse((Tick(now.0.saturating_add(procs.left)), job)));
        }
    }

    /// Kills a job's processes; returns how many ranks it had, if it had any.
    pub fn kill(&mut self, job: JobId, now: Tick) -> Option<u32> {
        let procs = self.procs.remove(&job)?;
        if procs.since.is_some() {
            self.busy -= u64::from(procs.ranks);
            self.stale += 1;
        }
        let _ = now;
        self.stops.retain(|(_, stopping)| *stopping != job);
        self.drop_stale();
        Some(procs.ranks)
    }

    /// Work done by the job by `now`.
    pub fn done(&self, job: JobId, now: Tick) -> Duration {
        let Some(procs) = self.procs.get(&job) else {
            return Duration::ZERO;
        };
        let left = match procs.since {
            Some(since) => procs.left.saturating_sub(now.0.saturating_sub(since.0)),
            None => procs.left,
        };
        Duration::from_micros(procs.total - left)
    }

    /// Ranks of a job that has processes.
    pub fn ranks(&self, job: JobId) -> Option<u32> {
        self.procs.get(&job).map(|procs| procs.ranks)
    }

    /// Whether a job's processes are running now.
    pub fn running(&self, job: JobId) -> bool {
        self.procs
            .get(&job)
            .is_some_and(|procs| procs.since.is_some())
    }

    /// When the next thing happens, if anything is under way.
    pub fn next(&self) -> Option<Tick> {
        let end = self.ends.peek().map(|Reverse((at, _))| *at);
        let stop = self.stops.front().map(|(at, _)| *at);
        [end, stop].into_iter().flatten().min()
    }

    /// Takes what happens at or before `now`, in time order (stop
    /// confirmations before finishes at the same instant). A finished job's
    /// processes are gone.
    pub fn take_due(&mut self, now: Tick, out: &mut Vec<Happening>) {
        let due = self.stops.iter().take_while(|(at, _)| *at <= now).count();
        if due > 0 {
            // Stops made at the same instant are confirmed by job, and a
            // job stopped twice at one instant is confirmed once.
            let batch = self.stops.make_contiguous();
            batch[..due].sort_unstable();
            let mut last = None;
            for (at, job) in self.stops.drain(..due) {
                if last != Some((at, job)) {
                    out.push(Happening::Stopped(job));
                }
                last = Some((at, job));
            }
        }
        while let Some(&Reverse((at, job))) = self.ends.peek() {
            if at > now {
                break;
            }
            self.ends.pop();
            if let Some(procs) = self.procs.remove(&job) {
                self.busy -= u64::from(procs.ranks);
            }
            out.push(Happening::Finished(job));
            self.drop_stale();
        }
    }

    /// Processes running now.
    pub fn busy(&self) -> u64 {
        self.busy
    }

    /// How many jobs have processes.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// Whether no job has processes.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(value: u64) -> Tick {
        Tick(value * 1000)
    }

    #[test]
    fn work_progresses_only_while_running() {
        let mut sim = SimActuator::new(Duration::from_millis(5));
        let job = JobId(1);
        sim.spawn(job, 2, Duration::from_millis(100), ms(0));
        assert_eq!(sim.next(), Some(ms(100)));
        sim.stop(job, ms(40));
        assert_eq!(sim.done(job, ms(90)), Duration::from_millis(40));
        assert_eq!(
            sim.next(),
            Some(ms(45)),
            "the stop is confirmed after the switch cost"
        );
        let mut due = Vec::new();
        sim.take_due(ms(45), &mut due);
        assert_eq!(due, vec![Happening::Stopped(job)]);
        sim.resume(job, ms(200));
        assert_eq!(sim.next(), Some(ms(260)));
        sim.take_due(ms(260), &mut due);
        assert_eq!(due, vec![Happening::Stopped(job), Happening::Finished(job)]);
        assert!(sim.is_empty());
    }

    #[test]
    fn a_kill_ends_at_once_and_cancels_pending_stops() {
        let mut sim = SimActuator::new(Duration::from_millis(5));
        sim.spawn(JobId(1), 3, Duration::from_secs(1), ms(0));
        sim.stop(JobId(1), ms(10));
        assert_eq!(sim.kill(JobId(1), ms(11)), Some(3));
        assert_eq!(sim.next(), None);
        assert_eq!(sim.kill(JobId(1), ms(12)), None);
    }

    #[test]
    fn stops_made_at_one_instant_are_confirmed_by_job() {
        let mut sim = SimActuator::new(Duration::from_millis(1));
        for job in [3, 1, 2] {
            sim.spawn(JobId(job), 1, Duration::from_secs(1), ms(0));
        }
        for job in [3, 1, 2] {
            sim.stop(JobId(job), ms(10));
        }
        let mut due = Vec::new();
        sim.take_due(ms(11), &mut due);
        let stopped = [1, 2, 3].map(|job| Happening::Stopped(JobId(job)));
        assert_eq!(due, stopped);
    }

    #[test]
    fn a_job_continued_at_the_instant_it_stopped_finishes_once() {
        let mut sim = SimActuator::new(Duration::ZERO);
        let job = JobId(4);
        sim.spawn(job, 1, Duration::from_millis(100), ms(0));
        sim.stop(job, ms(30));
        sim.resume(job, ms(30));
        assert_eq!(sim.next(), Some(ms(30)), "the stop's confirmation");
        let mut due = Vec::new();
        sim.take_due(ms(100), &mut due);
        assert_eq!(due, vec![Happening::Stopped(job), Happening::Finished(job)]);
        assert_eq!(sim.next(), None);
        assert!(sim.is_empty());
    }

    #[test]
    fn stale_ends_of_stopped_jobs_do_not_pile_up() {
        // A long job stopped and continued at every slice leaves an end
        // behind each time; they are dropped, not kept for its lifetime.
        let mut sim = SimActuator::new(Duration::ZERO);
        let job = JobId(5);
        sim.spawn(job, 1, Duration::from_secs(1_000_000), ms(0));
        let mut due = Vec::new();
        for slice in 1..10_000 {
            sim.stop(job, ms(slice * 10));
            sim.resume(job, ms(slice * 10 + 5));
            sim.take_due(ms(slice * 10 + 5), &mut due);
        }
        assert!(sim.ends.len() < 200, "{} ends kept", sim.ends.len());
        // 10 ms before the first stop, then 5 ms of each slice.
        assert_eq!(sim.done(job, ms(100_000)), Duration::from_millis(50_005));
    }

    proptest! {
        /// However a job is stopped and continued, it finishes exactly
        /// when its running time adds up to its work.
        #[test]
        fn a_job_finishes_when_it_has_run_its_work(
            work in 1u64..10_000,
            gaps in proptest::collection::vec((1u64..500, 1u64..500), 0..20),
        ) {
            let mut sim = SimActuator::new(Duration::ZERO);
            let job = JobId(7);
            sim.spawn(job, 1, Duration::from_micros(work), Tick(0));
            let mut now = 0u64;
            let mut ran = 0u64;
            let mut due = Vec::new();
            for (run, pause) in gaps {
                if ran + run >= work { break; }
                now += run;
                ran += run;
                sim.stop(job, Tick(now));
                sim.take_due(Tick(now), &mut due);
                prop_assert_eq!(due.pop(), Some(Happening::Stopped(job)));
                now += pause;
                sim.resume(job, Tick(now));
            }
            let end = sim.next().expect("under way");
            prop_assert_eq!(end, Tick(now + (work - ran)));
            sim.take_due(end, &mut due);
            prop_assert!(due.contains(&Happening::Finished(job)));
            prop_assert!(sim.is_empty());
        }
    }
}
