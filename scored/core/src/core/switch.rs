//! The switch: the scheduler's decision carried out on the jobs (hosts
//! bound, leaving jobs stopped, entering ones continued or spawned), and
//! the view of the jobs the scheduler decides on.
#![forbid(unsafe_code)]

use super::{Action, ClientEvent, Core, JobEvent, JobTable};
use crate::admission::{ClusterLimits, Ledger};
use crate::cluster::Topology;
use crate::ids::{HostId, JobId, Tick};
use crate::job::{Job, Joiner, LaunchPlan, Phase, ProcPlan};
use crate::sched;

impl Core {
    /// Asks the scheduler what runs now and carries it out.
    pub(super) fn reschedule(&mut self, now: Tick, out: &mut Vec<Action>) {
        // Jobs given hosts by the last decision that could not start yet
        // choose again, so that none waits for particular hosts.
        for job in self.sched.take_unstarted() {
            self.unbind(job);
        }
        let logged = &self.logged;
        let view = View {
            jobs: &logged.jobs,
            topology: &logged.topology,
            ledger: &logged.ledger,
            limits: &self.limits,
            now,
            slice: logged.config.timeslice.as_micros() as u64,
        };
        // Jobs being killed take their hosts first: a graceful kill must
        // let the job run to handle SIGTERM, and a job whose processes
        // may still run must keep its hosts until they are gone.
        let first = |first: &mut Vec<JobId>| {
            first.extend(logged.kill_deadlines.iter().map(|(_, job)| *job));
            first.extend(
                logged
                    .live
                    .iter()
                    .filter(|job| logged.jobs[job].is_ending()),
            );
            first.sort_unstable();
            first.dedup();
        };
        let decision = self
            .sched
            .decide(&logged.queues, first, &logged.live, &view, now);
        for (job, hosts) in decision.bind {
            self.bind(job, hosts);
        }
        for job in decision.stop {
            if self.switches.open.is_none() {
                let id = self.switches.next_id;
                self.switches.next_id += 1;
                self.switches.open = Some(id);
                self.switches.count += 1;
                out.push(Action::SwitchBegin(id));
            }
            let record = self.logged.jobs.get_mut(&job).expect("live jobs exist");
            if let Some(deadline) = record.stop(now) {
                self.logged.time_deadlines.remove(&(deadline, job));
            }
            out.push(Action::Stop(job));
        }
        // Continue the stopped jobs first, then close the switch (its
        // latency runs from the first SIGSTOP to the last SIGCONT), and only
        // then create the processes of jobs that run for the first time, so
        // that fork and exec delay no waiting job.
        for job in decision.resume {
            self.enter(job, now, out);
        }
        if let Some(id) = self.switches.open {
            if decision.settled {
                self.switches.open = None;
                out.push(Action::SwitchEnd(id));
            }
        }
        for job in decision.spawn {
            self.enter(job, now, out);
        }
        if self.shutting_down && self.logged.jobs.is_empty() {
            out.push(Action::Exit);
        }
        #[cfg(debug_assertions)]
        self.check_invariants();
    }

    /// Gives a job that had none the hosts the decision chose for it.
    pub(super) fn bind(&mut self, job: JobId, hosts: Vec<HostId>) {
        let Some(record) = self.logged.jobs.get_mut(&job) else {
            return;
        };
        let topology = &self.logged.topology;
        if let Some(cluster) = hosts.first().map(|host| topology.host(*host).cluster) {
            if cluster != record.cluster {
                // Placed on another cluster than admission's: its booking
                // there moves with it, with its layout on that cluster's hosts.
                let layout = record
                    .spec
                    .procs
                    .layout(topology.cluster(cluster).cores)
                    .unwrap_or_default();
                self.logged.ledger.move_job(
                    (record.cluster, &record.layout),
                    (cluster, &layout),
                    record.limits.disk,
                );
                record.cluster = cluster;
                record.layout = layout.into();
            }
        }
        self.logged
            .ledger
            .bind(record.cluster, &hosts, &record.layout, record.limits.memory);
        record.peak_memory = smallvec::smallvec![0; hosts.len()];
        record.hosts = hosts;
        let queue = record.queue as usize;
        if self
            .logged
            .queues
            .get(queue)
            .is_some_and(|queue| queue.level().is_some())
        {
            // A gang queue with a level: the job joins the matrix on these
            // hosts for life, and the rotation runs it from now on.
            self.logged.queues[queue].mark_started(job);
        }
    }

    /// Takes back the hosts of a job that never started.
    pub(super) fn unbind(&mut self, job: JobId) {
        let Some(record) = self.logged.jobs.get_mut(&job) else {
            return;
        };
        if record.started() || record.phase() != Phase::Idle {
            return;
        }
        let hosts = std::mem::take(&mut record.hosts);
        self.sched.hosts_changed(job);
        self.logged
            .ledger
            .unbind(record.cluster, &hosts, &record.layout, record.limits.memory);
        record.peak_memory.clear();
    }

    /// Continues a stopped job or creates the processes of an idle one.
    pub(super) fn enter(&mut self, job: JobId, now: Tick, out: &mut Vec<Action>) {
        let record = self.logged.jobs.get_mut(&job).expect("chosen jobs exist");
        let phase = record.phase();
        let time_deadline = record
            .estimate
            .map(|estimate| now.after(estimate.saturating_sub(record.run_time)));
        let first_time = record.run(now, time_deadline);
        if let Some(deadline) = time_deadline {
            self.logged.time_deadlines.insert((deadline, job));
        }
        self.logged.live.insert(job);
        match phase {
            Phase::Stopped => out.push(Action::Continue(job)),
            Phase::Idle => {
                let plan = launch_plan(record);
                record.spawned(plan.procs.len() as u32);
                let client = record.client();
                let queue = record.queue;
                if first_time {
                    self.journal(JobEvent::Started(job));
                    self.logged.queues[queue as usize].mark_started(job);
                    // Told before the processes exist, so that nothing of
                    // theirs (output, or a signal sent to scrun in answer
                    // to it) can reach the client before its start.
                    if let Some(client) = client {
                        out.push(Action::notify(client, ClientEvent::Started(job)));
                    }
                }
                out.push(Action::Spawn(Box::new(plan)));
            }
            Phase::Running | Phase::Stopping => {}
        }
        self.refresh_crossing(job);
    }

    /// Recomputes the crossing index from the live jobs, for a core
    /// rebuilt from a snapshot.
    pub(super) fn rebuild_crossings(&mut self) {
        self.logged.crossings.clear();
        self.logged.crossing_of.clear();
        let live: Vec<JobId> = self.logged.live.iter().collect();
        for job in live {
            self.refresh_crossing(job);
        }
    }
}

/// The processes to create for the job's current stage (or all stages of a pipe).
pub(super) fn launch_plan(job: &Job) -> LaunchPlan {
    let stages: Vec<usize> = match job.spec.joiner {
        Joiner::Sequence => vec![job.stage()],
        Joiner::Pipe => (0..job.spec.launch.n_stages()).collect(),
    };
    let mut procs = Vec::with_capacity(stages.len() * job.nprocs() as usize);
    for &stage in &stages {
        let mut rank = 0u32;
        for (slot, (host, count)) in job.hosts.iter().zip(&job.layout).enumerate() {
            for _ in 0..*count {
                procs.push(ProcPlan {
                    stage,
                    rank,
                    host: *host,
                    host_slot: slot,
                });
                rank += 1;
            }
        }
    }
    LaunchPlan {
        job: job.id,
        client: job.client(),
        output: job.output().cloned().unwrap_or_default(),
        name: job.name(),
        array: job.array(),
        user: job.owner.clone(),
        argv: stages
            .iter()
            .map(|&stage| job.spec.launch.stage(stage))
            .collect(),
        first_stage: stages[0],
        pipe: job.spec.joiner == Joiner::Pipe,
        nprocs: job.nprocs(),
        procs,
        hosts: job.hosts.clone(),
        env: job.spec.launch.env(),
        cwd: job.spec.launch.cwd(),
        inherited: job.spec.launch.inherited(),
    }
}

/// The core's jobs and hosts as the scheduling decision sees them.
pub(super) struct View<'a> {
    jobs: &'a JobTable,
    topology: &'a Topology,
    ledger: &'a Ledger,
    limits: &'a [ClusterLimits],
    now: Tick,
    /// The gang time slice (µs).
    slice: u64,
}

impl sched::JobView for View<'_> {
    fn facts(&self, job: JobId) -> sched::JobFacts<'_> {
        match self.jobs.get(&job) {
            Some(record) => sched::JobFacts {
                hosts: &record.hosts,
                runnable: !record.is_ending() && !record.held(),
                started: record.started(),
            },
            None => sched::JobFacts {
                hosts: &[],
                runnable: false,
                started: false,
            },
        }
    }

    fn need(&self, job: JobId) -> (usize, usize) {
        self.jobs
            .get(&job)
            .map_or((0, 0), |record| (record.cluster.idx(), record.layout.len()))
    }

    fn clusters(&self, job: JobId) -> u64 {
        let clusters = &self.topology.clusters;
        let Some(record) = self.jobs.get(&job) else {
            return 0;
        };
        if clusters.len() < 2 || clusters.len() > 64 {
            return 0;
        }
        // The clusters where its request takes as many hosts as on its own
        // (so that what the decision keeps of it holds on each).
        let n_hosts = record.layout.len();
        clusters
            .iter()
            .enumerate()
            .filter(|(_, cluster)| {
                cluster.hosts.len() >= n_hosts
                    && record
                        .spec
                        .procs
                        .layout(cluster.cores)
                        .is_some_and(|layout| {
                            layout.len() == n_hosts
                                && layout.iter().all(|procs| *procs <= cluster.cores)
                        })
            })
            .fold(0, |mask, (idx, _)| mask | 1 << idx)
    }

    fn may_use(&self, job: JobId, cluster: usize) -> bool {
        let Some(record) = self.jobs.get(&job) else {
            return false;
        };
        if record.cluster.idx() == cluster {
            return true;
        }
        // A job keeps the limits admission gave it: it goes to another
        // cluster only where they hold, and where what it books there needs
        // no check against what others book (no job count, no disk of its
        // own under a disk limit).
        let limits = self.limits.get(cluster).copied().unwrap_or_default();
        limits.jobs.is_none()
            && (record.limits.disk.is_none() || limits.disk.is_none())
            && match (record.limits.memory, limits.memory) {
                (Some(need), Some(limit)) => need <= limit,
                _ => true,
            }
    }

    fn cluster_rank(&self, cluster: usize) -> (f64, f64) {
        let (Some(record), Some(procs)) = (
            self.topology.clusters.get(cluster),
            self.ledger.cluster_procs.get(cluster),
        ) else {
            return (f64::MAX, 0.0);
        };
        let slots = record.hosts.len() as f64 * f64::from(record.cores.max(1));
        (*procs as f64 / slots / record.speed, record.speed)
    }

    fn cluster_hosts(&self, cluster: usize) -> &[HostId] {
        self.topology
            .clusters
            .get(cluster)
            .map_or(&[][..], |cluster| cluster.hosts.as_slice())
    }

    fn fits_on(&self, job: JobId, host: HostId) -> bool {
        self.jobs.get(&job).is_some_and(|record| {
            let limit = self
                .topology
                .hosts
                .get(host.idx())
                .and_then(|host| self.limits.get(host.cluster.idx()))
                .and_then(|limits| limits.memory);
            self.ledger.memory_fits(host, record.limits.memory, limit)
        })
    }

    fn checks_memory(&self, job: JobId) -> bool {
        self.jobs.get(&job).is_some_and(|record| {
            record.limits.memory.is_some()
                && self.limits.iter().any(|limits| limits.memory.is_some())
        })
    }

    fn host_load(&self, host: HostId) -> u64 {
        self.ledger.host_procs.get(host.idx()).copied().unwrap_or(0)
    }

    fn estimate(&self, job: JobId) -> Option<u64> {
        let estimate = self.jobs.get(&job)?.estimate?;
        Some(estimate.as_micros() as u64)
    }

    fn expected_end(&self, job: JobId) -> Option<u64> {
        let record = self.jobs.get(&job)?;
        let left = record
            .estimate?
            .saturating_sub(record.run_time_at(self.now));
        Some(self.now.after(left).0)
    }

    fn slice(&self) -> u64 {
        self.slice
    }
}

impl sched::CoreView for View<'_> {
    fn state(&self, job: JobId) -> (Phase, &[HostId]) {
        self.jobs
            .get(&job)
            .map_or((Phase::Idle, &[][..]), |record| {
                (record.phase(), record.hosts.as_slice())
            })
    }

    fn queue(&self, job: JobId) -> usize {
        self.jobs
            .get(&job)
            .map_or(usize::MAX, |record| record.queue as usize)
    }
}
