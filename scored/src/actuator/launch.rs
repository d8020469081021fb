//! Creating a job's processes: its scratch directory and cgroup here, then
//! the order to its keeper (`crate::keeper`), which forks the ranks, up to
//! `EXEC_WINDOW` between fork and exec at once, and reports each. A launch
//! of thousands of ranks so costs the event loop one message, not the
//! forks.
#![forbid(unsafe_code)]

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use scored_core::core::Input;
use scored_core::job::LaunchPlan;

use super::failure::LaunchError;
use super::{statedir, JobProcs, JobStdio, OsActuator, SwitchedOutHold, STATE_DIR_CHECK};

/// A launch in progress: its keeper is creating the processes, and says
/// `Launched` once every one exists (or the launch stopped for good).
#[derive(Debug)]
pub(super) struct LaunchInProgress {
    /// The program of each stage of the order, and the working directory,
    /// for the messages of a rank that fails to start.
    programs: Vec<Rc<str>>,
    cwd: Rc<str>,
    /// The first stage of the order.
    first_stage: usize,
    /// Switched out: its keeper creates nothing until the job is continued.
    pub(super) paused: bool,
}

impl LaunchInProgress {
    /// A launch a keeper was in the middle of when this daemon took it over.
    pub(super) fn adopted() -> LaunchInProgress {
        LaunchInProgress {
            programs: Vec::new(),
            cwd: "?".into(),
            first_stage: 0,
            paused: false,
        }
    }

    /// The program of `stage` and the working directory, for messages.
    pub(super) fn describe(&self, stage: usize) -> (Rc<str>, Rc<str>) {
        let program = stage
            .checked_sub(self.first_stage)
            .and_then(|idx| self.programs.get(idx))
            .cloned()
            .unwrap_or_else(|| "?".into());
        (program, Rc::clone(&self.cwd))
    }
}

impl OsActuator {
    pub(super) fn begin_launch(
        &mut self,
        plan: &LaunchPlan,
        stdio: Option<&JobStdio>,
        out: &mut Vec<Input>,
    ) {
        let fail = |this: &mut OsActuator, error: LaunchError, out: &mut Vec<Input>| {
            let message = error.message();
            tracing::info!(job = %plan.job, %message, "launch failed");
            out.push(Input::SpawnFailed {
                job: plan.job,
                message,
                status: error.status(),
            });
            let alive = this
                .jobs
                .get(&plan.job)
                .is_some_and(|procs| !procs.children.is_empty());
            if !alive {
                out.push(Input::ProcessesGone(plan.job));
            }
        };
        if !self.jobs.contains_key(&plan.job) {
            // Not the program's fault: the status says the daemon failed.
            if let Err(problem) = self.check_state_dir(out) {
                let error = LaunchError::Prepare {
                    job: plan.job,
                    problem,
                };
                fail(self, error, out);
                return;
            }
        }
        if let Err(error) = self.prepare_job(plan) {
            let error = LaunchError::Prepare {
                job: plan.job,
                problem: error.to_string(),
            };
            fail(self, error, out);
            return;
        }
        let programs = plan
            .argv
            .iter()
            .map(|argv| {
                Rc::from(
                    argv.first()
                        .map(|program| Path::new(program).display().to_string())
                        .unwrap_or_default(),
                )
            })
            .collect();
        let cwd: Rc<str> = Path::new(&plan.cwd).display().to_string().into();
        if let Some(procs) = self.jobs.get_mut(&plan.job) {
            // A new stage: (for `::`) a new peak, since each stage is
            // limited on its own.
            procs.reaped_peak.iter_mut().for_each(|peak| *peak = 0);
            procs.exe_bytes = 0;
            procs.seen_exes.clear();
            procs.launch = Some(LaunchInProgress {
                programs,
                cwd,
                first_stage: plan.first_stage,
                paused: false,
            });
        }
        if let Err(error) = self.send_order(plan, stdio) {
            if let Some(procs) = self.jobs.get_mut(&plan.job) {
                procs.launch = None;
            }
            fail(self, error, out);
        }
    }

    /// Checks, before a job's first launch, that the state directory is
    /// still there and ours, recreating what was removed; tells the core
    /// when it stops or starts working again.
    pub(super) fn check_state_dir(&mut self, out: &mut Vec<Input>) -> Result<(), String> {
        self.state_check_at = self.clock.now() + STATE_DIR_CHECK;
        match self.state.ensure().map_err(|error| error.to_string()) {
            Ok(reopened) => {
                if reopened {
                    tracing::warn!(path = %self.state.path().display(), "the state directory or its jobs directory was removed or replaced; made it again");
                }
                if self.state_problem.take().is_some() {
                    out.push(Input::StateDir(None));
                }
                Ok(())
            }
            Err(problem) => {
                if self.state_problem.is_none() {
                    out.push(Input::StateDir(Some(problem.clone())));
                }
                self.state_problem = Some(problem.clone());
                Err(problem)
            }
        }
    }

    /// The job's record here, with its scratch directory and cgroup, made
    /// at its first launch.
    pub(super) fn prepare_job(&mut self, plan: &LaunchPlan) -> io::Result<()> {
        if self.jobs.contains_key(&plan.job) {
            return Ok(());
        }
        let owner = (self.daemon_uid == 0).then_some((plan.user.uid, plan.user.gid));
        let scratch = self
            .state
            .create_scratch(plan.job, owner)
            .map_err(|error| {
                io::Error::new(
                    error.kind(),
                    format!(
                        "cannot create the scratch directory {}: {error}",
                        self.state.scratch_path(plan.job).display()
                    ),
                )
            })?;
        let cgroup_procs = match &self.cgroups {
            Some(cgroups) => match cgroups.add_job(plan.job) {
                Ok(path) => Some(path),
                Err(error) => {
                    tracing::warn!(job = %plan.job, %error, "cannot create the job's cgroup; going without");
                    None
                }
            },
            None => None,
        };
        self.jobs
            .insert(plan.job, JobProcs::new(scratch, cgroup_procs, plan.user.uid, plan.hosts.len()));
        Ok(())
    }
}

impl JobProcs {
    /// A job's record before any of its processes exists.
    pub(super) fn new(
        scratch: std::path::PathBuf,
        cgroup_procs: Option<std::ffi::CString>,
        uid: u32,
        n_slots: usize,
    ) -> JobProcs {
        JobProcs {
            groups: HashMap::new(),
            children: BTreeSet::new(),
            extras: HashMap::new(),
            stop_wait: None,
            drain: None,
            reaped_cpu: Duration::ZERO,
            discovered_at: None,
            reaped_peak: vec![0; n_slots],
            exe_bytes: 0,
            seen_exes: BTreeSet::new(),
            scratch,
            disk_walk: statedir::DiskWalk::default(),
            cgroup_procs,
            uid,
            hold: SwitchedOutHold::default(),
            launch: None,
            launch_failed: false,
            execs_in_flight: 0,
            lost: None,
        }
    }
}

/// A rank that failed to run, in the words of a rank that failed to run:
/// the program, the directory and why.
pub(super) fn launch_error(program: &Rc<str>, cwd: &Rc<str>, error: io::Error) -> LaunchError {
    LaunchError::Run {
        program: Rc::clone(program),
        cwd: Rc::clone(cwd),
        error,
    }
}
