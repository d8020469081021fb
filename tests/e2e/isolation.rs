//! What one local user can do to the daemon and to other users' jobs, and what a job still
//! inherits from root. Tests that need other users skip, with a printed
//! reason, when not run as root.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use scored_proto::proto::{self, Reply, Request};
use scored_tests::*;

/// The `keyring ID` line of a `scored-testprog keyring` run.
fn keyring_of(out: &str) -> Option<String> {
    out.lines()
        .find_map(|line| line.strip_prefix("keyring "))
        .map(str::to_string)
}

/// Every job gets a session keyring of its own, not
/// scored's (which it would possess, with every key in it) and not another
/// job's. scored inherits the test's session keyring, so the keyring of
/// the same program run here, without scrun, is scored's.
#[test]
fn each_job_has_a_session_keyring_of_its_own() {
    let direct = std::process::Command::new(testprog())
        .arg("keyring")
        .output()
        .expect("run testprog");
    let Some(daemons) = keyring_of(&stdout(&direct)) else {
        panic!("testprog printed no keyring: {}", stdout(&direct));
    };
    if daemons == "none" {
        println!("skipped: this kernel has no session keyrings");
        return;
    }
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let mut seen = vec![daemons.clone()];
    for _ in 0..2 {
        let output = daemon.run(&[&testprog(), "keyring"]);
        assert_eq!(code(&output), Some(0), "{}", stderr(&output));
        let job = keyring_of(&stdout(&output)).expect("the job printed its keyring");
        assert!(
            !seen.contains(&job),
            "a job's session keyring {job} is scored's ({daemons}) or another job's: {seen:?}"
        );
        seen.push(job);
    }
    let Some(users) = test_users("each_job_has_a_session_keyring_of_its_own") else {
        return;
    };
    let output = daemon
        .scrun_as(&users.a, &[&testprog(), "keyring"])
        .output()
        .expect("scrun");
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let job = keyring_of(&stdout(&output)).expect("the job printed its keyring");
    assert!(
        !seen.contains(&job),
        "a plain user's job has keyring {job}, one of {seen:?}"
    );
    // And the kernel agrees on whose it is: the job's /proc/keys shows its
    // session keyring owned by the job's user.
    let output = daemon
        .scrun_as(&users.a, &["sh", "-c", "grep ' _ses:' /proc/keys || true"])
        .output()
        .expect("scrun");
    let listing = stdout(&output);
    let owned: Vec<&str> = listing
        .lines()
        .filter(|line| line.contains("keyring") && line.contains(" _ses:"))
        .collect();
    for line in &owned {
        let uid = line.split_whitespace().nth(5).unwrap_or("");
        assert_eq!(
            uid,
            users.a.uid.to_string(),
            "a plain user's job sees a session keyring of another uid: {line}"
        );
    }
    assert!(
        !owned.is_empty(),
        "the job sees no session keyring:\n{listing}"
    );
}

// ----- connections -----

/// `scored-testprog connect` run as `user`: its output lines arrive on the
/// returned channel; the child is for the caller to end.
fn hold_connections_as(
    user: &TestUser,
    socket: &Path,
    n: usize,
    secs: u32,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let socket = socket.display().to_string();
    hold(command_as(
        user,
        Path::new(&testprog()),
        &["connect", &socket, &n.to_string(), &secs.to_string()],
    ))
}

/// Runs a `scored-testprog connect` command, its output lines sent to the
/// returned channel.
fn hold(
    mut command: std::process::Command,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .expect("run testprog connect");
    let stdout = child.stdout.take().expect("piped");
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    (child, receiver)
}

/// Reads the holder's report up to its refusals: (open, refusal texts).
fn refusals(lines: &std::sync::mpsc::Receiver<String>) -> (usize, Vec<String>) {
    let next = || {
        lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the connection holder reports in time")
    };
    let mut open_line = next();
    if open_line.starts_with("pid ") {
        open_line = next();
    }
    let open: usize = open_line
        .strip_prefix("open ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("expected 'open N', got {open_line:?}"));
    let refused_line = next();
    let n_refused: usize = refused_line
        .strip_prefix("refused ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("expected 'refused N', got {refused_line:?}"));
    let texts = (0..n_refused).map(|_| next()).collect();
    (open, texts)
}

fn end(mut child: std::process::Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = child.wait();
}

/// A client that connects when the table is full, just as another
/// client leaves, is served: the daemon, stopped meanwhile, sees the
/// hang-up and the new connection in one wake-up, and frees the place
/// before it accepts.
#[test]
fn a_place_freed_in_the_same_wakeup_goes_to_the_next_client() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--max-connections")
        .arg("4")
        .start();
    let connect = |n: &str| {
        let mut command = std::process::Command::new(testprog());
        command.args(["connect", &daemon.socket.display().to_string(), n, "120"]);
        command
    };
    let (holder, lines) = hold(connect("3"));
    assert_eq!(refusals(&lines), (3, Vec::new()));
    let (leaver, lines) = hold(connect("1"));
    assert_eq!(refusals(&lines), (1, Vec::new()), "the table is now full");
    let scored = Pid::from_raw(daemon.pid() as i32);
    kill(scored, Signal::SIGSTOP).expect("stop scored");
    end(leaver);
    let console = std::process::Command::new(bin("sc_console"))
        .arg("--socket")
        .arg(&daemon.socket)
        .arg("-c")
        .arg("status")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sc_console");
    // Its connect() completes in the listen backlog while scored is stopped.
    std::thread::sleep(Duration::from_millis(500));
    kill(scored, Signal::SIGCONT).expect("continue scored");
    let output = console.wait_with_output().expect("sc_console ends");
    assert_eq!(
        code(&output),
        Some(0),
        "the client that came as another left is served: {}",
        stderr(&output)
    );
    assert!(stdout(&output).contains("uptime"), "{}", stdout(&output));
    end(holder);
    assert!(daemon.running(), "scored died:\n{}", daemon.log());
    daemon.stop();
}

/// A plain user who takes every connection open to
/// users does not lock root out: root's console and scrun still work
/// (through the reserve), while other plain users are told why they wait.
/// Connections root already holds do not shrink the users' share.
#[test]
fn a_user_holding_1000_connections_does_not_lock_out_root() {
    let Some(users) = test_users("a_user_holding_1000_connections") else {
        return;
    };
    // 1000 connections for users, and the reserve of 64 for root and the
    // operators.
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--max-connections")
        .arg("1064")
        .arg("--max-connections-per-user")
        .arg("5000")
        .start();
    // Root holds connections of its own first; they are accepted before
    // the user's, which queue behind them.
    let mut command = std::process::Command::new(testprog());
    command.args(["connect", &daemon.socket.display().to_string(), "3", "120"]);
    let (root_holder, root_lines) = hold(command);
    let (open, refused) = refusals(&root_lines);
    assert_eq!(
        (open, refused.len()),
        (3, 0),
        "root's connections: {refused:?}"
    );
    let (holder, lines) = hold_connections_as(&users.a, &daemon.socket, 1001, 120);
    let (open, refused) = refusals(&lines);
    assert_eq!(open, 1001, "every connect() succeeds at the socket level");
    assert_eq!(
        refused.len(),
        1,
        "exactly the connection past the users' share is refused: {refused:?}"
    );
    assert!(
        refused[0].contains("other than root") && refused[0].contains("try again later"),
        "the refusal says why: {}",
        refused[0]
    );
    // Root is served at once, through the reserve.
    let started = Instant::now();
    let output = daemon.console("status");
    assert_eq!(code(&output), Some(0), "root's status: {}", stderr(&output));
    assert!(stdout(&output).contains("uptime"), "{}", stdout(&output));
    let output = daemon.run(&["true"]);
    assert_eq!(code(&output), Some(0), "root's scrun: {}", stderr(&output));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "root waited {:?}",
        started.elapsed()
    );
    // Another plain user is refused, with the reason.
    let output = daemon.console_as(&users.b, "status");
    assert_ne!(
        code(&output),
        Some(0),
        "user b must wait: {}",
        stdout(&output)
    );
    assert!(
        stderr(&output).contains("other than root"),
        "user b is told why: {}",
        stderr(&output)
    );
    end(holder);
    end(root_holder);
    assert!(
        wait_until(Duration::from_secs(20), || daemon
            .console_as(&users.b, "status")
            .status
            .success()),
        "once user a lets go, user b is served"
    );
    assert!(daemon.running(), "scored died:\n{}", daemon.log());
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    daemon.stop();
}

/// One user may hold at most
/// `--max-connections-per-user` connections; the next is refused with a
/// message naming the user and the limit, and other users are not affected.
#[test]
fn the_per_user_connection_limit_refuses_clearly() {
    let Some(users) = test_users("the_per_user_connection_limit") else {
        return;
    };
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--max-connections-per-user")
        .arg("20")
        .start();
    let (holder, lines) = hold_connections_as(&users.a, &daemon.socket, 25, 120);
    let (open, refused) = refusals(&lines);
    assert_eq!(open, 25);
    assert_eq!(refused.len(), 5, "{refused:?}");
    for text in &refused {
        assert!(
            text.contains(&format!(
                "user {} already holds 20 connections",
                users.a.name
            )) && text.contains("--max-connections-per-user 20"),
            "the refusal names the user and the limit: {text}"
        );
    }
    let output = daemon.console_as(&users.a, "status");
    assert_ne!(code(&output), Some(0));
    assert!(
        stderr(&output).contains("already holds 20 connections"),
        "{}",
        stderr(&output)
    );
    let output = daemon.console_as(&users.b, "status");
    assert_eq!(code(&output), Some(0), "user b: {}", stderr(&output));
    let output = daemon.console("status");
    assert_eq!(code(&output), Some(0), "root: {}", stderr(&output));
    end(holder);
    assert!(wait_until(Duration::from_secs(20), || daemon
        .console_as(&users.a, "status")
        .status
        .success()));
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    daemon.stop();
}

/// Reads one reply frame, or `None` when the daemon closed the connection.
fn read_reply(stream: &mut UnixStream) -> Option<Reply> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some(reply)) = proto::decode::<Reply>(&mut bytes, proto::MAX_REPLY) {
            return Some(reply);
        }
        match stream.read(&mut chunk) {
            Ok(0) => return None,
            Ok(len) => bytes.extend_from_slice(&chunk[..len]),
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(error) => panic!("no reply and no close: {error}"),
        }
    }
}

fn status_request() -> Vec<u8> {
    proto::encode(&Request::Console {
        version: proto::VERSION,
        line: "status".into(),
        json: false,
    })
}

/// A connection that begins a request and does not
/// finish it is closed after `--request-timeout`, with a message; clients
/// that sent whole requests, or nothing yet, and wait are never cut, and a
/// job longer than the timeout runs to its end.
#[test]
fn an_unfinished_request_is_cut_after_the_timeout() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--request-timeout")
        .arg("500ms")
        .start();
    let open = || {
        let stream = UnixStream::connect(&daemon.socket).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        stream
    };
    let mut silent = open();
    let mut answered = open();
    answered.write_all(&status_request()).expect("write");
    assert!(
        matches!(
            read_reply(&mut answered),
            Some(Reply::Console { ok: true, .. })
        ),
        "a whole request is answered"
    );
    let job = daemon.spawn(&["sleep", "2"]);
    // Half a header.
    let mut slow = open();
    let started = Instant::now();
    slow.write_all(&[0, 0]).expect("write");
    match read_reply(&mut slow) {
        Some(Reply::Error { message }) => assert!(
            message.contains("incomplete request") && message.contains("500ms"),
            "the message says why: {message}"
        ),
        other => panic!("expected an error frame, got {other:?}"),
    }
    assert!(
        read_reply(&mut slow).is_none(),
        "then the connection closes"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(450) && waited < Duration::from_secs(15),
        "cut after {waited:?}, for a timeout of 500ms"
    );
    // Half a body is cut the same way.
    let mut half_body = open();
    let request = status_request();
    half_body
        .write_all(&request[..request.len() / 2])
        .expect("write");
    assert!(matches!(
        read_reply(&mut half_body),
        Some(Reply::Error { .. })
    ));
    // The idle ones are still served, well after the timeout.
    std::thread::sleep(Duration::from_secs(1));
    for (what, stream) in [("silent", &mut silent), ("answered", &mut answered)] {
        stream.write_all(&status_request()).expect("write");
        assert!(
            matches!(read_reply(stream), Some(Reply::Console { ok: true, .. })),
            "the {what} connection was cut"
        );
    }
    let mut job = job;
    let (status, out) = job.wait(Duration::from_secs(30));
    assert!(
        status.success(),
        "the 2s job under a 500ms request timeout: {out}"
    );
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    daemon.stop();
}

// ----- a stop that never confirms -----

/// One host shared by two one-process gang jobs, so that they alternate.
const ONE_HOST: &str = "host0 cores=1\n";

/// Starts user A's and user B's spinning jobs on the shared host and a
/// loop, run as user A outside the job, that sends SIGCONT to A's rank
/// without pause. Returns the jobs, the pids of their ranks and the loop.
fn continue_attack(
    daemon: &Daemon,
    users: &TestUsers,
) -> (Job, Job, i32, i32, std::process::Child) {
    let mut job_a = daemon.spawn_as(&users.a, &["-nodes=1", &testprog(), "spin", "0"]);
    let pid_a = job_a.wait_pids(1)[0];
    let mut job_b = daemon.spawn_as(&users.b, &["-nodes=1", &testprog(), "spin", "0"]);
    let pid_b = job_b.wait_pids(1)[0];
    let script = format!("while :; do kill -CONT {pid_a} 2>/dev/null; done");
    let attacker = command_as(&users.a, Path::new("/bin/sh"), &["-c", &script])
        .spawn()
        .expect("start the SIGCONT loop");
    (job_a, job_b, pid_a, pid_b, attacker)
}

/// Samples the states of two ranks for 3 s: (samples, A running, B
/// running, both running).
fn sample_states(pid_a: i32, pid_b: i32, daemon: &Daemon) -> (u32, u32, u32, u32) {
    // Read by `scored-testprog tally` (how a sample counts is said there),
    // a process of its own at the daemon's priority: a thread of this
    // process on a loaded machine took a sample only every 70 ms or so,
    // at moments that need not be spread evenly over the slices.
    let output = std::process::Command::new(testprog())
        .args(["tally", "3", &pid_a.to_string(), &pid_b.to_string()])
        .output()
        .expect("run the tally");
    let report = stdout(&output);
    assert!(
        !report.contains("gone"),
        "a rank died during the attack:\n{}",
        daemon.log()
    );
    let field = |name: &str| -> u32 { report_field(&report, "the tally", name) };
    (field("samples"), field("a"), field("b"), field("both"))
}

/// User A keeps sending SIGCONT to its own job's
/// switched-out rank from outside the job. Where cgroups are in use the
/// job is frozen instead: B's job still gets its slices, and A's job never
/// runs while B's does.
#[test]
fn sigcont_from_outside_does_not_steal_another_users_slices() {
    let Some(users) = test_users("sigcont_from_outside") else {
        return;
    };
    let mut daemon = Daemon::builder().hosts(ONE_HOST).timeslice("100ms").start();
    let (mut job_a, mut job_b, pid_a, pid_b, attacker) = continue_attack(&daemon, &users);
    // Let the attack start, then watch for 3 s. The states say who holds
    // the host whatever the load of the machine: a job in its slice is
    // runnable (R), a switched-out one stopped (T) or frozen (D).
    std::thread::sleep(Duration::from_millis(500));
    let (samples, a_running, b_running, both_running) = sample_states(pid_a, pid_b, &daemon);
    end(attacker);
    let report = format!(
        "of {samples} samples over 3s, A was running in {a_running}, B in {b_running}, \
         both at once in {both_running}"
    );
    assert!(
        b_running * 5 >= samples,
        "B's job must keep getting its slices: {report}"
    );
    // The first continue from outside runs A until it is frozen: allow a
    // trace of overlap, far from the half of all samples that an
    // unprotected job shows.
    assert!(
        both_running * 50 <= samples,
        "A ran while B held the host: {report}"
    );
    assert!(
        daemon.log().contains("continued from outside")
            || daemon
                .log()
                .contains("something may be continuing it from outside"),
        "scored noticed the continues:\n{}",
        daemon.log()
    );
    // Both jobs still end normally.
    for job in [&job_a, &job_b] {
        job.signal(nix::sys::signal::Signal::SIGINT);
    }
    job_a.wait(Duration::from_secs(30));
    job_b.wait(Duration::from_secs(30));
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    daemon.stop();
}

/// Without cgroups: nothing can hold a job against
/// its owner's SIGCONT, so a job that keeps being continued from outside
/// is stopped again and, when it goes on, killed with a reason; the other
/// user's job then has the host.
#[test]
fn without_a_freezer_a_job_continued_from_outside_is_killed() {
    let Some(users) = test_users("without_a_freezer") else {
        return;
    };
    let mut daemon = Daemon::builder()
        .hosts(ONE_HOST)
        .timeslice("100ms")
        .arg("--no-cgroups")
        .start();
    let (mut job_a, mut job_b, _pid_a, pid_b, attacker) = continue_attack(&daemon, &users);
    let (status, stderr_a) = job_a.wait(Duration::from_secs(60));
    end(attacker);
    assert_eq!(
        status.code(),
        Some(76),
        "A's job ends as killed by a limit: {stderr_a}"
    );
    assert!(
        stderr_a.contains("continued from outside") || stderr_a.contains("did not stop"),
        "A is told why: {stderr_a}"
    );
    // B now has the host to itself: runnable in (nearly) every sample.
    let started = Instant::now();
    let (mut samples, mut running) = (0u32, 0u32);
    while started.elapsed() < Duration::from_secs(1) {
        samples += 1;
        running += u32::from(proc_stat(pid_b).is_some_and(|stat| stat.state == 'R'));
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        running * 10 >= samples * 9,
        "B runs alone once A is gone: running in {running} of {samples} samples"
    );
    job_b.signal(nix::sys::signal::Signal::SIGINT);
    job_b.wait(Duration::from_secs(30));
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    daemon.stop();
}

// ----- a large launch -----

/// While a job of 1,500 processes is being created, the
/// console answers promptly (the launch goes a batch at a time between
/// events), every rank starts, and the job ends as it should.
#[test]
fn the_console_answers_while_a_large_job_launches() {
    const N: usize = 1500;
    let hosts: String = (0..N).map(|idx| format!("h{idx} cores=1\n")).collect();
    let mut daemon = Daemon::builder().hosts(&hosts).log("scored=info").start();
    let nodes = format!("-nodes={N}");
    let launched = Instant::now();
    let mut job = daemon.spawn(&[&nodes, &testprog(), "ignore-term", "3"]);
    // The status is asked again and again until every rank has said it
    // runs, on one connection, by a program of its own at the daemon's
    // priority (`scored-testprog ask`), so that what is timed is the
    // daemon's answer: neither the start of a console program on a busy
    // machine, nor a thread of this process, which stalls behind the
    // other tests' forks and allocations.
    let socket = daemon.socket.display().to_string();
    let mut asker = std::process::Command::new(testprog())
        .args(["ask", &socket, "status"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the asker");
    let mut all_started = None;
    while launched.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(10));
        if job_lines(&mut job, "pid ") >= N {
            all_started = Some(launched.elapsed());
            break;
        }
    }
    // Its stdin's end tells the asker to stop and report.
    drop(asker.stdin.take());
    let report = stdout(&asker.wait_with_output().expect("the asker ends"));
    let all_started = all_started.unwrap_or_else(|| {
        panic!(
            "only {} of {N} ranks started:\n{}",
            job_lines(&mut job, "pid "),
            daemon.log()
        )
    });
    let field = |name: &str| -> u64 { report_field(&report, "the asker", name) };
    let during = field("asked").saturating_sub(1);
    let worst = Duration::from_micros(field("slowest"));
    eprintln!(
        "{N} ranks started in {all_started:?}; {during} status calls during the launch, the slowest {worst:?}"
    );
    assert!(
        during >= 3 || all_started < Duration::from_millis(500),
        "the console was asked only {during} times while {N} ranks started in {all_started:?}"
    );
    assert!(
        worst < Duration::from_secs(1),
        "a status took {worst:?} while the job launched (all ranks started in {all_started:?})"
    );
    let (status, err) = job.wait(Duration::from_secs(120));
    assert!(status.success(), "the large job ends with status 0: {err}");
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    daemon.stop();
}

/// How many lines starting with `prefix` the job has printed so far.
fn job_lines(job: &mut Job, prefix: &str) -> usize {
    job.count_lines(prefix)
}

/// Gang semantics: a job switched out while its
/// processes are still being created is held whole: the ranks that exist
/// are stopped during the other job's slices, and no new rank appears
/// running meanwhile; its launch resumes in its own slices and it ends as
/// it should.
#[test]
fn a_job_switched_out_during_its_launch_is_stopped_whole() {
    const N: usize = 400;
    let hosts: String = (0..N).map(|idx| format!("h{idx} cores=1\n")).collect();
    let mut daemon = Daemon::builder()
        .hosts(&hosts)
        .timeslice("100ms")
        .log("scored=info")
        .start();
    // The small job takes h0 first; the large one covers every host, h0
    // included, so the two alternate.
    let mut small = daemon.spawn(&["-nodes=1", &testprog(), "spin", "0"]);
    let small_pid = small.wait_pids(1)[0];
    let nodes = format!("-nodes={N}");
    let mut large = daemon.spawn(&[&nodes, &testprog(), "ignore-term", "2"]);
    let started = Instant::now();
    let (mut checks, mut violations) = (0u32, Vec::new());
    while large.count_lines("pid ") < N && started.elapsed() < Duration::from_secs(120) {
        // The count first: a stop of the small job after it was read
        // shows in the count read at the end, whichever state the state's
        // read then found.
        let small_stops = voluntary_switches(small_pid);
        let small_state = proc_stat(small_pid).map(|stat| stat.state);
        if small_state == Some('R') {
            let ranks: Vec<i32> = large
                .lines_with("pid ")
                .iter()
                .filter_map(|text| text.trim().parse().ok())
                .collect();
            // Read the ranks, then the small job again: only a sample taken
            // wholly inside the small job's slice counts. Running at both
            // ends is not enough when reading hundreds of ranks takes longer
            // than a slice: the spinner, which makes no system call, is
            // switched out voluntarily only when it stops, so its count of
            // voluntary switches tells whether it stopped in between.
            let states: Vec<(i32, char)> = ranks
                .iter()
                .filter_map(|pid| proc_stat(*pid).map(|stat| (*pid, stat.state)))
                .collect();
            if proc_stat(small_pid).map(|stat| stat.state) == Some('R')
                && small_stops.is_some()
                && voluntary_switches(small_pid) == small_stops
            {
                checks += 1;
                // Stopped (T), or frozen (D), or already ended (Z).
                violations.extend(
                    states
                        .into_iter()
                        .filter(|(_, state)| !matches!(state, 'T' | 't' | 'D' | 'Z' | 'X')),
                );
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        large.count_lines("pid "),
        N,
        "every rank of the large job starts:\n{}",
        daemon.log()
    );
    eprintln!("{checks} samples in the small job's slices during the launch");
    assert!(
        violations.len() <= 2,
        "ranks of the large job were not stopped during the small job's slice: {violations:?}"
    );
    let (status, err) = large.wait(Duration::from_secs(120));
    assert!(status.success(), "the large job ends with status 0: {err}");
    small.signal(nix::sys::signal::Signal::SIGINT);
    small.wait(Duration::from_secs(30));
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    daemon.stop();
}

/// The process's count of voluntary context switches (`/proc/PID/status`).
fn voluntary_switches(pid: i32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()
}

/// The nice value and scheduling policy in the text of /proc/PID/stat.
fn nice_and_policy(stat: &str) -> Option<(i64, u32)> {
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    Some((fields.get(16)?.parse().ok()?, fields.get(38)?.parse().ok()?))
}

/// A job's processes are created at the daemon's
/// priority, so that creating them does not wait behind a busy machine;
/// the program itself, as root or as a plain user, runs at normal
/// priority (SCHED_OTHER) with its submitter's nice value, as under the
/// shell: nice 0 for a submitter at nice 0.
#[test]
fn jobs_run_at_normal_priority_though_created_at_the_daemons() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    let daemon_stat =
        std::fs::read_to_string(format!("/proc/{}/stat", daemon.pid())).expect("scored's stat");
    let (_, daemon_policy) = nice_and_policy(&daemon_stat).expect("parse");
    if daemon_policy != 1 {
        println!("note: scored runs without SCHED_FIFO here (policy {daemon_policy})");
    }
    let own = std::fs::read_to_string("/proc/self/stat").expect("the test's own stat");
    let (own_nice, _) = nice_and_policy(&own).expect("parse");
    let check = |output: std::process::Output, who: &str| {
        assert_eq!(code(&output), Some(0), "{who}: {}", stderr(&output));
        let text = stdout(&output);
        let lines: Vec<&str> = text.lines().filter(|line| line.contains(')')).collect();
        assert_eq!(lines.len(), 2, "{who}: one stat line per rank:\n{text}");
        for line in lines {
            assert_eq!(
                nice_and_policy(line),
                Some((own_nice, 0)),
                "{who}: a job runs at its submitter's nice {own_nice}, SCHED_OTHER: {line}"
            );
        }
    };
    check(daemon.run(&["-nodes=2", "cat", "/proc/self/stat"]), "root");
    if let Some(users) = test_users("jobs_run_at_normal_priority") {
        check(
            daemon
                .scrun_as(&users.a, &["-nodes=2", "cat", "/proc/self/stat"])
                .output()
                .expect("scrun"),
            "a plain user",
        );
    }
    daemon.stop();
}

/// scored's closer (the process that closes the descriptors users hand
/// over and syncs the daemon's files) runs at real-time priority below
/// the daemon's, as `ps` shows it: asked for work while jobs keep every
/// CPU busy, it does it then, not once a switch's SIGSTOPs free a CPU
/// that the ranks taking their stop need. Where scored has no real-time
/// priority, neither has the closer.
#[test]
fn the_closer_runs_at_real_time_priority_below_the_daemons() {
    // rt_priority and policy (fields 40 and 41).
    let priority_and_policy = |pid: i32| -> Option<(u32, u32)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
        Some((fields.get(37)?.parse().ok()?, fields.get(38)?.parse().ok()?))
    };
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    let (daemon_priority, daemon_policy) =
        priority_and_policy(daemon.pid() as i32).expect("scored's stat");
    // It names itself once it runs.
    let started = Instant::now();
    let closer = loop {
        match daemon.closer() {
            Some(closer) => break closer,
            None if started.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            None => panic!("no closer among the daemon's children"),
        }
    };
    let (priority, policy) = priority_and_policy(closer).expect("the closer's stat");
    if daemon_policy != 1 {
        assert_eq!(
            policy, 0,
            "the closer without the daemon's SCHED_FIFO: normal priority"
        );
        println!("note: scored runs without SCHED_FIFO here (policy {daemon_policy})");
    } else {
        assert_eq!(policy, 1, "the closer runs at SCHED_FIFO");
        assert!(
            priority >= 1 && priority < daemon_priority,
            "the closer's priority {priority} is below the daemon's {daemon_priority}"
        );
    }
    // A job still runs at normal priority.
    let output = daemon.run(&["cat", "/proc/self/stat"]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(
        nice_and_policy(&stdout(&output)).map(|(_, policy)| policy),
        Some(0)
    );
    daemon.stop();
}

/// What one plain user's unfinished requests make
/// scored hold is bounded over all of that user's connections (4 MiB): the
/// connection that goes past it is closed with a message, the others and
/// other users are served.
#[test]
fn unfinished_requests_of_one_user_are_bounded() {
    let Some(users) = test_users("unfinished_requests_of_one_user") else {
        return;
    };
    // The refusal looked for is the budget's: on a loaded machine the
    // transfer of 5 MB may outlast the default request timeout, whose
    // refusal would come first.
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--request-timeout=1h")
        .start();
    let socket = daemon.socket.display().to_string();
    // Five connections each with 1,000,000 bytes of a 1 MiB request: the
    // fifth takes the user past 4 MiB.
    let mut holder = command_as(
        &users.a,
        Path::new(&testprog()),
        &["partial", &socket, "5", "1000000", "5"],
    )
    .stdout(Stdio::piped())
    .spawn()
    .expect("run testprog partial");
    let stdout_pipe = holder.stdout.take().expect("piped");
    let (sender, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout_pipe).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    let (open, refused) = refusals(&lines);
    // What the daemon logged of the clients it dropped, for a failure.
    let drops = || {
        daemon
            .log()
            .lines()
            .filter(|line| line.contains("dropping a client"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(open, 5);
    assert_eq!(
        refused.len(),
        1,
        "one connection is refused; received on the closed ones: {refused:?}\n{}",
        drops()
    );
    assert!(
        refused[0].contains("unfinished requests") && refused[0].contains(&users.a.name),
        "the message says why; received: {:?}\n{}",
        refused[0],
        drops()
    );
    let output = daemon.console_as(&users.b, "status");
    assert_eq!(code(&output), Some(0), "user b: {}", stderr(&output));
    let output = daemon.console("status");
    assert_eq!(code(&output), Some(0), "root: {}", stderr(&output));
    end(holder);
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    daemon.stop();
}

/// Runs scrun as `user` (or root) to its end and returns its exit code and
/// stderr: for a submission expected to be refused.
fn refused_submission(daemon: &Daemon, user: Option<&TestUser>, args: &[&str]) -> String {
    let output = match user {
        Some(user) => daemon.scrun_as(user, args).output(),
        None => daemon.scrun(args).output(),
    }
    .expect("run scrun");
    let text = stderr(&output);
    assert_ne!(code(&output), Some(0), "the submission ran: {text}");
    text
}

/// The number of submissions the daemon holds waiting for resources.
fn waiting_count(daemon: &Daemon) -> u64 {
    daemon.json("status")["waiting"]
        .as_u64()
        .unwrap_or(u64::MAX)
}

/// A plain user who has as many submissions waiting for resources as the
/// per-user budget allows is refused the next one, in words naming that
/// budget, and nothing changes: the waiting ones keep waiting and later
/// run. Another user is not refused because of the first, until the two
/// reach the total budget, which the refusal names in turn; root is held
/// to neither.
#[test]
fn a_user_over_the_waiting_budget_is_refused_and_others_are_not() {
    let Some(users) = test_users("a_user_over_the_waiting_budget") else {
        return;
    };
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--max-waiting-per-user=2")
        .arg("--max-waiting=3")
        .start();
    // Root's job fills the cluster's one admitted job: what follows with
    // -wait waits for it.
    let mut running = daemon.spawn(&["-nodes=1", "sh", "-c", "echo pid $$; exec sleep 60"]);
    let running_pid = running.wait_pids(1)[0];
    daemon.ok("cluster 0 limit jobs=1");
    let wait_args = ["-wait", "-nodes=1", "sh", "-c", "exit 7"];
    let mut waiting = Vec::new();
    for n in 1..=2 {
        waiting.push(daemon.spawn_as(&users.a, &wait_args));
        assert!(
            wait_until(Duration::from_secs(20), || waiting_count(&daemon) == n),
            "user a's submission {n} does not wait:\n{}",
            daemon.log()
        );
    }
    let text = refused_submission(&daemon, Some(&users.a), &wait_args);
    assert!(
        text.contains(&format!(
            "user {} has 2 submissions waiting for resources",
            users.a.name
        )) && text.contains("the budget of 2 waiting submissions per user"),
        "the refusal names the per-user budget: {text}"
    );
    assert_eq!(waiting_count(&daemon), 2, "the refusal changed nothing");
    // User b is not held to user a's budget.
    waiting.push(daemon.spawn_as(&users.b, &wait_args));
    assert!(
        wait_until(Duration::from_secs(20), || waiting_count(&daemon) == 3),
        "user b's submission does not wait:\n{}",
        daemon.log()
    );
    // The total budget holds for every user.
    let text = refused_submission(&daemon, Some(&users.b), &wait_args);
    assert!(
        text.contains("scored holds 3 submissions of users waiting for resources")
            && text.contains("the budget of 3 waiting submissions in total"),
        "the refusal names the total budget: {text}"
    );
    // Root is held to none.
    waiting.push(daemon.spawn(&wait_args));
    assert!(
        wait_until(Duration::from_secs(20), || waiting_count(&daemon) == 4),
        "root's submission does not wait:\n{}",
        daemon.log()
    );
    assert!(alive(running_pid), "the running job was touched");
    // Once room is made, every waiting submission runs to its end.
    daemon.ok("cluster 0 limit jobs=none");
    daemon.ok("kill 1 KILL");
    let (status, _) = running.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(137));
    for mut job in waiting {
        let (status, text) = job.wait(Duration::from_secs(30));
        assert_eq!(status.code(), Some(7), "{text}");
    }
    assert_eq!(waiting_count(&daemon), 0);
}

/// A plain user with as many unfinished jobs as the per-user budget allows
/// is refused the next submission, in words naming that budget; their
/// jobs run on, and once one ends the user may submit again. Another user
/// is not refused because of the first, until the users reach the total
/// budget, which the refusal names; root is held to neither.
#[test]
fn a_user_over_the_jobs_budget_is_refused_and_others_are_not() {
    let Some(users) = test_users("a_user_over_the_jobs_budget") else {
        return;
    };
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--max-jobs-per-user=2")
        .arg("--max-jobs=3")
        .start();
    let args = ["-nodes=1", "sh", "-c", "echo pid $$; exec sleep 60"];
    let mut jobs = Vec::new();
    let mut pids = Vec::new();
    for _ in 0..2 {
        let mut job = daemon.spawn_as(&users.a, &args);
        pids.push(job.wait_pids(1)[0]);
        jobs.push(job);
    }
    let text = refused_submission(&daemon, Some(&users.a), &args);
    assert!(
        text.contains(&format!("user {} has 2 unfinished jobs", users.a.name))
            && text.contains("the budget of 2 jobs per user"),
        "the refusal names the per-user budget: {text}"
    );
    // User b is not held to user a's budget.
    let mut job = daemon.spawn_as(&users.b, &args);
    pids.push(job.wait_pids(1)[0]);
    jobs.push(job);
    // The total budget holds for every user.
    let text = refused_submission(&daemon, Some(&users.b), &args);
    assert!(
        text.contains("scored holds 3 unfinished jobs of users")
            && text.contains("the budget of 3 jobs in total"),
        "the refusal names the total budget: {text}"
    );
    // Root is held to none.
    let mut job = daemon.spawn(&args);
    pids.push(job.wait_pids(1)[0]);
    jobs.push(job);
    assert!(
        pids.iter().all(|pid| alive(*pid)),
        "the refusals touched the jobs"
    );
    // The refused submissions left no job behind.
    let listed = daemon.ok("jobs");
    assert_eq!(
        listed.lines().filter(|line| line.contains("sh -c")).count(),
        4,
        "{listed}"
    );
    // A user whose job ended may submit again.
    let first = jobs.remove(0);
    drop(first);
    assert!(
        wait_until(Duration::from_secs(20), || !alive(pids[0])),
        "user a's first job did not end with its scrun"
    );
    let mut job = daemon.spawn_as(&users.a, &args);
    pids.push(job.wait_pids(1)[0]);
    jobs.push(job);
    drop(jobs);
    assert!(
        wait_until(Duration::from_secs(20), || pids
            .iter()
            .all(|pid| !alive(*pid))),
        "processes left behind"
    );
}
