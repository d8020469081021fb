//! The hosts of the jobs a decision's walk has met, kept as bit masks
//! between decisions, so that turning a gang job away costs a few word
//! ANDs with the taken hosts rather than a read of its record.

use crate::ids::{HostId, JobId};

/// How many slots [`Masks`] starts with, and the most it grows to (powers
/// of two).
pub(super) const MASK_SLOTS: usize = 1024;
pub(super) const MASK_SLOTS_MAX: usize = 16384;

/// Up to this many hosts, [`Masks`] keeps every job's hosts as bits.
/// Masks pay for the wide jobs of parallel machines (a job of hundreds of
/// hosts is checked and taken a word at a time); on larger machines, of
/// one-host jobs by the thousand, reading a mask costs more than the one
/// host it stands for.
pub(super) const MASK_HOSTS: usize = 1152;

/// Up to this many hosts, [`Masks`] keeps the hosts of jobs of at least
/// half as many hosts as a mask has words, where a mask is still cheaper
/// to read than the hosts.
pub(super) const WIDE_MASK_HOSTS: usize = 16384;

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
pub(super) struct Masks {
    /// Words per mask; 0 until the first decision sizes the cache (and
    /// while the machine is too large for it).
    pub(super) words: usize,
    /// The fewest hosts of a job that keeps a mask.
    pub(super) min_width: usize,
    /// How many slots the table has (a power of two, or 0).
    pub(super) slots: usize,
    /// Per slot, `1 + words` words: the job's id plus one (0: empty), then
    /// its mask, so that a look-up reads one place.
    pub(super) table: Vec<u64>,
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
    pub(super) fn size_for(&mut self, n_hosts: usize) {
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
    pub(super) fn get(&self, job: JobId) -> Option<&[u64]> {
        if self.slots == 0 {
            return None;
        }
        let base = self.base(job);
        (self.table[base] == job.0.wrapping_add(1))
            .then(|| &self.table[base + 1..base + 1 + self.words])
    }

    /// Remembers the hosts of `job`.
    pub(super) fn put(&mut self, job: JobId, hosts: &[HostId]) {
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
    pub(super) fn turned_away(&self, jobs: &[JobId], taken: &[u64]) -> usize {
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

    pub(super) fn forget(&mut self, job: JobId) {
        if self.slots == 0 {
            return;
        }
        let base = self.base(job);
        if self.table[base] == job.0.wrapping_add(1) {
            self.table[base] = 0;
        }
    }
}

/// Whether a mask of hosts shares one with the taken hosts.
#[inline]
pub(super) fn overlaps(mask: &[u64], taken: &[u64]) -> bool {
    mask.iter()
        .zip(taken)
        .any(|(hosts, taken)| hosts & taken != 0)
}
