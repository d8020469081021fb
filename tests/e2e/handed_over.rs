//! What plain users hand over to root's daemon: descriptors whose last
//! close sleeps in the kernel for as long as their sender likes (a TCP
//! socket with a huge `SO_LINGER` and unsent data its peer never reads),
//! passed in a message, left unread in the queue of a connection scored
//! has stopped reading, or inherited by a scrun. Root's console is answered and another user's
//! jobs go on being switched while the sender holds the peer.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use scored_proto::proto::{self, Request};
use scored_tests::*;

/// The attacker: connects a TCP pair on loopback, fills the send buffer
/// of one end, sets `SO_LINGER {1, 0x7fffffff}` on it, hands it to scored
/// and closes its own copy while scored still holds one, so that scored's
/// is the last: `message`, with a frame it leaves unfinished over a
/// connection that then hangs up; `unread`, over a connection that scored
/// no longer reads (its replies wait unread) and that then hangs up;
/// `scrun`, as a descriptor that the scrun of a job waiting in a
/// deactivated queue inherits, the scrun then killed. It says `holding`
/// and keeps the peer open until its stdin closes.
const ATTACK: &str = r#"
import array, fcntl, json, socket, struct, subprocess, sys, termios, time
path, mode, frame, scrun = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3]), sys.argv[4]
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
end = socket.socket()
end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
end.connect(server.getsockname())
peer, _ = server.accept()
peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
end.setblocking(False)
try:
    while True:
        end.send(b"x" * 65536)
except BlockingIOError:
    pass
end.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0x7fffffff))
rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [end.fileno()]))]
if mode == "message":
    client = socket.socket(socket.AF_UNIX)
    client.connect(path)
    client.sendmsg([frame[:-1]], rights)
    end.close()
    time.sleep(0.5)
    client.close()
elif mode == "unread":
    client = socket.socket(socket.AF_UNIX)
    client.connect(path)
    client.sendall(frame * 400)
    waiting, since = -1, time.time()
    while time.time() - since < 1:
        time.sleep(0.1)
        now = struct.unpack("i", fcntl.ioctl(client, termios.FIONREAD, b"\0" * 4))[0]
        if now != waiting:
            waiting, since = now, time.time()
    client.sendmsg([b"x"], rights)
    end.close()
    client.close()
else:
    job = subprocess.Popen([scrun, "-priority=2", "sleep", "100"], pass_fds=[end.fileno()], stdin=subprocess.DEVNULL)
    end.close()
    time.sleep(2)
    job.kill()
    job.wait()
print("holding", flush=True)
sys.stdin.read()
"#;

/// A python3 that other users may run, or `None` (the test then skips).
fn python_for_users() -> Option<PathBuf> {
    ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
}

/// The attacker's process; killed (and so the peer released) when dropped.
struct Attacker(Child);

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn attack(daemon: &Daemon, user: &TestUser, python: &Path, mode: &str) -> Attacker {
    let frame = proto::encode(&Request::Console {
        version: proto::VERSION,
        line: "help".into(),
        json: false,
    });
    let hex: String = frame.iter().map(|byte| format!("{byte:02x}")).collect();
    let socket = daemon.socket.display().to_string();
    let scrun = bin("scrun").display().to_string();
    let mut child = command_as(user, python, &["-c", ATTACK, &socket, mode, &hex, &scrun])
        .env("SCORED_SOCKET", &daemon.socket)
        .env("SCORED_TEST_TAG", &daemon.tag)
        .current_dir(&daemon.sandbox.path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the attacker");
    let out = child.stdout.take().expect("stdout");
    let attacker = Attacker(child);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = sender.send(line);
    });
    let line = receiver
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_default();
    assert_eq!(
        line.trim(),
        "holding",
        "{mode}: the attacker did not get going"
    );
    attacker
}

/// Runs root's `sc_console -c status`; how long it took, or `None` if it
/// had not answered within `bound` (it is then killed).
fn timed_status(daemon: &Daemon, bound: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut child = std::process::Command::new(bin("sc_console"))
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["-c", "status"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sc_console");
    let done = wait_until(bound, || matches!(child.try_wait(), Ok(Some(_))));
    if !done {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    let took = started.elapsed();
    let output = child.wait_with_output().expect("sc_console output");
    assert!(
        output.status.success(),
        "status failed: {}",
        stderr(&output)
    );
    assert!(stdout(&output).contains("uptime:"), "{}", stdout(&output));
    Some(took)
}

/// The descriptor a plain user hands over never makes root's daemon wait
/// for its close: root's status is answered, and a spinning job of
/// another user goes on being switched with root's on their shared host,
/// while the sender holds the peer of a lingering socket.
#[test]
fn a_descriptor_whose_close_blocks_never_freezes_the_daemon() {
    let Some(users) = test_users("a_descriptor_whose_close_blocks_never_freezes_the_daemon") else {
        return;
    };
    let Some(python) = python_for_users() else {
        println!("skipped: a_descriptor_whose_close_blocks_never_freezes_the_daemon needs python3");
        return;
    };
    let daemon = Daemon::builder()
        .hosts("host0 cpus=0\n")
        .timeslice("50ms")
        .rc("queue 2 deactivate\n")
        .start();
    // Root's spinner and user b's share the one host: a gang pair.
    let _root_job = daemon.spawn(&["-nodes=1", &testprog(), "spin", "0"]);
    let root_pid = daemon.wait_job_pids(1, 1)[0];
    let _b_job = daemon.spawn_as(&users.b, &["-nodes=1", &testprog(), "spin", "0"]);
    let b_pid = daemon.wait_job_pids(2, 1)[0];
    for mode in ["message", "unread", "scrun"] {
        let attacker = attack(&daemon, &users.a, &python, mode);
        // Whatever scored does with what it was handed has been done.
        std::thread::sleep(Duration::from_millis(500));
        for _ in 0..3 {
            let took = timed_status(&daemon, Duration::from_secs(10));
            assert!(
                took.is_some(),
                "{mode}: root's status was not answered within 10 s while user a held the peer"
            );
        }
        // Both spinners get the CPU: the gang switch goes on.
        let cpu = |pid| proc_stat(pid).map_or(0, |stat| stat.cpu_ticks);
        let before = (cpu(root_pid), cpu(b_pid));
        std::thread::sleep(Duration::from_secs(2));
        let after = (cpu(root_pid), cpu(b_pid));
        assert!(
            after.0 > before.0 && after.1 > before.1,
            "{mode}: the jobs were not both switched in while user a held the peer \
             (CPU ticks of root's {before:?} -> {after:?} of b's)"
        );
        drop(attacker);
    }
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
}

/// The closer crosses an in-place restart (same process, still closing),
/// and one that dies is started again: the descriptors let go of
/// meanwhile wait for it, and a job's pipe still sees its end. The jobs'
/// stdin is a file, which the daemon lets go of through the closer (their
/// pipes and PMI ends it closes itself).
#[test]
fn the_closer_crosses_a_restart_and_is_started_again_when_it_dies() {
    let daemon = Daemon::start();
    let mut closer = 0;
    assert!(
        wait_until(Duration::from_secs(10), || {
            closer = daemon.closer().unwrap_or(0);
            closer > 0
        }),
        "scored has no closer"
    );
    let restarted = daemon.ok("restart");
    assert!(restarted.contains("restarted in place"), "{restarted}");
    assert_eq!(
        daemon.closer(),
        Some(closer),
        "the closer did not cross the restart"
    );
    let input = daemon.sandbox.write("input", "through the closer\n");
    let from_file = |daemon: &Daemon| {
        let mut command = daemon.scrun(&["cat"]);
        command.stdin(std::fs::File::open(&input).expect("open the input"));
        command
    };
    // A job's output through a pipe ends when the job does; scored's copy
    // of its stdin went through the closer.
    let output = from_file(&daemon).output().expect("run scrun");
    assert_eq!(stdout(&output).trim(), "through the closer");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(closer),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the closer");
    for round in 0..3 {
        let mut job = Job::start(&mut from_file(&daemon));
        // `wait` fails if scrun's pipes stay open past its end.
        let (status, _) = job.wait(Duration::from_secs(20));
        assert!(status.success(), "round {round}: {status}");
    }
    assert!(
        wait_until(Duration::from_secs(10), || daemon
            .closer()
            .is_some_and(|pid| pid != closer)),
        "no closer was started again:\n{}",
        daemon.log()
    );
    assert!(daemon
        .log()
        .contains("the closer of users' descriptors is gone"));
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
}

/// The flooder: opens 300 connections, then submits on each a job with
/// its 3 standard descriptors and 64 others, all distinct pipe ends (so
/// that scored can share none of them), keeps the connections, and prints
/// one line per reply kind (`admitted`, `rejected: REASON`, `error:
/// MESSAGE`) with its count, then `holding`, and waits for its stdin.
const FLOOD: &str = r#"
import array, collections, json, os, socket, struct, sys, time
path, frame = sys.argv[1], bytes.fromhex(sys.argv[2])
conns, said = [], collections.Counter()
for _ in range(300):
    client = socket.socket(socket.AF_UNIX)
    client.connect(path)
    conns.append(client)
for client in conns:
    fds = []
    for _ in range(34):
        fds.extend(os.pipe())
    try:
        client.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds[:67]))])
    except OSError as error:
        said["refused: " + str(error)] += 1
    for fd in fds:
        os.close(fd)
time.sleep(2)
for client in conns:
    client.setblocking(False)
    try:
        data = client.recv(1 << 20)
    except OSError:
        data = b""
    if len(data) < 4:
        said["nothing"] += 1
        continue
    reply = json.loads(data[4 : 4 + struct.unpack(">I", data[:4])[0]])
    kind = reply["type"]
    said[kind + ": " + reply.get("reason", reply.get("message", "")) if kind != "admitted" else kind] += 1
for what, count in sorted(said.items()):
    print(count, what, flush=True)
print("holding", flush=True)
sys.stdin.read()
"#;

/// The descriptors scored holds for one plain user are bounded: a user
/// who submits job after job, each passing 67 descriptors scored cannot
/// share, makes it (and its closer) hold under 4,000 in all, is told why
/// the rest is refused, and root and another user are served meanwhile.
#[test]
fn one_user_cannot_fill_roots_descriptor_table() {
    let Some(users) = test_users("one_user_cannot_fill_roots_descriptor_table") else {
        return;
    };
    let Some(python) = python_for_users() else {
        println!("skipped: one_user_cannot_fill_roots_descriptor_table needs python3");
        return;
    };
    // Queue 1 holds the flood's jobs without running them.
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&two_hosts())
        .rc("queue 1 deactivate\n")
        .start();
    let baseline = daemon.open_fds();
    let frame = proto::encode(&Request::Submit {
        version: proto::VERSION,
        submit: proto::Submit {
            stages: vec![vec!["true".into()]],
            joiner: proto::Joiner::Sequence,
            options: proto::JobOptions {
                procs: proto::ProcRequest::Nodes(1),
                priority: Some(1),
                wait: false,
                memory: None,
                disk: None,
                pty: false,
                time_ms: None,
                batch: Default::default(),
            },
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: proto::WireBytes::from_os(daemon.sandbox.path.as_os_str()),
            ignored_signals: Vec::new(),
            rlimits: Vec::new(),
            umask: None,
            nice: None,
            ioprio: None,
            closed_stdio: Vec::new(),
            fds: (3..67).collect(),
            pmi_ranks: 0,
            pmix_namespace: None,
            pmi_port: false,
        },
    });
    let hex: String = frame.iter().map(|byte| format!("{byte:02x}")).collect();
    let socket = daemon.socket.display().to_string();
    let mut child = command_as(&users.a, &python, &["-c", FLOOD, &socket, &hex])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the flooder");
    let out = child.stdout.take().expect("stdout");
    let flooder = Attacker(child);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut said = String::new();
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line == "holding" {
                break;
            }
            said.push_str(&line);
            said.push('\n');
        }
        let _ = sender.send(said);
    });
    let said = receiver
        .recv_timeout(Duration::from_secs(120))
        .expect("the flooder never finished");
    // What root holds for the flood: the daemon's table and its closer's.
    let closer_fds = daemon.closer().map_or(0, |pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |entries| entries.count())
    });
    let held = daemon.open_fds() + closer_fds;
    println!("scored and its closer hold {held} descriptors (at rest {baseline}); the flooder was told:\n{said}");
    assert!(
        held < 4000,
        "one user made scored hold {held} descriptors (at rest {baseline}); it said:\n{said}"
    );
    assert!(
        said.contains("admitted") && said.contains("--max-descriptors-per-user"),
        "the flood was not admitted up to the budget and refused past it:\n{said}"
    );
    // Root and another user are served meanwhile.
    assert!(
        timed_status(&daemon, Duration::from_secs(10)).is_some(),
        "root's status"
    );
    let output = daemon
        .scrun_as(&users.b, &["-priority=2", "sh", "-c", "echo served"])
        .output()
        .expect("scrun");
    assert_eq!(stdout(&output).trim(), "served", "{}", stderr(&output));
    drop(flooder);
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
}

/// A plain user's FUSE file, handed to root's daemon as a job's standard
/// output, whose server sits for ever on the flush that each close of a
/// copy asks of it when the closer is one of root's processes that serve
/// every user (the daemon, its closer and their children): root's console
/// is answered at once, another user's job launches and ends, and when
/// the first job ends nothing waits, nor after an in-place restart (a job
/// of another user's running across it still sees its pipes' end), while
/// the server still sits on what it was asked.
#[test]
fn a_fuse_server_that_never_flushes_never_freezes_the_daemon() {
    let test = "a_fuse_server_that_never_flushes_never_freezes_the_daemon";
    let Some(users) = test_users(test) else {
        return;
    };
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    // Declared after the daemon, so dropped before it: what waits is
    // answered and the file system goes even when the test fails.
    let Some(fuse) = FlushFile::mount(&daemon.sandbox.path.join("fuse")) else {
        println!("skipped: {test} needs to mount FUSE");
        return;
    };
    let go = daemon.sandbox.path.join("go");
    let script = format!(
        "echo written; while [ ! -e {} ]; do sleep 0.05; done; echo ended",
        go.display()
    );
    let output = std::fs::OpenOptions::new()
        .write(true)
        .open(fuse.path())
        .expect("open the FUSE file");
    let mut first = daemon
        .scrun_as(&users.a, &["-nodes=1", "sh", "-c", &script])
        .stdout(Stdio::from(output))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn user a's scrun");
    fuse.hold_daemon(daemon.pid());
    assert!(
        wait_until(Duration::from_secs(30), || fuse
            .written()
            .contains("written")),
        "user a's job never wrote to the FUSE file:\n{}",
        daemon.log()
    );
    let check = |when: &str| {
        for _ in 0..3 {
            assert!(
                timed_status(&daemon, Duration::from_secs(10)).is_some(),
                "{when}: root's status was not answered within 10 s while the FUSE server \
                 sat on the flushes of {}",
                fuse.held_processes()
            );
        }
        let mut other = daemon.spawn_as(&users.b, &["-nodes=1", "echo", "served"]);
        other.wait_lines("served", 1);
        let (status, stderr) = other.wait(Duration::from_secs(30));
        assert!(status.success(), "{when}: user b's job: {status} {stderr}");
    };
    check("while user a's job runs");
    std::fs::write(&go, "").expect("end user a's job");
    let ended = wait_until(Duration::from_secs(30), || {
        matches!(first.try_wait(), Ok(Some(_)))
    });
    if !ended {
        let _ = first.kill();
    }
    assert!(
        ended,
        "user a's scrun did not end with its job while the FUSE server sat on the flushes \
         of {}",
        fuse.held_processes()
    );
    let status = first.wait().expect("user a's scrun");
    assert!(status.success(), "user a's job: {status}");
    assert!(fuse.written().contains("ended"), "{}", fuse.written());
    // scored lets go of its copies of the job's output once the job is
    // over: the server sits on what that asks.
    assert!(
        wait_until(Duration::from_secs(30), || fuse.held() > 0),
        "no process of root's let go of a copy of the file after the job ended \
         ({} flushes asked)",
        fuse.flushes()
    );
    check("after user a's job ended");
    // Across an in-place restart while a close still waits: user b's job
    // running meanwhile still sees its pipes' end once it ends.
    let go = daemon.sandbox.path.join("go-b");
    let script = format!(
        "echo started; while [ ! -e {} ]; do sleep 0.05; done",
        go.display()
    );
    let mut across = daemon.spawn_as(&users.b, &["-nodes=1", "sh", "-c", &script]);
    across.wait_lines("started", 1);
    let restarted = daemon.ok("restart");
    assert!(restarted.contains("restarted in place"), "{restarted}");
    check("after a restart in place");
    std::fs::write(&go, "").expect("end user b's job");
    let (status, stderr) = across.wait(Duration::from_secs(30));
    assert!(
        status.success(),
        "user b's job across the restart: {status} {stderr}"
    );
    assert!(fuse.held() > 0, "the FUSE server's flushes were answered");
    println!("flushes waiting at the end: {}", fuse.held_processes());
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
}

/// A user's job stuck in its own execve, closing a FUSE file whose server
/// sits on the flush: the kernel holds the process's exec lock meanwhile,
/// and every read of its `/proc/PID/stat` (and `environ`, `exe`, `wchan`,
/// ...) waits for it. scored, sampling the job, must not wait with them.
#[test]
fn a_job_stuck_in_its_exec_never_freezes_the_daemon() {
    stuck_in_exec("a_job_stuck_in_its_exec_never_freezes_the_daemon", false);
}

/// The same job interrupted while stuck: scored kills it and waits for
/// its end (a process in an exec's flush takes SIGKILL only once the
/// flush is answered), reading /proc of what is left, on the stop path
/// and in the job's keeper; it must not wait with those reads.
#[test]
fn a_job_killed_while_stuck_in_its_exec_never_freezes_the_daemon() {
    stuck_in_exec(
        "a_job_killed_while_stuck_in_its_exec_never_freezes_the_daemon",
        true,
    );
}

fn stuck_in_exec(test: &str, interrupt: bool) {
    let Some(users) = test_users(test) else {
        return;
    };
    if !Path::new("/usr/bin/perl").exists() {
        println!("skipped: {test} needs /usr/bin/perl");
        return;
    }
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    // Declared after the daemon, so dropped before it: what waits is
    // answered and the file system goes even when the test fails.
    let Some(fuse) = FlushFile::mount(&daemon.sandbox.path.join("fuse")) else {
        println!("skipped: {test} needs to mount FUSE");
        return;
    };
    fuse.hold_every_flush();
    // perl opens its files close-on-exec: its exec closes the FUSE file
    // and waits for the flush, with its exec lock held.
    let file = fuse.path();
    let program = "open(my $file, '<', $ARGV[0]) or die \"open: $!\"; \
                   print \"opened\\n\"; STDOUT->flush(); exec('echo', 'execd')";
    let mut stuck = daemon.spawn_as(
        &users.a,
        &[
            "-nodes=1",
            "perl",
            "-e",
            program,
            file.to_str().expect("utf-8 path"),
        ],
    );
    stuck.wait_lines("opened", 1);
    assert!(
        wait_until(Duration::from_secs(30), || fuse.held() > 0),
        "user a's job never flushed the FUSE file in its exec:\n{}",
        daemon.log()
    );
    if interrupt {
        stuck.signal(nix::sys::signal::Signal::SIGINT);
    }
    // Long enough for the daemon to sample (or kill) the job, and wait,
    // if it read the stuck process's stat, before being asked.
    std::thread::sleep(Duration::from_secs(3));
    for _ in 0..3 {
        assert!(
            timed_status(&daemon, Duration::from_secs(10)).is_some(),
            "root's status was not answered within 10 s while user a's job was stuck in its \
             exec ({})",
            fuse.held_processes()
        );
    }
    let mut other = daemon.spawn_as(&users.b, &["-nodes=1", "echo", "served"]);
    other.wait_lines("served", 1);
    let (status, stderr) = other.wait(Duration::from_secs(30));
    assert!(status.success(), "user b's job: {status} {stderr}");
    assert!(fuse.held() > 0, "user a's job was not stuck all along");
    fuse.release();
    if !interrupt {
        stuck.wait_lines("execd", 1);
    }
    let (status, stderr) = stuck.wait(Duration::from_secs(30));
    assert_eq!(
        status.success(),
        !interrupt,
        "user a's job: {status} {stderr}"
    );
    assert!(
        wait_until(Duration::from_secs(30), || daemon.all_job_pids().is_empty()),
        "user a's job left {:?} behind",
        daemon.all_job_pids()
    );
}
