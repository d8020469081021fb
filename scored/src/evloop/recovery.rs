//! Surviving a bug: a panic while handling an event is caught, the core
//! goes back to its checkpoint of the event before, the processes are
//! brought in line with it, and the daemon restarts in place.

use super::faults::checkpoints_off;
use super::{queue_reply, Daemon, Event};
use crate::actuator::Actuator;
use scored_core::core::{Core, Input};
use scored_core::ids::JobId;
use scored_proto::proto::Reply;

impl<A: Actuator> Daemon<A> {
    /// `handle_event`, with a panic (a bug) caught: it is logged with the
    /// event that caused it, and the daemon restarts in place from the
    /// core as it was before that event (its checkpoint), with the
    /// processes brought back in line with it, so that the jobs and their
    /// clients outlive the bug. If the restart cannot happen the daemon
    /// carries on from that state.
    pub(super) fn handle_event_guarded(&mut self, event: Event) {
        let client = match event {
            Event::Client(token) => Some(token),
            _ => None,
        };
        let held_before = self.held_answers.len();
        let logged_before = self.durable_mark();
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.handle_event(event)));
        if outcome.is_ok() {
            self.recovery.event_done(&mut self.core);
        }
        if let Err(panic) = outcome {
            // Described only on a panic: formatting every event would cost
            // more than admitting a job.
            let described = format!("{event:?}");
            let message = panic
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_string());
            tracing::error!(
                event = %described,
                panic = %message,
                "a bug: scored panicked handling an event; restarting in place"
            );
            self.pending_restart = None;
            // The core forgets the event; so does its log (what of it was
            // written already, the snapshot written once the processes
            // are back in line replaces).
            self.durable_forget(logged_before);
            // Answers held for stops under way go with the connections'
            // output; the new image knows nothing of them otherwise. Those
            // the lost event made are not sent: its request is not applied.
            self.held_answers.truncate(held_before);
            self.release_answers(true);
            // The request that hit the bug is consumed: tell its client, in
            // the output that the new image will write.
            if let Some(conn) = client.and_then(|token| self.connections.get_mut(&token)) {
                queue_reply(
                    conn,
                    &Reply::Error {
                        message: format!(
                            "scored hit a bug handling this request ({message}) and restarted in place"
                        ),
                    },
                );
                conn.closing = true;
            }
            self.recover();
            self.fold();
            self.restart_in_place(None);
        }
    }

    /// After a caught panic: the core goes back to its checkpoint, and the
    /// processes are brought in line with it (see `reconcile`). A panic
    /// while doing so leaves the restored core as it is.
    pub(super) fn recover(&mut self) {
        let facts = std::mem::take(&mut self.recovery.facts);
        if !self.recovery.committed || !self.core.rollback() {
            return;
        }
        self.switch_starts.clear();
        self.continued_early.clear();
        // The restored core ends those jobs again if they end.
        self.releases.clear();
        self.recovery.replaying = true;
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.reconcile(facts)));
        self.recovery.replaying = false;
        if outcome.is_err() {
            tracing::error!("a bug: scored panicked again bringing the processes in line with the restored state");
        }
        self.recovery.changed = true;
        self.recovery.event_done(&mut self.core);
    }

    /// Makes the processes agree with the restored core, whatever part of
    /// the lost event's actions the actuator carried out:
    /// - processes of a job the core does not hold as having any (a job it
    ///   does not know, or one it holds as not started or between `::`
    ///   stages) were created by the lost event: they are killed and
    ///   reaped, and what they report is dropped;
    /// - what the kernel reported during the lost event about the other
    ///   jobs (ranks that exited, processes gone, a failed launch or stop)
    ///   is fed to the core again, as it happened;
    /// - every job the core holds as running is continued (thawed and sent
    ///   SIGCONT), and every job it holds as stopped or stopping is stopped
    ///   again and confirmed, as at any switch.
    ///
    /// A signal the lost event delivered cannot be taken back: a job sent
    /// SIGTERM by it handles the signal (or dies of it, and its end is
    /// reported through the normal reaping), but the core does not carry
    /// on a kill it never decided.
    pub(super) fn reconcile(&mut self, facts: Vec<Input>) {
        use scored_core::job::Phase;
        let mut discard = Vec::new();
        for (job, busy) in self.actuator.known_jobs() {
            match self.core.job(job) {
                None => discard.push((job, true)),
                Some(record) if record.phase() == Phase::Idle && busy => {
                    discard.push((job, !record.started()));
                }
                Some(_) => {}
            }
        }
        let mut inputs = Vec::new();
        if !discard.is_empty() {
            tracing::warn!(jobs = ?discard.iter().map(|(job, _)| job.0).collect::<Vec<_>>(), "killing processes the restored state does not know");
            self.actuator.discard_jobs(&discard, &mut inputs);
        }
        let discarded: std::collections::BTreeSet<JobId> =
            discard.iter().map(|(job, _)| *job).collect();
        let replayed: Vec<Input> = facts
            .into_iter()
            .filter(|input| {
                crate::actuator::input_job(input).is_some_and(|job| !discarded.contains(&job))
            })
            .collect();
        tracing::info!(
            facts = replayed.len(),
            "restored the state before the event; reporting again what the kernel said during it"
        );
        let mut first = replayed;
        first.extend(inputs);
        self.feed(first);
        // Stops first; the running jobs are continued once they are
        // confirmed, as in a switch.
        let mut confirmations = Vec::new();
        let jobs: Vec<(JobId, Phase)> = self.core.jobs().map(|job| (job.id, job.phase())).collect();
        for (job, phase) in &jobs {
            if matches!(phase, Phase::Stopping | Phase::Stopped) {
                self.actuator.stop(*job, &mut confirmations);
            }
        }
        self.continue_after_stops = jobs
            .into_iter()
            .filter(|(_, phase)| *phase == Phase::Running)
            .map(|(job, _)| job)
            .collect();
        self.actuator
            .await_stops(super::STOP_WAIT, &mut confirmations);
        self.feed(confirmations);
        self.continue_after_stops();
    }
}

/// What the loop keeps to recover from a panic: the core's commit after
/// the last event that changed it (`Core::commit`, which the core can roll
/// back to), and what the kernel has reported since (inputs that cannot be
/// asked for again: a reaped rank's status is gone from the kernel once
/// read).
#[derive(Default)]
pub(super) struct Recovery {
    /// The core holds a commit to roll back to.
    committed: bool,
    /// The core may have changed since the checkpoint.
    pub(super) changed: bool,
    /// The kernel's reports during the current event.
    facts: Vec<Input>,
    /// Recovering: the reports fed again are not kept again.
    replaying: bool,
}

impl Recovery {
    /// Keeps the reports among `inputs` that came from the processes.
    pub(super) fn note(&mut self, inputs: &[Input]) {
        if self.replaying || checkpoints_off() {
            return;
        }
        self.facts
            .extend(inputs.iter().filter(|input| is_fact(input)).cloned());
    }

    /// An event was handled to its end: the core's state is the one to
    /// come back to.
    pub(super) fn event_done(&mut self, core: &mut Core) {
        self.facts.clear();
        if checkpoints_off() {
            return;
        }
        if self.changed || !self.committed {
            core.commit();
            self.committed = true;
            self.changed = false;
        }
    }
}

/// A report from the processes that the core must hear once and the
/// kernel will not give again. Stop confirmations are asked for again
/// instead, and usage is sampled again at the next slice.
fn is_fact(input: &Input) -> bool {
    matches!(
        input,
        Input::RankExited { .. }
            | Input::ProcessesGone(_)
            | Input::FinalUsage { .. }
            | Input::SpawnFailed { .. }
            | Input::StopFailed { .. }
    )
}
