//! Exclusive queues: hosts chosen at start, `-time`, EASY backfill and
//! no starvation.

use super::*;

fn timed(sim: &mut Sim, nodes: u32, queue: u32, ms: u64) -> u64 {
    sim.submit_timed(
        root(),
        ProcRequest::Nodes(nodes),
        Some(queue),
        false,
        Some(Duration::from_millis(ms)),
    )
}

fn hosts_of(sim: &Sim, job: u64) -> Vec<u32> {
    sim.core
        .job(JobId(job))
        .map(|job| job.hosts.iter().map(|host| host.0).collect())
        .unwrap_or_default()
}

#[test]
fn exclusive_jobs_get_their_hosts_when_they_start() {
    let mut sim = Sim::new(4, 100);
    sim.submit(2, Some(0));
    sim.submit(1, Some(0));
    sim.submit(1, Some(0));
    check(
        &sim.take_log(),
        "spawn 1 stage 0 x2, spawn 2 stage 0 x1, spawn 3 stage 0 x1",
    );
    assert_eq!(hosts_of(&sim, 1), vec![0, 1]);
    sim.exit(2, 0);
    sim.exit(1, 0);
    check(&sim.take_log(), "release 2, release 1");
    // Hosts 0, 1 and 2 are free, 3 is busy: a job admitted now waits for
    // no particular host; a 3-host job takes the three free ones.
    sim.submit(3, Some(0));
    check(&sim.take_log(), "spawn 4 stage 0 x3");
    assert_eq!(hosts_of(&sim, 4), vec![0, 1, 2]);
    // A gang job still has its hosts from admission.
    sim.submit(1, Some(1));
    assert_eq!(hosts_of(&sim, 5).len(), 1);
}

#[test]
fn exclusive_queue_without_backfill_is_first_come_first_served() {
    let mut sim = Sim::new(2, 100);
    sim.submit(1, Some(0));
    sim.submit(2, Some(0));
    sim.submit(1, Some(0));
    // Job 3 would fit on the free host, but job 2 came first.
    check(&sim.take_log(), "spawn 1 stage 0 x1");
    assert!(hosts_of(&sim, 2).is_empty() && hosts_of(&sim, 3).is_empty());
    // A lower gang queue still uses the idle host (space partitioning)...
    sim.submit(1, Some(1));
    check(&sim.take_log(), "spawn 4 stage 0 x1");
    // ...and gives it up at once when the exclusive job can start.
    sim.exit(1, 0);
    check(&sim.take_log(), "release 1, stop 4, spawn 2 stage 0 x2");
    sim.exit(2, 0);
    check(&sim.take_log(), "release 2, cont 4, spawn 3 stage 0 x1");
}

#[test]
fn time_limit_ends_the_job_with_status_76_and_the_reason() {
    let mut sim = Sim::new(1, 100);
    let client = timed(&mut sim, 1, 0, 250);
    sim.advance(249);
    check(&sim.take_log(), "spawn 1 stage 0 x1");
    sim.advance(1);
    check(&sim.take_log(), "signal 1 9, release 1");
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Limit 76",
    );
    assert!(sim
        .cmd(&root(), "job 1")
        .contains("reason: killed: run time reached the time limit of 250ms (-time)\n"));
}

#[test]
fn time_limit_counts_only_the_time_a_job_runs() {
    // Two full-width gang jobs share the host: each runs half the time.
    let mut sim = Sim::new(1, 100);
    let first = timed(&mut sim, 1, 1, 250);
    sim.submit(1, Some(1));
    sim.advance(400);
    assert_eq!(
        sim.core.n_jobs(),
        2,
        "200ms of running each: no limit reached"
    );
    sim.advance(100);
    // Job 1 ran 0-100, 200-300, 400-450: its 250ms are up at 450.
    check(
        &sim.client(first),
        "admitted 1, started 1, ended 1 Limit 76",
    );
    assert_eq!(sim.now, Tick(500_000));
}

#[test]
fn a_job_ended_at_its_time_limit_lets_the_stopped_job_continue() {
    // One host, two gang jobs taking turns; job 2 reaches its limit in the
    // middle of its turn (250ms: at 550) or at a slice boundary (200ms: at
    // 400), with job 1 stopped: job 1 continues at once, and does not wait
    // for the next boundary.
    for (limit, at) in [(250, 550), (200, 400)] {
        let mut sim = Sim::new(1, 100);
        sim.submit(1, Some(1));
        let second = timed(&mut sim, 1, 1, limit);
        sim.advance(at - 1);
        assert_eq!(sim.running(), vec![2], "limit {limit}");
        sim.take_log();
        sim.advance(1);
        check(&sim.take_log(), "signal 2 9, release 2, cont 1");
        check(
            &sim.client(second),
            "admitted 2, started 2, ended 2 Limit 76",
        );
        assert_eq!(sim.running(), vec![1], "limit {limit}");
        // Alone, it keeps running across boundaries.
        sim.advance(300);
        check(&sim.take_log(), "");
        assert_eq!(sim.running(), vec![1], "limit {limit}");
    }
}

#[test]
fn backfill_starts_a_short_job_in_the_hole_without_delaying_the_wide_one() {
    let mut sim = Sim::new(4, 100);
    check(
        &sim.cmd(&root(), "queue 0 set backfill=on"),
        "queue 0: mode=exclusive cputime=none residency=none memory=none disk=none group=none backfill=on mpl=none share=user fairshare=none\n",
    );
    timed(&mut sim, 2, 0, 1050); // job 1: hosts 0-1, at most until 1050
    timed(&mut sim, 4, 0, 1000); // job 2: reserved at 1050
    timed(&mut sim, 1, 0, 2000); // job 3: would delay job 2
    timed(&mut sim, 2, 0, 950); // job 4: ends by 1050, backfills
    check(&sim.take_log(), "spawn 1 stage 0 x2, spawn 4 stage 0 x2");
    sim.advance(900);
    sim.exit(4, 0);
    check(&sim.take_log(), "release 4");
    sim.advance(100);
    sim.exit(1, 0);
    check(&sim.take_log(), "release 1, spawn 2 stage 0 x4");
    assert_eq!(
        sim.now,
        Tick(1_000_000),
        "the wide job starts when job 1 ends"
    );
    // Without backfill, job 4 would have waited behind job 2.
    let mut fcfs = Sim::new(4, 100);
    timed(&mut fcfs, 2, 0, 1000);
    timed(&mut fcfs, 4, 0, 1000);
    timed(&mut fcfs, 2, 0, 900);
    check(&fcfs.take_log(), "spawn 1 stage 0 x2");
}

#[test]
fn queues_listing_shows_backfill() {
    let mut sim = Sim::new(1, 100);
    sim.cmd(&root(), "queue 0 set backfill=on");
    let listing = sim.cmd(&root(), "queues");
    let header = listing.lines().next().unwrap_or_default().to_string();
    assert!(header.contains("BACKFILL"), "{listing}");
    let column = header.find("BACKFILL").unwrap_or(0);
    let cell = |row: usize| -> String {
        let line = listing.lines().nth(row).unwrap_or_default();
        line.get(column..)
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(
        (cell(1), cell(2)),
        ("on".to_string(), "off".to_string()),
        "{listing}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// No starvation in an exclusive queue: with jobs arriving all the time
    /// and running at most their estimate, every job starts within a bound.
    /// Without backfill the queue is exactly first come, first served, and
    /// job i starts by the time every earlier job could have run one after
    /// another; with backfill, job i starts at most one longest estimate
    /// after it reaches the head of the queue.
    #[test]
    fn exclusive_jobs_never_starve(
        jobs in proptest::collection::vec((1u32..=4, 1u64..=5, 0u64..=3, 0u64..=3), 1..25),
        backfill in any::<bool>(),
    ) {
        const UNIT: u64 = 100; // ms
        let mut sim = Sim::new(4, 100);
        if backfill { sim.cmd(&root(), "queue 0 set backfill=on"); }
        // (id, submit, run, estimate, start)
        let mut table: Vec<(u64, u64, u64, u64, Option<u64>)> = Vec::new();
        let mut next_submit = 0u64;
        let mut pending = jobs.iter().copied().collect::<VecDeque<_>>();
        let max_est = jobs.iter().map(|(_, run, slack, _)| (run + slack) * UNIT + 10).max().unwrap_or(0);
        let now_ms = |sim: &Sim| sim.now.0 / 1000;
        for _ in 0..100_000 {
            while let Some(&(nodes, run, slack, gap)) = pending.front() {
                if now_ms(&sim) < next_submit { break; }
                pending.pop_front();
                let estimate = (run + slack) * UNIT + 10;
                timed(&mut sim, nodes, 0, estimate);
                table.push((table.len() as u64 + 1, now_ms(&sim), run * UNIT, estimate, None));
                next_submit = now_ms(&sim) + gap * UNIT;
            }
            for row in table.iter_mut() {
                if row.4.is_none() && sim.procs.contains_key(&JobId(row.0)) {
                    row.4 = Some(now_ms(&sim));
                }
            }
            let due: Vec<u64> = table.iter()
                .filter(|row| row.4.is_some_and(|start| now_ms(&sim) >= start + row.2))
                .filter(|row| sim.procs.contains_key(&JobId(row.0)))
                .map(|row| row.0).collect();
            for job in due { sim.exit(job, 0); }
            if pending.is_empty() && sim.core.n_jobs() == 0 { break; }
            sim.advance(10);
        }
        prop_assert_eq!(sim.core.n_jobs(), 0, "every job ends");
        let mut previous_start = 0;
        let mut earlier_estimates = 0;
        for &(id, submit, _, estimate, start) in &table {
            let start = start.expect("every job starts");
            if backfill {
                let head_at = submit.max(previous_start);
                prop_assert!(start <= head_at + max_est + 10,
                    "job {} reached the head at {} but started at {}", id, head_at, start);
            } else {
                prop_assert!(start >= previous_start, "job {} started before an earlier job", id);
                prop_assert!(start <= submit + earlier_estimates + 10,
                    "job {} submitted at {} started at {}", id, submit, start);
            }
            previous_start = previous_start.max(start);
            earlier_estimates += estimate;
        }
    }
}

/// The workload built to starve: a full-width job behind a running one,
/// then a stream of one-host jobs. Space partitioning alone would start
/// the small jobs on the free hosts forever; first come, first served
/// starts the wide job as soon as the running job ends.
#[test]
fn a_stream_of_small_jobs_cannot_starve_a_wide_one() {
    for backfill in [false, true] {
        let mut sim = Sim::new(4, 100);
        if backfill {
            sim.cmd(&root(), "queue 0 set backfill=on");
        }
        timed(&mut sim, 1, 0, 1000);
        timed(&mut sim, 4, 0, 1000);
        for _ in 0..50 {
            // Short jobs that could always fit on the 3 free hosts, each
            // longer than what is left of job 1.
            let client = timed(&mut sim, 1, 0, 5000);
            let _ = client;
            sim.advance(100);
            let running = sim.running();
            for job in running {
                if job > 2 {
                    sim.exit(job, 0);
                }
            }
            if sim.core.job(JobId(2)).is_some_and(|job| job.started()) {
                break;
            }
            if sim.now >= Tick(1_000_000) {
                sim.exit(1, 0);
            }
        }
        assert!(
            sim.core.job(JobId(2)).is_some_and(|job| job.started()),
            "the wide job started (backfill {backfill})"
        );
        assert!(sim.now <= Tick(1_100_000), "at {:?}", sim.now);
    }
}

#[test]
fn mode_gang_brings_its_level_and_queues_shows_it() {
    let mut sim = Sim::new(4, 100);
    check(
        &sim.cmd(&root(), "queue 1 set mode=gang"),
        "queue 1: mode=gang cputime=none residency=none memory=none disk=none group=none backfill=off mpl=2 share=user fairshare=none\n",
    );
    check(
        &sim.cmd(&root(), "queue 1 set mpl=none"),
        "queue 1: mode=gang cputime=none residency=none memory=none disk=none group=none backfill=off mpl=none share=user fairshare=none\n",
    );
    check(
        &sim.cmd(&root(), "queue 1 set mode=gang mpl=3"),
        "queue 1: mode=gang cputime=none residency=none memory=none disk=none group=none backfill=off mpl=3 share=user fairshare=none\n",
    );
    let queues = sim.cmd(&root(), "queues");
    assert!(
        queues
            .lines()
            .nth(2)
            .is_some_and(|row| row.contains(" off         3 ")),
        "{queues}"
    );
    // With a level, a job gets its hosts when it starts: the two 4-host jobs
    // share the hosts within the level, and a third waits.
    sim.cmd(&root(), "queue 1 set mpl=1");
    sim.submit(4, Some(1));
    sim.submit(4, Some(1));
    check(&sim.take_log(), "spawn 1 stage 0 x4");
    let hosts: Vec<usize> = sim.core.jobs().map(|job| job.hosts.len()).collect();
    assert_eq!(hosts, vec![4, 0], "the second job has no hosts yet");
}
