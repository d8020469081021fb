//! The switch as the loop sees it: its phases timed for the log, and the
//! continues it makes as soon as the stops are confirmed, before the core
//! hears of them.
#![forbid(unsafe_code)]

use std::time::Instant;

use super::Daemon;
use crate::actuator::Actuator;
use scored_core::core::Input;
use scored_core::ids::JobId;

/// A switch under way: when it began and when each of its phases ended,
/// for the log line of its end (target `scored::switch`, at debug level).
#[derive(Debug, Clone, Copy)]
pub(super) struct OpenSwitch {
    pub(super) start: Instant,
    /// The loop's wakeups when it began.
    pub(super) wakeups: u64,
    /// The last of its stops sent (its jobs' SIGSTOPs and the work before them).
    pub(super) stops_sent: Option<Instant>,
    /// The end of the wait for its stops' confirmation in the kernel.
    pub(super) waited: Option<Instant>,
    /// Its first continue.
    pub(super) continuing: Option<Instant>,
    /// The end of the continues made as its stops were confirmed
    /// (`Daemon::stops_awaited`): the switch's end, unless the core's
    /// actions continue more.
    pub(super) continued: Option<Instant>,
}

impl OpenSwitch {
    pub(super) fn new(start: Instant, wakeups: u64) -> OpenSwitch {
        OpenSwitch {
            start,
            wakeups,
            stops_sent: None,
            waited: None,
            continuing: None,
            continued: None,
        }
    }

    /// Logs the switch's latency and its phases in µs: `stop` (to the
    /// last SIGSTOP sent), `confirm` (to the stops confirmed, or the
    /// wait for them given up), `decide` (to the first SIGCONT), and
    /// `cont` (to the last).
    pub(super) fn log(&self, id: u64, end: Instant, wakeups: u64) {
        let us = |from: Instant, to: Option<Instant>| {
            to.map_or(0, |to| {
                to.saturating_duration_since(from).as_micros() as u64
            })
        };
        let stops_sent = self.stops_sent.unwrap_or(self.start);
        let waited = self.waited.unwrap_or(stops_sent);
        let continuing = self.continuing.unwrap_or(end);
        tracing::debug!(
            target: "scored::switch",
            switch = id,
            latency_us = us(self.start, Some(end)),
            stop_us = us(self.start, Some(stops_sent)),
            confirm_us = us(stops_sent, Some(waited)),
            decide_us = us(waited, Some(continuing)),
            cont_us = us(continuing, Some(end)),
            wakeups = wakeups - self.wakeups,
            "switch complete"
        );
    }
}

impl<A: Actuator> Daemon<A> {
    /// The wait for a switch's stops is over, `batch` holding what it
    /// gathered: if that only confirms them, the jobs the core will
    /// continue on hearing it (`Core::continues_once_stopped`) are
    /// continued now, as a program that switches processes itself
    /// continues the next ones as soon as `waitpid` returns; the core's
    /// `Continue` of each then has nothing left to do (`continue_job`).
    /// Nothing of the switch reaches the disk before the core's answer
    /// either way.
    pub(super) fn stops_awaited(&mut self, batch: &[Input]) {
        let now = Instant::now();
        for open in self.switch_starts.values_mut() {
            if open.stops_sent.is_some() {
                open.waited.get_or_insert(now);
            }
        }
        let Some(jobs) = self.core.continues_once_stopped(batch) else {
            return;
        };
        if jobs.is_empty() {
            return;
        }
        for open in self.switch_starts.values_mut() {
            open.continuing.get_or_insert(now);
        }
        for &job in &jobs {
            self.actuator.cont(job);
        }
        let end = Instant::now();
        for open in self.switch_starts.values_mut() {
            open.continued = Some(end);
        }
        self.continued_early.extend(jobs);
    }

    /// The core's `Continue` of `job`, unless `stops_awaited` made it.
    pub(super) fn continue_job(&mut self, job: JobId) {
        if let Some(at) = self.continued_early.iter().position(|early| *early == job) {
            self.continued_early.swap_remove(at);
            return;
        }
        let now = Instant::now();
        for open in self.switch_starts.values_mut() {
            open.continuing.get_or_insert(now);
            open.continued = None;
        }
        self.actuator.cont(job);
    }
}
