//! Creating a job's processes: its scratch directory, cgroup and pipes,
//! then its ranks a batch at a time (at most [`LAUNCH_BATCH`] of work
//! between events, and at most [`EXEC_WINDOW`] ranks between fork and
//! exec), each set up in the child between fork and exec.
#![forbid(unsafe_code)]

use std::collections::{BTreeSet, HashMap};
use std::ffi::{CString, OsStr};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use nix::sys::resource::Resource;
use nix::sys::signal::Signal;

use crate::closer::UserFd;
use scored_core::core::Input;
use scored_core::ids::JobId;
use scored_core::job::LaunchPlan;
use scored_proto::inherit;

use super::failure::LaunchError;
use super::{
    spawn, statedir, sys, user_execs_in_flight, Child, JobProcs, JobStdio, OsActuator, PendingExec,
    SwitchedOutHold, EXEC_TIMEOUT, EXEC_WINDOW, LAUNCH_BATCH, STATE_DIR_CHECK, USER_EXEC_WINDOW,
};

/// Where a launch stands: what `spawn_all` needs from one batch to the next.
#[derive(Debug, Default)]
pub(super) struct LaunchProgress {
    /// Index in the plan's `procs` of the next process to create.
    pub(super) next: usize,
    /// Pipes between `==` stages not yet handed to a process.
    pub(super) pipes: Vec<Vec<(Option<OwnedFd>, Option<OwnedFd>)>>,
    /// The job's scratch directory, cgroup and pipes are made.
    pub(super) prepared: bool,
    /// Each output file a process of the launch opens, with the first
    /// process that named it: that one empties it, and the others open it
    /// only once it has exec'd, so that none writes before it is emptied.
    pub(super) opened: HashMap<Vec<u8>, i32>,
    /// The process whose exec the next one waits for (see `opened`).
    pub(super) waits_for: Option<i32>,
}

/// A launch in progress: the processes of a job are created a batch at a
/// time (at most [`LAUNCH_BATCH`] of work) between events, so that a job
/// of thousands of processes does not stall the loop. The job holds its
/// hosts from the start; while it is switched out no process is created
/// (the ones that exist are stopped like any job's), so no part of it runs
/// outside its slices. An in-place restart hands it over as it stands
/// (`ActuatorSnapshot`): the next image creates the rest.
#[derive(Debug)]
pub(super) struct LaunchInProgress {
    pub(super) plan: LaunchPlan,
    pub(super) stdio: Option<JobStdio>,
    pub(super) progress: LaunchProgress,
    /// Switched out: create nothing until the job is continued.
    pub(super) paused: bool,
    /// The job is being killed: create nothing more.
    pub(super) aborted: bool,
}

/// A launch an earlier image handed over, waiting for its plan and
/// descriptors.
#[derive(Debug)]
pub(super) struct HandedOver {
    pub(super) progress: LaunchProgress,
    pub(super) paused: bool,
    pub(super) aborted: bool,
}

impl JobProcs {
    /// Whether its launch has processes to create now: not switched out,
    /// no in-place restart handing launches over (`finishing`), with room
    /// in its window (or it was aborted, which drops it).
    pub(super) fn launch_due(&self, execs: &HashMap<i32, PendingExec>, finishing: bool) -> bool {
        self.launch.as_ref().is_some_and(|launch| {
            launch.aborted
                || (!launch.paused
                    && !finishing
                    && self.execs_in_flight < EXEC_WINDOW
                    && user_execs_in_flight(execs, self.uid) < USER_EXEC_WINDOW
                    && launch
                        .progress
                        .waits_for
                        .is_none_or(|pid| !execs.contains_key(&pid)))
        })
    }
}

impl OsActuator {
    pub(super) fn begin_launch(
        &mut self,
        plan: &LaunchPlan,
        stdio: Option<&JobStdio>,
        out: &mut Vec<Input>,
    ) {
        if !self.jobs.contains_key(&plan.job) {
            // Not the program's fault: the status says the daemon failed.
            if let Err(problem) = self.check_state_dir(out) {
                let error = LaunchError::Prepare {
                    job: plan.job,
                    problem,
                };
                let message = error.message();
                tracing::info!(job = %plan.job, %message, "launch failed");
                out.push(Input::SpawnFailed {
                    job: plan.job,
                    message,
                    status: error.status(),
                });
                out.push(Input::ProcessesGone(plan.job));
                return;
            }
        }
        let launch = LaunchInProgress {
            plan: plan.clone(),
            stdio: stdio.map(JobStdio::share),
            progress: LaunchProgress::default(),
            paused: false,
            aborted: false,
        };
        self.run_launch(launch, self.clock.now() + LAUNCH_BATCH, out);
    }

    /// Goes on with a launch an earlier image handed over, with the plan
    /// the core gives for the job and its client's descriptors.
    pub(super) fn resume_launch(
        &mut self,
        job: JobId,
        plan: Option<&LaunchPlan>,
        stdio: Option<&JobStdio>,
    ) {
        let Some(handed) = self.handed_over.remove(&job) else {
            return;
        };
        let Some(plan) = plan.filter(|_| self.jobs.contains_key(&job)) else {
            // A bug: the core and the handover disagree. What exists of
            // the job is killed rather than left half launched.
            tracing::error!(job = %job, "a launch was handed over for a job the core does not hold; its processes are killed");
            self.send(job, Signal::SIGKILL);
            return;
        };
        tracing::info!(job = %job, next = handed.progress.next, of = plan.procs.len(), "going on with a launch handed over");
        if let Some(procs) = self.jobs.get_mut(&job) {
            procs.launch = Some(LaunchInProgress {
                plan: plan.clone(),
                stdio: stdio.map(JobStdio::share),
                progress: handed.progress,
                paused: handed.paused,
                aborted: handed.aborted,
            });
        }
    }

    pub(super) fn run_due_launches(&mut self, out: &mut Vec<Input>) {
        let deadline = self.clock.now() + LAUNCH_BATCH;
        let due: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, procs)| procs.launch_due(&self.execs, self.finishing))
            .map(|(job, _)| *job)
            .collect();
        for job in due {
            let Some(launch) = self
                .jobs
                .get_mut(&job)
                .and_then(|procs| procs.launch.take())
            else {
                continue;
            };
            if launch.aborted {
                // Killed before all its processes existed: what exists is
                // being killed; once it is gone, so is the job.
                drop(launch);
                if self
                    .jobs
                    .get(&job)
                    .is_some_and(|procs| procs.children.is_empty())
                {
                    self.last_child_gone(job, out);
                }
                continue;
            }
            if self.clock.now() >= deadline {
                if let Some(procs) = self.jobs.get_mut(&job) {
                    procs.launch = Some(launch);
                }
                continue;
            }
            self.run_launch(launch, deadline, out);
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
                reaped_peak: vec![0; plan.hosts.len()],
                exe_bytes: 0,
                seen_exes: BTreeSet::new(),
                scratch,
                disk_walk: statedir::DiskWalk::default(),
                cgroup_procs,
                pids_procs,
                uid: plan.user.uid,
                hold: SwitchedOutHold::default(),
                launch: None,
                launch_failed: false,
                over_limit: false,
                execs_in_flight: 0,
            },
        );
        Ok(())
    }

    /// The start of a launch: the job's scratch directory and cgroup, the
    /// pipes between `==` stages, and fresh process groups and peaks.
    pub(super) fn start_stage(
        &mut self,
        plan: &LaunchPlan,
        pipes: &mut Vec<Vec<(Option<OwnedFd>, Option<OwnedFd>)>>,
    ) -> Result<(), LaunchError> {
        // Not the program's fault: the status says the daemon failed.
        self.prepare_job(plan)
            .map_err(|error| LaunchError::Prepare {
                job: plan.job,
                problem: error.to_string(),
            })?;
        let last_stage = plan.first_stage + plan.argv.len() - 1;
        // Pipes between stages, rank by rank: pipes[s][r] joins stage s's
        // rank r (writer) to stage s+1's rank r (reader).
        if plan.pipe {
            for _ in plan.first_stage..last_stage {
                let mut stage_pipes = Vec::new();
                for _ in 0..plan.nprocs {
                    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                        .map_err(LaunchError::Pipe)?;
                    stage_pipes.push((Some(read), Some(write)));
                }
                pipes.push(stage_pipes);
            }
        }
        let procs_state = self.jobs.get_mut(&plan.job).expect("prepared above");
        // A new stage: (for `::`) a new peak, since each stage is limited on
        // its own.
        procs_state
            .reaped_peak
            .iter_mut()
            .for_each(|peak| *peak = 0);
        procs_state.exe_bytes = 0;
        procs_state.seen_exes.clear();
        Ok(())
    }

    /// Runs one batch of a launch; keeps it for later batches if it is not
    /// complete, and reports a failure as `Input::SpawnFailed`.
    pub(super) fn run_launch(
        &mut self,
        mut launch: LaunchInProgress,
        deadline: Instant,
        out: &mut Vec<Input>,
    ) {
        let job = launch.plan.job;
        let result = self.spawn_all(
            &launch.plan,
            launch.stdio.as_ref(),
            &mut launch.progress,
            deadline,
        );
        if let Err(error) = result {
            let message = error.message();
            tracing::info!(job = %job, %message, "launch failed");
            out.push(Input::SpawnFailed {
                job,
                message,
                status: error.status(),
            });
            let alive = self
                .jobs
                .get(&job)
                .is_some_and(|procs| !procs.children.is_empty());
            if alive {
                self.send(job, Signal::SIGKILL);
            } else {
                out.push(Input::ProcessesGone(job));
            }
            return;
        }
        let complete = launch.progress.next >= launch.plan.procs.len();
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if complete {
            if launch.plan.procs.len() > 1 {
                tracing::debug!(job = %job, n = launch.plan.procs.len(), "launch complete");
            }
            if procs.children.is_empty() {
                // Every rank has already exited.
                self.last_child_gone(job, out);
            }
        } else {
            procs.launch = Some(launch);
        }
    }

    /// Creates the processes of `plan` from `progress.next` on, until all
    /// exist, `deadline` passes (at least one per call) or a window of
    /// ranks between fork and exec is full; the first call
    /// of a launch also prepares the job and its pipes.
    pub(super) fn spawn_all(
        &mut self,
        plan: &LaunchPlan,
        stdio: Option<&JobStdio>,
        progress: &mut LaunchProgress,
        deadline: Instant,
    ) -> Result<(), LaunchError> {
        let first = progress.next;
        progress.waits_for = None;
        if !progress.prepared {
            // Once a launch: its first call may create no process (its
            // user's window is full) and be called again.
            self.start_stage(plan, &mut progress.pipes)?;
            progress.prepared = true;
        }
        if self.finishing {
            // An in-place restart is handing the launch over: the next
            // image creates its processes.
            return Ok(());
        }
        // The submission validator refuses a NUL byte in the working
        // directory (scored_proto::submit), so this conversion only fails
        // on a bug; the launch then fails rather than the daemon.
        let cwd = CString::new(plan.cwd.as_bytes())
            .map_err(|_| LaunchError::Nul("the job's working directory"))?;
        let last_stage = plan.first_stage + plan.argv.len() - 1;
        let pipes = &mut progress.pipes;
        let procs_state = self.jobs.get_mut(&plan.job).expect("prepared above");
        let cgroup_procs = procs_state.cgroup_procs.clone();
        let pids_procs = procs_state.pids_procs.clone();
        let become_user = self.daemon_uid == 0 && plan.user.uid != 0;
        let groups: Vec<libc::gid_t> = plan.user.groups.clone();
        // The signals whose disposition the children must change: those
        // the daemon ignores and the job must not, and the other way
        // round. Handlers are reset by exec; where the daemon's state
        // cannot be read, every signal is set.
        let signals_to_change = self
            .ignored_signals
            .map_or(u64::MAX, |daemon| daemon ^ plan.inherited.ignored);
        // The environment every rank shares, as `std::process::Command`
        // built it: one entry per name (the last given wins, the daemon's
        // `SCORE_*` over the caller's), sorted by name. Built once a batch;
        // each rank adds its own `SCORE_*` entries.
        let mut base: std::collections::BTreeMap<&[u8], &[u8]> = plan
            .env
            .iter()
            .map(|(key, value)| (key.as_bytes(), value.as_bytes()))
            .collect();
        for key in SCORE_KEYS {
            base.remove(key.as_bytes());
        }
        // With PMI, the ranks' own `PMI_*` entries replace any of the
        // caller's (a scrun run inside another launcher's job).
        if stdio.is_some_and(|io| io.pmi.per_stage() > 0 || io.pmi.port()) {
            for key in PMI_KEYS {
                base.remove(key.as_bytes());
            }
        }
        if stdio.is_some_and(|io| io.pmi.pmix().is_some()) {
            for key in PMIX_KEYS {
                base.remove(key.as_bytes());
            }
        }
        // Entries no environment can hold were left out by the submission
        // validator (scored_proto::submit); one that slips through is
        // dropped rather than failing the launch.
        let base: Vec<(Vec<u8>, CString)> = base
            .into_iter()
            .filter_map(|(key, value)| {
                let mut entry = Vec::with_capacity(key.len() + value.len() + 1);
                entry.extend_from_slice(key);
                entry.push(b'=');
                entry.extend_from_slice(value);
                CString::new(entry).ok().map(|entry| (key.to_vec(), entry))
            })
            .collect();
        let scratch = self.jobs[&plan.job].scratch.as_os_str().as_bytes().to_vec();
        let cwd_text: Rc<str> = Path::new(OsStr::from_bytes(cwd.as_bytes()))
            .display()
            .to_string()
            .into();
        let mut argv_cache: Option<(usize, Vec<CString>, Rc<str>)> = None;
        for proc_plan in &plan.procs[first..] {
            if progress.next > first && self.clock.now() >= deadline {
                // The rest in later batches, between events.
                return Ok(());
            }
            if self.jobs[&plan.job].execs_in_flight >= EXEC_WINDOW
                || user_execs_in_flight(&self.execs, plan.user.uid) >= USER_EXEC_WINDOW
            {
                // The rest as the ranks in flight report their exec.
                return Ok(());
            }
            let files = output_files(plan, proc_plan, last_stage);
            // The job's first launch empties each file, by the first
            // process that names it; the others wait for that one's exec.
            let mut truncate = [false; 2];
            for (slot, path) in files.iter().enumerate() {
                let Some(path) = path else { continue };
                match progress.opened.get(path.as_bytes()) {
                    None => truncate[slot] = plan.first_stage == 0,
                    Some(&pid) if self.execs.contains_key(&pid) => {
                        progress.waits_for = Some(pid);
                        return Ok(());
                    }
                    Some(_) => {}
                }
            }
            progress.next += 1;
            let stage_idx = proc_plan.stage - plan.first_stage;
            if argv_cache
                .as_ref()
                .is_none_or(|(stage, _, _)| *stage != stage_idx)
            {
                let argv = &plan.argv[stage_idx];
                // The validator refuses NUL bytes in arguments; as above.
                let args: Vec<CString> = argv
                    .iter()
                    .map(|arg| CString::new(arg.as_bytes()))
                    .collect::<Result<_, _>>()
                    .map_err(|_| LaunchError::Nul("an argument"))?;
                let program: Rc<str> = Path::new(&argv[0]).display().to_string().into();
                argv_cache = Some((stage_idx, args, program));
            }
            let (_, args, program) = argv_cache.as_ref().expect("filled above");
            let host = &self.hosts[proc_plan.host.idx()];
            let mut own: Vec<(&[u8], CString)> = vec![
                (
                    b"SCORE_JOBID",
                    score_entry("SCORE_JOBID", plan.job.to_string().as_bytes()),
                ),
                (
                    b"SCORE_RANK",
                    score_entry("SCORE_RANK", proc_plan.rank.to_string().as_bytes()),
                ),
                (
                    b"SCORE_NPROCS",
                    score_entry("SCORE_NPROCS", plan.nprocs.to_string().as_bytes()),
                ),
                (b"SCORE_HOST", score_entry("SCORE_HOST", host.0.as_bytes())),
                (
                    b"SCORE_HOSTID",
                    score_entry("SCORE_HOSTID", proc_plan.host.0.to_string().as_bytes()),
                ),
                (b"SCORE_TMPDIR", score_entry("SCORE_TMPDIR", &scratch)),
            ];
            // The rank's end of its connection to scrun's PMI server, at
            // the lowest number above rank 0's passed descriptors.
            let pmi = stdio.and_then(|io| {
                let fd = io.pmi.take(proc_plan.stage, proc_plan.rank as usize)?;
                let number = io.inherited.last().map_or(3, |(last, _)| last + 1).max(3);
                Some((number, fd, io.pmi.per_stage()))
            });
            if let Some((number, _, size)) = &pmi {
                own.push((
                    b"PMI_FD",
                    score_entry("PMI_FD", number.to_string().as_bytes()),
                ));
                own.push((
                    b"PMI_RANK",
                    score_entry("PMI_RANK", proc_plan.rank.to_string().as_bytes()),
                ));
                own.push((
                    b"PMI_SIZE",
                    score_entry("PMI_SIZE", size.to_string().as_bytes()),
                ));
            }
            // Without a descriptor, the rank's place among the ranks that
            // reach scrun's PMI server at the environment's PMI_PORT: its
            // number across the stages, its rank and its stage's size.
            if pmi.is_none() && stdio.is_some_and(|io| io.pmi.port()) {
                let id = proc_plan.stage * plan.nprocs as usize + proc_plan.rank as usize;
                own.push((b"PMI_ID", score_entry("PMI_ID", id.to_string().as_bytes())));
                own.push((
                    b"PMI_RANK",
                    score_entry("PMI_RANK", proc_plan.rank.to_string().as_bytes()),
                ));
                own.push((
                    b"PMI_SIZE",
                    score_entry("PMI_SIZE", plan.nprocs.to_string().as_bytes()),
                ));
            }
            // The rank's place in its stage's PMIx namespace, beside the
            // server's variables that the caller's environment carries.
            if let Some(namespace) = stdio.and_then(|io| io.pmi.pmix_namespace(proc_plan.stage)) {
                own.push((
                    b"PMIX_NAMESPACE",
                    score_entry("PMIX_NAMESPACE", namespace.as_bytes()),
                ));
                own.push((
                    b"PMIX_RANK",
                    score_entry("PMIX_RANK", proc_plan.rank.to_string().as_bytes()),
                ));
            }
            if plan.pipe {
                own.push((
                    b"SCORE_STAGE",
                    score_entry("SCORE_STAGE", proc_plan.stage.to_string().as_bytes()),
                ));
            }
            if let Some((index, array)) = plan.array {
                own.push((
                    b"SCORE_ARRAY_INDEX",
                    score_entry("SCORE_ARRAY_INDEX", index.to_string().as_bytes()),
                ));
                own.push((
                    b"SCORE_ARRAY_JOBID",
                    score_entry("SCORE_ARRAY_JOBID", array.to_string().as_bytes()),
                ));
            }
            let mut env: Vec<(&[u8], &std::ffi::CStr)> = base
                .iter()
                .map(|(key, entry)| (key.as_slice(), entry.as_c_str()))
                .chain(own.iter().map(|(key, entry)| (*key, entry.as_c_str())))
                .collect();
            env.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let rank = proc_plan.rank as usize;
            // Descriptors handed to this rank alone (pipes between `==`
            // stages, /dev/null) are owned here and closed once it is forked.
            let mut owned: Vec<OwnedFd> = Vec::new();
            let stdin = if plan.pipe && stage_idx > 0 {
                pipes[stage_idx - 1][rank].0.take()
            } else {
                None
            };
            // The process that reads the client's stdin (rank 0 of the
            // first stage, or of each stage with `::`) also gets the
            // client's other descriptors; a standard descriptor the client
            // had closed stays closed (`spawn::CLOSED`).
            let reads_client =
                stdio.is_some() && proc_plan.rank == 0 && !(plan.pipe && stage_idx > 0);
            let closed =
                |fd: &Option<Rc<UserFd>>| fd.as_ref().map_or(spawn::CLOSED, |fd| fd.as_raw_fd());
            let stdin_fd = match (stdin, stdio) {
                (Some(pipe), _) => hold(&mut owned, pipe),
                (None, Some(io)) if reads_client => closed(&io.stdin),
                _ => hold(
                    &mut owned,
                    open_null(false).map_err(|error| launch_error(program, &cwd_text, error))?,
                ),
            };
            let stdout = if plan.pipe && proc_plan.stage < last_stage {
                pipes[stage_idx][rank].1.take()
            } else {
                None
            };
            let stdout_fd = match (stdout, stdio) {
                (Some(pipe), _) => hold(&mut owned, pipe),
                (None, Some(io)) => closed(&io.stdout),
                (None, None) => hold(
                    &mut owned,
                    open_null(true).map_err(|error| launch_error(program, &cwd_text, error))?,
                ),
            };
            let stderr_fd = match stdio {
                Some(io) => closed(&io.stderr),
                None => hold(
                    &mut owned,
                    open_null(true).map_err(|error| launch_error(program, &cwd_text, error))?,
                ),
            };
            let mut stdio_fds = [stdin_fd, stdout_fd, stderr_fd];
            for fd in &mut stdio_fds {
                if let Some(copy) = spawn::ChildSetup::stdio_fd(*fd)
                    .map_err(|error| launch_error(program, &cwd_text, error))?
                {
                    *fd = hold(&mut owned, copy);
                }
            }
            let mut passed_fds: Vec<(RawFd, RawFd)> = match stdio {
                Some(io) if reads_client => io
                    .inherited
                    .iter()
                    .map(|(target, fd)| (*target, fd.as_raw_fd()))
                    .collect(),
                _ => Vec::new(),
            };
            // Above every passed number, so the list stays increasing;
            // let go of (to the closer) once the rank is forked, so that
            // the rank's end is the connection's end for scrun.
            let pmi_fd = pmi.map(|(number, fd, _)| {
                passed_fds.push((number, fd.as_raw_fd()));
                fd
            });
            let slot = proc_plan.host_slot;
            // The process whose stdin is the client's takes it as its
            // controlling terminal when the client asked for that (`-pty`).
            let takes_terminal = stdio.is_some_and(|io| io.controlling_terminal)
                && proc_plan.rank == 0
                && !(plan.pipe && stage_idx > 0);
            // The caller's limits, the descriptor limit last (see
            // `spawn::steps`); without the caller's, the one scored
            // started with.
            let inherited = &plan.inherited;
            let mut rlimits: Vec<(Resource, u64, u64)> = inherited
                .rlimits
                .iter()
                .filter(|(index, _, _)| *index != inherit::NOFILE)
                .filter_map(|&(index, soft, hard)| {
                    inherit::RESOURCES
                        .get(usize::from(index))
                        .map(|&resource| (resource, soft, hard))
                })
                .collect();
            if let Some((soft, hard)) = inherited.rlimit(inherit::NOFILE).or(self.config.job_nofile)
            {
                rlimits.push((Resource::RLIMIT_NOFILE, soft, hard));
            }
            let setup = spawn::ChildSetup {
                program: &args[0],
                args: args.iter().map(CString::as_c_str).collect(),
                env: env.iter().map(|(_, entry)| *entry).collect(),
                stdio: stdio_fds,
                inherited: &passed_fds,
                cpus: host.1,
                cgroup_procs: cgroup_procs.as_deref(),
                pids_procs: pids_procs.as_deref(),
                credentials: become_user.then_some((
                    plan.user.uid,
                    plan.user.gid,
                    groups.as_slice(),
                )),
                takes_terminal,
                cwd: &cwd,
                daemon_pid: self.daemon_pid,
                umask: inherited.umask,
                nice: inherited.nice,
                ioprio: inherited.ioprio,
                ignored: inherited.ignored,
                signals_to_change,
                rlimits: &rlimits,
                output: [0, 1].map(|slot| {
                    files[slot].as_ref().map(|path| spawn::OutputFile {
                        path,
                        truncate: truncate[slot],
                    })
                }),
            };
            let (pid, report) =
                spawn::spawn(&setup).map_err(|error| launch_error(program, &cwd_text, error))?;
            drop(owned);
            drop(pmi_fd);
            let shown = files
                .iter()
                .any(Option::is_some)
                .then(|| Rc::new(files.clone().map(|path| path.map(|path| path_text(&path)))));
            for path in files.into_iter().flatten() {
                progress.opened.entry(path.into_bytes()).or_insert(pid);
            }
            let watched = sys::epoll_add(&self.exec_watch, report.as_raw_fd(), pid as u64);
            if let Err(error) = watched {
                // Without the watch the exec would be learnt only at the
                // rank's exit or its deadline: say so, and go on.
                tracing::warn!(job = %plan.job, pid, %error, "cannot watch a rank's exec");
            }
            let procs_state = self.jobs.get_mut(&plan.job).expect("prepared above");
            procs_state.groups.insert(pid, slot);
            procs_state.children.insert(pid);
            procs_state.execs_in_flight += 1;
            self.children.insert(
                pid,
                Child {
                    job: plan.job,
                    stage: proc_plan.stage,
                    rank: proc_plan.rank,
                    slot,
                    stopped: false,
                },
            );
            self.execs.insert(
                pid,
                PendingExec {
                    job: plan.job,
                    rank: proc_plan.rank,
                    uid: plan.user.uid,
                    report: Some(report),
                    deadline: self.clock.now() + EXEC_TIMEOUT,
                    machine_waits: 0,
                    failed: false,
                    program: Rc::clone(program),
                    cwd: Rc::clone(&cwd_text),
                    files: shown,
                },
            );
            tracing::debug!(job = %plan.job, pid, rank = proc_plan.rank, stage = proc_plan.stage, host = %host.0, "spawned");
        }
        Ok(())
    }
}

/// The environment variables the daemon sets for each rank, over the
/// caller's.
const SCORE_KEYS: [&str; 9] = [
    "SCORE_JOBID",
    "SCORE_RANK",
    "SCORE_NPROCS",
    "SCORE_HOST",
    "SCORE_HOSTID",
    "SCORE_TMPDIR",
    "SCORE_STAGE",
    "SCORE_ARRAY_INDEX",
    "SCORE_ARRAY_JOBID",
];

/// The paths of the files a process writes its stdout and stderr to, if
/// its job has them (`scrun -output=`, `-error=`): a process whose stdout
/// feeds the next stage of a `==` pipe keeps that pipe, and writes only
/// its stderr to a file. Expanded here, before the fork; the validator
/// keeps NUL bytes out of patterns and names, and a path that holds one
/// anyway is left out.
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

/// The environment variables the daemon sets for a rank with PMI
/// (`scrun -mpi=`), over the caller's: what MPICH's PMI-1 and PMI-2
/// clients read to find their server, rank and world size.
const PMI_KEYS: [&str; 4] = ["PMI_FD", "PMI_ID", "PMI_RANK", "PMI_SIZE"];

/// The variables the daemon sets for a rank with PMIx (`scrun
/// -mpi=pmix`), over the caller's: its namespace and rank.
const PMIX_KEYS: [&str; 2] = ["PMIX_NAMESPACE", "PMIX_RANK"];

/// `KEY=value` for one of [`SCORE_KEYS`] or [`PMI_KEYS`]; its values (numbers, a host
/// name, the scratch path) hold no NUL byte, and one that did would give
/// an empty entry rather than a failed launch.
fn score_entry(key: &str, value: &[u8]) -> CString {
    let mut entry = Vec::with_capacity(key.len() + value.len() + 1);
    entry.extend_from_slice(key.as_bytes());
    entry.push(b'=');
    entry.extend_from_slice(value);
    CString::new(entry).unwrap_or_default()
}

/// Keeps `fd` until the rank is forked, and gives its number.
fn hold(owned: &mut Vec<OwnedFd>, fd: OwnedFd) -> std::os::fd::RawFd {
    let raw = fd.as_raw_fd();
    owned.push(fd);
    raw
}

/// /dev/null for a rank's stdin (read) or stdout and stderr (write), as
/// `std::process::Stdio::null` opens it.
fn open_null(write: bool) -> io::Result<OwnedFd> {
    let file = if write {
        fs::OpenOptions::new().write(true).open("/dev/null")?
    } else {
        fs::File::open("/dev/null")?
    };
    Ok(OwnedFd::from(file))
}

/// A launch that failed in the daemon (a descriptor, a fork), in the words
/// of a rank that failed to run: the program, the directory and why.
pub(super) fn launch_error(program: &Rc<str>, cwd: &Rc<str>, error: io::Error) -> LaunchError {
    LaunchError::Run {
        program: Rc::clone(program),
        cwd: Rc::clone(cwd),
        error,
    }
}
