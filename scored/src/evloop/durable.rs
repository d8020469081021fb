//! The loop's side of the core's state on disk (`crate::durable`): what
//! the loop feeds the core is logged before it is handled and written
//! before anything of it leaves the daemon; the log is folded into a new
//! snapshot when it has grown, and after a panic (whose inputs the core
//! forgot).

use super::Daemon;
use crate::actuator::Actuator;
use crate::durable::Durable;
use crate::journal::Journal;

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

    /// Takes over the jobs of a killed daemon (or of the image before an
    /// in-place restart): their processes from their keepers (`keepers`:
    /// each job's keeper as recorded, pid and start time), the ends the
    /// core missed, and the jobs whose keeper is gone, lost. After a crash
    /// (`reattach`) the clients are gone too: a job's scrun may reattach
    /// within that time. Then every job is made what the core holds it to
    /// be: the switched-out ones stopped first (confirmed), then the
    /// running ones continued (after a crash), so that two jobs sharing a
    /// host never run together whatever the dead daemon had done of its
    /// last switch.
    pub fn take_over(
        mut self,
        keepers: &std::collections::HashMap<u64, (i32, u64)>,
        reattach: Option<std::time::Duration>,
    ) -> Daemon<A> {
        use scored_core::core::Input;
        use scored_core::job::Phase;
        let adopt: Vec<crate::actuator::Adopt> = self
            .core
            .jobs()
            .filter(|job| job.started())
            .map(|job| crate::actuator::Adopt {
                job: job.id,
                keeper: keepers.get(&job.id.0).copied(),
                uid: job.owner.uid,
                slots: job.hosts.len(),
                stage: job.stage(),
                ranks_left: job.ranks_left(),
                switched_out: matches!(job.phase(), Phase::Stopped | Phase::Stopping),
            })
            .collect();
        let mut inputs = Vec::new();
        if let Some(reattach) = reattach {
            let until =
                scored_core::ids::Tick(self.tick().0.saturating_add(reattach.as_micros() as u64));
            // A scrun that gave up waiting (its -reattach= ran out) or was
            // killed while no daemon ran will not come back: its job is
            // not waited for.
            let gone = self
                .core
                .jobs()
                .filter(|job| job.client().is_some() && !client_alive(job.owner.pid))
                .map(|job| job.id)
                .collect();
            inputs.push(Input::Takeover {
                reattach_until: until,
                gone,
            });
        }
        self.actuator.take_over(&adopt, &mut inputs);
        self.feed(inputs);
        let jobs: Vec<(scored_core::ids::JobId, Phase)> =
            self.core.jobs().map(|job| (job.id, job.phase())).collect();
        let mut confirmations = Vec::new();
        for (job, phase) in &jobs {
            if matches!(phase, Phase::Stopped | Phase::Stopping) {
                self.actuator.stop(*job, &mut confirmations);
            }
        }
        self.actuator
            .await_stops(super::STOP_WAIT, &mut confirmations);
        self.feed(confirmations);
        // A dead daemon may have died between a job's continue and its
        // signals; the image before an in-place restart continued every
        // job it held as running, and a continue now would undo a stop
        // the job's own user made.
        if reattach.is_some() {
            self.continue_after_stops = jobs
                .into_iter()
                .filter(|(_, phase)| *phase == Phase::Running)
                .map(|(job, _)| job)
                .collect();
            self.continue_after_stops();
        }
        self
    }

    /// Continues the jobs a takeover or a recovery left to continue, once
    /// no stop is in flight: until then a job the core holds running may
    /// share a host with one whose ranks have been sent SIGSTOP and not yet
    /// stopped (a busy machine, many ranks), and the two would run at once.
    /// A job the core has since stopped or ended is left as it is.
    pub(super) fn continue_after_stops(&mut self) {
        use scored_core::job::Phase;
        if self.continue_after_stops.is_empty() || self.actuator.pending_stops() > 0 {
            return;
        }
        for job in std::mem::take(&mut self.continue_after_stops) {
            if self
                .core
                .job(job)
                .is_some_and(|record| record.phase() == Phase::Running)
            {
                self.actuator.cont(job);
            }
        }
    }

    /// Writes what was logged: before a reply or a process of those
    /// inputs leaves the daemon; then the keepers may reap the ranks whose
    /// ends it holds.
    pub(super) fn write_durable(&mut self) {
        if let Some(durable) = &mut self.durable {
            durable.note_keepers(self.actuator.fresh_keepers());
            if let Err(error) = durable.write_pending() {
                tracing::error!(%error, "cannot write the daemon's state");
                return;
            }
        }
        self.actuator.recorded();
    }

    /// Has the journal and the state log synced once either is due (a
    /// job's end, or the log's records, written `SYNC_INTERVAL` after the
    /// last sync): by the closer, in a child of its own, so that the loop
    /// never waits for the disk (0.4 to 10 ms a sync); or here, each when
    /// due, without a closer that takes them.
    ///
    /// Not while a switch awaits its stops: the closer (at real-time
    /// priority) would take a CPU from the ranks that must run to take
    /// their SIGSTOP, and so lengthen the switch, as would the loop's own
    /// sync. A sync due then waits for the switch's end (its stops
    /// confirmed, or given up on within `actuator::STOP_TIMEOUT`).
    pub(super) fn sync_files(&mut self) {
        if self.core.stops_in_flight() {
            return;
        }
        let now = std::time::Instant::now();
        let due = |deadline: Option<std::time::Instant>| deadline.is_some_and(|due| due <= now);
        let journal_due = due(self.journal.as_ref().and_then(Journal::sync_deadline));
        let log_due = due(self.durable.as_ref().and_then(Durable::sync_deadline));
        if !journal_due && !log_due {
            return;
        }
        let files: Vec<_> = self
            .journal
            .as_ref()
            .and_then(Journal::unsynced_file)
            .into_iter()
            .chain(self.durable.as_ref().and_then(Durable::unsynced_log))
            .collect();
        if crate::closer::sync(&files) {
            if let Some(journal) = &mut self.journal {
                journal.synced();
            }
            if let Some(durable) = &mut self.durable {
                durable.synced();
            }
            return;
        }
        if let Some(journal) = &mut self.journal {
            if let Err(error) = journal.sync_if_needed() {
                tracing::error!(%error, "cannot sync the job journal");
            }
        }
        if let Some(durable) = &mut self.durable {
            if let Err(error) = durable.sync_if_needed() {
                tracing::error!(%error, "cannot sync the daemon's state");
            }
        }
    }

    /// Folds the log into a new snapshot once it has grown past its size.
    pub(super) fn fold_if_needed(&mut self) {
        // After the switch under way, as a sync (`sync_files`).
        if !self.core.stops_in_flight() && self.durable.as_ref().is_some_and(Durable::wants_fold) {
            self.fold();
        }
    }

    /// Writes the core as the new snapshot and empties the log.
    pub(super) fn fold(&mut self) {
        let Some(durable) = &mut self.durable else {
            return;
        };
        let started = std::time::Instant::now();
        match durable.fold(self.core.snapshot(), self.actuator.keepers()) {
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

/// Whether the process that submitted a job (its scrun, by the pid its
/// connection had) may still be there to reattach: a pid with no process,
/// or a zombie, is a scrun gone for good. A pid the kernel gave to another
/// process since counts as there: that job waits for its scrun's reattach
/// time, as every job did.
fn client_alive(pid: i32) -> bool {
    if pid <= 0 {
        return true;
    }
    // Its status, not its stat: reading a process's stat waits while the
    // process holds its exec lock, for as long as its user likes.
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => !status.lines().any(|line| {
            line.strip_prefix("State:")
                .is_some_and(|state| state.trim_start().starts_with('Z'))
        }),
        Err(error) => error.kind() != std::io::ErrorKind::NotFound,
    }
}
