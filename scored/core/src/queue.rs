//! Priority queues (sc_console(8), `queues` and `queue`): their states, attributes and the
//! rotation order of their jobs.
//!
//! A queue accepts submissions while *enabled* and has its jobs scheduled
//! while *activated*; the two switches are independent, as in LSF
//! (open/close × active/inactive) and CUPS, and `activate` implies `enable`.
//! So SCore-D's three states are: disabled, enabled but deactivated, and
//! activated; a disabled queue that is still activated keeps running the
//! jobs it already has (it drains).
//!
//! Pure: no clock, no system calls.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::time::Duration;

use crate::fairshare::DecayedUsage;
use crate::ids::JobId;
use scored_proto::command::{QueueMode, QueueShare};

/// The number of queues scored has, as SCore-D boots.
pub const DEFAULT_QUEUES: u32 = 3;

/// The multiprogramming level that `mode=gang` sets when no `mpl=` comes
/// with it: at most this many of a gang queue's jobs on a host (the best
/// level by the replays of BENCHMARKS.md).
pub const DEFAULT_MPL: u32 = 2;

/// One priority queue. Queue 0 is the most favoured.
#[derive(Debug, Clone, PartialEq)]
pub struct Queue {
    /// Its number, which is its priority (0 first).
    pub number: u32,
    /// Accepts submissions.
    pub enabled: bool,
    /// Its jobs are scheduled.
    pub activated: bool,
    /// Gang (time-shared) or exclusive.
    pub mode: QueueMode,
    /// CPU time limit given to jobs at submission.
    pub cputime: Option<Duration>,
    /// CPU time after which a job moves to the next queue.
    pub residency: Option<Duration>,
    /// Share of the cluster memory limit a job gets (percent).
    pub memory_pct: Option<f64>,
    /// Share of the cluster disk limit a job gets (percent).
    pub disk_pct: Option<f64>,
    /// Only members of this group may submit.
    pub group: Option<u32>,
    /// The group's name, when it was given by name.
    pub group_name: Option<String>,
    /// EASY backfilling (exclusive queues): the first waiting job gets a
    /// reservation, and later jobs start out of order only if they do not
    /// delay it.
    pub backfill: bool,
    /// Gang queues: the multiprogramming level, at most this many jobs on
    /// a host (`None`, as queues boot: unbounded, every job placed at
    /// admission; `mode=gang` sets [`DEFAULT_MPL`]).
    pub mpl: Option<u32>,
    /// Gang queues: what a host contested by several users' jobs is
    /// shared between, its users or its jobs (`sched/share.rs`).
    pub share: QueueShare,
    /// Queues whose jobs wait (exclusive, or gang with a level): the
    /// half-life of the usage that orders the waiting jobs behind the
    /// first, least used user first (`None`: submission order).
    pub fairshare: Option<Duration>,
    /// The users' usage since `fairshare` was set, decayed by it.
    pub usage: DecayedUsage,
    /// Its unfinished jobs in scheduling order. In a gang queue the jobs that
    /// ran in a slice move to the back at its end; in an exclusive queue,
    /// and in a gang queue with a level, the started jobs stay in front (in
    /// the order they started, or rotating), the waiting ones behind them
    /// in submission order.
    order: VecDeque<JobId>,
    /// How many jobs at the front of `order` have started (queues whose
    /// jobs get hosts when they start only).
    started_prefix: usize,
    /// How many of its jobs each user has (uid, jobs), by uid: whether
    /// several users share the queue is known without a pass over it.
    users: Vec<(u32, usize)>,
}

impl Queue {
    /// A queue as SCore-D boots it: enabled, activated, no limits.
    pub fn new(number: u32, mode: QueueMode) -> Queue {
        Queue {
            number,
            enabled: true,
            activated: true,
            mode,
            cputime: None,
            residency: None,
            memory_pct: None,
            disk_pct: None,
            group: None,
            group_name: None,
            backfill: false,
            mpl: None,
            share: QueueShare::default(),
            fairshare: None,
            usage: DecayedUsage::default(),
            order: VecDeque::new(),
            started_prefix: 0,
            users: Vec::new(),
        }
    }

    /// The default queues: 0 exclusive, the others gang.
    pub fn defaults() -> Vec<Queue> {
        (0..DEFAULT_QUEUES)
            .map(|number| {
                Queue::new(
                    number,
                    if number == 0 {
                        QueueMode::Exclusive
                    } else {
                        QueueMode::Gang
                    },
                )
            })
            .collect()
    }

    /// The state word `queues` shows: `activated`, `deactivated` (accepts
    /// submissions, schedules none) or `disabled` (accepts none).
    pub fn state_word(&self) -> &'static str {
        match (self.enabled, self.activated) {
            (true, true) => "activated",
            (true, false) => "deactivated",
            // A disabled queue may still run the jobs it has (it drains);
            // listings show that in a column of its own.
            (false, _) => "disabled",
        }
    }

    /// Whether the queue's jobs get their hosts when they start, so that
    /// its order keeps the started jobs in front of the waiting ones: an
    /// exclusive queue, or a gang queue with a multiprogramming level.
    pub fn starts_late(&self) -> bool {
        self.mode == QueueMode::Exclusive || self.mpl.is_some()
    }

    /// The level of a gang queue that has one.
    pub fn level(&self) -> Option<u32> {
        (self.mode == QueueMode::Gang).then_some(self.mpl).flatten()
    }

    /// How many jobs at the front of the order have started (those of a
    /// queue that [`Queue::starts_late`]; 0 otherwise).
    pub fn n_started(&self) -> usize {
        self.started_prefix
    }

    /// How many jobs from the front of the order a gang rotation moves:
    /// the started ones of a queue with a level, else all.
    fn rotating(&self) -> usize {
        if self.starts_late() {
            self.started_prefix
        } else {
            self.order.len()
        }
    }

    /// The jobs in scheduling order.
    pub fn order(&self) -> impl Iterator<Item = JobId> + '_ {
        self.order.iter().copied()
    }

    /// The jobs in scheduling order, as the two slices the order is kept
    /// in (the walk of a decision runs over them without an iterator's
    /// wrap-around arithmetic).
    pub fn slices(&self) -> (&[JobId], &[JobId]) {
        self.order.as_slices()
    }

    /// How many unfinished jobs the queue holds.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether the queue holds no job.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Adds a job of user 0 (see [`Queue::push_by`]).
    pub fn push(&mut self, job: JobId, started: bool) {
        self.push_by(job, started, 0);
    }

    /// Adds a job of user `user` at the back; `started` says whether it
    /// already ran (a job moved in from another queue).
    pub fn push_by(&mut self, job: JobId, started: bool, user: u32) {
        if self.starts_late() && started {
            self.order.insert(self.started_prefix, job);
            self.started_prefix += 1;
        } else {
            self.order.push_back(job);
        }
        self.count_user(user, true);
    }

    /// Undoes the [`Queue::push_by`] of a job of `user` that was the last
    /// change to the queue (a rollback of the panic checkpoint, `crate::undo`).
    pub fn unpush(&mut self, started: bool, user: u32) {
        let popped = if self.starts_late() && started && self.started_prefix > 0 {
            self.started_prefix -= 1;
            self.order.remove(self.started_prefix)
        } else {
            self.order.pop_back()
        };
        if popped.is_some() {
            self.count_user(user, false);
        }
    }

    /// Removes a job of user 0 (see [`Queue::remove_by`]).
    pub fn remove(&mut self, job: JobId) -> bool {
        self.remove_by(job, 0)
    }

    /// Removes a job of user `user`; returns whether it was there.
    pub fn remove_by(&mut self, job: JobId, user: u32) -> bool {
        match self.order.iter().position(|&queued| queued == job) {
            Some(idx) => {
                self.order.remove(idx);
                if idx < self.started_prefix {
                    self.started_prefix -= 1;
                }
                self.count_user(user, false);
                true
            }
            None => false,
        }
    }

    /// Counts a job of `user` in (`add`) or out.
    fn count_user(&mut self, user: u32, add: bool) {
        match self.users.binary_search_by_key(&user, |(uid, _)| *uid) {
            Ok(at) if add => self.users[at].1 += 1,
            Ok(at) => {
                self.users[at].1 -= 1;
                if self.users[at].1 == 0 {
                    self.users.remove(at);
                }
            }
            Err(at) if add => self.users.insert(at, (user, 1)),
            Err(_) => {}
        }
    }

    /// Whether jobs of more than one user are in the queue.
    pub fn several_users(&self) -> bool {
        self.users.len() > 1
    }

    /// Whether the queue shares its contested hosts between users: a gang
    /// queue with `share=user` that holds jobs of several users.
    pub fn shares_by_user(&self) -> bool {
        self.mode == QueueMode::Gang && self.share == QueueShare::User && self.several_users()
    }

    /// Records that a job started: in a queue that [`Queue::starts_late`]
    /// it joins the started jobs in front, after those that started earlier
    /// (in a gang queue, at the back of the rotation).
    pub fn mark_started(&mut self, job: JobId) {
        if !self.starts_late() {
            return;
        }
        if let Some(idx) = self.order.iter().position(|&queued| queued == job) {
            if idx >= self.started_prefix {
                self.order.remove(idx);
                self.order.insert(self.started_prefix, job);
                self.started_prefix += 1;
            }
        }
    }

    /// End of a slice in a gang queue: the jobs for which `ran` is true move
    /// to the back, keeping their relative order; the others move up.
    pub fn rotate(&mut self, ran: impl Fn(JobId) -> bool) {
        self.rotate_with(ran, &mut Vec::new());
    }

    /// [`Queue::rotate`], setting the jobs that ran aside in `spare` (left
    /// empty), so that a rotation at every slice allocates nothing.
    pub fn rotate_with(&mut self, ran: impl Fn(JobId) -> bool, spare: &mut Vec<JobId>) {
        self.rotate_at_most(ran, usize::MAX, spare);
    }

    /// [`Queue::rotate_with`], told that at most `at_most` of the queue's
    /// jobs ran: once that many are found, the rest of the order moves up
    /// in one copy without a membership test per job. The jobs that ran
    /// are the last decision's, which a first-fit walk takes mostly from
    /// the front, so a rotation costs the front of the queue, not all of it.
    pub fn rotate_at_most(
        &mut self,
        ran: impl Fn(JobId) -> bool,
        at_most: usize,
        spare: &mut Vec<JobId>,
    ) {
        if self.mode != QueueMode::Gang || at_most == 0 {
            return;
        }
        // One pass, one membership test per job: the jobs that ran are set
        // aside while the others move up, then appended in their order.
        // The pass runs over the deque made one slice, which saves the
        // wrap-around arithmetic of each access (a deque that wrapped
        // around is moved once, which costs what the pass costs; after a
        // rotation it mostly has not).
        spare.clear();
        let limit = self.rotating();
        let partial = limit < self.order.len();
        let order = self.order.make_contiguous();
        if partial {
            // Only the started jobs in front rotate: the jobs that ran go
            // to the back of them, the waiting ones behind stay put.
            let order = &mut order[..limit];
            let mut kept = 0;
            let mut idx = 0;
            while idx < order.len() && spare.len() < at_most {
                let job = order[idx];
                if ran(job) {
                    spare.push(job);
                } else {
                    order[kept] = job;
                    kept += 1;
                }
                idx += 1;
            }
            order.copy_within(idx.., kept);
            let from = order.len() - spare.len();
            order[from..].copy_from_slice(spare);
            spare.clear();
            return;
        }
        let mut kept = 0;
        let mut idx = 0;
        while idx < order.len() && spare.len() < at_most {
            let job = order[idx];
            if ran(job) {
                spare.push(job);
            } else {
                order[kept] = job;
                kept += 1;
            }
            idx += 1;
        }
        // The jobs after the last one that ran move up over the gap.
        order.copy_within(idx.., kept);
        let len = order.len() - spare.len();
        self.order.truncate(len);
        self.order.extend(spare.drain(..));
    }

    /// A rotation that knows where the jobs that ran are: `placed` gives
    /// (position, job) in increasing position (where the last decision
    /// took them) and `ran_here` how many of the queue's jobs ran. When
    /// the placed jobs are exactly those (each still at its position,
    /// each one that ran, as many as ran), they move to the back in a few
    /// copies of the stretches between them, with no test of the other
    /// jobs, and the result is [`Queue::rotate_with`]'s; otherwise nothing
    /// changes and it returns false. `spare` and `positions` are left empty.
    pub fn rotate_placed(
        &mut self,
        placed: impl Iterator<Item = (usize, JobId)>,
        ran_here: usize,
        ran: impl Fn(JobId) -> bool,
        spare: &mut Vec<JobId>,
        positions: &mut Vec<usize>,
    ) -> bool {
        if self.mode != QueueMode::Gang {
            return true;
        }
        spare.clear();
        positions.clear();
        for (position, job) in placed {
            let in_order = positions.last().is_none_or(|last| *last < position);
            if !in_order || self.order.get(position) != Some(&job) || !ran(job) {
                spare.clear();
                positions.clear();
                return false;
            }
            spare.push(job);
            positions.push(position);
        }
        if spare.len() != ran_here {
            spare.clear();
            positions.clear();
            return false;
        }
        let limit = self.rotating();
        if positions.last().is_some_and(|last| *last >= limit) {
            spare.clear();
            positions.clear();
            return false;
        }
        let partial = limit < self.order.len();
        let order = self.order.make_contiguous();
        // Each stretch after a job that ran moves left by the number of
        // jobs that ran before it.
        let rotating = &mut order[..limit];
        for (nth, &position) in positions.iter().enumerate() {
            let end = positions.get(nth + 1).copied().unwrap_or(rotating.len());
            rotating.copy_within(position + 1..end, position - nth);
        }
        if partial {
            let from = limit - spare.len();
            rotating[from..].copy_from_slice(spare);
            spare.clear();
            positions.clear();
            return true;
        }
        let len = order.len() - spare.len();
        self.order.truncate(len);
        self.order.extend(spare.drain(..));
        positions.clear();
        true
    }

    /// Lets `permute` reorder the jobs a gang rotation moves (see
    /// [`Queue::rotate`]); it must leave the same jobs, which is all the
    /// slice it is given allows.
    pub fn permute_rotating(&mut self, permute: impl FnOnce(&mut [JobId])) {
        if self.mode != QueueMode::Gang {
            return;
        }
        let limit = self.rotating();
        permute(&mut self.order.make_contiguous()[..limit]);
    }

    /// Lets `permute` reorder the waiting jobs behind the first of a queue
    /// that [`Queue::starts_late`] (the first keeps its place, and with it
    /// its reservation); it must leave the same jobs, which is all the
    /// slice it is given allows.
    pub fn permute_waiting(&mut self, permute: impl FnOnce(&mut [JobId])) {
        if !self.starts_late() || self.order.len() <= self.started_prefix + 1 {
            return;
        }
        let from = self.started_prefix + 1;
        permute(&mut self.order.make_contiguous()[from..]);
    }

    /// Changes the mode; the order is kept, and an exclusive queue's started
    /// jobs are recomputed by the caller through `mark_started`.
    pub fn set_mode(&mut self, mode: QueueMode) {
        self.mode = mode;
        self.started_prefix = 0;
    }

    /// Changes the multiprogramming level; like [`Queue::set_mode`], the
    /// caller recomputes the started jobs through `mark_started`.
    pub fn set_mpl(&mut self, mpl: Option<u32>) {
        self.mpl = mpl;
        self.started_prefix = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(queue: &Queue) -> Vec<u64> {
        queue.order().map(|job| job.0).collect()
    }

    #[test]
    fn gang_rotation_moves_jobs_that_ran_to_the_back() {
        let mut queue = Queue::new(1, QueueMode::Gang);
        for id in 1..=4 {
            queue.push(JobId(id), false);
        }
        queue.rotate(|job| job.0 == 1 || job.0 == 3);
        assert_eq!(ids(&queue), vec![2, 4, 1, 3]);
    }

    #[test]
    fn rotation_of_a_queue_that_wrapped_around_keeps_the_order() {
        // Jobs leave at the front and arrive at the back until the deque's
        // storage wraps around; rotations still move exactly the jobs that
        // ran to the back, in their order.
        let mut queue = Queue::new(1, QueueMode::Gang);
        let mut model: Vec<u64> = Vec::new();
        for id in 1..=40u64 {
            queue.push(JobId(id), false);
            model.push(id);
            if id % 3 == 0 {
                let first = model.remove(0);
                assert!(queue.remove(JobId(first)));
            }
            let ran = |job: u64| job % 4 == id % 4 || job % 7 == 0;
            queue.rotate(|job| ran(job.0));
            let (moved, stayed): (Vec<u64>, Vec<u64>) = model.iter().partition(|job| ran(**job));
            model = stayed.into_iter().chain(moved).collect();
            assert_eq!(ids(&queue), model, "after job {id}");
        }
    }

    #[test]
    fn a_rotation_told_how_many_ran_moves_the_same_jobs() {
        // Told the number of jobs that ran (or more), a rotation stops
        // testing at the last of them and gives the order a full pass gives.
        for ran_ids in [
            vec![],
            vec![1],
            vec![3, 7],
            vec![2, 5, 9],
            vec![10],
            vec![1, 10],
        ] {
            for extra in [0, 1, 5] {
                let mut told = Queue::new(1, QueueMode::Gang);
                let mut full = Queue::new(1, QueueMode::Gang);
                for id in 1..=10 {
                    told.push(JobId(id), false);
                    full.push(JobId(id), false);
                }
                // Wrap the order around, as a queue that lived a while.
                for queue in [&mut told, &mut full] {
                    queue.remove(JobId(1));
                    queue.remove(JobId(2));
                    queue.push(JobId(1), false);
                    queue.push(JobId(2), false);
                }
                let ran = |job: JobId| ran_ids.contains(&job.0);
                told.rotate_at_most(ran, ran_ids.len() + extra, &mut Vec::new());
                full.rotate(ran);
                assert_eq!(ids(&told), ids(&full), "ran {ran_ids:?}, told {extra} more");
            }
        }
    }

    #[test]
    fn a_rotation_of_placed_jobs_matches_a_full_one_or_declines() {
        let make = || {
            let mut queue = Queue::new(1, QueueMode::Gang);
            for id in 1..=10 {
                queue.push(JobId(id), false);
            }
            // Wrap the order around, as a queue that lived a while.
            queue.remove(JobId(1));
            queue.remove(JobId(2));
            queue.push(JobId(1), false);
            queue.push(JobId(2), false);
            queue
        };
        let position = |queue: &Queue, id: u64| queue.order().position(|job| job.0 == id).unwrap();
        for ran_ids in [vec![], vec![3], vec![3, 7], vec![4, 9, 2], vec![2]] {
            let mut placed_queue = make();
            let mut full = make();
            let placed: Vec<(usize, JobId)> = {
                let mut placed: Vec<_> = ran_ids
                    .iter()
                    .map(|&id| (position(&placed_queue, id), JobId(id)))
                    .collect();
                placed.sort();
                placed
            };
            let ran = |job: JobId| ran_ids.contains(&job.0);
            let (mut spare, mut positions) = (Vec::new(), Vec::new());
            assert!(placed_queue.rotate_placed(
                placed.iter().copied(),
                ran_ids.len(),
                ran,
                &mut spare,
                &mut positions
            ));
            full.rotate(ran);
            assert_eq!(ids(&placed_queue), ids(&full), "ran {ran_ids:?}");
            assert!(spare.is_empty() && positions.is_empty());
        }
        // Declined, with the order unchanged: a job that ran but was not
        // placed; a placed job no longer at its position; one that did not run.
        let ran = |job: JobId| job.0 == 3 || job.0 == 5;
        let mut queue = make();
        let before = ids(&queue);
        let at3 = position(&queue, 3);
        let at5 = position(&queue, 5);
        let (mut spare, mut positions) = (Vec::new(), Vec::new());
        assert!(!queue.rotate_placed(
            [(at3, JobId(3))].into_iter(),
            2,
            ran,
            &mut spare,
            &mut positions
        ));
        assert!(!queue.rotate_placed(
            [(at3, JobId(3)), (at5 + 1, JobId(5))].into_iter(),
            2,
            ran,
            &mut spare,
            &mut positions
        ));
        let at6 = position(&queue, 6);
        assert!(!queue.rotate_placed(
            [(at3, JobId(3)), (at6, JobId(6))].into_iter(),
            2,
            ran,
            &mut spare,
            &mut positions
        ));
        assert_eq!(ids(&queue), before);
        assert!(spare.is_empty() && positions.is_empty());
    }

    #[test]
    fn exclusive_started_jobs_stay_in_front() {
        let mut queue = Queue::new(0, QueueMode::Exclusive);
        for id in 1..=3 {
            queue.push(JobId(id), false);
        }
        queue.mark_started(JobId(3));
        queue.rotate(|_| true);
        assert_eq!(ids(&queue), vec![3, 1, 2]);
        queue.mark_started(JobId(2));
        assert_eq!(ids(&queue), vec![3, 2, 1]);
        queue.remove(JobId(3));
        queue.push(JobId(9), true);
        assert_eq!(ids(&queue), vec![2, 9, 1]);
    }

    #[test]
    fn state_words() {
        let mut queue = Queue::new(1, QueueMode::Gang);
        assert_eq!(queue.state_word(), "activated");
        queue.activated = false;
        assert_eq!(queue.state_word(), "deactivated");
        queue.enabled = false;
        assert_eq!(queue.state_word(), "disabled");
    }
}
