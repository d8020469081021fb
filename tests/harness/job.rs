//! A job submitted through the real scrun: its output, its exit status,
//! and its processes found by the tag the harness puts in its environment.

use std::io::{BufRead, BufReader, Read};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::wait_until;

/// A scrun running in the background.
pub struct Job {
    pub(crate) child: Option<Child>,
    pub(crate) lines: Vec<String>,
    pub(crate) reader: Option<std::sync::mpsc::Receiver<String>>,
}

impl Job {
    /// Starts `scrun` (a command from [`crate::Daemon::scrun`] or
    /// [`crate::Daemon::scrun_as`]) in the background with its output piped.
    pub fn start(scrun: &mut std::process::Command) -> Job {
        let child = scrun
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn scrun");
        Job {
            child: Some(child),
            lines: Vec::new(),
            reader: None,
        }
    }

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
        // What it printed stays readable after its end.
        self.pump();
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
            let ours = std::os::fd::AsFd::as_fd(&pipe)
                .try_clone_to_owned()
                .expect("dup scrun's stderr");
            let (sender, receiver) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                let _ = sender.send(text);
            });
            match receiver.recv_timeout(Duration::from_secs(10)) {
                Ok(text) => stderr = text,
                Err(_) => panic!(
                    "scrun's stderr stayed open after it exited: a job process outlived its job; \
                     held by {:#?}",
                    crate::pipe_holders(std::os::fd::AsFd::as_fd(&ours))
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
