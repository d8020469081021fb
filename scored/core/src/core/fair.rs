//! The fair order of waiting jobs (`queue Q set fairshare=HALFLIFE`): a
//! queue whose jobs wait for hosts (exclusive, or gang with a level) keeps
//! the jobs behind its first waiting one by their users' usage, least used
//! first, and in submission order between equals. The first waiting job
//! keeps its place, and so the reservation EASY or the level gives it.
//!
//! A user's usage is what its ended jobs used, in host-seconds (hosts ×
//! time run), decayed with the queue's half-life (`crate::fairshare`). It
//! is counted when a job ends, and the order is made again then, when a
//! job arrives in the queue and when the setting changes: between those
//! events no usage is added, and decay keeps the users' order.
#![forbid(unsafe_code)]

use std::time::Duration;

use super::Core;
use crate::ids::Tick;

impl Core {
    /// Counts what a job of `user`, ending at `now` after running `run`
    /// on `hosts` hosts, used, in every queue that orders by usage.
    pub(super) fn count_usage(&mut self, user: u32, hosts: usize, run: Duration, now: Tick) {
        let run = u64::try_from(run.as_micros()).unwrap_or(u64::MAX);
        let amount = run.saturating_mul(hosts as u64);
        for idx in 0..self.logged.queues.len() {
            if let Some(half_life) = self.logged.queues[idx].fairshare {
                self.logged.queues[idx]
                    .usage
                    .add(user, amount, now, half_life);
            }
        }
    }

    /// Orders the waiting jobs of every queue that orders by usage.
    pub(super) fn order_all_by_usage(&mut self, now: Tick) {
        for idx in 0..self.logged.queues.len() {
            self.order_by_usage(idx, now);
        }
    }

    /// Orders the waiting jobs behind the first of queue `idx` by their
    /// users' usage at `now`, if the queue orders by usage; a queue already
    /// in that order is left untouched.
    pub(super) fn order_by_usage(&mut self, idx: usize, now: Tick) {
        let Some(queue) = self.logged.queues.get(idx) else {
            return;
        };
        let Some(half_life) = queue.fairshare else {
            return;
        };
        if !queue.starts_late() || queue.len() < queue.n_started() + 3 {
            return;
        }
        let jobs = &self.logged.jobs;
        // The usage of each user with a waiting job, by uid.
        let mut users: Vec<(u32, f64)> = Vec::new();
        for job in queue.order().skip(queue.n_started() + 1) {
            let Some(record) = jobs.get(&job) else {
                continue;
            };
            let uid = record.owner.uid;
            if let Err(at) = users.binary_search_by_key(&uid, |(user, _)| *user) {
                users.insert(at, (uid, queue.usage.of(uid, now, half_life)));
            }
        }
        let usage = |job: &crate::ids::JobId| {
            jobs.get(job)
                .and_then(|record| {
                    users
                        .binary_search_by_key(&record.owner.uid, |(user, _)| *user)
                        .ok()
                })
                .map_or(0.0, |at| users[at].1)
        };
        let sorted = {
            let mut last = f64::NEG_INFINITY;
            let mut waiting = queue.order().skip(queue.n_started() + 1);
            waiting.all(|job| {
                let this = usage(&job);
                let in_order = last <= this;
                last = this;
                in_order
            })
        };
        if sorted {
            return;
        }
        self.logged.queues[idx].permute_waiting(|waiting| {
            // Stable: equals keep their order.
            waiting.sort_by(|a, b| usage(a).total_cmp(&usage(b)));
        });
    }
}
