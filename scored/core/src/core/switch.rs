//! The switch: the decision of the active set and the two phases that
//! move the jobs towards it (stop the leaving jobs; let a chosen job enter
//! only once no running or stopping job holds any of its hosts).
#![forbid(unsafe_code)]

use super::{Action, ClientEvent, Core, JobEvent, JobTable};
use crate::admission::{ClusterLimits, Ledger};
use crate::cluster::Topology;
use crate::ids::{HostId, JobId, Tick};
use crate::job::{Job, Joiner, LaunchPlan, Phase, ProcPlan};
use crate::sched;
use scored_proto::command::QueueMode;

impl Core {
    /// Recomputes the active set and moves the jobs towards it.
    pub(super) fn reschedule(&mut self, now: Tick, out: &mut Vec<Action>) {
        // Jobs given hosts by the last decision that could not start yet
        // choose again, so that none waits for particular hosts.
        if !self.bound_waiting.is_empty() {
            self.waiting_current = false;
        }
        for job in std::mem::take(&mut self.bound_waiting) {
            self.unbind(job);
        }
        let mut busy = std::mem::take(&mut self.busy);
        let mut active = std::mem::take(&mut self.active);
        let mut bindings = std::mem::take(&mut self.bindings);
        // Gang queues place jobs on the hosts they were given at admission,
        // so their active set is a function of the queues' order, which jobs
        // are runnable and which are placed first; a confirmed stop changes
        // none of these. Exclusive queues choose among free hosts and
        // reserve by the clock, so with any of them (or with hosts chosen
        // by the last decision) the set is computed afresh.
        let reuse = std::mem::take(&mut self.decision_current);
        if !reuse {
            self.decide_active(now, &busy, &mut active, &mut bindings);
        } else if cfg!(debug_assertions) {
            let mut fresh = Vec::new();
            self.decide_active(now, &busy, &mut fresh, &mut bindings);
            assert_eq!(fresh, active, "the kept active set is out of date");
            assert!(bindings.is_empty(), "the kept active set binds no host");
        }
        let keep =
            bindings.is_empty()
                && self.logged.queues.iter().all(|queue| {
                    !queue.activated || queue.mode == QueueMode::Gang || queue.is_empty()
                });
        for (job, hosts) in bindings.drain(..) {
            self.bind(job, hosts);
        }
        self.bindings = bindings;
        self.decision_current = keep;

        // Phase one: stop every running job that left the active set (the
        // decision's scratch says which job took each chosen job's first host).
        // With the last decision kept, none leaves: its stops were sent
        // when it was made, and only stops were confirmed since.
        let mut leaving = Vec::new();
        if !reuse || cfg!(debug_assertions) {
            leaving.extend(self.logged.live.iter().filter(|job| {
                let record = &self.logged.jobs[job];
                record.phase() == Phase::Running
                    && !record
                        .hosts
                        .first()
                        .is_some_and(|host| self.scratch.holds(*job, *host))
            }));
            assert!(
                !reuse || leaving.is_empty(),
                "a running job left a kept active set"
            );
        }
        for job in leaving.drain(..) {
            if self.switches.open.is_none() {
                let id = self.switches.next_id;
                self.switches.next_id += 1;
                self.switches.open = Some(id);
                self.switches.count += 1;
                out.push(Action::SwitchBegin(id));
            }
            let record = self.logged.jobs.get_mut(&job).expect("live jobs exist");
            let time_deadline = record.stop(now);
            self.n_stopping += 1;
            if let Some(deadline) = time_deadline {
                self.logged.time_deadlines.remove(&(deadline, job));
            }
            out.push(Action::Stop(job));
        }

        // Phase two: start or continue chosen jobs whose hosts are free of
        // every job that is running or still stopping.
        // With no job being stopped, every live job is running and chosen
        // (phase one stopped the others), and chosen jobs share no host:
        // no chosen job can be blocked, and its hosts need no look (the
        // second decision of a switch, once the stops are confirmed).
        let none_stopping = self.n_stopping == 0;
        let mut blocked = false;
        let mut entering = Vec::new();
        for &job in &active {
            let record = &self.logged.jobs[&job];
            if matches!(record.phase(), Phase::Running | Phase::Stopping) {
                continue;
            }
            let mask = self.scratch.mask_of(job);
            if none_stopping {
                debug_assert!(
                    !any_busy(&busy, mask, &record.hosts),
                    "job {job} is chosen on a host a running job holds"
                );
                entering.push(job);
                continue;
            }
            if any_busy(&busy, mask, &record.hosts) {
                blocked = true;
                continue;
            }
            set_busy(&mut busy, mask, &record.hosts, true);
            entering.push(job);
        }
        self.active = active;
        self.busy = busy;
        // Continue the stopped jobs first, then close the switch (its
        // latency runs from the first SIGSTOP to the last SIGCONT), and only
        // then create the processes of jobs that run for the first time, so
        // that fork and exec delay no waiting job.
        // (Entering jobs are Stopped or Idle, and continuing one changes
        // no other's phase: the second pass takes exactly the Idle ones.)
        for &job in &entering {
            if self.logged.jobs[&job].phase() == Phase::Stopped {
                self.enter(job, now, out);
            }
        }
        if let Some(id) = self.switches.open {
            if self.n_stopping == 0 && !blocked {
                self.switches.open = None;
                out.push(Action::SwitchEnd(id));
            }
        }
        for job in entering.drain(..) {
            if self.logged.jobs[&job].phase() == Phase::Idle {
                self.enter(job, now, out);
            }
        }
        if std::mem::take(&mut self.ran_refill) {
            // The jobs chosen at the slice boundary take their turn in the
            // slice, whether they run at once or once the stops they wait
            // for are confirmed. A job that enters later in the slice (in
            // what a job that ended left of it, or on hosts free when it
            // starts) keeps its place in the rotation: a remnant is not a
            // turn, so every job of a column of `level` runs a whole slice
            // in `level`.
            self.turn_pending.clear();
            self.remnant_entries = 0;
            for job in &self.active {
                let running = self
                    .logged
                    .jobs
                    .get(job)
                    .is_some_and(|record| record.phase() == Phase::Running);
                if running {
                    self.ran.insert(*job);
                } else {
                    self.turn_pending.insert(*job);
                }
            }
            debug_assert!(
                self.logged
                    .live
                    .iter()
                    .all(|job| self.logged.jobs[&job].phase() != Phase::Running
                        || self.ran.contains(&job)),
                "a running job is missing from the jobs that ran"
            );
        }
        if self.shutting_down && self.logged.jobs.is_empty() {
            out.push(Action::Exit);
        }
        #[cfg(debug_assertions)]
        self.check_invariants();
    }

    /// Computes the active set into `active`, and in `bindings` the hosts
    /// chosen for jobs that had none.
    pub(super) fn decide_active(
        &mut self,
        now: Tick,
        busy: &[u64],
        active: &mut Vec<JobId>,
        bindings: &mut Vec<(JobId, Vec<HostId>)>,
    ) {
        let jobs = &self.logged.jobs;
        let queues = &self.logged.queues;
        // Jobs being killed take their hosts first: a graceful kill must
        // let the job run to handle SIGTERM, and a job whose processes
        // may still run must keep its hosts until they are gone.
        let mut first = Vec::new();
        first.extend(self.logged.kill_deadlines.iter().map(|(_, job)| *job));
        first.extend(self.logged.live.iter().filter(|job| jobs[job].is_ending()));
        first.sort_unstable();
        first.dedup();
        let view = View {
            jobs,
            topology: &self.logged.topology,
            ledger: &self.logged.ledger,
            limits: &self.limits,
            busy,
            now,
            slice: self.logged.config.timeslice.as_micros() as u64,
        };
        sched::active_set(
            queues,
            self.logged.topology.hosts.len(),
            first.drain(..),
            &view,
            now.0,
            !self.waiting_current,
            &mut self.scratch,
            active,
            bindings,
        );
        self.waiting_current = true;
    }

    /// Gives a job that had none the hosts the decision chose for it.
    pub(super) fn bind(&mut self, job: JobId, hosts: Vec<HostId>) {
        let Some(record) = self.logged.jobs.get_mut(&job) else {
            return;
        };
        self.scratch.forget(job);
        self.logged
            .ledger
            .bind(record.cluster, &hosts, &record.layout, record.limits.memory);
        record.peak_memory = smallvec::smallvec![0; hosts.len()];
        record.hosts = hosts;
        let queue = record.queue as usize;
        let started = record.started();
        if self
            .logged
            .queues
            .get(queue)
            .is_some_and(|queue| queue.level().is_some())
        {
            // A gang queue with a level: the job joins the matrix on these
            // hosts for life, and the rotation runs it from now on.
            self.logged.queues[queue].mark_started(job);
        } else if !started {
            self.bound_waiting.insert(job);
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
        self.scratch.forget(job);
        self.logged
            .ledger
            .unbind(record.cluster, &hosts, &record.layout, record.limits.memory);
        record.peak_memory.clear();
    }

    /// Continues a stopped job or creates the processes of an idle one.
    pub(super) fn enter(&mut self, job: JobId, now: Tick, out: &mut Vec<Action>) {
        self.bound_waiting.remove(&job);
        let gang = self
            .logged
            .jobs
            .get(&job)
            .and_then(|record| self.logged.queues.get(record.queue as usize))
            .is_some_and(|queue| queue.mode == QueueMode::Gang);
        let record = self.logged.jobs.get_mut(&job).expect("chosen jobs exist");
        let phase = record.phase();
        if phase == Phase::Stopping {
            self.n_stopping -= 1;
        }
        let time_deadline = record
            .estimate
            .map(|estimate| now.after(estimate.saturating_sub(record.run_time)));
        let first_time = record.run(now, time_deadline);
        // Entering at the slice's start is a turn, and so is entering once
        // the stops of the boundary's switch are confirmed; a job entering
        // later, in the remnant of a slice, keeps its place in the rotation.
        let slice = self.logged.config.timeslice.as_micros().max(1) as u64;
        let at_start = now.0.saturating_sub(self.slice_anchor.0) % slice == 0;
        let chosen_at_start = self.turn_pending.remove(&job);
        if at_start || chosen_at_start {
            self.ran.insert(job);
        } else if gang {
            self.remnant_entries += 1;
        }
        if let Some(deadline) = time_deadline {
            self.logged.time_deadlines.insert((deadline, job));
        }
        self.logged.live.insert(job);
        let mask = self.scratch.mask_of(job);
        set_busy(&mut self.busy, mask, &record.hosts, true);
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

    /// Recomputes from the jobs themselves what the scheduling path keeps
    /// up to date as jobs change (the busy hosts, the count of stopping
    /// jobs, the crossing index), for a core rebuilt from a snapshot.
    pub(super) fn rebuild_schedule_state(&mut self) {
        self.busy = vec![0; self.logged.topology.hosts.len().div_ceil(64)];
        self.decision_current = false;
        self.n_stopping = 0;
        self.waiting_current = false;
        self.logged.crossings.clear();
        self.logged.crossing_of.clear();
        let live: Vec<JobId> = self.logged.live.iter().collect();
        for job in live {
            let Some(record) = self.logged.jobs.get(&job) else {
                continue;
            };
            for host in &record.hosts {
                set_busy(&mut self.busy, None, std::slice::from_ref(host), true);
            }
            if record.phase() == Phase::Stopping {
                self.n_stopping += 1;
            }
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
    /// Hosts where a job's processes run or are being stopped.
    busy: &'a [u64],
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

    fn cluster_hosts(&self, cluster: usize) -> &[HostId] {
        self.topology
            .clusters
            .get(cluster)
            .map_or(&[][..], |cluster| cluster.hosts.as_slice())
    }

    fn fits_on(&self, job: JobId, host: HostId) -> bool {
        self.jobs.get(&job).is_some_and(|record| {
            let limit = self
                .limits
                .get(record.cluster.idx())
                .and_then(|limits| limits.memory);
            self.ledger.memory_fits(host, record.limits.memory, limit)
        })
    }

    fn checks_memory(&self, job: JobId) -> bool {
        self.jobs.get(&job).is_some_and(|record| {
            record.limits.memory.is_some()
                && self
                    .limits
                    .get(record.cluster.idx())
                    .is_some_and(|limits| limits.memory.is_some())
        })
    }

    fn host_rank(&self, host: HostId) -> (bool, u64, u32) {
        (
            any_busy(self.busy, None, std::slice::from_ref(&host)),
            self.ledger.host_procs.get(host.idx()).copied().unwrap_or(0),
            host.0,
        )
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

/// Marks a job's hosts busy (`on`) or free in the busy bits: a word at a
/// time with the job's mask of hosts (from the decision's scratch), else
/// host by host.
#[inline]
pub(super) fn set_busy(busy: &mut [u64], mask: Option<&[u64]>, hosts: &[HostId], on: bool) {
    match mask {
        Some(mask) => {
            debug_assert_eq!(mask, &host_bits(busy.len(), hosts)[..mask.len()]);
            for (word, bits) in busy.iter_mut().zip(mask) {
                if on {
                    *word |= bits;
                } else {
                    *word &= !bits;
                }
            }
        }
        None => {
            for host in hosts {
                if let Some(word) = busy.get_mut(host.idx() / 64) {
                    let bit = 1u64 << (host.idx() % 64);
                    if on {
                        *word |= bit;
                    } else {
                        *word &= !bit;
                    }
                }
            }
        }
    }
}

/// Whether one of a job's hosts is busy (a host beyond the machine is).
#[inline]
pub(super) fn any_busy(busy: &[u64], mask: Option<&[u64]>, hosts: &[HostId]) -> bool {
    match mask {
        Some(mask) => busy.iter().zip(mask).any(|(word, bits)| word & bits != 0),
        None => hosts.iter().any(|host| {
            busy.get(host.idx() / 64)
                .is_none_or(|word| word & (1 << (host.idx() % 64)) != 0)
        }),
    }
}

/// Hosts as bits, in `words` words (for checks).
pub(super) fn host_bits(words: usize, hosts: &[HostId]) -> Vec<u64> {
    let mut bits = vec![0; words.max(1)];
    set_busy(&mut bits, None, hosts, true);
    bits
}
