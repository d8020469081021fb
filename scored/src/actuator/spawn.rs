//! A keeper's spawn of a rank: one clone, the pre-exec steps on data
//! prepared before it, and an `exec`, without ever waiting for the child.
//!
//! `std::process::Command::spawn` blocks until the child has exec'd (it
//! reads a close-on-exec pipe to learn whether exec failed), which would
//! serialize a launch with every child's whole pre-exec work, and let a
//! user who stops their own child between its `setuid` and its `exec` (a
//! loop of `kill(-1, SIGSTOP)` is enough) stall the keeper. Here the
//! child, which shares the keeper's memory until its exec, writes a
//! failure into its [`ExecWord`] before it exits: the step that failed and
//! its errno. The spawner thread, which the clone holds until the exec or
//! the exit, marks the exec once it is free again and wakes the loop
//! ([`freed_fd`]), which reads the word then ([`ExecWord::report`]), or
//! when the child ended, never waiting for it.
//!
//! The child shares the keeper's memory until its exec, created by a
//! thread of its own that it alone suspends (`spawner`): no copy of the
//! keeper's memory is made and thrown away for every rank.
//!
//! Architecture invariant: the child allocates nothing, frees nothing,
//! takes no lock, does not log, and calls no C library function that keeps
//! state across threads. Everything it touches (argument and environment
//! arrays, the program's candidate paths, descriptors, limits, its word)
//! is in [`ChildSetup`] and `spawner::Exec`, built before the clone and
//! owned by the spawner thread until the exec, and it makes only system
//! calls on it, and one atomic store.

use std::ffi::CStr;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::unistd::Pid;

use super::sys;

mod spawner;

pub use spawner::{await_free, drain, freed_fd, ready};

/// In [`ChildSetup::stdio`], a standard descriptor that the job gets
/// closed (its client had it closed).
pub const CLOSED: RawFd = -1;

/// The steps between fork and exec, in the order the child takes them;
/// a failure report names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Step {
    /// Moving the job's stdio descriptors to 0, 1 and 2, and the client's
    /// other descriptors to their numbers.
    Stdio = 1,
    /// `setsid`.
    Session,
    /// Pinning the host's CPUs.
    Affinity,
    /// Joining the job's cgroup.
    Cgroup,
    /// `setgroups`, `setgid`, `setuid`.
    Credentials,
    /// A session keyring of its own, and the check that no privilege
    /// survived the change of user.
    Privileges,
    /// Taking the terminal as controlling terminal (`-pty`).
    Terminal,
    /// `chdir` to the job's working directory.
    Chdir,
    /// Marking the daemon's other descriptors close-on-exec.
    Descriptors,
    /// The parent-death signal, and the check that the daemon still lives.
    ParentDeath,
    /// The signal dispositions and mask of a shell's child.
    Signals,
    /// The caller's resource limits.
    Limits,
    /// Normal scheduling priority, then the caller's nice value and I/O
    /// priority.
    Priority,
    /// `execvp` itself.
    Exec,
    /// Opening the stdout file (`scrun -output=`).
    Output,
    /// Opening the stderr file (`scrun -error=`).
    Error,
}

impl Step {
    /// The step of a report's number; an unknown one is the exec itself.
    pub fn from_number(value: u32) -> Step {
        Step::from_u32(value).unwrap_or(Step::Exec)
    }

    fn from_u32(value: u32) -> Option<Step> {
        const ALL: [Step; 16] = [
            Step::Stdio,
            Step::Session,
            Step::Affinity,
            Step::Cgroup,
            Step::Credentials,
            Step::Privileges,
            Step::Terminal,
            Step::Chdir,
            Step::Descriptors,
            Step::ParentDeath,
            Step::Signals,
            Step::Limits,
            Step::Priority,
            Step::Exec,
            Step::Output,
            Step::Error,
        ];
        ALL.into_iter().find(|step| *step as u32 == value)
    }

    /// What the step does, for logs.
    pub fn describe(self) -> &'static str {
        match self {
            Step::Stdio => "setting up stdin, stdout, stderr and the passed descriptors",
            Step::Session => "creating the rank's session",
            Step::Affinity => "pinning the host's CPUs",
            Step::Cgroup => "joining the job's cgroup",
            Step::Credentials => "changing to the user's credentials",
            Step::Privileges => "shedding root's keyring and privileges",
            Step::Terminal => "taking the controlling terminal",
            Step::Chdir => "changing to the working directory",
            Step::Descriptors => "closing the daemon's descriptors",
            Step::ParentDeath => "setting the parent-death signal",
            Step::Signals => "resetting signal dispositions",
            Step::Limits => "setting the resource limits",
            Step::Priority => "dropping the daemon's priority",
            Step::Exec => "executing the program",
            Step::Output => "opening the output file",
            Step::Error => "opening the error file",
        }
    }
}

/// What a child's [`ExecWord`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// Nothing yet: the child is still between fork and exec.
    Pending,
    /// The clone returned with no failure written: the exec succeeded (or
    /// the child was killed before it, which its end then tells).
    Execd,
    /// A step failed with this errno (the child then exits).
    Failed(Step, i32),
}

/// A child's word on its exec, in memory the child shares until then: 0
/// while it is pending, a failure as the child wrote it before its exit,
/// or [`ExecWord::EXECD`] as the spawner marks it once the clone returned
/// with no failure written.
#[derive(Debug, Default)]
pub struct ExecWord(AtomicU64);

impl ExecWord {
    const EXECD: u64 = 1 << 63;
    const FAILED: u64 = 1 << 62;

    /// What the word says now.
    pub fn report(&self) -> Report {
        match self.0.load(Ordering::Acquire) {
            0 => Report::Pending,
            Self::EXECD => Report::Execd,
            word => Report::Failed(
                Step::from_u32((word >> 32) as u32 & 0xff).unwrap_or(Step::Exec),
                word as u32 as i32,
            ),
        }
    }

    /// The child's failure at `step` with `errno`: one atomic store, safe
    /// between clone and exec.
    fn fail(&self, step: Step, errno: i32) {
        let word = Self::FAILED | (u64::from(step as u32) << 32) | u64::from(errno as u32);
        self.0.store(word, Ordering::Release);
    }

    /// The spawner's mark once the clone returned: the exec succeeded
    /// unless the child wrote a failure.
    fn mark_execd(&self) {
        let _ = self
            .0
            .compare_exchange(0, Self::EXECD, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// A file a rank writes its stdout or stderr to instead of what it was
/// given (`scrun -output=`, `-error=`).
#[derive(Debug, Clone, Copy)]
pub struct OutputFile<'a> {
    /// The path, relative to the working directory.
    pub path: &'a CStr,
    /// Empty it: the job's first process to name it does.
    pub truncate: bool,
}

/// Everything the child needs, prepared before the fork.
pub struct ChildSetup<'a> {
    /// The program as given (searched in the job's `PATH` by `execvp`).
    pub program: &'a CStr,
    /// The arguments, the program's name first.
    pub args: Vec<&'a CStr>,
    /// The environment, `NAME=value` each.
    pub env: Vec<&'a CStr>,
    /// stdin, stdout, stderr: descriptors open in the daemon, borrowed
    /// across the fork (each numbered 3 or above, see
    /// [`ChildSetup::stdio_fd`]), or [`CLOSED`].
    pub stdio: [RawFd; 3],
    /// The client's other descriptors: (the number the job gets it at,
    /// increasing and above 2; the descriptor, open in the daemon).
    pub inherited: &'a [(RawFd, RawFd)],
    /// The host's CPUs.
    pub cpus: nix::sched::CpuSet,
    /// The job's `cgroup.procs`, when it has a cgroup.
    pub cgroup_procs: Option<&'a CStr>,
    /// The `cgroup.procs` of the job's cgroup in the v1 pids hierarchy.
    pub pids_procs: Option<&'a CStr>,
    /// uid, gid and groups to become, when the job runs as another user.
    pub credentials: Option<(u32, u32, &'a [libc::gid_t])>,
    /// stdin is a terminal the rank takes as its controlling terminal.
    pub takes_terminal: bool,
    /// The working directory.
    pub cwd: &'a CStr,
    /// The daemon's pid, to check that it still lives once the
    /// parent-death signal is set.
    pub daemon_pid: i32,
    /// The caller's umask, when known.
    pub umask: Option<u32>,
    /// The caller's nice value, when known.
    pub nice: Option<i32>,
    /// The caller's I/O priority, when known.
    pub ioprio: Option<u32>,
    /// The signals the job ignores (bit `n - 1` for signal `n`).
    pub ignored: u64,
    /// The signals whose disposition differs from the daemon's.
    pub signals_to_change: u64,
    /// The caller's limits, the descriptor limit last.
    pub rlimits: &'a [(Resource, u64, u64)],
    /// The file of stdout and the file of stderr, opened as the user
    /// after the change of directory and umask; a stderr file with the
    /// path of stdout's shares its descriptor.
    pub output: [Option<OutputFile<'a>>; 2],
}

impl ChildSetup<'_> {
    /// A descriptor for the child's stdio that no `dup2` onto 0, 1 or 2
    /// can clobber before it is used: the daemon's own 0, 1 and 2 are
    /// always open, so what it holds for a job is numbered 3 or above, but
    /// a descriptor below 3 is duplicated above them anyway.
    pub fn stdio_fd(fd: RawFd) -> io::Result<Option<OwnedFd>> {
        if fd >= 3 || fd == CLOSED {
            return Ok(None);
        }
        let copy = nix::fcntl::fcntl(
            // SAFETY: the caller passes a descriptor it holds open for the
            // duration of this call.
            unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
            nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3),
        )?;
        // SAFETY: the kernel just returned this descriptor and nothing else owns it.
        Ok(Some(unsafe { OwnedFd::from_raw_fd(copy) }))
    }
}

/// The lowest number above every one of `targets` (and 2).
fn fd_floor(targets: impl Iterator<Item = RawFd>) -> RawFd {
    targets.max().map_or(3, |max| max.saturating_add(1)).max(3)
}

/// Creates a child that runs the pre-exec steps of `setup` and execs its
/// program, through the spawner thread (see [`spawner`]); returns its pid
/// and its [`ExecWord`] as soon as the child exists. Never waits for its
/// exec.
pub fn spawn(setup: &ChildSetup) -> io::Result<(i32, Arc<ExecWord>)> {
    let word = Arc::new(ExecWord::default());
    let pid = spawner::spawn(setup, Arc::clone(&word))?;
    Ok((pid, word))
}

/// The child: the steps, then exec; on a failure, its word and `_exit`.
///
/// # Safety
///
/// Only in a child created by the spawner thread, before its exec, with
/// `exec` prepared for it.
unsafe fn child(setup: &ChildSetup, exec: &mut spawner::Exec, word: &ExecWord) -> ! {
    let (step, errno) = match steps(setup) {
        // SAFETY: the steps are done; the exec replaces the child.
        Ok(()) => (Step::Exec, Some(unsafe { exec.exec() })),
        Err((step, error)) => (step, error.raw_os_error()),
    };
    if step == Step::Exec && setup.output[1].is_some() {
        say_exec_failure(setup.program, errno.unwrap_or(libc::EIO));
    }
    word.fail(step, errno.unwrap_or(libc::EIO));
    // SAFETY: `_exit` ends the child without running the daemon's exit
    // handlers or flushing its buffers.
    unsafe { libc::_exit(127) }
}

/// Says on the job's standard error, a file of its output patterns, that
/// `program` could not be run and why, as a shell would say it: a batch
/// job's user finds it in the file rather than an empty one. The daemon
/// says it in full in the job's reason. Async-signal-safe: writes of bytes
/// at hand, no allocation.
fn say_exec_failure(program: &CStr, errno: i32) {
    let reason: &[u8] = match errno {
        libc::ENOENT => b"No such file or directory",
        libc::EACCES => b"Permission denied",
        libc::ENOEXEC => b"Exec format error",
        libc::ENOTDIR => b"Not a directory",
        libc::ELOOP => b"Too many levels of symbolic links",
        libc::ETXTBSY => b"Text file busy",
        libc::E2BIG => b"Argument list too long",
        libc::ENOMEM => b"Cannot allocate memory",
        libc::EISDIR => b"Is a directory",
        _ => b"cannot be executed",
    };
    let parts: [&[u8]; 5] = [
        b"scored: cannot run '",
        program.to_bytes(),
        b"': ",
        reason,
        b"\n",
    ];
    for part in parts {
        // SAFETY: `part` is valid for its length; a failed write to the
        // job's stderr loses only this line.
        unsafe { libc::write(libc::STDERR_FILENO, part.as_ptr().cast(), part.len()) };
    }
}

fn at<T>(step: Step, result: io::Result<T>) -> Result<T, (Step, io::Error)> {
    result.map_err(|error| (step, error))
}

/// Puts the job's descriptors in place: stdin, stdout and stderr (closed
/// ones closed), and the passed ones at their numbers. A copy of each
/// passed descriptor goes above every number the job gets first (the
/// descriptor limit raised for them as far as the child may), so that no
/// `dup2` clobbers what another still needs. Only system calls, on a
/// fixed array: no allocation.
fn install_descriptors(setup: &ChildSetup) -> Result<(), (Step, io::Error)> {
    // The standard ones first, while their sources (numbered 3 or above,
    // see `ChildSetup::stdio_fd`) are all still there: a passed one may
    // take the number of one of them.
    for (target, &fd) in setup.stdio.iter().enumerate() {
        if fd != CLOSED {
            at(Step::Stdio, sys::install_stdio(fd, target as RawFd))?;
        }
    }
    let passed = &setup.inherited[..setup.inherited.len().min(MAX_PASSED)];
    if !passed.is_empty() {
        let floor = fd_floor(passed.iter().map(|(target, _)| *target));
        sys::make_room_for_descriptors(floor.saturating_add(passed.len() as RawFd));
        let mut copies = [CLOSED; MAX_PASSED];
        for (copy, &(_, source)) in copies.iter_mut().zip(passed) {
            *copy = at(Step::Stdio, sys::dup_above(source, floor))?;
        }
        for (&copy, &(target, _)) in copies.iter().zip(passed) {
            at(Step::Stdio, sys::install_stdio(copy, target))?;
        }
    }
    for (target, &fd) in setup.stdio.iter().enumerate() {
        if fd == CLOSED {
            at(Step::Stdio, sys::close(target as RawFd))?;
        }
    }
    Ok(())
}

/// The most descriptors passed to one rank: the protocol's bound, and
/// the rank's PMI descriptor.
const MAX_PASSED: usize = scored_proto::proto::MAX_INHERITED_FDS + 1;

/// The pre-exec steps, in order. Only system calls.
fn steps(setup: &ChildSetup) -> Result<(), (Step, io::Error)> {
    install_descriptors(setup)?;
    // Every other descriptor of the daemon is closed now, before the
    // change of user, so that no copy outlives this step: a rank that its
    // user stops before its exec would otherwise hold other users'
    // connections and pipes open (a pipeline would not see its end) and
    // the pidfds the keeper's epoll set watches. Only the passed
    // descriptors stay (-1: no descriptor above them). Old kernels lack
    // close_range; there, the descriptors go at the exec, as before.
    match sys::close_from_3_except(setup.inherited, -1, false) {
        Ok(()) => {}
        Err(error) if matches!(error.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) => {}
        Err(error) => return Err((Step::Descriptors, error)),
    }
    // A session of its own: the job cannot reach the terminal scored was
    // started from, no process of another job can join its process group
    // (groups are joined only within a session), and as a session leader
    // the rank can never leave its group, whose id is its pid (see
    // `JobProcs::groups`).
    at(Step::Session, sys::new_session())?;
    at(
        Step::Affinity,
        nix::sched::sched_setaffinity(Pid::from_raw(0), &setup.cpus).map_err(io::Error::from),
    )?;
    for path in setup.cgroup_procs.iter().chain(&setup.pids_procs) {
        at(Step::Cgroup, sys::write_file(path, b"0"))?;
    }
    if let Some((uid, gid, groups)) = setup.credentials {
        at(Step::Credentials, sys::become_user(uid, gid, groups))?;
    }
    at(
        Step::Privileges,
        shed_root_leftovers(setup.credentials.is_some()),
    )?;
    // After the change of user, so that the kernel checks the user's
    // rights on the terminal; it is never stolen from another session.
    if setup.takes_terminal {
        at(
            Step::Terminal,
            sys::take_controlling_terminal(libc::STDIN_FILENO),
        )?;
    }
    at(Step::Chdir, sys::chdir(setup.cwd))?;
    // Only the stdio descriptors and the passed ones reach the job. Old
    // kernels lack close_range; there, every descriptor of the daemon is
    // close-on-exec already (see `seal_inherited_descriptors`).
    match sys::close_from_3_except(setup.inherited, -1, true) {
        Ok(()) => {}
        Err(error) if matches!(error.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) => {}
        Err(error) => return Err((Step::Descriptors, error)),
    }
    // After setuid, which clears it: a job dies with the daemon.
    at(
        Step::ParentDeath,
        sys::set_parent_death_signal(libc::SIGKILL),
    )?;
    if sys::parent_pid() != setup.daemon_pid {
        return Err((Step::ParentDeath, io::Error::from_raw_os_error(libc::ESRCH)));
    }
    if let Some(mask) = setup.umask {
        sys::set_umask(mask);
    }
    // As the user, in the working directory, with the user's umask: the
    // kernel checks the user's rights on the path, its links included.
    open_outputs(&setup.output)?;
    // The signal state of a program started from the caller's shell: the
    // daemon's mask (blocked for its signalfd) and its inherited ignores
    // must not leak.
    at(
        Step::Signals,
        sys::reset_signals(setup.ignored, setup.signals_to_change),
    )?;
    // Last, after the change of credentials, so that a hard limit is only
    // ever lowered, as the user could; the descriptor limit last of all:
    // nothing after it opens a descriptor, which would be numbered above a
    // lowered limit and fail.
    for &(resource, soft, hard) in setup.rlimits {
        at(
            Step::Limits,
            lower_rlimit(resource, soft, hard).map_err(io::Error::from),
        )?;
    }
    at(
        Step::Priority,
        drop_daemon_priority(setup.nice, setup.ioprio),
    )
}

/// Opens the rank's output files onto its stdout and stderr: a stderr file
/// of the same path shares stdout's descriptor, as `>file 2>&1` does.
/// Only system calls.
fn open_outputs(files: &[Option<OutputFile>; 2]) -> Result<(), (Step, io::Error)> {
    if let Some(file) = files[0] {
        at(Step::Output, sys::open_output(file.path, file.truncate, 1))?;
    }
    match (files[0], files[1]) {
        (Some(out), Some(err)) if out.path == err.path => {
            at(Step::Error, sys::install_stdio(1, 2))?;
        }
        (_, Some(err)) => at(Step::Error, sys::open_output(err.path, err.truncate, 2))?,
        (_, None) => {}
    }
    Ok(())
}

/// Sets a limit of the calling process. Where the process may not raise
/// its hard limit to `hard` (a user's job, when the caller had a higher
/// one than scored), it gets the most it may have: its current hard limit,
/// and the soft limit no higher. Async-signal-safe (two system calls).
fn lower_rlimit(resource: Resource, soft: u64, hard: u64) -> nix::Result<()> {
    match setrlimit(resource, soft, hard) {
        Err(nix::errno::Errno::EPERM) => {
            let (_, current_hard) = getrlimit(resource)?;
            let hard = hard.min(current_hard);
            setrlimit(resource, soft.min(hard), hard)
        }
        other => other,
    }
}

/// Between fork and exec, the very last step: never let the daemon's
/// real-time priority (or nice value) reach a job. Until here the child
/// ran at the daemon's priority (the daemon does not set
/// SCHED_RESET_ON_FORK), so that its few hundred microseconds of pre-exec
/// work do not wait for a CPU behind a busy machine's processes: the daemon
/// does not wait for a child's exec, but its launch window does
/// (`EXEC_WINDOW`), and the console stays more responsive during a large
/// launch with children at the daemon's priority than at normal priority.
/// Lowering one's own priority needs no privilege, so this works after the
/// change of user too. Then the caller's nice value and I/O priority, as far
/// as the kernel lets the user have them (raising one's priority needs
/// CAP_SYS_NICE or RLIMIT_NICE, an I/O class of real time CAP_SYS_ADMIN):
/// where it refuses, the process keeps what it has, as `nice` and `ionice`
/// leave a program they could not change, never a failed launch. A
/// private daemon started at nice 5 cannot give its jobs nice 0. Only
/// system calls.
fn drop_daemon_priority(nice: Option<i32>, ioprio: Option<u32>) -> io::Result<()> {
    fn unless_refused(result: io::Result<()>) -> io::Result<()> {
        match result {
            Err(error) if matches!(error.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                Ok(())
            }
            other => other,
        }
    }
    sys::set_scheduler(None, false)?;
    unless_refused(sys::set_nice(0))?;
    if let Some(nice) = nice {
        unless_refused(sys::set_nice(nice))?;
    }
    if let Some(ioprio) = ioprio {
        unless_refused(sys::set_io_priority(ioprio))?;
    }
    Ok(())
}

/// Between fork and exec, after the change of user: what a job must not
/// keep of scored's root. A new session keyring of the job's own (it
/// would otherwise possess scored's, and through it any key scored's
/// session holds); and, when the job runs as another user, a check that
/// no capability and no securebit survived `setuid`, which aborts the
/// exec with [`sys::PRIVILEGES_REMAIN`] (reported as such by the parent).
/// Only system calls: safe between fork and exec.
fn shed_root_leftovers(became_user: bool) -> io::Result<()> {
    sys::join_new_session_keyring()?;
    if became_user && sys::privileges_remain()? {
        return Err(io::Error::from_raw_os_error(sys::PRIVILEGES_REMAIN));
    }
    Ok(())
}

/// Starts a process that removes the rest of a large scratch tree (see
/// [`Removal::is_large`](super::statedir::Removal::is_large)) and exits: 0
/// once the tree is gone, 1 if the removal failed (the tree then stays in
/// `STATE_DIR/removing` for the next start). Its pid is returned for the
/// reaper.
///
/// It is this binary again (`statedir::remove_inherited`), with the
/// tree's directory as its descriptor 3 and no other descriptor of the
/// daemon's (`sys::spawn_clean`): a fork would hold a copy of every
/// user's descriptor the daemon holds, and its closes of them (at its exit
/// at the latest) would wait for any FUSE server among them, for as long
/// as that server likes, with the removers every user's trees wait for.
/// It leaves the daemon's real-time class for the lowest normal priority:
/// removing hundreds of thousands of files takes seconds of CPU without a
/// pause, and at real-time priority it held its CPU for all of them, ahead
/// of every job and of the ranks that wait there for their exec (which
/// were then killed for not starting in time).
pub fn spawn_remover(removal: &mut super::statedir::Removal) -> io::Result<i32> {
    use std::ffi::CString;
    const EXE: &CStr = c"/proc/self/exe";
    let (parent, name, uid) = removal.whereabouts();
    let invalid = |_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a tree's name");
    let name = CString::new(name).map_err(invalid)?;
    let uid = CString::new(uid.to_string()).map_err(invalid)?;
    let argv = [
        super::statedir::REMOVER_NAME.as_ptr(),
        name.as_ptr(),
        uid.as_ptr(),
        std::ptr::null(),
    ];
    let environment = environment();
    let mut envp: Vec<*const libc::c_char> = environment.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    #[cfg(all(debug_assertions, not(test)))]
    assert!(
        super::procfs::thread_count().is_none_or(|threads| threads == 1),
        "the daemon starts a remover with more than one thread"
    );
    sys::spawn_clean(EXE, &argv, &envp, [parent, -1, -1], true, None)
}

/// The daemon's environment as `NAME=value` strings, for an exec.
fn environment() -> Vec<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::env::vars_os()
        .filter_map(|(key, value)| {
            let mut entry = key.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            std::ffi::CString::new(entry).ok()
        })
        .collect()
}

/// Starts the closer of users' descriptors (see `crate::closer`): this
/// binary again (`/proc/self/exe`, which still runs after an upgrade
/// replaced the file), under the name `argv0`, with `socket` as its
/// descriptor 3, /dev/null as 0, the daemon's 1 and 2 (its log) and no
/// other descriptor of the daemon's, at normal scheduling priority (the
/// daemon's real-time priority is not for it). Its own command line tells
/// it from the daemon in `ps`. Started without a copy of the daemon's
/// other descriptors (`sys::spawn_clean`): a closer started again while
/// users' descriptors are open would otherwise close copies of them at
/// its exec, and wait there for any FUSE server among them.
pub fn spawn_closer(socket: RawFd, argv0: &CStr) -> io::Result<i32> {
    const EXE: &CStr = c"/proc/self/exe";
    let argv = [argv0.as_ptr(), std::ptr::null()];
    let environment = environment();
    let mut envp: Vec<*const libc::c_char> = environment.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    #[cfg(all(debug_assertions, not(test)))]
    assert!(
        super::procfs::thread_count().is_none_or(|threads| threads == 1),
        "the daemon starts its closer with more than one thread"
    );
    sys::spawn_clean(EXE, &argv, &envp, [socket, -1, -1], true, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    /// Spawns `setup` once the spawner is free: the tests run in threads
    /// of one process, and a spawn while another's child has not yet
    /// exec'd is refused, as a keeper's loop never asks for one.
    fn spawn_in_turn(setup: &ChildSetup) -> (i32, Arc<ExecWord>) {
        static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let started = Instant::now();
        while !ready() && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        spawn(setup).expect("spawn")
    }

    /// Spawns `argv` in `cwd` with stdio on /dev/null, and returns what its
    /// word said and how it ended.
    fn run(argv: &[&str], cwd: &str) -> (Report, nix::sys::wait::WaitStatus) {
        let (pid, report) = start(argv, cwd, None);
        settle(pid, &report)
    }

    /// Spawns `argv` in `cwd` with stdio on /dev/null, and the cgroup
    /// file `cgroup_procs` if given: its pid and word.
    fn start(argv: &[&str], cwd: &str, cgroup_procs: Option<&CStr>) -> (i32, Arc<ExecWord>) {
        start_in(argv, cwd, cgroup_procs, "/usr/bin:/bin")
    }

    /// [`start`] with the job's `PATH`.
    fn start_in(
        argv: &[&str],
        cwd: &str,
        cgroup_procs: Option<&CStr>,
        path: &str,
    ) -> (i32, Arc<ExecWord>) {
        let args: Vec<CString> = argv.iter().map(|arg| CString::new(*arg).unwrap()).collect();
        let env = [CString::new(format!("PATH={path}")).unwrap()];
        let cwd = CString::new(cwd).unwrap();
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .unwrap();
        let null = OwnedFd::from(null);
        let cpus = nix::sched::sched_getaffinity(Pid::from_raw(0)).unwrap();
        let setup = ChildSetup {
            program: &args[0],
            args: args.iter().map(CString::as_c_str).collect(),
            env: env.iter().map(CString::as_c_str).collect(),
            stdio: [null.as_raw_fd(); 3],
            inherited: &[],
            cpus,
            cgroup_procs,
            pids_procs: None,
            credentials: None,
            takes_terminal: false,
            cwd: &cwd,
            daemon_pid: std::process::id() as i32,
            umask: None,
            nice: None,
            ioprio: None,
            ignored: 0,
            signals_to_change: 0,
            rlimits: &[],
            output: [None, None],
        };
        spawn_in_turn(&setup)
    }

    /// What the word of child `pid` says once it has said something
    /// (10 s at most), and how the child ended.
    fn settle(pid: i32, word: &ExecWord) -> (Report, nix::sys::wait::WaitStatus) {
        let started = Instant::now();
        let mut said = word.report();
        while said == Report::Pending && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
            said = word.report();
        }
        let status = nix::sys::wait::waitpid(Pid::from_raw(pid), None).expect("reap");
        (said, status)
    }

    /// The job's `PATH` is searched as `execvp` searches it: a candidate
    /// that may not be executed is passed over for a later one, and named
    /// (`EACCES`) when none runs; a file of no executable format runs
    /// through `/bin/sh`.
    #[test]
    fn the_program_is_searched_as_execvp_searches() {
        let dir = std::env::temp_dir().join(format!("scored-spawn-path-{}", std::process::id()));
        let (refused, runs) = (dir.join("refused"), dir.join("runs"));
        for (sub, mode, text) in [(&refused, 0o644, "exit 4\n"), (&runs, 0o755, "exit 5\n")] {
            std::fs::create_dir_all(sub).unwrap();
            let file = sub.join("prog");
            std::fs::write(&file, text).unwrap();
            std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap();
        }
        let run_in = |path: String| {
            let (pid, report) = start_in(&["prog"], "/", None, &path);
            settle(pid, &report)
        };
        let both = format!("{}:{}", refused.display(), runs.display());
        let (said, status) = run_in(both);
        assert_eq!(said, Report::Execd);
        assert!(
            matches!(status, nix::sys::wait::WaitStatus::Exited(_, 5)),
            "{status:?}"
        );
        let (said, _) = run_in(refused.display().to_string());
        assert_eq!(said, Report::Failed(Step::Exec, libc::EACCES));
        let (said, _) = run_in(dir.join("none").display().to_string());
        assert_eq!(said, Report::Failed(Step::Exec, libc::ENOENT));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_program_that_runs_reports_its_exec() {
        let (said, status) = run(&["true"], "/");
        assert_eq!(said, Report::Execd);
        assert!(
            matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)),
            "{status:?}"
        );
    }

    #[test]
    fn a_missing_program_reports_the_exec_step_and_enoent() {
        let (said, status) = run(&["/no/such/program"], "/");
        assert_eq!(said, Report::Failed(Step::Exec, libc::ENOENT));
        assert!(
            matches!(status, nix::sys::wait::WaitStatus::Exited(_, 127)),
            "{status:?}"
        );
    }

    #[test]
    fn a_missing_directory_reports_the_chdir_step() {
        let (said, _) = run(&["true"], "/no/such/directory");
        assert_eq!(said, Report::Failed(Step::Chdir, libc::ENOENT));
    }

    #[test]
    fn a_program_is_searched_in_the_jobs_path() {
        // `sh` has no slash: it is found through the PATH of the
        // environment given, as a shell would find it.
        let (said, status) = run(&["sh", "-c", "exit 3"], "/");
        assert_eq!(said, Report::Execd);
        assert!(
            matches!(status, nix::sys::wait::WaitStatus::Exited(_, 3)),
            "{status:?}"
        );
    }

    /// Once its stdio is in place, a rank holds no other descriptor of the
    /// daemon's: one its user stops before the exec
    /// must not keep other users' connections or pipes open. The child is
    /// caught in its cgroup step, whose file here is a FIFO that blocks
    /// its open until the test reads it.
    #[test]
    fn a_rank_keeps_none_of_the_daemons_descriptors_past_its_stdio() {
        use std::os::unix::ffi::OsStrExt;
        let secret = std::fs::File::open("/proc/self/status").unwrap();
        let fifo = std::env::temp_dir().join(format!("scored-spawn-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let fifo_c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        let (pid, report) = start(&["true"], "/", Some(&fifo_c));
        // Blocked in the open of the FIFO (openat is system call 257).
        let started = Instant::now();
        while !std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .is_ok_and(|call| call.starts_with("257 "))
        {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the child never reached its cgroup step"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let held: Vec<(i32, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .filter_map(|entry| {
                let fd = entry.file_name().to_str()?.parse().ok()?;
                let target = std::fs::read_link(entry.path()).ok()?;
                Some((fd, target.display().to_string()))
            })
            .collect();
        // Let it go on: read what it writes, then its exec.
        let mut reader = std::fs::File::open(&fifo).unwrap();
        let mut written = String::new();
        std::io::Read::read_to_string(&mut reader, &mut written).unwrap();
        let (said, status) = settle(pid, &report);
        std::fs::remove_file(&fifo).unwrap();
        assert!(
            !held.iter().any(|(fd, _)| *fd == secret.as_raw_fd()),
            "the child held the daemon's descriptor {}: {held:?}",
            secret.as_raw_fd()
        );
        assert!(
            held.iter().all(|(fd, _)| *fd < 3),
            "the child held more than its stdio: {held:?}"
        );
        assert_eq!(written, "0");
        assert_eq!(said, Report::Execd);
        assert!(
            matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)),
            "{status:?}"
        );
    }

    /// Passed descriptors reach the child at their numbers even when those
    /// are each other's sources (a swap), and a closed standard descriptor
    /// stays closed.
    #[test]
    fn passed_descriptors_land_at_their_numbers_and_closed_ones_stay_closed() {
        use std::io::Read;
        let dir = std::env::temp_dir().join(format!("scored-spawn-passed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let open = |name: &str, text: &str| {
            std::fs::write(dir.join(name), text).unwrap();
            OwnedFd::from(std::fs::File::open(dir.join(name)).unwrap())
        };
        // Sources at fixed numbers, each the other's target.
        let place = |fd: OwnedFd, at: RawFd| {
            let placed = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(at)).unwrap();
            // SAFETY: just returned by the kernel, owned by nothing else.
            unsafe { OwnedFd::from_raw_fd(placed) }
        };
        let one = place(open("one", "one\n"), 900);
        let two = place(open("two", "two\n"), 901);
        let (a, b) = (one.as_raw_fd(), two.as_raw_fd());
        let (out_read, out_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let out_write = place(out_write, 3);
        let script =
            format!("cat /dev/fd/{a} /dev/fd/{b}; test -e /proc/self/fd/0 || echo stdin-closed");
        let args: Vec<CString> = ["sh", "-c", &script]
            .iter()
            .map(|arg| CString::new(*arg).unwrap())
            .collect();
        let env = [CString::new("PATH=/usr/bin:/bin").unwrap()];
        let cwd = CString::new("/").unwrap();
        let passed = [(a, b), (b, a)];
        let setup = ChildSetup {
            program: &args[0],
            args: args.iter().map(CString::as_c_str).collect(),
            env: env.iter().map(CString::as_c_str).collect(),
            stdio: [CLOSED, out_write.as_raw_fd(), out_write.as_raw_fd()],
            inherited: &passed,
            cpus: nix::sched::sched_getaffinity(Pid::from_raw(0)).unwrap(),
            cgroup_procs: None,
            pids_procs: None,
            credentials: None,
            takes_terminal: false,
            cwd: &cwd,
            daemon_pid: std::process::id() as i32,
            umask: None,
            nice: None,
            ioprio: None,
            ignored: 0,
            signals_to_change: 0,
            rlimits: &[],
            output: [None, None],
        };
        let (pid, report) = spawn_in_turn(&setup);
        drop(out_write);
        let mut text = String::new();
        std::fs::File::from(out_read)
            .read_to_string(&mut text)
            .unwrap();
        let (said, status) = settle(pid, &report);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(said, Report::Execd);
        assert!(
            matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)),
            "{status:?}"
        );
        assert_eq!(text, "two\none\nstdin-closed\n");
    }

    #[test]
    fn every_step_round_trips_through_its_number() {
        for value in 0..20 {
            if let Some(step) = Step::from_u32(value) {
                assert_eq!(step as u32, value);
                assert!(!step.describe().is_empty());
            }
        }
        assert_eq!(Step::from_u32(Step::Exec as u32), Some(Step::Exec));
        assert_eq!(Step::from_u32(0), None);
    }
}
