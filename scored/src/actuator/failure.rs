//! Why a job's processes could not be created: [`LaunchError`], one
//! variant for each thing that can fail between a `Spawn` and the last
//! rank's exec, each with the exit status its scrun reports.
#![forbid(unsafe_code)]

use std::fmt;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use scored_core::ids::JobId;
use scored_proto::exitcode;

/// A launch that failed; the core is told its text and [`LaunchError::status`].
#[derive(Debug)]
pub enum LaunchError {
    /// The state directory, or the job's scratch directory or cgroup,
    /// could not be prepared: the daemon's fault, not the program's.
    Prepare {
        /// The job being launched.
        job: JobId,
        /// What was wrong, naming the path.
        problem: String,
    },
    /// A pipe between `==` stages could not be created.
    Pipe(nix::errno::Errno),
    /// A working directory or argument holds a NUL byte, which the
    /// submission validator refuses: only a bug gets here.
    Nul(&'static str),
    /// A program could not be run in its directory (a descriptor, a fork,
    /// the exec itself).
    Run {
        /// The program as the user named it.
        program: Rc<str>,
        /// The working directory.
        cwd: Rc<str>,
        /// Why.
        error: io::Error,
    },
    /// A program named without a `/` is on no directory of the job's
    /// `PATH`.
    NotOnPath {
        /// The program as the user named it.
        program: Rc<str>,
        /// The working directory.
        cwd: Rc<str>,
    },
    /// A program named without a `/` was not run for want of permission
    /// somewhere on the job's `PATH`: execvp cannot tell a directory the
    /// user may not search from a file there the user may not execute.
    PathDenied {
        /// The program as the user named it.
        program: Rc<str>,
        /// The working directory.
        cwd: Rc<str>,
    },
    /// The rank could not enter its working directory (gone, or not
    /// searchable by the job's user).
    Chdir {
        /// The program.
        program: Rc<str>,
        /// The working directory.
        cwd: Rc<str>,
        /// Why.
        error: io::Error,
    },
    /// Another step of the rank's set-up before its exec failed.
    Step {
        /// The program.
        program: Rc<str>,
        /// What the step does (`setting the resource limits`).
        step: &'static str,
        /// Why.
        error: io::Error,
    },
    /// The change of user left capabilities or securebits: the program is
    /// not run with them.
    PrivilegesRemain {
        /// The program.
        program: Rc<str>,
        /// The user it was to run as.
        uid: u32,
    },
    /// A rank could not open its output file as its user (`scrun
    /// -output=`, `-error=`).
    Output {
        /// `output` or `error`.
        option: &'static str,
        /// The path, as expanded for the rank.
        path: Rc<str>,
        /// The working directory it is relative to.
        cwd: Rc<str>,
        /// Why.
        error: io::Error,
    },
    /// A descriptor its scrun passed could not be given to the rank (a
    /// number above the rank's descriptor limit).
    Descriptors {
        /// The program.
        program: Rc<str>,
        /// Why.
        error: io::Error,
    },
    /// A rank had not exec'd its program within the exec timeout of
    /// running time (stopped by its user before its exec?), and was killed.
    ExecTimeout {
        /// The job.
        job: JobId,
        /// The rank.
        rank: u32,
        /// The program.
        program: Rc<str>,
        /// The timeout.
        after: Duration,
    },
    /// The job's keeper could not create its processes (a pipe, a fork,
    /// the order itself); the text says what, with the status.
    Keeper {
        /// What failed.
        message: String,
        /// The status scrun reports.
        status: i32,
    },
}

impl LaunchError {
    /// The exit status scrun reports for the job: 127 for a program not
    /// found, 70 for the daemon's own failure, 126 otherwise.
    pub fn status(&self) -> i32 {
        match self {
            LaunchError::Prepare { .. } => exitcode::INTERNAL,
            LaunchError::Keeper { status, .. } => *status,
            LaunchError::Run { error, .. } if error.kind() == io::ErrorKind::NotFound => {
                exitcode::NOT_FOUND
            }
            LaunchError::NotOnPath { .. } => exitcode::NOT_FOUND,
            _ => exitcode::NOT_EXECUTABLE,
        }
    }

    /// The text the core, the log and the job's scrun get: cut to the
    /// length of a reason, since programs, directories and arguments are
    /// the user's.
    pub fn message(&self) -> String {
        scored_core::core::cap_reason(self.to_string())
    }
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::Prepare { job, problem } => {
                write!(f, "cannot prepare job {job}: {problem}")
            }
            LaunchError::Pipe(error) => write!(f, "cannot create a pipe: {error}"),
            LaunchError::Nul(what) => write!(f, "internal error: {what} holds a NUL byte"),
            LaunchError::Run {
                program,
                cwd,
                error,
            } => write!(f, "cannot run '{program}' in {cwd}: {error}"),
            LaunchError::NotOnPath { program, cwd } => write!(
                f,
                "cannot run '{program}' in {cwd}: no such program on PATH (give its path, as \
                 ./{program}, for one in the working directory)"
            ),
            LaunchError::PathDenied { program, cwd } => write!(
                f,
                "cannot run '{program}' in {cwd}: permission denied while searching PATH (a \
                 directory of PATH the user may not search, or a '{program}' there the user may \
                 not execute)"
            ),
            LaunchError::Chdir {
                program,
                cwd,
                error,
            } => write!(
                f,
                "cannot run '{program}': cannot enter the working directory {cwd}: {error}"
            ),
            LaunchError::Step {
                program,
                step,
                error,
            } => write!(f, "cannot run '{program}': {step} failed: {error}"),
            LaunchError::PrivilegesRemain { program, uid } => write!(
                f,
                "refusing to run '{program}' as uid {uid}: capabilities or securebits \
                 remain after the change of user"
            ),
            LaunchError::Output {
                option,
                path,
                cwd,
                error,
            } => write!(f, "cannot open the {option} file {path} in {cwd}: {error}"),
            LaunchError::Descriptors { program, error } => write!(
                f,
                "cannot give '{program}' the descriptors its scrun passed: {error}"
            ),
            LaunchError::ExecTimeout {
                job,
                rank,
                program,
                after,
            } => write!(
                f,
                "rank {rank} of job {job} had not started '{program}' {}s after it was created \
                 (stopped before its exec?): killed",
                after.as_secs()
            ),
            LaunchError::Keeper { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for LaunchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LaunchError::Pipe(error) => Some(error),
            LaunchError::Run { error, .. }
            | LaunchError::Chdir { error, .. }
            | LaunchError::Step { error, .. }
            | LaunchError::Descriptors { error, .. }
            | LaunchError::Output { error, .. } => Some(error),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(error: io::Error) -> LaunchError {
        LaunchError::Run {
            program: "prog".into(),
            cwd: "/home/u".into(),
            error,
        }
    }

    #[test]
    fn a_program_not_found_is_status_127_and_names_the_program_and_directory() {
        let error = run(io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(error.status(), 127);
        assert_eq!(
            error.to_string(),
            "cannot run 'prog' in /home/u: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn a_program_not_on_path_and_a_directory_not_entered_say_so() {
        let missing = LaunchError::NotOnPath {
            program: "nosuchprog".into(),
            cwd: "/tmp/x".into(),
        };
        assert_eq!(missing.status(), 127);
        assert_eq!(
            missing.to_string(),
            "cannot run 'nosuchprog' in /tmp/x: no such program on PATH (give its path, as \
             ./nosuchprog, for one in the working directory)"
        );
        let denied = LaunchError::PathDenied {
            program: "nosuchprog".into(),
            cwd: "/tmp/x".into(),
        };
        assert_eq!(denied.status(), 126);
        assert_eq!(
            denied.to_string(),
            "cannot run 'nosuchprog' in /tmp/x: permission denied while searching PATH (a \
             directory of PATH the user may not search, or a 'nosuchprog' there the user may \
             not execute)"
        );
        let chdir = LaunchError::Chdir {
            program: "true".into(),
            cwd: "/home/u/d".into(),
            error: io::Error::from_raw_os_error(libc::EACCES),
        };
        assert_eq!(chdir.status(), 126);
        assert_eq!(
            chdir.to_string(),
            "cannot run 'true': cannot enter the working directory /home/u/d: Permission denied \
             (os error 13)"
        );
    }

    #[test]
    fn a_program_that_cannot_run_is_status_126() {
        assert_eq!(
            run(io::Error::from_raw_os_error(libc::EACCES)).status(),
            126
        );
        assert_eq!(LaunchError::Pipe(nix::errno::Errno::EMFILE).status(), 126);
        assert_eq!(LaunchError::Nul("an argument").status(), 126);
        let timeout = LaunchError::ExecTimeout {
            job: JobId(7),
            rank: 3,
            program: "prog".into(),
            after: Duration::from_secs(5),
        };
        assert_eq!(timeout.status(), 126);
        assert_eq!(
            timeout.to_string(),
            "rank 3 of job 7 had not started 'prog' 5s after it was created \
             (stopped before its exec?): killed"
        );
    }

    #[test]
    fn the_daemons_own_failure_is_status_70_and_names_the_job() {
        let error = LaunchError::Prepare {
            job: JobId(4),
            problem: "/var/scored/jobs: permission denied".into(),
        };
        assert_eq!(error.status(), 70);
        assert_eq!(
            error.to_string(),
            "cannot prepare job 4: /var/scored/jobs: permission denied"
        );
    }

    #[test]
    fn a_message_naming_a_huge_program_is_cut() {
        let error = LaunchError::Run {
            program: "p".repeat(100_000).into(),
            cwd: "/".into(),
            error: io::Error::from_raw_os_error(libc::ENOENT),
        };
        let message = error.message();
        assert!(message.len() < 10_000, "{} bytes", message.len());
        assert!(message.starts_with("cannot run 'ppp"), "{message}");
    }

    #[test]
    fn the_cause_of_a_failed_run_is_its_source() {
        use std::error::Error;
        let error = run(io::Error::from_raw_os_error(libc::EACCES));
        assert!(error.source().is_some());
        assert!(LaunchError::Nul("an argument").source().is_none());
    }
}
