//! The end-to-end harness: a real scored on a temporary socket, driven by
//! the real scrun and sc_console binaries, with what the kernel says about
//! the job processes (`/proc/PID/stat`) as the witness.
//!
//! Each test gets a sandbox directory (hosts file, rc file, state directory,
//! socket, daemon log) named after a counter; its daemon is stopped when the
//! [`Daemon`] is dropped, and its log is printed if the test failed. Job
//! processes are found by a tag the harness puts in scrun's environment, so
//! parallel tests never mistake each other's processes.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

/// How to start a daemon.
#[derive(Default, Clone)]
pub struct DaemonBuilder {
    /// The daemon's log filter; debug by default, for failing tests' logs.
    log_filter: Option<String>,
    hosts: Option<String>,
    rc: Option<String>,
    timeslice: Option<String>,
    args: Vec<String>,
    nofile: Option<(u64, u64)>,
    ignored: Vec<i32>,
    blocked: Vec<i32>,
    terminal: Option<PathBuf>,
    program: Option<PathBuf>,
    env: Vec<(String, String)>,
}

impl DaemonBuilder {
    /// Sets the daemon's log filter (`SCORED_LOG`), e.g. `scored=info` for
    /// measurements, where writing debug lines would be part of what is timed.
    pub fn log(mut self, filter: &str) -> Self {
        self.log_filter = Some(filter.to_string());
        self
    }

    /// Uses this hosts database text.
    pub fn hosts(mut self, text: &str) -> Self {
        self.hosts = Some(text.to_string());
        self
    }

    /// Uses this rc file text.
    pub fn rc(mut self, text: &str) -> Self {
        self.rc = Some(text.to_string());
        self
    }

    /// Sets the time slice.
    pub fn timeslice(mut self, slice: &str) -> Self {
        self.timeslice = Some(slice.to_string());
        self
    }

    /// Adds a flag.
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_string());
        self
    }

    /// Sets an environment variable of the daemon (test hooks such as
    /// `SCORED_TEST_PANIC_ON`).
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Runs this scored binary instead of the workspace's.
    pub fn program(mut self, path: &Path) -> Self {
        self.program = Some(path.to_path_buf());
        self
    }

    /// Starts the daemon with this descriptor limit (soft, hard).
    pub fn nofile(mut self, soft: u64, hard: u64) -> Self {
        self.nofile = Some((soft, hard));
        self
    }

    /// Starts the daemon with these signals ignored, as `nohup` or a
    /// script's `&` would start it.
    pub fn ignoring(mut self, signals: &[i32]) -> Self {
        self.ignored.extend_from_slice(signals);
        self
    }

    /// Starts the daemon with these signals blocked, as a parent that
    /// reads its signals through a signalfd (scrun) leaves them.
    pub fn blocking(mut self, signals: &[i32]) -> Self {
        self.blocked.extend_from_slice(signals);
        self
    }

    /// Starts the daemon on this terminal (a pseudo-terminal's slave,
    /// `/dev/pts/N`) as its controlling terminal and stdin, as a daemon
    /// started by hand from a shell (`sudo scored -v`) has one.
    pub fn terminal(mut self, path: &Path) -> Self {
        self.terminal = Some(path.to_path_buf());
        self
    }

    /// The command that would start the daemon in `sandbox`.
    pub fn command(&self, sandbox: &Sandbox) -> Command {
        let mut command = match &self.terminal {
            // util-linux setsid(1) execs scored as the leader of a new
            // session whose controlling terminal is its stdin.
            Some(_) => {
                let mut command = Command::new("setsid");
                command
                    .arg("--ctty")
                    .arg(self.program.clone().unwrap_or_else(|| bin("scored")));
                command
            }
            None => Command::new(self.program.clone().unwrap_or_else(|| bin("scored"))),
        };
        command
            .arg("--socket")
            .arg(sandbox.path.join("s.sock"))
            .arg("--state-dir")
            .arg(sandbox.path.join("state"))
            .current_dir(&sandbox.path)
            .env_remove("SCORED_SOCKET")
            .env(
                "SCORED_LOG",
                self.log_filter.as_deref().unwrap_or("scored=debug"),
            );
        if let Some(text) = &self.hosts {
            command
                .arg("--hosts")
                .arg(sandbox.write("scorehosts.db", text));
        }
        if let Some(text) = &self.rc {
            command.arg("--rc").arg(sandbox.write("scored.rc", text));
        }
        if let Some(slice) = &self.timeslice {
            command.arg("--timeslice").arg(slice);
        }
        command.args(&self.args);
        for (key, value) in &self.env {
            command.env(key, value);
        }
        if let Some((soft, hard)) = self.nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure only calls setrlimit, a system call that
            // allocates nothing and takes no lock, between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    nix::sys::resource::setrlimit(
                        nix::sys::resource::Resource::RLIMIT_NOFILE,
                        soft,
                        hard,
                    )
                    .map_err(std::io::Error::from)
                });
            }
        }
        if !self.ignored.is_empty() {
            use std::os::unix::process::CommandExt;
            let ignored = self.ignored.clone();
            // SAFETY: the closure only calls signal(2) with SIG_IGN, which
            // allocates nothing and takes no lock, between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    for &signal in &ignored {
                        if libc::signal(signal, libc::SIG_IGN) == libc::SIG_ERR {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                });
            }
        }
        if !self.blocked.is_empty() {
            use std::os::unix::process::CommandExt;
            let mut set = nix::sys::signal::SigSet::empty();
            for &signal in &self.blocked {
                if let Ok(signal) = nix::sys::signal::Signal::try_from(signal) {
                    set.add(signal);
                }
            }
            // SAFETY: the closure only calls sigprocmask on a set made
            // before the fork; it allocates nothing and takes no lock.
            unsafe {
                command.pre_exec(move || set.thread_block().map_err(std::io::Error::from));
            }
        }
        command
    }

    /// Starts the daemon and waits until it answers.
    pub fn start(self) -> Daemon {
        let sandbox = Sandbox::new();
        let log = sandbox.path.join("scored.log");
        let tag = sandbox
            .path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let mut daemon = Daemon {
            child: None,
            socket: sandbox.path.join("s.sock"),
            log,
            tag,
            sandbox,
            builder: self,
        };
        daemon.launch();
        daemon
    }
}

/// A running scored.
pub struct Daemon {
    child: Option<Child>,
    /// Its socket.
    pub socket: PathBuf,
    log: PathBuf,
    /// The value of `SCORED_TEST_TAG` in its jobs' environment.
    pub tag: String,
    /// Its sandbox.
    pub sandbox: Sandbox,
    builder: DaemonBuilder,
}

impl Daemon {
    /// Starts the daemon process in the sandbox (appending to its log) and
    /// waits until it answers.
    fn launch(&mut self) {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open log");
        let stdin = match &self.builder.terminal {
            Some(path) => Stdio::from(
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .expect("open the daemon's terminal"),
            ),
            None => Stdio::null(),
        };
        let mut command = self.builder.command(&self.sandbox);
        command
            .stdin(stdin)
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file);
        // A binary just copied into place may be open for writing in a
        // child that another test thread forked meanwhile, until that child
        // execs: the kernel then refuses to run it (ETXTBSY) for a moment.
        let mut attempts = 0;
        let child = loop {
            match command.spawn() {
                Err(error) if error.raw_os_error() == Some(libc::ETXTBSY) && attempts < 100 => {
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other.expect("start scored"),
            }
        };
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten())
            {
                panic!("scored exited at start ({status}):\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "scored did not start listening:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts a new daemon in the same sandbox (same socket, state
    /// directory, hosts and rc file) after this one has gone.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    /// A daemon with the embedded default configuration.
    pub fn start() -> Daemon {
        DaemonBuilder::default().start()
    }

    /// A builder.
    pub fn builder() -> DaemonBuilder {
        DaemonBuilder::default()
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A scrun command aimed at this daemon, tagged, in the sandbox.
    pub fn scrun(&self, args: &[&str]) -> Command {
        let mut command = Command::new(bin("scrun"));
        command
            .args(args)
            .env("SCORED_SOCKET", &self.socket)
            .env("SCORED_TEST_TAG", &self.tag)
            .env_remove("SCORE_OPTIONS")
            .current_dir(&self.sandbox.path)
            .stdin(Stdio::null());
        command
    }

    /// Runs scrun to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.scrun(args).output().expect("run scrun")
    }

    /// Starts scrun in the background with its output piped.
    pub fn spawn(&self, args: &[&str]) -> Job {
        let child = self
            .scrun(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn scrun");
        Job {
            child: Some(child),
            lines: Vec::new(),
            reader: None,
        }
    }

    /// Runs a console line through sc_console.
    pub fn console(&self, line: &str) -> Output {
        Command::new(bin("sc_console"))
            .arg("--socket")
            .arg(&self.socket)
            .arg("-c")
            .arg(line)
            .stdin(Stdio::null())
            .output()
            .expect("run sc_console")
    }

    /// Runs a console line that must succeed; returns its output.
    pub fn ok(&self, line: &str) -> String {
        let output = self.console(line);
        assert!(
            output.status.success(),
            "sc_console -c '{line}' failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The JSON form of a console line's reply.
    pub fn json(&self, line: &str) -> serde_json::Value {
        let output = Command::new(bin("sc_console"))
            .arg("--socket")
            .arg(&self.socket)
            .arg("--json")
            .arg("-c")
            .arg(line)
            .stdin(Stdio::null())
            .output()
            .expect("run sc_console");
        serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
            panic!(
                "sc_console --json -c '{line}' printed no JSON ({error}): {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }

    /// A field of `job ID` in JSON.
    pub fn job_field(&self, job: u64, field: &str) -> serde_json::Value {
        self.json(&format!("job {job}"))[field].clone()
    }

    /// Processes of this daemon's job `job`, found by their environment.
    pub fn job_pids(&self, job: u64) -> Vec<i32> {
        tagged_processes(&self.tag, Some(job))
    }

    /// Every job process of this daemon.
    pub fn all_job_pids(&self) -> Vec<i32> {
        tagged_processes(&self.tag, None)
    }

    /// Waits until `job` has `n` processes; returns them.
    pub fn wait_job_pids(&self, job: u64, n: usize) -> Vec<i32> {
        let mut pids = Vec::new();
        let found = wait_until(Duration::from_secs(20), || {
            pids = self.job_pids(job);
            pids.len() >= n
        });
        assert!(
            found,
            "job {job} never had {n} processes (has {pids:?})\n{}",
            self.log()
        );
        pids
    }

    /// Sends SIGTERM and waits for the daemon to exit; returns its status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the daemon with SIGKILL and reaps it.
    pub fn kill_hard(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the daemon with SIGKILL and does not reap it: it stays in /proc
    /// as a zombie (state Z, same pid and start time) until the returned
    /// child is waited for.
    pub fn kill_leaving_zombie(&mut self) -> Child {
        let child = self.child.take().expect("the daemon is running");
        let pid = child.id() as i32;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        assert!(
            wait_until(Duration::from_secs(10), || proc_stat(pid)
                .is_some_and(|stat| stat.state == 'Z')),
            "scored (pid {pid}) did not become a zombie"
        );
        child
    }

    /// Starts a new daemon in the same sandbox; the previous one must be gone
    /// (see [`Daemon::kill_hard`], [`Daemon::kill_leaving_zombie`]).
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the previous daemon still runs");
        self.launch();
    }

    /// Waits for the daemon to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!(
                "----- scored log ({}) -----\n{}",
                self.log.display(),
                self.log()
            );
        }
        // Whatever happened, leave no job process behind.
        for pid in self.all_job_pids() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// A scrun running in the background.
pub struct Job {
    child: Option<Child>,
    lines: Vec<String>,
    reader: Option<std::sync::mpsc::Receiver<String>>,
}

impl Job {
    /// scrun's pid.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |child| child.id() as i32)
    }

    fn pump(&mut self) {
        if self.reader.is_none() {
            if let Some(stdout) = self.child.as_mut().and_then(|child| child.stdout.take()) {
                let (sender, receiver) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                        if sender.send(line).is_err() {
                            break;
                        }
                    }
                });
                self.reader = Some(receiver);
            }
        }
        if let Some(reader) = &self.reader {
            while let Ok(line) = reader.try_recv() {
                self.lines.push(line);
            }
        }
    }

    /// Waits until the job printed `n` lines starting with `prefix`; returns the rest of those lines.
    pub fn wait_lines(&mut self, prefix: &str, n: usize) -> Vec<String> {
        let mut found = Vec::new();
        let ok = wait_until(Duration::from_secs(20), || {
            self.pump();
            found = self
                .lines
                .iter()
                .filter_map(|line| line.strip_prefix(prefix))
                .map(str::to_string)
                .collect();
            found.len() >= n
        });
        assert!(
            ok,
            "the job never printed {n} lines starting with {prefix:?}; it printed {:?}",
            self.lines
        );
        found
    }

    /// How many lines starting with `prefix` the job has printed so far,
    /// without waiting.
    pub fn count_lines(&mut self, prefix: &str) -> usize {
        self.pump();
        self.lines
            .iter()
            .filter(|line| line.starts_with(prefix))
            .count()
    }

    /// The lines starting with `prefix` printed so far (the rest of each),
    /// without waiting.
    pub fn lines_with(&mut self, prefix: &str) -> Vec<String> {
        self.pump();
        self.lines
            .iter()
            .filter_map(|line| line.strip_prefix(prefix))
            .map(str::to_string)
            .collect()
    }

    /// The pids the job's processes printed (`pid N` lines).
    pub fn wait_pids(&mut self, n: usize) -> Vec<i32> {
        self.wait_lines("pid ", n)
            .iter()
            .filter_map(|text| text.trim().parse().ok())
            .collect()
    }

    /// Sends a signal to scrun.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal);
    }

    /// Waits for scrun to exit; returns its status and stderr.
    pub fn wait(&mut self, timeout: Duration) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().expect("job still running");
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("scrun did not exit within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        // A job process that outlived its job may still hold scrun's stderr
        // open: read what is there, but never wait for it forever.
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let (sender, receiver) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                let _ = sender.send(text);
            });
            match receiver.recv_timeout(Duration::from_secs(10)) {
                Ok(text) => stderr = text,
                Err(_) => panic!(
                    "scrun's stderr stayed open after it exited: a job process outlived its job"
                ),
            }
        }
        (status, stderr)
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
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

/// The fields of `/proc/PID/stat` the tests look at.
#[derive(Debug, Clone, Copy)]
pub struct ProcStat {
    /// One-letter state.
    pub state: char,
    /// Process group.
    pub pgrp: i32,
    /// Session.
    pub session: i32,
    /// utime + stime in clock ticks.
    pub cpu_ticks: u64,
}

/// Whether the kernel shows `pid` stopped (state `T`).
pub fn stopped(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|stat| stat.state == 'T')
}

/// Reads `/proc/PID/stat`, or `None` if the process is gone.
pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = text[text.rfind(')')? + 2..].split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        cpu_ticks: fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?,
    })
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|stat| stat.state != 'Z' && stat.state != 'X')
}

/// Processes whose environment carries `SCORED_TEST_TAG=tag` (and `SCORE_JOBID=job`).
pub fn tagged_processes(tag: &str, job: Option<u64>) -> Vec<i32> {
    let tag_entry = format!("SCORED_TEST_TAG={tag}");
    let job_entry = job.map(|job| format!("SCORE_JOBID={job}"));
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
                return false;
            };
            let vars: Vec<&[u8]> = environ.split(|&b| b == 0).collect();
            vars.contains(&tag_entry.as_bytes())
                && match &job_entry {
                    Some(entry) => vars.contains(&entry.as_bytes()),
                    // Job processes, not the scrun that carries the tag too.
                    None => vars.iter().any(|var| var.starts_with(b"SCORE_JOBID=")),
                }
                && alive(*pid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// stdout of an output as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// stderr of an output as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The exit code of an output (`None` if killed by a signal).
pub fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

/// A hosts database of two hosts, on two CPUs when the machine has them,
/// so that tests do not depend on how many CPUs CI offers.
pub fn two_hosts() -> String {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let cpus = scored::units::CpuSet::parse(online.trim())
        .map(|set| set.cpus().to_vec())
        .unwrap_or_default();
    match cpus.as_slice() {
        [first, second, ..] => format!("host0 cpus={first}\nhost1 cpus={second}\n"),
        [only] => format!("host0 cpus={only}\nhost1 cpus={only}\n"),
        [] => "host0\nhost1\n".to_string(),
    }
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

/// A local user made for the tests.
#[derive(Debug, Clone)]
pub struct TestUser {
    /// Its login name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
}

/// The users and group of the tests that need several users: `a` belongs
/// to `group` as a supplementary group, `b` does not.
#[derive(Debug, Clone)]
pub struct TestUsers {
    /// User `scored-test-a`, in the group.
    pub a: TestUser,
    /// User `scored-test-b`, not in the group.
    pub b: TestUser,
    /// Group `scored-test-g`: its gid.
    pub group: u32,
}

/// The name of the group only user `a` is in.
pub const TEST_GROUP: &str = "scored-test-g";

/// Runs an administration command, retrying while another process holds
/// the lock of the user database (parallel test binaries may add users too).
fn admin(program: &str, args: &[&str]) {
    let mut last = String::new();
    for _ in 0..50 {
        let output = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|error| panic!("cannot run {program}: {error}"));
        if output.status.success() {
            return;
        }
        last = String::from_utf8_lossy(&output.stderr).into_owned();
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{program} {args:?} failed: {last}");
}

fn lookup_user(name: &str) -> Option<TestUser> {
    let user = nix::unistd::User::from_name(name).ok().flatten()?;
    Some(TestUser {
        name: name.to_string(),
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    })
}

fn supplementary_groups(name: &str) -> Vec<u32> {
    let output = Command::new("id")
        .args(["-G", name])
        .output()
        .expect("run id");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|gid| gid.parse().ok())
        .collect()
}

/// Creates (once, idempotently) the test users and group. `None`, with a
/// printed reason, when the tests do not run as root.
pub fn test_users(test: &str) -> Option<TestUsers> {
    if !is_root() {
        println!("skipped: {test} needs root (to create users and run their jobs)");
        return None;
    }
    static USERS: OnceLock<TestUsers> = OnceLock::new();
    let users = USERS.get_or_init(|| {
        if nix::unistd::Group::from_name(TEST_GROUP)
            .ok()
            .flatten()
            .is_none()
        {
            admin("groupadd", &["-f", TEST_GROUP]);
        }
        let group = nix::unistd::Group::from_name(TEST_GROUP)
            .ok()
            .flatten()
            .expect("the test group exists")
            .gid
            .as_raw();
        for (name, in_group) in [("scored-test-a", true), ("scored-test-b", false)] {
            if lookup_user(name).is_none() {
                let mut args = vec!["-M", "-U", "-s", "/usr/sbin/nologin"];
                if in_group {
                    args.extend(["-G", TEST_GROUP]);
                }
                args.push(name);
                admin("useradd", &args);
            }
            // A user left by an earlier run may have other groups: fix them.
            let member = supplementary_groups(name).contains(&group);
            if in_group && !member {
                admin("usermod", &["-a", "-G", TEST_GROUP, name]);
            } else if !in_group && member {
                admin("gpasswd", &["-d", name, TEST_GROUP]);
            }
        }
        TestUsers {
            a: lookup_user("scored-test-a").expect("user a exists"),
            b: lookup_user("scored-test-b").expect("user b exists"),
            group,
        }
    });
    Some(users.clone())
}

/// `program args` run as `user` with the user's primary and supplementary
/// groups (util-linux `setpriv --init-groups`).
pub fn command_as(user: &TestUser, program: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("setpriv");
    command
        .arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.gid))
        .arg("--init-groups")
        .arg("--")
        .arg(program)
        .args(args)
        .stdin(Stdio::null());
    command
}

impl Daemon {
    /// A tagged scrun aimed at this daemon, run as `user`.
    pub fn scrun_as(&self, user: &TestUser, args: &[&str]) -> Command {
        let mut command = command_as(user, &bin("scrun"), args);
        command
            .env("SCORED_SOCKET", &self.socket)
            .env("SCORED_TEST_TAG", &self.tag)
            .env_remove("SCORE_OPTIONS")
            .current_dir(&self.sandbox.path);
        command
    }

    /// Starts scrun as `user` in the background with its output piped.
    pub fn spawn_as(&self, user: &TestUser, args: &[&str]) -> Job {
        let child = self
            .scrun_as(user, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn scrun as a test user");
        Job {
            child: Some(child),
            lines: Vec::new(),
            reader: None,
        }
    }

    /// Runs a console line through sc_console as `user`.
    pub fn console_as(&self, user: &TestUser, line: &str) -> Output {
        let socket = self.socket.display().to_string();
        command_as(user, &bin("sc_console"), &["--socket", &socket, "-c", line])
            .output()
            .expect("run sc_console as a test user")
    }

    /// The daemon's open descriptors, by number.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|entries| entries.count())
            .unwrap_or(0)
    }

    /// The daemon's open descriptors and what they are, for messages.
    pub fn fd_listing(&self) -> String {
        let Ok(entries) = std::fs::read_dir(format!("/proc/{}/fd", self.pid())) else {
            return String::new();
        };
        let mut lines: Vec<String> = entries
            .flatten()
            .map(|entry| {
                let target = std::fs::read_link(entry.path()).unwrap_or_default();
                format!(
                    "{} -> {}",
                    entry.file_name().to_string_lossy(),
                    target.display()
                )
            })
            .collect();
        lines.sort();
        lines.join("\n")
    }

    /// Whether the daemon process is still running.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }
}

/// Two 2-process spinning gang jobs (jobs 1 and 2) and a 1-process one
/// held by the operator (job 3), once some of their processes have been
/// seen stopped by the gang switch or the hold: the scrun of each and
/// every rank's pid.
pub fn gang_pair_and_held_job(daemon: &Daemon) -> (Vec<Job>, Vec<i32>) {
    let mut jobs = Vec::new();
    let mut pids = Vec::new();
    for _ in 0..2 {
        let mut job = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
        pids.extend(job.wait_pids(2));
        jobs.push(job);
    }
    let mut held = daemon.spawn(&["-nodes=1", &testprog(), "spin", "0"]);
    pids.extend(held.wait_pids(1));
    daemon.ok("suspend 3");
    assert!(wait_until(Duration::from_secs(10), || pids
        .iter()
        .any(|pid| stopped(*pid))));
    jobs.push(held);
    (jobs, pids)
}

/// Fills the job journal of a stopped daemon's state directory with ended
/// jobs, as a long-lived daemon leaves it: `journal.1` and `journal` of
/// about `bytes_per_file` each, every job admitted, started and ended by
/// uid 0 with records of the size scored writes. Returns the number of jobs.
pub fn write_full_journal(state_dir: &Path, bytes_per_file: u64) -> u64 {
    use std::io::Write as _;
    // The keys of scored's `job ID` record, as the journal stores them.
    fn record(id: u64, state: &str, end: Option<f64>) -> String {
        let mut text = format!(
            r#"{{"id":{id},"user":"root","uid":0,"state":"{state}","queue":1,"queues":[1],"cluster":"default","hosts":["host0","host1"],"procs":2,"command":"sh -c exit 0","held":"no","cpu":0.003,"wall":0.019,"run":0.019,"stopped":0.0,"wait":0.0,"switches":0,"memory":{{"host0":0,"host1":0}},"peak memory":{{"host0":2199552,"host1":2207744}},"disk":0,"peak disk":125640,"cputime limit":null,"memory limit":null,"disk limit":null,"residency":0.003"#
        );
        if let Some(end) = end {
            text.push_str(&format!(
                r#","exit":0,"reason":"all processes exited with status 0","ended":{end}"#
            ));
        }
        text.push('}');
        text
    }
    let mut id = 0u64;
    for name in ["journal.1", "journal"] {
        let file = std::fs::File::create(state_dir.join(name)).expect("create the journal");
        let mut out = std::io::BufWriter::new(file);
        let mut written = 0u64;
        while written < bytes_per_file {
            id += 1;
            let t = 1_795_000_000.0 + id as f64;
            let lines = format!(
                "{{\"t\":{t},\"event\":\"admitted\",\"job\":{id},\"submitted\":{t},\"record\":{}}}\n\
                 {{\"t\":{t},\"event\":\"started\",\"job\":{id}}}\n\
                 {{\"t\":{end},\"event\":\"ended\",\"job\":{id},\"record\":{}}}\n",
                record(id, "queued", None),
                record(id, "done", Some(t + 0.02)),
                end = t + 0.02,
            );
            out.write_all(lines.as_bytes()).expect("write the journal");
            written += lines.len() as u64;
        }
        out.flush().expect("write the journal");
    }
    id
}
