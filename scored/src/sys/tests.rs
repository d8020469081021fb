//! Unit tests of the system calls the daemon wraps.

use super::*;
use std::os::fd::AsFd;

/// A replacing task lets go of a descriptor in the caller's own table
/// (the read end then sees the pipe's end) and leaves the number taken,
/// holding the replacement, until the caller closes it.
#[test]
fn a_replacing_task_lets_go_of_the_callers_copy() {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    let task = ReplacingTask::start(&[write.as_raw_fd()], null.as_raw_fd()).expect("start");
    let started = std::time::Instant::now();
    let ended = loop {
        if let Some(ended) = reap_replacing(task.pid()) {
            break ended;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the task never ended"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(ended, "the task was killed");
    let mut byte = [0u8; 1];
    assert_eq!(nix::unistd::read(&read, &mut byte).expect("read"), 0);
    let (_, _, mode) = cached_identity(write.as_fd()).expect("statx");
    assert_eq!(
        mode & libc::S_IFMT,
        libc::S_IFCHR,
        "the number holds /dev/null"
    );
    drop(task);
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
