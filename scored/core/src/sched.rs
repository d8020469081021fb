//! The scheduling decision: which jobs form the active set (SPEC §8).
//!
//! Jobs that must run first (those being killed gracefully, which need the
//! CPU to handle SIGTERM) take their hosts; then queues are visited from 0
//! down, skipping deactivated ones, and within a queue jobs are taken in
//! rotation order. A job joins when none of its hosts is already taken
//! (first fit), so lower queues fill the hosts that higher ones leave idle
//! (space partitioning) and two jobs sharing a host are never both chosen.
//!
//! Architecture invariant: this module performs no system call and reads
//! no clock; it is a function of its arguments.
#![forbid(unsafe_code)]

use crate::ids::{HostId, JobId};
use crate::queue::Queue;

/// Scratch space for [`active_set`], kept between calls so that a decision
/// over tens of thousands of jobs allocates nothing.
#[derive(Debug, Default)]
pub struct Scratch {
    taken: Vec<bool>,
}

/// Computes the active set into `out` (cleared first).
///
/// - `first`: jobs placed before any queue, in order (still first fit).
/// - `hosts_of(job)`: the job's hosts.
/// - `runnable(job)`: whether the job may run now (not held, not ended).
pub fn active_set<'a>(
    queues: &[Queue],
    n_hosts: usize,
    first: impl IntoIterator<Item = JobId>,
    hosts_of: impl Fn(JobId) -> &'a [HostId],
    runnable: impl Fn(JobId) -> bool,
    scratch: &mut Scratch,
    out: &mut Vec<JobId>,
) {
    out.clear();
    scratch.taken.clear();
    scratch.taken.resize(n_hosts, false);
    let mut free_hosts = n_hosts;
    // Takes the job's hosts if all are free; returns how many it took.
    let try_take = |job: JobId, taken: &mut Vec<bool>, out: &mut Vec<JobId>| -> usize {
        let hosts = hosts_of(job);
        if hosts
            .iter()
            .any(|host| taken.get(host.idx()).copied().unwrap_or(true))
        {
            return 0;
        }
        for host in hosts {
            taken[host.idx()] = true;
        }
        out.push(job);
        hosts.len()
    };
    for job in first {
        free_hosts = free_hosts.saturating_sub(try_take(job, &mut scratch.taken, out));
    }
    for queue in queues {
        if !queue.activated {
            continue;
        }
        for job in queue.order() {
            // Once every host is taken nothing more can join: tens of
            // thousands of queued jobs cost nothing then.
            if free_hosts == 0 {
                return;
            }
            if runnable(job) {
                free_hosts = free_hosts.saturating_sub(try_take(job, &mut scratch.taken, out));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::QueueMode;
    use std::collections::HashMap;

    fn decide(queues: &[Queue], jobs: &HashMap<JobId, Vec<HostId>>, n_hosts: usize) -> Vec<u64> {
        let mut out = Vec::new();
        active_set(
            queues,
            n_hosts,
            [],
            |job| jobs[&job].as_slice(),
            |_| true,
            &mut Scratch::default(),
            &mut out,
        );
        out.into_iter().map(|job| job.0).collect()
    }

    fn setup(spec: &[(u32, u64, &[u32])]) -> (Vec<Queue>, HashMap<JobId, Vec<HostId>>) {
        let mut queues = Queue::defaults();
        let mut jobs = HashMap::new();
        for (queue, id, hosts) in spec {
            queues[*queue as usize].push(JobId(*id), false);
            jobs.insert(JobId(*id), hosts.iter().map(|&h| HostId(h)).collect());
        }
        (queues, jobs)
    }

    #[test]
    fn higher_queues_first_then_fill_idle_hosts() {
        let (queues, jobs) = setup(&[(1, 1, &[0, 1]), (0, 2, &[0]), (2, 3, &[1]), (1, 4, &[1])]);
        assert_eq!(decide(&queues, &jobs, 2), vec![2, 4]);
    }

    #[test]
    fn deactivated_queues_are_skipped() {
        let (mut queues, jobs) = setup(&[(0, 1, &[0]), (1, 2, &[0])]);
        queues[0].activated = false;
        assert_eq!(decide(&queues, &jobs, 1), vec![2]);
        assert_eq!(queues[0].mode, QueueMode::Exclusive);
    }
}
