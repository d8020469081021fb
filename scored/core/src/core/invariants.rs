//! The core's invariants, checked after every step in tests and debug
//! builds.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use super::{usage_limited, Core};
use crate::admission::{Ledger, Placement};
use crate::ids::{HostId, JobId, Tick};
use crate::job::Phase;
use crate::queue::Queue;
use crate::sorted::SortedSet;

impl Core {
    /// Checks the core's invariants; tests call it after every step.
    pub fn check_invariants(&self) {
        self.check_backlog();
        let mut owner: HashMap<HostId, JobId> = HashMap::new();
        for job in self.logged.jobs.values() {
            let live = matches!(job.phase(), Phase::Running | Phase::Stopping);
            assert_eq!(
                live,
                self.logged.live.contains(&job.id),
                "live set out of date for job {}",
                job.id
            );
            if live {
                for host in &job.hosts {
                    if let Some(other) = owner.insert(*host, job.id) {
                        panic!("jobs {other} and {} both hold host {host}", job.id);
                    }
                }
            }
            let in_queue = self.logged.queues[job.queue as usize]
                .order()
                .filter(|&queued| queued == job.id)
                .count();
            assert_eq!(
                in_queue, 1,
                "job {} must be in queue {} once",
                job.id, job.queue
            );
        }
        let cputime = self
            .logged
            .jobs
            .values()
            .filter(|job| job.limits.cputime.is_some());
        assert_eq!(
            cputime.count(),
            self.n_cputime_limited,
            "jobs with a CPU time limit"
        );
        let limited = self
            .logged
            .jobs
            .values()
            .filter(|job| usage_limited(&job.limits));
        assert_eq!(
            limited.count(),
            self.n_usage_limited,
            "jobs with a usage limit"
        );
        for job in self.logged.jobs.values() {
            let key = self
                .logged
                .live
                .contains(&job.id)
                .then(|| self.crossing_key(job))
                .flatten();
            assert_eq!(
                self.logged.crossing_of.get(&job.id).copied(),
                key,
                "crossing of job {} out of date",
                job.id
            );
        }
        assert_eq!(self.logged.crossing_of.len(), self.logged.crossings.len());
        for (key, job) in &self.logged.crossings {
            assert_eq!(
                self.logged.crossing_of.get(job),
                Some(key),
                "crossing of job {job}"
            );
        }
        self.sched.check(self.logged.live.iter().map(|job| {
            let record = &self.logged.jobs[&job];
            (&record.hosts[..], record.phase())
        }));
        let queued: usize = self.logged.queues.iter().map(Queue::len).sum();
        assert_eq!(
            queued,
            self.logged.jobs.len(),
            "queues hold exactly the unfinished jobs"
        );
        let mut ledger = Ledger::new(&self.logged.topology);
        for job in self.logged.jobs.values() {
            ledger.reserve(&Placement {
                cluster: job.cluster,
                hosts: job.hosts.clone(),
                layout: job.layout.to_vec(),
                limits: job.limits,
            });
        }
        assert_eq!(
            ledger, *self.logged.ledger,
            "the ledger matches the admitted jobs"
        );
        // The deadline indexes hold exactly the jobs' own deadlines.
        let kill: SortedSet<(Tick, JobId)> = self
            .logged
            .jobs
            .values()
            .filter_map(|job| job.kill_deadline().map(|deadline| (deadline, job.id)))
            .collect();
        assert_eq!(
            kill, *self.logged.kill_deadlines,
            "graceful kills in progress"
        );
        let time: SortedSet<(Tick, JobId)> = self
            .logged
            .jobs
            .values()
            .filter_map(|job| job.time_deadline().map(|deadline| (deadline, job.id)))
            .collect();
        assert_eq!(
            time, *self.logged.time_deadlines,
            "-time limits of running jobs"
        );
    }

    /// The backlog's counts agree with the jobs: each entry's admitted
    /// jobs are in the table, its ids were handed out, and a job waits in
    /// one entry at most.
    fn check_backlog(&self) {
        let mut admitted: HashMap<JobId, u32> = HashMap::new();
        for job in self.logged.jobs.values() {
            if let Some(submission) = &job.submission {
                *admitted.entry(submission.first).or_default() += 1;
            }
        }
        let mut last_end = 0;
        for (first, entry) in self.logged.backlog.entries.iter() {
            assert_eq!(*first, entry.submission.first, "backlog key of {first}");
            assert!(first.0 >= last_end, "backlog entries overlap at {first}");
            last_end = first.0 + u64::from(entry.count);
            assert!(last_end <= self.next_job, "ids of {first} not handed out");
            assert!(entry.next <= entry.count, "next of {first}");
            assert_eq!(
                admitted.get(first).copied().unwrap_or(0),
                entry.admitted,
                "admitted jobs of {first}"
            );
            let waiting = entry.n_waiting();
            assert_eq!(
                entry.ended + entry.admitted + waiting,
                entry.count,
                "jobs of {first}: ended, admitted and waiting"
            );
            assert!(
                waiting == 0 || entry.request.is_some(),
                "request of {first}"
            );
            for k in entry.waiting() {
                let id = JobId(first.0 + u64::from(k));
                assert!(
                    !self.logged.jobs.contains_key(&id),
                    "job {id} both admitted and waiting"
                );
            }
        }
    }
}
