//! The rest of a job switched by its ranks alone (`SwitchedOutHold::
//! by_freezer`): its processes other than its ranks, frozen in the job's
//! `rest` cgroup while it is switched out (`cgroup::REST`), and thawed
//! while it runs. Both are done once the switch is over (the ranks'
//! signals sent, their stops confirmed or still awaited): a freeze or a
//! thaw goes over every process of the cgroup, which no switch of the
//! ranks waits for.
#![forbid(unsafe_code)]

use nix::sys::signal::Signal;

use scored_core::ids::JobId;

use super::super::OsActuator;

impl OsActuator {
    /// Freezes the rest of each job switched by its ranks that is
    /// switched out, and thaws that of each that runs again (or is being
    /// killed, or drained).
    pub(in crate::actuator) fn hold_rests(&mut self) {
        let Some(cgroups) = &self.cgroups else {
            return;
        };
        let mut failed = Vec::new();
        for (job, procs) in self.jobs.iter_mut() {
            let hold = &procs.hold;
            let held = hold.by_freezer
                && hold.switched_out
                && !hold.signalled
                && !hold.killed
                && procs.launch.is_none()
                && procs.drain.is_none()
                && procs.cgroup_procs.is_some();
            if held && !hold.rest_frozen {
                match cgroups.hold_rest(*job, &procs.children, hold.frozen) {
                    Ok(frozen) => {
                        procs.hold.rest_frozen = true;
                        procs.hold.frozen = frozen;
                    }
                    Err(error) => {
                        tracing::warn!(job = %job, %error, "cannot freeze the rest of the job; stopping its processes instead");
                        let _ = cgroups.release_rest(*job);
                        failed.push(*job);
                    }
                }
            } else if !held && hold.rest_frozen {
                match cgroups.release_rest(*job) {
                    Ok(()) => procs.hold.rest_frozen = false,
                    Err(error) => {
                        tracing::error!(job = %job, %error, "cannot thaw the rest of the job")
                    }
                }
            }
        }
        // Without its freeze, the rest is stopped as a job's processes
        // are without a freezer: every group and held descendant gets
        // SIGSTOP, and the job's continue sends them SIGCONT.
        for job in failed {
            if let Some(procs) = self.jobs.get_mut(&job) {
                procs.hold.signalled = true;
            }
            self.send(job, Signal::SIGSTOP);
        }
    }

    /// Thaws the job's rest now (its processes were sent SIGKILL, which a
    /// frozen process does not act on until thawed).
    pub(in crate::actuator) fn release_rest(&mut self, job: JobId) {
        let (Some(cgroups), Some(procs)) = (&self.cgroups, self.jobs.get_mut(&job)) else {
            return;
        };
        if !procs.hold.rest_frozen {
            return;
        }
        match cgroups.release_rest(job) {
            Ok(()) => procs.hold.rest_frozen = false,
            Err(error) => tracing::error!(job = %job, %error, "cannot thaw the rest of the job"),
        }
    }
}
