//! Sets and maps of job ids with constant-time look-ups, for what the
//! scheduling decision consults once per queued or running job (each
//! running job's crossing time), and an ordered set of them as bits
//! (`JobBits`: the live jobs, the jobs that ran in the current slice).
//!
//! Job ids are handed out in order, so they need no protection against
//! crafted collisions (a client cannot choose its job's id): a
//! multiplicative hash spreads them over the table at a fraction of the
//! cost of the standard library's SipHash, and far below an ordered set's
//! walk down its tree. No decision iterates the hashed ones, so the order
//! of their elements cannot leak into one (the restart snapshot sorts what it writes).
//!
//! Pure: no clock, no system calls.
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use crate::ids::JobId;

/// Hashes a job id by multiplying it with an odd constant (2^64 / φ), so
/// consecutive ids land far apart, in the high bits too (hashbrown takes
/// its control bits from the top of the hash).
#[derive(Debug, Default, Clone, Copy)]
pub struct JobIdHasher(u64);

impl Hasher for JobIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used for a `JobId`; anything else still hashes.
        for byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0 ^ value).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A set of job ids (see the module documentation).
pub type JobSet = HashSet<JobId, BuildHasherDefault<JobIdHasher>>;

/// A map keyed by job id, hashed the same way.
pub type JobMap<V> = HashMap<JobId, V, BuildHasherDefault<JobIdHasher>>;

/// An ordered set of job ids as one bit an id, for the live jobs, which
/// a gang switch takes out and puts back by the thousand on a machine of
/// many hosts: an insertion or removal sets or clears a bit, where a
/// sorted set searches and shifts. Iteration is in increasing id order, as
/// an ordered set's (the order in which stops are sent). Ids are handed out
/// in order, but on a busy machine a long job can stay live while tens of
/// thousands of later ones pass, so the bits are kept in chunks of 64
/// words (4,096 ids) with one summary bit a word that says whether the word
/// holds an id: iteration reads one summary word per chunk between the
/// least and the greatest element, and only the words that hold ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobBits {
    /// The index (id / 4,096) of the first chunk; meaningless while empty.
    base: u64,
    /// Bit `id % 64` of word `id / 64 - 64 * base` is set when `id` is in
    /// the set; 64 words a chunk.
    words: VecDeque<u64>,
    /// Bit `w % 64` of word `w / 64` is set when word `w` is not zero: one
    /// word a chunk; the first and last are never zero.
    summary: VecDeque<u64>,
    /// How many ids are set.
    len: usize,
}

/// Ids a chunk of [`JobBits`] covers (64 words of 64 bits).
const CHUNK_IDS: u64 = 64 * 64;

impl JobBits {
    /// The index of `job`'s word in `words`, and its bit, if its chunk is kept.
    fn place(&self, job: JobId) -> Option<(usize, u64)> {
        let chunk = (job.0 / CHUNK_IDS).checked_sub(self.base)?;
        let chunk = usize::try_from(chunk)
            .ok()
            .filter(|chunk| *chunk < self.summary.len())?;
        Some((chunk * 64 + ((job.0 / 64) % 64) as usize, 1 << (job.0 % 64)))
    }

    /// Inserts `job`; true if it was absent.
    pub fn insert(&mut self, job: JobId) -> bool {
        let chunk = job.0 / CHUNK_IDS;
        if self.summary.is_empty() {
            self.base = chunk;
            self.summary.push_back(0);
            self.words.resize(64, 0);
        }
        if chunk < self.base {
            // Zero chunks in front, in one move of the kept words.
            let missing = self.base - chunk;
            let words = usize::try_from(missing * 64).expect("a span that fits in memory");
            self.words.resize(self.words.len() + words, 0);
            self.words.rotate_right(words);
            for _ in 0..missing {
                self.summary.push_front(0);
            }
            self.base = chunk;
        }
        while chunk - self.base >= self.summary.len() as u64 {
            self.summary.push_back(0);
            self.words.resize(self.words.len() + 64, 0);
        }
        let Some((idx, bit)) = self.place(job) else {
            return false;
        };
        let absent = self.words[idx] & bit == 0;
        self.words[idx] |= bit;
        self.summary[idx / 64] |= 1 << (idx % 64);
        self.len += usize::from(absent);
        absent
    }

    /// Removes `job`; true if it was present.
    pub fn remove(&mut self, job: &JobId) -> bool {
        let Some((idx, bit)) = self.place(*job) else {
            return false;
        };
        if self.words[idx] & bit == 0 {
            return false;
        }
        self.words[idx] &= !bit;
        self.len -= 1;
        if self.words[idx] == 0 {
            self.summary[idx / 64] &= !(1 << (idx % 64));
        }
        while self.summary.front() == Some(&0) {
            self.summary.pop_front();
            self.words.drain(..64);
            self.base += 1;
        }
        while self.summary.back() == Some(&0) {
            self.summary.pop_back();
            self.words.truncate(self.words.len() - 64);
        }
        true
    }

    /// Whether `job` is in the set.
    pub fn contains(&self, job: &JobId) -> bool {
        self.place(*job)
            .is_some_and(|(idx, bit)| self.words[idx] & bit != 0)
    }

    /// How many ids the set has.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ids in increasing order.
    pub fn iter(&self) -> JobBitsIter<'_> {
        JobBitsIter {
            words: &self.words,
            summary: self.summary.iter(),
            first_word: self.base.wrapping_mul(64),
            chunk: 0,
            pending: 0,
            word: 0,
            bits: 0,
        }
    }

    /// Removes every id.
    pub fn clear(&mut self) {
        self.words.clear();
        self.summary.clear();
        self.len = 0;
    }

    /// Removes every id, returning them in order.
    pub fn take_all(&mut self) -> Vec<JobId> {
        let all = self.iter().collect();
        *self = JobBits::default();
        all
    }
}

/// The ids of a [`JobBits`] in increasing order.
#[derive(Debug, Clone)]
pub struct JobBitsIter<'a> {
    words: &'a VecDeque<u64>,
    summary: std::collections::vec_deque::Iter<'a, u64>,
    /// The index (id / 64) of the set's first word.
    first_word: u64,
    /// The index in `summary` of the word `pending` comes from (one past it
    /// once read).
    chunk: usize,
    /// The summary bits of the current chunk not yet read.
    pending: u64,
    /// The index in `words` of the word `bits` comes from.
    word: usize,
    /// The bits of the current word not yet returned.
    bits: u64,
}

impl Iterator for JobBitsIter<'_> {
    type Item = JobId;

    fn next(&mut self) -> Option<JobId> {
        while self.bits == 0 {
            while self.pending == 0 {
                self.pending = *self.summary.next()?;
                self.chunk += 1;
            }
            self.word = (self.chunk - 1) * 64 + self.pending.trailing_zeros() as usize;
            self.pending &= self.pending - 1;
            self.bits = self.words[self.word];
        }
        let bit = u64::from(self.bits.trailing_zeros());
        self.bits &= self.bits - 1;
        Some(JobId((self.first_word + self.word as u64) * 64 + bit))
    }
}

impl FromIterator<JobId> for JobBits {
    fn from_iter<I: IntoIterator<Item = JobId>>(iter: I) -> JobBits {
        let mut bits = JobBits::default();
        for job in iter {
            bits.insert(job);
        }
        bits
    }
}

impl<'a> IntoIterator for &'a JobBits {
    type Item = JobId;
    type IntoIter = JobBitsIter<'a>;
    fn into_iter(self) -> JobBitsIter<'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_follows_inserts_and_removes() {
        let mut set = JobSet::default();
        for id in 1..=1000 {
            set.insert(JobId(id));
        }
        set.remove(&JobId(500));
        assert!(set.contains(&JobId(1)) && set.contains(&JobId(1000)));
        assert!(!set.contains(&JobId(500)) && !set.contains(&JobId(1001)));
        assert_eq!(set.len(), 999);
    }

    #[test]
    fn consecutive_ids_differ_in_their_high_bits() {
        let hash = |id: u64| {
            let mut hasher = JobIdHasher::default();
            hasher.write_u64(id);
            hasher.finish() >> 57
        };
        let tops: std::collections::BTreeSet<u64> = (1..=64).map(hash).collect();
        assert!(tops.len() > 32, "{tops:?}");
    }

    proptest::proptest! {
        /// Any sequence of inserts and removals leaves the same ids, in the
        /// same order, as a `BTreeSet` given the same; the kept chunks span
        /// exactly the least to the greatest id.
        #[test]
        fn job_bits_behave_as_an_ordered_set(
            ops in proptest::collection::vec(
                (0u8..2, proptest::prop_oneof![0u64..300, 0u64..20_000]),
                0..600,
            ),
        ) {
            let mut bits = JobBits::default();
            let mut model = std::collections::BTreeSet::new();
            for (op, id) in ops {
                if op == 0 {
                    proptest::prop_assert_eq!(bits.insert(JobId(id)), model.insert(id));
                } else {
                    proptest::prop_assert_eq!(bits.remove(&JobId(id)), model.remove(&id));
                }
                proptest::prop_assert_eq!(bits.contains(&JobId(id)), model.contains(&id));
                proptest::prop_assert_eq!(bits.len(), model.len());
                let span = match (model.first(), model.last()) {
                    (Some(first), Some(last)) => (last / CHUNK_IDS - first / CHUNK_IDS + 1) as usize,
                    _ => 0,
                };
                proptest::prop_assert_eq!(bits.summary.len(), span);
                proptest::prop_assert_eq!(bits.words.len(), span * 64);
            }
            proptest::prop_assert!(bits.iter().map(|job| job.0).eq(model.iter().copied()));
            let all: Vec<u64> = bits.take_all().into_iter().map(|job| job.0).collect();
            proptest::prop_assert_eq!(all, model.into_iter().collect::<Vec<_>>());
            proptest::prop_assert!(bits.is_empty() && bits.iter().next().is_none());
        }
    }

    #[test]
    fn job_bits_reach_the_largest_ids() {
        let mut bits = JobBits::default();
        assert!(bits.insert(JobId(u64::MAX)));
        assert!(bits.insert(JobId(u64::MAX - 64)));
        assert!(!bits.insert(JobId(u64::MAX)));
        let all: Vec<JobId> = bits.iter().collect();
        assert_eq!(all, [JobId(u64::MAX - 64), JobId(u64::MAX)]);
        assert!(bits.remove(&JobId(u64::MAX)) && !bits.contains(&JobId(u64::MAX)));
        assert!(!bits.remove(&JobId(0)));
        bits.clear();
        assert!(bits.is_empty() && !bits.contains(&JobId(u64::MAX - 64)));
        let again: JobBits = [JobId(3), JobId(1), JobId(3)].into_iter().collect();
        assert_eq!(again.iter().collect::<Vec<_>>(), [JobId(1), JobId(3)]);
    }
}
