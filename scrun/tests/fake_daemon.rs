//! The real scrun binary against a fake scored: a Unix listener in the
//! test that reads scrun's submission (checking that stdin, stdout and
//! stderr arrive as descriptors) and answers with scripted replies.
//!
//! These tests pin what scrun does with each reply and signal without
//! needing a daemon; the end-to-end suite in `tests/` runs it against the
//! real one. Waits are bounded by deadlines, never fixed sleeps.

use std::io::{IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use nix::unistd::Pid;
use scored_proto::proto::{self, Accounting, EndKind, RejectKind, Reply, Request};

const TIMEOUT: Duration = Duration::from_secs(10);

/// A listening fake daemon in a directory of its own.
struct FakeDaemon {
    dir: PathBuf,
    socket: PathBuf,
    listener: UnixListener,
}

impl FakeDaemon {
    fn new() -> FakeDaemon {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        // Sockets live under the temp dir: a socket path must fit in 108 bytes.
        let dir = std::env::temp_dir().join(format!(
            "scrun-fake-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("scored.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        FakeDaemon {
            dir,
            socket,
            listener,
        }
    }

    /// Starts scrun on this daemon's socket with `args` before the program `true`.
    fn scrun(&self, args: &[&str]) -> Child {
        self.command(args)
            .arg("true")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// scrun on this daemon's socket with `args`, its stdin empty and its
    /// stderr piped.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_scrun"));
        command
            .arg(format!("-scored={}", self.socket.display()))
            .args(args)
            .env_remove("SCORE_OPTIONS")
            .env_remove("SCORED_SOCKET")
            .stdin(Stdio::null())
            .stderr(Stdio::piped());
        command
    }

    /// Accepts scrun's connection and reads its submission, checking that
    /// its three standard descriptors came with it.
    fn accept(&self, scrun: &Child) -> (Client, Request) {
        let (client, request, received) = self.accept_passing();
        // Each received descriptor is the same open file as scrun's own.
        for (idx, file) in received.iter().enumerate().take(3) {
            let theirs = std::fs::read_link(format!("/proc/{}/fd/{idx}", scrun.id())).unwrap();
            assert_eq!(file, &theirs, "descriptor {idx}");
        }
        (client, request)
    }

    /// Accepts scrun's connection and reads its submission; returns the
    /// files the descriptors that came with it (at least the standard
    /// three) were open on.
    fn accept_passing(&self) -> (Client, Request, Vec<PathBuf>) {
        let mut fds = [PollFd::new(self.listener.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, PollTimeout::try_from(TIMEOUT).unwrap()).unwrap();
        assert_eq!(ready, 1, "scrun did not connect");
        let (stream, _) = self.listener.accept().unwrap();
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut buffer = vec![0u8; 64 * 1024];
        let mut cmsg = nix::cmsg_space!([RawFd; 3 + proto::MAX_INHERITED_FDS]);
        let (len, received) = {
            let mut iov = [IoSliceMut::new(&mut buffer)];
            let msg = recvmsg::<()>(
                stream.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .unwrap();
            let mut received = Vec::new();
            for control in msg.cmsgs().unwrap() {
                if let ControlMessageOwned::ScmRights(fds) = control {
                    received.extend(fds);
                }
            }
            (msg.bytes, received)
        };
        // stdin, stdout and stderr first; then whatever else scrun
        // inherited from the test runner (a jobserver, say).
        assert!(
            received.len() >= 3,
            "scrun must pass stdin, stdout and stderr, it passed {received:?}"
        );
        let mut files = Vec::new();
        for fd in received {
            files.push(std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap());
            // Closing them matters: a copy of scrun's stderr pipe held here
            // would keep the test from ever seeing its end.
            nix::unistd::close(fd).unwrap();
        }
        let mut client = Client {
            stream,
            buffer: buffer[..len].to_vec(),
        };
        let request = client.request();
        (client, request, files)
    }
}

impl Drop for FakeDaemon {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The fake daemon's side of one scrun connection.
struct Client {
    stream: UnixStream,
    buffer: Vec<u8>,
}

impl Client {
    fn request(&mut self) -> Request {
        loop {
            if let Some(request) = proto::decode(&mut self.buffer, proto::MAX_REQUEST).unwrap() {
                return request;
            }
            let mut chunk = [0u8; 64 * 1024];
            let len = self.stream.read(&mut chunk).unwrap();
            assert!(len > 0, "scrun closed the connection");
            self.buffer.extend_from_slice(&chunk[..len]);
        }
    }

    /// The next request if it comes within `within`.
    fn request_within(&mut self, within: Duration) -> Option<Request> {
        if let Some(request) = proto::decode(&mut self.buffer, proto::MAX_REQUEST).unwrap() {
            return Some(request);
        }
        self.stream.set_read_timeout(Some(within)).unwrap();
        let mut chunk = [0u8; 64 * 1024];
        let read = self.stream.read(&mut chunk);
        self.stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        match read {
            Ok(len) => {
                assert!(len > 0, "scrun closed the connection");
                self.buffer.extend_from_slice(&chunk[..len]);
                Some(self.request())
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => None,
            Err(error) => panic!("reading scrun's request: {error}"),
        }
    }

    fn send(&mut self, reply: Reply) {
        self.stream.write_all(&proto::encode(&reply)).unwrap();
    }

    fn admit(&mut self, job: u64) {
        self.admit_saying(job, true);
    }

    /// Admits and starts the job, saying whether `Winch` and `Signal` are
    /// taken (an older daemon does not say it, which reads as false).
    fn admit_saying(&mut self, job: u64, winch: bool) {
        self.send(Reply::Admitted {
            job,
            queue: 1,
            cluster: "c0".into(),
            hosts: vec!["host0".into()],
        });
        self.send(Reply::Started {
            job,
            winch,
            signals: winch,
        });
    }
}

fn ended(job: u64, kind: EndKind, status: i32, reason: &str) -> Reply {
    Reply::Ended {
        job,
        kind,
        status,
        reason: reason.into(),
        signal: None,
        accounting: Accounting {
            queues: vec![1],
            wall_secs: 0.5,
            cpu_secs: 0.25,
            peak_memory: vec![("host0".into(), 3 << 20)],
            ..Accounting::default()
        },
    }
}

/// Waits for scrun to exit and returns its status and stderr.
fn finish(scrun: Child) -> (i32, String) {
    let Output { status, stderr, .. } = scrun.wait_with_output().unwrap();
    let code = status.code().expect("scrun exits, it is not killed");
    (code, String::from_utf8(stderr).unwrap())
}

/// Waits until `pid` is in process state `state` (a letter of /proc/PID/stat).
fn wait_for_state(pid: u32, state: char) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // The state follows the command name, which is in parentheses.
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        if after_name.starts_with(state) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pid {pid} never reached state {state}: {stat}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn signal(scrun: &Child, signal: Signal) {
    kill(Pid::from_raw(scrun.id() as i32), signal).unwrap();
}

#[test]
fn submission_carries_the_job_and_the_status_passes_through() {
    let daemon = FakeDaemon::new();
    let scrun = daemon.scrun(&["-nodes=2x3"]);
    let (mut client, request) = daemon.accept(&scrun);
    let Request::Submit { version, submit } = request else {
        panic!("expected a submission, got {request:?}");
    };
    assert_eq!(version, proto::VERSION);
    assert_eq!(submit.stages, vec![vec![proto::WireBytes::from("true")]]);
    assert_eq!(
        submit.options.procs,
        proto::ProcRequest::Grid {
            hosts: 2,
            per_host: 3
        }
    );
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(submit.cwd.to_os(), cwd.as_os_str());
    assert!(submit.env.iter().any(|(key, _)| key.lossy() == "PATH"));
    client.admit(7);
    client.send(ended(7, EndKind::Exited, 3, "exited with status 3"));
    assert_eq!(finish(scrun), (3, String::new()));
}

#[test]
fn stat_prints_the_accounting_and_a_limit_kill_exits_76() {
    let daemon = FakeDaemon::new();
    let scrun = daemon.scrun(&["-stat"]);
    let (mut client, _) = daemon.accept(&scrun);
    client.admit(5);
    client.send(ended(
        5,
        EndKind::Limit,
        76,
        "killed: cpu time 1.0s over the limit of 1s",
    ));
    let (code, stderr) = finish(scrun);
    assert_eq!(code, 76);
    assert_eq!(
        stderr,
        "scrun: job 5 accounting
  queues: 1
  wait: 0.000s
  wall: 0.500s
  cpu: 0.250s
  stopped: 0.000s
  switches: 0
  peak memory: host0 3M
  peak disk: 0
  exit status: 76
scrun: job 5 killed: cpu time 1.0s over the limit of 1s
"
    );
}

#[test]
fn waiting_then_rejection_exits_75() {
    let daemon = FakeDaemon::new();
    let scrun = daemon.scrun(&["-wait"]);
    let (mut client, _) = daemon.accept(&scrun);
    client.send(Reply::Waiting {
        reason: "memory".into(),
    });
    client.send(Reply::Rejected {
        reason: "queue 1 was disabled".into(),
        kind: RejectKind::QueueDisabled,
    });
    let (code, stderr) = finish(scrun);
    assert_eq!(code, 75);
    assert_eq!(
        stderr,
        "scrun: waiting for resources: memory\nscrun: job rejected: queue 1 was disabled\n"
    );
}

#[test]
fn a_daemon_that_hangs_up_is_reported() {
    let daemon = FakeDaemon::new();
    let scrun = daemon.scrun(&["-reattach=0"]);
    let (mut client, _) = daemon.accept(&scrun);
    client.admit(9);
    drop(client);
    assert_eq!(
        finish(scrun),
        (
            69,
            "scrun: scored died: lost the connection to it before job 9 ended\n".into()
        )
    );
}

#[test]
fn a_daemon_that_does_not_come_back_within_the_reattach_window_is_reported() {
    let daemon = FakeDaemon::new();
    let scrun = daemon.scrun(&["-reattach=1s"]);
    let (mut client, _) = daemon.accept(&scrun);
    client.admit(9);
    drop(client);
    let started = std::time::Instant::now();
    assert_eq!(
        finish(scrun),
        (
            69,
            "scrun: scored did not come back within 1s (-reattach); leaving job 9, \
             which is killed when scored returns\n"
                .into()
        )
    );
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(900) && waited < std::time::Duration::from_secs(10),
        "scrun waited {waited:?} for a window of 1s"
    );
}

/// A job ended by `signal`, as the daemon reports a rank killed by it.
fn ended_by(job: u64, signal: Signal) -> Reply {
    Reply::Ended {
        job,
        kind: EndKind::Exited,
        status: 128 + signal as i32,
        reason: format!("rank 0 killed by {}", signal.as_str()),
        signal: Some(signal as i32),
        accounting: Accounting::default(),
    }
}

#[test]
fn an_interrupt_is_passed_on_and_ends_scrun_by_it_when_it_ends_the_job() {
    let daemon = FakeDaemon::new();
    let scrun = daemon.scrun(&[]);
    let (mut client, _) = daemon.accept(&scrun);
    client.admit(4);
    signal(&scrun, Signal::SIGINT);
    assert_eq!(client.request(), Request::Signal { signal: 2 });
    client.send(ended_by(4, Signal::SIGINT));
    let Output { status, stderr, .. } = scrun.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
    assert_eq!(String::from_utf8_lossy(&stderr), "");
}

#[test]
fn a_job_that_handles_the_interrupt_gives_its_own_status() {
    let daemon = FakeDaemon::new();
    let scrun = daemon.scrun(&[]);
    let (mut client, _) = daemon.accept(&scrun);
    client.admit(4);
    signal(&scrun, Signal::SIGHUP);
    assert_eq!(client.request(), Request::Signal { signal: 1 });
    client.send(ended(4, EndKind::Exited, 3, "exited with status 3"));
    assert_eq!(finish(scrun), (3, String::new()));
}

#[test]
fn the_same_interrupt_twice_kills_the_job_and_a_third_leaves() {
    let daemon = FakeDaemon::new();
    let scrun = daemon.scrun(&[]);
    let (mut client, _) = daemon.accept(&scrun);
    client.admit(4);
    signal(&scrun, Signal::SIGTERM);
    assert_eq!(client.request(), Request::Signal { signal: 15 });
    signal(&scrun, Signal::SIGTERM);
    assert_eq!(client.request(), Request::Kill);
    signal(&scrun, Signal::SIGTERM);
    assert_eq!(
        finish(scrun),
        (
            143,
            "scrun: SIGTERM twice within 1s; killing job 4\nscrun: interrupted again; leaving\n"
                .into()
        )
    );
}

#[test]
fn a_window_change_is_passed_on_as_winch() {
    let daemon = FakeDaemon::new();
    let scrun = daemon.scrun(&[]);
    let (mut client, _) = daemon.accept(&scrun);
    client.admit(5);
    signal(&scrun, Signal::SIGWINCH);
    assert_eq!(client.request(), Request::Winch);
    client.send(ended(5, EndKind::Exited, 0, "exited"));
    assert_eq!(finish(scrun), (0, String::new()));
}

#[test]
fn an_older_daemon_is_never_sent_winch() {
    let daemon = FakeDaemon::new();
    let scrun = daemon.scrun(&[]);
    let (mut client, _) = daemon.accept(&scrun);
    client.admit_saying(5, false);
    signal(&scrun, Signal::SIGWINCH);
    signal(&scrun, Signal::SIGINT);
    // The first request after the resize is the interrupt's.
    assert_eq!(client.request(), Request::Kill);
    client.send(ended(5, EndKind::Killed, 130, "killed by its owner"));
    assert_eq!(finish(scrun).0, 130);
}

#[test]
fn ctrl_z_holds_the_job_and_stops_scrun_until_continued() {
    let daemon = FakeDaemon::new();
    let scrun = daemon.scrun(&[]);
    let (mut client, _) = daemon.accept(&scrun);
    client.admit(6);
    signal(&scrun, Signal::SIGTSTP);
    assert_eq!(client.request(), Request::Hold);
    client.send(Reply::Held { job: 6 });
    wait_for_state(scrun.id(), 'T');
    signal(&scrun, Signal::SIGCONT);
    assert_eq!(client.request(), Request::Release);
    client.send(ended(6, EndKind::Exited, 0, "exited"));
    assert_eq!(finish(scrun), (0, String::new()));
}

#[test]
fn usage_errors_and_unreachable_sockets_have_their_statuses() {
    let daemon = FakeDaemon::new();
    let missing = daemon.dir.join("missing.sock");
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_scrun"))
            .args(args)
            .env_remove("SCORE_OPTIONS")
            .env_remove("SCORED_SOCKET")
            .output()
            .unwrap();
        (
            output.status.code().unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };
    assert_eq!(
        run(&["-nodes=0", "true"]),
        (
            64,
            "scrun: option 'nodes' on the command line: '0' asks for no processes: the count must be at least 1\n\
             scrun: try 'scrun -help' for usage\n"
                .into()
        )
    );
    let scored = format!("-scored={}", missing.display());
    assert_eq!(
        run(&[&scored, "true"]),
        (
            69,
            format!(
                "scrun: cannot reach scored at {}: no such file or directory\n",
                missing.display()
            )
        )
    );
}

#[test]
fn on_a_pty_a_reader_gone_before_the_start_is_heard_is_the_jobs_sigpipe() {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::process::ExitStatusExt;
    let daemon = FakeDaemon::new();
    // scrun's stdout: a pipe whose reader went away, as after `| head -1`.
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    let scrun = daemon
        .command(&["-pty", "yes"])
        .stdout(Stdio::from(writer))
        .spawn()
        .unwrap();
    let (mut client, _, files) = daemon.accept_passing();
    // The job's terminal, which it got as its stdout.
    let mut terminal = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(&files[1])
        .unwrap();
    // scored spawns the job, then says that it was admitted and started:
    // the job writes first.
    let mut write = || terminal.write(b"y\ny\ny\n");
    write().unwrap();
    assert_eq!(
        client.request_within(Duration::from_secs(1)),
        None,
        "scrun must not act on the job before it hears that it started"
    );
    // The job writes on until its terminal takes no more: it must not
    // write on past the reader's end (as it cannot on a pipe) until it
    // gets its SIGPIPE.
    let mut written = 0;
    let mut progress = Instant::now();
    while progress.elapsed() < Duration::from_millis(500) {
        match write() {
            Ok(len) => {
                written += len;
                progress = Instant::now();
                assert!(written < 4 << 20, "scrun read on from the job's terminal");
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    client.admit(7);
    assert_eq!(
        client.request(),
        Request::Signal {
            signal: Signal::SIGPIPE as i32
        }
    );
    // A job that ignores its SIGPIPE writes on, to nobody.
    let deadline = Instant::now() + TIMEOUT;
    while write().is_err() {
        assert!(Instant::now() < deadline, "the job's terminal stays full");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(terminal);
    client.send(ended_by(7, Signal::SIGPIPE));
    let Output { status, stderr, .. } = scrun.wait_with_output().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}");
    assert_eq!(String::from_utf8_lossy(&stderr), "");
}
