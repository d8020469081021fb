//! Fair share by user in a gang queue's rotation (`queue Q set
//! share=user`, the default): where jobs of several users contest hosts,
//! each user's jobs together get an equal share of the turns, and within a
//! user the jobs take their turns as the rotation orders them.
//!
//! The rotation moves the jobs that ran to the back of their queue, so a
//! job's position says how long ago it last had its turn (or arrived). A
//! queue that shares by user is then regrouped, at each slice boundary,
//! on each *pool*: jobs that all have the same hosts, which no other job
//! of the queue touches (the jobs of one host, or jobs that span the same
//! hosts). At most one job of a pool runs at a time, so its turns are
//! shared exactly: the pool's jobs are ordered user by user, the user
//! whose latest job stands earliest (whose last turn is the oldest)
//! first, each user's jobs keeping their order. A user who had a turn goes
//! behind every user of the pool who had none, however many jobs it has:
//! on a pool of k users each has one turn in k, and each job of a user
//! with m jobs one in k·m. Every job still gets its turn: the pool's first
//! job always runs (nothing else can hold its hosts in the queue), and
//! users and jobs take the front in turn.
//!
//! Jobs whose hosts overlap others' only partly keep the rotation's own
//! order, as with `share=job`: there a user's narrow jobs could take its
//! turns from its wide one, which would wait for ever. So does every job
//! of a queue with one user, or with no host contested by two users.
//!
//! The order changes at slice boundaries only and is the queue's own: a
//! decision costs nothing more, a job that arrives waits at the back, and
//! a snapshot or a replay keeps it.
//!
//! Pure: a function of the queue's order, the jobs' users and hosts.
#![forbid(unsafe_code)]

use crate::ids::{HostId, JobId};
use crate::queue::Queue;

/// What the regrouping reads of a job.
pub trait Owners {
    /// The uid of the job's owner.
    fn user(&self, job: JobId) -> u32;
    /// The job's hosts (empty while they are not chosen).
    fn hosts(&self, job: JobId) -> &[HostId];
}

/// The regrouping's scratch, kept between slices so that a rotation
/// allocates nothing once the vectors have grown.
#[derive(Debug, Default, Clone)]
pub(super) struct ShareScratch {
    /// Per host: how many of the rotating jobs have it.
    on_host: Vec<usize>,
    /// (first host, position) of the rotating jobs, sorted.
    by_hosts: Vec<(u32, usize)>,
    /// One pool's jobs: (key of its user, position, job).
    pool: Vec<(usize, usize, JobId)>,
    /// One pool's users: (uid, key), by uid; the key is the position of
    /// the user's last job in the pool.
    users: Vec<(u32, usize)>,
}

impl ShareScratch {
    /// Regroups the rotating jobs of `queue` by user, pool by pool (see
    /// the module documentation), if it shares its hosts by user.
    pub(super) fn regroup(&mut self, queue: &mut Queue, jobs: &impl Owners, n_hosts: usize) {
        if !queue.shares_by_user() {
            return;
        }
        queue.permute_rotating(|order| self.regroup_order(order, jobs, n_hosts));
        // Empty between slices, as the rotation's other buffers.
        self.on_host.clear();
        self.by_hosts.clear();
        self.pool.clear();
        self.users.clear();
    }

    fn regroup_order(&mut self, order: &mut [JobId], jobs: &impl Owners, n_hosts: usize) {
        self.on_host.clear();
        self.on_host.resize(n_hosts, 0);
        self.by_hosts.clear();
        for (position, job) in order.iter().enumerate() {
            let hosts = jobs.hosts(*job);
            if hosts.is_empty() || hosts.iter().any(|host| host.idx() >= n_hosts) {
                continue;
            }
            for host in hosts {
                self.on_host[host.idx()] += 1;
            }
            self.by_hosts.push((hosts[0].0, position));
        }
        // Every job of a pool has its first host, and no other job has it:
        // the jobs by first host are the candidates, each checked whole.
        self.by_hosts.sort_unstable();
        let mut start = 0;
        while start < self.by_hosts.len() {
            let first = self.by_hosts[start].0;
            let mut end = start + 1;
            while end < self.by_hosts.len() && self.by_hosts[end].0 == first {
                end += 1;
            }
            let size = end - start;
            if size > 1 && self.on_host[first as usize] == size {
                let hosts = jobs.hosts(order[self.by_hosts[start].1]);
                let pool = hosts.iter().all(|host| self.on_host[host.idx()] == size)
                    && self.by_hosts[start + 1..end]
                        .iter()
                        .all(|(_, position)| jobs.hosts(order[*position]) == hosts);
                if pool {
                    self.regroup_pool(order, start, end, jobs);
                }
            }
            start = end;
        }
    }

    /// Orders the pool `by_hosts[start..end]` (positions, increasing)
    /// user by user, in the positions it holds.
    fn regroup_pool(&mut self, order: &mut [JobId], start: usize, end: usize, jobs: &impl Owners) {
        self.users.clear();
        for &(_, position) in &self.by_hosts[start..end] {
            let user = jobs.user(order[position]);
            match self.users.binary_search_by_key(&user, |(uid, _)| *uid) {
                Ok(at) => self.users[at].1 = position,
                Err(at) => self.users.insert(at, (user, position)),
            }
        }
        if self.users.len() < 2 {
            return;
        }
        self.pool.clear();
        for &(_, position) in &self.by_hosts[start..end] {
            let job = order[position];
            let user = jobs.user(job);
            let key = self
                .users
                .binary_search_by_key(&user, |(uid, _)| *uid)
                .map_or(position, |at| self.users[at].1);
            self.pool.push((key, position, job));
        }
        // Two users never share a key (the position of one of their jobs),
        // so each user's jobs come together, in their order.
        self.pool
            .sort_unstable_by_key(|(key, position, _)| (*key, *position));
        for (&(_, position), &(_, _, job)) in self.by_hosts[start..end].iter().zip(&self.pool) {
            order[position] = job;
        }
    }
}
