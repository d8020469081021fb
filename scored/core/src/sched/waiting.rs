//! The waiting jobs of a queue as decisions keep them between calls, and
//! the order in which a gang queue tries them behind a reservation.
//!
//! A decision over a queue of tens of thousands of waiting jobs must not
//! look at each of them: behind a reservation most cannot start (too wide
//! for the idle hosts, or too long to end by the reservation), and which
//! ones depends only on their size and estimate. So each waiting job has a
//! number that grows along the queue and is never reused, jobs that may
//! time-share are listed by number, and the others are kept in a tree of
//! minima over their numbers (least size, least estimate), which finds the
//! next one that could start without passing over those that cannot.

use super::{JobView, Places, BRIEF_JOB};
use crate::ids::JobId;
use crate::queue::Queue;

/// What a decision asks of a waiting job: fixed for the job's life.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct WaitInfo {
    /// A cluster (index) and how many hosts it needs ([`JobView::need`]):
    /// kept, the first of the clusters it may go to ([`Places`]); while a
    /// decision tries one, that one.
    pub(super) cluster: usize,
    /// The clusters it may go to ([`JobView::clusters`]).
    pub(super) clusters: u64,
    pub(super) n_needed: usize,
    /// Its estimate ([`JobView::estimate`]).
    pub(super) estimate: Option<u64>,
}

impl WaitInfo {
    /// What is kept of `job`.
    pub(super) fn of(view: &impl JobView, job: JobId) -> WaitInfo {
        let (home, n_needed) = view.need(job);
        let places = Places {
            home,
            mask: view.clusters(job),
        };
        WaitInfo {
            cluster: places.canonical(),
            clusters: places.mask,
            n_needed,
            estimate: view.estimate(job),
        }
    }

    /// The clusters it may go to.
    pub(super) fn places(&self) -> Places {
        Places {
            home: self.cluster,
            mask: self.clusters,
        }
    }

    /// The job tried on `cluster`.
    pub(super) fn on(self, cluster: usize) -> WaitInfo {
        WaitInfo { cluster, ..self }
    }

    /// Whether the job never time-shares: its estimate is longer than a
    /// brief job's (see [`super::start_waiting`]).
    fn is_long(&self) -> bool {
        self.estimate.is_some_and(|run| run > BRIEF_JOB)
    }
}

/// The waiting jobs of a gang queue with a level (or of an exclusive
/// queue, behind its reservation), in submission order, each with its
/// [`WaitInfo`], so that a decision over thousands of them reads no job's
/// record but those that could start.
///
/// A cache: [`Waiting::sync`] makes it the queue's waiting jobs whatever
/// changed, reading the records only of jobs it has not seen. A copy (the
/// panic checkpoint) starts empty rather than copying it at every event.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    pub(super) jobs: Vec<JobId>,
    /// Per position, the job's number: numbers grow along the positions
    /// and are never reused, so a job keeps its number while jobs before
    /// it leave. (Its information is found by number: when a job leaves,
    /// the jobs behind it move up, and the less each carries the faster.)
    numbers: Vec<u64>,
    next_number: u64,
    /// The job and information of each number from `base` (`None` once
    /// the job left).
    slots: Vec<Option<(JobId, WaitInfo)>>,
    base: u64,
    /// The numbers of the jobs that may time-share (not long), ascending.
    sharers: Vec<u64>,
    /// The long jobs, by number less `base`.
    long: MinTree,
}

impl Clone for Waiting {
    fn clone(&self) -> Waiting {
        Waiting::default()
    }
}

impl Waiting {
    /// Makes `jobs` the waiting jobs of `queue`, in order. Between two
    /// decisions jobs leave (they start or end) and arrive at the back:
    /// kept jobs keep their information and number, from the first job not
    /// found further on, the rest is read afresh (whatever the change, the
    /// result is the queue's waiting jobs).
    pub(super) fn sync(&mut self, queue: &Queue, view: &impl JobView) {
        let (front, back) = queue.slices();
        let started = queue.n_started();
        let (first, second) = match front.get(started..) {
            Some(front) => (front, back),
            None => (back.get(started - front.len()..).unwrap_or(&[]), &[][..]),
        };
        let n_old = self.jobs.len();
        if n_old == first.len() + second.len()
            && self.jobs[..first.len()] == *first
            && self.jobs[first.len()..] == *second
        {
            return;
        }
        // Kept jobs come in runs (only the jobs that left break them): each
        // run is found by comparing ids and moved in one copy.
        let (mut read, mut write, mut pos) = (0, 0, 0);
        let n_new = first.len() + second.len();
        while pos < n_new {
            let new = match first.get(pos..) {
                Some(rest) if !rest.is_empty() => rest,
                _ => &second[pos - first.len()..],
            };
            let run = common_prefix(new, &self.jobs[read..n_old]);
            if run > 0 {
                if write != read {
                    self.jobs.copy_within(read..read + run, write);
                    self.numbers.copy_within(read..read + run, write);
                }
                (read, write, pos) = (read + run, write + run, pos + run);
                continue;
            }
            match self.jobs[read..n_old].iter().position(|old| *old == new[0]) {
                Some(skip) => {
                    for at in read..read + skip {
                        self.remove(at);
                    }
                    read += skip;
                }
                None => break,
            }
        }
        for at in read..n_old {
            self.remove(at);
        }
        self.jobs.truncate(write);
        self.numbers.truncate(write);
        for &job in first.iter().chain(second).skip(pos) {
            self.push(job, WaitInfo::of(view, job));
        }
    }

    /// Takes the job at position `at` out of the numbered index (its
    /// position is overwritten or cut by the caller).
    fn remove(&mut self, at: usize) {
        let number = self.numbers[at];
        let Some((_, info)) = self
            .slots
            .get_mut((number - self.base) as usize)
            .and_then(Option::take)
        else {
            return;
        };
        if info.is_long() {
            self.long.clear((number - self.base) as usize);
        } else if let Ok(idx) = self.sharers.binary_search(&number) {
            self.sharers.remove(idx);
        }
    }

    /// Appends a job at the back, with the next number.
    fn push(&mut self, job: JobId, info: WaitInfo) {
        let number = self.next_number;
        self.next_number += 1;
        self.jobs.push(job);
        self.numbers.push(number);
        if (number - self.base) as usize >= self.slots.len() {
            self.renumber_from();
        }
        self.index(number, job, info);
    }

    /// Puts the job with `number` (within the slots) in the index.
    fn index(&mut self, number: u64, job: JobId, info: WaitInfo) {
        let idx = (number - self.base) as usize;
        self.slots[idx] = Some((job, info));
        if info.is_long() {
            self.long
                .set(idx, info.n_needed, info.estimate.unwrap_or(u64::MAX));
        } else {
            self.sharers.push(number);
        }
    }

    /// Rebuilds the index with room for as many more numbers as there are
    /// live ones: slots start at the first live job. (A job at a position
    /// but not in the index, the one being pushed, is left to the caller.)
    fn renumber_from(&mut self) {
        let old_base = self.base;
        self.base = self.numbers.first().copied().unwrap_or(self.next_number);
        let span = (self.next_number - self.base) as usize;
        let size = (2 * span).max(64).next_power_of_two();
        // The jobs numbered before the new base have left (their slots are
        // empty): the slots move down to it, keeping their jobs.
        let shift = usize::try_from(self.base.saturating_sub(old_base)).unwrap_or(usize::MAX);
        self.slots.drain(..shift.min(self.slots.len()));
        self.slots.resize(size, None);
        self.sharers.clear();
        self.long.reset(size);
        for at in 0..self.numbers.len() {
            let number = self.numbers[at];
            if let Some((job, info)) = self.get(number) {
                self.index(number, job, info);
            }
        }
    }

    /// The number of the job at position `at`.
    pub(super) fn number(&self, at: usize) -> u64 {
        self.numbers[at]
    }

    /// The job at position `at` and its information.
    pub(super) fn at(&self, at: usize) -> Option<(JobId, WaitInfo)> {
        self.numbers.get(at).and_then(|number| self.get(*number))
    }

    /// The waiting job with `number` and its information.
    pub(super) fn get(&self, number: u64) -> Option<(JobId, WaitInfo)> {
        number
            .checked_sub(self.base)
            .and_then(|idx| self.slots.get(idx as usize))
            .copied()
            .flatten()
    }

    /// Panics unless `jobs` are the waiting jobs of `queue` with their
    /// information, and the index says the same (a check of debug builds).
    pub(super) fn check(&self, queue: &Queue, view: &impl JobView) {
        let fresh: Vec<JobId> = queue.order().skip(queue.n_started()).collect();
        assert_eq!(self.jobs, fresh, "the waiting jobs are not the queue's");
        for (at, job) in self.jobs.iter().enumerate() {
            assert_eq!(
                self.at(at).map(|(_, info)| info),
                Some(WaitInfo::of(view, *job)),
                "the waiting information of job {job} is stale"
            );
        }
        assert!(
            self.numbers.is_sorted_by(|a, b| a < b),
            "numbers do not grow"
        );
        assert_eq!(
            self.numbers.len(),
            self.jobs.len(),
            "jobs and numbers differ in length"
        );
        for at in 0..self.jobs.len() {
            assert_eq!(
                self.at(at).map(|(job, _)| job),
                Some(self.jobs[at]),
                "the index lost job {}",
                self.jobs[at]
            );
        }
        let live = self.slots.iter().filter(|slot| slot.is_some()).count();
        assert_eq!(live, self.jobs.len(), "the index keeps jobs that left");
        let n_long = (0..self.jobs.len())
            .filter_map(|at| self.at(at))
            .filter(|(_, info)| info.is_long())
            .count();
        assert_eq!(
            self.sharers.len() + n_long,
            self.jobs.len(),
            "sharers miscounted"
        );
    }
}

/// How many ids `a` and `b` share from their first.
fn common_prefix(a: &[JobId], b: &[JobId]) -> usize {
    let n = a.len().min(b.len());
    // Blocks of ids first: comparing a block costs little more than one id.
    let mut at = 0;
    while at + 16 <= n && a[at..at + 16] == b[at..at + 16] {
        at += 16;
    }
    at + a[at..n]
        .iter()
        .zip(&b[at..n])
        .take_while(|(a, b)| a == b)
        .count()
}

/// Long jobs by index: per node of a complete binary tree, the least size
/// and the least estimate below it (a leaf without a job holds the most of
/// both, so it never matches).
#[derive(Debug, Default)]
struct MinTree {
    size: usize,
    n_needed: Vec<usize>,
    estimate: Vec<u64>,
}

impl MinTree {
    fn reset(&mut self, size: usize) {
        self.size = size;
        self.n_needed.clear();
        self.n_needed.resize(2 * size, usize::MAX);
        self.estimate.clear();
        self.estimate.resize(2 * size, u64::MAX);
    }

    fn set(&mut self, idx: usize, n_needed: usize, estimate: u64) {
        let mut node = self.size + idx;
        self.n_needed[node] = n_needed;
        self.estimate[node] = estimate;
        while node > 1 {
            node /= 2;
            self.n_needed[node] = self.n_needed[2 * node].min(self.n_needed[2 * node + 1]);
            self.estimate[node] = self.estimate[2 * node].min(self.estimate[2 * node + 1]);
        }
    }

    fn clear(&mut self, idx: usize) {
        if idx < self.size {
            self.set(idx, usize::MAX, u64::MAX);
        }
    }

    /// The first index in `from..to` whose job needs at most `max_n` hosts
    /// and either has an estimate of at most `max_estimate` or needs at
    /// most `max_n_any` hosts.
    fn first(
        &self,
        from: usize,
        to: usize,
        max_n: usize,
        max_n_any: usize,
        max_estimate: u64,
    ) -> Option<usize> {
        let to = to.min(self.size);
        if from >= to {
            return None;
        }
        let may = |node: usize| {
            let n = self.n_needed[node];
            n <= max_n && (n <= max_n_any || self.estimate[node] <= max_estimate)
        };
        self.first_below(1, (0, self.size), (from, to), &may)
    }

    /// [`MinTree::first`] below `node`, which covers the indexes `lo..hi`:
    /// down from it, left first, skipping nodes wholly before `from` or
    /// after `to`, and nodes where no job can match. Recursive, as deep as
    /// the tree: called many times a decision, it allocates nothing.
    fn first_below(
        &self,
        node: usize,
        (lo, hi): (usize, usize),
        (from, to): (usize, usize),
        may: &impl Fn(usize) -> bool,
    ) -> Option<usize> {
        if hi <= from || lo >= to || !may(node) {
            return None;
        }
        if hi - lo == 1 {
            return Some(lo);
        }
        let mid = (lo + hi) / 2;
        self.first_below(2 * node, (lo, mid), (from, to), may)
            .or_else(|| self.first_below(2 * node + 1, (mid, hi), (from, to), may))
    }
}

/// The jobs a gang queue tries behind its reservation, in order: the short
/// ones first (by estimate, then number), then the others by number. The
/// sharers among the others are listed when the reservation is met; long
/// ones are found in [`Waiting`]'s tree as they are reached, with what the
/// decision has left (see [`Behind::next`]).
#[derive(Debug, Default, Clone)]
pub(super) struct Behind {
    shorts: Vec<(u64, u64)>,
    next_short: usize,
    sharers: Vec<u64>,
    next_sharer: usize,
    /// The next number from which long jobs are looked for.
    long_from: u64,
}

impl Behind {
    /// Starts the order behind the job with number `reserving`: `room`
    /// says, of a sharer's information, whether it could start at all in
    /// this decision; `is_short` whether it is tried first.
    pub(super) fn start(
        &mut self,
        waiting: &Waiting,
        reserving: u64,
        room: impl Fn(&WaitInfo) -> bool,
        is_short: impl Fn(&WaitInfo) -> bool,
    ) {
        self.shorts.clear();
        self.sharers.clear();
        (self.next_short, self.next_sharer) = (0, 0);
        self.long_from = reserving + 1;
        let from = waiting
            .sharers
            .partition_point(|number| *number <= reserving);
        for &number in &waiting.sharers[from..] {
            let Some((_, info)) = waiting.get(number) else {
                continue;
            };
            if !room(&info) {
                continue;
            }
            match info.estimate {
                Some(run) if is_short(&info) => self.shorts.push((run, number)),
                _ => self.sharers.push(number),
            }
        }
        self.shorts.sort_unstable();
    }

    /// The number of the next job to try, passing over long jobs that
    /// cannot start: those needing more than `max_n` hosts, or whose
    /// estimate is over `max_estimate` while they need more than
    /// `max_n_any` (the decision's idle hosts, the time to the reservation
    /// and the hosts it spares, which only shrink as jobs start).
    pub(super) fn next(
        &mut self,
        waiting: &Waiting,
        max_n: usize,
        max_n_any: usize,
        max_estimate: u64,
    ) -> Option<u64> {
        if let Some(&(_, number)) = self.shorts.get(self.next_short) {
            self.next_short += 1;
            return Some(number);
        }
        let sharer = self.sharers.get(self.next_sharer).copied();
        let to = sharer.unwrap_or(waiting.next_number);
        let long = waiting
            .long
            .first(
                self.long_from.saturating_sub(waiting.base) as usize,
                to.saturating_sub(waiting.base) as usize,
                max_n,
                max_n_any,
                max_estimate,
            )
            .map(|idx| waiting.base + idx as u64);
        match long {
            Some(number) => {
                self.long_from = number + 1;
                Some(number)
            }
            None => {
                let number = sharer?;
                self.next_sharer += 1;
                self.long_from = number + 1;
                Some(number)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_finds_the_first_long_job_that_could_start() {
        let mut tree = MinTree::default();
        tree.reset(8);
        // (size, estimate) at indexes 0..5.
        for (idx, (n, estimate)) in [(4, 900), (1, 5000), (2, 700), (1, 800), (8, 100)]
            .into_iter()
            .enumerate()
        {
            tree.set(idx, n, estimate);
        }
        // At most 2 hosts, ending within 750: index 2.
        assert_eq!(tree.first(0, 8, 2, 0, 750), Some(2));
        // Or any estimate for 1 host: index 1.
        assert_eq!(tree.first(0, 8, 2, 1, 750), Some(1));
        // From index 3 on, within 850: index 3.
        assert_eq!(tree.first(3, 8, 2, 0, 850), Some(3));
        // Not before index 3.
        assert_eq!(tree.first(0, 3, 1, 0, 850), None);
        tree.clear(3);
        assert_eq!(tree.first(3, 8, 8, 0, 850), Some(4));
        assert_eq!(tree.first(3, 8, 7, 0, u64::MAX), None);
    }
}
