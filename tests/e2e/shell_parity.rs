//! A job under scrun behaves as the same program run from the
//! user's shell. Each test runs a command with and without scrun and
//! compares what the kernel says (the `SigBlk:`/`SigIgn:` lines of
//! /proc/self/status, /proc/self/limits, `umask`) or what ordinary
//! programs do (bash, dash and python3 traps, coreutils `timeout`, `yes`,
//! `head`), as root and, where the daemon can become another user, as a
//! plain test user.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use scored_tests::*;

/// Reads the signal state of the process that runs it.
const SIGNAL_STATE: &str = "grep -E '^Sig(Blk|Ign):' /proc/self/status";

/// The limits and umask of the process that runs it.
const LIMITS: &str = "cat /proc/self/limits; umask";

/// Lowers limits and sets a umask as an administrator's pam_limits or a
/// careful user would, then runs the rest of the line.
const RESTRICT: &str = "ulimit -Sn 64; ulimit -Hn 128; ulimit -s 4096; ulimit -v 2000000; \
                        ulimit -u 50; ulimit -c 0; umask 077;";

/// A Python with only the standard library, where one is installed for
/// every user (a per-user shim would not run as the test user).
fn python() -> Option<&'static str> {
    let path = "/usr/bin/python3";
    if Path::new(path).exists() {
        Some(path)
    } else {
        println!("skipped the python3 part: {path} is absent");
        None
    }
}

/// `sh -c script` with the environment and directory of the harness's
/// scrun, so that `scrun` inside the script reaches this daemon.
fn shell(daemon: &Daemon, script: &str) -> Command {
    let mut command = Command::new("sh");
    // Started as the harness starts scrun (fork and exec, not
    // posix_spawn, which gives glibc's own signals other dispositions).
    without_stray_descriptors(&mut command);
    command
        .arg("-c")
        .arg(script)
        .env("SCORED_SOCKET", &daemon.socket)
        .env("SCORED_TEST_TAG", &daemon.tag)
        .env_remove("SCORE_OPTIONS")
        .current_dir(&daemon.sandbox.path)
        .stdin(Stdio::null());
    command
}

fn scrun_path() -> String {
    bin("scrun").display().to_string()
}

fn out(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}stderr:\n{}",
        output.status,
        stdout(output),
        stderr(output)
    )
}

/// Runs `command` and checks that it succeeded.
fn ok(mut command: Command, what: &str) -> String {
    let output = command.output().expect("run");
    assert_eq!(code(&output), Some(0), "{what}: {}", out(&output));
    stdout(&output)
}

/// The mask bit of `signal` in a `SigIgn:` value.
fn ignores(state: &str, signal: Signal) -> bool {
    state
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal as i32 - 1)) != 0)
}

fn blocks_nothing(state: &str) -> bool {
    state
        .lines()
        .find_map(|line| line.strip_prefix("SigBlk:"))
        .is_some_and(|hex| hex.trim().trim_start_matches('0').is_empty())
}

/// A daemon as a careless start leaves it: from `nohup` and a script's
/// `&`, with SIGHUP, SIGINT and SIGQUIT ignored, and from a parent that
/// blocks signals (as scrun starts a private scored), none of which may
/// reach jobs.
fn careless_daemon() -> Daemon {
    Daemon::builder()
        .ignoring(&[libc::SIGHUP, libc::SIGINT, libc::SIGQUIT])
        .blocking(&[libc::SIGALRM, libc::SIGUSR1, libc::SIGTSTP, libc::SIGCONT])
        .start()
}

/// The `SigBlk:` value of a process.
fn blocked_mask(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hex = status
        .lines()
        .find_map(|line| line.strip_prefix("SigBlk:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

#[test]
fn scored_replaces_an_inherited_mask_with_its_own() {
    let daemon = careless_daemon();
    // The signals scored reads through its signalfd (SIGUSR2 asks for an
    // in-place restart).
    let own = [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGUSR2,
        libc::SIGTERM,
        libc::SIGCHLD,
    ]
    .iter()
    .fold(0u64, |mask, signal| mask | 1 << (signal - 1));
    assert_eq!(
        blocked_mask(daemon.pid()),
        Some(own),
        "scored kept signals its parent blocked (SIGALRM among them, which bounds its waits)"
    );
    // And it still switches and reaps: a job runs to its end.
    let output = daemon.run(&["sh", "-c", SIGNAL_STATE]);
    assert_eq!(code(&output), Some(0), "{}", out(&output));
    assert!(blocks_nothing(&stdout(&output)), "{}", out(&output));
}

#[test]
fn a_job_starts_with_the_signal_state_of_a_shell_command() {
    let daemon = careless_daemon();
    let direct = ok(shell(&daemon, SIGNAL_STATE), "without scrun");
    let job = ok(daemon.scrun(&["sh", "-c", SIGNAL_STATE]), "under scrun");
    assert_eq!(job, direct, "signal state under scrun differs");
    assert!(blocks_nothing(&job), "signals arrive blocked:\n{job}");
    for signal in [Signal::SIGHUP, Signal::SIGINT, Signal::SIGQUIT] {
        assert!(
            !ignores(&job, signal),
            "scored's own ignored {signal} reached the job:\n{job}"
        );
    }
    // The same for every rank of a parallel job and every stage of a pipe.
    let output = daemon.run(&["-nodes=2", "sh", "-c", SIGNAL_STATE, "==", "cat"]);
    assert_eq!(code(&output), Some(0), "{}", out(&output));
    let expected = direct.repeat(2);
    assert_eq!(stdout(&output), expected, "a rank differs");
}

#[test]
fn signals_the_caller_ignored_stay_ignored_and_no_others() {
    let daemon = careless_daemon();
    let scrun = scrun_path();
    // A non-interactive shell starts a background job with SIGINT and
    // SIGQUIT ignored; nohup ignores SIGHUP.
    for (direct, via_scrun) in [
        (
            format!("{SIGNAL_STATE} & wait"),
            format!("{scrun} sh -c \"{SIGNAL_STATE}\" & wait"),
        ),
        (
            format!("nohup sh -c \"{SIGNAL_STATE}\""),
            format!("nohup {scrun} sh -c \"{SIGNAL_STATE}\""),
        ),
    ] {
        let expected = ok(shell(&daemon, &direct), &direct);
        let job = ok(shell(&daemon, &via_scrun), &via_scrun);
        assert_eq!(job, expected, "{via_scrun}");
        assert!(blocks_nothing(&job), "{job}");
    }
    let background = ok(
        shell(&daemon, &format!("{scrun} sh -c \"{SIGNAL_STATE}\" & wait")),
        "background",
    );
    assert!(
        ignores(&background, Signal::SIGINT) && ignores(&background, Signal::SIGQUIT),
        "the shell's ignores did not reach the job:\n{background}"
    );
    let nohup = ok(
        shell(&daemon, &format!("nohup {scrun} sh -c \"{SIGNAL_STATE}\"")),
        "nohup",
    );
    assert!(ignores(&nohup, Signal::SIGHUP), "{nohup}");
    assert!(!ignores(&nohup, Signal::SIGINT), "{nohup}");
}

#[test]
fn as_a_plain_user_signal_state_limits_and_umask_are_the_callers() {
    let Some(users) = test_users("as_a_plain_user_signal_state_limits_and_umask_are_the_callers")
    else {
        return;
    };
    let daemon = careless_daemon();
    let user = &users.a;
    let sh = Path::new("/bin/sh");
    let expected = ok(command_as(user, sh, &["-c", SIGNAL_STATE]), "as the user");
    let job = ok(
        daemon.scrun_as(user, &["sh", "-c", SIGNAL_STATE]),
        "under scrun",
    );
    assert_eq!(job, expected);
    assert!(blocks_nothing(&job), "{job}");

    let restricted = format!("{RESTRICT} exec sh -c '{LIMITS}'");
    let expected = ok(command_as(user, sh, &["-c", &restricted]), "as the user");
    let scrun = scrun_path();
    let restricted = format!("{RESTRICT} exec {scrun} sh -c '{LIMITS}'");
    let mut command = command_as(user, sh, &["-c", &restricted]);
    command
        .env("SCORED_SOCKET", &daemon.socket)
        .env("SCORED_TEST_TAG", &daemon.tag)
        .env_remove("SCORE_OPTIONS")
        .current_dir(&daemon.sandbox.path);
    let job = ok(command, "under scrun");
    assert_eq!(job, expected, "limits or umask differ from the caller's");
    assert!(job.contains("0077"), "{job}");
    let nofile = job
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .expect("a nofile line");
    assert!(
        nofile.split_whitespace().collect::<Vec<_>>()[3..5] == ["64", "128"],
        "the user's descriptor limits did not reach the job: {nofile}"
    );
    // The hard limit the user lowered cannot be raised back in the job.
    let raise = format!("{RESTRICT} exec {scrun} sh -c 'ulimit -Hn 1024 && echo raised'");
    let mut command = command_as(user, sh, &["-c", &raise]);
    command
        .env("SCORED_SOCKET", &daemon.socket)
        .env("SCORED_TEST_TAG", &daemon.tag)
        .current_dir(&daemon.sandbox.path);
    let output = command.output().expect("run");
    assert_ne!(code(&output), Some(0), "{}", out(&output));
    assert!(!stdout(&output).contains("raised"), "{}", out(&output));
}

#[test]
fn as_root_limits_and_umask_are_the_callers() {
    // scored raises its own descriptor limit where it may; jobs must not
    // get that.
    let daemon = Daemon::start();
    let scrun = scrun_path();
    let expected = ok(
        shell(&daemon, &format!("{RESTRICT} exec sh -c '{LIMITS}'")),
        "without scrun",
    );
    let job = ok(
        shell(
            &daemon,
            &format!("{RESTRICT} exec {scrun} sh -c '{LIMITS}'"),
        ),
        "under scrun",
    );
    assert_eq!(job, expected, "limits or umask differ from the caller's");
    assert!(job.contains("0077"), "{job}");
    // Without restrictions too: the daemon's raised descriptor limit never
    // reaches the job.
    let expected = ok(shell(&daemon, LIMITS), "without scrun");
    let job = ok(daemon.scrun(&["sh", "-c", LIMITS]), "under scrun");
    assert_eq!(job, expected);
}

#[test]
fn bad_inherited_fields_are_refused_with_a_clear_error() {
    use scored_proto::client::Connection;
    use scored_proto::proto::{self, Reply, Request, WireRlimit};
    use std::os::fd::AsFd;

    let daemon = Daemon::start();
    /// Ignored signals, limits, umask, and what the refusal must say.
    type Case = (Vec<i32>, Vec<WireRlimit>, Option<u32>, &'static str);
    let cases: [Case; 4] = [
        (
            vec![],
            vec![WireRlimit {
                resource: "nofile".into(),
                soft: Some(100),
                hard: Some(10),
            }],
            None,
            "resource limit nofile: soft limit 100 is above the hard limit 10",
        ),
        (
            vec![],
            vec![WireRlimit {
                resource: "nofiles".into(),
                soft: None,
                hard: None,
            }],
            None,
            "unknown resource limit \"nofiles\"",
        ),
        (vec![9], vec![], None, "signal 9 cannot be ignored"),
        (
            vec![],
            vec![],
            Some(0o7777),
            "umask 7777 is not a file mode mask",
        ),
    ];
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    for (ignored_signals, rlimits, umask, expected) in cases {
        let mut connection = Connection::connect(&daemon.socket).expect("connect");
        let request = Request::Submit {
            version: proto::VERSION,
            submit: proto::Submit {
                stages: vec![vec!["true".into()]],
                joiner: proto::Joiner::Sequence,
                options: proto::JobOptions {
                    procs: proto::ProcRequest::Nodes(1),
                    priority: None,
                    wait: false,
                    memory: None,
                    disk: None,
                    pty: false,
                    time_ms: None,
                    batch: Default::default(),
                },
                env: vec![("SCORED_TEST_TAG".into(), daemon.tag.as_str().into())],
                cwd: "/".into(),
                ignored_signals,
                rlimits,
                umask,
                nice: None,
                ioprio: None,
                closed_stdio: Vec::new(),
                fds: Vec::new(),
                pmi_ranks: 0,
                pmix_namespace: None,
                pmi_port: false,
            },
        };
        connection
            .send_with_fds(&request, &[null.as_fd(), null.as_fd(), null.as_fd()])
            .expect("send");
        match connection.recv().expect("a reply") {
            Reply::Rejected { reason, .. } => {
                assert!(reason.contains(expected), "{reason:?} lacks {expected:?}")
            }
            other => panic!("expected a rejection naming {expected:?}, got {other:?}"),
        }
    }
    // Nothing was admitted, and the daemon still serves.
    assert!(daemon.ok("jobs all").lines().count() <= 1);
    let output = daemon.run(&["true"]);
    assert_eq!(code(&output), Some(0), "{}", out(&output));
}

#[test]
fn a_pipeline_ends_like_a_shell_pipeline() {
    let daemon = Daemon::start();
    let expected = ok(shell(&daemon, "yes | head -n 2"), "yes | head");
    assert_eq!(expected, "y\ny\n");
    for _ in 0..5 {
        let output = daemon.run(&["yes", "==", "head", "-n", "2"]);
        assert_eq!(code(&output), Some(0), "{}", out(&output));
        assert_eq!(stdout(&output), expected, "{}", out(&output));
        assert_eq!(stderr(&output), "", "SIGPIPE is not worth a message");
    }
    let reader = "read a; echo got $a; exec 0<&-; sleep 1; echo after";
    let expected = ok(shell(&daemon, &format!("yes | sh -c '{reader}'")), "shell");
    let output = daemon.run(&["yes", "==", "sh", "-c", reader]);
    assert_eq!(code(&output), Some(0), "{}", out(&output));
    assert_eq!(stdout(&output), expected);
    assert_eq!(expected, "got y\nafter\n");
    // The status is the last stage's, as without `set -o pipefail`.
    for (stages, status) in [
        (&["sh", "-c", "exit 3", "==", "true"][..], 0),
        (&["true", "==", "sh", "-c", "exit 3"][..], 3),
    ] {
        let output = daemon.run(stages);
        assert_eq!(code(&output), Some(status), "{stages:?}: {}", out(&output));
    }
}

/// Waits for scrun's job to print `id N` and returns N.
fn job_id(job: &mut Job) -> u64 {
    job.wait_lines("id ", 1)[0]
        .trim()
        .parse()
        .expect("a job id")
}

/// Kills a job from the console as its owner and returns scrun's status,
/// its stderr and how long it took from the kill to scrun's exit.
fn console_kill(daemon: &Daemon, job: &mut Job, signal: &str) -> (Option<i32>, String, Duration) {
    let id = job_id(job);
    let started = Instant::now();
    daemon.ok(format!("kill {id} {signal}").trim_end());
    let (status, message) = job.wait(Duration::from_secs(30));
    (status.code(), message, started.elapsed())
}

#[test]
fn a_job_that_traps_sigterm_ends_by_its_own_exit_with_its_own_status() {
    // A long grace, so that a job that ends before it ended by itself.
    let daemon = Daemon::builder().arg("--kill-grace=20s").start();
    let trap = "trap 'echo trapped; exit 0' TERM; echo id $SCORE_JOBID; sleep 60 & wait";
    let mut programs = vec![
        vec!["bash".to_string(), "-c".into(), trap.into()],
        vec!["dash".to_string(), "-c".into(), trap.into()],
    ];
    if let Some(python) = python() {
        // The handler writes with os.write: a SIGTERM that lands while
        // print('id') is still flushing would make a print in the handler
        // fail with "reentrant call" (Python's own rule, with or without
        // scrun).
        programs.push(vec![
            python.to_string(),
            "-c".into(),
            "import os, signal, sys, time\n\
             signal.signal(signal.SIGTERM, lambda *_: (os.write(1, b'trapped\\n'), sys.exit(0)))\n\
             print('id', os.environ['SCORE_JOBID'], flush=True)\n\
             time.sleep(60)"
                .into(),
        ]);
    }
    for program in programs {
        let args: Vec<&str> = program.iter().map(String::as_str).collect();
        let mut job = daemon.spawn(&args);
        let (status, message, took) = console_kill(&daemon, &mut job, "");
        assert_eq!(status, Some(0), "{}: {message}", args[0]);
        assert!(
            message.contains("asked to end by its owner; it exited with status 0"),
            "{}: {message}",
            args[0]
        );
        assert_eq!(message.lines().count(), 1, "{message}");
        assert!(job.wait_lines("trapped", 1).len() == 1);
        assert!(
            took < Duration::from_secs(10),
            "{}: the trap did not run; the job ended after {took:?}",
            args[0]
        );
    }
}

#[test]
fn kills_end_a_normal_job_by_the_signal_they_send() {
    let daemon = Daemon::builder().arg("--kill-grace=20s").start();
    let sleeper = ["sh", "-c", "echo id $SCORE_JOBID; exec sleep 60"];
    for (signal, status, name) in [
        ("", 143, "SIGTERM"),
        ("TERM", 143, "SIGTERM"),
        ("HUP", 129, "SIGHUP"),
        ("INT", 130, "SIGINT"),
    ] {
        let mut job = daemon.spawn(&sleeper);
        let (code, message, took) = console_kill(&daemon, &mut job, signal);
        assert_eq!(code, Some(status), "kill {signal}: {message}");
        assert!(message.contains(name), "kill {signal}: {message}");
        assert!(
            took < Duration::from_secs(10),
            "kill {signal} took {took:?}"
        );
    }
    // SIGINT to scrun (Ctrl-C) reaches the job as SIGINT, and scrun ends
    // by it as the program did, without a word and before the grace.
    let mut job = daemon.spawn(&sleeper);
    job_id(&mut job);
    let started = Instant::now();
    job.signal(Signal::SIGINT);
    let (status, message) = job.wait(Duration::from_secs(30));
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?} {message}");
    }
    assert_eq!(message, "");
    assert!(started.elapsed() < Duration::from_secs(10));
    // `shutdown now` too.
    let mut job = daemon.spawn(&sleeper);
    job_id(&mut job);
    let started = Instant::now();
    daemon.ok("shutdown now");
    let (status, message) = job.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(143), "{message}");
    assert!(message.contains("shutting down"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_signal_that_ends_a_job_is_named_in_one_line() {
    let daemon = Daemon::start();
    for (signal, status, name) in [
        ("SEGV", 139, "SIGSEGV (segmentation fault)"),
        ("USR1", 138, "SIGUSR1"),
        ("QUIT", 131, "SIGQUIT"),
    ] {
        let script = format!("kill -{signal} $$");
        let direct = shell(&daemon, &script).status().expect("sh");
        assert_eq!(
            direct.signal().map(|signal| 128 + signal),
            Some(status),
            "{script} without scrun: {direct}"
        );
        let output = daemon.run(&["sh", "-c", &script]);
        assert_eq!(code(&output), Some(status), "{}", out(&output));
        let message = stderr(&output);
        assert_eq!(message.lines().count(), 1, "{message}");
        assert!(
            message.starts_with("scrun: job ")
                && message.contains(&format!("rank 0 killed by {name}")),
            "{message}"
        );
    }
    // A plain `exit N` is the program's own business: no line.
    let output = daemon.run(&["sh", "-c", "exit 7"]);
    assert_eq!(code(&output), Some(7));
    assert_eq!(stderr(&output), "");
}

#[test]
fn signals_work_inside_a_job() {
    let daemon = Daemon::start();
    let mut checks = vec![
        // coreutils timeout ends its child with SIGTERM.
        (
            "timeout 1 sleep 5; echo $?".to_string(),
            "124\n".to_string(),
        ),
        (
            "sleep 10 & kill $!; wait $!; echo $?".to_string(),
            "143\n".to_string(),
        ),
    ];
    if let Some(python) = python() {
        checks.push((
            format!(
                "{python} -c 'import subprocess; p = subprocess.Popen([\"sleep\", \"10\"]); p.terminate(); print(p.wait())'"
            ),
            "-15\n".to_string(),
        ));
    }
    for (script, expected) in checks {
        let started = Instant::now();
        let direct = ok(shell(&daemon, &script), &script);
        let direct_took = started.elapsed();
        assert_eq!(direct, expected, "{script} without scrun");
        let started = Instant::now();
        let job = ok(daemon.scrun(&["sh", "-c", &script]), &script);
        let took = started.elapsed();
        assert_eq!(job, direct, "{script}");
        assert!(
            took < direct_took + Duration::from_secs(3),
            "{script} took {took:?} under scrun, {direct_took:?} without"
        );
    }
}

/// The parent of `pid`, from /proc/PID/stat.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// scrun started by `how` (a shell line with `SCRUN` in it, printing
/// scrun's pid first), signalled with `signal` once the job runs: the job
/// must run to its end, as the program alone would.
fn survives(daemon: &Daemon, how: &str, signal: Signal) {
    let program = "sh -c 'echo up; sleep 2; echo done'";
    for (label, line) in [
        ("without scrun", how.replace("SCRUN ", "")),
        ("under scrun", how.replace("SCRUN", &scrun_path())),
    ] {
        let line = line.replace("PROGRAM", program);
        let mut child = shell(daemon, &line)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh");
        let mut output = child.stdout.take().expect("stdout");
        let mut seen = String::new();
        let mut byte = [0u8; 1];
        // The pid line and `up` from the job, in either order.
        let pid = |seen: &str| {
            seen.split_inclusive('\n')
                .filter(|line| line.ends_with('\n'))
                .find_map(|line| line.trim().parse::<i32>().ok())
        };
        while pid(&seen).is_none() || !seen.contains("up\n") {
            match output.read(&mut byte) {
                Ok(1) => seen.push(byte[0] as char),
                _ => panic!("{label}: the job did not start: {seen:?}"),
            }
        }
        let pid = pid(&seen).expect("seen above");
        // Never signal anything but the shell's own child.
        assert_eq!(
            parent_of(pid),
            Some(child.id() as i32),
            "{label}: {pid} is not the shell's child"
        );
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        let mut rest = String::new();
        let _ = output.read_to_string(&mut rest);
        let status = child.wait().expect("wait");
        let mut errors = String::new();
        let _ = child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut errors);
        assert_eq!(
            rest, "done\n",
            "{label}: {signal} ended the job ({status}); {errors}"
        );
        assert!(status.success(), "{label}: {status}; {errors}");
    }
}

#[test]
fn a_scrun_that_inherited_an_ignored_signal_ignores_it() {
    let daemon = Daemon::start();
    // nohup ignores SIGHUP for what it runs.
    survives(
        &daemon,
        "nohup SCRUN PROGRAM & echo $!; wait",
        Signal::SIGHUP,
    );
    // A non-interactive shell's background job ignores SIGINT and SIGQUIT.
    survives(&daemon, "SCRUN PROGRAM & echo $!; wait", Signal::SIGINT);
    survives(&daemon, "SCRUN PROGRAM & echo $!; wait", Signal::SIGQUIT);
}

#[test]
fn ctrl_c_on_a_terminal_reaches_the_job_as_sigint_and_ends_scrun_by_it() {
    let daemon = Daemon::builder().arg("--kill-grace=20s").start();
    // script(1) runs scrun on a pseudo-terminal; the ^C it is fed becomes
    // SIGINT from the terminal's line discipline. script starts $SHELL -c,
    // and a non-interactive dash waiting for scrun would die of that SIGINT
    // itself (bash waits and takes scrun's status): `exec` leaves scrun
    // alone in the foreground group whatever the shell.
    let line = format!(
        "exec {} sh -c 'echo id \\$SCORE_JOBID; exec sleep 60'",
        scrun_path()
    );
    let mut child = shell(&daemon, &format!("script -qec \"{line}\" /dev/null"))
        .env("SHELL", "/bin/sh")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script");
    let mut output = child.stdout.take().expect("stdout");
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("id ") || !seen.ends_with(b"\n") {
        match output.read(&mut byte) {
            Ok(1) => seen.push(byte[0]),
            _ => panic!(
                "the job never started: {:?}",
                String::from_utf8_lossy(&seen)
            ),
        }
    }
    let started = Instant::now();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"\x03").expect("write ^C");
        // script ends when its input does; keep it open until scrun is gone.
        let mut rest = Vec::new();
        let _ = output.read_to_end(&mut rest);
        seen.extend(rest);
    }
    let status = child.wait().expect("wait");
    let text = String::from_utf8_lossy(&seen);
    // script(1) gives 128+N for a child killed by signal N.
    assert_eq!(status.code(), Some(130), "{text}");
    assert!(!text.contains("killing job"), "{text}");
    assert!(!text.contains("SIGTERM"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn as_a_plain_user_pipelines_kills_and_signals_behave_as_in_a_shell() {
    let Some(users) =
        test_users("as_a_plain_user_pipelines_kills_and_signals_behave_as_in_a_shell")
    else {
        return;
    };
    let daemon = Daemon::builder().arg("--kill-grace=20s").start();
    let user = &users.a;
    for _ in 0..3 {
        let output = daemon
            .scrun_as(user, &["yes", "==", "head", "-n", "2"])
            .output()
            .expect("run");
        assert_eq!(code(&output), Some(0), "{}", out(&output));
        assert_eq!(stdout(&output), "y\ny\n", "{}", out(&output));
    }
    let trap = "trap 'echo trapped; exit 0' TERM; echo id $SCORE_JOBID; sleep 60 & wait";
    // Killed by its owner, through the console as that user.
    let mut job = daemon.spawn_as(user, &["bash", "-c", trap]);
    let id = job_id(&mut job);
    let reply = daemon.console_as(user, &format!("kill {id}"));
    assert_eq!(code(&reply), Some(0), "{}", out(&reply));
    let (status, message) = job.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{message}");
    assert!(
        message.contains("asked to end by its owner; it exited with status 0"),
        "{message}"
    );
    // Killed by an operator (root), who is named as such.
    let mut job = daemon.spawn_as(user, &["dash", "-c", trap]);
    let id = job_id(&mut job);
    daemon.ok(&format!("kill {id}"));
    let (status, message) = job.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{message}");
    assert!(
        message.contains("asked to end by an operator; it exited with status 0"),
        "{message}"
    );
    // A crash is named; a signal inside the job works.
    let output = daemon
        .scrun_as(user, &["sh", "-c", "kill -SEGV $$"])
        .output()
        .expect("run");
    assert_eq!(code(&output), Some(139), "{}", out(&output));
    assert!(
        stderr(&output).contains("rank 0 killed by SIGSEGV (segmentation fault)"),
        "{}",
        out(&output)
    );
    let started = Instant::now();
    let output = daemon
        .scrun_as(user, &["sh", "-c", "timeout 1 sleep 5; echo $?"])
        .output()
        .expect("run");
    assert_eq!(stdout(&output), "124\n", "{}", out(&output));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}
