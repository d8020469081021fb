//! The end-to-end harness: a real scored on a temporary socket, driven by
//! the real scrun and sc_console binaries, with what the kernel says about
//! the job processes (`/proc/PID/stat`) as the witness.
//!
//! Each test gets a sandbox directory (hosts file, rc file, state directory,
//! socket, daemon log) named after a counter; its daemon is stopped when the
//! [`Daemon`] is dropped, and its log is printed if the test failed. Job
//! processes are found by a tag the harness puts in scrun's environment, so
//! parallel tests never mistake each other's processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod harness {
    pub mod daemon;
    pub mod fixtures;
    pub mod flushes;
    pub mod hung;
    pub mod job;
    pub mod procs;
    pub mod shell;
    pub mod users;
}

pub use harness::daemon::*;
pub use harness::fixtures::*;
pub use harness::flushes::*;
pub use harness::hung::*;
pub use harness::job::*;
pub use harness::procs::*;
pub use harness::shell::*;
pub use harness::users::*;

/// The binaries of the workspace, built once per test run.
///
/// `SCORED_TEST_BIN_DIR` names another directory of built binaries to use
/// instead, unbuilt (the benchmark compares an earlier build this way).
pub fn bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        if let Some(dir) = std::env::var_os("SCORED_TEST_BIN_DIR") {
            return PathBuf::from(dir);
        }
        // The test executable lives in target/<profile>/deps.
        let exe = std::env::current_exe().expect("test executable path");
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target directory")
            .to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let mut command = Command::new(cargo);
        // The daemon with its fault injection, which the tests of the
        // recovery from a panic use; a release build has none.
        command.args([
            "build",
            "--quiet",
            "--bins",
            "--workspace",
            "--features",
            "scored/fault-injection",
        ]);
        if dir.file_name().is_some_and(|name| name == "release") {
            command.arg("--release");
        }
        let status = command.status().expect("run cargo build");
        assert!(status.success(), "building the binaries failed");
        dir
    });
    dir.join(name)
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory for one test, removed when dropped (kept if the test failed).
pub struct Sandbox {
    /// Its path.
    pub path: PathBuf,
}

impl Sandbox {
    /// Creates `/tmp/scored-e2e-PID-N` (short, so socket paths stay under 108 bytes).
    pub fn new() -> Sandbox {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("scored-e2e-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create sandbox");
        // Job processes of other users must be able to enter it.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("chmod sandbox");
        Sandbox { path }
    }

    /// Writes a file in the sandbox and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path.join(name);
        std::fs::write(&path, text).expect("write sandbox file");
        path
    }

    /// `scored` on the sandbox's socket and state directory, run from
    /// the sandbox, for a test's own arguments (a daemon refused at
    /// start-up, whose output the test reads).
    pub fn scored(&self) -> std::process::Command {
        let mut command = std::process::Command::new(bin("scored"));
        command
            .arg("--socket")
            .arg(self.path.join("s.sock"))
            .arg("--state-dir")
            .arg(self.path.join("state"))
            .current_dir(&self.path);
        command
    }
}

impl Default for Sandbox {
    fn default() -> Sandbox {
        Sandbox::new()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Polls `condition` every few milliseconds until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// stdout of an output as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The number a helper program's report gives after `name` and a space,
/// on a line of its own; `who` (the program) and the report are shown if
/// it gives none.
pub fn report_field<T: std::str::FromStr>(report: &str, who: &str, name: &str) -> T {
    report
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{who} did not say `{name}`: {report}"))
}

/// stderr of an output as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The exit code of an output (`None` if killed by a signal).
pub fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

/// The test program.
pub fn testprog() -> String {
    bin("scored-testprog").display().to_string()
}

/// Whether the tests run as root; tests that need other users or root's
/// rights print why they skip and return when not.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
