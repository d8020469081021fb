//! Children that share their creator's memory: a keeper's rank until its
//! exec (`clone(CLONE_VM | CLONE_VFORK)`), the stack it runs on, and the
//! futex on which the creator's loop waits for its pid; the daemon's
//! replacing tasks, which let go of its copies of users' descriptors
//! ([`ReplacingTask`]); and [`spawn_clean`], which execs a program with
//! none of the caller's descriptors but those it names. Part of the
//! daemon's `sys` module: each call wrapped once, with `unsafe` only here
//! and in the rest of `sys`.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::AtomicI32;

/// A stack for a child: an anonymous mapping with a guard page below it,
/// so that an overflow faults rather than writes over the heap.
pub struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

/// The guard page's size (the smallest page x86-64 and arm64 have).
const GUARD: usize = 64 * 1024;

impl ChildStack {
    /// Maps `len` bytes of stack above a guard.
    pub fn new(len: usize) -> io::Result<ChildStack> {
        let total = len + GUARD;
        // SAFETY: an anonymous private mapping at an address of the
        // kernel's choice touches no existing memory.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = ChildStack { base, len: total };
        // SAFETY: the first `GUARD` bytes lie inside the mapping just made.
        if unsafe { libc::mprotect(base, GUARD, libc::PROT_NONE) } == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The top of the stack, 64-byte aligned, where a child starts.
    fn top(&mut self) -> *mut libc::c_void {
        let end = self.base as usize + self.len;
        (end & !63) as *mut libc::c_void
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, which no child uses any more
        // (a clone on it returned only once its child exec'd or exited).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// `clone(CLONE_VM | CLONE_VFORK | CLONE_PARENT_SETTID, SIGCHLD)`: runs
/// `entry(arg)` in a new child on `stack`, sharing this process's memory,
/// and returns its pid once it has exec'd or exited; the kernel writes the
/// pid into `pid` before the child runs.
///
/// # Safety
///
/// `entry` must make only system calls that touch no memory another thread
/// uses, must not return into Rust code of the caller (it execs or
/// `_exit`s), and everything it reads through `arg` must outlive the call.
pub unsafe fn clone_vfork(
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    stack: &mut ChildStack,
    arg: *mut libc::c_void,
    pid: &AtomicI32,
) -> io::Result<i32> {
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PARENT_SETTID | libc::SIGCHLD;
    // SAFETY: the caller's contract above; `pid` is a valid i32 the kernel
    // may write.
    let child = unsafe { libc::clone(entry, stack.top(), flags, arg, pid.as_ptr()) };
    if child == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(child)
}

/// Sleeps until `word` is woken or no longer holds `expected` (returns at
/// once if it does not); spurious returns are the caller's to loop on.
pub fn futex_wait(word: &AtomicI32, expected: i32) {
    // SAFETY: FUTEX_WAIT_PRIVATE reads the i32 `word` points to, which is
    // valid for the call; no timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        )
    };
}

/// Wakes every thread waiting on `word`. Async-signal-safe: one system
/// call, usable by a child sharing the waiter's memory.
pub fn futex_wake(word: &AtomicI32) {
    // SAFETY: FUTEX_WAKE_PRIVATE only names the address `word` points to.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

/// What a replacing task does: puts `with` in place of each of `fds`.
struct Replacements {
    fds: Box<[libc::c_int]>,
    with: libc::c_int,
    /// Waits first until this process (the creator) no longer shares
    /// the task's table: it has exec'd (0: no wait).
    after_exec_of: libc::pid_t,
}

/// `KCMP_FILES` (linux/kcmp.h): whether two processes share one table.
const KCMP_FILES: libc::c_int = 2;
/// How long a task waits for its creator's exec, in polls of
/// [`EXEC_POLL_NS`]: 10 s.
const EXEC_POLLS: u32 = 2000;
const EXEC_POLL_NS: libc::c_long = 5_000_000;

/// A child that shares the daemon's memory and descriptor table
/// (`clone(CLONE_VM | CLONE_FILES)`, no exit signal) and puts another
/// descriptor in place of each of a list (`dup3`), then exits: the close
/// of what each entry held is the child's, so that whatever the close
/// waits for (a FUSE server's answer to the flush that every close asks
/// for) holds the child, never the daemon. Each number stays taken (it
/// holds the replacement), so the caller, which still owns each, closes
/// the replacements once the child is reaped ([`ReplacingTask::reap`]),
/// and a child that died halfway can be started again on the same list.
///
/// Not a thread of the daemon: a process of its own (its own thread
/// group, which an `execve` of the daemon neither waits for nor ends),
/// reaped only with `__WCLONE`, so the daemon's reaper of its other
/// children never sees it.
pub struct ReplacingTask {
    pid: i32,
    // Both are the child's until it is reaped.
    _stack: ChildStack,
    _order: Box<Replacements>,
}

/// The child's stack: it makes a handful of system calls.
const REPLACING_STACK: usize = 32 * 1024;

impl ReplacingTask {
    /// Starts a task that puts `with` in place of each of `fds`.
    pub fn start(fds: &[RawFd], with: RawFd) -> io::Result<ReplacingTask> {
        Self::start_waiting(fds, with, 0)
    }

    /// Starts a task that waits until the caller has exec'd (for up to
    /// 10 s; it does nothing if the exec has not happened by then), then
    /// puts `with` in place of each of `fds` in the table the caller left
    /// behind, which the task and any other task still waiting in a close
    /// keep: so that it holds nothing else of the caller's.
    pub fn start_after_exec(fds: &[RawFd], with: RawFd) -> io::Result<ReplacingTask> {
        Self::start_waiting(fds, with, std::process::id() as libc::pid_t)
    }

    fn start_waiting(
        fds: &[RawFd],
        with: RawFd,
        after_exec_of: libc::pid_t,
    ) -> io::Result<ReplacingTask> {
        let mut stack = ChildStack::new(REPLACING_STACK)?;
        let order = Box::new(Replacements {
            fds: fds.into(),
            with,
            after_exec_of,
        });
        let arg = (&*order as *const Replacements)
            .cast_mut()
            .cast::<libc::c_void>();
        let flags = libc::CLONE_VM | libc::CLONE_FILES | libc::CLONE_UNTRACED;
        // SAFETY: `replace` makes only raw system calls on the numbers in
        // `order` and writes no memory but its own stack (a system call
        // fails only on a bad number, which the caller's owned
        // descriptors are not, so not even errno); it never returns into
        // Rust code (it exits); `order` and `stack` are kept in the
        // returned value until the child is reaped.
        let pid = unsafe { libc::clone(replace, stack.top(), flags, arg) };
        if pid == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(ReplacingTask {
            pid,
            _stack: stack,
            _order: order,
        })
    }

    /// Its pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

/// Reaps replacing task `pid` if it has ended, without waiting: `Some(true)`
/// once it ended having replaced everything, `Some(false)` if it was
/// killed first, `None` while it runs (or waits in a close).
pub fn reap_replacing(pid: i32) -> Option<bool> {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let flags = WaitPidFlag::WNOHANG | WaitPidFlag::__WCLONE;
    match waitpid(nix::unistd::Pid::from_raw(pid), Some(flags)) {
        Ok(WaitStatus::Exited(_, code)) => Some(code == 0),
        Ok(WaitStatus::Signaled(..)) => Some(false),
        Ok(_) => None,
        // Not our child (any more): nothing is left to wait for.
        Err(_) => Some(false),
    }
}

/// The replacing task's body (see [`ReplacingTask`]).
extern "C" fn replace(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Replacements` the creator keeps alive until
    // this task is reaped; it is only read.
    let order = unsafe { &*(arg as *const Replacements) };
    let all: u64 = !0;
    // SAFETY: blocks every signal this task can block (the daemon's
    // handlers are no business of it); the mask is 8 bytes, as the
    // kernel's sigset, and valid across the call.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_BLOCK,
            &all as *const u64,
            std::ptr::null::<u64>(),
            8usize,
        )
    };
    if order.after_exec_of != 0 {
        // SAFETY: getpid has no arguments.
        let own = unsafe { libc::syscall(libc::SYS_getpid) };
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: EXEC_POLL_NS,
        };
        let mut polls = 0;
        loop {
            // SAFETY: kcmp compares the two processes' tables by their
            // ids; no memory is passed. 0: still shared; 1 or 2: the
            // creator has a table of its own, its exec's.
            let same = unsafe {
                libc::syscall(libc::SYS_kcmp, order.after_exec_of, own, KCMP_FILES, 0, 0)
            };
            if same > 0 {
                break;
            }
            polls += 1;
            // A failure (no kcmp, the creator gone) leaves the table as
            // it is: only a table known to be left behind is emptied.
            if same < 0 || polls > EXEC_POLLS {
                // No exec: the table is still the creator's.
                // SAFETY: ends this task alone.
                unsafe { libc::syscall(libc::SYS_exit_group, 0) };
            }
            // SAFETY: `pause` lives on this task's stack across the call.
            unsafe {
                libc::syscall(
                    libc::SYS_nanosleep,
                    &pause,
                    std::ptr::null::<libc::timespec>(),
                )
            };
        }
    }
    for &fd in order.fds.iter() {
        // SAFETY: two open descriptor numbers of the shared table; dup3
        // replaces the entry atomically and closes what it held here.
        // Without close-on-exec: a number the daemon keeps across an
        // in-place restart (it hands over the batches still being let go
        // of) stays open whichever of the two comes first.
        unsafe { libc::syscall(libc::SYS_dup3, order.with, fd, 0) };
    }
    // SAFETY: ends this task alone (it is its own thread group).
    unsafe { libc::syscall(libc::SYS_exit_group, 0) };
    0
}

/// What [`spawn_clean`]'s child does, shared with it (it runs in the
/// caller's memory while the caller waits).
struct CleanSpawn {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// What the child gets as descriptors 0, 1 and 2 (-1: the caller's).
    slots: [libc::c_int; 3],
    /// Where the child put the caller's 0, 1 and 2 aside in the shared
    /// table (-1: not moved, or not open), for the caller to put back.
    saved: [libc::c_int; 3],
    /// The child moves its descriptor 0 to 3 and opens /dev/null as 0.
    zero_to_three: bool,
    /// SCHED_FIFO at this priority (reset on fork), else normal priority.
    fifo: libc::c_int,
    /// The errno of the step that failed, if one did.
    error: libc::c_int,
}

/// Starts `program` with `argv` and `envp` (NULL-terminated) and with no
/// descriptor of the caller's but `slots` as 0, 1 and 2 (each -1 keeps
/// the caller's), moved to 3 with /dev/null as 0 when `zero_to_three`,
/// at SCHED_FIFO priority `fifo` (reset on fork) or, with `None`, at
/// normal priority; returns its pid once it has exec'd (or failed to).
///
/// A fork would copy every descriptor the caller holds, users' too, and
/// closing those copies (close-on-exec at the exec, or at the exit) asks
/// the server of each FUSE file to flush, which may never answer. So the
/// child starts sharing the caller's table (`CLONE_FILES`, and
/// `CLONE_VM | CLONE_VFORK`: the caller waits), puts `slots` in 0 to 2
/// (the caller's own there are kept aside and put back afterwards), then
/// takes a table of its own holding only 0 to 2
/// (`close_range(3, ~0, CLOSE_RANGE_UNSHARE)`, which copies nothing from
/// 3 up, so closes nothing of the caller's), and execs.
///
/// Only in a single-threaded caller: another thread would see 0 to 2
/// changed meanwhile. The caller's 0 to 2 must be its own files (scored
/// keeps them open, so no user's descriptor is ever given those numbers).
pub fn spawn_clean(
    program: &std::ffi::CStr,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    slots: [RawFd; 3],
    zero_to_three: bool,
    fifo: Option<i32>,
) -> io::Result<i32> {
    if argv.last() != Some(&std::ptr::null()) || envp.last() != Some(&std::ptr::null()) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut stack = ChildStack::new(64 * 1024)?;
    let mut order = CleanSpawn {
        program: program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        slots,
        saved: [-1; 3],
        zero_to_three,
        fifo: fifo.unwrap_or(0),
        error: 0,
    };
    let arg = (&mut order as *mut CleanSpawn).cast::<libc::c_void>();
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD;
    // SAFETY: the caller waits (CLONE_VFORK) until the child has exec'd or
    // exited, so the child alone runs meanwhile; it makes only system
    // calls on the pointers of `order`, which outlives the call (as do
    // the strings `argv` and `envp` point to, the caller's), writes only
    // `order` and its own stack, and never returns into Rust code.
    let pid = unsafe { libc::clone(spawn_clean_child, stack.top(), flags, arg) };
    let cloned = if pid == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(pid)
    };
    // Put the caller's 0 to 2 back (closing the child's copies there).
    for (target, saved) in order.saved.iter().enumerate() {
        let target = target as libc::c_int;
        if *saved >= 0 {
            // SAFETY: `saved` is the caller's own descriptor the child
            // duplicated; dup3 puts it back in place.
            unsafe {
                libc::dup3(*saved, target, 0);
                libc::close(*saved);
            }
        } else if order.slots[target as usize] >= 0 {
            // SAFETY: the caller had no descriptor `target` (nothing was
            // put aside): the child's copy there is closed.
            unsafe { libc::close(target) };
        }
    }
    let pid = cloned?;
    if order.error != 0 {
        // The child failed before its exec and exited (status 127): reap it.
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        return Err(io::Error::from_raw_os_error(order.error));
    }
    Ok(pid)
}

/// [`spawn_clean`]'s child.
extern "C" fn spawn_clean_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the caller's `CleanSpawn`, valid while the caller
    // waits for this child, which alone runs meanwhile.
    let order = unsafe { &mut *(arg as *mut CleanSpawn) };
    let fail = |order: &mut CleanSpawn| -> ! {
        // SAFETY: errno of this task (the caller's, which waits) holds
        // the failure; `_exit` ends the child at once.
        unsafe {
            order.error = (*libc::__errno_location()).max(1);
            libc::_exit(127)
        }
    };
    for target in 0..3 {
        let wanted = order.slots[target as usize];
        if wanted < 0 {
            continue;
        }
        // SAFETY: fcntl and dup3 on descriptor numbers of the shared
        // table; the caller waits.
        unsafe {
            let saved = libc::fcntl(target, libc::F_DUPFD_CLOEXEC, 3);
            if saved >= 0 {
                order.saved[target as usize] = saved;
            } else if libc::fcntl(target, libc::F_GETFD) >= 0 {
                // Open, but not put aside: it would be lost.
                fail(order);
            }
            if libc::dup3(wanted, target, 0) < 0 {
                fail(order);
            }
        }
    }
    // SAFETY: the table of our own holds 0 to 2 alone; nothing from 3 up
    // is copied, so nothing of the caller's is closed here.
    if unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            !0u32,
            libc::CLOSE_RANGE_UNSHARE,
        )
    } != 0
    {
        fail(order);
    }
    if order.zero_to_three {
        // SAFETY: descriptors of this child's own table; the path is a
        // NUL-terminated string in static memory.
        unsafe {
            if libc::dup3(0, 3, 0) < 0 {
                fail(order);
            }
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            if null < 0 || libc::dup3(null, 0, 0) < 0 {
                fail(order);
            }
            libc::close(null);
        }
    }
    let (policy, priority) = if order.fifo > 0 {
        (libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, order.fifo)
    } else {
        (libc::SCHED_OTHER, 0)
    };
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` lives across the call. Refused real-time priority
    // leaves the child at the caller's; normal priority is never refused.
    unsafe { libc::sched_setscheduler(0, policy, &param) };
    // SAFETY: the strings are the caller's, NUL-terminated, the arrays
    // NULL-terminated; execve returns only on failure.
    unsafe { libc::execve(order.program, order.argv, order.envp) };
    fail(order)
}
