//! Bringing the processes back in line with the core after a caught panic.
//!
//! The event loop restarts from the core as it was before the event that
//! panicked (`Core::commit`, `Core::rollback`); the actuator may have carried out part
//! of that event's actions. Processes that the restored core does not
//! hold (created by the lost event) are killed and reaped here, and
//! everything they report is dropped, since the core never knew them; the
//! loop then continues or stops every other job as the core holds it.
//!
//! Like `kill_everything`, this waits for the processes it kills (bounded):
//! it runs once, after a bug, never on the way of a switch.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{sys, Actuator, OsActuator, SwitchedOutHold};
use scored_core::core::Input;
use scored_core::ids::JobId;

/// How long the processes of discarded jobs are waited for.
const DISCARD_WAIT: Duration = Duration::from_secs(2);

/// The job an input reports on, if it comes from the processes.
pub fn input_job(input: &Input) -> Option<JobId> {
    match input {
        Input::Stopped(job)
        | Input::ProcessesGone(job)
        | Input::RankExited { job, .. }
        | Input::SpawnFailed { job, .. }
        | Input::StopFailed { job, .. }
        | Input::Usage { job, .. }
        | Input::FinalUsage { job, .. } => Some(*job),
        _ => None,
    }
}

impl OsActuator {
    /// Every job the actuator keeps a record of, and whether it has
    /// processes now (or is creating them).
    pub(super) fn job_records(&self) -> Vec<(JobId, bool)> {
        let mut jobs: Vec<(JobId, bool)> = self
            .jobs
            .iter()
            .map(|(job, procs)| {
                let busy = !procs.children.is_empty()
                    || !procs.extras.is_empty()
                    || procs.launch.is_some()
                    || procs.drain.is_some();
                (*job, busy)
            })
            .collect();
        jobs.sort_unstable();
        jobs
    }

    /// Kills the processes of `jobs` and waits for them, dropping what
    /// they report; what other jobs report meanwhile goes to `out`. A job
    /// marked `forget` loses its record too (scratch directory, cgroup),
    /// as the core never started it; the others keep theirs (a job between
    /// `::` stages whose next stage the core has not started).
    pub(super) fn discard(&mut self, jobs: &[(JobId, bool)], out: &mut Vec<Input>) {
        let doomed: BTreeSet<JobId> = jobs.iter().map(|(job, _)| *job).collect();
        for job in &doomed {
            if let Some(procs) = self.jobs.get_mut(job) {
                procs.launch = None;
            }
            // Its keeper creates nothing more and kills what it made.
            self.tell_keeper(*job, crate::keeper::ToKeeper::Kill);
            self.discover(*job);
            // `send` thaws a frozen job before SIGKILL.
            self.send(*job, Signal::SIGKILL);
            self.kill_descendants(*job);
        }
        let deadline = self.clock.now() + DISCARD_WAIT;
        let mut events = Vec::new();
        loop {
            self.reap(&mut events);
            let left = doomed.iter().any(|job| {
                self.jobs
                    .get(job)
                    .is_some_and(|procs| !procs.children.is_empty() || procs.drain.is_some())
            });
            let now = self.clock.now();
            if !left || now >= deadline {
                if left {
                    tracing::warn!("processes of a lost event did not die in time; their reports will be dropped when they come");
                }
                break;
            }
            // The ends come from the keepers.
            let mut ready = [0u64; 1];
            let step = (deadline - now).min(Duration::from_millis(10));
            if let Err(error) = sys::epoll_wait_for(&self.exec_watch, &mut ready, Some(step)) {
                tracing::warn!(%error, "waiting for the keepers failed");
                break;
            }
        }
        out.extend(
            events
                .into_iter()
                .filter(|input| input_job(input).is_none_or(|job| !doomed.contains(&job))),
        );
        for &(job, forget) in jobs {
            if forget {
                self.release(job);
            } else if let Some(procs) = self.jobs.get_mut(&job) {
                procs.stop_wait = None;
                procs.drain = None;
                procs.hold = SwitchedOutHold::default();
            }
        }
    }
}
