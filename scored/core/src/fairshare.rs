//! Decayed usage per user, for the fair order of waiting jobs (`queue Q
//! set fairshare=HALFLIFE|none`, as Slurm's PriorityDecayHalfLife): what
//! each user's jobs used, in host-seconds (hosts × time run), each use
//! counting half as much one half-life later.
//!
//! All users' usage decays by the same factor, so their order changes only
//! when a use is added: a queue re-sorts its waiting jobs then, and when a
//! job arrives.
//!
//! Pure: the time is always passed in.
#![forbid(unsafe_code)]

use std::time::Duration;

use crate::ids::Tick;

/// Per user (by uid): host-microseconds as of a time, each use decayed by
/// `2^(-age / half-life)`. Kept in whole host-microseconds, so that a
/// snapshot carries the very value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DecayedUsage {
    /// (uid, host-µs, as of µs), by uid.
    users: Vec<(u32, u64, u64)>,
}

/// `value`, as of `from`, decayed to `to` with `half_life`.
fn decay(value: u64, from: u64, to: u64, half_life: Duration) -> f64 {
    let half_life = half_life.as_micros().max(1) as f64;
    let age = to.saturating_sub(from) as f64;
    value as f64 * (-age / half_life).exp2()
}

impl DecayedUsage {
    /// Adds `amount` host-microseconds used by `user`, at `now`.
    pub fn add(&mut self, user: u32, amount: u64, now: Tick, half_life: Duration) {
        if amount == 0 {
            return;
        }
        match self.users.binary_search_by_key(&user, |(uid, _, _)| *uid) {
            Ok(at) => {
                let (_, value, as_of) = self.users[at];
                // Saturating: a float beyond u64 converts to its maximum.
                let decayed = decay(value, as_of, now.0, half_life).round() as u64;
                self.users[at] = (user, decayed.saturating_add(amount), now.0);
            }
            Err(at) => self.users.insert(at, (user, amount, now.0)),
        }
    }

    /// `user`'s usage at `now`, in host-seconds.
    pub fn of(&self, user: u32, now: Tick, half_life: Duration) -> f64 {
        self.users
            .binary_search_by_key(&user, |(uid, _, _)| *uid)
            .map_or(0.0, |at| {
                let (_, value, as_of) = self.users[at];
                decay(value, as_of, now.0, half_life) / 1e6
            })
    }

    /// Every user's entry: (uid, host-µs, as of µs), by uid (for a
    /// snapshot).
    pub fn entries(&self) -> &[(u32, u64, u64)] {
        &self.users
    }

    /// The usage of a snapshot's entries; `None` if they are not by
    /// increasing uid.
    pub fn from_entries(entries: Vec<(u32, u64, u64)>) -> Option<DecayedUsage> {
        let sorted = entries.windows(2).all(|pair| pair[0].0 < pair[1].0);
        sorted.then_some(DecayedUsage { users: entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_halves_every_half_life_and_adds_up() {
        let day = Duration::from_secs(86_400);
        let mut usage = DecayedUsage::default();
        usage.add(7, 100_000_000, Tick(0), day);
        assert_eq!(usage.of(7, Tick(0), day), 100.0);
        let one_day = Tick(86_400_000_000);
        assert!((usage.of(7, one_day, day) - 50.0).abs() < 1e-9);
        usage.add(7, 10_000_000, one_day, day);
        assert!((usage.of(7, one_day, day) - 60.0).abs() < 1e-9);
        let two_days = Tick(2 * 86_400_000_000);
        assert!((usage.of(7, two_days, day) - 30.0).abs() < 1e-9);
        assert_eq!(usage.of(8, two_days, day), 0.0);
        usage.add(8, 0, two_days, day);
        assert_eq!(usage.entries().len(), 1);
        usage.add(7, u64::MAX, two_days, day);
        assert_eq!(usage.entries()[0].1, u64::MAX);
        assert!(DecayedUsage::from_entries(vec![(2, 1, 0), (1, 1, 0)]).is_none());
        assert_eq!(
            DecayedUsage::from_entries(usage.entries().to_vec()),
            Some(usage)
        );
    }
}
