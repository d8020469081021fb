//! Identity and rights. Jobs run as the user who submitted them,
//! with that user's groups and nothing of the daemon's (capabilities,
//! descriptors); users may touch only their own jobs, operators any; queues
//! with `group=` admit only members; and the socket path cannot be
//! hijacked. These tests need root (to create users and to be a daemon that
//! can become them); elsewhere they print why they skip.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use scored_tests::*;

/// stdout and stderr together, for messages that may go to either.
fn text(output: &Output) -> String {
    format!("{}{}", stdout(output), stderr(output))
}

fn denied(output: &Output, line: &str) {
    assert_eq!(
        code(output),
        Some(1),
        "'{line}' must fail: {}",
        text(output)
    );
    assert!(
        text(output).contains("permission denied"),
        "'{line}' must say permission denied: {}",
        text(output)
    );
}

/// Checks one rank's report: `id -u`, `id -g`, `id -G`, the `Cap*` lines
/// of /proc/self/status, `ls -l /proc/self/fd`, `PMI_FD` and the owner
/// and mode of `$SCORE_TMPDIR`.
fn check_identity(users: &TestUsers, report: &[&str], out: &str) {
    assert!(report.len() >= 3, "a rank did not report:\n{out}");
    assert_eq!(report[0], users.a.uid.to_string(), "uid:\n{out}");
    assert_eq!(report[1], users.a.gid.to_string(), "primary gid:\n{out}");
    let groups: Vec<u32> = report[2]
        .split_whitespace()
        .filter_map(|gid| gid.parse().ok())
        .collect();
    assert!(
        groups.contains(&users.a.gid) && groups.contains(&users.group),
        "the job must have the user's primary and supplementary groups, has {groups:?}"
    );
    assert!(
        !groups.contains(&0),
        "root's group leaked into the job: {groups:?}"
    );
    for cap in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        let value = report
            .iter()
            .find_map(|line| line.strip_prefix(&format!("{cap}:")))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {cap} line:\n{out}"));
        assert!(
            value.trim_start_matches('0').is_empty(),
            "{cap} must be empty, is {value}"
        );
    }
    // `ls -l /proc/self/fd` lists ls's own descriptors: the job's stdio
    // (stdout is the pipe to sed here), the directory ls is reading, and
    // the rank's connection to scrun's PMI server, at `PMI_FD`.
    // Anything else leaked from scored.
    let pmi_fd = report
        .iter()
        .find_map(|line| line.strip_prefix("pmi_fd "))
        .unwrap_or_else(|| panic!("no pmi_fd line:\n{out}"));
    let fds: Vec<(&str, &str)> = report
        .iter()
        .filter_map(|line| line.split_once(" -> "))
        .map(|(left, target)| (left.split_whitespace().last().unwrap_or(""), target))
        .collect();
    let leaked: Vec<&(&str, &str)> = fds
        .iter()
        .filter(|(fd, target)| {
            let stdio = ["0", "1", "2"].contains(fd);
            let ls_reading = target.starts_with("/proc/") && target.ends_with("/fd");
            let pmi = *fd == pmi_fd && target.starts_with("socket:");
            !stdio && !ls_reading && !pmi
        })
        .collect();
    assert!(
        leaked.is_empty(),
        "descriptors leaked into the job: {leaked:?}\n{out}"
    );
    assert_eq!(
        fds.iter()
            .filter(|(fd, _)| ["0", "1", "2"].contains(fd))
            .count(),
        3,
        "stdin, stdout and stderr:\n{out}"
    );
    let tmpdir = report
        .iter()
        .find_map(|line| line.strip_prefix("tmpdir "))
        .unwrap_or_else(|| panic!("no tmpdir line:\n{out}"));
    assert_eq!(
        tmpdir,
        format!("{} {} 700", users.a.uid, users.a.gid),
        "owner, group and mode of $SCORE_TMPDIR"
    );
}

#[test]
fn a_job_runs_as_its_user_with_its_groups_and_nothing_of_the_daemon() {
    let Some(users) = test_users("a_job_runs_as_its_user") else {
        return;
    };
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    // Each rank reports through one sed, its lines prefixed with its rank,
    // so that the two reports can be told apart however they interleave.
    let script = "{ id -u; id -g; id -G; grep '^Cap' /proc/self/status; \
                  ls -l /proc/self/fd; echo \"pmi_fd $PMI_FD\"; \
                  stat -c 'tmpdir %u %g %a' \"$SCORE_TMPDIR\"; } 2>&1 \
                  | sed \"s/^/rank$SCORE_RANK /\"";
    let output = daemon
        .scrun_as(&users.a, &["-nodes=2", "sh", "-c", script])
        .output()
        .expect("scrun");
    assert_eq!(code(&output), Some(0), "{}", text(&output));
    let out = stdout(&output);
    for rank in ["rank0 ", "rank1 "] {
        let report: Vec<&str> = out
            .lines()
            .filter_map(|line| line.strip_prefix(rank))
            .collect();
        check_identity(&users, &report, &out);
    }
    // The scheduler's record names the user too.
    assert!(wait_until(Duration::from_secs(10), || daemon
        .json("jobs all")
        .as_array()
        .is_some_and(|jobs| jobs
            .iter()
            .any(|job| job["user"] == users.a.name.as_str()))));
}

#[test]
fn users_touch_only_their_own_jobs_and_cannot_change_the_daemon() {
    let Some(users) = test_users("users_touch_only_their_own_jobs") else {
        return;
    };
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--kill-grace")
        .arg("1s")
        .start();
    let mut first = daemon.spawn_as(&users.a, &["-nodes=1", &testprog(), "spin", "0"]);
    let pid = first.wait_pids(1)[0];
    for line in [
        "kill 1",
        "kill 1 KILL",
        "suspend 1",
        "resume 1",
        "queue 1 deactivate",
        "queue 1 disable",
        "queue 1 set mode=exclusive",
        "move 1 2",
        "timeslice 1s",
        "cluster 0 limit jobs=1",
        "shutdown now",
    ] {
        denied(&daemon.console_as(&users.b, line), line);
    }
    // Read-only commands are open to everyone.
    for line in ["status", "jobs", "job 1", "queues", "hosts", "clusters"] {
        let output = daemon.console_as(&users.b, line);
        assert_eq!(
            code(&output),
            Some(0),
            "'{line}' as user b: {}",
            text(&output)
        );
    }
    assert!(alive(pid), "user b's attempts touched user a's job");
    assert_eq!(daemon.job_field(1, "state"), "running");
    assert_eq!(daemon.json("queues")[1]["state"], "activated");
    // User a may not change the daemon either, but may hold, release and
    // kill its own job.
    denied(
        &daemon.console_as(&users.a, "queue 1 deactivate"),
        "queue 1 deactivate",
    );
    let output = daemon.console_as(&users.a, "suspend 1");
    assert_eq!(code(&output), Some(0), "{}", text(&output));
    assert!(wait_until(Duration::from_secs(5), || proc_stat(pid)
        .is_some_and(|stat| stat.state == 'T')));
    let output = daemon.console_as(&users.a, "resume 1");
    assert_eq!(code(&output), Some(0), "{}", text(&output));
    assert!(wait_until(Duration::from_secs(5), || proc_stat(pid)
        .is_some_and(|stat| stat.state != 'T')));
    let output = daemon.console_as(&users.a, "kill 1");
    assert_eq!(code(&output), Some(0), "{}", text(&output));
    let (status, message) = first.wait(Duration::from_secs(30));
    assert!(!status.success());
    assert!(message.contains("by its owner"), "{message}");
    // Root may kill anybody's job.
    let mut second = daemon.spawn_as(&users.a, &["-nodes=1", &testprog(), "spin", "0"]);
    let pid = second.wait_pids(1)[0];
    denied(&daemon.console_as(&users.b, "kill 2"), "kill 2");
    daemon.ok("kill 2");
    let (_, message) = second.wait(Duration::from_secs(30));
    assert!(message.contains("by an operator"), "{message}");
    assert!(wait_until(Duration::from_secs(5), || !alive(pid)));
    assert!(daemon.all_job_pids().is_empty());
}

#[test]
fn the_operator_may_change_queues_and_touch_any_job() {
    let Some(users) = test_users("the_operator_may_change_queues") else {
        return;
    };
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--operator")
        .arg("scored-test-b")
        .arg("--kill-grace")
        .arg("1s")
        .start();
    let mut job = daemon.spawn_as(&users.a, &["-nodes=1", &testprog(), "spin", "0"]);
    let pid = job.wait_pids(1)[0];
    for line in [
        "queue 2 deactivate",
        "queue 2 activate",
        "timeslice 200ms",
        "suspend 1",
    ] {
        let output = daemon.console_as(&users.b, line);
        assert_eq!(
            code(&output),
            Some(0),
            "'{line}' as the operator: {}",
            text(&output)
        );
    }
    assert!(wait_until(Duration::from_secs(5), || proc_stat(pid)
        .is_some_and(|stat| stat.state == 'T')));
    // An operator's hold is the operator's to release.
    let output = daemon.console_as(&users.a, "resume 1");
    assert_eq!(code(&output), Some(1), "{}", text(&output));
    assert!(text(&output).contains("operator"), "{}", text(&output));
    let output = daemon.console_as(&users.b, "kill 1");
    assert_eq!(code(&output), Some(0), "{}", text(&output));
    let (_, message) = job.wait(Duration::from_secs(30));
    assert!(message.contains("by an operator"), "{message}");
    // The other users are still plain users.
    denied(
        &daemon.console_as(&users.a, "queue 2 deactivate"),
        "queue 2 deactivate",
    );
    assert!(wait_until(Duration::from_secs(5), || !alive(pid)));
}

#[test]
fn a_queue_with_a_group_admits_only_its_members() {
    let Some(users) = test_users("a_queue_with_a_group_admits_only_its_members") else {
        return;
    };
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .rc(&format!("queue 1 set group={TEST_GROUP}\n"))
        .start();
    // User a has the group as a supplementary group only.
    let member = daemon
        .scrun_as(&users.a, &["-priority=1", "id", "-G"])
        .output()
        .expect("scrun");
    assert_eq!(code(&member), Some(0), "{}", text(&member));
    assert!(
        stdout(&member)
            .split_whitespace()
            .any(|gid| gid == users.group.to_string()),
        "{}",
        stdout(&member)
    );
    let outsider = daemon
        .scrun_as(&users.b, &["-priority=1", "true"])
        .output()
        .expect("scrun");
    assert_eq!(
        code(&outsider),
        Some(scored_proto::exitcode::REJECTED),
        "{}",
        text(&outsider)
    );
    let message = stderr(&outsider);
    assert!(
        message.contains(TEST_GROUP)
            && message.contains("scored-test-b")
            && message.contains("queue 1"),
        "the rejection must name the queue, the group and the user: {message}"
    );
    // Other queues stay open to user b; root passes everywhere.
    let other = daemon
        .scrun_as(&users.b, &["-priority=2", "true"])
        .output()
        .expect("scrun");
    assert_eq!(code(&other), Some(0), "{}", text(&other));
    assert_eq!(code(&daemon.run(&["-priority=1", "true"])), Some(0));
    // Nothing of the rejected submission was admitted.
    let jobs = daemon.json("jobs all");
    let n_jobs = jobs.as_array().map_or(0, Vec::len);
    assert_eq!(n_jobs, 3, "{jobs}");
}

// ----- the socket -----

/// Starts scored on `socket` and returns its output if it exits within
/// 10 s (a refusal), or `None` (and stops it) if it kept running.
fn try_start(sandbox: &Sandbox, socket: &Path) -> Option<Output> {
    let mut child = Command::new(bin("scored"))
        .arg("--socket")
        .arg(socket)
        .arg("--state-dir")
        .arg(sandbox.path.join("state"))
        .arg("--rc")
        .arg(sandbox.write("empty.rc", ""))
        .current_dir(&sandbox.path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start scored");
    let exited = wait_until(Duration::from_secs(10), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if exited {
        return Some(child.wait_with_output().expect("output"));
    }
    assert!(
        wait_until(Duration::from_secs(20), || {
            std::os::unix::net::UnixStream::connect(socket).is_ok()
        }),
        "scored neither refused nor listened on {}",
        socket.display()
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    None
}

fn refused(sandbox: &Sandbox, socket: &Path, expected: &str) {
    let output = try_start(sandbox, socket)
        .unwrap_or_else(|| panic!("scored started on {}", socket.display()));
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(expected),
        "expected {expected:?} in: {}",
        stderr(&output)
    );
}

/// Leaves a socket file that nobody listens on.
fn stale_socket(path: &Path) {
    drop(std::os::unix::net::UnixListener::bind(path).expect("bind"));
    assert!(path.exists());
}

#[test]
fn scored_refuses_a_socket_path_that_is_not_its_own() {
    let sandbox = Sandbox::new();
    // A regular file is never removed.
    let file = sandbox.write("file.sock", "precious");
    refused(&sandbox, &file, "not a socket");
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "precious");
    // A directory that others may write to (without the sticky bit).
    let open = sandbox.path.join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    refused(&sandbox, &open.join("s.sock"), "writable by other users");
    assert!(!open.join("s.sock").exists());
    // With the sticky bit, as /tmp, others cannot replace our socket: allowed.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    assert!(
        try_start(&sandbox, &open.join("s.sock")).is_none(),
        "a sticky directory is safe"
    );
    // A symbolic link is not a socket, whatever it points to.
    let link = sandbox.path.join("link.sock");
    std::os::unix::fs::symlink(&file, &link).expect("symlink");
    refused(&sandbox, &link, "not a socket");
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "precious");
}

#[test]
fn scored_refuses_another_users_socket_or_directory() {
    let Some(users) = test_users("scored_refuses_another_users_socket") else {
        return;
    };
    let sandbox = Sandbox::new();
    let theirs = sandbox.path.join("theirs.sock");
    stale_socket(&theirs);
    std::os::unix::fs::chown(&theirs, Some(users.b.uid), Some(users.b.gid)).expect("chown");
    refused(&sandbox, &theirs, "belongs to uid");
    assert!(theirs.exists(), "another user's socket must be left alone");
    let dir = sandbox.path.join("theirs");
    std::fs::create_dir(&dir).expect("mkdir");
    std::os::unix::fs::chown(&dir, Some(users.b.uid), Some(users.b.gid)).expect("chown");
    refused(&sandbox, &dir.join("s.sock"), "belongs to uid");
}

#[test]
fn scored_replaces_a_stale_socket_but_not_a_live_one() {
    let sandbox = Sandbox::new();
    let socket: PathBuf = sandbox.path.join("stale.sock");
    stale_socket(&socket);
    assert!(
        try_start(&sandbox, &socket).is_none(),
        "scored must replace a stale socket"
    );
    let daemon = Daemon::start();
    refused(&sandbox, &daemon.socket, "already listening");
    // The first daemon is unharmed.
    daemon.ok("status");
    assert_eq!(code(&daemon.run(&["true"])), Some(0));
}

#[test]
fn the_socket_and_state_directory_have_safe_permissions() {
    let daemon = Daemon::start();
    let socket = std::fs::symlink_metadata(&daemon.socket).expect("socket");
    let expected = if is_root() { 0o666 } else { 0o600 };
    assert_eq!(socket.permissions().mode() & 0o7777, expected);
    assert_eq!(socket.uid(), nix::unistd::geteuid().as_raw());
    for dir in ["state", "state/jobs"] {
        let meta = std::fs::metadata(daemon.sandbox.path.join(dir)).expect("state directory");
        assert_eq!(
            meta.permissions().mode() & 0o022,
            0,
            "{dir} must not be writable by others: {:o}",
            meta.permissions().mode()
        );
    }
    // A missing socket directory is created for the daemon's user only.
    let sandbox = Sandbox::new();
    let socket = sandbox.path.join("new/dir/s.sock");
    assert!(try_start(&sandbox, &socket).is_none());
    let meta = std::fs::metadata(sandbox.path.join("new/dir")).expect("created");
    assert_eq!(meta.permissions().mode() & 0o022, 0);
}

#[test]
fn scored_refuses_a_state_directory_others_may_write() {
    let sandbox = Sandbox::new();
    let state = sandbox.path.join("state");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    refused(
        &sandbox,
        &sandbox.path.join("s.sock"),
        "writable by other users",
    );
    // The same for the directory of the jobs' scratch directories.
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::create_dir(state.join("jobs")).expect("mkdir");
    std::fs::set_permissions(state.join("jobs"), std::fs::Permissions::from_mode(0o777))
        .expect("chmod");
    refused(
        &sandbox,
        &sandbox.path.join("s.sock"),
        "writable by other users",
    );
}

// ----- a daemon that is not root -----

/// A daemon that is not root cannot change credentials, so it runs only
/// its own user's jobs; another user's submission is refused by the core
/// (the policy is the core's, not the loop's) with a reason naming
/// the daemon's user. scrun itself never talks to another user's daemon,
/// so the refused submission comes from a raw client (root's).
#[test]
fn a_daemon_that_is_not_root_runs_only_its_own_users_jobs() {
    use std::io::{IoSlice, Read};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::os::unix::process::CommandExt;

    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use scored_proto::proto::{self, Reply, Request};

    let Some(users) = test_users("a_daemon_that_is_not_root_runs_only_its_own_users_jobs") else {
        return;
    };
    let sandbox = Sandbox::new();
    let home = sandbox.path.join("a");
    std::fs::create_dir(&home).expect("mkdir");
    std::os::unix::fs::chown(&home, Some(users.a.uid), Some(users.a.gid)).expect("chown");
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let socket = home.join("s.sock");
    let log = std::fs::File::create(sandbox.path.join("scored.log")).expect("log");
    let mut daemon = Command::new(bin("scored"))
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(home.join("state"))
        .arg("--rc")
        .arg(sandbox.write("empty.rc", ""))
        .current_dir(&home)
        .uid(users.a.uid)
        .gid(users.a.gid)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start scored as the test user");
    let daemon_log =
        || std::fs::read_to_string(sandbox.path.join("scored.log")).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(20), || UnixStream::connect(&socket)
            .is_ok()),
        "scored as {} did not listen:\n{}",
        users.a.name,
        daemon_log()
    );

    // Root's submission, sent raw: scrun would not talk to this daemon.
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
            env: Vec::new(),
            cwd: "/".into(),
            ignored_signals: Vec::new(),
            rlimits: Vec::new(),
            umask: None,
            nice: None,
            ioprio: None,
            closed_stdio: Vec::new(),
            fds: Vec::new(),
            pmi_ranks: 0,
            pmix_namespace: None,
            pmi_port: false,
        },
    };
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    let fds = [null.as_raw_fd(); 3];
    let mut stream = UnixStream::connect(&socket).expect("connect");
    let frame = proto::encode(&request);
    let control = [ControlMessage::ScmRights(&fds)];
    sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(&frame)],
        &control,
        MsgFlags::empty(),
        None,
    )
    .expect("sendmsg");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    // The first frame is the answer (the connection stays open until the
    // client leaves, as after any refusal by the core).
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    let reply = loop {
        match proto::decode::<Reply>(&mut bytes, proto::MAX_REPLY) {
            Ok(None) => {}
            decoded => break decoded,
        }
        let n = stream.read(&mut chunk).expect("a reply within 20 s");
        assert!(n > 0, "scored closed without a reply:\n{}", daemon_log());
        bytes.extend_from_slice(&chunk[..n]);
    };
    let expected = format!(
        "this scored runs as {} and can only run that user's jobs",
        users.a.name
    );
    assert_eq!(
        reply,
        Ok(Some(Reply::Rejected {
            reason: expected,
            kind: proto::RejectKind::Permission,
        })),
        "{}",
        daemon_log()
    );

    // Its own user's job runs.
    let output = Command::new(bin("scrun"))
        .args(["sh", "-c", "id -u"])
        .env("SCORED_SOCKET", &socket)
        .current_dir(&home)
        .uid(users.a.uid)
        .gid(users.a.gid)
        .output()
        .expect("scrun as the test user");
    assert_eq!(
        code(&output),
        Some(0),
        "{}\n{}",
        text(&output),
        daemon_log()
    );
    assert_eq!(stdout(&output), format!("{}\n", users.a.uid));

    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    assert!(
        wait_until(Duration::from_secs(20), || matches!(
            daemon.try_wait(),
            Ok(Some(_))
        )),
        "scored did not exit on SIGTERM"
    );
    assert!(!daemon_log().contains("panicked"), "{}", daemon_log());
}
