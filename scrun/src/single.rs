//! Single-user mode: when no scored answers at the default socket, scrun
//! starts a private one for its job, as SCore's single-user mode does.
//!
//! The private daemon lives in a directory of its own (mode 0700) that
//! holds its socket, its state directory and its log. It runs in its own
//! process group, so the terminal's Ctrl-C and Ctrl-Z reach scrun only, and
//! scrun decides what the job gets. `scored --single-user` exits by itself
//! once its one client has gone and its job has ended; scrun then reaps it
//! and removes the directory, keeping the log when the daemon failed.
//!
//! Waiting never sleeps blindly: the socket is retried every 10 ms through
//! a `poll` on the signalfd (so an interrupt is noticed at once), and the
//! daemon's exit is awaited through SIGCHLD on the same signalfd.
#![forbid(unsafe_code)]

use std::ffi::OsStr;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use scored_proto::client::Connection;
use scored_proto::exitcode;

use crate::error::{describe_io, Fatal};
use crate::session::say;
use crate::signals::{exit_status, is_terminating, Signals};

/// How long the private daemon may take to open its socket.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often scrun tries its socket meanwhile.
const RETRY_INTERVAL: Duration = Duration::from_millis(10);
/// How long the private daemon may take to exit once the job is over.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// The daemon's log, kept when it fails.
const LOG_NAME: &str = "scored.log";

/// The private directory of a single-user scored:
/// `$XDG_RUNTIME_DIR/scored-single.PID` when that variable names an
/// absolute directory, else `/tmp/scored-single-UID.PID`.
pub fn private_dir(runtime_dir: Option<&OsStr>, uid: u32, pid: u32) -> PathBuf {
    match runtime_dir {
        Some(dir) if Path::new(dir).is_absolute() => {
            Path::new(dir).join(format!("scored-single.{pid}"))
        }
        _ => PathBuf::from(format!("/tmp/scored-single-{uid}.{pid}")),
    }
}

/// Whether a failure to connect to the default socket means that no
/// daemon runs there (nothing at the path, or a stale socket), which is
/// when scrun starts a private one.
pub fn means_no_daemon(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::ECONNREFUSED)
    )
}

/// A running private scored.
pub struct PrivateDaemon {
    child: Child,
    dir: PathBuf,
}

impl PrivateDaemon {
    /// Starts a private scored because none answered at `default_socket`,
    /// says so on stderr, and connects to it once it is ready.
    pub fn start(
        default_socket: &Path,
        signals: &Signals,
    ) -> Result<(PrivateDaemon, Connection), Fatal> {
        let uid = nix::unistd::geteuid().as_raw();
        let dir = private_dir(
            std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
            uid,
            std::process::id(),
        );
        let unreachable = |what: String, error: io::Error| {
            Fatal::with_source(
                exitcode::UNREACHABLE,
                format!(
                    "no scored at {}, and cannot start a private one: {what}",
                    default_socket.display()
                ),
                error,
            )
        };
        create_private_dir(&dir, uid).map_err(|error| {
            unreachable(
                format!("cannot create the directory {}", dir.display()),
                error,
            )
        })?;
        let log_path = dir.join(LOG_NAME);
        let socket = dir.join("scored.sock");
        let program = scored_program();
        let spawned = open_log(&log_path)
            .map_err(|error| (format!("cannot open the log {}", log_path.display()), error))
            .and_then(|log| {
                let log_again = log.try_clone().map_err(|error| {
                    (format!("cannot open the log {}", log_path.display()), error)
                })?;
                Command::new(&program)
                    .arg("--single-user")
                    .arg("--socket")
                    .arg(&socket)
                    .arg("--state-dir")
                    .arg(dir.join("state"))
                    .stdin(Stdio::null())
                    .stdout(log_again)
                    .stderr(log)
                    .process_group(0)
                    .spawn()
                    .map_err(|error| (format!("cannot run {}", program.display()), error))
            });
        let child = match spawned {
            Ok(child) => child,
            Err((what, error)) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(unreachable(what, error));
            }
        };
        say(&format!(
            "no scored at {}; started a private single-user scored (pid {})",
            default_socket.display(),
            child.id()
        ));
        let mut daemon = PrivateDaemon { child, dir };
        match daemon.wait_ready(&socket, signals) {
            Ok(connection) => Ok((daemon, connection)),
            Err(failure) => Err(failure.finish(daemon)),
        }
    }

    /// Connects to the private daemon's socket, retrying until it listens.
    fn wait_ready(&mut self, socket: &Path, signals: &Signals) -> Result<Connection, Startup> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match Connection::connect(socket) {
                Ok(connection) => return Ok(connection),
                Err(error) if means_no_daemon(&error) => {}
                Err(error) => return Err(Startup::Connect(error)),
            }
            match self.child.try_wait() {
                Ok(Some(status)) => return Err(Startup::Exited(status)),
                Ok(None) => {}
                Err(error) => return Err(Startup::Connect(error)),
            }
            if Instant::now() >= deadline {
                return Err(Startup::TimedOut);
            }
            for signal in wait_signals(signals, RETRY_INTERVAL) {
                if is_terminating(signal) {
                    return Err(Startup::Interrupted(signal));
                }
                if signal == Signal::SIGTSTP {
                    // No job exists yet, so only scrun has to stop.
                    let _ = nix::sys::signal::raise(Signal::SIGSTOP);
                }
            }
        }
    }

    /// Waits for the private daemon to exit after the job is over, reaps
    /// it, and removes its directory (all but the log if it failed).
    /// Problems are reported on stderr; they do not change scrun's status,
    /// which is the job's.
    pub fn finish(mut self, signals: &Signals) {
        let deadline = Instant::now() + EXIT_TIMEOUT;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) => {}
                Err(error) => {
                    say(&format!(
                        "cannot wait for the private scored (pid {}): {}",
                        self.child.id(),
                        describe_io(&error)
                    ));
                    break None;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break None;
            }
            // Signals here are dropped on purpose: the job is over, and
            // this wait is bounded.
            wait_signals(signals, left);
        };
        match status {
            Some(status) if status.success() => self.remove(true),
            Some(status) => {
                say(&format!(
                    "the private scored failed ({}); see {}",
                    describe_status(status),
                    self.log().display()
                ));
                self.remove(false);
            }
            None => {
                self.kill();
                say(&format!(
                    "the private scored (pid {}) did not exit within {}s and was killed; see {}",
                    self.child.id(),
                    EXIT_TIMEOUT.as_secs(),
                    self.log().display()
                ));
                self.remove(false);
            }
        }
    }

    fn log(&self) -> PathBuf {
        self.dir.join(LOG_NAME)
    }

    /// Kills and reaps the private daemon. It is our own child, not yet
    /// reaped, so its pid cannot belong to another process.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Removes the private directory, or everything in it but the log.
    fn remove(&self, with_log: bool) {
        let result = if with_log {
            fs::remove_dir_all(&self.dir)
        } else {
            remove_all_but(&self.dir, LOG_NAME)
        };
        if let Err(error) = result {
            say(&format!(
                "cannot remove the private directory {}: {}",
                self.dir.display(),
                describe_io(&error)
            ));
        }
    }
}

/// Why the private daemon did not become ready.
enum Startup {
    Exited(ExitStatus),
    TimedOut,
    Connect(io::Error),
    Interrupted(Signal),
}

impl Startup {
    /// Cleans up after a failed start and returns the error to report.
    fn finish(self, mut daemon: PrivateDaemon) -> Fatal {
        let log = daemon.log();
        match self {
            Startup::Exited(status) => {
                daemon.remove(false);
                Fatal::new(
                    exitcode::UNREACHABLE,
                    format!(
                        "the private scored exited before it was ready ({}); see {}",
                        describe_status(status),
                        log.display()
                    ),
                )
            }
            Startup::TimedOut => {
                daemon.kill();
                daemon.remove(false);
                Fatal::new(
                    exitcode::UNREACHABLE,
                    format!(
                        "the private scored did not open its socket within {}s and was killed; see {}",
                        READY_TIMEOUT.as_secs(),
                        log.display()
                    ),
                )
            }
            Startup::Connect(error) => {
                daemon.kill();
                daemon.remove(false);
                Fatal::with_source(
                    exitcode::UNREACHABLE,
                    format!("cannot reach the private scored; see {}", log.display()),
                    error,
                )
            }
            Startup::Interrupted(signal) => {
                daemon.kill();
                daemon.remove(true);
                Fatal::new(
                    exit_status(signal),
                    "interrupted while the private scored was starting",
                )
            }
        }
    }
}

/// Creates the private directory with mode 0700. A leftover directory of
/// the same name (a crashed scrun whose pid came round again) is replaced
/// only when it is a real directory owned by us; anything else there is
/// an error, never followed or removed.
fn create_private_dir(dir: &Path, uid: u32) -> io::Result<()> {
    let mut builder = DirBuilder::new();
    builder.mode(0o700);
    match builder.create(dir) {
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            let metadata = fs::symlink_metadata(dir)?;
            if !metadata.file_type().is_dir() || metadata.uid() != uid {
                return Err(error);
            }
            fs::remove_dir_all(dir)?;
            builder.create(dir)
        }
        other => other,
    }
}

/// Opens the daemon's log for appending, readable by the user only.
fn open_log(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// The scored to start: the one installed beside scrun, else `scored` on PATH.
fn scored_program() -> PathBuf {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("scored")));
    match beside {
        Some(path) if path.is_file() => path,
        _ => PathBuf::from("scored"),
    }
}

/// Waits up to `timeout` for signals and returns those that came.
fn wait_signals(signals: &Signals, timeout: Duration) -> Vec<Signal> {
    let millis = timeout.as_millis().max(1);
    let timeout = PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, timeout) {
        Ok(0) | Err(Errno::EINTR) => Vec::new(),
        Ok(_) => signals.drain().unwrap_or_default(),
        // A poll that fails on our own signalfd is a bug; the callers'
        // deadlines still bound the wait.
        Err(_) => Vec::new(),
    }
}

/// An exit status as `status N` or `killed by SIGNAME`.
fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("status {code}");
    }
    match status.signal().map(Signal::try_from) {
        Some(Ok(signal)) => format!("killed by {}", signal.as_str()),
        Some(Err(_)) | None => status.to_string(),
    }
}

/// Removes everything in `dir` except the entry named `keep`.
fn remove_all_but(dir: &Path, keep: &str) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == keep {
            continue;
        }
        if entry.file_type()?.is_dir() {
            fs::remove_dir_all(entry.path())?;
        } else {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_dir_prefers_the_runtime_directory() {
        let check = |runtime: Option<&str>, expected: &str| {
            assert_eq!(
                private_dir(runtime.map(OsStr::new), 1000, 4242),
                PathBuf::from(expected)
            );
        };
        check(Some("/run/user/1000"), "/run/user/1000/scored-single.4242");
        check(None, "/tmp/scored-single-1000.4242");
        check(Some(""), "/tmp/scored-single-1000.4242");
        check(Some("relative/dir"), "/tmp/scored-single-1000.4242");
    }

    #[test]
    fn only_a_missing_or_stale_socket_means_no_daemon() {
        let errno = io::Error::from_raw_os_error;
        assert!(means_no_daemon(&errno(libc::ENOENT)));
        assert!(means_no_daemon(&errno(libc::ECONNREFUSED)));
        assert!(!means_no_daemon(&errno(libc::EACCES)));
        assert!(!means_no_daemon(&errno(libc::ENOTSOCK)));
    }

    #[test]
    fn statuses_read_as_words() {
        assert_eq!(describe_status(ExitStatus::from_raw(3 << 8)), "status 3");
        assert_eq!(
            describe_status(ExitStatus::from_raw(9)),
            "killed by SIGKILL"
        );
    }

    #[test]
    fn private_dir_is_private_and_replaces_only_our_own_leftovers() {
        let base = std::env::temp_dir().join(format!("scrun-single-test.{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir(&base).unwrap();
        let dir = base.join("private");
        let uid = nix::unistd::geteuid().as_raw();
        create_private_dir(&dir, uid).unwrap();
        let mode = fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        fs::write(dir.join(LOG_NAME), "log").unwrap();
        fs::create_dir(dir.join("state")).unwrap();
        fs::write(dir.join("state/file"), "x").unwrap();
        remove_all_but(&dir, LOG_NAME).unwrap();
        let left: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![OsStr::new(LOG_NAME)]);
        // A leftover of ours is replaced by a fresh, empty directory.
        create_private_dir(&dir, uid).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
        // A symlink in its place is refused, not followed.
        fs::remove_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&base, &dir).unwrap();
        let error = create_private_dir(&dir, uid).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AlreadyExists);
        fs::remove_dir_all(&base).unwrap();
    }
}
