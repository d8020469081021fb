//! The simulated actuator of a replay: a job's processes make progress
//! only while they run, stop confirmations arrive after the switch cost,
//! and a kill ends them at once.
//!
//! Pure: time is a [`Tick`] handed in; nothing here forks or signals.
#![forbid(unsafe_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use scored_core::ids::{JobId, Tick};

/// A simulated job's processes.
#[derive(Debug, Clone, PartialEq)]
struct Simulated {
    /// Processes per stage (ranks to report on exit).
    ranks: u32,
    /// Work left, in microseconds of running, at `since` (or now, if stopped).
    left: u64,
    /// Work in total, in microseconds.
    total: u64,
    /// Running since then; `None` while stopped.
    since: Option<Tick>,
}

impl Simulated {
    /// Work left at `now`.
    fn left_at(&self, now: Tick) -> u64 {
        match self.since {
            Some(since) => self.left.saturating_sub(now.0.saturating_sub(since.0)),
            None => self.left,
        }
    }

    /// When the job finishes if it keeps running (`None` while stopped).
    fn end(&self) -> Option<Tick> {
        self.since
            .map(|since| Tick(since.0.saturating_add(self.left)))
    }
}

/// The work left of every job at one instant ([`SimActuator::mark`]).
#[derive(Debug, Clone, Default)]
pub struct SimMark {
    at: Tick,
    jobs: Vec<(JobId, u64)>,
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
/// times in a replay, so neither costs a search: processes are found by
/// job id in a table (the core hands ids out in order from 1), the running
/// jobs' ends are kept in a heap from which a stopped job's end is not
/// taken out (a machine of thousands of hosts runs thousands of jobs, and
/// most of the ends listed at a switch are never the earliest), and stops
/// are confirmed in the order they were made, since they all take the
/// same switch cost.
#[derive(Debug, Default)]
pub struct SimActuator {
    /// Processes by job id.
    procs: Vec<Option<Simulated>>,
    /// How many jobs have processes.
    n_procs: usize,
    /// When running jobs finish, earliest first: each running job's end,
    /// and ends that no longer hold (the job was stopped, killed or
    /// finished), which are dropped when they come first and all at once
    /// when they outnumber the jobs. The first one always holds.
    ends: BinaryHeap<Reverse<(Tick, JobId)>>,
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

    fn get(&self, job: JobId) -> Option<&Simulated> {
        self.procs.get(usize::try_from(job.0).ok()?)?.as_ref()
    }

    fn get_mut(&mut self, job: JobId) -> Option<&mut Simulated> {
        self.procs.get_mut(usize::try_from(job.0).ok()?)?.as_mut()
    }

    /// Lists a running job's end.
    fn add_end(&mut self, entry: (Tick, JobId)) {
        self.ends.push(Reverse(entry));
    }

    /// Whether a listed end is the end of a running job.
    fn holds(&self, (at, job): (Tick, JobId)) -> bool {
        self.get(job).and_then(Simulated::end) == Some(at)
    }

    /// A job's end stopped holding: drop the ends that no longer hold from
    /// the front of the list, or from all of it once they are the most.
    fn drop_ended(&mut self) {
        if self.ends.len() > 2 * self.n_procs + 64 {
            // A job stopped and continued at one instant is listed twice.
            let mut ends = std::mem::take(&mut self.ends).into_vec();
            ends.retain(|Reverse(entry)| self.holds(*entry));
            ends.sort_unstable();
            ends.dedup();
            self.ends = BinaryHeap::from(ends);
        }
        while let Some(&Reverse(entry)) = self.ends.peek() {
            if self.holds(entry) {
                break;
            }
            self.ends.pop();
        }
    }

    /// Creates a job's processes with `work` to do; they run from `now`.
    pub fn spawn(&mut self, job: JobId, ranks: u32, work: Duration, now: Tick) {
        let Ok(idx) = usize::try_from(job.0) else {
            return;
        };
        let total = work.as_micros().min(u128::from(u64::MAX)) as u64;
        if self.procs.len() <= idx {
            self.procs.resize(idx + 1, None);
        }
        let procs = Simulated {
            ranks,
            left: total,
            total,
            since: Some(now),
        };
        let end = procs.end().unwrap_or(now);
        if let Some(old) = self.procs[idx].replace(procs) {
            // A job's processes are created once; should they be created
            // again, the new ones replace the old.
            if old.end().is_some() {
                self.busy -= u64::from(old.ranks);
            }
        } else {
            self.n_procs += 1;
        }
        self.busy += u64::from(ranks);
        self.add_end((end, job));
        self.drop_ended();
    }

    /// Stops a running job at `now`: its work pauses at once, and the stop
    /// is confirmed after the switch cost.
    pub fn stop(&mut self, job: JobId, now: Tick) {
        let Some(procs) = self.get_mut(job) else {
            return;
        };
        let end = procs.end();
        if let Some(since) = procs.since.take() {
            procs.left = procs.left.saturating_sub(now.0.saturating_sub(since.0));
            let ranks = procs.ranks;
            self.busy -= u64::from(ranks);
        }
        if end.is_some() {
            self.drop_ended();
        }
        self.stops.push_back((now.after(self.switch_cost), job));
    }

    /// Continues a stopped job at `now`.
    pub fn resume(&mut self, job: JobId, now: Tick) {
        let Some(procs) = self.get_mut(job) else {
            return;
        };
        if procs.since.is_none() {
            procs.since = Some(now);
            let entry = (procs.end().unwrap_or(now), job);
            let ranks = procs.ranks;
            self.busy += u64::from(ranks);
            self.add_end(entry);
        }
    }

    /// Takes a job's processes away (their end, if listed, no longer holds).
    fn forget(&mut self, job: JobId) -> Option<Simulated> {
        let idx = usize::try_from(job.0).ok()?;
        let procs = self.procs.get_mut(idx)?.take()?;
        self.n_procs -= 1;
        if procs.since.is_some() {
            self.busy -= u64::from(procs.ranks);
        }
        Some(procs)
    }

    /// Takes a job's processes away.
    fn take(&mut self, job: JobId) -> Option<Simulated> {
        let procs = self.forget(job)?;
        self.drop_ended();
        Some(procs)
    }

    /// Kills a job's processes; returns how many ranks it had, if it had any.
    pub fn kill(&mut self, job: JobId, now: Tick) -> Option<u32> {
        let procs = self.take(job)?;
        let _ = now;
        self.stops.retain(|(_, stopping)| *stopping != job);
        Some(procs.ranks)
    }

    /// Work done by the job by `now`.
    pub fn done(&self, job: JobId, now: Tick) -> Duration {
        let Some(procs) = self.get(job) else {
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
        self.get(job).map(|procs| procs.ranks)
    }

    /// Whether a job's processes are running now.
    pub fn running(&self, job: JobId) -> bool {
        self.get(job).is_some_and(|procs| procs.since.is_some())
    }

    /// When the next thing happens, if anything is under way.
    pub fn next(&self) -> Option<Tick> {
        let end = self.ends.peek().map(|Reverse((at, _))| *at);
        let stop = self.stops.front().map(|(at, _)| *at);
        Tick::earliest(end, stop)
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
            self.forget(job);
            out.push(Happening::Finished(job));
            self.drop_ended();
        }
    }

    /// What [`SimActuator::repeat`] needs of an instant: the work left
    /// then of `jobs`, which should be every job with processes.
    pub fn mark(&self, now: Tick, jobs: impl Iterator<Item = JobId>) -> SimMark {
        let jobs = jobs
            .filter_map(|job| Some((job, self.get(job)?.left_at(now))))
            .collect();
        SimMark { at: now, jobs }
    }

    /// How many more periods like the one from `mark` to `now` pass with
    /// no job finishing by their end (none if a stop is pending or a job
    /// came or went).
    pub fn repeats(&self, mark: &SimMark, now: Tick) -> u64 {
        if !self.stops.is_empty() || mark.jobs.len() != self.n_procs {
            return 0;
        }
        let mut most = u64::MAX;
        for &(job, left_at_mark) in &mark.jobs {
            let Some(procs) = self.get(job) else {
                return 0;
            };
            let left = procs.left_at(now);
            let per_period = left_at_mark.saturating_sub(left);
            if let Some(periods) = left.saturating_sub(1).checked_div(per_period) {
                most = most.min(periods);
            }
        }
        most
    }

    /// Moves the processes `periods` periods ahead of `now`, each like the
    /// one from `mark` to `now` (in which only stops and continues came,
    /// each confirmed at once, and for which [`SimActuator::repeats`] allows
    /// as many): each job does the work of one period that
    /// many times, and a job that ran through the whole period keeps
    /// running as it does.
    pub fn repeat(&mut self, mark: &SimMark, now: Tick, periods: u64) {
        let shift = now.0.saturating_sub(mark.at.0).saturating_mul(periods);
        for &(job, left_at_mark) in &mark.jobs {
            let Some(procs) = self.get_mut(job) else {
                continue;
            };
            let per_period = left_at_mark.saturating_sub(procs.left_at(now));
            match procs.since {
                Some(since) if since <= mark.at => {}
                Some(since) => {
                    procs.since = Some(Tick(since.0.saturating_add(shift)));
                    procs.left = procs
                        .left
                        .saturating_sub(per_period.saturating_mul(periods));
                }
                None => {
                    procs.left = procs
                        .left
                        .saturating_sub(per_period.saturating_mul(periods));
                }
            }
        }
        let ends: Vec<Reverse<(Tick, JobId)>> = mark
            .jobs
            .iter()
            .filter_map(|&(job, _)| Some(Reverse((self.get(job)?.end()?, job))))
            .collect();
        self.ends = BinaryHeap::from(ends);
    }

    /// Processes running now.
    pub fn busy(&self) -> u64 {
        self.busy
    }

    /// How many jobs have processes.
    pub fn len(&self) -> usize {
        self.n_procs
    }

    /// Whether no job has processes.
    pub fn is_empty(&self) -> bool {
        self.n_procs == 0
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
    fn a_job_stopped_and_continued_keeps_one_end() {
        // A long job stopped and continued at every slice is listed to
        // finish once while it runs and not at all while it is stopped.
        let mut sim = SimActuator::new(Duration::ZERO);
        let job = JobId(5);
        sim.spawn(job, 1, Duration::from_secs(1_000_000), ms(0));
        let mut due = Vec::new();
        for slice in 1..10_000 {
            sim.stop(job, ms(slice * 10));
            assert!(sim.ends.is_empty(), "a stopped job's end is listed");
            sim.resume(job, ms(slice * 10 + 5));
            sim.take_due(ms(slice * 10 + 5), &mut due);
            assert_eq!(sim.ends.len(), 1, "ends listed at slice {slice}");
        }
        // 10 ms before the first stop, then 5 ms of each slice.
        assert_eq!(sim.done(job, ms(100_000)), Duration::from_millis(50_005));
    }

    #[test]
    fn ends_that_no_longer_hold_are_dropped() {
        // Jobs stopped and continued at every slice (some at one instant),
        // none of whose ends comes first, leave a bounded list behind.
        let mut sim = SimActuator::new(Duration::ZERO);
        let mut due = Vec::new();
        sim.spawn(JobId(1), 1, Duration::from_secs(100), ms(0));
        for job in 2..=20 {
            sim.spawn(JobId(job), 1, Duration::from_secs(1_000 + job), ms(0));
        }
        for slice in 1..2_000 {
            for job in 2..=20 {
                sim.stop(JobId(job), ms(slice * 10));
                let pause = if job % 2 == 0 { 0 } else { 5 };
                sim.resume(JobId(job), ms(slice * 10 + pause));
            }
            sim.take_due(ms(slice * 10 + 5), &mut due);
            assert!(due
                .drain(..)
                .all(|happening| matches!(happening, Happening::Stopped(_))));
            let bound = 2 * 20 + 64 + 1;
            assert!(sim.ends.len() <= bound, "{} ends listed", sim.ends.len());
        }
        assert_eq!(sim.next(), Some(ms(100_000)));
        sim.take_due(ms(10_000_000), &mut due);
        // Each odd job lost 5 ms a slice; each finishes once, in order.
        let mut expected: Vec<(u64, u64)> = (2..=20u64)
            .map(|job| {
                (
                    (1_000 + job) * 1000 + if job % 2 == 0 { 0 } else { 5 * 1999 },
                    job,
                )
            })
            .collect();
        expected.sort_unstable();
        let mut finished = vec![Happening::Finished(JobId(1))];
        finished.extend(
            expected
                .into_iter()
                .map(|(_, job)| Happening::Finished(JobId(job))),
        );
        assert_eq!(due, finished);
        assert!(sim.is_empty() && sim.ends.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Spawn(u64, u64),
        Stop(u64),
        Resume(u64),
        Kill(u64),
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1u64..7, 1u64..400).prop_map(|(job, work)| Op::Spawn(job, work)),
            (1u64..7).prop_map(Op::Stop),
            (1u64..7).prop_map(Op::Resume),
            (1u64..7).prop_map(Op::Kill),
            (0u64..120).prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// With many jobs stopped, continued and killed in any order, jobs
        /// finish when their running time adds up to their work, in the
        /// order of those instants (then of ids), and the next happening is
        /// the earliest of them and of the pending stops.
        #[test]
        fn jobs_finish_in_order_of_their_work_done(ops in proptest::collection::vec(op(), 1..80)) {
            let cost = 3u64;
            let mut sim = SimActuator::new(Duration::from_micros(cost));
            // The model: work left and running since, by job; pending stops.
            let mut model: std::collections::BTreeMap<u64, (u64, Option<u64>)> = Default::default();
            let mut stops: Vec<(u64, u64)> = Vec::new();
            let mut now = 0u64;
            let mut due = Vec::new();
            for op in ops {
                match op {
                    Op::Spawn(job, work) if !model.contains_key(&job) && sim.ranks(JobId(job)).is_none() => {
                        sim.spawn(JobId(job), 1, Duration::from_micros(work), Tick(now));
                        model.insert(job, (work, Some(now)));
                    }
                    Op::Spawn(..) => {}
                    Op::Stop(job) => {
                        sim.stop(JobId(job), Tick(now));
                        if let Some((left, since)) = model.get_mut(&job) {
                            if let Some(since) = since.take() {
                                *left -= now - since;
                            }
                            stops.push((now + cost, job));
                        }
                    }
                    Op::Resume(job) => {
                        sim.resume(JobId(job), Tick(now));
                        if let Some((_, since)) = model.get_mut(&job) {
                            since.get_or_insert(now);
                        }
                    }
                    Op::Kill(job) => {
                        let had = model.remove(&job).is_some();
                        prop_assert_eq!(sim.kill(JobId(job), Tick(now)).is_some(), had);
                        stops.retain(|(_, stopping)| *stopping != job);
                    }
                    Op::Advance(step) => {
                        let ends = |model: &std::collections::BTreeMap<u64, (u64, Option<u64>)>| {
                            let mut ends: Vec<(u64, u64)> = model
                                .iter()
                                .filter_map(|(job, (left, since))| since.map(|since| (since + left, *job)))
                                .collect();
                            ends.sort_unstable();
                            ends
                        };
                        let next_end = ends(&model).first().map(|(at, _)| *at);
                        let next_stop = stops.iter().map(|(at, _)| *at).min();
                        let expected = [next_end, next_stop].into_iter().flatten().min();
                        prop_assert_eq!(sim.next(), expected.map(Tick));
                        now += step;
                        let finishing: Vec<Happening> = ends(&model)
                            .into_iter()
                            .filter(|(at, _)| *at <= now)
                            .map(|(_, job)| Happening::Finished(JobId(job)))
                            .collect();
                        for happening in &finishing {
                            if let Happening::Finished(job) = happening {
                                model.remove(&job.0);
                            }
                        }
                        due.clear();
                        sim.take_due(Tick(now), &mut due);
                        due.retain(|happening| matches!(happening, Happening::Finished(_)));
                        prop_assert_eq!(&due, &finishing);
                        stops.retain(|(at, _)| *at > now);
                    }
                }
                prop_assert_eq!(sim.len(), model.len());
                let running: u64 = model.values().filter(|(_, since)| since.is_some()).count() as u64;
                prop_assert_eq!(sim.busy(), running);
            }
        }
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
