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
//! Architecture invariant: this module performs no system call and reads
//! no clock; it is a function of its arguments.
#![forbid(unsafe_code)]

use crate::ids::{HostId, JobId};
use crate::queue::Queue;
use scored_proto::command::QueueMode;

mod matrix;
mod waiting;

use matrix::Matrix;
use waiting::{Behind, WaitInfo, Waiting};

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
    /// Preference among free hosts when choosing: the first field says
    /// whether a job runs there now (hosts where nothing runs are taken
    /// first, lowest number first); among the others, lowest rank first.
    fn host_rank(&self, host: HostId) -> (bool, u64, u32);
    /// The job's run-time estimate, in microseconds.
    fn estimate(&self, job: JobId) -> Option<u64>;
    /// When the job would end, in microseconds, if it ran from now on
    /// without a stop: now plus what is left of its estimate.
    fn expected_end(&self, job: JobId) -> Option<u64>;
    /// The gang time slice, in microseconds: a job that time-shares may
    /// wait up to one for its first turn.
    fn slice(&self) -> u64;
}

/// Scratch space for [`active_set`], kept between calls so that a decision
/// over tens of thousands of jobs allocates nothing.
#[derive(Debug, Default, Clone)]
pub struct Scratch {
    /// The hosts taken so far, one bit a host (64 hosts a word).
    taken: Vec<u64>,
    /// The job that took each taken host, and the decision that gave it
    /// (`decision`): its expected end is asked only when a reservation is
    /// computed, and whether a job was chosen by its first host. A job
    /// that took the hosts it was given at admission is written at its
    /// first host only, and listed in `unwritten` until a reservation needs
    /// the others: a gang decision takes hundreds of hosts and asks about
    /// none of them.
    holder: Vec<(JobId, u64)>,
    /// Jobs whose hosts but the first are not yet written in `holder`.
    unwritten: Vec<JobId>,
    /// How many decisions this scratch has served.
    decision: u64,
    /// The cluster of each host, and free hosts per cluster.
    host_cluster: Vec<usize>,
    /// Whether every host is in one cluster and each cluster's hosts are
    /// in increasing order, so that the machine's hosts taken in order
    /// are each cluster's in its order.
    clusters_in_order: bool,
    cluster_free: Vec<usize>,
    candidates: Vec<HostId>,
    ends: Vec<u64>,
    masks: Masks,
    /// Where the last decision took the jobs of gang queues: the queue's
    /// index, the job's position in its order, and the job, in the order
    /// of the walk (so by queue, then position).
    placed: Vec<(usize, usize, JobId)>,
    /// The hosts taken before a gang queue with a level took its started
    /// jobs (one bit a host).
    hard: Vec<u64>,
    /// The matrix as the waiting jobs of a gang queue with a level see it
    /// (see [`Matrix`]), rebuilt at each decision that considers them.
    matrix: Matrix,
    /// Per queue (by index), its waiting jobs as the last decision that
    /// considered them saw them (see [`Waiting`]).
    waiting: Vec<Waiting>,
    /// The jobs behind a gang queue's reservation, in the order they are
    /// tried (see [`Behind`]).
    behind: Behind,
    /// The lists a gang queue's decision over its waiting jobs fills.
    lists: Lists,
}

/// The lists [`start_waiting`] fills, kept between decisions so that one
/// allocates none once they have grown; each is emptied before use.
#[derive(Debug, Default, Clone)]
struct Lists {
    /// Per cluster, its idle open hosts.
    idle: Vec<Vec<HostId>>,
    /// The open hosts that have residents (one bit a host), and how many
    /// each cluster has.
    shared: Vec<u64>,
    n_shared: Vec<usize>,
    /// Per cluster, its columns as (offset in `column_hosts`, width).
    blocks: Vec<Vec<(usize, usize)>>,
    column_hosts: Vec<HostId>,
    /// The hosts given to a job.
    chosen: Vec<HostId>,
    /// The open shared hosts given to a short job.
    partial: Vec<HostId>,
    /// Per cluster, the least size for which its open hosts fell short.
    no_partial: Vec<usize>,
}

/// One empty list per cluster, in what `lists` allocated.
fn per_cluster<T>(mut lists: Vec<Vec<T>>, n_clusters: usize) -> Vec<Vec<T>> {
    lists.resize_with(n_clusters, Vec::new);
    lists.iter_mut().for_each(Vec::clear);
    lists
}

impl Scratch {
    /// The hosts of `job` as bits (one a host, 64 hosts a word), if the
    /// walk has met it since its hosts last changed.
    #[inline]
    pub fn mask_of(&self, job: JobId) -> Option<&[u64]> {
        self.masks.get(job)
    }

    /// Whether the last [`active_set`] put `job`, whose first host is
    /// `first_host`, in the active set: a membership test that costs one
    /// look-up, where searching the set would cost a sort of it at every
    /// decision.
    pub fn holds(&self, job: JobId, first_host: HostId) -> bool {
        self.holder.get(first_host.idx()) == Some(&(job, self.decision))
    }

    /// Where the last [`active_set`] took the jobs of gang queue `queue`
    /// (its index): (position in the queue's order at that time, job), by
    /// position. A rotation uses it to move them without searching.
    pub fn placed_in(&self, queue: usize) -> impl Iterator<Item = (usize, JobId)> + '_ {
        self.placed
            .iter()
            .filter(move |(index, _, _)| *index == queue)
            .map(|&(_, position, job)| (position, job))
    }

    /// Whether the decision has given `host` to a job (a host beyond the
    /// machine counts as taken: no job may have it).
    #[inline]
    fn is_taken(&self, host: HostId) -> bool {
        self.taken
            .get(host.idx() / 64)
            .is_none_or(|word| word & (1 << (host.idx() % 64)) != 0)
    }
}

/// How many slots [`Masks`] starts with, and the most it grows to (powers
/// of two).
const MASK_SLOTS: usize = 1024;
const MASK_SLOTS_MAX: usize = 16384;

/// Up to this many hosts, [`Masks`] keeps every job's hosts as bits.
/// Masks pay for the wide jobs of parallel machines (a job of hundreds of
/// hosts is checked and taken a word at a time); on larger machines, of
/// one-host jobs by the thousand, reading a mask costs more than the one
/// host it stands for.
const MASK_HOSTS: usize = 1152;

/// Up to this many hosts, [`Masks`] keeps the hosts of jobs of at least
/// half as many hosts as a mask has words, where a mask is still cheaper
/// to read than the hosts.
const WIDE_MASK_HOSTS: usize = 16384;

/// The hosts of jobs the walk has met, as bit masks (one bit a host), so
/// that whether a job of a gang queue is turned away costs a few word
/// ANDs with the taken hosts rather than a scan of its hosts and a read of
/// its record. On a fragmented machine the walk turns away most of a gang
/// queue at every decision, and scanning their hosts would be most of a
/// decision's cost.
///
/// A cache: each job id has one slot (`id mod` the number of slots, so
/// that the consecutive ids of a queue do not collide), and an empty cache
/// gives the same decisions. Two unfinished jobs whose ids share a slot
/// would take it from each other at every decision, so the table doubles
/// when a job takes the slot of another that has not finished (up to
/// [`MASK_SLOTS_MAX`]; beyond that, the later job takes the slot). The
/// core drops the mask of a job that finishes or whose hosts change
/// ([`Scratch::forget`]), so a mask always holds the job's hosts. Kept for
/// every job on machines of at most [`MASK_HOSTS`] hosts (a mask is then at
/// most 18 words), for wide jobs only up to [`WIDE_MASK_HOSTS`]. A copy
/// of the core (the panic checkpoint) starts with an empty cache rather
/// than copying it at every event.
#[derive(Debug, Default)]
struct Masks {
    /// Words per mask; 0 until the first decision sizes the cache (and
    /// while the machine is too large for it).
    words: usize,
    /// The fewest hosts of a job that keeps a mask.
    min_width: usize,
    /// How many slots the table has (a power of two, or 0).
    slots: usize,
    /// Per slot, `1 + words` words: the job's id plus one (0: empty), then
    /// its mask, so that a look-up reads one place.
    table: Vec<u64>,
}

impl Clone for Masks {
    fn clone(&self) -> Masks {
        Masks::default()
    }
}

impl Masks {
    #[inline]
    fn base(&self, job: JobId) -> usize {
        ((job.0 as usize) & (self.slots - 1)) * (1 + self.words)
    }

    /// Sizes the cache for `n_hosts`, emptying it if that changes.
    fn size_for(&mut self, n_hosts: usize) {
        let words = if n_hosts <= WIDE_MASK_HOSTS {
            n_hosts.div_ceil(64).max(1)
        } else {
            0
        };
        self.min_width = if n_hosts <= MASK_HOSTS {
            0
        } else {
            words.div_ceil(2)
        };
        if words != self.words || (words > 0 && self.slots == 0) {
            self.words = words;
            self.slots = if words > 0 { MASK_SLOTS } else { 0 };
            self.table = vec![0; self.slots * (1 + words)];
        }
    }

    /// The mask of `job`, if remembered.
    #[inline]
    fn get(&self, job: JobId) -> Option<&[u64]> {
        if self.slots == 0 {
            return None;
        }
        let base = self.base(job);
        (self.table[base] == job.0.wrapping_add(1))
            .then(|| &self.table[base + 1..base + 1 + self.words])
    }

    /// Remembers the hosts of `job`.
    fn put(&mut self, job: JobId, hosts: &[HostId]) {
        if self.slots == 0 {
            return;
        }
        let mut base = self.base(job);
        while self.table[base] != 0
            && self.table[base] != job.0.wrapping_add(1)
            && self.slots < MASK_SLOTS_MAX
        {
            self.grow();
            base = self.base(job);
        }
        // The slot's previous job loses its mask before it is overwritten.
        self.table[base] = 0;
        let mask = &mut self.table[base + 1..base + 1 + self.words];
        mask.fill(0);
        for host in hosts {
            match mask.get_mut(host.idx() / 64) {
                Some(word) => *word |= 1 << (host.idx() % 64),
                // A host beyond the machine: leave the job to the scan.
                None => return,
            }
        }
        self.table[base] = job.0.wrapping_add(1);
    }

    /// Doubles the table, keeping every mask (two jobs that shared a slot
    /// may still share one; [`Masks::put`] grows again then).
    fn grow(&mut self) {
        let stride = 1 + self.words;
        let old = std::mem::take(&mut self.table);
        self.slots *= 2;
        self.table = vec![0; self.slots * stride];
        for entry in old.chunks_exact(stride) {
            if entry[0] != 0 {
                let base = self.base(JobId(entry[0] - 1));
                if self.table[base] == 0 {
                    self.table[base..base + stride].copy_from_slice(entry);
                }
            }
        }
    }

    /// How many of `jobs`, from the first, have a remembered mask that
    /// overlaps `taken`: the jobs a gang queue's walk turns away without
    /// reading their records. One loop per mask width, so that the taken
    /// hosts stay in registers and each job costs a load and a few ANDs.
    fn turned_away(&self, jobs: &[JobId], taken: &[u64]) -> usize {
        match self.words {
            1 => self.turned_away_w::<1>(jobs, taken),
            2 => self.turned_away_w::<2>(jobs, taken),
            3 => self.turned_away_w::<3>(jobs, taken),
            4 => self.turned_away_w::<4>(jobs, taken),
            5 => self.turned_away_w::<5>(jobs, taken),
            6 => self.turned_away_w::<6>(jobs, taken),
            7 => self.turned_away_w::<7>(jobs, taken),
            8 => self.turned_away_w::<8>(jobs, taken),
            _ => self.turned_away_wide(jobs, taken),
        }
    }

    /// [`Masks::turned_away`] for masks of more than 8 words.
    fn turned_away_wide(&self, jobs: &[JobId], taken: &[u64]) -> usize {
        jobs.iter()
            .position(|job| !self.get(*job).is_some_and(|mask| overlaps(mask, taken)))
            .unwrap_or(jobs.len())
    }

    fn turned_away_w<const W: usize>(&self, jobs: &[JobId], taken: &[u64]) -> usize {
        let Some(taken) = taken
            .get(..W)
            .and_then(|words| <[u64; W]>::try_from(words).ok())
        else {
            return 0;
        };
        let slot_mask = self.slots - 1;
        for (idx, job) in jobs.iter().enumerate() {
            let base = ((job.0 as usize) & slot_mask) * (1 + W);
            let Some(entry) = self.table.get(base..base + 1 + W) else {
                return idx;
            };
            if entry[0] != job.0.wrapping_add(1) {
                return idx;
            }
            let mut overlap = 0;
            for word in 0..W {
                overlap |= entry[1 + word] & taken[word];
            }
            if overlap == 0 {
                return idx;
            }
        }
        jobs.len()
    }

    fn forget(&mut self, job: JobId) {
        if self.slots == 0 {
            return;
        }
        let base = self.base(job);
        if self.table[base] == job.0.wrapping_add(1) {
            self.table[base] = 0;
        }
    }
}

impl Scratch {
    /// Drops what the walk remembers of `job`'s hosts: call it whenever a
    /// job's hosts change (chosen at start, or given back) and when it
    /// finishes.
    pub fn forget(&mut self, job: JobId) {
        self.masks.forget(job);
        self.matrix.forget(job);
    }
}

/// The reservation of an exclusive queue's first waiting job (EASY).
#[derive(Debug, Clone, Copy)]
struct Reservation {
    cluster: usize,
    /// When the job is expected to start (µs).
    shadow: u64,
    /// Hosts of its cluster that will be free at `shadow` beyond what it needs.
    extra: usize,
}

/// Computes the active set into `out` (cleared first), and in `bind` the
/// hosts chosen for jobs of `out` that had none.
///
/// - `first`: jobs placed before any queue, in order (still first fit).
/// - `now`: the current time in microseconds (for reservations).
///
/// Gang queues take their jobs in rotation order, first fit. Exclusive
/// queues take their started jobs, then their waiting jobs strictly in
/// order: the first that cannot start keeps every later one of its queue
/// waiting (first come, first served), unless the queue backfills, in which
/// case it gets a reservation at the earliest time enough hosts of its
/// cluster are expected to be free (from the estimates of the jobs holding
/// them) and a later job starts now only if it fits in the free hosts and
/// either ends by then or leaves enough hosts for the reservation (EASY).
/// Lower queues then fill what is left (space partitioning); they cannot
/// delay a higher queue's job, since a higher queue takes its hosts first.
///
/// A gang queue with a multiprogramming level (`mpl`) first starts its
/// waiting jobs, when `waiting` says to consider them (see
/// [`start_waiting`]), then takes its started jobs in rotation order,
/// first fit.
#[allow(clippy::too_many_arguments)]
pub fn active_set(
    queues: &[Queue],
    n_hosts: usize,
    first: impl IntoIterator<Item = JobId>,
    view: &impl JobView,
    now: u64,
    waiting: bool,
    scratch: &mut Scratch,
    out: &mut Vec<JobId>,
    bind: &mut Vec<(JobId, Vec<HostId>)>,
) {
    out.clear();
    bind.clear();
    scratch.placed.clear();
    scratch.unwritten.clear();
    scratch.decision += 1;
    scratch.taken.clear();
    scratch.taken.resize(n_hosts.div_ceil(64), 0);
    scratch.masks.size_for(n_hosts);
    let masks_on = scratch.masks.words > 0;
    // Read only for taken hosts or with this decision's number, so never
    // cleared: a decision over many hosts costs no more than the hosts it
    // takes.
    if scratch.holder.len() != n_hosts {
        scratch.holder = vec![(JobId(0), 0); n_hosts];
    }
    if scratch.host_cluster.len() != n_hosts {
        scratch.host_cluster = vec![0; n_hosts];
        let mut cluster = 0;
        let mut listed = vec![false; n_hosts];
        let mut in_order = true;
        while !view.cluster_hosts(cluster).is_empty() {
            let hosts = view.cluster_hosts(cluster);
            in_order &= hosts.windows(2).all(|pair| pair[0] < pair[1]);
            for host in hosts {
                match listed.get_mut(host.idx()) {
                    Some(seen) if !*seen => {
                        *seen = true;
                        scratch.host_cluster[host.idx()] = cluster;
                    }
                    _ => in_order = false,
                }
            }
            cluster += 1;
        }
        scratch.clusters_in_order = in_order && listed.iter().all(|seen| *seen);
        scratch.cluster_free = vec![0; cluster];
    }
    for (cluster, free) in scratch.cluster_free.iter_mut().enumerate() {
        *free = view.cluster_hosts(cluster).len();
    }
    let mut free_hosts = n_hosts;
    for job in first {
        let hosts = view.hosts(job);
        free_hosts = free_hosts.saturating_sub(take_bound(job, hosts, scratch, out));
    }
    for (queue_idx, queue) in queues.iter().enumerate() {
        if !queue.activated {
            continue;
        }
        let exclusive = queue.mode == QueueMode::Exclusive;
        let level = queue.level();
        // A gang queue with a level walks only its started jobs; its
        // waiting ones start here, before the rotation takes the others.
        let limit = match level {
            Some(_) => {
                // The hosts higher queues took: a waiting job may not have them.
                scratch.hard.clear();
                scratch.hard.extend_from_slice(&scratch.taken);
                queue.n_started()
            }
            None => usize::MAX,
        };
        let mut reservation: Option<Reservation> = None;
        // Behind an exclusive queue's reservation, its waiting jobs as kept
        // (see [`Waiting`]): one that cannot start is turned away from its
        // kept need and estimate, with no read of its record.
        let mut kept: Option<Waiting> = None;
        let n_started = queue.n_started();
        let (front, back) = queue.slices();
        'queue: for (part, offset) in [(front, 0), (back, front.len())] {
            let part = &part[..part.len().min(limit.saturating_sub(offset))];
            let mut idx = 0;
            while idx < part.len() {
                // Once every host is taken nothing more can join: tens of
                // thousands of queued jobs cost nothing then.
                if free_hosts == 0 {
                    if level.is_some() {
                        break 'queue;
                    }
                    if let Some(kept) = kept {
                        scratch.waiting[queue_idx] = kept;
                    }
                    return;
                }
                if let (Some(held), Some(kept)) = (&reservation, &kept) {
                    // Jobs behind the started ones have not started: one
                    // whose cluster lacks the free hosts it needs, or that
                    // neither ends by the reservation nor leaves it enough
                    // hosts, is passed over as below.
                    if let Some((_, info)) = (offset + idx)
                        .checked_sub(n_started)
                        .and_then(|at| kept.at(at))
                    {
                        let free = scratch.cluster_free.get(info.cluster).copied();
                        let in_time = info
                            .estimate
                            .is_some_and(|estimate| now.saturating_add(estimate) <= held.shadow);
                        let spare = info.cluster != held.cluster || info.n_needed <= held.extra;
                        if free.unwrap_or(0) < info.n_needed || (!in_time && !spare) {
                            debug_assert_eq!(kept.jobs[offset + idx - n_started], part[idx]);
                            debug_assert!(
                                !view.facts(part[idx]).started,
                                "job {} behind the started ones has started",
                                part[idx]
                            );
                            idx += 1;
                            continue;
                        }
                    }
                }
                // A gang queue's job is turned away when one of its hosts
                // is taken, whether or not it is runnable: with its hosts'
                // mask at hand, that costs no read of its record.
                if masks_on && !exclusive {
                    let skipped = scratch.masks.turned_away(&part[idx..], &scratch.taken);
                    if cfg!(debug_assertions) {
                        for job in &part[idx..idx + skipped] {
                            assert!(
                                view.hosts(*job).iter().any(|host| scratch.is_taken(*host)),
                                "the mask of job {job} is not its hosts"
                            );
                        }
                    }
                    idx += skipped;
                    if idx == part.len() {
                        break;
                    }
                }
                let job = part[idx];
                idx += 1;
                let facts = view.facts(job);
                if !facts.runnable {
                    continue;
                }
                let waiting = exclusive && !facts.started;
                if !waiting {
                    let taken = if facts.hosts.is_empty() {
                        take_free(job, view, scratch, out, bind)
                    } else {
                        take_bound(job, facts.hosts, scratch, out)
                    };
                    if taken > 0 && !exclusive {
                        scratch.placed.push((queue_idx, offset + idx - 1, job));
                    }
                    free_hosts = free_hosts.saturating_sub(taken);
                    continue;
                }
                let bound = !facts.hosts.is_empty();
                match reservation {
                    None => {
                        let taken = if bound {
                            take_bound(job, facts.hosts, scratch, out)
                        } else {
                            take_free(job, view, scratch, out, bind)
                        };
                        if taken > 0 {
                            free_hosts = free_hosts.saturating_sub(taken);
                            continue;
                        }
                        // The first job that cannot start: first come, first
                        // served keeps every later job of the queue behind it,
                        // unless backfilling can give it a reservation.
                        match (queue.backfill && !bound)
                            .then(|| reserve(job, view, now, scratch))
                            .flatten()
                        {
                            Some(made) => {
                                reservation = Some(made);
                                if scratch.waiting.len() <= queue_idx {
                                    scratch.waiting.resize_with(queue_idx + 1, Waiting::default);
                                }
                                let mut waiting = std::mem::take(&mut scratch.waiting[queue_idx]);
                                waiting.sync(queue, view);
                                if cfg!(debug_assertions) {
                                    waiting.check(queue, view);
                                }
                                kept = Some(waiting);
                            }
                            None => break 'queue,
                        }
                    }
                    Some(ref mut held) => {
                        if bound {
                            continue;
                        }
                        let (cluster, n_needed) = view.need(job);
                        if scratch.cluster_free.get(cluster).copied().unwrap_or(0) < n_needed {
                            continue;
                        }
                        let in_time = view
                            .estimate(job)
                            .is_some_and(|estimate| now.saturating_add(estimate) <= held.shadow);
                        let spare = cluster != held.cluster || n_needed <= held.extra;
                        if !in_time && !spare {
                            continue;
                        }
                        let taken = take_free(job, view, scratch, out, bind);
                        if taken == 0 {
                            continue;
                        }
                        free_hosts = free_hosts.saturating_sub(taken);
                        if !in_time && cluster == held.cluster {
                            held.extra -= n_needed;
                        }
                    }
                }
            }
        }
        if let Some(kept) = kept {
            scratch.waiting[queue_idx] = kept;
        }
        if let Some(level) = level {
            if waiting && queue.len() > queue.n_started() {
                free_hosts = free_hosts.saturating_sub(start_waiting(
                    queues, queue, queue_idx, level, view, now, scratch, out, bind,
                ));
            }
            if free_hosts == 0 {
                return;
            }
        }
    }
}

/// Whether a mask of hosts shares one with the taken hosts.
#[inline]
fn overlaps(mask: &[u64], taken: &[u64]) -> bool {
    mask.iter()
        .zip(taken)
        .any(|(hosts, taken)| hosts & taken != 0)
}

/// Takes the job's own hosts if all are free; returns how many it took.
fn take_bound(job: JobId, hosts: &[HostId], scratch: &mut Scratch, out: &mut Vec<JobId>) -> usize {
    if hosts.is_empty() {
        return 0;
    }
    if scratch.masks.words > 0
        && hosts.len() >= scratch.masks.min_width
        && scratch.masks.get(job).is_none()
    {
        scratch.masks.put(job, hosts);
    }
    match scratch.masks.get(job) {
        // The job's hosts as a mask: one AND a word says whether one is
        // taken, and one OR a word takes them all.
        Some(mask) => {
            debug_assert_eq!(
                overlaps(mask, &scratch.taken),
                hosts.iter().any(|host| scratch.is_taken(*host)),
                "the mask of job {job} is not its hosts"
            );
            if overlaps(mask, &scratch.taken) {
                return 0;
            }
            for (taken, hosts) in scratch.taken.iter_mut().zip(mask) {
                *taken |= hosts;
            }
        }
        None => {
            if hosts.iter().any(|host| scratch.is_taken(*host)) {
                return 0;
            }
            for host in hosts {
                scratch.taken[host.idx() / 64] |= 1 << (host.idx() % 64);
            }
        }
    }
    scratch.holder[hosts[0].idx()] = (job, scratch.decision);
    if hosts.len() > 1 {
        scratch.unwritten.push(job);
    }
    // A job's hosts are all of its cluster: count them off once.
    let cluster = scratch.host_cluster[hosts[0].idx()];
    scratch.cluster_free[cluster] = scratch.cluster_free[cluster].saturating_sub(hosts.len());
    out.push(job);
    hosts.len()
}

fn mark(scratch: &mut Scratch, host: HostId, job: JobId) {
    if let Some(word) = scratch.taken.get_mut(host.idx() / 64) {
        *word |= 1 << (host.idx() % 64);
    }
    scratch.holder[host.idx()] = (job, scratch.decision);
    let cluster = scratch.host_cluster[host.idx()];
    scratch.cluster_free[cluster] = scratch.cluster_free[cluster].saturating_sub(1);
}

/// Chooses free hosts of its cluster for a job that has none, preferring
/// hosts where nothing runs now; returns how many it took (0: it does not fit).
fn take_free(
    job: JobId,
    view: &impl JobView,
    scratch: &mut Scratch,
    out: &mut Vec<JobId>,
    bind: &mut Vec<(JobId, Vec<HostId>)>,
) -> usize {
    let (cluster, n_needed) = view.need(job);
    if n_needed == 0 || scratch.cluster_free.get(cluster).copied().unwrap_or(0) < n_needed {
        return 0;
    }
    let checks_memory = view.checks_memory(job);
    // Hosts where nothing runs, lowest numbers first; where they are too
    // few, the others in the order of `host_rank`. The scan stops as soon
    // as enough idle hosts are found, so a job on a machine of many hosts
    // costs what it passes over, not the whole machine.
    let mut chosen: Vec<HostId> = Vec::with_capacity(n_needed);
    scratch.candidates.clear();
    for host in view.cluster_hosts(cluster) {
        if scratch.is_taken(*host) || (checks_memory && !view.fits_on(job, *host)) {
            continue;
        }
        if view.host_rank(*host).0 {
            scratch.candidates.push(*host);
        } else {
            chosen.push(*host);
            if chosen.len() == n_needed {
                break;
            }
        }
    }
    if chosen.len() < n_needed {
        if chosen.len() + scratch.candidates.len() < n_needed {
            return 0;
        }
        scratch.candidates.sort_by_key(|host| view.host_rank(*host));
        let missing = n_needed - chosen.len();
        chosen.extend_from_slice(&scratch.candidates[..missing]);
        chosen.sort_unstable();
    }
    for host in &chosen {
        mark(scratch, *host, job);
    }
    out.push(job);
    bind.push((job, chosen));
    n_needed
}

/// The reservation of a waiting job that cannot start now: the earliest
/// time enough hosts of its cluster are expected to be free, or `None`
/// when that depends on a job without an estimate.
fn reserve(
    job: JobId,
    view: &impl JobView,
    now: u64,
    scratch: &mut Scratch,
) -> Option<Reservation> {
    let (cluster, n_needed) = view.need(job);
    let hosts = view.cluster_hosts(cluster);
    if n_needed == 0 || n_needed > hosts.len() {
        return None;
    }
    let free_now = scratch.cluster_free.get(cluster).copied().unwrap_or(0);
    for taker in scratch.unwritten.drain(..) {
        for host in view.hosts(taker) {
            scratch.holder[host.idx()] = (taker, scratch.decision);
        }
    }
    let mut ends = std::mem::take(&mut scratch.ends);
    ends.clear();
    ends.extend(
        hosts
            .iter()
            .filter(|host| scratch.is_taken(**host))
            .map(|host| {
                view.expected_end(scratch.holder[host.idx()].0)
                    .unwrap_or(u64::MAX)
                    .max(now)
            }),
    );
    ends.sort_unstable();
    scratch.ends = ends;
    let missing = n_needed.checked_sub(free_now)?;
    let shadow = *scratch.ends.get(missing.checked_sub(1)?)?;
    if shadow == u64::MAX {
        return None;
    }
    let released = scratch.ends.iter().filter(|end| **end <= shadow).count();
    Some(Reservation {
        cluster,
        shadow,
        extra: free_now + released - n_needed,
    })
}

/// The longest estimate of a short job (µs): one that is tried first
/// behind a reservation and may time-share hosts it does not fill.
pub const SHORT_JOB: u64 = 60_000_000;

/// The longest estimate of a brief job (µs): one that may time-share a
/// whole column, and so delay the reservation by slowing its partners.
pub const BRIEF_JOB: u64 = 600_000_000;

/// The reservation of a gang queue's first waiting job that cannot start.
#[derive(Debug, Clone, Copy)]
struct Reserved {
    cluster: usize,
    /// When it is predicted to start (µs).
    at: u64,
    /// Hosts of its cluster available then beyond what it needs.
    extra: usize,
}

/// Starts waiting jobs of a gang queue with a multiprogramming level, in
/// submission order; returns how many hosts they took in this slice.
///
/// Hosts are those of the job's cluster that no higher queue took and
/// where fewer than `level` jobs reside. The first waiting job starts on
/// idle hosts (lowest numbers first) or gets a reservation: the time
/// enough hosts are predicted to be idle, by the predicted ends of the
/// residents ([`Matrix`]); without a prediction (a resident has no
/// estimate) the later jobs wait (first come, first served).
///
/// Behind a reservation, short jobs ([`SHORT_JOB`]) are tried first,
/// shortest first, then the others in submission order. A job takes idle
/// hosts when there are enough. Else a brief job ([`BRIEF_JOB`]) may
/// time-share one whole column of the matrix of exactly its width (open
/// hosts that share one set of residents, each of which lies entirely on
/// them, so that in every slice all of their hosts are busy and no
/// processor is wasted), and a short one the open hosts whose residents
/// are narrowest, with the idle hosts (what its slices leave idle lasts at
/// most a slice plus its estimate rounded up to whole slices times the
/// level). A longer job never
/// time-shares: it would stretch itself and its partners by more than it
/// could wait. A job without an estimate is interactive: while no
/// reservation is made it starts where the level lets it, as in a queue
/// without a level (idle hosts, else a column of its width, else the
/// narrowest open hosts); behind a reservation it only takes idle hosts the
/// reservation spares.
///
/// Behind the reservation a job must end by it (if it time-shares, a
/// slice plus its estimate rounded up to whole slices times the level: it
/// runs one whole slice in `level`, after what is left of the current
/// one) or take idle hosts the reservation can spare; the
/// partners a brief job slows may delay the reserved job by its estimate
/// at most.
///
/// Jobs that start in a decision count in the predictions of a
/// reservation made later in it ([`Matrix::occupy`]).
///
/// A job that starts runs at once where its hosts are free in this slice,
/// else from a later slice, by the rotation.
#[allow(clippy::too_many_arguments)]
fn start_waiting(
    queues: &[Queue],
    queue: &Queue,
    queue_idx: usize,
    level: u32,
    view: &impl JobView,
    now: u64,
    scratch: &mut Scratch,
    out: &mut Vec<JobId>,
    bind: &mut Vec<(JobId, Vec<HostId>)>,
) -> usize {
    let n_hosts = scratch.holder.len();
    let mut matrix = std::mem::take(&mut scratch.matrix);
    matrix.sync(queues, view, n_hosts);
    if cfg!(debug_assertions) {
        matrix.check(queues, view);
    }
    let mut predicted = false;
    let hard = std::mem::take(&mut scratch.hard);
    // Per cluster: idle hosts, and columns: open hosts that share one set
    // of residents, each of which lies entirely on them.
    let n_clusters = scratch.cluster_free.len();
    let Lists {
        idle,
        mut shared,
        mut n_shared,
        blocks,
        mut column_hosts,
        mut chosen,
        mut partial,
        mut no_partial,
    } = std::mem::take(&mut scratch.lists);
    let mut idle = per_cluster(idle, n_clusters);
    // Per cluster, its columns as (offset in `column_hosts`, width).
    let mut blocks = per_cluster(blocks, n_clusters);
    column_hosts.clear();
    n_shared.clear();
    n_shared.resize(n_clusters, 0);
    if scratch.clusters_in_order {
        // A cluster's hosts are in increasing order, and every host is in
        // one: the machine's open hosts in order are each cluster's.
        let host_cluster = &scratch.host_cluster;
        let idle = &mut idle;
        matrix.open_hosts(
            &hard,
            level,
            |host| idle[host_cluster[host.idx()]].push(host),
            &mut shared,
        );
        if let [only] = n_shared.as_mut_slice() {
            *only = shared.iter().map(|word| word.count_ones() as usize).sum();
        } else {
            for (word, bits) in shared.iter().enumerate() {
                matrix::each_bit(*bits, word, |host| n_shared[host_cluster[host.idx()]] += 1);
            }
        }
    } else {
        shared.clear();
        shared.resize(n_hosts.div_ceil(64), 0);
        for (cluster, idle) in idle.iter_mut().enumerate() {
            for host in view.cluster_hosts(cluster) {
                let open = hard
                    .get(host.idx() / 64)
                    .is_some_and(|word| word & (1 << (host.idx() % 64)) == 0)
                    && matrix
                        .count
                        .get(host.idx())
                        .is_some_and(|count| *count < level);
                if !open {
                    continue;
                }
                if matrix.occupied(*host) {
                    shared[host.idx() / 64] |= 1 << (host.idx() % 64);
                    n_shared[cluster] += 1;
                } else {
                    idle.push(*host);
                }
            }
        }
    }
    // Without an open host no waiting job can start (the first one would
    // only get its reservation, which outlives no decision): none is
    // looked at.
    let any_open = idle.iter().any(|idle| !idle.is_empty()) || n_shared.iter().any(|n| *n > 0);
    // The columns are made the first time a job lacks idle hosts (from
    // the hosts that were shared at the start, as their residents have not
    // changed since): on a machine of many idle hosts, never.
    let mut columns_made = false;
    // A column's residents all lie on exactly its hosts, so it is the
    // hosts of any of its residents ([`Matrix::columns`]).
    let make_columns = |shared: &[u64],
                        host_cluster: &[usize],
                        blocks: &mut [Vec<(usize, usize)>],
                        column_hosts: &mut Vec<HostId>,
                        matrix: &Matrix| {
        matrix.columns(shared, view, |hosts| {
            // A job's hosts are all of its cluster.
            let Some(blocks) = host_cluster
                .get(hosts[0].idx())
                .and_then(|cluster| blocks.get_mut(*cluster))
            else {
                return;
            };
            let from = column_hosts.len();
            column_hosts.extend_from_slice(hosts);
            column_hosts[from..].sort_unstable();
            blocks.push((from, hosts.len()));
        });
        // The widest first, then by first host.
        for blocks in blocks.iter_mut() {
            blocks.sort_unstable_by_key(|&(from, width)| {
                (std::cmp::Reverse(width), column_hosts[from].0)
            });
        }
    };
    if scratch.waiting.len() <= queue_idx {
        scratch.waiting.resize_with(queue_idx + 1, Waiting::default);
    }
    let mut waiting = std::mem::take(&mut scratch.waiting[queue_idx]);
    if any_open {
        waiting.sync(queue, view);
        if cfg!(debug_assertions) {
            waiting.check(queue, view);
        }
    }
    let mut behind = std::mem::take(&mut scratch.behind);
    let mut taken_total = 0;
    let mut reserved: Option<Reserved> = None;
    // The first waiting job that cannot start on idle hosts (its cluster
    // and size), once met: its reservation is predicted only when a later
    // job could start behind it.
    let mut reserving: Option<(usize, usize)> = None;
    // The open shared hosts of each cluster, narrowest residents first
    // (made the first time a short job needs them).
    let mut narrow: Option<Vec<Vec<(usize, HostId)>>> = None;
    no_partial.clear();
    no_partial.resize(n_clusters, usize::MAX);
    let mut next = 0;
    // The jobs started in this decision are bound from here on.
    let started_from = bind.len();
    let is_short = |estimate: Option<u64>| estimate.is_some_and(|run| run <= SHORT_JOB);
    let is_brief = |estimate: Option<u64>| estimate.is_some_and(|run| run <= BRIEF_JOB);
    // A job without an estimate may share as a short one may.
    let may_share = |estimate: Option<u64>| estimate.is_none() || is_brief(estimate);
    // A job that shares runs one whole slice in `level` at least (its hosts
    // hold fewer than `level` other jobs), after what is left of the
    // current slice: it ends within a slice plus its estimate rounded up
    // to whole slices, times the level.
    let runs = |estimate: Option<u64>, shares: bool| {
        estimate.map(|estimate| {
            if shares {
                let slice = view.slice().max(1);
                estimate
                    .div_ceil(slice)
                    .saturating_mul(slice)
                    .saturating_mul(u64::from(level))
                    .saturating_add(slice)
            } else {
                estimate
            }
        })
    };
    let may_share_part = |estimate: Option<u64>| estimate.is_none() || is_short(estimate);
    loop {
        // In submission order until the reservation, then the jobs behind
        // it that could start at all.
        let (job, info) = if reserving.is_none() {
            if !any_open || next == waiting.jobs.len() {
                break;
            }
            next += 1;
            match waiting.at(next - 1) {
                Some(entry) => entry,
                None => continue,
            }
        } else {
            // Long jobs that cannot start are passed over unseen: one
            // needs idle hosts, and ends by the reservation or takes only
            // hosts it spares (with one cluster; with more, by size alone).
            let (max_n, max_n_any, max_estimate) = match idle.as_slice() {
                [idle] => (
                    idle.len(),
                    reserved.map_or(usize::MAX, |held| held.extra),
                    reserved.map_or(u64::MAX, |held| held.at.saturating_sub(now)),
                ),
                clusters => (
                    clusters.iter().map(Vec::len).max().unwrap_or(0),
                    usize::MAX,
                    u64::MAX,
                ),
            };
            let Some((job, info)) = behind
                .next(&waiting, max_n, max_n_any, max_estimate)
                .and_then(|number| waiting.get(number))
            else {
                break;
            };
            (job, info)
        };
        let WaitInfo {
            cluster,
            n_needed,
            estimate,
        } = info;
        // Behind the reservation a job starts only if it ends by it
        // (slowed if it must share) or takes idle hosts the reservation
        // spares (see below): once it is predicted, most jobs behind it are
        // turned away here, with no look at their record.
        if let Some(held) = reserved {
            let shares = idle.get(cluster).is_none_or(|idle| idle.len() < n_needed);
            let in_time =
                runs(estimate, shares).is_some_and(|runs| now.saturating_add(runs) <= held.at);
            let spare = !shares && (cluster != held.cluster || n_needed <= held.extra);
            if !in_time && !spare {
                continue;
            }
        }
        if n_needed == 0 || n_needed > view.cluster_hosts(cluster).len() || cluster >= n_clusters {
            continue;
        }
        let n_idle = idle[cluster].len();
        // Without enough idle hosts, a brief job may time-share one whole
        // column of exactly its width, and a short one (or one without an
        // estimate) the open hosts whose residents are narrowest; a longer
        // job waits for idle hosts (sharing would stretch it and its
        // partners by more than it could wait).
        let mut column = None;
        partial.clear();
        if n_idle < n_needed && may_share(estimate) {
            if !columns_made {
                make_columns(
                    &shared,
                    &scratch.host_cluster,
                    &mut blocks,
                    &mut column_hosts,
                    &matrix,
                );
                columns_made = true;
            }
            // The blocks are widest first: a binary search finds the width.
            let at = blocks[cluster].partition_point(|&(_, width)| width > n_needed);
            column = blocks[cluster]
                .get(at)
                .is_some_and(|&(_, width)| width == n_needed)
                .then_some(at);
            // Open hosts only fill up during a decision: a size that found
            // too few finds too few again.
            if column.is_none() && may_share_part(estimate) && n_needed < no_partial[cluster] {
                let narrow = narrow.get_or_insert_with(|| {
                    let mut ranked: Vec<Vec<(usize, HostId)>> = vec![Vec::new(); n_clusters];
                    for (word, bits) in shared.iter().enumerate() {
                        matrix::each_bit(*bits, word, |host| {
                            if let Some(ranked) = scratch
                                .host_cluster
                                .get(host.idx())
                                .and_then(|cluster| ranked.get_mut(*cluster))
                            {
                                ranked.push((matrix.widths(host), host));
                            }
                        });
                    }
                    for ranked in &mut ranked {
                        ranked.sort_unstable();
                    }
                    ranked
                });
                partial.extend(
                    narrow[cluster]
                        .iter()
                        .map(|(_, host)| *host)
                        .filter(|host| matrix.count[host.idx()] < level)
                        .take(n_needed - n_idle),
                );
                if partial.len() + n_idle < n_needed {
                    partial.clear();
                    no_partial[cluster] = n_needed;
                }
            }
        }
        let fits = n_idle >= n_needed || column.is_some() || !partial.is_empty();
        let shares = n_idle < n_needed;
        // Behind the first job that could not start, one that fits nowhere
        // is passed over before its record is read: the hosts it was
        // measured against (and the columns and narrowest hosts found on
        // the way, which depend on the hosts alone) are the same whether
        // or not it could run.
        if reserving.is_some() && !fits {
            continue;
        }
        let facts = view.facts(job);
        if !facts.runnable || !facts.hosts.is_empty() {
            continue;
        }
        let start = match reserving {
            Some((reserved_cluster, reserved_needed)) => {
                if !fits {
                    continue;
                }
                if reserved.is_none() {
                    // The reservation: when enough hosts of its cluster are
                    // predicted to be idle, counting the jobs that started
                    // before it in this decision.
                    if !predicted {
                        matrix.predict(view, now, level);
                        predicted = true;
                        for (started, hosts) in &bind[started_from..] {
                            matrix.occupy(hosts, view.estimate(*started), now, view);
                        }
                    }
                    let times = &matrix.idle_at;
                    let hosts = view.cluster_hosts(reserved_cluster);
                    let ends = &mut scratch.ends;
                    ends.clear();
                    ends.extend(hosts.iter().map(|host| times[host.idx()].max(now)));
                    // The time of the `reserved_needed`-th host to be idle.
                    let (_, &mut at, _) = ends.select_nth_unstable(reserved_needed - 1);
                    if at == u64::MAX {
                        // No prediction: first come, first served.
                        break;
                    }
                    let available = hosts
                        .iter()
                        .filter(|host| times[host.idx()].max(now) <= at)
                        .count();
                    reserved = Some(Reserved {
                        cluster: reserved_cluster,
                        at,
                        extra: available.saturating_sub(reserved_needed),
                    });
                }
                let Some(held) = reserved else {
                    break;
                };
                let runs = runs(estimate, shares);
                let in_time = runs.is_some_and(|runs| now.saturating_add(runs) <= held.at);
                // It ends by the reservation (slowed if it shares),
                // or takes idle hosts the reservation can spare; the
                // partners a brief job slows may delay the reserved job by
                // its estimate at most.
                let spare = !shares && (cluster != held.cluster || n_needed <= held.extra);
                if !in_time && !spare {
                    continue;
                }
                if !in_time && cluster == held.cluster {
                    if let Some(held) = reserved.as_mut() {
                        held.extra -= n_needed;
                    }
                }
                true
            }
            None => {
                // The first waiting job never time-shares: it starts on idle
                // hosts, or gets the reservation. One without an estimate
                // starts where the level lets it, as in a queue without one.
                if !shares || (estimate.is_none() && fits) {
                    true
                } else {
                    reserving = Some((cluster, n_needed));
                    // Behind it, short jobs first, shortest first; then the
                    // others in submission order. Open hosts only fill up
                    // during a decision, so a job needing more than its
                    // cluster's idle hosts (or, if brief, than its idle and
                    // shared open hosts) at the start never starts in it
                    // (nor shares one without an estimate).
                    let rooms: Vec<(usize, usize)> = idle
                        .iter()
                        .zip(&n_shared)
                        .map(|(idle, shared)| (idle.len(), idle.len() + shared))
                        .collect();
                    behind.start(
                        &waiting,
                        waiting.number(next - 1),
                        |info| {
                            rooms.get(info.cluster).is_some_and(|&(plain, brief)| {
                                info.n_needed
                                    <= if is_brief(info.estimate) {
                                        brief
                                    } else {
                                        plain
                                    }
                            })
                        },
                        |info| is_short(info.estimate),
                    );
                    false
                }
            }
        };
        if !start {
            continue;
        }
        chosen.clear();
        if let Some(idx) = column {
            let (from, width) = blocks[cluster][idx];
            chosen.extend_from_slice(&column_hosts[from..from + width]);
        }
        chosen.extend_from_slice(&partial);
        let width = chosen.len();
        let from_idle = n_needed - width;
        chosen.extend(idle[cluster].drain(..from_idle));
        if view.checks_memory(job) && !chosen.iter().all(|host| view.fits_on(job, *host)) {
            // Memory it cannot have: give the idle hosts back, in order.
            let given: Vec<HostId> = chosen[width..].to_vec();
            idle[cluster].splice(0..0, given);
            continue;
        }
        if let Some(idx) = column {
            blocks[cluster].remove(idx);
        }
        if !partial.is_empty() {
            // Columns it took part of are columns no longer.
            partial.sort_unstable();
            blocks[cluster].retain(|&(from, width)| {
                !column_hosts[from..from + width]
                    .iter()
                    .any(|host| partial.binary_search(host).is_ok())
            });
        }
        chosen.sort_unstable();
        for host in &chosen {
            matrix.raise(*host);
        }
        if !partial.is_empty() {
            if let Some(narrow) = narrow.as_mut() {
                narrow[cluster].retain(|(_, host)| matrix.count[host.idx()] < level);
            }
        }
        // The hosts it takes are busy until it ends: a reservation made
        // after it starts counts them so (a later one, from `bind`).
        if predicted {
            matrix.occupy(&chosen, estimate, now, view);
        }
        // It joins the matrix now, and runs now if its hosts are free in
        // this slice; else from a later slice, by the rotation.
        if chosen.iter().all(|host| !scratch.is_taken(*host)) {
            for host in &chosen {
                mark(scratch, *host, job);
            }
            taken_total += chosen.len();
            out.push(job);
        }
        bind.push((job, chosen.clone()));
    }
    matrix.settle();
    scratch.waiting[queue_idx] = waiting;
    scratch.behind = behind;
    scratch.hard = hard;
    scratch.matrix = matrix;
    scratch.lists = Lists {
        idle,
        shared,
        n_shared,
        blocks,
        column_hosts,
        chosen,
        partial,
        no_partial,
    };
    taken_total
}

#[cfg(test)]
mod tests {
    use super::*;
    use scored_proto::command::QueueMode;
    use std::collections::HashMap;

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
        fn host_rank(&self, host: HostId) -> (bool, u64, u32) {
            (false, 0, host.0)
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
            active_set(&queues, 3, [], view, 0, true, scratch, &mut out, &mut bind);
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
        fn host_rank(&self, host: HostId) -> (bool, u64, u32) {
            self.jobs.host_rank(host)
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
}
