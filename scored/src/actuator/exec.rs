//! Ranks between fork and exec: the report pipe each one writes its
//! failure to (end of file: the exec happened), watched as one epoll set;
//! the executable counted in the job's disk use; a rank that takes
//! longer than [`EXEC_TIMEOUT`] killed (unless it is not stopped, and so
//! waits for the machine);
//! a failed launch reported once.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::rc::Rc;
use std::time::Instant;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use scored_core::core::Input;
use scored_core::ids::JobId;

use super::failure::LaunchError;
use super::launch::launch_error;
use super::{procfs, spawn, sys, OsActuator, EXEC_TIMEOUT};

/// How many times a rank that is not stopped at its deadline gets another
/// [`EXEC_TIMEOUT`]: a minute in all. Such a rank waits for the machine: a
/// CPU that real-time work holds (this daemon, or another, serving a flood
/// of requests, ahead of which the rank, still at the daemon's priority and
/// pinned to its host's CPUs, cannot run), or a kernel lock that another
/// rank holds while it waits for one (the cgroup attach). Only a stop is
/// its user's doing; a minute bounds whatever else (a file system that
/// never answers) could hold it.
const MACHINE_WAITS: u32 = 11;

/// A rank between its fork and its exec: the read end of its report pipe
/// (see `spawn.rs`), watched through `OsActuator::exec_watch`.
#[derive(Debug)]
pub(super) struct PendingExec {
    pub(super) job: JobId,
    pub(super) rank: u32,
    /// The user it runs as.
    pub(super) uid: u32,
    /// Open until the pipe said something: end of file (the exec
    /// succeeded) or a failure.
    pub(super) report: Option<OwnedFd>,
    /// When it is killed if it has not exec'd (pushed back while its job
    /// is switched out, and while it waits for the machine).
    pub(super) deadline: Instant,
    /// How many times its deadline came while it was not stopped, waiting
    /// for the machine, and was pushed back (at most [`MACHINE_WAITS`]).
    pub(super) machine_waits: u32,
    /// It failed (or was killed for taking too long): its exit is not a
    /// rank's exit, and its launch failure has been reported.
    pub(super) failed: bool,
    /// The program and working directory, for the message.
    pub(super) program: Rc<str>,
    pub(super) cwd: Rc<str>,
    /// The paths of its stdout and stderr files, if it opens any, for the
    /// message of a failure to open one.
    pub(super) files: Option<Rc<[Option<Box<str>>; 2]>>,
}

impl OsActuator {
    /// Reads the report pipes of ranks between fork and exec that are
    /// ready (the loop saw `exec_watch` readable, or it polls).
    pub(super) fn collect_exec_reports(&mut self, out: &mut Vec<Input>) {
        if self.execs.is_empty() {
            return;
        }
        let mut ready = [0u64; 64];
        loop {
            let n = match sys::epoll_ready(&self.exec_watch, &mut ready) {
                Ok(n) => n,
                Err(error) => {
                    tracing::warn!(%error, "cannot read the set of exec reports");
                    0
                }
            };
            for &pid in &ready[..n] {
                self.exec_report(pid as i32, out);
            }
            if n < ready.len() {
                break;
            }
        }
    }

    /// What a rank's report pipe says now: nothing yet, its exec (its
    /// executable is then counted in the job's disk use), or a failure.
    pub(super) fn exec_report(&mut self, pid: i32, out: &mut Vec<Input>) {
        let Some(report) = self
            .execs
            .get(&pid)
            .and_then(|pending| pending.report.as_ref())
        else {
            return;
        };
        match spawn::read_report(report) {
            spawn::Report::Pending => {}
            spawn::Report::Execd => {
                if let Some(pending) = self.execs.remove(&pid) {
                    let job = pending.job;
                    close_report(&self.exec_watch, pending.report);
                    self.exec_settled(job);
                    self.count_executable(job, pid);
                    self.stop_at_exec(job, pid);
                }
            }
            spawn::Report::Failed(step, errno) => self.exec_failed(pid, step, errno, out),
        }
    }

    /// One of the job's ranks in flight has reported (or will never):
    /// room for the next in its launch's window.
    pub(super) fn exec_settled(&mut self, job: JobId) {
        if let Some(procs) = self.jobs.get_mut(&job) {
            procs.execs_in_flight = procs.execs_in_flight.saturating_sub(1);
        }
    }

    /// Adds the size of a rank's executable to its job's disk use, once
    /// per executable (by device and inode) and stage.
    ///
    /// The executable is opened through the kernel's link (`O_PATH` on
    /// `/proc/PID/exe`, which reaches the file the rank runs even when it
    /// was deleted or renamed) and measured with `fstat`: the link's text
    /// names a path the user controls (`/home/u/prog (deleted)` can be a
    /// symbolic link they planted), and root must not follow it.
    pub(super) fn count_executable(&mut self, job: JobId, pid: i32) {
        let Ok(exe) = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(format!("/proc/{pid}/exe"))
        else {
            return;
        };
        let Ok(meta) = exe.metadata() else {
            return;
        };
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if procs.seen_exes.insert((meta.dev(), meta.ino())) {
            procs.exe_bytes += meta.len();
        }
    }

    /// A rank reported that a step before its exec failed: its job's
    /// launch fails with the message a rank that cannot run gets.
    pub(super) fn exec_failed(
        &mut self,
        pid: i32,
        step: spawn::Step,
        errno: i32,
        out: &mut Vec<Input>,
    ) {
        let Some(pending) = self.execs.get_mut(&pid) else {
            return;
        };
        let report = pending.report.take();
        let settled = report.is_some();
        close_report(&self.exec_watch, report);
        pending.failed = true;
        let (job, rank) = (pending.job, pending.rank);
        if settled {
            self.exec_settled(job);
        }
        let Some(pending) = self.execs.get(&pid) else {
            return;
        };
        let error = io::Error::from_raw_os_error(errno);
        tracing::info!(job = %job, pid, rank, step = step.describe(), %error, "a rank could not exec");
        let failure = if step == spawn::Step::Privileges && errno == sys::PRIVILEGES_REMAIN {
            LaunchError::PrivilegesRemain {
                program: Rc::clone(&pending.program),
                uid: self.jobs.get(&job).map_or(0, |procs| procs.uid),
            }
        } else if let (spawn::Step::Output | spawn::Step::Error, Some(files)) =
            (step, &pending.files)
        {
            let which = usize::from(step == spawn::Step::Error);
            LaunchError::Output {
                option: if which == 0 { "output" } else { "error" },
                path: files[which].as_deref().unwrap_or("?").into(),
                cwd: Rc::clone(&pending.cwd),
                error,
            }
        } else if step == spawn::Step::Stdio {
            // A descriptor numbered above what the rank may have
            // (scored's own descriptor limit, when it cannot raise it).
            LaunchError::Descriptors {
                program: Rc::clone(&pending.program),
                error,
            }
        } else if step == spawn::Step::Chdir {
            LaunchError::Chdir {
                program: Rc::clone(&pending.program),
                cwd: Rc::clone(&pending.cwd),
                error,
            }
        } else if step == spawn::Step::Exec
            && errno == libc::ENOENT
            && !pending.program.contains('/')
        {
            // execvp searched the job's PATH and found nothing there.
            LaunchError::NotOnPath {
                program: Rc::clone(&pending.program),
                cwd: Rc::clone(&pending.cwd),
            }
        } else if step == spawn::Step::Exec
            && errno == libc::EACCES
            && !pending.program.contains('/')
        {
            LaunchError::PathDenied {
                program: Rc::clone(&pending.program),
                cwd: Rc::clone(&pending.cwd),
            }
        } else if step == spawn::Step::Exec {
            launch_error(&pending.program, &pending.cwd, error)
        } else {
            LaunchError::Step {
                program: Rc::clone(&pending.program),
                step: step.describe(),
                error,
            }
        };
        self.fail_launch(job, failure, out);
    }

    /// Ranks that have not exec'd within [`EXEC_TIMEOUT`] of running time
    /// are killed, and their jobs' launches fail; one that is not stopped
    /// then waits for the machine and gets more time (see
    /// [`MACHINE_WAITS`]).
    pub(super) fn expire_execs(&mut self, now: Instant, out: &mut Vec<Input>) {
        let jobs = &self.jobs;
        let released = &self.released;
        let expired: Vec<i32> = self
            .execs
            .iter()
            .filter(|(pid, pending)| {
                !pending.failed
                    && pending.deadline <= now
                    && (released.contains(pid)
                        || !jobs
                            .get(&pending.job)
                            .is_some_and(|procs| procs.hold.switched_out))
            })
            .map(|(pid, _)| *pid)
            .collect();
        for pid in expired {
            // A last look: it may have exec'd or failed just now.
            self.exec_report(pid, out);
            let Some(pending) = self.execs.get_mut(&pid).filter(|pending| !pending.failed) else {
                continue;
            };
            // Not stopped by its user: waiting for the machine.
            let state = procfs::read_stat(pid).map_or('?', |stat| char::from(stat.state));
            if pending.machine_waits < MACHINE_WAITS && !matches!(state, 'T' | 't') {
                pending.machine_waits += 1;
                pending.deadline = now + EXEC_TIMEOUT;
                tracing::debug!(job = %pending.job, pid, rank = pending.rank, %state, "a rank waits for the machine before its exec; its deadline is pushed back");
                continue;
            }
            // An unreaped child of ours: its pid is still its own. SIGKILL
            // ends a stopped process too.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            pending.failed = true;
            close_report(&self.exec_watch, pending.report.take());
            let (job, rank) = (pending.job, pending.rank);
            let program = Rc::clone(&pending.program);
            self.exec_settled(job);
            let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
            tracing::warn!(job = %job, pid, rank, %state, %wchan, "a rank did not exec in time; killed");
            let failure = LaunchError::ExecTimeout {
                job,
                rank,
                program,
                after: EXEC_TIMEOUT,
            };
            self.fail_launch(job, failure, out);
        }
    }

    /// Kills the ranks between fork and exec that are stopped while their
    /// job runs (their user stopped them; scored stops such ranks only
    /// with their switched-out job), failing their launches: an in-place
    /// restart cannot hand them over and does not wait for them.
    pub(super) fn end_stopped_execs(&mut self, out: &mut Vec<Input>) {
        let jobs = &self.jobs;
        let stopped: Vec<i32> = self
            .execs
            .iter()
            .filter(|(_, pending)| {
                !pending.failed
                    && !jobs
                        .get(&pending.job)
                        .is_some_and(|procs| procs.hold.switched_out)
            })
            .map(|(pid, _)| *pid)
            .filter(|pid| {
                procfs::read_stat(*pid).is_some_and(|stat| matches!(stat.state, b'T' | b't'))
            })
            .collect();
        for pid in stopped {
            // A last look: it may have exec'd or failed just now.
            self.exec_report(pid, out);
            let Some(pending) = self.execs.get_mut(&pid).filter(|pending| !pending.failed) else {
                continue;
            };
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            pending.failed = true;
            close_report(&self.exec_watch, pending.report.take());
            let (job, rank) = (pending.job, pending.rank);
            let program = Rc::clone(&pending.program);
            self.exec_settled(job);
            tracing::warn!(job = %job, pid, rank, "a rank stopped before its exec holds up a restart; killed");
            let failure = LaunchError::StoppedBeforeExec { job, rank, program };
            self.fail_launch(job, failure, out);
        }
    }

    /// The job's launch failed: says so once, creates nothing more, and
    /// kills what exists (the job ends once all of it is reaped).
    pub(super) fn fail_launch(&mut self, job: JobId, failure: LaunchError, out: &mut Vec<Input>) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if procs.launch_failed {
            return;
        }
        procs.launch_failed = true;
        let message = failure.message();
        tracing::info!(job = %job, %message, "launch failed");
        out.push(Input::SpawnFailed {
            job,
            message,
            status: failure.status(),
        });
        if let Some(launch) = procs.launch.as_mut() {
            launch.aborted = true;
        }
        self.send(job, Signal::SIGKILL);
    }

    /// A rank that ended: whether it ended before its exec because a step
    /// failed or it was killed for taking too long (reading its report
    /// now if the loop had not yet). One killed by someone else before
    /// its exec ends as killed by that signal, as it would in a shell.
    pub(super) fn exec_never_happened(&mut self, pid: i32, out: &mut Vec<Input>) -> bool {
        if !self.execs.contains_key(&pid) {
            return false;
        }
        self.exec_report(pid, out);
        match self.execs.remove(&pid) {
            Some(pending) => {
                let (job, failed) = (pending.job, pending.failed);
                let settled = pending.report.is_some();
                close_report(&self.exec_watch, pending.report);
                if settled {
                    self.exec_settled(job);
                }
                failed
            }
            None => false,
        }
    }
}

/// Closes a rank's report pipe, first removing it from the set the loop
/// watches: a copy of it in another process would keep its registration,
/// and so its reports, alive after the daemon's descriptor is gone.
pub(super) fn close_report(watch: &OwnedFd, report: Option<OwnedFd>) {
    if let Some(report) = report {
        if let Err(error) = sys::epoll_remove(watch, report.as_raw_fd()) {
            tracing::debug!(%error, "cannot remove a report pipe from the watched set");
        }
    }
}

/// How many ranks of `uid`'s jobs are between fork and exec with their
/// report still awaited.
pub(super) fn user_execs_in_flight(execs: &HashMap<i32, PendingExec>, uid: u32) -> usize {
    execs
        .values()
        .filter(|pending| pending.uid == uid && pending.report.is_some())
        .count()
}
