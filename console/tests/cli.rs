//! The built sc_console in its non-interactive modes, `-c LINE` and a
//! script on standard input, against the fake daemon of [`common`]: what
//! reaches stdout and stderr, and the exit statuses scripts rely on.
#![forbid(unsafe_code)]

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::{fake_daemon, Sandbox};

/// What one run printed and returned.
#[derive(Debug, PartialEq)]
struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

/// Runs sc_console with `args` (the socket comes from SCORED_SOCKET), with
/// `stdin` as its standard input.
fn run(socket: &Path, args: &[&str], stdin: &str) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sc_console"))
        .args(args)
        .env("SCORED_SOCKET", socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sc_console");
    let mut input = child.stdin.take().expect("piped stdin");
    // sc_console may exit before reading everything; that is not an error here.
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    let output = child.wait_with_output().expect("wait for sc_console");
    Run {
        status: output.status.code().expect("sc_console exited, not killed"),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[track_caller]
fn check(actual: Run, status: i32, stdout: &str, stderr: &str) {
    let expected = Run {
        status,
        stdout: stdout.to_string(),
        stderr: stderr.to_string(),
    };
    assert_eq!(
        actual, expected,
        "\n--- stdout ---\n{}--- stderr ---\n{}",
        actual.stdout, actual.stderr
    );
}

#[test]
fn one_line_prints_the_answer_or_the_error() {
    let sandbox = Sandbox::new("cli-line");
    let socket = sandbox.dir.join("s.sock");
    fake_daemon(&socket);
    check(run(&socket, &["-c", "status"], ""), 0, "done: status\n", "");
    check(
        run(&socket, &["--json", "-c", "jobs"], ""),
        0,
        "[\n  {\n    \"id\": 7,\n    \"user\": \"op\",\n    \"state\": \"running\"\n  },\n  \
         {\n    \"id\": 12,\n    \"user\": \"op\",\n    \"state\": \"queued\"\n  }\n]\n",
        "",
    );
    check(
        run(&socket, &["-c", "kill 9"], ""),
        1,
        "",
        "error: no job 9\n",
    );
    check(
        run(&socket, &["-c", "shutdown now"], ""),
        70,
        "",
        "sc_console: lost the connection to scored: scored closed the connection\n",
    );
}

#[test]
fn the_socket_flag_wins_over_the_environment() {
    let sandbox = Sandbox::new("cli-flag");
    let socket = sandbox.dir.join("s.sock");
    fake_daemon(&socket);
    let missing = sandbox.dir.join("missing.sock");
    let socket_flag = socket.display().to_string();
    check(
        run(&missing, &["--socket", &socket_flag, "-c", "hosts"], ""),
        0,
        "done: hosts\n",
        "",
    );
}

#[test]
fn without_a_daemon_only_help_works() {
    let sandbox = Sandbox::new("cli-none");
    let missing = sandbox.dir.join("missing.sock");
    let help = run(&missing, &["-c", "help"], "");
    assert_eq!((help.status, help.stderr.as_str()), (0, ""));
    assert!(help.stdout.starts_with("commands"), "{}", help.stdout);
    check(
        run(&missing, &["-c", "jobs"], ""),
        69,
        "",
        &format!(
            "sc_console: cannot reach scored at {}: no such file or directory\n",
            missing.display()
        ),
    );
}

#[test]
fn a_script_stops_at_its_first_failing_line() {
    let sandbox = Sandbox::new("cli-script");
    let socket = sandbox.dir.join("s.sock");
    let seen = fake_daemon(&socket);
    check(
        run(
            &socket,
            &[],
            "# set up\nqueue 1 disable\n\nkill 9\nqueues\n",
        ),
        1,
        "done: queue 1 disable\n",
        "sc_console: stdin:4: no job 9\n",
    );
    assert_eq!(
        *seen.lock().expect("log lock"),
        ["queue 1 disable", "kill 9"]
    );
}

#[test]
fn a_script_line_that_does_not_parse_is_not_sent() {
    let sandbox = Sandbox::new("cli-parse");
    let socket = sandbox.dir.join("s.sock");
    let seen = fake_daemon(&socket);
    let result = run(&socket, &[], "status\nqueue 1 set mode=fast\nstatus\n");
    assert_eq!(
        (result.status, result.stdout.as_str()),
        (1, "done: status\n")
    );
    assert!(
        result.stderr.starts_with("sc_console: stdin:2: ") && result.stderr.contains("fast"),
        "{}",
        result.stderr
    );
    assert_eq!(*seen.lock().expect("log lock"), ["status"]);
}

#[test]
fn a_whole_script_succeeds_with_json() {
    let sandbox = Sandbox::new("cli-json");
    let socket = sandbox.dir.join("s.sock");
    fake_daemon(&socket);
    check(
        run(&socket, &["--json"], "status\nhosts\n"),
        0,
        "{\n  \"ok\": true,\n  \"message\": \"done: status\"\n}\n\
         {\n  \"ok\": true,\n  \"message\": \"done: hosts\"\n}\n",
        "",
    );
    check(run(&socket, &[], ""), 0, "", "");
}
