//! Where a keeper's ranks are created: `clone(CLONE_VM | CLONE_VFORK)` from
//! a thread of the keeper's that does nothing else and never exits (two
//! such threads where the keeper may use two CPUs, see [`SPAWNERS`]).
//!
//! A `fork` copies the keeper's page tables and write-protects its memory;
//! then the keeper, going on with its loop, and the child, until its exec,
//! copy every page either writes, and the exec throws the copy away. That
//! was a third of an array element's CPU time. A child sharing the
//! keeper's memory costs none of it, but it must then touch nothing the
//! keeper's loop uses, and `CLONE_VFORK` suspends the thread that cloned it
//! until the exec: so the clone is made by this thread, which a rank its
//! user stops before its exec holds, never the loop (a keeper that stopped
//! answering would let its user continue a switched-out job unseen).
//!
//! The loop learns the pid at once all the same: the kernel writes it
//! (`CLONE_PARENT_SETTID`) before the child runs, and the child's first act,
//! while it is still root's and no user can stop it, is to wake the loop.
//! Once the clone returns (the child exec'd or exited), this thread marks
//! the child's [`ExecWord`] and says it is free on its pipe: that one
//! wakeup of the loop carries the news of the exec.
//! Everything the child reads ([`Owned`], the argument and environment
//! arrays, the program's candidate paths, its stack) belongs to this thread
//! until the clone returns, that is until the child has exec'd or exited.
//!
//! The child, sharing the keeper's memory, allocates nothing and calls no C
//! library function that keeps state across threads: its credentials change
//! through raw system calls (`sys::become_user`), and the program is
//! searched in the job's own `PATH` here rather than by `execvp`, which
//! reads the keeper's `environ`.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use nix::sys::resource::Resource;

use super::{child, ChildSetup, ExecWord, OutputFile};

/// The child's stack: its steps use a few kilobytes.
const STACK_BYTES: usize = 256 * 1024;
/// The search path of a job whose environment has no `PATH`, as `execvp`'s.
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// A copy of a [`ChildSetup`] that the spawner thread owns for the child's
/// life before its exec.
struct Owned {
    program: CString,
    args: Vec<CString>,
    env: Vec<CString>,
    stdio: [RawFd; 3],
    inherited: Vec<(RawFd, RawFd)>,
    cpus: nix::sched::CpuSet,
    cgroup_procs: Option<CString>,
    pids_procs: Option<CString>,
    credentials: Option<(u32, u32, Vec<libc::gid_t>)>,
    takes_terminal: bool,
    cwd: CString,
    daemon_pid: i32,
    umask: Option<u32>,
    nice: Option<i32>,
    ioprio: Option<u32>,
    ignored: u64,
    signals_to_change: u64,
    rlimits: Vec<(Resource, u64, u64)>,
    output: [Option<(CString, bool)>; 2],
}

impl Owned {
    fn of(setup: &ChildSetup<'_>) -> Owned {
        Owned {
            program: setup.program.to_owned(),
            args: setup.args.iter().map(|arg| (*arg).to_owned()).collect(),
            env: setup.env.iter().map(|entry| (*entry).to_owned()).collect(),
            stdio: setup.stdio,
            inherited: setup.inherited.to_vec(),
            cpus: setup.cpus,
            cgroup_procs: setup.cgroup_procs.map(CStr::to_owned),
            pids_procs: setup.pids_procs.map(CStr::to_owned),
            credentials: setup
                .credentials
                .map(|(uid, gid, groups)| (uid, gid, groups.to_vec())),
            takes_terminal: setup.takes_terminal,
            cwd: setup.cwd.to_owned(),
            daemon_pid: setup.daemon_pid,
            umask: setup.umask,
            nice: setup.nice,
            ioprio: setup.ioprio,
            ignored: setup.ignored,
            signals_to_change: setup.signals_to_change,
            rlimits: setup.rlimits.to_vec(),
            output: setup
                .output
                .map(|file| file.map(|file| (file.path.to_owned(), file.truncate))),
        }
    }

    fn setup(&self) -> ChildSetup<'_> {
        ChildSetup {
            program: &self.program,
            args: self.args.iter().map(CString::as_c_str).collect(),
            env: self.env.iter().map(CString::as_c_str).collect(),
            stdio: self.stdio,
            inherited: &self.inherited,
            cpus: self.cpus,
            cgroup_procs: self.cgroup_procs.as_deref(),
            pids_procs: self.pids_procs.as_deref(),
            credentials: self
                .credentials
                .as_ref()
                .map(|(uid, gid, groups)| (*uid, *gid, groups.as_slice())),
            takes_terminal: self.takes_terminal,
            cwd: &self.cwd,
            daemon_pid: self.daemon_pid,
            umask: self.umask,
            nice: self.nice,
            ioprio: self.ioprio,
            ignored: self.ignored,
            signals_to_change: self.signals_to_change,
            rlimits: &self.rlimits,
            output: self.output.each_ref().map(|file| {
                file.as_ref().map(|(path, truncate)| OutputFile {
                    path,
                    truncate: *truncate,
                })
            }),
        }
    }
}

/// How the child execs its program, prepared before the clone: the
/// argument and environment arrays, the paths to try in order (as
/// `execvp` would search the job's `PATH`), and the arguments of the shell
/// that runs a candidate with no executable format (`ENOEXEC`), its second
/// slot filled with that candidate.
pub(super) struct Exec {
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    candidates: Vec<CString>,
    script: Vec<*const libc::c_char>,
}

/// The shell that runs a file without an executable format, as `execvp`'s.
const SHELL: &CStr = c"/bin/sh";

impl Exec {
    fn of(setup: &ChildSetup<'_>) -> Exec {
        let argv: Vec<*const libc::c_char> = setup
            .args
            .iter()
            .map(|arg| arg.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let envp = setup
            .env
            .iter()
            .map(|entry| entry.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let path = setup
            .env
            .iter()
            .find_map(|entry| entry.to_bytes().strip_prefix(b"PATH="))
            .unwrap_or(DEFAULT_PATH);
        let candidates = candidates(setup.program.to_bytes(), path);
        let script = [SHELL.as_ptr(), std::ptr::null()]
            .into_iter()
            .chain(argv.iter().skip(1).copied())
            .collect();
        Exec {
            argv,
            envp,
            candidates,
            script,
        }
    }

    /// Execs the program; returns only on failure, with `execvp`'s errno:
    /// `EACCES` if a candidate was refused so, else the last error (a
    /// missing file or directory goes on to the next candidate; another
    /// error stops the search).
    ///
    /// # Safety
    ///
    /// Only between a fork or clone and the exec: it replaces the process.
    pub(super) unsafe fn exec(&mut self) -> i32 {
        let mut refused = false;
        let mut last = libc::ENOENT;
        for candidate in &self.candidates {
            // SAFETY: `candidate`, `argv` and `envp` are NUL-terminated
            // and live until the exec; execve returns only on failure.
            unsafe { libc::execve(candidate.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr()) };
            let mut errno = errno();
            if errno == libc::ENOEXEC {
                self.script[1] = candidate.as_ptr();
                // SAFETY: as above; `script` is NUL-terminated.
                unsafe { libc::execve(SHELL.as_ptr(), self.script.as_ptr(), self.envp.as_ptr()) };
                errno = self::errno();
            }
            match errno {
                libc::EACCES => refused = true,
                libc::ENOENT
                | libc::ESTALE
                | libc::ENOTDIR
                | libc::ENODEV
                | libc::ETIMEDOUT
                | libc::EHOSTDOWN => {}
                other => return other,
            }
            last = errno;
        }
        if refused {
            libc::EACCES
        } else {
            last
        }
    }
}

/// This thread's errno.
fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The paths `execvp` tries for `program` in the search path `path`: the
/// program alone if it names a slash; else each element joined to it (an
/// empty element is the working directory).
fn candidates(program: &[u8], path: &[u8]) -> Vec<CString> {
    if program.contains(&b'/') || program.is_empty() {
        return CString::new(program).into_iter().collect();
    }
    path.split(|byte| *byte == b':')
        .filter_map(|dir| {
            let mut joined = dir.to_vec();
            if !dir.is_empty() {
                joined.push(b'/');
            }
            joined.extend_from_slice(program);
            CString::new(joined).ok()
        })
        .collect()
}

/// One rank to create.
struct Request {
    owned: Owned,
    /// Its word on its exec, marked once the clone returns.
    word: Arc<ExecWord>,
    /// 0 until the clone; then the child's pid, or minus the errno of a
    /// failed clone.
    pid: Arc<AtomicI32>,
}

/// The most spawner threads a keeper has: one, and a second where the
/// keeper may run on two CPUs or more, started only when a rank is to
/// be created while the first's child has not exec'd yet. A clone
/// returns once its child exec'd, a few hundred microseconds of set-up
/// and exec later; with one thread, each rank of a job waited for the
/// last one's, which the second thread runs beside it on another CPU.
const SPAWNERS: usize = 2;

/// One spawner thread: its queue, and whether a clone of its is under
/// way (set by [`spawn`], cleared by the thread).
struct Spawner {
    queue: Mutex<Sender<Request>>,
    busy: Arc<AtomicBool>,
}

/// The keeper's spawners, and the pipe on which each says it is free
/// again.
struct Pool {
    /// The read end, which the keeper's loop watches.
    freed: OwnedFd,
    /// The write end, the threads'.
    free: Arc<OwnedFd>,
    /// How many threads there may be: [`SPAWNERS`], one on a single CPU,
    /// or as many as could be started.
    most: AtomicUsize,
    spawners: [OnceLock<Spawner>; SPAWNERS],
}

/// The pool, made on first use (its threads start as ranks need them).
fn pool() -> io::Result<&'static Pool> {
    static POOL: OnceLock<Pool> = OnceLock::new();
    if let Some(pool) = POOL.get() {
        return Ok(pool);
    }
    let (freed, free) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)?;
    let cpus = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map(|set| {
            (0..nix::sched::CpuSet::count())
                .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
                .count()
        })
        .unwrap_or(1);
    Ok(POOL.get_or_init(|| Pool {
        freed,
        free: Arc::new(free),
        most: AtomicUsize::new(cpus.clamp(1, SPAWNERS)),
        spawners: Default::default(),
    }))
}

impl Pool {
    /// The spawners started so far.
    fn started(&self) -> impl Iterator<Item = &Spawner> {
        self.spawners.iter().filter_map(OnceLock::get)
    }

    /// The `index`th spawner, its thread started if it was not.
    fn start(&self, index: usize) -> io::Result<&Spawner> {
        if let Some(spawner) = self.spawners[index].get() {
            return Ok(spawner);
        }
        let (sender, receiver) = channel();
        let busy = Arc::new(AtomicBool::new(false));
        let (flag, free) = (Arc::clone(&busy), Arc::clone(&self.free));
        std::thread::Builder::new()
            .name("scored spawner".into())
            .spawn(move || serve(receiver, &flag, &free))?;
        Ok(self.spawners[index].get_or_init(|| Spawner {
            queue: Mutex::new(sender),
            busy,
        }))
    }
}

/// The descriptor that becomes readable when a spawner is free again
/// after a clone (read it empty with [`drain`]).
pub fn freed_fd() -> io::Result<RawFd> {
    Ok(pool()?.freed.as_raw_fd())
}

/// Waits at most `limit` for every spawner to be free again (their last
/// children exec'd or ended); whether they are. Their pipe is left for
/// [`drain`].
pub fn await_free(limit: std::time::Duration) -> bool {
    use nix::poll::{ppoll, PollFd, PollFlags};
    use std::os::fd::AsFd;
    let Ok(pool) = pool() else {
        return false;
    };
    let all_free = || {
        pool.started()
            .all(|spawner| !spawner.busy.load(Ordering::Acquire))
    };
    let deadline = std::time::Instant::now() + limit;
    let mut drained = false;
    while !all_free() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let mut fds = [PollFd::new(pool.freed.as_fd(), PollFlags::POLLIN)];
        let _ = ppoll(&mut fds, Some(nix::sys::time::TimeSpec::from(left)), None);
        // One spawner free, another still busy: its word is emptied so
        // that the wait sleeps until the next, and put back below.
        drained |= empty(&pool.freed);
    }
    if drained {
        let _ = nix::unistd::write(&*pool.free, &[1]);
    }
    all_free()
}

/// Empties the spawners' pipe of its wake-ups.
pub fn drain() {
    if let Ok(pool) = pool() {
        empty(&pool.freed);
    }
}

/// Reads `pipe` empty; whether it held anything.
fn empty(pipe: &OwnedFd) -> bool {
    let mut bytes = [0u8; 64];
    let mut any = false;
    while matches!(nix::unistd::read(pipe, &mut bytes), Ok(n) if n > 0) {
        any = true;
    }
    any
}

/// Whether a spawner is free (or may be started): a clone waits for its
/// child to exec or end, which its user may delay at will, so a loop asks
/// for one only while one is free (and hears through [`freed_fd`] when one
/// is again).
pub fn ready() -> bool {
    let Ok(pool) = pool() else {
        return false;
    };
    pool.spawners[..pool.most.load(Ordering::Acquire)]
        .iter()
        .any(|slot| {
            slot.get()
                .is_none_or(|spawner| !spawner.busy.load(Ordering::Acquire))
        })
}

/// Creates the child of `setup` through a free spawner thread (the first
/// started; the next one started only while those are busy); returns its
/// pid once the kernel has made it, without waiting for its exec. Refused
/// (`WouldBlock`) while none is [`ready`].
pub(super) fn spawn(setup: &ChildSetup<'_>, word: Arc<ExecWord>) -> io::Result<i32> {
    let pool = pool()?;
    let mut chosen = None;
    for index in 0..pool.most.load(Ordering::Acquire) {
        let spawner = match pool.start(index) {
            Ok(spawner) => spawner,
            Err(error) if index == 0 => return Err(error),
            // The first goes on alone.
            Err(error) => {
                tracing::warn!(%error, "cannot start a second spawner thread");
                pool.most.store(index, Ordering::Release);
                break;
            }
        };
        if !spawner.busy.swap(true, Ordering::AcqRel) {
            chosen = Some(spawner);
            break;
        }
    }
    let Some(spawner) = chosen else {
        return Err(io::Error::from(io::ErrorKind::WouldBlock));
    };
    let pid = Arc::new(AtomicI32::new(0));
    let request = Request {
        owned: Owned::of(setup),
        word,
        pid: Arc::clone(&pid),
    };
    let sent = spawner
        .queue
        .lock()
        .map_err(|_| io::Error::other("the spawner thread is gone"))
        .and_then(|queue| {
            queue
                .send(request)
                .map_err(|_| io::Error::other("the spawner thread is gone"))
        });
    if let Err(error) = sent {
        spawner.busy.store(false, Ordering::Release);
        return Err(error);
    }
    loop {
        match pid.load(Ordering::Acquire) {
            0 => super::sys::futex_wait(&pid, 0),
            created if created > 0 => return Ok(created),
            failed => return Err(io::Error::from_raw_os_error(-failed)),
        }
    }
}

/// What the child's entry point reads.
struct ChildArgs<'a> {
    setup: &'a ChildSetup<'a>,
    exec: *mut Exec,
    word: &'a ExecWord,
    pid: &'a AtomicI32,
}

/// The spawner thread: every signal blocked (the child starts so, and
/// sets its own mask before its exec), one clone per request.
fn serve(requests: Receiver<Request>, busy: &AtomicBool, free: &OwnedFd) {
    let _ = nix::sys::signal::pthread_sigmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::all()),
        None,
    );
    let mut stack = match super::sys::ChildStack::new(STACK_BYTES) {
        Ok(stack) => Some(stack),
        Err(error) => {
            tracing::error!(%error, "cannot map the stack of the keeper's children");
            None
        }
    };
    for request in requests {
        let created = match &mut stack {
            Some(stack) => clone_one(&request, stack),
            None => Err(io::Error::from_raw_os_error(libc::ENOMEM)),
        };
        let value = match created {
            Ok(_) => {
                request.word.mark_execd();
                request.pid.load(Ordering::Acquire)
            }
            Err(error) => -error.raw_os_error().unwrap_or(libc::EIO),
        };
        // The child is past its exec or gone: what it read is free now.
        request.pid.store(value, Ordering::Release);
        super::sys::futex_wake(&request.pid);
        drop(request);
        busy.store(false, Ordering::Release);
        let _ = nix::unistd::write(free, &[1]);
    }
}

/// Clones the child of one request and returns once it has exec'd or
/// exited.
fn clone_one(request: &Request, stack: &mut super::sys::ChildStack) -> io::Result<i32> {
    let setup = request.owned.setup();
    let mut exec = Exec::of(&setup);
    let args = ChildArgs {
        setup: &setup,
        exec: &mut exec,
        word: &request.word,
        pid: &request.pid,
    };
    extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `ChildArgs` below, which outlives the child's
        // use of it: the spawner thread is suspended until the exec or exit.
        let args = unsafe { &*(arg as *const ChildArgs<'_>) };
        // Root's still: no user can stop it before the loop is woken.
        super::sys::futex_wake(args.pid);
        // SAFETY: a child sharing the keeper's memory whose parent thread is
        // suspended; `exec` is this child's alone until the exec.
        unsafe { child(args.setup, &mut *args.exec, args.word) }
    }
    // SAFETY: `entry` runs on `stack`, which nothing else uses while the
    // child lives, and reads only `args`, which outlives it.
    unsafe {
        super::sys::clone_vfork(
            entry,
            stack,
            (&args as *const ChildArgs<'_>).cast_mut().cast(),
            &request.pid,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_execvp() {
        let names = |program: &str, path: &str| -> Vec<String> {
            candidates(program.as_bytes(), path.as_bytes())
                .into_iter()
                .map(|c| c.into_string().unwrap())
                .collect()
        };
        assert_eq!(names("sh", "/a:/b/c"), ["/a/sh", "/b/c/sh"]);
        assert_eq!(names("sh", "/a::/b"), ["/a/sh", "sh", "/b/sh"]);
        assert_eq!(names("sh", ""), ["sh"]);
        assert_eq!(names("./x", "/a"), ["./x"]);
        assert_eq!(names("/bin/true", "/a"), ["/bin/true"]);
    }
}
