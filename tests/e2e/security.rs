//! Local users cannot hurt each other, the daemon or root: the start-up
//! script's origin, the state directory, the client's trust in its socket, disk accounting, what
//! listings show to whom, and values that cannot be meant.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use scored_tests::*;

/// Starts scored in `dir` (its working directory) with its socket and
/// state directory there, as `user` or as the caller.
fn start_in(dir: &Path, user: Option<&TestUser>, args: &[&str]) -> Child {
    let socket = dir.join("s.sock");
    let state = dir.join("state");
    let mut command = match user {
        Some(user) => command_as(user, &bin("scored"), &[]),
        None => Command::new(bin("scored")),
    };
    command
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(&state)
        .args(args)
        .current_dir(dir)
        .env_remove("SCORED_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("start scored");
    // Listening, not merely bound: the socket's file appears at bind(2),
    // a moment before listen(2), and a client in between is refused.
    let up = wait_until(Duration::from_secs(20), || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
            || matches!(child.try_wait(), Ok(Some(_)))
    });
    assert!(up, "scored neither listened nor exited");
    child
}

/// Stops a scored (with SIGTERM: a killed one's state would be taken over
/// by the next start, which then runs no scored.rc) and returns its stderr.
fn stop(mut child: Child) -> String {
    if matches!(child.try_wait(), Ok(None)) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let output = child.wait_with_output().expect("wait for scored");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn queue0_line(socket: &Path, user: Option<&TestUser>) -> String {
    let socket_text = socket.display().to_string();
    let args = ["--socket", socket_text.as_str(), "-c", "queues"];
    let output = match user {
        Some(user) => command_as(user, &bin("sc_console"), &args).output(),
        None => Command::new(bin("sc_console")).args(args).output(),
    }
    .expect("sc_console");
    let text = stdout(&output);
    text.lines()
        .find(|line| line.trim_start().starts_with('0'))
        .unwrap_or_else(|| panic!("no queue 0 in {text}"))
        .to_string()
}

/// A directory inside a fresh sandbox that belongs to `user`.
fn user_dir(sandbox: &Sandbox, user: &TestUser) -> std::path::PathBuf {
    let dir = sandbox.path.join(&user.name);
    std::fs::create_dir(&dir).expect("mkdir");
    std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).expect("chown");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// A root daemon does not run `./scored.rc` from its
/// working directory, where anyone able to write there could plant one.
#[test]
fn root_does_not_run_scored_rc_from_its_working_directory() {
    if !is_root() {
        println!("skipped: root_does_not_run_scored_rc_from_its_working_directory needs root");
        return;
    }
    let sandbox = Sandbox::new();
    sandbox.write("scored.rc", "queue 0 disable\n");
    let child = start_in(&sandbox.path, None, &[]);
    let line = queue0_line(&sandbox.path.join("s.sock"), None);
    let log = stop(child);
    assert!(!line.contains("disabled"), "{line}\n{log}");
    assert!(!log.contains("ran the start-up script"), "{log}");
}

/// Root takes `--rc` only as an absolute path.
#[test]
fn root_refuses_a_relative_rc_path() {
    if !is_root() {
        println!("skipped: root_refuses_a_relative_rc_path needs root");
        return;
    }
    let sandbox = Sandbox::new();
    sandbox.write("policy.rc", "queue 0 disable\n");
    let mut child = start_in(&sandbox.path, None, &["--rc", "policy.rc"]);
    let status = child.wait().expect("wait");
    let log = stop(child);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(
            "--rc policy.rc: a root daemon takes the start-up script only as an absolute path"
        ),
        "{log}"
    );
    assert!(!sandbox.path.join("s.sock").exists());
}

/// SCore-D's `./scored.rc` still works for a daemon that is not root, and
/// a script that another user could have written is refused.
#[test]
fn a_plain_users_daemon_reads_its_own_scored_rc_only() {
    let Some(users) = test_users("a_plain_users_daemon_reads_its_own_scored_rc_only") else {
        return;
    };
    let sandbox = Sandbox::new();
    let dir = user_dir(&sandbox, &users.b);
    let rc = dir.join("scored.rc");
    std::fs::write(&rc, "queue 0 disable\n").expect("write rc");
    std::os::unix::fs::chown(&rc, Some(users.b.uid), Some(users.b.gid)).expect("chown");
    let child = start_in(&dir, Some(&users.b), &[]);
    let line = queue0_line(&dir.join("s.sock"), Some(&users.b));
    let log = stop(child);
    assert!(line.contains("disabled"), "{line}\n{log}");

    // The same script, but another user's: refused, and nothing listens.
    let _ = std::fs::remove_file(dir.join("s.sock"));
    std::os::unix::fs::chown(&rc, Some(users.a.uid), Some(users.a.gid)).expect("chown");
    let mut child = start_in(&dir, Some(&users.b), &[]);
    let status = child.wait().expect("wait");
    let log = stop(child);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!(
            "refusing the start-up script scored.rc: it belongs to uid {}",
            users.a.uid
        )),
        "{log}"
    );

    // Writable by others: refused too.
    std::os::unix::fs::chown(&rc, Some(users.b.uid), Some(users.b.gid)).expect("chown");
    std::fs::set_permissions(&rc, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let mut child = start_in(&dir, Some(&users.b), &[]);
    let status = child.wait().expect("wait");
    let log = stop(child);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("it is writable by other users (mode 666)"),
        "{log}"
    );
}

/// Starts scored on a sandbox whose state directory was prepared by
/// `prepare`, expecting it to refuse; returns its stderr.
fn refused_state_dir(prepare: impl FnOnce(&Path)) -> String {
    let sandbox = Sandbox::new();
    let state = sandbox.path.join("state");
    prepare(&state);
    let output = Command::new(bin("scored"))
        .arg("--socket")
        .arg(sandbox.path.join("s.sock"))
        .arg("--state-dir")
        .arg(&state)
        .env_remove("SCORED_SOCKET")
        .output()
        .expect("run scored");
    let log = stderr(&output);
    assert_eq!(code(&output), Some(1), "{log}");
    assert!(!sandbox.path.join("s.sock").exists(), "{log}");
    log
}

/// A `jobs` symbolic link planted in the state
/// directory is refused, and what it points to is left alone.
#[test]
fn a_planted_jobs_symlink_is_refused() {
    let victim = Sandbox::new();
    let target = victim.path.join("precious");
    std::fs::create_dir(&target).expect("mkdir");
    std::fs::write(target.join("file"), "keep").expect("write");
    let before = std::fs::metadata(&target).expect("stat");
    let log = refused_state_dir(|state| {
        std::fs::create_dir(state).expect("mkdir state");
        std::os::unix::fs::symlink(&target, state.join("jobs")).expect("symlink");
    });
    assert!(log.contains("state/jobs: it is a symbolic link"), "{log}");
    let after = std::fs::metadata(&target).expect("stat");
    use std::os::unix::fs::MetadataExt;
    assert_eq!((before.uid(), before.mode()), (after.uid(), after.mode()));
    assert_eq!(
        std::fs::read_to_string(target.join("file")).unwrap(),
        "keep"
    );
}

/// A root daemon refuses a state directory shared with
/// other users (sticky, as /tmp) or one that others may write.
#[test]
fn root_refuses_a_sticky_or_shared_state_directory() {
    if !is_root() {
        println!("skipped: root_refuses_a_sticky_or_shared_state_directory needs root");
        return;
    }
    for (mode, expected) in [
        (0o1777, "it is writable by other users (mode 1777)"),
        (0o1755, "it has the sticky bit (mode 1755)"),
        (0o775, "it is writable by other users (mode 775)"),
    ] {
        let log = refused_state_dir(|state| {
            std::fs::create_dir(state).expect("mkdir state");
            std::fs::set_permissions(state, std::fs::Permissions::from_mode(mode)).expect("chmod");
        });
        assert!(log.contains("state directory: refusing /tmp/"), "{log}");
        assert!(log.contains(expected), "{mode:o}: {log}");
    }
}

/// Links a job plants in its scratch directory, and a
/// leftover scratch directory of an earlier daemon, never make root follow
/// them when it removes the tree or hands it over.
#[test]
fn scratch_trees_are_removed_without_following_links() {
    let Some(users) = test_users("scratch_trees_are_removed_without_following_links") else {
        return;
    };
    let victim = Sandbox::new();
    let target = victim.path.join("precious");
    std::fs::create_dir(&target).expect("mkdir");
    std::fs::write(target.join("file"), "keep").expect("write");
    let daemon = Daemon::start();
    // A leftover of an earlier daemon where job 1 will go, with a link in it.
    let leftover = daemon.sandbox.path.join("state/jobs/1");
    std::fs::create_dir(&leftover).expect("mkdir leftover");
    std::os::unix::fs::symlink(&target, leftover.join("link")).expect("symlink");
    // The job also tries what an attacker would: plant the next job's
    // scratch directory as a link to the victim, and swap its own for one.
    let script = format!(
        "set -e; d=$SCORE_TMPDIR; test \"$(stat -c %u:%a \"$d\")\" = {}:700; \
         test ! -e \"$d/link\"; ln -s {t} \"$d/top\"; mkdir -p \"$d/a/b\"; ln -s {t} \"$d/a/b/deep\"; \
         ln -s / \"$d/a/root\"; \
         if ln -s {t} \"$d/../2\" 2>/dev/null; then echo planted; fi; \
         if mv \"$d\" \"$d.moved\" 2>/dev/null; then echo swapped; fi; echo made",
        users.a.uid,
        t = target.display()
    );
    let output = daemon
        .scrun_as(&users.a, &["sh", "-c", &script])
        .output()
        .expect("scrun");
    assert_eq!(
        code(&output),
        Some(0),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(stdout(&output).contains("made"));
    assert!(!stdout(&output).contains("planted") && !stdout(&output).contains("swapped"));
    // Job 2 gets a directory of its own, and the victim stays root's.
    let output = daemon
        .scrun_as(&users.a, &["sh", "-c", "stat -c %u:%a \"$SCORE_TMPDIR\""])
        .output()
        .expect("scrun");
    assert_eq!(stdout(&output).trim(), format!("{}:700", users.a.uid));
    assert!(
        wait_until(Duration::from_secs(10), || !leftover.exists()),
        "the scratch directory was not removed"
    );
    assert_eq!(
        std::fs::read_to_string(target.join("file")).unwrap(),
        "keep"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&target).unwrap().uid(), 0);
}

/// The state directory, or its `jobs` directory, removed
/// while scored runs is made again, and later jobs run.
#[test]
fn a_removed_state_directory_is_recreated() {
    let daemon = Daemon::start();
    let state = daemon.sandbox.path.join("state");
    for removed in [state.join("jobs"), state.clone()] {
        std::fs::remove_dir_all(&removed).expect("remove");
        let output = daemon.run(&["sh", "-c", "test -d \"$SCORE_TMPDIR\" && echo scratch ok"]);
        assert_eq!(
            code(&output),
            Some(0),
            "after removing {}: {}",
            removed.display(),
            stderr(&output)
        );
        assert!(stdout(&output).contains("scratch ok"));
        assert!(daemon.ok("status").contains("accepting jobs"));
    }
    assert!(
        daemon.log().contains("removed or replaced; made it again"),
        "{}",
        daemon.log()
    );
}

/// When the state directory cannot be made usable again
/// (here, `jobs` replaced by a link), jobs are refused with a message that
/// names the path, never blamed on the program (126), and `status` says
/// so; once repaired, jobs run again.
#[test]
fn an_unusable_state_directory_refuses_jobs_and_says_why() {
    let daemon = Daemon::start();
    let jobs = daemon.sandbox.path.join("state/jobs");
    std::fs::remove_dir_all(&jobs).expect("remove jobs");
    std::os::unix::fs::symlink("/", &jobs).expect("plant a link");
    let output = daemon.run(&["true"]);
    let message = stderr(&output);
    // Not 126 ("cannot execute"): the daemon, not the program, failed.
    assert_eq!(
        code(&output),
        Some(scored_proto::exitcode::INTERNAL),
        "{message}"
    );
    assert!(
        message.contains("state/jobs: it is a symbolic link"),
        "{message}"
    );
    let status = daemon.ok("status");
    assert!(
        status.contains("not accepting jobs: refusing")
            && status.contains("state/jobs: it is a symbolic link"),
        "{status}"
    );
    // Later submissions are refused at once, with the same reason.
    let output = daemon.run(&["true"]);
    assert_eq!(code(&output), Some(75), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("it is a symbolic link"),
        "{}",
        stderr(&output)
    );
    // Repaired: scored notices by itself and takes jobs again.
    std::fs::remove_file(&jobs).expect("remove link");
    assert!(
        wait_until(Duration::from_secs(10), || daemon
            .ok("status")
            .contains("accepting jobs")
            && !daemon.ok("status").contains("not accepting")),
        "{}",
        daemon.ok("status")
    );
    assert_eq!(code(&daemon.run(&["true"])), Some(0));
}

/// A link to `/` (and to /usr) in the scratch directory
/// is not followed: the job's disk use stays what it wrote.
#[test]
fn a_link_to_root_in_the_scratch_directory_is_not_followed() {
    let daemon = Daemon::builder().timeslice("50ms").start();
    let mut job = daemon.spawn(&[
        "sh",
        "-c",
        "d=$SCORE_TMPDIR; ln -s / \"$d/root\"; mkdir \"$d/sub\"; ln -s /usr \"$d/sub/usr\"; \
         head -c 300000 /dev/zero > \"$d/sub/data\"; echo ready; sleep 30",
    ]);
    job.wait_lines("ready", 1);
    let disk = || daemon.job_field(1, "disk").as_u64().unwrap_or(0);
    assert!(
        wait_until(Duration::from_secs(10), || disk() >= 300_000),
        "the job's file was never counted: {}",
        disk()
    );
    // Its own file, its executable and two links: far below /usr's size.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        disk() < 5_000_000,
        "disk use {} counts what the links point to",
        disk()
    );
    job.signal(nix::sys::signal::Signal::SIGINT);
    job.wait(Duration::from_secs(30));
}

/// A job with fifty thousand files neither stalls
/// the console nor escapes its disk limit: the walk is spread over samples
/// and still finds the large file. (The files count 4 KiB each: 200 MB of
/// the limit.)
#[test]
fn many_files_neither_stall_the_daemon_nor_escape_the_limit() {
    let daemon = Daemon::builder()
        .timeslice("50ms")
        .rc("cluster 0 limit disk=1G\nqueue 1 set disk=100%\n")
        .start();
    let mut job = daemon.spawn(&[
        "-priority=1,disk=260M",
        "sh",
        "-c",
        "set -e; cd \"$SCORE_TMPDIR\"; mkdir many; cd many; seq 50000 | xargs touch; \
         cd ..; echo ready; sleep 2; head -c 80000000 /dev/zero > big; sleep 60",
    ]);
    // Making fifty thousand files is the job's own work, as slow as the
    // machine's disk under the other tests (the job with 200,000 files
    // among them): waited for as long as that job's files are.
    assert!(
        wait_until(Duration::from_secs(120), || job.count_lines("ready") == 1),
        "the job did not make its files"
    );
    // While the files are being walked, the console answers promptly.
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        let start = std::time::Instant::now();
        let status = daemon.ok("status");
        slowest = slowest.max(start.elapsed());
        assert!(status.contains("accepting jobs"), "{status}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(slowest < Duration::from_secs(5), "status took {slowest:?}");
    let (status, text) = job.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(scored_proto::exitcode::LIMIT), "{text}");
    assert!(text.contains("disk"), "{text}");
}

/// A job without a disk limit of its own is still
/// killed before it takes more than half of the cluster's disk pool.
#[test]
fn a_job_without_a_disk_limit_cannot_take_the_whole_pool() {
    let daemon = Daemon::builder()
        .timeslice("50ms")
        .rc("cluster 0 limit disk=8M\n")
        .start();
    let output = daemon.run(&[
        "sh",
        "-c",
        "head -c 6000000 /dev/zero > \"$SCORE_TMPDIR/big\"; sleep 30",
    ]);
    assert_eq!(
        code(&output),
        Some(scored_proto::exitcode::LIMIT),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("half of cluster default's disk limit"),
        "{}",
        stderr(&output)
    );
}

/// A stand-in for a daemon planted by another user: python3, started as
/// root, binds `socket` (mode 0666, so that anyone may connect), becomes
/// `owner` before listening (so the kernel reports `owner` as the server),
/// and prints how many bytes the first client sent. `None` without python3.
fn fake_server(socket: &Path, owner: &TestUser) -> Option<Child> {
    const SERVER: &str = r#"
import os, socket, sys
path, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
os.chmod(path, 0o666)
os.setgid(gid)
os.setuid(uid)
server.listen(8)
print("listening", flush=True)
server.settimeout(30)
total = 0
try:
    client, _ = server.accept()
    client.settimeout(3)
    while True:
        data = client.recv(65536)
        if not data:
            break
        total += len(data)
except OSError:
    pass
print("received", total, flush=True)
"#;
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(SERVER)
        .arg(socket)
        .arg(owner.uid.to_string())
        .arg(owner.gid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()?;
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    std::io::BufRead::read_line(&mut out, &mut line).expect("read");
    assert_eq!(line.trim(), "listening");
    child.stdout = Some(out.into_inner());
    Some(child)
}

fn received(mut server: Child) -> String {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.id() as i32),
        nix::sys::signal::Signal::SIGALRM,
    );
    let _ = server.kill();
    let output = server.wait_with_output().expect("wait");
    stdout(&output)
}

/// scrun and sc_console refuse a socket in a directory
/// that belongs to another user, and one whose server runs as another
/// (non-root) user, before sending anything.
#[test]
fn clients_refuse_a_socket_another_user_planted() {
    let Some(users) = test_users("clients_refuse_a_socket_another_user_planted") else {
        return;
    };
    let sandbox = Sandbox::new();
    // A directory of user b's, as /tmp/scored-UID would be if b made it first.
    let planted_dir = user_dir(&sandbox, &users.b);
    let planted = planted_dir.join("scored.sock");
    // A socket in root's directory, but served by user b.
    let served = sandbox.path.join("scored.sock");
    for (socket, expected) in [
        (
            &planted,
            format!(
                "refusing the socket {}: its directory {} belongs to uid {}, not to you (uid {}) or root",
                planted.display(),
                planted_dir.display(),
                users.b.uid,
                users.a.uid
            ),
        ),
        (
            &served,
            format!(
                "refusing scored at {}: it runs as uid {}, not as you (uid {}) or root",
                served.display(),
                users.b.uid,
                users.a.uid
            ),
        ),
    ] {
        let Some(server) = fake_server(socket, &users.b) else {
            println!("skipped: clients_refuse_a_socket_another_user_planted needs python3");
            return;
        };
        let output = command_as(&users.a, &bin("scrun"), &["true"])
            .env("SCORED_SOCKET", socket)
            .env("SECRET_IN_ENV", "x")
            .output()
            .expect("scrun");
        assert_eq!(code(&output), Some(scored_proto::exitcode::UNREACHABLE), "{}", stderr(&output));
        assert!(stderr(&output).contains(&expected), "{}", stderr(&output));
        let server_saw = received(server);
        assert!(!server_saw.contains("received") || server_saw.contains("received 0"), "{server_saw}");
        let _ = std::fs::remove_file(socket);

        if socket == &planted {
            // The same through the default socket ($XDG_RUNTIME_DIR/scored.sock):
            // refused, and no private daemon is started in its place.
            let server = fake_server(socket, &users.b).expect("python3");
            let output = command_as(&users.a, &bin("scrun"), &["true"])
                .env_remove("SCORED_SOCKET")
                .env("XDG_RUNTIME_DIR", &planted_dir)
                .output()
                .expect("scrun");
            assert_eq!(code(&output), Some(scored_proto::exitcode::UNREACHABLE), "{}", stderr(&output));
            assert!(stderr(&output).contains(&expected), "{}", stderr(&output));
            assert!(!stderr(&output).contains("private"), "{}", stderr(&output));
            let server_saw = received(server);
            assert!(!server_saw.contains("received") || server_saw.contains("received 0"), "{server_saw}");
            let _ = std::fs::remove_file(socket);
        }

        let server = fake_server(socket, &users.b).expect("python3");
        let socket_text = socket.display().to_string();
        let output = command_as(&users.a, &bin("sc_console"), &["--socket", &socket_text, "-c", "status"])
            .output()
            .expect("sc_console");
        assert_eq!(code(&output), Some(scored_proto::exitcode::UNREACHABLE), "{}", stderr(&output));
        assert!(stderr(&output).contains(&expected), "{}", stderr(&output));
        let server_saw = received(server);
        assert!(!server_saw.contains("received") || server_saw.contains("received 0"), "{server_saw}");
        let _ = std::fs::remove_file(socket);
    }
}

/// The checks let the ordinary cases through: a root daemon for a plain
/// user, and a plain user's own private daemon (single-user mode).
#[test]
fn clients_still_reach_root_and_their_own_daemon() {
    let Some(users) = test_users("clients_still_reach_root_and_their_own_daemon") else {
        return;
    };
    let daemon = Daemon::start();
    let output = daemon
        .scrun_as(&users.a, &["true"])
        .output()
        .expect("scrun");
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let sandbox = Sandbox::new();
    let home = user_dir(&sandbox, &users.a);
    let child = start_in(&home, Some(&users.a), &[]);
    let socket = home.join("s.sock").display().to_string();
    let output = command_as(
        &users.a,
        &bin("sc_console"),
        &["--socket", &socket, "-c", "status"],
    )
    .output()
    .expect("sc_console");
    stop(child);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    // Single-user mode: nothing at the default socket, so scrun starts a
    // private daemon as the user, and trusts it.
    let runtime = home.join("run");
    std::fs::create_dir(&runtime).expect("mkdir");
    std::os::unix::fs::chown(&runtime, Some(users.a.uid), Some(users.a.gid)).expect("chown");
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let output = command_as(
        &users.a,
        &bin("scrun"),
        &["-v", "sh", "-c", "echo private $SCORE_JOBID"],
    )
    .env_remove("SCORED_SOCKET")
    .env_remove("SCORE_OPTIONS")
    .env("XDG_RUNTIME_DIR", &runtime)
    .output()
    .expect("scrun");
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), "private 1");
    assert!(
        stderr(&output).contains("started a private one at"),
        "{}",
        stderr(&output)
    );
    // The private daemon stays for the user's next jobs; end it now.
    end_private_daemon(&runtime);
}

/// Another user's `jobs`, `job ID` and `history`, in text and
/// JSON, show who runs what where and when, but not the command, the exit
/// status or the reason (which may name files); the owner and root see all.
#[test]
fn other_users_see_no_command_exit_or_reason() {
    let Some(users) = test_users("other_users_see_no_command_exit_or_reason") else {
        return;
    };
    let daemon = Daemon::start();
    // A finished job whose launch error names a path, and a running one.
    let failed = daemon
        .scrun_as(&users.a, &["/nonexistent/secret-dir/prog"])
        .output()
        .expect("scrun");
    assert_ne!(code(&failed), Some(0));
    let mut running = daemon.spawn_as(&users.a, &["sh", "-c", "echo up; exec sleep 30 secret-arg"]);
    running.wait_lines("up", 1);
    let as_user = |user: &TestUser, line: &str, json: bool| {
        let socket = daemon.socket.display().to_string();
        let mut args = vec!["--socket", socket.as_str()];
        if json {
            args.push("--json");
        }
        args.extend(["-c", line]);
        let output = command_as(user, &bin("sc_console"), &args)
            .output()
            .expect("sc_console");
        assert_eq!(code(&output), Some(0), "{}", stderr(&output));
        stdout(&output)
    };
    for json in [false, true] {
        for line in ["jobs all", "job 1", "job 2", "history"] {
            let seen_by_b = as_user(&users.b, line, json);
            assert!(!seen_by_b.contains("secret"), "b sees {line}: {seen_by_b}");
            assert!(seen_by_b.contains(&users.a.name), "{seen_by_b}");
            let seen_by_a = as_user(&users.a, line, json);
            assert!(seen_by_a.contains("secret"), "a's own {line}: {seen_by_a}");
        }
    }
    // What b sees of job 1: the facts, without the command or the ending.
    let record: serde_json::Value =
        serde_json::from_str(&as_user(&users.b, "job 1", true)).expect("json");
    assert_eq!(record["user"], users.a.name.as_str());
    assert!(
        record["state"].is_string() && record["hosts"].is_array(),
        "{record}"
    );
    assert!(
        record["command"].is_null() && record["exit"].is_null() && record["reason"].is_null(),
        "{record}"
    );
    // Root (an operator) sees everything.
    assert!(daemon.ok("job 1").contains("secret-dir"));
    running.signal(nix::sys::signal::Signal::SIGINT);
    running.wait(Duration::from_secs(30));
}

/// In the hosts database, CPUs that are not online are
/// refused with FILE:LINE; a typo'd attribute and a memory larger than the
/// machine's are accepted with warnings in the log that name FILE:LINE.
#[test]
fn hosts_database_values_that_cannot_be_meant() {
    start_fails_with(
        "h0 cpus=0-1000\n",
        &[
            "scorehosts.db:1:4: host 'h0', attribute cpus: CPUs ",
            "are not online (online CPUs: ",
        ],
    );
    let daemon = Daemon::builder()
        .hosts("h0 cpus=0 memroy=1G\nh1 cpus=0 memory=99T\n")
        .start();
    assert_eq!(code(&daemon.run(&["true"])), Some(0));
    let log = daemon.log();
    assert!(
        log.contains("scorehosts.db:1:11: warning: host 'h0', attribute memroy: unknown attribute (did you mean memory?)"),
        "{log}"
    );
    assert!(
        log.contains("scorehosts.db:2:11: warning: host 'h1', attribute memory: 99T is more than this machine's memory"),
        "{log}"
    );
}

fn start_fails_with(hosts: &str, expected: &[&str]) {
    let sandbox = Sandbox::new();
    let output = sandbox
        .scored()
        .arg("--hosts")
        .arg(sandbox.write("scorehosts.db", hosts))
        .output()
        .expect("scored");
    let log = stderr(&output);
    assert_eq!(code(&output), Some(1), "{log}");
    for part in expected {
        assert!(log.contains(part), "expected {part:?} in:\n{log}");
    }
}

/// The console and scored.rc refuse a limit of 0 and a
/// queue share without `%`, and accept a memory limit above the machine's
/// with a warning (in the reply, and in the log for scored.rc).
#[test]
fn console_and_rc_values_that_cannot_be_meant() {
    let daemon = Daemon::builder().rc("cluster 0 limit memory=99T\n").start();
    let log = daemon.log();
    assert!(
        log.contains(
            "scored.rc:1: warning: memory 99T per host is more than this machine's memory"
        ),
        "{log}"
    );
    for (line, expected) in [
        (
            "cluster 0 limit memory=0",
            "a memory limit of 0 would kill every job at its first sample; give a size above 0, or memory=none for no limit",
        ),
        ("cluster 0 limit disk=0", "a disk limit of 0 would kill every job"),
        (
            "queue 1 set memory=50",
            "a queue's memory limit is a share of the cluster's, written with %: memory=50%",
        ),
        ("queue 1 set disk=0%", "a disk share of 0% would kill every job"),
    ] {
        let output = daemon.console(line);
        assert_eq!(code(&output), Some(1), "{line}: {}", stdout(&output));
        let text = format!("{}{}", stdout(&output), stderr(&output));
        assert!(text.contains(expected), "{line}: {text}");
    }
    // Nothing changed: the limits are those the rc file set.
    let clusters = daemon.ok("clusters");
    assert!(clusters.contains("99T"), "{clusters}");
    assert!(daemon.ok("queues").lines().all(|row| !row.contains("50%")));
    let reply = daemon.ok("cluster 0 limit memory=98T");
    assert!(
        reply.contains("warning: memory 98T per host is more than this machine's memory"),
        "{reply}"
    );
    // A job still runs under the limit as given.
    assert_eq!(code(&daemon.run(&["true"])), Some(0));

    let sandbox = Sandbox::new();
    let output = sandbox
        .scored()
        .arg("--rc")
        .arg(sandbox.write("scored.rc", "queue 1 set memory=50\n"))
        .output()
        .expect("scored");
    assert_eq!(code(&output), Some(1));
    assert!(
        stderr(&output).contains("scored.rc:1: bad setting 'memory=50' in 'queue 1 set memory=50': a queue's memory limit is a share of the cluster's, written with %: memory=50%"),
        "{}",
        stderr(&output)
    );
}

/// Disk use of a job too short to be sampled still reaches its record:
/// the walk takes one more bounded step when the job's processes are gone.
#[test]
fn a_short_job_reports_its_scratch_use() {
    let daemon = Daemon::start();
    let output = daemon.run(&["sh", "-c", "head -c 200000 /dev/zero > \"$SCORE_TMPDIR/f\""]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let peak = daemon.job_field(1, "peak disk").as_u64().unwrap_or(0);
    assert!((200_000..5_000_000).contains(&peak), "peak disk {peak}");
}

#[test]
fn a_working_directory_with_newlines_cannot_forge_a_log_line() {
    let daemon = Daemon::start();
    let forged = "2026-01-01T00:00:00.000000Z  WARN operator root granted";
    let dir = daemon.sandbox.path.join(format!("d\n{forged}\r\u{2028}x"));
    std::fs::create_dir(&dir).expect("make the directory");
    let output = daemon
        .scrun(&["no-such-program-for-the-log"])
        .current_dir(&dir)
        .output()
        .expect("run scrun");
    assert_ne!(code(&output), Some(0), "{}", stderr(&output));
    let logged = wait_until(Duration::from_secs(10), || {
        daemon.log().contains("operator root granted")
    });
    let log = daemon.log();
    assert!(logged, "the failed launch was not logged:\n{log}");
    for line in log.lines() {
        assert!(
            !line.starts_with(forged) && !line.contains("granted\r"),
            "a user's directory wrote a line of its own into the log:\n{log}"
        );
    }
    assert!(
        log.contains(&format!("d\\n{forged}\\r\\u{{2028}}x")),
        "the directory is not shown escaped:\n{log}"
    );
}

#[test]
fn disk_use_never_follows_the_text_of_a_rank_s_exe_link() {
    let daemon = Daemon::start();
    let dir = &daemon.sandbox.path;
    // A secret in a directory only root may enter, whose size must not leak.
    let private = dir.join("private");
    std::fs::create_dir(&private).expect("private directory");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let secret = private.join("secret");
    const SECRET_SIZE: u64 = 3 << 30;
    std::fs::File::create(&secret)
        .and_then(|file| file.set_len(SECRET_SIZE))
        .expect("sparse secret");
    std::fs::copy("/bin/sleep", dir.join("prog")).expect("copy sleep");
    // The rank runs a deleted file, so that /proc/PID/exe reads
    // ".../prog (deleted)", a name the user then plants as a link.
    let script = r#"exec 3<prog && rm prog && ln -s "$SECRET" "prog (deleted)" && exec "$SCRUN" /proc/self/fd/3 1"#;
    let output = Command::new("sh")
        .args(["-c", script])
        .env("SECRET", &secret)
        .env("SCRUN", bin("scrun"))
        .env("SCORED_SOCKET", &daemon.socket)
        .env("SCORED_TEST_TAG", &daemon.tag)
        .env_remove("SCORE_OPTIONS")
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run scrun");
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert!(
        std::fs::read_link(dir.join("prog (deleted)")).is_ok(),
        "the link was not planted"
    );
    let peak = daemon.job_field(1, "peak disk").as_u64().unwrap_or(0);
    let sleep_size = std::fs::metadata("/bin/sleep").expect("/bin/sleep").len();
    assert!(
        peak >= sleep_size && peak < SECRET_SIZE,
        "peak disk {peak}: the executable is {sleep_size} bytes, the secret {SECRET_SIZE}"
    );
}

/// The entries of `state/removing`, where finished jobs' trees wait for
/// their removal.
fn trees_being_removed(daemon: &Daemon) -> usize {
    std::fs::read_dir(daemon.sandbox.path.join("state/removing"))
        .map(|dir| dir.count())
        .unwrap_or(0)
}

/// A job that leaves 200,000 empty files: each counts towards its disk use
/// while it runs, and once it ends the tree is taken from the user (root's,
/// mode 0700, out of `jobs`) and removed in slices, so that root's `status`
/// is answered while the removal is still under way.
#[test]
fn many_files_count_as_disk_use_and_their_removal_does_not_hold_the_loop() {
    let Some(users) = test_users("many_files_count_as_disk_use") else {
        return;
    };
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("50ms")
        .start();
    let mut job = daemon.spawn_as(
        &users.a,
        &[
            "sh",
            "-c",
            "mkdir \"$SCORE_TMPDIR/w\" && cd \"$SCORE_TMPDIR/w\" && seq 1 200000 | xargs touch \
             && echo ready && sleep 60",
        ],
    );
    assert!(
        wait_until(Duration::from_secs(120), || job.count_lines("ready") == 1),
        "the job did not make its files"
    );
    let disk = || daemon.job_field(1, "disk").as_u64().unwrap_or(0);
    assert!(
        wait_until(Duration::from_secs(60), || disk() >= 100_000 * 4096),
        "empty files do not count: disk use {}",
        disk()
    );
    job.signal(nix::sys::signal::Signal::SIGINT);
    job.wait(Duration::from_secs(30));
    assert!(!daemon.sandbox.path.join("state/jobs/1").exists());
    let started = std::time::Instant::now();
    let output = daemon.console("status");
    let took = started.elapsed();
    let removing = trees_being_removed(&daemon);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert!(
        removing == 1,
        "status was answered only after the tree was removed ({took:?})"
    );
    assert!(took < Duration::from_secs(2), "status took {took:?}");
    use std::os::unix::fs::MetadataExt;
    let removing_dir = daemon.sandbox.path.join("state/removing");
    let meta = std::fs::metadata(&removing_dir).expect("removing");
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o700));
    // The child that removes the tree (`scored-remover`, the daemon's
    // only child of that name) runs at normal priority: its seconds of
    // unlinking at the daemon's real-time priority would hold a CPU
    // against every process that must run there.
    let mut remover_policies = Vec::new();
    assert!(
        wait_until(Duration::from_secs(120), || {
            remover_policies.extend(
                daemon
                    .children()
                    .into_iter()
                    .filter(|pid| {
                        std::fs::read_to_string(format!("/proc/{pid}/comm"))
                            .is_ok_and(|comm| comm.trim() == "scored-remover")
                    })
                    .filter_map(|pid| proc_stat(pid).map(|stat| stat.policy)),
            );
            trees_being_removed(&daemon) == 0
        }),
        "the tree was never removed"
    );
    remover_policies.sort_unstable();
    remover_policies.dedup();
    assert!(
        !remover_policies.is_empty(),
        "no remover was seen while the tree was removed"
    );
    assert!(
        remover_policies
            .iter()
            .all(|policy| *policy == libc::SCHED_OTHER),
        "the remover ran with scheduling policies {remover_policies:?} (SCHED_FIFO is 1)"
    );
    assert!(!daemon.log().contains("cannot remove"), "{}", daemon.log());
    assert!(
        daemon
            .log()
            .contains("a large scratch tree is removed by a child process"),
        "{}",
        daemon.log()
    );
}

/// A process outside the job, working inside its scratch tree, keeps
/// moving directories in it while the tree is removed: the removal takes
/// each directory from the user as it enters it and walks again what was
/// moved in, so that no user directory stays under the state directory.
#[test]
fn renames_from_outside_do_not_keep_a_scratch_tree() {
    let Some(users) = test_users("renames_from_outside_do_not_keep_a_scratch_tree") else {
        return;
    };
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let mut job = daemon.spawn_as(
        &users.a,
        &[
            "sh",
            "-c",
            "mkdir \"$SCORE_TMPDIR/w\" && cd \"$SCORE_TMPDIR/w\" && seq 1 20000 | xargs touch \
             && echo ready && sleep 60",
        ],
    );
    job.wait_lines("ready", 1);
    let inside = daemon.sandbox.path.join("state/jobs/1/w");
    /// The renamer, killed and reaped however the test ends.
    struct Renamer(std::process::Child);
    impl Drop for Renamer {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let renamer = Renamer(
        command_as(
            &users.a,
            Path::new("/bin/sh"),
            &[
                "-c",
                "cd \"$1\" || exit 1; i=0; while :; do mkdir -p a/b; touch a/b/f; mv a n$i; \
             i=$((i+1)); done",
                "renamer",
                &inside.display().to_string(),
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the renamer"),
    );
    std::thread::sleep(Duration::from_millis(300));
    job.signal(nix::sys::signal::Signal::SIGINT);
    job.wait(Duration::from_secs(30));
    let gone = wait_until(Duration::from_secs(60), || {
        !daemon.sandbox.path.join("state/jobs/1").exists() && trees_being_removed(&daemon) == 0
    });
    drop(renamer);
    assert!(
        gone,
        "the tree stayed: jobs/1 {}, {} in removing\n{}",
        daemon.sandbox.path.join("state/jobs/1").exists(),
        trees_being_removed(&daemon),
        daemon.log()
    );
}

#[test]
fn a_user_s_queued_jobs_cannot_make_a_restart_fail() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    // Two jobs of the exclusive queue 0, each on every host: the second is
    // admitted and waits without hosts.
    let mut first = daemon.spawn(&["-priority=0", "-nodes=2", &testprog(), "spin", "0"]);
    first.wait_pids(2);
    let mut second = daemon.spawn(&["-priority=0", "-nodes=2", "sh", "-c", "exit 7"]);
    assert!(
        wait_until(Duration::from_secs(20), || stdout(&daemon.console("job 2"))
            .contains("state: queued")),
        "{}",
        daemon.ok("jobs")
    );
    let output = daemon.console("restart");
    assert!(
        output.status.success(),
        "restart failed: {}{}\n{}",
        stdout(&output),
        stderr(&output),
        daemon.log()
    );
    assert!(
        stdout(&output).contains("restarted in place"),
        "{}",
        stdout(&output)
    );
    assert!(daemon.ok("job 2").contains("state: queued"));
    daemon.ok("kill 1 KILL");
    let (status, _) = first.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(137));
    let (status, _) = second.wait(Duration::from_secs(10));
    assert_eq!(
        status.code(),
        Some(7),
        "the waiting job runs after the restart"
    );
}

/// Starts a tracer that resumes each of `pids` 30 ms after each of its
/// stops, once it has seized them all.
fn start_tracer(pids: &[i32]) -> Child {
    let mut tracer = Command::new(testprog())
        .arg("ptrace-resume")
        .args(pids.iter().map(ToString::to_string))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the tracer");
    let mut seized = String::new();
    let mut reader = std::io::BufReader::new(tracer.stdout.take().expect("stdout"));
    let mut line = String::new();
    while std::io::BufRead::read_line(&mut reader, &mut line).unwrap_or(0) > 0 {
        seized.push_str(&line);
        if line.starts_with("seized") {
            break;
        }
        line.clear();
    }
    assert!(
        seized.contains(&format!("seized {}", pids.len())),
        "the tracer did not seize: {seized}"
    );
    tracer
}

#[test]
fn without_cgroups_a_job_its_user_keeps_resuming_with_ptrace_is_killed() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("200ms")
        .arg("--no-cgroups")
        .start();
    let mut victim = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    victim.wait_pids(2);
    let mut attacker = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let attacker_pids = attacker.wait_pids(2);
    let mut tracer = start_tracer(&attacker_pids);
    let (status, text) = attacker.wait(Duration::from_secs(60));
    let _ = tracer.kill();
    let _ = tracer.wait();
    daemon.ok("kill 1 KILL");
    let _ = victim.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(76), "{text}\n{}", daemon.log());
    assert!(
        text.contains("it got out of 3 of its stops (process ")
            && text.contains(" is traced by process "),
        "{text}"
    );
}

#[test]
fn a_rank_its_user_resumes_with_ptrace_is_held_by_the_freezer() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("500ms")
        .start();
    let mut victim = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let victim_pids = victim.wait_pids(2);
    let mut attacker = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let attacker_pids = attacker.wait_pids(2);
    let mut tracer = start_tracer(&attacker_pids);
    std::thread::sleep(Duration::from_secs(1));
    let (victim_before, attacker_before) = (
        crate::restart::cpu_ticks(&victim_pids),
        crate::restart::cpu_ticks(&attacker_pids),
    );
    std::thread::sleep(Duration::from_secs(8));
    let victim_ticks = crate::restart::cpu_ticks(&victim_pids) - victim_before;
    let attacker_ticks = crate::restart::cpu_ticks(&attacker_pids) - attacker_before;
    let share = victim_ticks as f64 / (victim_ticks + attacker_ticks).max(1) as f64;
    let log = daemon.log();
    daemon.ok("kill 1 KILL");
    daemon.ok("kill 2 KILL");
    let _ = victim.wait(Duration::from_secs(10));
    let _ = attacker.wait(Duration::from_secs(10));
    let _ = tracer.kill();
    let _ = tracer.wait();
    assert!(
        share >= 0.40,
        "the gang partner got {victim_ticks} ticks, the traced job {attacker_ticks}:\n{log}"
    );
    // Noticed as traced when its stop was confirmed, or, on a loaded
    // machine, frozen first because its stop took too long to confirm.
    assert!(
        log.contains("is traced by process") || log.contains("was not confirmed within"),
        "the traced job was not noticed:\n{log}"
    );
    assert!(daemon.running());
}

/// A grandchild of `daemon` that still runs `exe` (a rank between its
/// fork and its exec, the child of its job's keeper, which is the
/// daemon's child), stopped; `None` if none was caught in time.
fn stop_a_rank_before_its_exec(daemon: u32, exe: &Path) -> Option<i32> {
    // Its status and a link read with a deadline: a process's stat and
    // exe wait while it is in an exec (another test's may be stuck so).
    let parent_of = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix("PPid:"))?
                    .trim()
                    .parse::<u32>()
                    .ok()
            })
    };
    let is_pre_exec = |pid: i32| {
        within(Duration::from_secs(2), move || {
            std::fs::read_link(format!("/proc/{pid}/exe"))
        })
        .is_some_and(|link| link.is_ok_and(|link| link == exe))
            && parent_of(pid as u32).is_some_and(|keeper| {
                keeper != daemon
                    && parent_of(keeper) == Some(daemon)
                    // Not a child of the daemon's closer of users'
                    // descriptors (which is scored too), exiting.
                    && std::fs::read_to_string(format!("/proc/{keeper}/comm"))
                        .is_ok_and(|comm| comm.trim() != "scored-closer")
            })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return None;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse().ok())
            else {
                continue;
            };
            if !is_pre_exec(pid) {
                continue;
            }
            let pid_t = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::kill(pid_t, nix::sys::signal::Signal::SIGSTOP);
            let stopped = wait_until(Duration::from_secs(2), || {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| stat.contains(") T "))
            });
            if stopped && is_pre_exec(pid) {
                return Some(pid);
            }
            // It exec'd first: it is a rank like the others.
            let _ = nix::sys::signal::kill(pid_t, nix::sys::signal::Signal::SIGCONT);
        }
    }
    None
}

/// A rank its user stopped before its exec does not hold up a restart,
/// which waits for no launch (the keeper holds the launch); the new image
/// kills it once it has not exec'd within the exec timeout, and its job's
/// launch fails saying so.
#[test]
fn a_rank_stopped_before_its_exec_does_not_hold_up_a_restart() {
    let n = 200;
    let daemon = Daemon::builder()
        .hosts(&format!("host0 cores={n}\n"))
        .start();
    // The closer is scored too until it has named itself: not a rank.
    assert!(wait_until(Duration::from_secs(10), || daemon
        .closer()
        .is_some()));
    let exe = std::fs::canonicalize(bin("scored")).expect("scored's path");
    let nodes = format!("-nodes={n}");
    let mut job = daemon.spawn(&[&nodes, "sleep", "60"]);
    let Some(pid) = stop_a_rank_before_its_exec(daemon.pid(), &exe) else {
        daemon.ok("kill 1 KILL");
        let _ = job.wait(Duration::from_secs(30));
        eprintln!("skipped: no rank was caught between its fork and its exec");
        return;
    };
    let asked = std::time::Instant::now();
    let output = daemon.console("restart");
    let took = asked.elapsed();
    let log = daemon.log();
    assert!(
        output.status.success() && stdout(&output).contains("restarted in place"),
        "restart failed: {}{}\n{log}",
        stdout(&output),
        stderr(&output)
    );
    assert!(
        took < Duration::from_secs(3),
        "the restart waited {took:?} for rank {pid}, stopped before its exec:\n{log}"
    );
    let (status, text) = job.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(126), "{text}");
    assert!(text.contains("had not started 'sleep'"), "{text}");
}

#[test]
fn the_restart_after_a_caught_panic_keeps_a_job_waiting_for_hosts() {
    let daemon = Daemon::builder()
        .hosts("host0 cpus=0\n")
        .env("SCORED_TEST_PANIC_ON", "after:timeslice 300ms")
        .start();
    let mut first = daemon.spawn(&["-priority=0", &testprog(), "spin", "0"]);
    first.wait_pids(1);
    let mut second = daemon.spawn(&["-priority=0", "sh", "-c", "exit 7"]);
    assert!(
        wait_until(Duration::from_secs(20), || stdout(&daemon.console("job 2"))
            .contains("state: queued")),
        "{}",
        daemon.ok("jobs")
    );
    let output = daemon.console("timeslice 300ms");
    assert!(
        stdout(&output).contains("scored hit a bug")
            || stderr(&output).contains("scored hit a bug")
    );
    assert!(
        wait_until(Duration::from_secs(10), || crate::restart::daemon_status(
            &daemon
        )["restarts"]
            == 1),
        "no restart after the panic:\n{}",
        daemon.log()
    );
    assert!(daemon.ok("job 2").contains("state: queued"));
    daemon.ok("kill 1 KILL");
    let (status, _) = first.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(137));
    let (status, _) = second.wait(Duration::from_secs(10));
    assert_eq!(
        status.code(),
        Some(7),
        "the waiting job runs after the restart"
    );
}

/// A plain user's scrun refuses a base directory for its private daemon
/// (`$XDG_RUNTIME_DIR`, or `/tmp/scored-UID`) that is not the user's
/// alone, saying what is wrong with it (as tmux does for `/tmp/tmux-UID`):
/// one another user planted, one others may write, a link.
#[test]
fn a_base_directory_not_the_users_alone_is_refused_saying_why() {
    let Some(users) = test_users("a_base_directory_not_the_users_alone_is_refused_saying_why")
    else {
        return;
    };
    let sandbox = Sandbox::new();
    let planted = user_dir(&sandbox, &users.b);
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let own = user_dir(&sandbox, &users.a);
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let link = sandbox.path.join("link");
    std::os::unix::fs::symlink(&planted, &link).expect("symlink");
    for (base, why) in [
        (
            &planted,
            format!(
                "it belongs to uid {} ({}), not to you (uid {})",
                users.b.uid, users.b.name, users.a.uid
            ),
        ),
        (&own, "other users may write it (mode 0777)".to_string()),
        (&link, "it is a symbolic link".to_string()),
    ] {
        let output = command_as(&users.a, &bin("scrun"), &["true"])
            .env_remove("SCORED_SOCKET")
            .env_remove("SCORE_OPTIONS")
            .env("XDG_RUNTIME_DIR", base)
            .output()
            .expect("scrun");
        assert_eq!(
            code(&output),
            Some(scored_proto::exitcode::UNREACHABLE),
            "{}",
            stderr(&output)
        );
        let expected = format!("refusing the directory {}: {why}", base.display());
        assert!(stderr(&output).contains(&expected), "{}", stderr(&output));
    }
    // Nothing was made in them.
    for dir in [&planted, &own] {
        let entries: Vec<_> = std::fs::read_dir(dir).expect("read").collect();
        assert!(entries.is_empty(), "{}: {entries:?}", dir.display());
    }
}

/// Root's scrun, with no shared daemon and a base directory that another
/// user controls, refuses it before making anything there: that user,
/// swapping `scored-private` for a link to a directory of root's as fast
/// as it can, never gets root to change that directory or create in it.
#[test]
fn root_never_works_through_another_users_base_directory() {
    let Some(users) = test_users("root_never_works_through_another_users_base_directory") else {
        return;
    };
    if std::os::unix::net::UnixStream::connect(scored_proto::paths::ROOT_SOCKET).is_ok() {
        println!(
            "skipped: root_never_works_through_another_users_base_directory needs no daemon at {}",
            scored_proto::paths::ROOT_SOCKET
        );
        return;
    }
    // What the issue's attacker did: on inotify's word that
    // `scored-private` was made, move it aside and leave a link to a
    // directory of root's in its place (16 times in 20 before the fix).
    const SWAP: &str = r#"
import ctypes, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
base, target, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
private = os.path.join(base, "scored-private")
watch = libc.inotify_init()
libc.inotify_add_watch(watch, base.encode(), 0x100)
print("swapping", flush=True)
n = 0
end = time.time() + seconds
while time.time() < end:
    events = os.read(watch, 4096)
    at = 0
    while at < len(events):
        _, _, _, length = struct.unpack_from("iIII", events, at)
        name = events[at + 16 : at + 16 + length].rstrip(b"\0").decode()
        at += 16 + length
        if name == "scored-private" and not os.path.islink(private):
            n += 1
            try:
                os.rename(private, os.path.join(base, "moved-%d" % n))
                os.symlink(target, private)
            except OSError:
                pass
"#;
    let sandbox = Sandbox::new();
    let base = user_dir(&sandbox, &users.b);
    let target = sandbox.path.join("roots");
    std::fs::create_dir(&target).expect("mkdir");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|path| Path::new(path).exists());
    let Some(python) = python else {
        println!("skipped: root_never_works_through_another_users_base_directory needs python3");
        return;
    };
    let base_text = base.display().to_string();
    let target_text = target.display().to_string();
    let mut swapper = command_as(
        &users.b,
        Path::new(python),
        &["-c", SWAP, &base_text, &target_text, "30"],
    )
    .stdout(Stdio::piped())
    .spawn()
    .expect("start the swapper");
    let mut line = String::new();
    let mut out = std::io::BufReader::new(swapper.stdout.take().expect("stdout"));
    std::io::BufRead::read_line(&mut out, &mut line).expect("read");
    assert_eq!(line.trim(), "swapping");
    let expected = format!(
        "refusing the directory {}: it belongs to uid {} ({}), not to you (uid 0)",
        base.display(),
        users.b.uid,
        users.b.name
    );
    for round in 0..20 {
        // A link left by the last round goes, so that it can be made again.
        let _ = std::fs::remove_file(base.join("scored-private"));
        let output = Command::new(bin("scrun"))
            .arg("true")
            .env_remove("SCORED_SOCKET")
            .env_remove("SCORE_OPTIONS")
            .env("XDG_RUNTIME_DIR", &base)
            .stdin(Stdio::null())
            .output()
            .expect("scrun");
        assert_eq!(
            code(&output),
            Some(scored_proto::exitcode::UNREACHABLE),
            "round {round}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(&expected),
            "round {round}: {}",
            stderr(&output)
        );
    }
    let _ = swapper.kill();
    let _ = swapper.wait();
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&target).expect("target");
    assert_eq!(meta.mode() & 0o7777, 0o755, "root's directory changed mode");
    let inside: Vec<_> = std::fs::read_dir(&target).expect("read").collect();
    assert!(
        inside.is_empty(),
        "root made {inside:?} in its own directory"
    );
    let roots: Vec<_> = std::fs::read_dir(&base)
        .expect("read")
        .flatten()
        .filter(|entry| entry.metadata().is_ok_and(|meta| meta.uid() == 0))
        .map(|entry| entry.path())
        .collect();
    assert!(
        roots.is_empty(),
        "root made {roots:?} in another user's directory"
    );
}

/// A raw `Reattach` of job `job`, sent by `user` from python3 (the kernel
/// names the sender by the process that connects): scored's first answer.
fn reattach_as(daemon: &Daemon, user: &TestUser, job: u64) -> String {
    let frame = scored_proto::proto::encode(&scored_proto::proto::Request::Reattach {
        version: scored_proto::proto::VERSION,
        reattach: scored_proto::proto::Reattach {
            job,
            descriptors: false,
            closed_stdio: Vec::new(),
            fds: Vec::new(),
            pmi_ranks: 0,
            stages: 1,
            pty: false,
            pmix_namespace: None,
            pmi_port: false,
        },
    });
    let hex: String = frame.iter().map(|byte| format!("{byte:02x}")).collect();
    let script = "import socket, struct, sys\n\
                  s = socket.socket(socket.AF_UNIX)\n\
                  s.settimeout(20)\n\
                  s.connect(sys.argv[1])\n\
                  s.sendall(bytes.fromhex(sys.argv[2]))\n\
                  b = b''\n\
                  while len(b) < 4 or len(b) < 4 + struct.unpack('>I', b[:4])[0]:\n\
                  \x20   c = s.recv(65536)\n\
                  \x20   if not c: break\n\
                  \x20   b += c\n\
                  print(b[4:].decode())\n";
    let socket = daemon.socket.display().to_string();
    let output = command_as(
        user,
        Path::new("/usr/bin/python3"),
        &["-c", script, &socket, &hex],
    )
    .output()
    .expect("python3");
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
}

#[test]
fn another_user_cannot_take_a_job_whose_scrun_waits_to_reattach() {
    let Some(users) = test_users("another_user_cannot_take_a_job_whose_scrun_waits_to_reattach")
    else {
        return;
    };
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    daemon.ok("queue 1 deactivate");
    let mut job = daemon.spawn_as(&users.a, &["sh", "-c", "echo survived >&2"]);
    assert!(
        wait_until(Duration::from_secs(10), || daemon.job_state(1) == "queued"),
        "{}",
        daemon.ok("jobs")
    );
    // Attached: not another user's to take.
    let said = reattach_as(&daemon, &users.b, 1);
    assert!(said.contains("it is not yours"), "{said}");
    // The daemon dies with the job queued; its scrun is held back from
    // reattaching, so that the job waits for a client.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(job.pid()),
        nix::sys::signal::SIGSTOP,
    )
    .expect("stop scrun");
    daemon.kill_hard();
    daemon.start_again();
    let said = reattach_as(&daemon, &users.b, 1);
    assert!(said.contains("it is not yours"), "{said}");
    // Its own scrun has it back, and the job's end.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(job.pid()),
        nix::sys::signal::SIGCONT,
    )
    .expect("continue scrun");
    daemon.ok("queue 1 activate");
    let (status, out) = job.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(out.contains("survived"), "{out}");
}

/// A job's arguments are the user's text, and listings show them to root:
/// a newline in one would draw a row of the user's making in the operator's
/// `jobs`, and an escape sequence would reach the operator's terminal. The
/// text forms show them escaped, as the log does; JSON keeps them as given.
#[test]
fn a_job_s_arguments_cannot_draw_rows_or_send_escapes_to_the_operator() {
    let daemon = Daemon::start();
    let forged = " 99  root  bk  0  running";
    let argument = format!("x\n{forged}\r\x1b]0;owned\x07\u{2028}y");
    let output = daemon.run(&["sh", "-c", ": \"$1\"", "sh", &argument]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    for line in ["jobs all", "job 1", "history"] {
        let text = daemon.ok(line);
        for row in text.lines() {
            assert!(
                !row.starts_with(forged),
                "'{line}' shows a row the job's argument drew:\n{text}"
            );
        }
        assert!(
            !text.contains(['\x1b', '\x07', '\r', '\u{2028}']),
            "'{line}' passes control characters to the terminal:\n{text:?}"
        );
        assert!(
            text.contains(&format!("x\\n{forged}\\r\\x1b]0;owned\\x07\\u{{2028}}y")),
            "'{line}' does not show the argument escaped:\n{text}"
        );
    }
    let command = daemon.job_field(1, "command");
    assert_eq!(
        command.as_str(),
        Some(format!("sh -c : \"$1\" sh {argument}").as_str()),
        "JSON keeps the arguments as given"
    );
}
