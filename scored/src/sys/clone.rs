//! A child that shares its creator's memory until its exec
//! (`clone(CLONE_VM | CLONE_VFORK)`), the stack it runs on, and the futex
//! on which the creator's loop waits for its pid. Part of the daemon's
//! `sys` module: each call wrapped once, with `unsafe` only here and in the
//! rest of `sys`.

use std::io;
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
