//! Properties over random event sequences: the invariants after every
//! step, every gang job runs, every job ends.

use super::*;

#[derive(Debug, Clone)]
pub(super) enum Op {
    Submit { nodes: u32, queue: u32 },
    Exit { pick: usize },
    Advance { ms: u64 },
    Hold { pick: usize },
    Release { pick: usize },
    Toggle { queue: u32 },
    Kill { pick: usize },
    Confirm,
}

pub(super) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u32..=4, 0u32..3).prop_map(|(nodes, queue)| Op::Submit { nodes, queue }),
        2 => any::<usize>().prop_map(|pick| Op::Exit { pick }),
        4 => (1u64..400).prop_map(|ms| Op::Advance { ms }),
        1 => any::<usize>().prop_map(|pick| Op::Hold { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        1 => (0u32..3).prop_map(|queue| Op::Toggle { queue }),
        1 => any::<usize>().prop_map(|pick| Op::Kill { pick }),
        2 => Just(Op::Confirm),
    ]
}

pub(super) fn pick(sim: &Sim, idx: usize) -> Option<JobId> {
    let jobs: Vec<JobId> = sim.core.jobs().map(|job| job.id).collect();
    (!jobs.is_empty()).then(|| jobs[idx % jobs.len()])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Never two jobs on one host (checked by `check_invariants` after every
    /// input), stopped jobs are only continued, and everything ends.
    #[test]
    fn random_events_keep_the_invariants(ops in proptest::collection::vec(op(), 1..80), delayed in any::<bool>()) {
        let mut sim = Sim::new(4, 100);
        sim.hold_confirmations = delayed;
        for op in ops {
            match op {
                Op::Submit { nodes, queue } => { sim.submit(nodes, Some(queue)); }
                Op::Exit { pick: idx } => {
                    if let Some(job) = pick(&sim, idx) {
                        if sim.procs.get(&job).is_some_and(|(state, _)| *state == SimProcs::Running) {
                            sim.exit(job.0, 0);
                        }
                    }
                }
                Op::Advance { ms } => sim.advance(ms),
                Op::Hold { pick: idx } => if let Some(job) = pick(&sim, idx) { sim.cmd(&root(), &format!("suspend {job}")); },
                Op::Release { pick: idx } => if let Some(job) = pick(&sim, idx) { sim.cmd(&root(), &format!("resume {job}")); },
                Op::Toggle { queue } => {
                    let active = sim.core.queues()[queue as usize].activated;
                    sim.cmd(&root(), &format!("queue {queue} {}", if active { "deactivate" } else { "activate" }));
                }
                Op::Kill { pick: idx } => if let Some(job) = pick(&sim, idx) { sim.cmd(&root(), &format!("kill {job}")); },
                Op::Confirm => sim.confirm_stops(),
            }
        }
        // Drain: confirm, release every hold, activate every queue, and let
        // every job run to its end; nothing may be left stopped forever.
        sim.hold_confirmations = false;
        sim.confirm_stops();
        for queue in 0..3 { sim.cmd(&root(), &format!("queue {queue} activate")); }
        let held: Vec<JobId> = sim.core.jobs().filter(|job| job.held()).map(|job| job.id).collect();
        for job in held { sim.cmd(&root(), &format!("resume {job}")); }
        for _ in 0..10_000 {
            if sim.core.n_jobs() == 0 { break; }
            if let Some(job) = sim.running().first().copied() {
                sim.exit(job, 0);
            } else {
                sim.advance(100);
            }
        }
        prop_assert_eq!(sim.core.n_jobs(), 0, "every job ends");
        prop_assert!(sim.procs.is_empty(), "no process is left: {:?}", sim.procs);
    }

    /// In gang queues with no holds, every job runs within (number of jobs) slices.
    #[test]
    fn every_gang_job_runs_within_n_slices(sizes in proptest::collection::vec(1u32..=4, 1..12)) {
        let mut sim = Sim::new(4, 100);
        for nodes in &sizes { sim.submit(*nodes, Some(1)); }
        let n = sizes.len() as u64;
        let mut last_ran: BTreeMap<u64, u64> = BTreeMap::new();
        for slice in 0..(4 * n) {
            for job in sim.running() { last_ran.insert(job, slice); }
            for job in sim.core.jobs() {
                let since = slice - last_ran.get(&job.id.0).copied().map_or(0, |s| s.min(slice));
                prop_assert!(last_ran.contains_key(&job.id.0) || slice < n, "job {} never ran in {} slices", job.id, slice);
                prop_assert!(since <= n, "job {} waited {} slices with {} jobs", job.id, since, n);
            }
            sim.advance(100);
        }
    }

    /// A waiting job is always kept out by a running job of its own or a
    /// higher queue: lower queues only use hosts that higher ones cannot.
    #[test]
    fn priorities_are_respected(jobs in proptest::collection::vec((1u32..=2, 0u32..3), 1..10)) {
        let mut sim = Sim::new(2, 100);
        for (nodes, queue) in &jobs { sim.submit(*nodes, Some(*queue)); }
        for _ in 0..20 {
            sim.advance(100);
            let running: Vec<&Job> = sim.core.jobs().filter(|job| job.phase() == Phase::Running).collect();
            for waiting in sim.core.jobs().filter(|job| job.phase() != Phase::Running) {
                let blocker = running.iter().find(|runner| {
                    runner.queue <= waiting.queue && runner.hosts.iter().any(|host| waiting.hosts.contains(host))
                });
                // A job of an exclusive queue that has not started has no
                // hosts yet: it is kept out by an earlier job of its queue
                // (first come, first served) or by too few hosts free of
                // its own and higher queues.
                let unbound_blocked = waiting.hosts.is_empty() && {
                    let held: usize = running.iter().filter(|runner| runner.queue <= waiting.queue).map(|runner| runner.hosts.len()).sum();
                    let earlier = sim.core.jobs().any(|other| other.queue == waiting.queue && other.id < waiting.id && !other.started());
                    earlier || 2 - held < waiting.layout.len()
                };
                prop_assert!(blocker.is_some() || unbound_blocked,
                    "job {} (queue {}) waits though no job of its queue or a higher one holds its hosts",
                    waiting.id, waiting.queue);
            }
        }
    }
}

/// One step of a run on a gang queue with a level: jobs go to queue 1
/// with the estimate `time`; kills and queue switches are left out.
fn leveled_step(sim: &mut Sim, op: Op, time: Option<Duration>) {
    match op {
        Op::Submit { nodes, .. } => {
            sim.submit_timed(root(), ProcRequest::Nodes(nodes), Some(1), false, time);
        }
        Op::Exit { pick: idx } => {
            if let Some(job) = pick(sim, idx) {
                if sim
                    .procs
                    .get(&job)
                    .is_some_and(|(state, _)| *state == SimProcs::Running)
                {
                    sim.exit(job.0, 0);
                }
            }
        }
        Op::Advance { ms } => sim.advance(ms),
        Op::Hold { pick: idx } => {
            if let Some(job) = pick(sim, idx) {
                sim.cmd(&root(), &format!("suspend {job}"));
            }
        }
        Op::Release { pick: idx } => {
            if let Some(job) = pick(sim, idx) {
                sim.cmd(&root(), &format!("resume {job}"));
            }
        }
        Op::Toggle { .. } | Op::Kill { .. } => {}
        Op::Confirm => sim.confirm_stops(),
    }
}

/// Resumes every held job and lets the running ones exit until none is
/// left (or a bound is reached).
fn finish_all(sim: &mut Sim) {
    sim.confirm_stops();
    let held: Vec<JobId> = sim
        .core
        .jobs()
        .filter(|job| job.held())
        .map(|job| job.id)
        .collect();
    for job in held {
        sim.cmd(&root(), &format!("resume {job}"));
    }
    for _ in 0..10_000 {
        if sim.core.n_jobs() == 0 {
            break;
        }
        if let Some(job) = sim.running().first().copied() {
            sim.exit(job, 0);
        } else {
            sim.advance(100);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// A gang queue with a multiprogramming level never has more of its
    /// jobs on a host than the level, never runs two jobs on a host in a
    /// slice (`check_invariants` after every input), and ends every job.
    #[test]
    fn a_gang_queue_never_exceeds_its_level(
        level in 1u32..=3,
        ops in proptest::collection::vec((op(), 1u64..2_000), 1..80),
    ) {
        let mut sim = Sim::new(4, 100);
        sim.cmd(&root(), &format!("queue 1 set mpl={level}"));
        for (op, time_ms) in ops {
            leveled_step(&mut sim, op, (time_ms % 3 != 0).then(|| Duration::from_millis(time_ms)));
            let mut residents = [0u32; 4];
            for job in sim.core.jobs() {
                for host in &job.hosts {
                    residents[host.idx()] += 1;
                }
            }
            prop_assert!(residents.iter().all(|n| *n <= level), "residents {:?} above level {}", residents, level);
        }
        finish_all(&mut sim);
        prop_assert_eq!(sim.core.n_jobs(), 0, "every job ends");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// In a gang queue at its default level, a job longer than a brief one
    /// never time-shares: a host never holds two such jobs (jobs without
    /// an estimate, and brief ones, may share), and every job ends.
    #[test]
    fn jobs_longer_than_brief_never_time_share(
        ops in proptest::collection::vec((op(), 1u64..2_000), 1..80),
    ) {
        let brief = Duration::from_micros(crate::sched::BRIEF_JOB);
        let mut sim = Sim::new(4, 100);
        sim.cmd(&root(), "queue 1 set mode=gang");
        for (op, time_ms) in ops {
            let time = match time_ms % 3 {
                0 => None,
                1 => Some(Duration::from_millis(time_ms)),
                _ => Some(brief + Duration::from_secs(time_ms)),
            };
            leveled_step(&mut sim, op, time);
            let mut long = [0u32; 4];
            let mut residents = [0u32; 4];
            for job in sim.core.jobs() {
                let is_long = job.estimate.is_some_and(|estimate| estimate > brief);
                for host in &job.hosts {
                    residents[host.idx()] += 1;
                    long[host.idx()] += u32::from(is_long);
                }
            }
            prop_assert!(residents.iter().all(|n| *n <= 2), "residents {:?} above level 2", residents);
            prop_assert!(long.iter().all(|n| *n <= 1), "two long jobs share a host: {:?}", long);
        }
        finish_all(&mut sim);
        prop_assert_eq!(sim.core.n_jobs(), 0, "every job ends");
    }
}
