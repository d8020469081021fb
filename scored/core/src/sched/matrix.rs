//! The time-sharing matrix as a gang queue with a level sees it when it
//! starts waiting jobs: which jobs reside on each host (every job with
//! hosts, of any queue), and when each host is predicted to be idle.
//!
//! It is kept between decisions and brought up to date by a walk over the
//! residents ([`Matrix::sync`]): between two decisions a few jobs start or
//! end, so the walk adds the jobs it has not seen on their hosts and takes
//! off those that are no longer resident, and a decision pays for the
//! residents, not for every host of the machine. The core drops a job
//! whose hosts change ([`Matrix::forget`], through `Scratch::forget`), so
//! a kept job's hosts are its hosts. The hosts with residents are also
//! kept as bits, by how many reside there, so that the open hosts of a
//! decision are found a word of 64 hosts at a time.
//!
//! A cache: a copy (the panic checkpoint) starts empty, and an empty
//! matrix is made whole by the next walk. Debug builds check it against
//! one built afresh at every decision ([`Matrix::check`]).

use smallvec::SmallVec;

use super::JobView;
use crate::ids::{HostId, JobId};
use crate::jobset::JobMap;
use crate::queue::Queue;

/// How many residents a host is counted up to in the bits of
/// [`Matrix::at_least`]: levels up to this find their open hosts a word
/// at a time, higher ones host by host among the occupied.
const COUNTED: usize = 4;

/// A resident as the matrix keeps it.
#[derive(Debug)]
struct Member {
    job: JobId,
    /// Its hosts (those of the machine) when it was added.
    hosts: Vec<HostId>,
    /// How many hosts it has, and whether `hosts` are all of them.
    width: usize,
    whole: bool,
    /// The walk that last found it resident.
    seen: u64,
    /// Its predicted end, once [`Matrix::predict`] has run.
    end: u64,
}

/// The matrix a decision sees (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct Matrix {
    /// Per host, its residents in id order (so that hosts with the same
    /// residents compare equal as slices).
    on: Vec<SmallVec<[JobId; 2]>>,
    /// Per host, how many jobs reside there: its residents, and the jobs
    /// started in the current decision ([`Matrix::raise`]).
    pub(super) count: Vec<u32>,
    /// Per host, how many hosts its residents have together.
    widths: Vec<usize>,
    /// Bit `h` of `at_least[k]` is set when `k + 1` or more jobs reside on
    /// host `h` (without the jobs started in the current decision).
    at_least: [Vec<u64>; COUNTED],
    /// The residents, and where each is in `members`.
    members: Vec<Member>,
    index: JobMap<usize>,
    /// How many walks have been made.
    walks: u64,
    /// Hosts whose count the current decision raised.
    raised: Vec<HostId>,
    /// Idle hosts whose width the current decision set.
    widened: Vec<HostId>,
    /// The hosts of each job [`Matrix::occupy`] counted in the current
    /// decision, and per host which of them are there: a job started in
    /// a decision may share the hosts of one started before it in it.
    fresh: Vec<Vec<HostId>>,
    fresh_on: Vec<SmallVec<[u32; 2]>>,
    /// Per host, when it will be idle (µs; `u64::MAX`: a resident has no
    /// estimate), once [`Matrix::predict`] has run.
    pub(super) idle_at: Vec<u64>,
    /// Partners of one job, while its end is predicted.
    partners: Vec<JobId>,
}

impl Clone for Matrix {
    fn clone(&self) -> Matrix {
        Matrix::default()
    }
}

/// The jobs of `queue` that reside on their hosts: the started ones of a
/// queue whose jobs get their hosts when they start, else every one.
fn residents(queue: &Queue) -> impl Iterator<Item = JobId> + '_ {
    let n = if queue.starts_late() {
        queue.n_started()
    } else {
        queue.len()
    };
    queue.order().take(n)
}

impl Matrix {
    /// The residents of `host`, in id order.
    #[inline]
    pub(super) fn on(&self, host: HostId) -> &[JobId] {
        self.on
            .get(host.idx())
            .map_or(&[], |residents| residents.as_slice())
    }

    /// How many hosts the residents of `host` have together.
    #[inline]
    pub(super) fn widths(&self, host: HostId) -> usize {
        self.widths.get(host.idx()).copied().unwrap_or(0)
    }

    /// Whether a job resides on `host`.
    #[inline]
    pub(super) fn occupied(&self, host: HostId) -> bool {
        bit(&self.at_least[0], host)
    }

    /// Brings the matrix up to date with the queues: every job with
    /// hosts, of any queue (of a queue whose jobs get their hosts when
    /// they start, the started ones), resides on its hosts of the machine.
    pub(super) fn sync(&mut self, queues: &[Queue], view: &impl JobView, n_hosts: usize) {
        if self.on.len() != n_hosts {
            *self = Matrix::default();
            self.on.resize_with(n_hosts, SmallVec::new);
            self.count.resize(n_hosts, 0);
            self.widths.resize(n_hosts, 0);
            for bits in &mut self.at_least {
                bits.resize(n_hosts.div_ceil(64), 0);
            }
        }
        debug_assert!(self.raised.is_empty(), "a decision left its counts raised");
        self.walks += 1;
        let walk = self.walks;
        for queue in queues {
            for job in residents(queue) {
                match self.index.get(&job) {
                    Some(&at) => self.members[at].seen = walk,
                    None => {
                        let all = view.hosts(job);
                        let hosts: Vec<HostId> = all
                            .iter()
                            .copied()
                            .filter(|host| host.idx() < n_hosts)
                            .collect();
                        if !hosts.is_empty() {
                            self.add(job, hosts, all.len(), walk);
                        }
                    }
                }
            }
        }
        let mut at = 0;
        while at < self.members.len() {
            if self.members[at].seen == walk {
                at += 1;
            } else {
                let job = self.members[at].job;
                self.forget(job);
            }
        }
    }

    /// Takes `job` off its hosts, if it resides there.
    pub(super) fn forget(&mut self, job: JobId) {
        let Some(at) = self.index.remove(&job) else {
            return;
        };
        let member = self.members.swap_remove(at);
        if let Some(moved) = self.members.get(at) {
            self.index.insert(moved.job, at);
        }
        for host in &member.hosts {
            let residents = &mut self.on[host.idx()];
            if let Ok(pos) = residents.binary_search(&job) {
                residents.remove(pos);
                let left = residents.len();
                self.count[host.idx()] = left as u32;
                self.widths[host.idx()] -= member.width;
                if let Some(bits) = self.at_least.get_mut(left) {
                    clear_bit(bits, *host);
                }
            }
        }
    }

    /// Puts `job` on `hosts`, those of the machine of its `width` hosts.
    fn add(&mut self, job: JobId, hosts: Vec<HostId>, width: usize, walk: u64) {
        for host in &hosts {
            let residents = &mut self.on[host.idx()];
            if let Err(pos) = residents.binary_search(&job) {
                residents.insert(pos, job);
                let before = residents.len() - 1;
                self.count[host.idx()] = residents.len() as u32;
                self.widths[host.idx()] += width;
                if let Some(bits) = self.at_least.get_mut(before) {
                    set_bit(bits, *host);
                }
            }
        }
        self.index.insert(job, self.members.len());
        self.members.push(Member {
            job,
            whole: hosts.len() == width,
            width,
            hosts,
            seen: walk,
            end: 0,
        });
    }

    /// Counts a job started in this decision on `host` (until
    /// [`Matrix::settle`]: it resides there from the next walk on).
    pub(super) fn raise(&mut self, host: HostId) {
        self.count[host.idx()] += 1;
        self.raised.push(host);
    }

    /// Counts a job of `width` hosts started in this decision on `host`,
    /// which was idle: its width is the host's until [`Matrix::settle`].
    pub(super) fn raise_idle(&mut self, host: HostId, width: usize) {
        self.raise(host);
        self.widths[host.idx()] = width;
        self.widened.push(host);
    }

    /// Ends the decision: the counts and widths are those of the
    /// residents again.
    pub(super) fn settle(&mut self) {
        for host in self.raised.drain(..) {
            self.count[host.idx()] = self.on[host.idx()].len() as u32;
        }
        for host in self.widened.drain(..) {
            self.widths[host.idx()] = 0;
        }
        for hosts in self.fresh.drain(..) {
            for host in hosts {
                if let Some(on) = self.fresh_on.get_mut(host.idx()) {
                    on.clear();
                }
            }
        }
    }

    /// The open hosts (not in `hard`, fewer than `level` residents) of
    /// the machine: each idle one (no resident) given to `idle` in
    /// increasing order, the shared ones as bits in `shared` (one a host);
    /// a word of 64 hosts at a time where the level is counted
    /// ([`COUNTED`]).
    pub(super) fn open_hosts(
        &self,
        hard: &[u64],
        level: u32,
        mut idle: impl FnMut(HostId),
        shared: &mut Vec<u64>,
    ) {
        shared.clear();
        shared.resize(self.at_least[0].len(), 0);
        if level == 0 {
            return;
        }
        let n_hosts = self.on.len();
        let full = (level as usize)
            .checked_sub(1)
            .and_then(|k| self.at_least.get(k));
        for (word, (&occupied, sharing)) in
            self.at_least[0].iter().zip(shared.iter_mut()).enumerate()
        {
            let in_machine = if (word + 1) * 64 <= n_hosts {
                u64::MAX
            } else {
                (1u64 << (n_hosts % 64)) - 1
            };
            let open = !hard.get(word).copied().unwrap_or(u64::MAX) & in_machine;
            each_bit(open & !occupied, word, &mut idle);
            if level < 2 {
                continue;
            }
            *sharing = open & occupied & !full.map_or(0, |bits| bits[word]);
            if full.is_none() {
                // Beyond the counted levels, host by host.
                let candidates = *sharing;
                each_bit(candidates, word, |host| {
                    if self.count[host.idx()] >= level {
                        *sharing &= !(1 << (host.idx() % 64));
                    }
                });
            }
        }
    }

    /// Gives `found` the hosts (in the job's order) of each column among
    /// the open shared hosts `shared` (one bit a host): hosts that share
    /// one set of residents, each of which lies on exactly them. A
    /// column is the hosts of any of its residents, so each resident that
    /// is the smallest on its first host proposes its hosts, which are a
    /// column when all of them are shared, each with the same residents,
    /// and every resident is as wide; each column is found once, by its
    /// residents rather than by each of its hosts.
    pub(super) fn columns(
        &self,
        shared: &[u64],
        view: &impl JobView,
        mut found: impl FnMut(&[HostId]),
    ) {
        for member in &self.members {
            let first = member.hosts[0];
            if !member.whole || !bit(shared, first) || self.on(first).first() != Some(&member.job) {
                continue;
            }
            let residents = self.on(first);
            let width = member.hosts.len();
            let column = member
                .hosts
                .iter()
                .all(|host| bit(shared, *host) && self.on(*host) == residents)
                && residents.iter().all(|job| view.hosts(*job).len() == width);
            if column {
                found(&member.hosts);
            }
        }
    }

    /// Predicts when each host empties: the latest predicted end of its
    /// residents ([`Matrix::predicted_end`]), each resident predicted once.
    /// Only the first waiting job that cannot start on idle hosts needs
    /// it, so a decision makes it only then.
    pub(super) fn predict(&mut self, view: &impl JobView, now: u64, level: u32) {
        for at in 0..self.members.len() {
            let job = self.members[at].job;
            self.members[at].end = self.predicted_end(at, job, view, now, level);
        }
        self.idle_at.clear();
        self.idle_at.resize(self.on.len(), now);
        for member in &self.members {
            for host in &member.hosts {
                let idle = &mut self.idle_at[host.idx()];
                *idle = (*idle).max(member.end);
            }
        }
    }

    /// Counts a job that starts now on `hosts` (sorted) with `estimate` in the
    /// predictions: an idle host is busy until it ends; on a shared one
    /// every resident is slowed by its run, on all of its hosts (without an
    /// estimate, they have no prediction).
    pub(super) fn occupy(
        &mut self,
        hosts: &[HostId],
        estimate: Option<u64>,
        now: u64,
        view: &impl JobView,
    ) {
        let mut partners = std::mem::take(&mut self.partners);
        partners.clear();
        for host in hosts {
            partners.extend_from_slice(self.on(*host));
        }
        partners.sort_unstable();
        partners.dedup();
        // `hosts` is sorted: a partner's host is looked up in it by halves,
        // as jobs of thousands of hosts share with partners as wide.
        debug_assert!(hosts.is_sorted(), "the hosts a job occupies are sorted");
        for partner in &partners {
            for host in view.hosts(*partner) {
                if hosts.binary_search(host).is_ok() {
                    continue;
                }
                if let Some(idle) = self.idle_at.get_mut(host.idx()) {
                    *idle = estimate.map_or(u64::MAX, |run| idle.saturating_add(run));
                }
            }
        }
        self.partners = partners;
        // Jobs counted earlier in this decision on these hosts are slowed
        // alike on their other hosts.
        self.fresh_on.resize_with(self.on.len(), SmallVec::new);
        let mut fresh: SmallVec<[u32; 4]> = hosts
            .iter()
            .flat_map(|host| self.fresh_on[host.idx()].iter().copied())
            .collect();
        fresh.sort_unstable();
        fresh.dedup();
        for partner in fresh {
            for host in &self.fresh[partner as usize] {
                if hosts.binary_search(host).is_ok() {
                    continue;
                }
                if let Some(idle) = self.idle_at.get_mut(host.idx()) {
                    *idle = estimate.map_or(u64::MAX, |run| idle.saturating_add(run));
                }
            }
        }
        let number = self.fresh.len() as u32;
        self.fresh.push(hosts.to_vec());
        for host in hosts {
            self.fresh_on[host.idx()].push(number);
            let after = self.after(*host, estimate, now);
            if let Some(idle) = self.idle_at.get_mut(host.idx()) {
                *idle = after;
            }
        }
    }

    /// When `host` is predicted to be idle if a job with `estimate` starts
    /// on it now.
    fn after(&self, host: HostId, estimate: Option<u64>, now: u64) -> u64 {
        let idle = self.idle_at.get(host.idx()).copied().unwrap_or(now);
        match estimate {
            None => u64::MAX,
            Some(run) if idle <= now => now.saturating_add(run),
            Some(run) => idle
                .saturating_add(run)
                .max(now.saturating_add(run.saturating_mul(2))),
        }
    }

    /// When `job` (the member at `at`), resident now, is predicted to end:
    /// the earlier of two bounds. In every slice it runs or a job sharing
    /// one of its hosts does, so it ends within its remaining estimate plus
    /// those of its partners. And it runs one whole slice in `level` at
    /// least, or in its partners plus one if it has more (in every slice
    /// it does not run, a partner ahead of it in the rotation does and goes
    /// behind it), after what is left of the current one, so it ends
    /// within a slice plus its remaining estimate rounded up to whole
    /// slices, times that many. The second keeps a job that shares with a long one
    /// predicted by its own run: with the first alone, its hosts would look
    /// busy until the long job ends, and a reservation made then would
    /// admit jobs that keep the reserved one waiting past the time it was
    /// promised.
    fn predicted_end(
        &mut self,
        at: usize,
        job: JobId,
        view: &impl JobView,
        now: u64,
        level: u32,
    ) -> u64 {
        let Some(end) = view.expected_end(job) else {
            return u64::MAX;
        };
        let end = end.max(now);
        let mut total = end;
        self.partners.clear();
        for host in &self.members[at].hosts {
            for other in &self.on[host.idx()] {
                if *other != job {
                    self.partners.push(*other);
                }
            }
        }
        if self.partners.is_empty() {
            return end;
        }
        self.partners.sort_unstable();
        self.partners.dedup();
        for other in &self.partners {
            match view.expected_end(*other) {
                Some(end) => total = total.saturating_add(end.saturating_sub(now)),
                None => return u64::MAX,
            }
        }
        let slice = view.slice().max(1);
        let turns = u64::from(level).max(self.partners.len() as u64 + 1);
        let slowed = (end - now)
            .div_ceil(slice)
            .saturating_mul(slice)
            .saturating_mul(turns)
            .saturating_add(slice)
            .saturating_add(now);
        total.min(slowed)
    }

    /// Panics unless the matrix is the one the queues make (debug builds,
    /// after [`Matrix::sync`]).
    pub(super) fn check(&self, queues: &[Queue], view: &impl JobView) {
        let n_hosts = self.on.len();
        let mut expected: Vec<Vec<JobId>> = vec![Vec::new(); n_hosts];
        for queue in queues {
            for job in residents(queue) {
                for host in view.hosts(job) {
                    if let Some(residents) = expected.get_mut(host.idx()) {
                        residents.push(job);
                    }
                }
            }
        }
        for (idx, residents) in expected.iter_mut().enumerate() {
            residents.sort_unstable();
            let host = HostId(idx as u32);
            assert_eq!(
                self.on(host),
                residents.as_slice(),
                "the residents of host {idx}"
            );
            assert_eq!(
                self.count[idx] as usize,
                residents.len(),
                "the count of host {idx}"
            );
            let widths: usize = residents.iter().map(|job| view.hosts(*job).len()).sum();
            assert_eq!(self.widths[idx], widths, "the widths of host {idx}");
            for (k, bits) in self.at_least.iter().enumerate() {
                assert_eq!(
                    bit(bits, host),
                    residents.len() > k,
                    "host {idx} with {} residents as at least {}",
                    residents.len(),
                    k + 1
                );
            }
        }
        for (at, member) in self.members.iter().enumerate() {
            assert_eq!(
                self.index.get(&member.job),
                Some(&at),
                "the index of job {}",
                member.job
            );
        }
        assert_eq!(
            self.index.len(),
            self.members.len(),
            "the index of the residents"
        );
    }
}

/// Whether `host`'s bit is set in `bits`.
#[inline]
fn bit(bits: &[u64], host: HostId) -> bool {
    bits.get(host.idx() / 64)
        .is_some_and(|word| word & (1 << (host.idx() % 64)) != 0)
}

#[inline]
fn set_bit(bits: &mut [u64], host: HostId) {
    bits[host.idx() / 64] |= 1 << (host.idx() % 64);
}

#[inline]
fn clear_bit(bits: &mut [u64], host: HostId) {
    bits[host.idx() / 64] &= !(1 << (host.idx() % 64));
}

/// Calls `f` for each host of word `word` whose bit is set in `bits`, in
/// increasing order.
#[inline]
pub(super) fn each_bit(mut bits: u64, word: usize, mut f: impl FnMut(HostId)) {
    while bits != 0 {
        let host = word * 64 + bits.trailing_zeros() as usize;
        f(HostId(host as u32));
        bits &= bits - 1;
    }
}
