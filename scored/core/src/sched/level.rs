//! Gang queues with a multiprogramming level: their waiting jobs start at
//! events, on idle hosts or beside residents in the matrix, behind a
//! reservation for the first that cannot start.

use smallvec::SmallVec;

use super::matrix::{self, Matrix};
use super::waiting::{Behind, WaitInfo, Waiting};
use super::walk::{mark, Scratch, Walk};
use super::{ranks_before, JobView};
use crate::ids::{HostId, JobId};
use crate::queue::Queue;

/// The lists [`Walk::start_waiting`] fills, kept between decisions so that one
/// allocates none once they have grown; each is emptied before use.
#[derive(Debug, Default, Clone)]
pub(super) struct Lists {
    /// Per cluster, its idle open hosts.
    pub(super) idle: Vec<Vec<HostId>>,
    /// The open hosts that have residents (one bit a host), and how many
    /// each cluster has.
    pub(super) shared: Vec<u64>,
    pub(super) n_shared: Vec<usize>,
    /// Per cluster, its columns as (offset in `column_hosts`, width).
    pub(super) blocks: Vec<Vec<(usize, usize)>>,
    pub(super) column_hosts: Vec<HostId>,
    /// The hosts given to a job.
    pub(super) chosen: Vec<HostId>,
    /// The open shared hosts given to a short job.
    pub(super) partial: Vec<HostId>,
    /// Per cluster, the least size for which its open hosts fell short.
    pub(super) no_partial: Vec<usize>,
}

/// One empty list per cluster, in what `lists` allocated.
fn per_cluster<T>(mut lists: Vec<Vec<T>>, n_clusters: usize) -> Vec<Vec<T>> {
    lists.resize_with(n_clusters, Vec::new);
    lists.iter_mut().for_each(Vec::clear);
    lists
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

/// What a decision over a gang queue's waiting jobs works with: taken out
/// of the scratch for the decision, and put back after it.
struct Leveled {
    level: u32,
    matrix: Matrix,
    /// The hosts higher queues took.
    hard: Vec<u64>,
    lists: Lists,
    waiting: Waiting,
    behind: Behind,
    n_clusters: usize,
    /// Some cluster has an open host: without one no waiting job can start
    /// (the first one would only get its reservation, which outlives no
    /// decision), and none is looked at.
    any_open: bool,
    /// The columns were made: the first time a job lacks idle hosts (from
    /// the hosts that were shared at the start, as their residents have
    /// not changed since); on a machine of many idle hosts, never.
    columns_made: bool,
    /// The open shared hosts of each cluster, narrowest residents first
    /// (made the first time a short job needs them).
    narrow: Option<Vec<Vec<(usize, HostId)>>>,
    /// The first waiting job that cannot start on idle hosts (its cluster
    /// and size), once met: its reservation is predicted only when a later
    /// job could start behind it.
    reserving: Option<WaitInfo>,
    reserved: Option<Reserved>,
    /// The matrix predicted when each host is idle.
    predicted: bool,
    /// The next waiting job in submission order (until the reservation).
    next: usize,
    /// Where the jobs started in this decision begin in the walk's `bind`.
    started_from: usize,
    /// Hosts the started jobs took in this slice.
    taken: usize,
}

/// Where a job would go: a column of its width, or the narrowest open
/// shared hosts (in `Lists::partial`), or idle hosts alone.
struct Room {
    /// The cluster tried.
    cluster: usize,
    column: Option<usize>,
    fits: bool,
    /// It lacks idle hosts, so it would time-share.
    shares: bool,
}

fn is_short(estimate: Option<u64>) -> bool {
    estimate.is_some_and(|run| run <= SHORT_JOB)
}

fn is_brief(estimate: Option<u64>) -> bool {
    estimate.is_some_and(|run| run <= BRIEF_JOB)
}

/// Whether a job may time-share a column: a brief one, or one without an
/// estimate (as a short one may).
fn may_share(estimate: Option<u64>) -> bool {
    estimate.is_none() || is_brief(estimate)
}

/// Whether a job may time-share part of a column: a short one, or one
/// without an estimate.
fn may_share_part(estimate: Option<u64>) -> bool {
    estimate.is_none() || is_short(estimate)
}

impl<V: JobView> Walk<'_, V> {
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
    /// slice plus its estimate rounded up to whole slices times the level,
    /// or times its partners plus one if it has more: it runs one whole
    /// slice in that many, after what is left of the current one; see
    /// [`Leveled::turns`]) or take idle hosts the reservation can spare; the
    /// partners a brief job slows may delay the reserved job by its estimate
    /// at most.
    ///
    /// Jobs that start in a decision count in the predictions of a
    /// reservation made later in it ([`Matrix::occupy`]).
    ///
    /// A job that starts runs at once where its hosts are free in this slice,
    /// else from a later slice, by the rotation.
    pub(super) fn start_waiting(
        &mut self,
        queues: &[Queue],
        queue: &Queue,
        queue_idx: usize,
        level: u32,
    ) -> usize {
        let mut leveled = Leveled::take(self.scratch, queue_idx, level, self.bind.len());
        let n_hosts = self.scratch.holder.len();
        leveled.matrix.sync(queues, self.view, n_hosts);
        if cfg!(debug_assertions) {
            leveled.matrix.check(queues, self.view);
        }
        leveled.open_hosts(self.scratch, self.view);
        if leveled.any_open {
            leveled.waiting.sync(queue, self.view);
            if cfg!(debug_assertions) {
                leveled.waiting.check(queue, self.view);
            }
        }
        while let Some(next) = leveled.next_job(self.now) {
            let Some((job, info)) = next else {
                continue;
            };
            match leveled.consider(self, job, info) {
                Consider::Pass => {}
                Consider::Stop => break,
                Consider::Start(room) => leveled.place(self, job, info.on(room.cluster), &room),
            }
        }
        leveled.matrix.settle();
        let taken = leveled.taken;
        leveled.put_back(self.scratch, queue_idx);
        taken
    }
}

/// What becomes of a waiting job.
enum Consider {
    /// It does not start now.
    Pass,
    /// It starts, there.
    Start(Room),
    /// Neither it nor a later job starts (no prediction for the
    /// reservation: first come, first served).
    Stop,
}

impl Leveled {
    fn take(scratch: &mut Scratch, queue_idx: usize, level: u32, started_from: usize) -> Leveled {
        let n_clusters = scratch.cluster_free.len();
        if scratch.waiting.len() <= queue_idx {
            scratch.waiting.resize_with(queue_idx + 1, Waiting::default);
        }
        let mut lists = std::mem::take(&mut scratch.lists);
        lists.no_partial.clear();
        lists.no_partial.resize(n_clusters, usize::MAX);
        Leveled {
            level,
            matrix: std::mem::take(&mut scratch.matrix),
            hard: std::mem::take(&mut scratch.hard),
            lists,
            waiting: std::mem::take(&mut scratch.waiting[queue_idx]),
            behind: std::mem::take(&mut scratch.behind),
            n_clusters,
            any_open: false,
            columns_made: false,
            narrow: None,
            reserving: None,
            reserved: None,
            predicted: false,
            next: 0,
            started_from,
            taken: 0,
        }
    }

    fn put_back(self, scratch: &mut Scratch, queue_idx: usize) {
        scratch.waiting[queue_idx] = self.waiting;
        scratch.behind = self.behind;
        scratch.hard = self.hard;
        scratch.matrix = self.matrix;
        scratch.lists = self.lists;
    }

    /// The open hosts pass: per cluster its idle open hosts (no higher
    /// queue took them, no job resides there), and the open hosts that
    /// have fewer than `level` residents as bits.
    fn open_hosts(&mut self, scratch: &Scratch, view: &impl JobView) {
        let n_clusters = self.n_clusters;
        let lists = &mut self.lists;
        lists.idle = per_cluster(std::mem::take(&mut lists.idle), n_clusters);
        lists.blocks = per_cluster(std::mem::take(&mut lists.blocks), n_clusters);
        lists.column_hosts.clear();
        lists.n_shared.clear();
        lists.n_shared.resize(n_clusters, 0);
        let (idle, shared, n_shared) = (&mut lists.idle, &mut lists.shared, &mut lists.n_shared);
        let matrix = &self.matrix;
        if scratch.clusters_in_order {
            // A cluster's hosts are in increasing order, and every host is
            // in one: the machine's open hosts in order are each cluster's.
            let host_cluster = &scratch.host_cluster;
            matrix.open_hosts(
                &self.hard,
                self.level,
                |host| idle[host_cluster[host.idx()]].push(host),
                shared,
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
            shared.resize(scratch.holder.len().div_ceil(64), 0);
            for (cluster, idle) in idle.iter_mut().enumerate() {
                for host in view.cluster_hosts(cluster) {
                    let open = self
                        .hard
                        .get(host.idx() / 64)
                        .is_some_and(|word| word & (1 << (host.idx() % 64)) == 0)
                        && matrix
                            .count
                            .get(host.idx())
                            .is_some_and(|count| *count < self.level);
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
        self.any_open = idle.iter().any(|idle| !idle.is_empty()) || n_shared.iter().any(|n| *n > 0);
    }

    /// The next waiting job to consider: in submission order until the
    /// reservation, then the jobs behind it that could start at all (long
    /// jobs that cannot start are passed over unseen: one needs idle hosts,
    /// and ends by the reservation or takes only hosts it spares; with one
    /// cluster, else by size alone). `Some(None)`: a position whose job
    /// left.
    #[allow(clippy::option_option)]
    fn next_job(&mut self, now: u64) -> Option<Option<(JobId, WaitInfo)>> {
        if self.reserving.is_none() {
            if !self.any_open || self.next == self.waiting.jobs.len() {
                return None;
            }
            self.next += 1;
            return Some(self.waiting.at(self.next - 1));
        }
        let (max_n, max_n_any, max_estimate) = match self.lists.idle.as_slice() {
            [idle] => (
                idle.len(),
                self.reserved.map_or(usize::MAX, |held| held.extra),
                self.reserved
                    .map_or(u64::MAX, |held| held.at.saturating_sub(now)),
            ),
            clusters => (
                clusters.iter().map(Vec::len).max().unwrap_or(0),
                usize::MAX,
                u64::MAX,
            ),
        };
        let number = self
            .behind
            .next(&self.waiting, max_n, max_n_any, max_estimate)?;
        Some(Some(self.waiting.get(number)?))
    }

    /// How long a job runs if it starts now: its estimate, or if it
    /// shares, running one whole slice in `turns` at least after what is
    /// left of the current slice ([`Leveled::turns`]), a slice plus its
    /// estimate rounded up to whole slices times `turns`.
    fn runs(estimate: Option<u64>, shares: bool, turns: u32, slice: u64) -> Option<u64> {
        estimate.map(|estimate| {
            if shares {
                let slice = slice.max(1);
                estimate
                    .div_ceil(slice)
                    .saturating_mul(slice)
                    .saturating_mul(u64::from(turns))
                    .saturating_add(slice)
            } else {
                estimate
            }
        })
    }

    /// In how many slices a job that shares in `room` runs one at least:
    /// the residents of the hosts it shares are its partners, and in every
    /// slice it does not run, a partner ahead of it in the rotation does
    /// and goes behind it, so it runs one slice in its partners plus one. In a column those are fewer than the
    /// level; on the narrowest open hosts, each with fewer than the level,
    /// there may be more (a job started in this decision on several of
    /// them is counted on each).
    fn turns(&self, room: &Room) -> u32 {
        let partial = &self.lists.partial;
        if room.column.is_some() || partial.is_empty() {
            return self.level;
        }
        let mut partners: SmallVec<[JobId; 8]> = SmallVec::new();
        let mut fresh = 0;
        for host in partial {
            let residents = self.matrix.on(*host);
            partners.extend_from_slice(residents);
            fresh += (self.matrix.count[host.idx()] as usize).saturating_sub(residents.len());
        }
        partners.sort_unstable();
        partners.dedup();
        let turns = u32::try_from(partners.len() + fresh + 1).unwrap_or(u32::MAX);
        turns.max(self.level)
    }

    /// Whether a job starting now fits beside the reservation: it ends by
    /// it (slowed if it shares), or takes idle hosts the reservation can
    /// spare (the partners a brief job slows may delay the reserved job by
    /// its estimate at most).
    fn beside(
        held: Reserved,
        info: WaitInfo,
        shares: bool,
        turns: u32,
        now: u64,
        slice: u64,
    ) -> Fit {
        let in_time = Self::runs(info.estimate, shares, turns, slice)
            .is_some_and(|runs| now.saturating_add(runs) <= held.at);
        let spare = !shares && (info.cluster != held.cluster || info.n_needed <= held.extra);
        Fit { in_time, spare }
    }

    /// Decides whether a waiting job starts now, and where.
    fn consider<V: JobView>(
        &mut self,
        walk: &mut Walk<'_, V>,
        job: JobId,
        info: WaitInfo,
    ) -> Consider {
        let places = info.places();
        let several = places.several();
        let mut best: Option<(WaitInfo, Room)> = None;
        for cluster in places.each() {
            let tried = info.on(cluster);
            let Some(room) = self.room_on(walk, tried) else {
                continue;
            };
            if several && !walk.view.may_use(job, cluster) {
                continue;
            }
            // Where it starts without sharing, else where it shares; load
            // and speed decide between clusters that can take it alike.
            let better = best.as_ref().is_none_or(|(kept, kept_room)| {
                let (a, b) = (
                    (!room.fits, room.shares),
                    (!kept_room.fits, kept_room.shares),
                );
                a < b || (a == b && ranks_before(walk.view, cluster, kept.cluster))
            });
            if better {
                best = Some((tried, room));
            }
        }
        let Some((info, mut room)) = best else {
            return Consider::Pass;
        };
        if several {
            // The lists hold what the last cluster tried left there.
            room = self.room(walk.scratch, walk.view, info);
        }
        let facts = walk.view.facts(job);
        if !facts.runnable || !facts.hosts.is_empty() {
            return Consider::Pass;
        }
        match self.reserving {
            Some(reserving) => self.backfill(walk, info, room, reserving),
            None => self.first_job(info, room),
        }
    }

    /// Where a waiting job tried on `info`'s cluster would go, or `None`
    /// when it cannot start there in this decision.
    fn room_on<V: JobView>(&mut self, walk: &Walk<'_, V>, info: WaitInfo) -> Option<Room> {
        let view = walk.view;
        let (now, slice) = (walk.now, view.slice());
        let WaitInfo {
            cluster, n_needed, ..
        } = info;
        // Behind the reservation a job starts only if it fits beside it:
        // once it is predicted, most jobs behind it are turned away here,
        // with no look at their record.
        if let Some(held) = self.reserved {
            let shares = self
                .lists
                .idle
                .get(cluster)
                .is_none_or(|idle| idle.len() < n_needed);
            // Counted at one slice in the level, the fewest turns it may
            // have: a job that cannot end in time so cannot in its room.
            let fit = Self::beside(held, info, shares, self.level, now, slice);
            if !fit.in_time && !fit.spare {
                return None;
            }
        }
        if n_needed == 0
            || n_needed > view.cluster_hosts(cluster).len()
            || cluster >= self.n_clusters
        {
            return None;
        }
        let room = self.room(walk.scratch, view, info);
        // Behind the first job that could not start, one that fits nowhere
        // is passed over before its record is read: the hosts it was
        // measured against (and the columns and narrowest hosts found on
        // the way, which depend on the hosts alone) are the same whether
        // or not it could run.
        if self.reserving.is_some() && !room.fits {
            return None;
        }
        Some(room)
    }

    /// Where a job of `info`'s size would go (the columns pass): idle
    /// hosts when there are enough; else a brief job may time-share one
    /// whole column of exactly its width, and a short one (or one without
    /// an estimate) the open hosts whose residents are narrowest; a longer
    /// job waits for idle hosts (sharing would stretch it and its partners
    /// by more than it could wait).
    fn room(&mut self, scratch: &Scratch, view: &impl JobView, info: WaitInfo) -> Room {
        let WaitInfo {
            cluster,
            n_needed,
            estimate,
            ..
        } = info;
        let n_idle = self.lists.idle[cluster].len();
        let mut column = None;
        self.lists.partial.clear();
        if n_idle < n_needed && may_share(estimate) {
            if !self.columns_made {
                self.make_columns(scratch, view);
                self.columns_made = true;
            }
            // The blocks are widest first: a binary search finds the width.
            let blocks = &self.lists.blocks[cluster];
            let at = blocks.partition_point(|&(_, width)| width > n_needed);
            column = blocks
                .get(at)
                .is_some_and(|&(_, width)| width == n_needed)
                .then_some(at);
            // Open hosts only fill up during a decision: a size that found
            // too few finds too few again.
            if column.is_none()
                && may_share_part(estimate)
                && n_needed < self.lists.no_partial[cluster]
            {
                self.narrowest(scratch, cluster, n_needed - n_idle);
                if self.lists.partial.len() + n_idle < n_needed {
                    self.lists.partial.clear();
                    self.lists.no_partial[cluster] = n_needed;
                }
            }
        }
        Room {
            cluster,
            column,
            fits: n_idle >= n_needed || column.is_some() || !self.lists.partial.is_empty(),
            shares: n_idle < n_needed,
        }
    }

    /// The columns of each cluster, widest first: open shared hosts that
    /// share one set of residents, each of which lies entirely on them. A
    /// column's residents all lie on exactly its hosts, so it is the hosts
    /// of any of its residents ([`Matrix::columns`]).
    fn make_columns(&mut self, scratch: &Scratch, view: &impl JobView) {
        let host_cluster = &scratch.host_cluster;
        let Lists {
            shared,
            blocks,
            column_hosts,
            ..
        } = &mut self.lists;
        self.matrix.columns(shared, view, |hosts| {
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
    }

    /// Fills `Lists::partial` with up to `wanted` open shared hosts of
    /// `cluster` whose residents are narrowest.
    fn narrowest(&mut self, scratch: &Scratch, cluster: usize, wanted: usize) {
        let (shared, matrix, n_clusters) = (&self.lists.shared, &self.matrix, self.n_clusters);
        let narrow = self.narrow.get_or_insert_with(|| {
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
        let level = self.level;
        self.lists.partial.extend(
            narrow[cluster]
                .iter()
                .map(|(_, host)| *host)
                .filter(|host| matrix.count[host.idx()] < level)
                .take(wanted),
        );
    }

    /// The first waiting jobs, before any reservation: a job never
    /// time-shares, it starts on idle hosts or gets the reservation; one
    /// without an estimate starts where the level lets it, as in a queue
    /// without one.
    fn first_job(&mut self, info: WaitInfo, room: Room) -> Consider {
        if !room.shares || (info.estimate.is_none() && room.fits) {
            return Consider::Start(room);
        }
        self.reserving = Some(info);
        // Behind it, short jobs first, shortest first; then the others in
        // submission order. Open hosts only fill up during a decision, so
        // a job needing more than its cluster's idle hosts (or, if brief,
        // than its idle and shared open hosts) at the start never starts
        // in it (nor shares one without an estimate).
        let rooms: Vec<(usize, usize)> = self
            .lists
            .idle
            .iter()
            .zip(&self.lists.n_shared)
            .map(|(idle, shared)| (idle.len(), idle.len() + shared))
            .collect();
        self.behind.start(
            &self.waiting,
            self.waiting.number(self.next - 1),
            |info| {
                info.places().each().any(|cluster| {
                    rooms.get(cluster).is_some_and(|&(plain, brief)| {
                        info.n_needed
                            <= if is_brief(info.estimate) {
                                brief
                            } else {
                                plain
                            }
                    })
                })
            },
            |info| is_short(info.estimate),
        );
        Consider::Pass
    }

    /// The backfill pass: behind the reservation (made here the first
    /// time a job could start behind it), a job starts only if it fits
    /// beside it.
    fn backfill<V: JobView>(
        &mut self,
        walk: &mut Walk<'_, V>,
        info: WaitInfo,
        room: Room,
        reserving: WaitInfo,
    ) -> Consider {
        if !room.fits {
            return Consider::Pass;
        }
        if self.reserved.is_none() {
            match self.reservation(walk, reserving) {
                Some(held) => self.reserved = Some(held),
                None => return Consider::Stop,
            }
        }
        let Some(held) = self.reserved else {
            return Consider::Stop;
        };
        let turns = if room.shares { self.turns(&room) } else { 1 };
        let fit = Self::beside(held, info, room.shares, turns, walk.now, walk.view.slice());
        if !fit.in_time && !fit.spare {
            return Consider::Pass;
        }
        if !fit.in_time && info.cluster == held.cluster {
            if let Some(held) = self.reserved.as_mut() {
                held.extra -= info.n_needed;
            }
        }
        Consider::Start(room)
    }

    /// The reservation pass: when enough hosts of one of the reserved
    /// job's clusters are predicted to be idle (the earliest of them),
    /// counting the jobs that started before it in this decision; `None`
    /// without a prediction.
    fn reservation<V: JobView>(
        &mut self,
        walk: &mut Walk<'_, V>,
        reserving: WaitInfo,
    ) -> Option<Reserved> {
        let (view, now) = (walk.view, walk.now);
        if !self.predicted {
            self.matrix.predict(view, now, self.level);
            self.predicted = true;
            for (started, hosts) in &walk.bind[self.started_from..] {
                self.matrix
                    .occupy(hosts, view.estimate(*started), now, view);
            }
        }
        let n_needed = reserving.n_needed;
        let times = &self.matrix.idle_at;
        let mut best: Option<Reserved> = None;
        for cluster in reserving.places().each() {
            let hosts = view.cluster_hosts(cluster);
            if n_needed == 0 || n_needed > hosts.len() {
                continue;
            }
            let ends = &mut walk.scratch.ends;
            ends.clear();
            ends.extend(hosts.iter().map(|host| times[host.idx()].max(now)));
            // The time of the `n_needed`-th host to be idle.
            let (_, &mut at, _) = ends.select_nth_unstable(n_needed - 1);
            if at == u64::MAX || best.is_some_and(|best| best.at <= at) {
                continue;
            }
            let available = hosts
                .iter()
                .filter(|host| times[host.idx()].max(now) <= at)
                .count();
            best = Some(Reserved {
                cluster,
                at,
                extra: available.saturating_sub(n_needed),
            });
        }
        best
    }

    /// Starts a job in `room`: it joins the matrix now, and runs now if its
    /// hosts are free in this slice, else from a later slice, by the
    /// rotation.
    fn place<V: JobView>(
        &mut self,
        walk: &mut Walk<'_, V>,
        job: JobId,
        info: WaitInfo,
        room: &Room,
    ) {
        let WaitInfo {
            cluster,
            n_needed,
            estimate,
            ..
        } = info;
        let view = walk.view;
        let lists = &mut self.lists;
        lists.chosen.clear();
        if let Some(idx) = room.column {
            let (from, width) = lists.blocks[cluster][idx];
            lists
                .chosen
                .extend_from_slice(&lists.column_hosts[from..from + width]);
        }
        lists.chosen.extend_from_slice(&lists.partial);
        let width = lists.chosen.len();
        let from_idle = n_needed - width;
        lists.chosen.extend(lists.idle[cluster].drain(..from_idle));
        if view.checks_memory(job) && !lists.chosen.iter().all(|host| view.fits_on(job, *host)) {
            // Memory it cannot have: give the idle hosts back, in order.
            let given: Vec<HostId> = lists.chosen[width..].to_vec();
            lists.idle[cluster].splice(0..0, given);
            return;
        }
        if let Some(idx) = room.column {
            lists.blocks[cluster].remove(idx);
        }
        if self.level >= 2 {
            // The idle hosts it takes are open shared hosts from now on:
            // a later job of this decision may share them (the open hosts,
            // idle and shared together, still only shrink), ranked by its
            // width ([`Matrix::raise_idle`]).
            for &host in &lists.chosen[width..] {
                lists.shared[host.idx() / 64] |= 1 << (host.idx() % 64);
                lists.n_shared[cluster] += 1;
                if let Some(narrow) = self.narrow.as_mut() {
                    let entry = (n_needed, host);
                    let at = narrow[cluster].partition_point(|kept| *kept < entry);
                    narrow[cluster].insert(at, entry);
                }
            }
        }
        if !lists.partial.is_empty() {
            // Columns it took part of are columns no longer.
            lists.partial.sort_unstable();
            let (partial, column_hosts) = (&lists.partial, &lists.column_hosts);
            lists.blocks[cluster].retain(|&(from, width)| {
                !column_hosts[from..from + width]
                    .iter()
                    .any(|host| partial.binary_search(host).is_ok())
            });
        }
        for (at, host) in lists.chosen.iter().enumerate() {
            if at < width {
                self.matrix.raise(*host);
            } else {
                self.matrix.raise_idle(*host, n_needed);
            }
        }
        lists.chosen.sort_unstable();
        if !lists.partial.is_empty() {
            if let Some(narrow) = self.narrow.as_mut() {
                let (matrix, level) = (&self.matrix, self.level);
                narrow[cluster].retain(|(_, host)| matrix.count[host.idx()] < level);
            }
        }
        // The hosts it takes are busy until it ends: a reservation made
        // after it starts counts them so (a later one, from `bind`).
        if self.predicted {
            self.matrix.occupy(&lists.chosen, estimate, walk.now, view);
        }
        if lists
            .chosen
            .iter()
            .all(|host| !walk.scratch.is_taken(*host))
        {
            for host in &lists.chosen {
                mark(walk.scratch, *host, job);
            }
            self.taken += lists.chosen.len();
            walk.out.push(job);
        }
        walk.bind.push((job, lists.chosen.clone()));
    }
}

/// How a job fits beside a reservation.
struct Fit {
    in_time: bool,
    spare: bool,
}
