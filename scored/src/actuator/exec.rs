//! Ranks between fork and exec, as their keepers report them: the
//! executable counted in the job's disk use once a rank exec'd; a rank
//! that takes longer than [`EXEC_TIMEOUT`] killed (unless it is not
//! stopped, and so waits for the machine); a failed launch reported once.
#![forbid(unsafe_code)]

use std::fs;
use std::io;
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
/// of requests, ahead of which the rank, still at its keeper's priority and
/// pinned to its host's CPUs, cannot run), or a kernel lock that another
/// rank holds while it waits for one (the cgroup attach). Only a stop is
/// its user's doing; a minute bounds whatever else (a file system that
/// never answers) could hold it.
const MACHINE_WAITS: u32 = 11;

/// A rank between its fork and its exec.
#[derive(Debug)]
pub(super) struct PendingExec {
    pub(super) job: JobId,
    pub(super) rank: u32,
    /// Its keeper has not yet said whether it exec'd.
    pub(super) awaiting: bool,
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
        // Opened by the reader, with a deadline: the link waits while the
        // process holds its exec lock (see `procfs::reader`).
        let open = move || {
            fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
                .open(format!("/proc/{pid}/exe"))
                .ok()
        };
        let Some(exe) = procfs::reader::within_deadline(pid, open).flatten() else {
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
        let settled = std::mem::take(&mut pending.awaiting);
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
        let expired: Vec<i32> = self
            .execs
            .iter()
            .filter(|(_, pending)| {
                !pending.failed
                    && pending.deadline <= now
                    && !jobs
                        .get(&pending.job)
                        .is_some_and(|procs| procs.hold.switched_out)
            })
            .map(|(pid, _)| *pid)
            .collect();
        for pid in expired {
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
            // An unreaped child of its keeper, which reaps it only once
            // scored has its end: its pid is still its own. SIGKILL ends a
            // stopped process too.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            pending.failed = true;
            pending.awaiting = false;
            let (job, rank) = (pending.job, pending.rank);
            let program = Rc::clone(&pending.program);
            self.exec_settled(job);
            let wchan = procfs::reader::within_deadline(pid, move || {
                std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default()
            })
            .unwrap_or_default();
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
        // Its keeper creates nothing more, and kills what it made.
        self.tell_keeper(job, crate::keeper::ToKeeper::Kill);
        self.send(job, Signal::SIGKILL);
    }

    /// A rank that ended: whether it ended before its exec because a step
    /// failed or it was killed for taking too long. One killed by someone
    /// else before its exec ends as killed by that signal, as it would in
    /// a shell.
    pub(super) fn exec_never_happened(&mut self, pid: i32) -> bool {
        match self.execs.remove(&pid) {
            Some(pending) => {
                if pending.awaiting {
                    self.exec_settled(pending.job);
                }
                pending.failed
            }
            None => false,
        }
    }
}
