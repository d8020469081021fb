//! Tests of the decision's algorithms, each against small views of jobs.

use std::collections::HashMap;

use scored_proto::command::QueueMode;

use super::masks::{Masks, MASK_HOSTS, MASK_SLOTS, MASK_SLOTS_MAX, WIDE_MASK_HOSTS};
use super::matrix::Matrix;
use super::waiting::Waiting;
use super::*;
use crate::queue::Queue;

/// Jobs with fixed hosts (or none, to be chosen), one cluster of
/// `n_hosts`, and optional estimates and ends.
struct Jobs {
    hosts: HashMap<JobId, Vec<HostId>>,
    need: HashMap<JobId, usize>,
    estimate: HashMap<JobId, u64>,
    started: Vec<JobId>,
    all_hosts: Vec<HostId>,
    slice: u64,
}

impl JobView for Jobs {
    fn facts(&self, job: JobId) -> JobFacts<'_> {
        JobFacts {
            hosts: self.hosts.get(&job).map_or(&[][..], Vec::as_slice),
            runnable: true,
            started: self.started.contains(&job),
        }
    }
    fn need(&self, job: JobId) -> (usize, usize) {
        (0, self.need.get(&job).copied().unwrap_or(0))
    }
    fn cluster_hosts(&self, cluster: usize) -> &[HostId] {
        if cluster == 0 {
            &self.all_hosts
        } else {
            &[]
        }
    }
    fn fits_on(&self, _: JobId, _: HostId) -> bool {
        true
    }
    fn checks_memory(&self, _: JobId) -> bool {
        false
    }
    fn host_load(&self, _: HostId) -> u64 {
        0
    }
    fn estimate(&self, job: JobId) -> Option<u64> {
        self.estimate.get(&job).copied()
    }
    fn expected_end(&self, job: JobId) -> Option<u64> {
        self.estimate.get(&job).copied()
    }
    fn slice(&self) -> u64 {
        self.slice
    }
}

fn decide(queues: &[Queue], jobs: &HashMap<JobId, Vec<HostId>>, n_hosts: usize) -> Vec<u64> {
    let view = Jobs {
        hosts: jobs.clone(),
        need: HashMap::new(),
        estimate: HashMap::new(),
        started: Vec::new(),
        all_hosts: (0..n_hosts as u32).map(HostId).collect(),
        slice: 0,
    };
    run(queues, &view, n_hosts).0
}

fn run(queues: &[Queue], view: &Jobs, n_hosts: usize) -> (Vec<u64>, Vec<(u64, Vec<u32>)>) {
    let mut out = Vec::new();
    let mut bind = Vec::new();
    active_set(
        queues,
        n_hosts,
        [],
        view,
        0,
        true,
        &[],
        &mut Scratch::default(),
        &mut out,
        &mut bind,
    );
    (
        out.into_iter().map(|job| job.0).collect(),
        bind.into_iter()
            .map(|(job, hosts)| (job.0, hosts.into_iter().map(|h| h.0).collect()))
            .collect(),
    )
}

/// An exclusive queue 0 on `n_hosts`: started jobs `(id, hosts, end)`,
/// then waiting jobs `(id, size, estimate)` in submission order.
fn exclusive(
    n_hosts: u32,
    backfill: bool,
    running: &[(u64, &[u32], u64)],
    waiting: &[(u64, usize, Option<u64>)],
) -> Vec<(u64, Vec<u32>)> {
    let mut queue = Queue::new(0, QueueMode::Exclusive);
    queue.backfill = backfill;
    one_queue(queue, n_hosts, 0, running, waiting).1
}

/// `queue` alone on `n_hosts` with gang slices of `slice`: started jobs
/// `(id, hosts, end)`, then waiting jobs `(id, size, estimate)` in
/// submission order; gives the active set and the hosts bound.
fn one_queue(
    queue: Queue,
    n_hosts: u32,
    slice: u64,
    running: &[(u64, &[u32], u64)],
    waiting: &[(u64, usize, Option<u64>)],
) -> (Vec<u64>, Vec<(u64, Vec<u32>)>) {
    let mut queues = vec![queue];
    let mut view = Jobs {
        hosts: HashMap::new(),
        need: HashMap::new(),
        estimate: HashMap::new(),
        started: Vec::new(),
        all_hosts: (0..n_hosts).map(HostId).collect(),
        slice,
    };
    for (id, hosts, end) in running {
        queues[0].push(JobId(*id), true);
        view.hosts
            .insert(JobId(*id), hosts.iter().map(|&h| HostId(h)).collect());
        view.estimate.insert(JobId(*id), *end);
        view.started.push(JobId(*id));
    }
    for (id, size, estimate) in waiting {
        queues[0].push(JobId(*id), false);
        view.need.insert(JobId(*id), *size);
        if let Some(estimate) = estimate {
            view.estimate.insert(JobId(*id), *estimate);
        }
    }
    run(&queues, &view, n_hosts as usize)
}

#[test]
fn exclusive_without_backfill_is_first_come_first_served() {
    // Job 2 needs 3 hosts, 2 are free: job 3 (1 host) waits behind it.
    let started = exclusive(
        4,
        false,
        &[(1, &[0, 1], 100)],
        &[(2, 3, Some(10)), (3, 1, Some(10))],
    );
    assert_eq!(started, vec![]);
}

#[test]
fn first_come_first_served_holds_across_the_queues_wrap_around() {
    // The walk runs over the two slices the queue's order is kept in;
    // the first job that cannot start keeps every later one waiting,
    // in the second slice too.
    let mut queues = vec![Queue::new(0, QueueMode::Exclusive)];
    let queue = &mut queues[0];
    queue.push(JobId(10), true);
    for id in 1..=3 {
        queue.push(JobId(id), false);
    }
    queue.remove(JobId(1));
    queue.remove(JobId(2));
    queue.push(JobId(4), false);
    queue.push(JobId(5), false);
    assert_eq!(
        queue.order().map(|job| job.0).collect::<Vec<_>>(),
        [10, 3, 4, 5]
    );
    assert!(
        !queue.slices().1.is_empty(),
        "the order should wrap around: {:?}",
        queue.slices()
    );
    let view = Jobs {
        hosts: HashMap::from([(JobId(10), vec![HostId(0), HostId(1)])]),
        need: HashMap::from([(JobId(3), 4), (JobId(4), 1), (JobId(5), 1)]),
        estimate: HashMap::from([(JobId(10), 100)]),
        started: vec![JobId(10)],
        all_hosts: (0..4).map(HostId).collect(),
        slice: 0,
    };
    let (active, bound) = run(&queues, &view, 4);
    assert_eq!(active, vec![10]);
    assert!(bound.is_empty(), "{bound:?}");
}

#[test]
fn exclusive_hosts_are_chosen_at_start_from_free_ones() {
    let started = exclusive(4, false, &[(1, &[0, 2], 100)], &[(2, 2, None)]);
    assert_eq!(started, vec![(2, vec![1, 3])]);
}

#[test]
fn backfill_starts_a_job_that_ends_before_the_reservation() {
    // Job 2 (4 hosts) can start at 100 when job 1 ends. Job 3 ends at
    // 50: it backfills; job 4 would end at 200 on a host job 2 needs.
    let started = exclusive(
        4,
        true,
        &[(1, &[0, 1], 100)],
        &[(2, 4, Some(10)), (3, 1, Some(50)), (4, 1, Some(200))],
    );
    assert_eq!(started, vec![(3, vec![2])]);
}

#[test]
fn backfill_uses_hosts_the_reservation_leaves_spare() {
    // Job 2 needs 6 of 7 hosts at 100, so 1 is spare then: job 3 (no
    // estimate) may take it now; job 4 (long) may not; job 5 ends by 100.
    let started = exclusive(
        7,
        true,
        &[(1, &[0, 1, 2, 3, 4], 100)],
        &[
            (2, 6, Some(10)),
            (3, 1, None),
            (4, 1, Some(1000)),
            (5, 1, Some(50)),
        ],
    );
    assert_eq!(started, vec![(3, vec![5]), (5, vec![6])]);
}

#[test]
fn no_reservation_without_estimates_means_no_backfill() {
    let mut running = exclusive(
        4,
        true,
        &[(1, &[0, 1], u64::MAX)],
        &[(2, 4, Some(10)), (3, 1, Some(1))],
    );
    assert_eq!(running, vec![]);
    running = exclusive(
        4,
        false,
        &[(1, &[0, 1], 100)],
        &[(2, 4, Some(10)), (3, 1, Some(1))],
    );
    assert_eq!(running, vec![]);
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
fn remembered_host_masks_follow_the_jobs_hosts() {
    // Job 2 is turned away by job 1 on host 0, and its hosts are
    // remembered as a mask; once its hosts change (and the scratch is
    // told), the next decision sees the new ones.
    let (queues, mut jobs) = setup(&[(1, 1, &[0]), (1, 2, &[0, 1])]);
    let mut view = Jobs {
        hosts: jobs.clone(),
        need: HashMap::new(),
        estimate: HashMap::new(),
        started: Vec::new(),
        all_hosts: (0..3).map(HostId).collect(),
        slice: 0,
    };
    let mut scratch = Scratch::default();
    let decide = |view: &Jobs, scratch: &mut Scratch| {
        let (mut out, mut bind) = (Vec::new(), Vec::new());
        active_set(
            &queues,
            3,
            [],
            view,
            0,
            true,
            &[],
            scratch,
            &mut out,
            &mut bind,
        );
        out.into_iter().map(|job| job.0).collect::<Vec<_>>()
    };
    assert_eq!(decide(&view, &mut scratch), vec![1]);
    assert!(scratch.masks.get(JobId(2)).is_some());
    // The same decision again, from the masks.
    assert_eq!(decide(&view, &mut scratch), vec![1]);
    jobs.insert(JobId(2), vec![HostId(1), HostId(2)]);
    view.hosts = jobs;
    scratch.forget(JobId(2));
    assert_eq!(decide(&view, &mut scratch), vec![1, 2]);
    // A copy (the core's checkpoint) starts with no masks, and decides alike.
    let mut copy = scratch.clone();
    assert!(copy.masks.get(JobId(2)).is_none());
    assert_eq!(decide(&view, &mut copy), vec![1, 2]);
}

#[test]
fn machines_too_large_for_masks_decide_by_scanning_hosts() {
    let n_hosts = WIDE_MASK_HOSTS + 1;
    let (queues, jobs) = setup(&[(1, 1, &[0, 600]), (1, 2, &[600]), (1, 3, &[1])]);
    let view = Jobs {
        hosts: jobs,
        need: HashMap::new(),
        estimate: HashMap::new(),
        started: Vec::new(),
        all_hosts: (0..n_hosts as u32 + 100).map(HostId).collect(),
        slice: 0,
    };
    let mut scratch = Scratch::default();
    let (mut out, mut bind) = (Vec::new(), Vec::new());
    active_set(
        &queues,
        n_hosts + 100,
        [],
        &view,
        0,
        true,
        &[],
        &mut scratch,
        &mut out,
        &mut bind,
    );
    assert_eq!(out, vec![JobId(1), JobId(3)]);
    assert!(scratch.masks.get(JobId(2)).is_none());
}

#[test]
fn on_large_machines_only_wide_jobs_keep_masks() {
    // 1,153 hosts: masks of 19 words, kept for jobs of 10 hosts or more.
    let n_hosts = MASK_HOSTS + 1;
    let wide: Vec<u32> = (0..12).collect();
    let (queues, jobs) = setup(&[(1, 1, &wide), (1, 2, &[5]), (1, 3, &[20]), (1, 4, &[1100])]);
    let view = Jobs {
        hosts: jobs,
        need: HashMap::new(),
        estimate: HashMap::new(),
        started: Vec::new(),
        all_hosts: (0..n_hosts as u32).map(HostId).collect(),
        slice: 0,
    };
    let mut scratch = Scratch::default();
    for _ in 0..2 {
        let (mut out, mut bind) = (Vec::new(), Vec::new());
        active_set(
            &queues,
            n_hosts,
            [],
            &view,
            0,
            true,
            &[],
            &mut scratch,
            &mut out,
            &mut bind,
        );
        assert_eq!(out, vec![JobId(1), JobId(3), JobId(4)]);
    }
    assert_eq!(scratch.masks.get(JobId(1)).map(<[u64]>::len), Some(19));
    assert!(scratch.masks.get(JobId(3)).is_none());
    assert!(scratch.masks.get(JobId(4)).is_none());
}

#[test]
fn a_mask_that_cannot_be_made_leaves_its_slot_empty() {
    // A job with a host beyond the machine keeps no mask (the scan
    // decides for it), and the job whose slot it took loses its own.
    let mut masks = Masks::default();
    masks.size_for(128);
    masks.put(JobId(1), &[HostId(3)]);
    assert_eq!(masks.get(JobId(1)), Some(&[1 << 3, 0][..]));
    masks.put(JobId(1), &[HostId(5), HostId(900)]);
    assert_eq!(masks.get(JobId(1)), None);
}

#[test]
fn jobs_whose_ids_share_a_slot_both_keep_their_masks() {
    // Two unfinished jobs whose ids are a table's size apart would take
    // the slot from each other at every decision: the table grows.
    let mut masks = Masks::default();
    masks.size_for(128);
    let other = JobId(1 + MASK_SLOTS as u64);
    masks.put(JobId(1), &[HostId(3)]);
    masks.put(other, &[HostId(5), HostId(70)]);
    assert_eq!(masks.get(JobId(1)), Some(&[1 << 3, 0][..]));
    assert_eq!(masks.get(other), Some(&[1 << 5, 1 << 6][..]));
    assert_eq!(masks.slots, 2 * MASK_SLOTS);
    // A finished job's slot is taken without growing.
    masks.forget(JobId(1));
    masks.put(JobId(1 + 2 * MASK_SLOTS as u64), &[HostId(0)]);
    assert_eq!(masks.slots, 2 * MASK_SLOTS);
    assert_eq!(masks.get(JobId(1)), None);
    // At the largest size, the later job takes the slot.
    let last = JobId(7);
    masks.put(last, &[HostId(1)]);
    while masks.slots < MASK_SLOTS_MAX {
        masks.put(JobId(last.0 + masks.slots as u64), &[HostId(2)]);
    }
    assert_eq!(masks.slots, MASK_SLOTS_MAX);
    assert_eq!(masks.get(last), Some(&[1 << 1, 0][..]));
    let beyond = JobId(last.0 + MASK_SLOTS_MAX as u64);
    masks.put(beyond, &[HostId(4)]);
    assert_eq!(masks.slots, MASK_SLOTS_MAX);
    assert_eq!(masks.get(beyond), Some(&[1 << 4, 0][..]));
    assert_eq!(masks.get(last), None);
}

/// A gang queue with level 2 on `n_hosts`: started jobs `(id, hosts,
/// end)`, then waiting jobs `(id, size, estimate)` in submission order;
/// gives the active set and the hosts bound.
/// A gang queue with a level whose first `n_started` jobs started,
/// the others waiting in the order given.
fn leveled_queue(order: &[u64], n_started: usize) -> Queue {
    let mut queue = Queue::new(0, QueueMode::Gang);
    queue.mpl = Some(2);
    for (idx, id) in order.iter().enumerate() {
        queue.push(JobId(*id), idx < n_started);
    }
    queue
}

/// A view of jobs `id` needing `id % 5 + 1` hosts with estimate `id * 10`,
/// counting how many times a job's record is read.
struct Counted {
    jobs: Jobs,
    reads: std::cell::Cell<usize>,
}

impl Counted {
    fn new() -> Counted {
        Counted {
            jobs: Jobs {
                hosts: HashMap::new(),
                need: (1..100)
                    .map(|id| (JobId(id), id as usize % 5 + 1))
                    .collect(),
                estimate: (1..100).map(|id| (JobId(id), id * 10)).collect(),
                started: Vec::new(),
                all_hosts: (0..8).map(HostId).collect(),
                slice: 0,
            },
            reads: std::cell::Cell::new(0),
        }
    }

    fn check(&self, waiting: &Waiting, ids: &[u64]) {
        let jobs: Vec<u64> = waiting.jobs.iter().map(|job| job.0).collect();
        assert_eq!(jobs, ids);
        for (at, job) in waiting.jobs.iter().enumerate() {
            let (_, info) = waiting.at(at).expect("every waiting job is indexed");
            assert_eq!(info.n_needed, job.0 as usize % 5 + 1, "size of job {job}");
            assert_eq!(info.estimate, Some(job.0 * 10), "estimate of job {job}");
        }
    }
}

impl JobView for Counted {
    fn facts(&self, job: JobId) -> JobFacts<'_> {
        self.jobs.facts(job)
    }
    fn need(&self, job: JobId) -> (usize, usize) {
        self.reads.set(self.reads.get() + 1);
        self.jobs.need(job)
    }
    fn cluster_hosts(&self, cluster: usize) -> &[HostId] {
        self.jobs.cluster_hosts(cluster)
    }
    fn fits_on(&self, job: JobId, host: HostId) -> bool {
        self.jobs.fits_on(job, host)
    }
    fn checks_memory(&self, job: JobId) -> bool {
        self.jobs.checks_memory(job)
    }
    fn host_load(&self, host: HostId) -> u64 {
        self.jobs.host_load(host)
    }
    fn estimate(&self, job: JobId) -> Option<u64> {
        self.jobs.estimate(job)
    }
    fn expected_end(&self, job: JobId) -> Option<u64> {
        self.jobs.expected_end(job)
    }
    fn slice(&self) -> u64 {
        self.jobs.slice()
    }
}

#[test]
fn the_kept_waiting_jobs_follow_the_queue_reading_only_new_jobs() {
    let view = Counted::new();
    let mut waiting = Waiting::default();
    // Jobs 1 and 2 started; 3 to 7 wait.
    let mut queue = leveled_queue(&[1, 2, 3, 4, 5, 6, 7], 2);
    waiting.sync(&queue, &view);
    view.check(&waiting, &[3, 4, 5, 6, 7]);
    let reads = view.reads.get();
    // Unchanged: nothing is read.
    waiting.sync(&queue, &view);
    view.check(&waiting, &[3, 4, 5, 6, 7]);
    assert_eq!(view.reads.get(), reads);
    // Jobs 3 and 6 start, 5 ends, 8 and 9 arrive: only 8 and 9 are read.
    queue.mark_started(JobId(3));
    queue.mark_started(JobId(6));
    queue.remove(JobId(5));
    queue.push(JobId(8), false);
    queue.push(JobId(9), false);
    waiting.sync(&queue, &view);
    view.check(&waiting, &[4, 7, 8, 9]);
    assert_eq!(view.reads.get(), reads + 2);
    // Every waiting job leaves.
    for id in [4, 7, 8, 9] {
        queue.remove(JobId(id));
    }
    waiting.sync(&queue, &view);
    view.check(&waiting, &[]);
}

#[test]
fn the_kept_waiting_jobs_follow_any_reordering() {
    // A change that is not departures and arrivals at the back (a
    // queue restored, or made of other jobs): the result is still the
    // queue's waiting jobs, each with its own information.
    let view = Counted::new();
    let mut waiting = Waiting::default();
    waiting.sync(&leveled_queue(&[1, 2, 3, 4, 5, 6], 1), &view);
    view.check(&waiting, &[2, 3, 4, 5, 6]);
    for (order, n_started, expected) in [
        (&[1, 9, 2, 3, 4, 5, 6][..], 1, &[9, 2, 3, 4, 5, 6][..]),
        (&[6, 5, 4, 3, 2][..], 0, &[6, 5, 4, 3, 2][..]),
        (&[6, 5, 4, 3, 2][..], 2, &[4, 3, 2][..]),
        (&[10, 11, 4, 12, 3][..], 1, &[11, 4, 12, 3][..]),
        (&[20, 21][..], 0, &[20, 21][..]),
    ] {
        waiting.sync(&leveled_queue(order, n_started), &view);
        view.check(&waiting, expected);
    }
}

#[test]
fn the_kept_waiting_jobs_of_a_wrapped_queue_are_its_waiting_jobs() {
    // The queue's deque wraps around its storage: the waiting jobs may
    // start in either of its two slices.
    let view = Counted::new();
    let mut waiting = Waiting::default();
    let mut queue = leveled_queue(&[], 0);
    let mut model: Vec<u64> = Vec::new();
    for id in 1..60u64 {
        queue.push(JobId(id), false);
        model.push(id);
        if id % 2 == 0 {
            // The oldest waiting job starts, the oldest started one ends.
            queue.mark_started(JobId(model[0]));
            model.remove(0);
            if queue.n_started() > 3 {
                let first = queue.order().next().expect("a started job");
                queue.remove(first);
            }
        }
        waiting.sync(&queue, &view);
        view.check(&waiting, &model);
    }
}

fn leveled(
    n_hosts: u32,
    running: &[(u64, &[u32], u64)],
    waiting: &[(u64, usize, Option<u64>)],
) -> (Vec<u64>, Vec<(u64, Vec<u32>)>) {
    let mut queue = Queue::new(0, QueueMode::Gang);
    queue.mpl = Some(2);
    one_queue(queue, n_hosts, 0, running, waiting)
}

#[test]
fn a_short_job_time_shares_a_whole_column_when_doubled_it_ends_by_the_reservation() {
    // Job 1 holds every host until 100: job 2 (4 hosts) is reserved at
    // 100. Job 3 (4 hosts, 40) would end by 80 at half speed: it joins
    // job 1's column, bound now, running from a later slice.
    let (active, bound) = leveled(
        4,
        &[(1, &[0, 1, 2, 3], 100)],
        &[(2, 4, Some(10)), (3, 4, Some(40))],
    );
    assert_eq!(active, vec![1]);
    assert_eq!(bound, vec![(3, vec![0, 1, 2, 3])]);
    // At 60, doubled it would end at 120, after the reservation: it waits.
    let (_, bound) = leveled(
        4,
        &[(1, &[0, 1, 2, 3], 100)],
        &[(2, 4, Some(10)), (3, 4, Some(60))],
    );
    assert_eq!(bound, vec![]);
}

#[test]
fn the_first_waiting_job_waits_for_idle_hosts_rather_than_time_share() {
    // Job 2 could share job 1's column with the two idle hosts, but it is
    // the first waiting job: it waits; job 3 backfills the idle hosts.
    let (active, bound) = leveled(
        4,
        &[(1, &[0, 1], 100)],
        &[(2, 4, Some(10)), (3, 2, Some(50))],
    );
    assert_eq!(active, vec![1, 3]);
    assert_eq!(bound, vec![(3, vec![2, 3])]);
}

/// One second, in the decision's microseconds.
const S: u64 = 1_000_000;

#[test]
fn a_job_that_is_not_short_never_joins_hosts_at_the_level_nor_part_of_a_column() {
    // Hosts 0-1 hold two jobs (the level); job 3 lies on hosts 2-3, so a
    // 1-host job could only take part of its column: a job longer than
    // a short one waits, though it would end before the reservation.
    let (_, bound) = leveled(
        4,
        &[
            (1, &[0, 1], 1000 * S),
            (2, &[0, 1], 1000 * S),
            (3, &[2, 3], 1000 * S),
        ],
        &[(4, 4, Some(10 * S)), (5, 1, Some(2 * SHORT_JOB))],
    );
    assert_eq!(bound, vec![]);
}

#[test]
fn a_short_job_shares_the_hosts_of_the_narrowest_residents() {
    // Job 4 (all 8 hosts) is reserved. Job 5 (3 hosts, short) finds
    // one idle host and no column of width 3: it takes host 6 (a
    // 1-host resident), then host 4 (a 2-host one), and the idle host.
    // Job 6, as wide but not short, waits.
    let (active, bound) = leveled(
        8,
        &[
            (1, &[0, 1, 2, 3], 100 * S),
            (2, &[4, 5], 100 * S),
            (3, &[6], 1000 * S),
        ],
        &[
            (4, 8, Some(10 * S)),
            (5, 3, Some(SHORT_JOB)),
            (6, 3, Some(SHORT_JOB + 1)),
        ],
    );
    assert_eq!(bound, vec![(5, vec![4, 6, 7])]);
    // Its hosts are taken in this slice by jobs 2 and 3: it runs from
    // a later slice.
    assert_eq!(active, vec![1, 2, 3]);
}

#[test]
fn a_brief_job_may_delay_the_reservation_by_slowing_a_column() {
    // Job 3 (4 hosts) is reserved at 2000 s, when job 1 ends; nothing
    // is spare then. Job 4, brief, ends by then at half speed beside
    // job 1: it joins, though job 1 then ends its estimate later.
    let (_, bound) = leveled(
        4,
        &[(1, &[0, 1], 2000 * S), (2, &[2, 3], 1000 * S)],
        &[(3, 4, Some(10 * S)), (4, 2, Some(BRIEF_JOB))],
    );
    assert_eq!(bound, vec![(4, vec![0, 1])]);
}

#[test]
fn a_job_longer_than_a_brief_one_never_time_shares() {
    // Job 3 (4 hosts) is reserved at 9000 s, when job 2 ends. Job 4
    // (2 hosts) could join job 1's column and, doubled, still end by
    // then without delaying the reservation.
    let run = |estimate: u64| {
        leveled(
            4,
            &[(1, &[0, 1], 100 * S), (2, &[2, 3], 9000 * S)],
            &[(3, 4, Some(10 * S)), (4, 2, Some(estimate))],
        )
        .1
    };
    assert_eq!(run(BRIEF_JOB), vec![(4, vec![0, 1])]);
    // A longer one would stretch itself and job 1 by more than it
    // could wait: it waits for idle hosts.
    assert_eq!(run(BRIEF_JOB + S), vec![]);
}

#[test]
fn a_job_that_shares_behind_the_reservation_ends_by_it_in_whole_slices() {
    // Job 3 (2 hosts) is reserved at 30 s, when job 2 ends. Job 4 (1 s,
    // short) would share hosts 0 and 1 and take the idle host 2: at
    // half speed it ends by then, but its first turn may be a slice
    // away, and it keeps host 2 from job 3 until it ends. With slices of
    // 1 s it joins; with slices of 60 s it waits.
    let run = |slice: u64| {
        let mut queue = Queue::new(0, QueueMode::Gang);
        queue.mpl = Some(2);
        one_queue(
            queue,
            3,
            slice,
            &[(1, &[0], 1000 * S), (2, &[1], 30 * S)],
            &[(3, 2, Some(10 * S)), (4, 3, Some(S))],
        )
        .1
    };
    assert_eq!(run(S), vec![(4, vec![0, 1, 2])]);
    assert_eq!(run(60 * S), vec![]);
}

#[test]
fn jobs_without_an_estimate_time_share_within_the_level_as_they_come() {
    // As in a gang queue without a level: job 3 joins job 1's column,
    // job 4 job 2's; job 5 finds every host at the level and waits.
    let (_, bound) = leveled(
        4,
        &[(1, &[0, 1], 100), (2, &[2, 3], 100)],
        &[(3, 2, None), (4, 2, None), (5, 2, None)],
    );
    assert_eq!(bound, vec![(3, vec![0, 1]), (4, vec![2, 3])]);
    // A job with an estimate longer than a brief one waits instead.
    let (_, bound) = leveled(
        4,
        &[(1, &[0, 1], 100), (2, &[2, 3], 100)],
        &[(3, 2, Some(BRIEF_JOB + S))],
    );
    assert_eq!(bound, vec![]);
}

#[test]
fn a_job_without_an_estimate_sharing_first_leaves_its_partners_unpredicted() {
    // Job 2, interactive, starts beside job 1 on host 0 and slows it
    // for as long as it runs: job 1's hosts have no prediction then,
    // so job 3 gets no reservation and job 4 waits behind it.
    let (_, bound) = leveled(
        3,
        &[(1, &[0, 1, 2], 100)],
        &[(2, 1, None), (3, 2, Some(10)), (4, 1, Some(1))],
    );
    assert_eq!(bound, vec![(2, vec![0])]);
}

#[test]
fn behind_a_reservation_a_job_without_an_estimate_does_not_time_share() {
    // Job 3 (4 hosts) is reserved at 1000, when job 2 ends. Job 4, with
    // no estimate, could join a column but might never end: it waits;
    // job 5, brief, joins job 1's column and ends by then.
    let (_, bound) = leveled(
        4,
        &[(1, &[0, 1], 100), (2, &[2, 3], 1000)],
        &[(3, 4, Some(10)), (4, 2, None), (5, 2, Some(40))],
    );
    assert_eq!(bound, vec![(5, vec![0, 1])]);
}

#[test]
fn jobs_started_in_a_decision_count_in_its_reservation() {
    // Job 2 starts on the idle hosts 2-3 until 1000 µs; job 3 (4 hosts)
    // is then reserved at 1000, not at 100 when job 1 ends. Job 4
    // (short, 1 host) shares host 0 and, doubled, after a slice of
    // 1 µs, ends by 1000.
    let (_, bound) = leveled(
        4,
        &[(1, &[0, 1], 100)],
        &[(2, 2, Some(1000)), (3, 4, Some(10)), (4, 1, Some(499))],
    );
    assert_eq!(bound, vec![(2, vec![2, 3]), (4, vec![0])]);
}

#[test]
fn deactivated_queues_are_skipped() {
    let (mut queues, jobs) = setup(&[(0, 1, &[0]), (1, 2, &[0])]);
    queues[0].activated = false;
    assert_eq!(decide(&queues, &jobs, 1), vec![2]);
    assert_eq!(queues[0].mode, QueueMode::Exclusive);
}

/// A view of jobs on the hosts of `placed` (8 hosts, one cluster).
fn placed_view(placed: &[(u64, Vec<u32>)]) -> Jobs {
    Jobs {
        hosts: placed
            .iter()
            .map(|(id, hosts)| (JobId(*id), hosts.iter().copied().map(HostId).collect()))
            .collect(),
        need: HashMap::new(),
        estimate: HashMap::new(),
        started: Vec::new(),
        all_hosts: (0..8).map(HostId).collect(),
        slice: 1,
    }
}

proptest::proptest! {
    /// The kept matrix is the one the queues make, whatever starts,
    /// ends or takes other hosts between two decisions (the core
    /// forgets a job whose hosts change), and its open hosts are
    /// those of its counts, at every level, counted or not.
    #[test]
    fn the_kept_matrix_is_the_queues_matrix(
        steps in proptest::collection::vec(
            proptest::collection::vec((1u64..12, proptest::collection::btree_set(0u32..8, 0..4), 0u8..4), 0..10),
            1..12,
        ),
        hard in proptest::prelude::any::<u8>(),
    ) {
        let mut matrix = Matrix::default();
        let mut placed: HashMap<u64, Vec<u32>> = HashMap::new();
        for step in steps {
            // Each entry starts, moves or ends a job of queue `id % 2`.
            for (id, hosts, what) in step {
                match what {
                    0 => {
                        placed.remove(&id);
                        matrix.forget(JobId(id));
                    }
                    _ => {
                        let hosts: Vec<u32> = hosts.into_iter().collect();
                        if placed.get(&id) != Some(&hosts) {
                            matrix.forget(JobId(id));
                        }
                        placed.insert(id, hosts);
                    }
                }
            }
            let mut sorted: Vec<(u64, Vec<u32>)> = placed.clone().into_iter().collect();
            sorted.sort();
            let view = placed_view(&sorted);
            // Queue 0 gives jobs their hosts as they start (a level);
            // queue 1 at admission, so each of its jobs resides.
            let mut started = Queue::new(0, QueueMode::Gang);
            started.mpl = Some(2);
            let mut every = Queue::new(1, QueueMode::Gang);
            for (id, _) in &sorted {
                if id % 2 == 0 {
                    started.push(JobId(*id), true);
                } else {
                    every.push(JobId(*id), false);
                }
            }
            // A waiting job of the level's queue resides nowhere.
            started.push(JobId(100), false);
            let queues = [started, every];
            matrix.sync(&queues, &view, 8);
            matrix.check(&queues, &view);
            let hard = [u64::from(hard)];
            for level in 1..=6u32 {
                let (mut idle, mut bits) = (Vec::new(), Vec::new());
                matrix.open_hosts(&hard, level, |host| idle.push(host.0), &mut bits);
                let shared: Vec<u32> = (0..8).filter(|host| bits[0] & (1 << host) != 0).collect();
                let open = |host: u32| hard[0] & (1 << host) == 0 && matrix.count[host as usize] < level;
                let expected_idle: Vec<u32> = (0..8).filter(|host| open(*host) && matrix.count[*host as usize] == 0).collect();
                let expected_shared: Vec<u32> = (0..8).filter(|host| open(*host) && matrix.count[*host as usize] > 0).collect();
                proptest::prop_assert_eq!(&idle, &expected_idle, "idle hosts at level {}", level);
                proptest::prop_assert_eq!(&shared, &expected_shared, "shared hosts at level {}", level);
                // The columns among the shared hosts, against their
                // definition host by host.
                let mut columns = Vec::new();
                matrix.columns(&bits, &view, |hosts| columns.push(hosts.to_vec()));
                columns.sort();
                let mut expected = Vec::new();
                for host in shared.iter().map(|host| HostId(*host)) {
                    let residents = matrix.on(host);
                    let hosts = view.hosts(residents[0]);
                    if hosts[0] == host
                        && hosts.iter().all(|other| bits[0] & (1 << other.0) != 0 && matrix.on(*other) == residents)
                        && residents.iter().all(|job| view.hosts(*job).len() == hosts.len())
                    {
                        expected.push(hosts.to_vec());
                    }
                }
                expected.sort();
                proptest::prop_assert_eq!(columns, expected, "columns at level {}", level);
            }
        }
    }
}

/// The walk does not read a kept job's hosts again: a job whose hosts
/// change without being forgotten is still found on its old ones.
#[test]
#[should_panic(expected = "the residents of host")]
fn a_job_whose_hosts_change_unforgotten_is_found_out_by_the_check() {
    let mut matrix = Matrix::default();
    let mut queue = Queue::new(0, QueueMode::Gang);
    queue.push(JobId(1), false);
    let queues = [queue];
    matrix.sync(&queues, &placed_view(&[(1, vec![0, 1])]), 8);
    let moved = placed_view(&[(1, vec![2, 3])]);
    matrix.sync(&queues, &moved, 8);
    matrix.check(&queues, &moved);
}
