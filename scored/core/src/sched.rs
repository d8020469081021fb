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
//! time-sharing matrix those passes read (`matrix.rs`) and the waiting jobs
//! kept between decisions (`waiting.rs`).
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
mod waiting;
mod walk;

pub use level::{BRIEF_JOB, SHORT_JOB};
pub use scheduler::{CoreView, Decision, Scheduler, SchedulerState};
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
