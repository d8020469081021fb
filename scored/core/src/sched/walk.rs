//! The walk of a decision: jobs that must run first, then the queues from
//! 0 down, each job joining when none of its hosts is taken.

use scored_proto::command::QueueMode;

use super::easy::Easy;
use super::level::Lists;
use super::masks::{overlaps, Masks};
use super::matrix::Matrix;
use super::waiting::{Behind, Waiting};
use super::{rank_order, JobView, Places};
use crate::ids::{HostId, JobId};
use crate::queue::Queue;

/// Scratch space for [`active_set`], kept between calls so that a decision
/// over tens of thousands of jobs allocates nothing.
#[derive(Debug, Default, Clone)]
pub struct Scratch {
    /// The hosts taken so far, one bit a host (64 hosts a word).
    pub(super) taken: Vec<u64>,
    /// The job that took each taken host, and the decision that gave it
    /// (`decision`): its expected end is asked only when a reservation is
    /// computed, and whether a job was chosen by its first host. A job
    /// that took the hosts it was given at admission is written at its
    /// first host only, and listed in `unwritten` until a reservation needs
    /// the others: a gang decision takes hundreds of hosts and asks about
    /// none of them.
    pub(super) holder: Vec<(JobId, u64)>,
    /// Jobs whose hosts but the first are not yet written in `holder`.
    pub(super) unwritten: Vec<JobId>,
    /// How many decisions this scratch has served.
    pub(super) decision: u64,
    /// The cluster of each host, and free hosts per cluster.
    pub(super) host_cluster: Vec<usize>,
    /// Whether every host is in one cluster and each cluster's hosts are
    /// in increasing order, so that the machine's hosts taken in order
    /// are each cluster's in its order.
    pub(super) clusters_in_order: bool,
    pub(super) cluster_free: Vec<usize>,
    pub(super) candidates: Vec<HostId>,
    pub(super) ends: Vec<u64>,
    pub(super) masks: Masks,
    /// Where the last decision took the jobs of gang queues: the queue's
    /// index, the job's position in its order, and the job, in the order
    /// of the walk (so by queue, then position).
    pub(super) placed: Vec<(usize, usize, JobId)>,
    /// The hosts taken before a gang queue with a level took its started
    /// jobs (one bit a host).
    pub(super) hard: Vec<u64>,
    /// The matrix as the waiting jobs of a gang queue with a level see it
    /// (see [`Matrix`]), rebuilt at each decision that considers them.
    pub(super) matrix: Matrix,
    /// Per queue (by index), its waiting jobs as the last decision that
    /// considered them saw them (see [`Waiting`]).
    pub(super) waiting: Vec<Waiting>,
    /// The jobs behind a gang queue's reservation, in the order they are
    /// tried (see [`Behind`]).
    pub(super) behind: Behind,
    /// The lists a gang queue's decision over its waiting jobs fills.
    pub(super) lists: Lists,
}

impl Scratch {
    /// The hosts of `job` as bits (one a host, 64 hosts a word), if the
    /// walk has met it since its hosts last changed.
    #[inline]
    pub(super) fn mask_of(&self, job: JobId) -> Option<&[u64]> {
        self.masks.get(job)
    }

    /// Whether the last [`active_set`] put `job`, whose first host is
    /// `first_host`, in the active set: a membership test that costs one
    /// look-up, where searching the set would cost a sort of it at every
    /// decision.
    pub(super) fn holds(&self, job: JobId, first_host: HostId) -> bool {
        self.holder.get(first_host.idx()) == Some(&(job, self.decision))
    }

    /// Where the last [`active_set`] took the jobs of gang queue `queue`
    /// (its index): (position in the queue's order at that time, job), by
    /// position. A rotation uses it to move them without searching.
    pub(super) fn placed_in(&self, queue: usize) -> impl Iterator<Item = (usize, JobId)> + '_ {
        self.placed
            .iter()
            .filter(move |(index, _, _)| *index == queue)
            .map(|&(_, position, job)| (position, job))
    }

    /// Whether the decision has given `host` to a job (a host beyond the
    /// machine counts as taken: no job may have it).
    #[inline]
    pub(super) fn is_taken(&self, host: HostId) -> bool {
        self.taken
            .get(host.idx() / 64)
            .is_none_or(|word| word & (1 << (host.idx() % 64)) != 0)
    }
}

impl Scratch {
    /// Drops what the walk remembers of `job`'s hosts: call it whenever a
    /// job's hosts change (chosen at start, or given back) and when it
    /// finishes.
    pub(super) fn forget(&mut self, job: JobId) {
        self.masks.forget(job);
        self.matrix.forget(job);
    }
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
/// waiting (first come, first served), unless the queue backfills
/// (`easy.rs`). Lower queues then fill what is left (space partitioning);
/// they cannot delay a higher queue's job, since a higher queue takes its
/// hosts first.
///
/// A gang queue with a multiprogramming level (`mpl`) takes its started
/// jobs in rotation order, first fit, then starts its waiting jobs when
/// `waiting` says to consider them (`level.rs`).
#[allow(clippy::too_many_arguments)]
pub fn active_set(
    queues: &[Queue],
    n_hosts: usize,
    first: impl IntoIterator<Item = JobId>,
    view: &impl JobView,
    now: u64,
    waiting: bool,
    busy: &[u64],
    scratch: &mut Scratch,
    out: &mut Vec<JobId>,
    bind: &mut Vec<(JobId, Vec<HostId>)>,
) {
    out.clear();
    bind.clear();
    scratch.begin(n_hosts, view);
    let mut walk = Walk {
        view,
        now,
        busy,
        scratch,
        out,
        bind,
        free_hosts: n_hosts,
    };
    for job in first {
        let taken = take_bound(job, view.hosts(job), walk.scratch, walk.out);
        walk.free_hosts = walk.free_hosts.saturating_sub(taken);
    }
    for (queue_idx, queue) in queues.iter().enumerate() {
        if !queue.activated {
            continue;
        }
        let Some(level) = queue.level() else {
            if walk.queue(queue_idx, queue, usize::MAX) == Walked::Full {
                return;
            }
            continue;
        };
        // The hosts higher queues took: a waiting job may not have them.
        walk.scratch.hard.clear();
        walk.scratch.hard.extend_from_slice(&walk.scratch.taken);
        // Its started jobs rotate; its waiting ones start behind them.
        walk.queue(queue_idx, queue, queue.n_started());
        if waiting && queue.len() > queue.n_started() {
            let taken = walk.start_waiting(queues, queue, queue_idx, level);
            walk.free_hosts = walk.free_hosts.saturating_sub(taken);
        }
        if walk.free_hosts == 0 {
            return;
        }
    }
}

impl Scratch {
    /// Readies the scratch for a decision on `n_hosts` hosts: nothing
    /// taken, each cluster's hosts free, the masks sized.
    fn begin(&mut self, n_hosts: usize, view: &impl JobView) {
        self.placed.clear();
        self.unwritten.clear();
        self.decision += 1;
        self.taken.clear();
        self.taken.resize(n_hosts.div_ceil(64), 0);
        self.masks.size_for(n_hosts);
        // Read only for taken hosts or with this decision's number, so
        // never cleared: a decision over many hosts costs no more than the
        // hosts it takes.
        if self.holder.len() != n_hosts {
            self.holder = vec![(JobId(0), 0); n_hosts];
        }
        if self.host_cluster.len() != n_hosts {
            self.map_clusters(n_hosts, view);
        }
        for (cluster, free) in self.cluster_free.iter_mut().enumerate() {
            *free = view.cluster_hosts(cluster).len();
        }
    }

    /// Which cluster each host is in, and whether the clusters' hosts
    /// are in the machine's order (see `clusters_in_order`).
    fn map_clusters(&mut self, n_hosts: usize, view: &impl JobView) {
        self.host_cluster = vec![0; n_hosts];
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
                        self.host_cluster[host.idx()] = cluster;
                    }
                    _ => in_order = false,
                }
            }
            cluster += 1;
        }
        self.clusters_in_order = in_order && listed.iter().all(|seen| *seen);
        self.cluster_free = vec![0; cluster];
    }
}

/// One decision's walk: what it reads, what it fills, and how many hosts
/// are still free.
pub(super) struct Walk<'a, V> {
    pub(super) view: &'a V,
    /// The current time (µs).
    pub(super) now: u64,
    /// Hosts where a job's processes run now, one bit a host.
    pub(super) busy: &'a [u64],
    pub(super) scratch: &'a mut Scratch,
    /// The active set, in the order jobs joined it.
    pub(super) out: &'a mut Vec<JobId>,
    /// The hosts chosen for jobs that had none.
    pub(super) bind: &'a mut Vec<(JobId, Vec<HostId>)>,
    /// Hosts no job has taken yet.
    pub(super) free_hosts: usize,
}

/// How the walk of a queue ended.
#[derive(Debug, PartialEq)]
pub(super) enum Walked {
    /// Through its jobs, or until first come, first served stopped it.
    Through,
    /// Every host is taken: nothing more can join.
    Full,
}

impl<V: JobView> Walk<'_, V> {
    /// Walks the first `limit` jobs of `queue` in order, each joining if
    /// it can (see [`active_set`]).
    fn queue(&mut self, queue_idx: usize, queue: &Queue, limit: usize) -> Walked {
        let exclusive = queue.mode == QueueMode::Exclusive;
        let masks_on = self.scratch.masks.words > 0;
        let mut easy = Easy::default();
        let n_started = queue.n_started();
        let (front, back) = queue.slices();
        let mut walked = Walked::Through;
        'queue: for (part, offset) in [(front, 0), (back, front.len())] {
            let part = &part[..part.len().min(limit.saturating_sub(offset))];
            let mut idx = 0;
            while idx < part.len() {
                // Once every host is taken nothing more can join: tens of
                // thousands of queued jobs cost nothing then.
                if self.free_hosts == 0 {
                    walked = Walked::Full;
                    break 'queue;
                }
                if self.passed_over(&easy, part[idx], (offset + idx).checked_sub(n_started)) {
                    idx += 1;
                    continue;
                }
                // A gang queue's job is turned away when one of its hosts
                // is taken, whether or not it is runnable: with its hosts'
                // mask at hand, that costs no read of its record.
                if masks_on && !exclusive {
                    idx += self.turned_away(&part[idx..]);
                    if idx == part.len() {
                        break;
                    }
                }
                let job = part[idx];
                idx += 1;
                let facts = self.view.facts(job);
                if !facts.runnable {
                    continue;
                }
                if !exclusive || facts.started {
                    let taken = self.take(job, facts.hosts);
                    if taken > 0 && !exclusive {
                        self.scratch.placed.push((queue_idx, offset + idx - 1, job));
                    }
                    continue;
                }
                if !self.exclusive_waiting(job, facts.hosts, queue, queue_idx, &mut easy) {
                    break 'queue;
                }
            }
        }
        if let Some(kept) = easy.kept {
            self.scratch.waiting[queue_idx] = kept;
        }
        walked
    }

    /// How many of `jobs`, from the first, have a mask that overlaps the
    /// taken hosts.
    fn turned_away(&self, jobs: &[JobId]) -> usize {
        let skipped = self.scratch.masks.turned_away(jobs, &self.scratch.taken);
        if cfg!(debug_assertions) {
            for job in &jobs[..skipped] {
                assert!(
                    self.view
                        .hosts(*job)
                        .iter()
                        .any(|host| self.scratch.is_taken(*host)),
                    "the mask of job {job} is not its hosts"
                );
            }
        }
        skipped
    }

    /// Takes a job's own hosts, or free hosts of its cluster for a job
    /// without; returns how many it took.
    pub(super) fn take(&mut self, job: JobId, hosts: &[HostId]) -> usize {
        let taken = if hosts.is_empty() {
            take_free(job, self.view, self.busy, self.scratch, self.out, self.bind)
        } else {
            take_bound(job, hosts, self.scratch, self.out)
        };
        self.free_hosts = self.free_hosts.saturating_sub(taken);
        taken
    }
}

/// Takes the job's own hosts if all are free; returns how many it took.
pub(super) fn take_bound(
    job: JobId,
    hosts: &[HostId],
    scratch: &mut Scratch,
    out: &mut Vec<JobId>,
) -> usize {
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

pub(super) fn mark(scratch: &mut Scratch, host: HostId, job: JobId) {
    if let Some(word) = scratch.taken.get_mut(host.idx() / 64) {
        *word |= 1 << (host.idx() % 64);
    }
    scratch.holder[host.idx()] = (job, scratch.decision);
    let cluster = scratch.host_cluster[host.idx()];
    scratch.cluster_free[cluster] = scratch.cluster_free[cluster].saturating_sub(1);
}

/// Chooses free hosts for a job that has none, on one of the clusters it
/// may go to that has room for it (load and speed decide between them,
/// [`JobView::cluster_rank`]), preferring hosts where nothing runs now;
/// returns how many it took (0: it fits on none).
pub(super) fn take_free(
    job: JobId,
    view: &impl JobView,
    busy: &[u64],
    scratch: &mut Scratch,
    out: &mut Vec<JobId>,
    bind: &mut Vec<(JobId, Vec<HostId>)>,
) -> usize {
    take_free_where(job, view, busy, scratch, out, bind, |_| true)
}

/// [`take_free`] on the clusters `allowed` lets it have.
pub(super) fn take_free_where(
    job: JobId,
    view: &impl JobView,
    busy: &[u64],
    scratch: &mut Scratch,
    out: &mut Vec<JobId>,
    bind: &mut Vec<(JobId, Vec<HostId>)>,
    allowed: impl Fn(usize) -> bool,
) -> usize {
    let places = Places::of(view, job);
    let n_needed = view.need(job).1;
    if !places.several() {
        let cluster = places.each().next().unwrap_or(usize::MAX);
        if !allowed(cluster) {
            return 0;
        }
        return take_free_in(job, cluster, n_needed, view, busy, scratch, out, bind);
    }
    let mut clusters: smallvec::SmallVec<[usize; 8]> = places
        .each()
        .filter(|cluster| {
            scratch.cluster_free.get(*cluster).copied().unwrap_or(0) >= n_needed
                && allowed(*cluster)
                && view.may_use(job, *cluster)
        })
        .collect();
    clusters.sort_by(|a, b| rank_order(view, *a, *b));
    for cluster in clusters {
        let taken = take_free_in(job, cluster, n_needed, view, busy, scratch, out, bind);
        if taken > 0 {
            return taken;
        }
    }
    0
}

/// Chooses free hosts of `cluster` for a job that has none.
#[allow(clippy::too_many_arguments)]
fn take_free_in(
    job: JobId,
    cluster: usize,
    n_needed: usize,
    view: &impl JobView,
    busy: &[u64],
    scratch: &mut Scratch,
    out: &mut Vec<JobId>,
    bind: &mut Vec<(JobId, Vec<HostId>)>,
) -> usize {
    if n_needed == 0 || scratch.cluster_free.get(cluster).copied().unwrap_or(0) < n_needed {
        return 0;
    }
    let checks_memory = view.checks_memory(job);
    // Hosts where nothing runs, lowest numbers first; where they are too
    // few, the others, least loaded first. The scan stops as soon
    // as enough idle hosts are found, so a job on a machine of many hosts
    // costs what it passes over, not the whole machine.
    let mut chosen: Vec<HostId> = Vec::with_capacity(n_needed);
    scratch.candidates.clear();
    for host in view.cluster_hosts(cluster) {
        if scratch.is_taken(*host) || (checks_memory && !view.fits_on(job, *host)) {
            continue;
        }
        if runs_on(busy, *host) {
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
        scratch
            .candidates
            .sort_by_key(|host| (runs_on(busy, *host), view.host_load(*host), host.0));
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

/// Whether a job's processes run on `host` now.
#[inline]
fn runs_on(busy: &[u64], host: HostId) -> bool {
    busy.get(host.idx() / 64)
        .is_some_and(|word| word & (1 << (host.idx() % 64)) != 0)
}
