//! What the tests of scrun as the shell's child need besides a daemon: a
//! command that inherits none of the test process's stray descriptors
//! (or a test process whose own are all close-on-exec), and the private
//! daemon a scrun starts under a runtime directory.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::{alive, wait_until};

/// Keeps what the test process inherited beyond its standard descriptors
/// (a terminal's or a build tool's pipes) from `command`: scrun passes
/// every descriptor it inherits on to its job, as a shell would, and a test
/// asserts what the job gets from what the test gives it.
pub fn without_stray_descriptors(command: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure makes one system call (close_range with
    // CLOSE_RANGE_CLOEXEC), which allocates nothing and takes no lock,
    // between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        })
    }
}

/// Marks every descriptor of the calling process above 2 close-on-exec,
/// so that what it starts inherits none of them without a `pre_exec` step
/// (which makes std fork the whole process rather than posix_spawn).
pub fn seal_own_descriptors() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on
    // the caller's own descriptors.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    assert_eq!(ret, 0, "close_range: {}", std::io::Error::last_os_error());
}

/// The pid of the private daemon that scrun started under the runtime
/// directory `runtime` (its `XDG_RUNTIME_DIR`), if one runs: read from its
/// state directory, and checked against its command line.
pub fn private_daemon_pid(runtime: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(runtime.join("scored-private/state/daemon")).ok()?;
    let pid: i32 = text.split_whitespace().nth(1)?.parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    let socket = runtime.join("scored.sock");
    (cmdline.contains("--single-user") && cmdline.contains(&*socket.to_string_lossy()))
        .then_some(pid)
}

/// Ends the private daemon under `runtime` (see [`private_daemon_pid`]),
/// which a test started through scrun, and waits for it to exit.
pub fn end_private_daemon(runtime: &Path) {
    if let Some(pid) = private_daemon_pid(runtime) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
        wait_until(Duration::from_secs(20), || !alive(pid));
    }
}
