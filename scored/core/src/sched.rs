//! The scheduling decision: which jobs form the active set (scored(8),
//! SCHEDULING MODEL).
//!
//! Jobs that must run first (those being killed gracefully, which need the
//! CPU to handle SIGTERM) take their hosts; then queues are visited from 0
//! down, skipping deactivated ones, and within a queue jobs are taken in
//! rotation order. A job joins when none of its hosts is already taken
//! (first fit), so lower queues fill the hosts that higher ones leave idle
//! (space partitioning) and two jobs sharing a host are never both chosen.
//!
//! Where to look, one algorithm a file: the walk over the queues and the
//! scratch it keeps between decisions (`walk.rs`), the hosts of jobs as bit
//! masks (`masks.rs`), EASY backfilling of exclusive queues (`easy.rs`),
//! gang queues with a level, whose waiting jobs start in named passes
//! (open hosts, columns, reservation, backfill; `level.rs`), the
//! time-sharing matrix those passes read (`matrix.rs`), the waiting jobs
//! kept between decisions (`waiting.rs`), and the rotation's regrouping of
//! a queue that shares its contested hosts by user (`share.rs`).
//!
//! Architecture invariant: this module performs no system call and reads
//! no clock; it is a function of its arguments.
#![forbid(unsafe_code)]

use crate::ids::{HostId, JobId};

mod easy;
mod level;
mod masks;
mod matrix;
mod scheduler;
mod share;
mod waiting;
mod walk;

pub use level::{BRIEF_JOB, SHORT_JOB};
pub use scheduler::{CoreView, Decision, Scheduler, SchedulerState};
pub use share::Owners;
pub use walk::{active_set, Scratch};

#[cfg(test)]
mod tests;

/// A job as the decision sees it.
#[derive(Debug, Clone, Copy)]
pub struct JobFacts<'a> {
    /// The job's hosts; empty while they are not chosen (a job of an
    /// exclusive queue that has not started).
    pub hosts: &'a [HostId],
    /// Whether the job may run now (not held, not ending).
    pub runnable: bool,
    /// Whether the job's processes were ever created.
    pub started: bool,
}

/// What the decision needs to know about jobs and hosts; the core supplies it.
pub trait JobView {
    /// The job, in one look-up (the decision's hot path).
    fn facts(&self, job: JobId) -> JobFacts<'_>;
    /// The job's hosts; empty while they are not chosen.
    fn hosts(&self, job: JobId) -> &[HostId] {
        self.facts(job).hosts
    }
    /// For a job whose hosts are not chosen: its cluster (index) and how
    /// many hosts it needs.
    fn need(&self, job: JobId) -> (usize, usize);
    /// For a job whose hosts are not chosen: the clusters it may be placed
    /// on, one bit a cluster (its own, [`JobView::need`]'s, among them),
    /// each needing as many hosts as its own; 0 when it goes to its own
    /// alone. A function of the job's request and the machine only.
    fn clusters(&self, _job: JobId) -> u64 {
        0
    }
    /// Whether a job may be placed on `cluster` now (the cluster's limits
    /// allow it there); asked only of clusters of [`JobView::clusters`].
    fn may_use(&self, _job: JobId, _cluster: usize) -> bool {
        true
    }
    /// How a cluster ranks among those that can take a job now, least
    /// first: its load per unit of speed, then the faster.
    fn cluster_rank(&self, _cluster: usize) -> (f64, f64) {
        (0.0, 0.0)
    }
    /// The hosts of a cluster, by index.
    fn cluster_hosts(&self, cluster: usize) -> &[HostId];
    /// Whether the job's memory fits on `host` next to what is reserved there.
    fn fits_on(&self, job: JobId, host: HostId) -> bool;
    /// Whether [`JobView::fits_on`] can ever say no for this job.
    fn checks_memory(&self, job: JobId) -> bool;
    /// How many processes admitted jobs have on `host`: among free hosts
    /// where a job runs now, a job without hosts takes the least loaded
    /// first (those where nothing runs come before, lowest number first).
    fn host_load(&self, host: HostId) -> u64;
    /// The job's run-time estimate, in microseconds.
    fn estimate(&self, job: JobId) -> Option<u64>;
    /// When the job would end, in microseconds, if it ran from now on
    /// without a stop: now plus what is left of its estimate.
    fn expected_end(&self, job: JobId) -> Option<u64>;
    /// The gang time slice, in microseconds: a job that time-shares may
    /// wait up to one for its first turn.
    fn slice(&self) -> u64;
}

/// The clusters a job may be placed on: its own alone (`mask` 0), or one
/// bit a cluster.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Places {
    pub(super) home: usize,
    pub(super) mask: u64,
}

impl Places {
    /// The places of `job` ([`JobView::need`], [`JobView::clusters`]).
    pub(super) fn of(view: &impl JobView, job: JobId) -> Places {
        Places {
            home: view.need(job).0,
            mask: view.clusters(job),
        }
    }

    /// Whether the job may go to more than one cluster.
    pub(super) fn several(self) -> bool {
        self.mask & self.mask.wrapping_sub(1) != 0
    }

    /// Each cluster, in increasing order.
    pub(super) fn each(self) -> impl Iterator<Item = usize> {
        let mut mask = self.mask;
        let mut home = (mask == 0).then_some(self.home);
        std::iter::from_fn(move || {
            if let Some(home) = home.take() {
                return Some(home);
            }
            if mask == 0 {
                return None;
            }
            let next = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            Some(next)
        })
    }

    /// A cluster that names the set whatever the job's own cluster is (the
    /// first), so that what is kept of a waiting job outlives a move.
    pub(super) fn canonical(self) -> usize {
        if self.mask == 0 {
            self.home
        } else {
            self.mask.trailing_zeros() as usize
        }
    }
}

/// Whether cluster `a` ranks before `b` for a job ([`JobView::cluster_rank`];
/// ties to the lower number).
pub(super) fn ranks_before(view: &impl JobView, a: usize, b: usize) -> bool {
    rank_order(view, a, b).is_lt()
}

/// The order of [`ranks_before`].
pub(super) fn rank_order(view: &impl JobView, a: usize, b: usize) -> std::cmp::Ordering {
    let ((load_a, speed_a), (load_b, speed_b)) = (view.cluster_rank(a), view.cluster_rank(b));
    load_a
        .total_cmp(&load_b)
        .then(speed_b.total_cmp(&speed_a))
        .then(a.cmp(&b))
}
