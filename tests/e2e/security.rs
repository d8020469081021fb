//! Issue 13 (local users cannot hurt each other, the daemon or root) and
//! issue 11 items 8 and 10: the start-up script's origin, the state
//! directory, the client's trust in its socket, disk accounting, what
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
    let up = wait_until(Duration::from_secs(20), || {
        socket.exists() || matches!(child.try_wait(), Ok(Some(_)))
    });
    assert!(up, "scored neither listened nor exited");
    child
}

fn stop(mut child: Child) -> String {
    let _ = child.kill();
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

/// Issue 13 finding 10: a root daemon does not run `./scored.rc` from its
/// working directory, where anyone able to write there could plant one.
#[test]
fn r13_10_root_does_not_run_scored_rc_from_its_working_directory() {
    if !is_root() {
        println!(
            "skipped: r13_10_root_does_not_run_scored_rc_from_its_working_directory needs root"
        );
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

/// Issue 13 finding 10: root takes `--rc` only as an absolute path.
#[test]
fn r13_10_root_refuses_a_relative_rc_path() {
    if !is_root() {
        println!("skipped: r13_10_root_refuses_a_relative_rc_path needs root");
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
fn r13_10_a_plain_users_daemon_reads_its_own_scored_rc_only() {
    let Some(users) = test_users("r13_10_a_plain_users_daemon_reads_its_own_scored_rc_only") else {
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
