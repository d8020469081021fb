//! A real scored for one test: its sandbox files (hosts, rc, state
//! directory, socket, log), started with the flags a test asks for,
//! driven through sc_console, and stopped (its log printed if the test
//! failed) when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::{bin, command_as, proc_stat, tagged_processes, wait_until, Job, Sandbox, TestUser};

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

    /// The daemon's child processes but its zygote (which forks the
    /// jobs' keepers), its idle keepers kept for the next jobs, and its
    /// closer of users' descriptors, which may live as long as it does:
    /// the keepers of the jobs, and processes it forks for itself
    /// (removers of large trees).
    pub fn children(&self) -> Vec<i32> {
        let closer = self.closer();
        self.all_children()
            .into_iter()
            .filter(|pid| Some(*pid) != closer)
            .filter(|pid| {
                !std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
                    line.starts_with(b"scored zygote") || line.starts_with(b"scored keeper, idle")
                })
            })
            .collect()
    }

    /// How many keepers the daemon keeps idle for its next jobs: each
    /// holds nothing of a job, and the daemon one socket to it.
    pub fn idle_keepers(&self) -> usize {
        self.all_children()
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|line| line.starts_with(b"scored keeper, idle"))
            })
            .count()
    }

    /// Every child process of the daemon (its zygote, its closer, the
    /// jobs' keepers, anything else), as the kernel lists them.
    pub fn all_children(&self) -> Vec<i32> {
        std::fs::read_dir(format!("/proc/{}/task", self.pid()))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
            .flat_map(|text| {
                text.split_whitespace()
                    .filter_map(|pid| pid.parse::<i32>().ok())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The daemon's closer of users' descriptors (`scored-closer`).
    pub fn closer(&self) -> Option<i32> {
        self.all_children().into_iter().find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "scored-closer")
        })
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The daemon's directories in the cgroup hierarchies (none without
    /// cgroups): the one its log says it holds jobs in, and, beside a v1
    /// freezer one, its namesake in the v1 pids hierarchy, in the pids
    /// cgroup the daemon inherited from this process.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let log = self.log();
        let Some(base) = log
            .lines()
            .find_map(|line| line.split_once("jobs are held in cgroups path="))
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .map(PathBuf::from)
        else {
            return Vec::new();
        };
        let mut dirs = vec![base.clone()];
        let pids_root = Path::new("/sys/fs/cgroup/pids");
        if base.starts_with("/sys/fs/cgroup/freezer") && pids_root.join("cgroup.procs").exists() {
            let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
            let pids = own
                .lines()
                .find_map(|line| line.split_once(":pids:").map(|(_, path)| path.to_string()))
                .unwrap_or_default();
            if let Some(name) = base.file_name() {
                dirs.push(pids_root.join(pids.trim_start_matches('/')).join(name));
            }
        }
        dirs
    }

    /// What is left of the daemon's directories in the cgroup hierarchies
    /// (see [`Daemon::cgroup_dirs`]), each with what is in it.
    pub fn cgroups_left(&self) -> Vec<String> {
        self.cgroup_dirs()
            .into_iter()
            .filter(|dir| dir.exists())
            .map(|dir| {
                let inside: Vec<String> = std::fs::read_dir(&dir)
                    .map(|entries| {
                        entries
                            .flatten()
                            .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
                            .map(|entry| entry.file_name().to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                format!("{} {inside:?}", dir.display())
            })
            .collect()
    }

    /// A scrun command aimed at this daemon, tagged, in the sandbox.
    pub fn scrun(&self, args: &[&str]) -> Command {
        let mut command = self.scrun_spawned(args);
        crate::without_stray_descriptors(&mut command);
        command
    }

    /// [`Daemon::scrun`] without its `pre_exec` step, so that std starts
    /// it as it starts a plain command (posix_spawn: a child sharing the
    /// caller's memory until its exec), not by a fork of the whole
    /// caller: the launch benchmark times it against plain commands
    /// started alike. The caller seals its own descriptors first
    /// ([`crate::seal_own_descriptors`]).
    pub fn scrun_spawned(&self, args: &[&str]) -> Command {
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
        Job::start(&mut self.scrun(args))
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

    fn json_output(&self, line: &str) -> Output {
        Command::new(bin("sc_console"))
            .arg("--socket")
            .arg(&self.socket)
            .arg("--json")
            .arg("-c")
            .arg(line)
            .stdin(Stdio::null())
            .output()
            .expect("run sc_console")
    }

    /// The JSON form of a console line's reply.
    pub fn json(&self, line: &str) -> serde_json::Value {
        let output = self.json_output(line);
        serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
            panic!(
                "sc_console --json -c '{line}' printed no JSON ({error}): {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        })
    }

    /// A field of `job ID` in JSON.
    pub fn job_field(&self, job: u64, field: &str) -> serde_json::Value {
        self.json(&format!("job {job}"))[field].clone()
    }

    /// The state of `job ID`, or "" while the daemon does not know the job
    /// (its scrun has not submitted it yet): for waiting until a job just
    /// started in the background reaches a state.
    pub fn job_state(&self, job: u64) -> String {
        let output = self.json_output(&format!("job {job}"));
        if !output.status.success() {
            return String::new();
        }
        serde_json::from_slice::<serde_json::Value>(&output.stdout)
            .ok()
            .and_then(|reply| reply["state"].as_str().map(str::to_string))
            .unwrap_or_default()
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
