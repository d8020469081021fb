//! Creating a job's processes: its scratch directory and cgroup here, then
//! the order to its keeper (`crate::keeper`), which forks the ranks, up to
//! `EXEC_WINDOW` between fork and exec at once, and reports each. A launch
//! of thousands of ranks so costs the event loop one message, not the
//! forks.
#![forbid(unsafe_code)]

use std::collections::{BTreeSet, HashMap};
use std::ffi::CString;
use std::io;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use scored_core::core::Input;
use scored_core::job::LaunchPlan;

use super::failure::LaunchError;
use super::{statedir, JobProcs, JobStdio, OsActuator, SwitchedOutHold, STATE_DIR_CHECK};

/// A process's stdout and stderr files, as messages show them.
pub(super) type ShownFiles = Rc<[Option<Box<str>>; 2]>;

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
    /// Each process's output files (`scrun -output=`, `-error=`) by stage
    /// and rank, for the message of a failure to open one; empty when the
    /// job has none.
    files: HashMap<(usize, u32), ShownFiles>,
    /// The signals asked for the job (`kill`, scrun passing on a ^C) while
    /// its processes are being created, each once: a rank its keeper
    /// reports after one of them gets it then, as the ranks reported
    /// before got it at once.
    pub(super) signals: Vec<i32>,
}

impl LaunchInProgress {
    /// A launch a keeper was in the middle of when this daemon took it
    /// over, of the programs it names (see `keeper::Held::described`).
    pub(super) fn adopted(described: &(usize, Vec<String>, String)) -> LaunchInProgress {
        LaunchInProgress {
            programs: described
                .1
                .iter()
                .map(|program| Rc::from(program.as_str()))
                .collect(),
            cwd: Rc::from(described.2.as_str()),
            first_stage: described.0,
            files: HashMap::new(),
            signals: Vec::new(),
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

    /// The output files of `rank` of `stage`, if it opens any, for messages.
    pub(super) fn files(&self, stage: usize, rank: u32) -> Option<ShownFiles> {
        self.files.get(&(stage, rank)).cloned()
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
        self.hold_latency_for_launch();
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
        let last_stage = plan.first_stage + plan.argv.len().saturating_sub(1);
        let files: Vec<[Option<CString>; 2]> = if plan.output.is_empty() {
            Vec::new()
        } else {
            plan.procs
                .iter()
                .map(|proc_plan| output_files(plan, proc_plan, last_stage))
                .collect()
        };
        let shown: HashMap<(usize, u32), ShownFiles> = plan
            .procs
            .iter()
            .zip(&files)
            .filter(|(_, pair)| pair.iter().any(Option::is_some))
            .map(|(proc_plan, pair)| {
                let text = pair.clone().map(|path| path.map(|path| path_text(&path)));
                ((proc_plan.stage, proc_plan.rank), Rc::new(text))
            })
            .collect();
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
                files: shown,
                signals: Vec::new(),
            });
        }
        if let Err(error) = self.send_order(plan, stdio, files) {
            if let Some(procs) = self.jobs.get_mut(&plan.job) {
                procs.launch = None;
            }
            fail(self, error, out);
        }
    }

    /// A submission arrived, or a launch begins: idle CPUs poll while
    /// its processes are created (see `stop::LatencyHold`).
    pub(super) fn hold_latency_for_launch(&mut self) {
        let now = self.clock.now();
        self.latency.hold_for_launch(now);
    }

    /// At the end of an event: the launches let go of the CPU latency
    /// request once none is creating processes (each rank exec'd or
    /// failed, or the job is gone), or at their deadline.
    pub(super) fn settle_launch_latency(&mut self) {
        let launching = self
            .jobs
            .values()
            .any(|procs| procs.launch.is_some() || procs.execs_in_flight > 0);
        let now = self.clock.now();
        if !launching
            || self
                .latency
                .launch_deadline()
                .is_some_and(|until| now >= until)
        {
            self.latency.end_launches();
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
        let (cgroup_procs, pids_procs) = match &self.cgroups {
            Some(cgroups) => match cgroups.add_job(plan.job) {
                Ok((procs, pids)) => (Some(procs), pids),
                Err(error) => {
                    tracing::warn!(job = %plan.job, %error, "cannot create the job's cgroup; going without");
                    (None, None)
                }
            },
            None => (None, None),
        };
        self.jobs.insert(
            plan.job,
            JobProcs::new(
                scratch,
                cgroup_procs,
                pids_procs,
                plan.user.uid,
                plan.hosts.len(),
            ),
        );
        Ok(())
    }
}

impl JobProcs {
    /// A job's record before any of its processes exists.
    pub(super) fn new(
        scratch: std::path::PathBuf,
        cgroup_procs: Option<std::ffi::CString>,
        pids_procs: Option<std::ffi::CString>,
        uid: u32,
        n_slots: usize,
    ) -> JobProcs {
        JobProcs {
            groups: HashMap::new(),
            children: BTreeSet::new(),
            extras: HashMap::new(),
            members: HashMap::new(),
            member_cursor: 0,
            stop_wait: None,
            drain: None,
            reaped_cpu: Duration::ZERO,
            discovered_at: None,
            listed_at: None,
            reaped_peak: vec![0; n_slots],
            exe_bytes: 0,
            seen_exes: BTreeSet::new(),
            scratch,
            disk_walk: statedir::DiskWalk::default(),
            cgroup_procs,
            pids_procs,
            cgroup_clean: false,
            uid,
            hold: SwitchedOutHold::default(),
            launch: None,
            launch_failed: false,
            over_limit: false,
            execs_in_flight: 0,
            lost: None,
        }
    }
}

/// The paths of the files a process writes its stdout and stderr to, if
/// its job has them (`scrun -output=`, `-error=`): a process whose stdout
/// feeds the next stage of a `==` pipe keeps that pipe, and writes only
/// its stderr to a file. Expanded here, in scored, for the keeper's order;
/// the validator keeps NUL bytes out of patterns and names, and a path
/// that holds one anyway is left out.
fn output_files(
    plan: &LaunchPlan,
    proc_plan: &scored_core::job::ProcPlan,
    last_stage: usize,
) -> [Option<CString>; 2] {
    let with = scored_proto::batch::Expansion {
        job: plan.job.0,
        rank: Some(proc_plan.rank),
        index: plan.array.map(|(index, _)| index),
        name: &plan.name,
    };
    let expand = |pattern: Option<&scored_proto::batch::Pattern>| {
        pattern.and_then(|pattern| CString::new(pattern.expand(&with)).ok())
    };
    let feeds_pipe = plan.pipe && proc_plan.stage < last_stage;
    [
        expand(plan.output.stdout.as_ref().filter(|_| !feeds_pipe)),
        expand(plan.output.stderr_file()),
    ]
}

/// A path for messages.
fn path_text(path: &CString) -> Box<str> {
    String::from_utf8_lossy(path.as_bytes()).into()
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
