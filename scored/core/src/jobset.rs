//! Sets and maps of job ids with constant-time look-ups, for what the
//! scheduling decision consults once per queued or running job (the jobs
//! that ran in the current slice, each running job's crossing time).
//!
//! Job ids are handed out in order, so they need no protection against
//! crafted collisions (a client cannot choose its job's id): a
//! multiplicative hash spreads them over the table at a fraction of the
//! cost of the standard library's SipHash, and far below an ordered set's
//! walk down its tree. No decision iterates them, so the order of their
//! elements cannot leak into one (the restart snapshot sorts what it writes).
//!
//! Pure: no clock, no system calls.
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
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
}
