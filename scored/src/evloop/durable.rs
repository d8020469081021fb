//! The loop's side of the core's state on disk (`crate::durable`): what
//! the loop feeds the core is logged before it is handled and written
//! before anything of it leaves the daemon; the log is folded into a new
//! snapshot when it has grown, and after a panic (whose inputs the core
//! forgot).

use super::Daemon;
use crate::actuator::Actuator;
use crate::durable::Durable;

impl<A: Actuator> Daemon<A> {
    /// Keeps the core's state on disk.
    pub fn with_durable(mut self, durable: Durable) -> Daemon<A> {
        self.durable = Some(durable);
        self
    }

    /// The core's clock carries on from an earlier daemon's: tick 0 was
    /// when the monotonic clock read `origin_ns`.
    pub fn with_clock_origin(mut self, origin_ns: u64) -> Daemon<A> {
        self.start = crate::durable::instant_at(origin_ns);
        self
    }

    /// Takes over the core of a killed daemon: its clients are gone (a
    /// job's scrun may reattach within `reattach`), and the jobs of `lost`
    /// lost their processes, each with why.
    pub fn take_over(
        mut self,
        lost: Vec<(scored_core::ids::JobId, String)>,
        reattach: std::time::Duration,
    ) -> Daemon<A> {
        let until =
            scored_core::ids::Tick(self.tick().0.saturating_add(reattach.as_micros() as u64));
        let mut inputs = vec![scored_core::core::Input::Takeover {
            reattach_until: until,
        }];
        inputs.extend(
            lost.into_iter()
                .map(|(job, reason)| scored_core::core::Input::ProcessesLost { job, reason }),
        );
        self.feed(inputs);
        self
    }

    /// Writes what was logged: before a reply or a process of those
    /// inputs leaves the daemon.
    pub(super) fn write_durable(&mut self) {
        if let Some(durable) = &mut self.durable {
            if let Err(error) = durable.write_pending() {
                tracing::error!(%error, "cannot write the daemon's state");
            }
        }
    }

    /// Folds the log into a new snapshot once it has grown past its size.
    pub(super) fn fold_if_needed(&mut self) {
        if self.durable.as_ref().is_some_and(Durable::wants_fold) {
            self.fold();
        }
    }

    /// Writes the core as the new snapshot and empties the log.
    pub(super) fn fold(&mut self) {
        let Some(durable) = &mut self.durable else {
            return;
        };
        let started = std::time::Instant::now();
        match durable.fold(self.core.snapshot()) {
            Ok(()) => tracing::debug!(
                jobs = self.core.n_jobs(),
                took_us = started.elapsed().as_micros() as u64,
                "the daemon's state folded into a snapshot"
            ),
            Err(error) => tracing::error!(%error, "cannot write the daemon's state"),
        }
    }

    /// Where the log stands, for a panic to go back to.
    pub(super) fn durable_mark(&self) -> Option<(usize, u64)> {
        self.durable.as_ref().map(Durable::mark)
    }

    /// Forgets what was logged since `mark` and not yet written.
    pub(super) fn durable_forget(&mut self, mark: Option<(usize, u64)>) {
        if let (Some(durable), Some(mark)) = (&mut self.durable, mark) {
            durable.forget(mark);
        }
    }
}
