//! What one user may keep in the core, and what any finished job keeps:
//! reasons and messages cut to [`MAX_REASON`] bytes, with a marker, before
//! they are logged, journalled or kept.
//!
//! Users other than root, the daemon's user and the operators are held to
//! budgets of unfinished jobs, of submissions waiting for resources, and of
//! the bytes their submissions keep (programs, arguments, environments and
//! directories), each per user and over all of them; a submission over one
//! is refused with a message naming it. The totals are counted when a
//! submission arrives, over the jobs and waiters the core holds: no count
//! is kept that a rollback would have to restore.
#![forbid(unsafe_code)]

use std::collections::HashSet;

use super::{Core, Waiter};
use crate::job::JobRequest;

/// The unfinished jobs (queued, running or waiting) one user may have,
/// unless configured otherwise ([`Budgets`](super::Budgets)).
pub const USER_JOBS: usize = 1000;
/// The unfinished jobs all users held to budgets may have together, by default.
pub const TOTAL_JOBS: usize = 10_000;
/// The submissions one user may have waiting for resources (`-wait`), by default.
pub const USER_WAITING: usize = 100;
/// The submissions all users held to budgets may have waiting together, by default.
pub const TOTAL_WAITING: usize = 1000;
/// The bytes one user's unfinished submissions may keep (see [`request_bytes`]).
pub const USER_BYTES: usize = 8 << 20;
/// The bytes all users' unfinished submissions held to budgets may keep.
pub const TOTAL_BYTES: usize = 32 << 20;
/// What each argument and environment entry is counted for on top of its
/// bytes: what holding it as a string of its own costs.
pub const STRING_COST: usize = 64;

/// The most bytes of a reason or message (a launch error, a limit) that a
/// job's end keeps, logs and journals; the rest is cut, with a marker.
pub const MAX_REASON: usize = 1024;

/// `text` cut to at most [`MAX_REASON`] bytes (at a character boundary),
/// ending with a marker that says how much was cut.
pub fn cap_reason(text: String) -> String {
    cap_text(text, MAX_REASON)
}

/// `text` cut to at most `max` bytes, marker included, at a character
/// boundary; unchanged if it fits.
pub fn cap_text(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    // The marker's length depends on the number it shows: reserve room for
    // the widest one.
    let marker_room = " ... [ bytes cut]".len() + total.to_string().len();
    let mut keep = max.saturating_sub(marker_room);
    while keep > 0 && !text.is_char_boundary(keep) {
        keep -= 1;
    }
    text.truncate(keep);
    text.push_str(&format!(" ... [{} bytes cut]", total - keep));
    text
}

/// The bytes a submission is counted for: its arguments, environment
/// entries and working directory, each [`STRING_COST`] more than its length.
pub fn request_bytes(request: &JobRequest) -> usize {
    let args = request
        .stages
        .iter()
        .flatten()
        .map(|arg| arg.len() + STRING_COST);
    let env = request
        .env
        .iter()
        .map(|(key, value)| key.len() + value.len() + 2 * STRING_COST);
    args.chain(env).sum::<usize>() + request.cwd.len() + STRING_COST
}

/// What the users held to budgets keep in the core, for one of them and in all.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Held {
    jobs: usize,
    waiting: usize,
    bytes: usize,
}

impl Core {
    /// What the users held to budgets keep: `uid`'s, and everyone's. A
    /// launch shared by identical jobs is counted once.
    fn held(&self, uid: u32) -> (Held, Held) {
        let mut mine = Held::default();
        let mut all = Held::default();
        let mut launches: HashSet<(*const u8, u32)> = HashSet::new();
        for job in self.logged.jobs.values() {
            let owner = job.owner.uid;
            if self.is_privileged(owner) {
                continue;
            }
            let bytes = job.spec.launch.as_bytes();
            let fresh = launches.insert((bytes.as_ptr(), owner));
            let cost = if fresh { bytes.len() } else { 0 };
            all.jobs += 1;
            all.bytes += cost;
            if owner == uid {
                mine.jobs += 1;
                mine.bytes += cost;
            }
        }
        for entry in self.logged.backlog.entries.values() {
            let owner = entry.cred.uid;
            if self.is_privileged(owner) {
                continue;
            }
            // Its jobs not admitted yet (the admitted ones are counted
            // above), and what its request keeps while one waits.
            let jobs = entry.n_waiting() as usize;
            let cost = entry.request.as_deref().map_or(0, request_bytes);
            all.jobs += jobs;
            all.bytes += cost;
            if owner == uid {
                mine.jobs += jobs;
                mine.bytes += cost;
            }
        }
        for waiter in self.logged.waiting.iter() {
            let owner = waiter.cred.uid;
            if self.is_privileged(owner) {
                continue;
            }
            let cost = request_bytes(&waiter.request);
            all.jobs += 1;
            all.waiting += 1;
            all.bytes += cost;
            if owner == uid {
                mine.jobs += 1;
                mine.waiting += 1;
                mine.bytes += cost;
            }
        }
        (mine, all)
    }

    /// Whether `waiter` fits in its user's budgets and in the totals, if
    /// it is kept (`waits`: as a waiting submission); the error names the
    /// budget it would exceed.
    pub(super) fn check_budgets(&self, waiter: &Waiter, waits: bool) -> Result<(), String> {
        self.check_budgets_for(waiter, waits, 1)
    }

    /// [`Core::check_budgets`] for a submission of `jobs` jobs (an array's
    /// elements).
    pub(super) fn check_budgets_for(
        &self,
        waiter: &Waiter,
        waits: bool,
        jobs: usize,
    ) -> Result<(), String> {
        let uid = waiter.cred.uid;
        if self.is_privileged(uid) {
            return Ok(());
        }
        let (mine, all) = self.held(uid);
        let budgets = self.logged.config.budgets;
        let user = &waiter.user;
        let bytes = request_bytes(&waiter.request);
        let kib = |bytes: usize| bytes.div_ceil(1024);
        let these = if jobs == 1 {
            String::new()
        } else {
            format!(", and this array would add {jobs}")
        };
        if mine.jobs + jobs > budgets.user_jobs {
            return Err(format!(
                "user {user} has {} unfinished jobs{these}: the most one user may have \
                 is the budget of {} jobs per user; submit again once some have ended",
                mine.jobs, budgets.user_jobs
            ));
        }
        if all.jobs + jobs > budgets.total_jobs {
            return Err(format!(
                "scored holds {} unfinished jobs of users{these}: the most it keeps \
                 is the budget of {} jobs in total; submit again once some have ended",
                all.jobs, budgets.total_jobs
            ));
        }
        if mine.bytes + bytes > USER_BYTES {
            return Err(format!(
                "this submission's arguments, environment and directory take {} KiB and user \
                 {user}'s unfinished jobs {} KiB, more than the budget of {} KiB per user; \
                 submit again once some have ended, or with a smaller environment",
                kib(bytes),
                kib(mine.bytes),
                kib(USER_BYTES)
            ));
        }
        if all.bytes + bytes > TOTAL_BYTES {
            return Err(format!(
                "this submission's arguments, environment and directory take {} KiB and the \
                 unfinished jobs of users {} KiB, more than the budget of {} KiB in total; \
                 submit again later",
                kib(bytes),
                kib(all.bytes),
                kib(TOTAL_BYTES)
            ));
        }
        if waits && mine.waiting >= budgets.user_waiting {
            return Err(format!(
                "user {user} has {} submissions waiting for resources, the most one user may \
                 have (the budget of {} waiting submissions per user)",
                mine.waiting, budgets.user_waiting
            ));
        }
        if waits && all.waiting >= budgets.total_waiting {
            return Err(format!(
                "scored holds {} submissions of users waiting for resources, the most it keeps \
                 (the budget of {} waiting submissions in total)",
                all.waiting, budgets.total_waiting
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reason_is_cut_with_a_marker_within_the_budget() {
        assert_eq!(cap_reason("short".into()), "short");
        let long = format!("cannot run 'x' in /{}: No such file", "é".repeat(600_000));
        let cut = cap_reason(long.clone());
        assert!(cut.len() <= MAX_REASON, "{}", cut.len());
        assert!(cut.starts_with("cannot run 'x' in /é"), "{cut}");
        let kept = cut.find(" ... [").expect("a marker");
        assert!(
            cut.ends_with(&format!(" ... [{} bytes cut]", long.len() - kept)),
            "{}",
            &cut[kept..]
        );
        let exact = "a".repeat(MAX_REASON);
        assert_eq!(cap_reason(exact.clone()), exact);
    }
}
