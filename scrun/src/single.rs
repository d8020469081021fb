//! Single-user mode: when no scored answers at the default socket, scrun
//! connects to the user's private scored, and starts it first if none
//! runs, as SCore's single-user mode does.
//!
//! There is one private daemon per user, and every scrun of that user
//! uses it, so that concurrent jobs share the machine's hosts and are gang
//! scheduled together. It lives beside the user's default socket:
//! `BASE/scored.sock`, and `BASE/scored-private/` (mode 0700) for its
//! state directory and its log, where BASE is `$XDG_RUNTIME_DIR` when that
//! variable names an absolute directory, else `/tmp/scored-UID` (made
//! mode 0700 when missing).
//!
//! BASE is the user's alone or it is refused, with what is wrong with it,
//! as tmux refuses `/tmp/tmux-UID`: opened without following a link, it
//! must belong to the user and be writable by no one else, and every
//! directory above it must belong to root or the user and be writable by
//! no one else unless sticky. Everything after is done through its
//! handle (`mkdirat`, `openat` without following links, `fchmod`, the
//! lock and the log on the private directory's handle), so that another
//! user who could rename entries there (root's scrun in a directory that
//! user controls, before this check) cannot swap one for a link and make
//! scrun change or create something elsewhere. For a user other than root that socket is the
//! default socket itself; root's default socket is the shared daemon's,
//! so root's private daemon is found only after that one did not answer.
//! `scored --single-user` exits by itself once it has had no job and no
//! client for its idle time, so nothing waits for it here.
//!
//! Two scruns that find no daemon at once must not start two: the start is
//! serialized by an exclusive lock (flock) on the private directory. The
//! one that takes it connects again (another may have started the daemon
//! meanwhile) and starts one only if that fails. A start that fails kills
//! what it started, removes the private directory, and says what failed in
//! the daemon's own words (the last line of its log). Since a waiter may
//! hold the lock of a directory that was removed meanwhile, the lock
//! counts only if the path still names the locked directory.
//!
//! Waiting never sleeps blindly: the lock and the socket are retried every
//! 10 ms through a `poll` on the signalfd, so that an interrupt is noticed
//! at once.
#![forbid(unsafe_code)]

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::sys::stat::Mode;
use scored_proto::client::{means_no_daemon, Connection};
use scored_proto::exitcode;

use crate::error::{describe_io, Fatal};
use crate::session::say;
use crate::signals::{is_terminating, Signals};

/// How long the private daemon may take to open its socket.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a scrun waits for another one that is starting the daemon.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);
/// How often scrun tries the lock or the socket meanwhile.
const RETRY_INTERVAL: Duration = Duration::from_millis(10);
/// The daemon's log, in the private directory.
const LOG_NAME: &str = "scored.log";
/// The daemon's state directory, in the private directory.
const STATE_NAME: &str = "state";
/// The private directory's name, beside the socket.
const DIR_NAME: &str = "scored-private";

/// Where a user's private daemon lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivatePaths {
    /// The directory of the socket and the private directory.
    pub base: PathBuf,
    /// The daemon's socket.
    pub socket: PathBuf,
    /// The private directory: the lock, the log and the state directory.
    pub dir: PathBuf,
}

impl PrivatePaths {
    /// The paths for user `uid`: under `$XDG_RUNTIME_DIR` when that
    /// variable names an absolute directory, else under `/tmp/scored-UID`.
    pub fn new(runtime_dir: Option<&OsStr>, uid: u32) -> PrivatePaths {
        let base = match runtime_dir {
            Some(dir) if Path::new(dir).is_absolute() => PathBuf::from(dir),
            _ => PathBuf::from(format!("/tmp/scored-{uid}")),
        };
        PrivatePaths {
            socket: base.join("scored.sock"),
            dir: base.join(DIR_NAME),
            base,
        }
    }

    fn log(&self) -> PathBuf {
        self.dir.join(LOG_NAME)
    }
}

/// Connects to the user's private daemon, starting it when none runs.
/// `default_socket` is the socket where no daemon answered, for messages;
/// with `verbose`, a start is announced on stderr.
pub fn connect(
    paths: &PrivatePaths,
    default_socket: &Path,
    signals: &Signals,
    verbose: bool,
) -> Result<Connection, Fatal> {
    let unreachable = |what: String, error: Option<io::Error>| {
        let message = format!(
            "no scored at {}, and cannot start a private one: {what}",
            default_socket.display()
        );
        match error {
            Some(error) => Fatal::with_source(exitcode::UNREACHABLE, message, error),
            None => Fatal::new(exitcode::UNREACHABLE, message),
        }
    };
    if paths.socket != default_socket {
        match Connection::connect(&paths.socket) {
            Ok(connection) => return Ok(connection),
            Err(error) if means_no_daemon(&error) => {}
            Err(error) => {
                return Err(Fatal::with_source(
                    exitcode::UNREACHABLE,
                    format!(
                        "cannot reach the private scored at {}",
                        paths.socket.display()
                    ),
                    error,
                ))
            }
        }
    }
    let uid = nix::unistd::geteuid().as_raw();
    let base = open_base(&paths.base, uid).map_err(|problem| match problem {
        BaseProblem::Refused(what) => unreachable(what, None),
        BaseProblem::Io(what, error) => unreachable(what, Some(error)),
    })?;
    // From here on the paths name what the handle holds (its parent's
    // links resolved), for the daemon and the messages.
    let paths = &PrivatePaths {
        socket: base.path.join("scored.sock"),
        dir: base.path.join(DIR_NAME),
        base: base.path.clone(),
    };
    let lock =
        lock_private_dir(&base, &paths.dir, uid, signals).map_err(|failure| match failure {
            LockFailure::Io(what, error) => unreachable(what, Some(error)),
            LockFailure::TimedOut => unreachable(
                format!(
                    "another scrun has been starting it for {}s (the lock of {} is held)",
                    LOCK_TIMEOUT.as_secs(),
                    paths.dir.display()
                ),
                None,
            ),
            LockFailure::Interrupted(signal) => Fatal::interrupted(
                signal,
                "interrupted while waiting for the private scored to start",
            ),
        })?;
    // Another scrun may have started it while this one waited for the lock.
    match Connection::connect(&paths.socket) {
        Ok(connection) => return Ok(connection),
        Err(error) if means_no_daemon(&error) => {}
        Err(error) => {
            return Err(Fatal::with_source(
                exitcode::UNREACHABLE,
                format!(
                    "cannot reach the private scored at {}",
                    paths.socket.display()
                ),
                error,
            ))
        }
    }
    let started = start(paths, &*lock, signals, verbose);
    if started.is_err() {
        // Nothing of a failed start stays behind; the lock is still ours,
        // and whoever waits for it sees the directory gone and starts over.
        remove_private_dir(&paths.dir);
    }
    drop(lock);
    started.map_err(|failure| failure.into_fatal(paths, default_socket))
}

/// Why the private daemon could not be started.
enum StartFailure {
    /// A file or the program: what, and the error.
    Io(String, io::Error),
    /// It exited before listening.
    Exited(ExitStatus, Option<String>),
    /// It did not listen in time (and was killed).
    TimedOut(Option<String>),
    /// Connecting to it failed otherwise.
    Connect(io::Error),
    /// scrun was interrupted meanwhile.
    Interrupted(Signal),
}

impl StartFailure {
    fn into_fatal(self, paths: &PrivatePaths, default_socket: &Path) -> Fatal {
        let prefix = format!(
            "no scored at {}, and cannot start a private one",
            default_socket.display()
        );
        let said = |last: Option<String>| last.map(|line| format!(": {line}")).unwrap_or_default();
        match self {
            StartFailure::Io(what, error) => {
                Fatal::with_source(exitcode::UNREACHABLE, format!("{prefix}: {what}"), error)
            }
            StartFailure::Exited(status, last) => Fatal::new(
                exitcode::UNREACHABLE,
                format!(
                    "{prefix}: it exited before listening at {} ({}){}",
                    paths.socket.display(),
                    describe_status(status),
                    said(last)
                ),
            ),
            StartFailure::TimedOut(last) => Fatal::new(
                exitcode::UNREACHABLE,
                format!(
                    "{prefix}: it did not listen at {} within {}s and was killed{}",
                    paths.socket.display(),
                    READY_TIMEOUT.as_secs(),
                    said(last)
                ),
            ),
            StartFailure::Connect(error) => Fatal::with_source(
                exitcode::UNREACHABLE,
                format!("{prefix}: cannot connect to {}", paths.socket.display()),
                error,
            ),
            StartFailure::Interrupted(signal) => {
                Fatal::interrupted(signal, "interrupted while the private scored was starting")
            }
        }
    }
}

/// Starts the daemon (the lock is held) and connects to it.
fn start(
    paths: &PrivatePaths,
    dir: &impl AsFd,
    signals: &Signals,
    verbose: bool,
) -> Result<Connection, StartFailure> {
    let state = paths.dir.join(STATE_NAME);
    let log_path = paths.log();
    let log = open_log(dir).map_err(|error| {
        StartFailure::Io(format!("cannot open the log {}", log_path.display()), error)
    })?;
    let log_again = log.try_clone().map_err(|error| {
        StartFailure::Io(format!("cannot open the log {}", log_path.display()), error)
    })?;
    let program = scored_program();
    // Its own process group, so that the terminal's Ctrl-C and Ctrl-Z
    // reach scrun only; its working directory `/`, so that it keeps no
    // directory of the user's busy; no descriptor of scrun's but the log
    // (scrun marked the ones it inherited close-on-exec).
    let mut child = Command::new(&program)
        .arg("--single-user")
        .arg("--socket")
        .arg(&paths.socket)
        .arg("--state-dir")
        .arg(&state)
        .stdin(Stdio::null())
        .stdout(log_again)
        .stderr(log)
        .current_dir("/")
        .process_group(0)
        .spawn()
        .map_err(|error| StartFailure::Io(format!("cannot run {}", program.display()), error))?;
    if verbose {
        say(&format!(
            "no scored running; started a private one at {} (pid {})",
            paths.socket.display(),
            child.id()
        ));
    }
    match wait_ready(&mut child, &paths.socket, signals) {
        Ok(connection) => Ok(connection),
        Err(failure) => {
            // Our own child, not yet reaped: its pid is still its own.
            let _ = child.kill();
            let _ = child.wait();
            let last = last_words(&log_path);
            Err(match failure {
                Startup::Exited(status) => StartFailure::Exited(status, last),
                Startup::TimedOut => StartFailure::TimedOut(last),
                Startup::Connect(error) => StartFailure::Connect(error),
                Startup::Interrupted(signal) => StartFailure::Interrupted(signal),
            })
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

/// Connects to the private daemon's socket, retrying until it listens.
fn wait_ready(child: &mut Child, socket: &Path, signals: &Signals) -> Result<Connection, Startup> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match Connection::connect(socket) {
            Ok(connection) => return Ok(connection),
            Err(error) if means_no_daemon(&error) => {}
            Err(error) => return Err(Startup::Connect(error)),
        }
        match child.try_wait() {
            Ok(Some(status)) => return Err(Startup::Exited(status)),
            Ok(None) => {}
            Err(error) => return Err(Startup::Connect(error)),
        }
        if Instant::now() >= deadline {
            return Err(Startup::TimedOut);
        }
        if let Some(signal) = wait_signals(signals, RETRY_INTERVAL) {
            return Err(Startup::Interrupted(signal));
        }
    }
}

/// Why the private directory could not be locked.
enum LockFailure {
    Io(String, io::Error),
    TimedOut,
    Interrupted(Signal),
}

/// Creates (if need be) and locks the private directory, retrying while
/// another scrun holds it, and starting over if it was removed meanwhile.
fn lock_private_dir(
    base: &Base,
    dir: &Path,
    uid: u32,
    signals: &Signals,
) -> Result<Flock<OwnedFd>, LockFailure> {
    let deadline = Instant::now() + LOCK_TIMEOUT;
    let cannot = |what: &str, error: io::Error| {
        LockFailure::Io(
            format!("cannot {what} the directory {}", dir.display()),
            error,
        )
    };
    loop {
        let fd = private_dir_at(&base.fd, uid).map_err(|error| cannot("create", error))?;
        match Flock::lock(fd, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => {
                if names_locked_dir(&base.fd, &*lock) {
                    return Ok(lock);
                }
                // Removed by a start that failed: take the new one.
                continue;
            }
            Err((_, Errno::EWOULDBLOCK)) => {}
            Err((_, errno)) => return Err(cannot("lock", io::Error::from(errno))),
        }
        if Instant::now() >= deadline {
            return Err(LockFailure::TimedOut);
        }
        if let Some(signal) = wait_signals(signals, RETRY_INTERVAL) {
            return Err(LockFailure::Interrupted(signal));
        }
    }
}

/// Whether the private directory's name in the base still names the
/// directory `fd` has open.
fn names_locked_dir(base: &impl AsFd, fd: &impl AsFd) -> bool {
    let named = nix::sys::stat::fstatat(
        base.as_fd(),
        DIR_NAME,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    );
    match (named, nix::sys::stat::fstat(fd)) {
        (Ok(path), Ok(open)) => path.st_dev == open.st_dev && path.st_ino == open.st_ino,
        _ => false,
    }
}

/// The base directory of the private daemon, opened and checked.
struct Base {
    /// The directory; every later step is relative to it.
    fd: OwnedFd,
    /// Its path, with the links of its parent resolved.
    path: PathBuf,
}

/// Why the base directory is refused.
enum BaseProblem {
    /// It is not the user's alone (the whole message).
    Refused(String),
    /// A system call failed: what, and the error.
    Io(String, io::Error),
}

/// Opens the private daemon's base directory, as tmux checks
/// `/tmp/tmux-UID`: made (mode 0700) when missing, then opened without
/// following a link and taken only if it belongs to `uid` and no other
/// user may write it; and every directory above it must belong to root
/// or to `uid` and be writable by no other user (unless sticky, as
/// `/tmp`), so that no one else can swap it for another. Nothing is
/// followed or changed through a path another user controls.
fn open_base(base: &Path, uid: u32) -> Result<Base, BaseProblem> {
    let refused = |why: String| {
        BaseProblem::Refused(format!("refusing the directory {}: {why}", base.display()))
    };
    let (Some(parent), Some(name)) = (base.parent(), base.file_name()) else {
        return Err(refused("it is not a directory of its own".into()));
    };
    let parent = fs::canonicalize(parent)
        .map_err(|error| BaseProblem::Io(format!("cannot resolve {}", parent.display()), error))?;
    for dir in parent.ancestors() {
        let metadata = fs::symlink_metadata(dir)
            .map_err(|error| BaseProblem::Io(format!("cannot inspect {}", dir.display()), error))?;
        if metadata.uid() != 0 && metadata.uid() != uid {
            return Err(refused(format!(
                "{} belongs to {}, not to you (uid {uid}) or root",
                dir.display(),
                owner_name(metadata.uid())
            )));
        }
        let mode = metadata.mode();
        if mode & 0o022 != 0 && mode & libc::S_ISVTX == 0 {
            return Err(refused(format!(
                "{} may be written by other users (mode {:04o}) and is not sticky",
                dir.display(),
                mode & 0o7777
            )));
        }
    }
    let parent_fd = nix::fcntl::open(
        &parent,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| BaseProblem::Io(format!("cannot open {}", parent.display()), errno.into()))?;
    match nix::sys::stat::mkdirat(&parent_fd, name, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(errno) => {
            return Err(BaseProblem::Io(
                format!("cannot create the directory {}", base.display()),
                errno.into(),
            ))
        }
    }
    let fd = nix::fcntl::openat(&parent_fd, name, PRIVATE_DIR_FLAGS, Mode::empty()).map_err(
        |errno| match errno {
            // With O_DIRECTORY a link fails as "not a directory": look again.
            Errno::ELOOP | Errno::ENOTDIR => {
                let link = nix::sys::stat::fstatat(
                    &parent_fd,
                    name,
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .is_ok_and(|stat| stat.st_mode & libc::S_IFMT == libc::S_IFLNK);
                refused(if link {
                    "it is a symbolic link".into()
                } else {
                    "it is not a directory".into()
                })
            }
            errno => BaseProblem::Io(format!("cannot open {}", base.display()), errno.into()),
        },
    )?;
    let stat = nix::sys::stat::fstat(&fd).map_err(|errno| {
        BaseProblem::Io(format!("cannot inspect {}", base.display()), errno.into())
    })?;
    if stat.st_uid != uid {
        return Err(refused(format!(
            "it belongs to {}, not to you (uid {uid})",
            owner_name(stat.st_uid)
        )));
    }
    if stat.st_mode & 0o022 != 0 {
        return Err(refused(format!(
            "other users may write it (mode {:04o})",
            stat.st_mode & 0o7777
        )));
    }
    Ok(Base {
        fd,
        path: parent.join(name),
    })
}

/// `uid N (NAME)`, or `uid N` for a uid without a name.
fn owner_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => format!("uid {uid} ({})", user.name),
        _ => format!("uid {uid}"),
    }
}

/// Opening a directory: never through a link.
const PRIVATE_DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Makes the private directory in the base `base` a directory of the
/// user's alone, through handles: creates it with mode 0700, or takes an
/// existing one only if it is a real directory (not a link) owned by
/// `uid`, and sets its mode to 0700 on the handle either way, whatever the
/// umask. Returns it open.
fn private_dir_at(base: &impl AsFd, uid: u32) -> io::Result<OwnedFd> {
    match nix::sys::stat::mkdirat(base.as_fd(), DIR_NAME, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(errno) => return Err(errno.into()),
    }
    let fd = nix::fcntl::openat(base.as_fd(), DIR_NAME, PRIVATE_DIR_FLAGS, Mode::empty()).map_err(
        |errno| match errno {
            Errno::ELOOP | Errno::ENOTDIR => io::Error::new(
                io::ErrorKind::AlreadyExists,
                "it exists and is not a directory",
            ),
            errno => errno.into(),
        },
    )?;
    let owner = nix::sys::stat::fstat(&fd)?.st_uid;
    if owner != uid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("it belongs to uid {owner}, not to uid {uid}"),
        ));
    }
    nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o700))?;
    Ok(fd)
}

/// Removes the private directory and what a failed start left in it.
fn remove_private_dir(dir: &Path) {
    if let Err(error) = fs::remove_dir_all(dir) {
        if error.kind() != io::ErrorKind::NotFound {
            say(&format!(
                "cannot remove the private directory {}: {}",
                dir.display(),
                describe_io(&error)
            ));
        }
    }
}

/// Opens the daemon's log afresh in the private directory `dir`,
/// readable by the user only.
fn open_log(dir: &impl AsFd) -> io::Result<File> {
    let fd = nix::fcntl::openat(
        dir.as_fd(),
        LOG_NAME,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o600))?;
    Ok(File::from(fd))
}

/// What a daemon that failed said last: the line with scored's own
/// message (`scored: ...`), else the last line of its log.
fn last_words(log: &Path) -> Option<String> {
    let text = fs::read_to_string(log).ok()?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    lines
        .iter()
        .rev()
        .find(|line| line.starts_with("scored: "))
        .or(lines.last())
        .map(|line| line.to_string())
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

/// Waits up to `timeout` for signals and returns the first that asks
/// scrun to give up; a SIGTSTP stops scrun meanwhile (no job exists yet,
/// so only scrun has to stop), and the others are dropped.
fn wait_signals(signals: &Signals, timeout: Duration) -> Option<Signal> {
    let millis = timeout.as_millis().max(1);
    let timeout = PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
    let received = match poll(&mut fds, timeout) {
        Ok(0) | Err(Errno::EINTR) => Vec::new(),
        Ok(_) => signals.drain().unwrap_or_default(),
        // A poll that fails on our own signalfd is a bug; the callers'
        // deadlines still bound the wait.
        Err(_) => Vec::new(),
    };
    for signal in received {
        if is_terminating(signal) {
            return Some(signal);
        }
        if signal == Signal::SIGTSTP {
            let _ = crate::signals::stop_self();
        }
    }
    None
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_private_daemon_lives_in_the_runtime_directory() {
        let check = |runtime: Option<&str>, base: &str| {
            let paths = PrivatePaths::new(runtime.map(OsStr::new), 1000);
            assert_eq!(paths.base, PathBuf::from(base));
            assert_eq!(paths.socket, PathBuf::from(base).join("scored.sock"));
            assert_eq!(paths.dir, PathBuf::from(base).join("scored-private"));
        };
        check(Some("/run/user/1000"), "/run/user/1000");
        check(None, "/tmp/scored-1000");
        check(Some(""), "/tmp/scored-1000");
        check(Some("relative/dir"), "/tmp/scored-1000");
        // For a user other than root, that socket is the default socket.
        assert_eq!(
            PrivatePaths::new(Some(OsStr::new("/run/user/1000")), 1000).socket,
            scored_proto::paths::default_socket(1000, Some("/run/user/1000"))
        );
        assert_eq!(
            PrivatePaths::new(None, 1000).socket,
            scored_proto::paths::default_socket(1000, None)
        );
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
    fn the_private_dir_is_private_whatever_the_umask_and_never_a_link() {
        let base = std::env::temp_dir().join(format!("scrun-single-test.{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir(&base).unwrap();
        let base_fd = File::open(&base).unwrap();
        let dir = base.join(DIR_NAME);
        let uid = nix::unistd::geteuid().as_raw();
        let old = nix::sys::stat::umask(Mode::from_bits_truncate(0o777));
        let created = private_dir_at(&base_fd, uid);
        nix::sys::stat::umask(old);
        created.unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        // An existing one of ours is taken, and made private again.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let fd = private_dir_at(&base_fd, uid).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert!(names_locked_dir(&base_fd, &fd));
        // A symlink in its place is refused, not followed.
        fs::remove_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&base, &dir).unwrap();
        let error = private_dir_at(&base_fd, uid).unwrap_err();
        assert_eq!(error.to_string(), "it exists and is not a directory");
        assert!(!names_locked_dir(&base_fd, &fd));
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_base_that_is_not_the_users_alone_is_refused_saying_why() {
        let top = std::env::temp_dir().join(format!("scrun-base-test.{}", std::process::id()));
        let _ = fs::remove_dir_all(&top);
        fs::create_dir(&top).unwrap();
        fs::set_permissions(&top, fs::Permissions::from_mode(0o755)).unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        let refusal = |base: &Path| match open_base(base, uid) {
            Err(BaseProblem::Refused(why)) => why,
            Err(BaseProblem::Io(what, error)) => panic!("{what}: {error}"),
            Ok(_) => panic!("{} was taken", base.display()),
        };
        // Missing: made, mode 0700.
        let made = top.join("made");
        let base = open_base(&made, uid).unwrap_or_else(|_| panic!("not made"));
        assert_eq!(base.path, fs::canonicalize(&made).unwrap());
        assert_eq!(fs::metadata(&made).unwrap().mode() & 0o777, 0o700);
        // Writable by others.
        let open = top.join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(
            refusal(&open),
            format!(
                "refusing the directory {}: other users may write it (mode 0777)",
                open.display()
            )
        );
        // A link, even to a directory of ours.
        let link = top.join("link");
        std::os::unix::fs::symlink(&made, &link).unwrap();
        assert_eq!(
            refusal(&link),
            format!(
                "refusing the directory {}: it is a symbolic link",
                link.display()
            )
        );
        // Below a directory other users may write.
        let below = open.join("below");
        assert!(refusal(&below)
            .ends_with("may be written by other users (mode 0777) and is not sticky"));
        fs::remove_dir_all(&top).unwrap();
    }

    #[test]
    fn a_failed_daemon_is_named_by_its_own_last_words() {
        let path = std::env::temp_dir().join(format!("scrun-last-words.{}", std::process::id()));
        fs::write(
            &path,
            "2024 INFO scored: starting\nscored: state directory: /x: permission denied\n\n",
        )
        .unwrap();
        assert_eq!(
            last_words(&path).as_deref(),
            Some("scored: state directory: /x: permission denied")
        );
        fs::write(&path, "one\ntwo\n").unwrap();
        assert_eq!(last_words(&path).as_deref(), Some("two"));
        fs::write(&path, "").unwrap();
        assert_eq!(last_words(&path), None);
        fs::remove_file(&path).unwrap();
    }
}
