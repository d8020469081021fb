//! Unit tests of the system calls the daemon wraps.

use super::*;

/// An exiter waits for its release: it exits only once the caller has
/// closed the descriptor it was given, after the caller's own copies.
#[test]
fn an_exiter_exits_only_once_released() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let (pid, release) = fork_exiter().expect("fork");
    let pid = nix::unistd::Pid::from_raw(pid);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        waitpid(pid, Some(WaitPidFlag::WNOHANG)).expect("waitpid"),
        WaitStatus::StillAlive,
        "the exiter exited before its release"
    );
    drop(release);
    assert_eq!(
        waitpid(pid, None).expect("waitpid"),
        WaitStatus::Exited(pid, 0)
    );
}

/// The kernel writes back exactly the structure `raw_set_disposition`
/// hands it: no more (it would read past the end of ours), no less.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
#[test]
fn the_kernel_sigaction_is_the_size_the_kernel_uses() {
    const CANARY: u8 = 0xa5;
    let mut old = [CANARY; 64];
    // SAFETY: no new action is set; `old` has room for any kernel
    // sigaction (at most 32 bytes) and lives across the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            libc::SIGURG,
            std::ptr::null::<KernelSigaction>(),
            old.as_mut_ptr(),
            SIGSET_BYTES,
        )
    };
    assert_eq!(ret, 0, "{}", io::Error::last_os_error());
    // The kernel writes every field, the zeros of the mask last.
    let written = old
        .iter()
        .rposition(|&byte| byte != CANARY)
        .map_or(0, |at| at + 1);
    assert_eq!(written, std::mem::size_of::<KernelSigaction>());

    // SIGURG is ignored by default: setting it is harmless to the other
    // tests of this process.
    raw_set_disposition(libc::SIGURG, libc::SIG_IGN).expect("set SIGURG");
    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: no new action is set; `action` is written by the call.
    let ret = unsafe { libc::sigaction(libc::SIGURG, std::ptr::null(), &mut action) };
    assert_eq!(ret, 0, "{}", io::Error::last_os_error());
    assert_eq!(action.sa_sigaction, libc::SIG_IGN);
    raw_set_disposition(libc::SIGURG, libc::SIG_DFL).expect("reset SIGURG");
}
