//! The interactive shell in a real terminal: sc_console runs in a tmux pane,
//! keys are typed with `tmux send-keys` and the screen is read with `tmux
//! capture-pane`. It checks completion of a command and of a live job id,
//! the listing of ambiguous completions, Ctrl-C, local help, and history
//! kept across two sessions, lines typed or pasted before the prompt
//! appears, and the settings and hints of `queue Q set`.
//!
//! The daemon is a fake in a thread of this test ([`common::fake_daemon`]),
//! so the test does not depend on scored. Each test uses
//! its own tmux server (`tmux -S SOCKET`) and kills only that server. Without
//! tmux the test prints why and passes.
#![forbid(unsafe_code)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{fake_daemon, Sandbox};

/// How long a screen may take to show what a test waits for.
const DEADLINE: Duration = Duration::from_secs(15);

/// A private tmux server on a socket in the sandbox, killed (only it) at
/// the end. A socket of our own rather than `-L NAME` keeps tmux's shared
/// socket directory clean: kill-server leaves the socket file behind.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn new(sandbox: &Sandbox) -> Tmux {
        Tmux {
            socket: sandbox.dir.join("tmux.sock"),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("-f")
            .arg("/dev/null")
            .args(args)
            .env_remove("TMUX")
            .output()
            .expect("run tmux")
    }

    /// Starts `command` (a shell command line) in a new detached session.
    fn start(&self, session: &str, command: &str) {
        let output = self.run(&[
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            "200",
            "-y",
            "40",
            command,
        ]);
        assert!(
            output.status.success(),
            "tmux new-session failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Types text literally.
    fn type_text(&self, session: &str, text: &str) {
        self.run(&["send-keys", "-t", session, "-l", text]);
    }

    /// Pastes text as a terminal does (bracketed, when the program asked
    /// for it), newlines sent as Enter.
    fn paste(&self, session: &str, text: &str) {
        self.run(&["set-buffer", "-b", "paste", text]);
        self.run(&["paste-buffer", "-p", "-d", "-b", "paste", "-t", session]);
    }

    /// Presses keys by tmux name (`Tab`, `Enter`, `C-c`, `Up`).
    fn press(&self, session: &str, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", session];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    fn screen(&self, session: &str) -> String {
        let output = self.run(&["capture-pane", "-p", "-t", session]);
        let mut screen = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            screen.push_str(&format!(
                "(tmux capture-pane failed: {})\n",
                String::from_utf8_lossy(&output.stderr).trim_end()
            ));
        }
        screen
    }

    /// Waits until a line of the screen satisfies `wanted`.
    #[track_caller]
    fn wait_for_line(&self, session: &str, what: &str, wanted: impl Fn(&str) -> bool) {
        let start = Instant::now();
        loop {
            let screen = self.screen(session);
            if screen.lines().any(|line| wanted(line.trim_end())) {
                return;
            }
            if start.elapsed() > DEADLINE {
                panic!("timed out waiting for {what}\n--- screen ---\n{screen}--- end ---");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the last line of the screen that is not blank is the
    /// bare prompt `prompt`: sc_console reads the terminal again.
    #[track_caller]
    fn wait_for_prompt(&self, session: &str, prompt: &str) {
        let start = Instant::now();
        loop {
            let screen = self.screen(session);
            let last = screen.lines().rev().find(|line| !line.trim().is_empty());
            if last.is_some_and(|line| line.trim_end() == prompt) {
                return;
            }
            if start.elapsed() > DEADLINE {
                panic!("timed out waiting for the prompt {prompt:?}\n--- screen ---\n{screen}--- end ---");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[track_caller]
    fn wait_for(&self, session: &str, line: &str) {
        self.wait_for_line(session, &format!("the line {line:?}"), |shown| {
            shown == line
        });
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}

fn have_tmux() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|output| output.status.success())
}

/// Single-quotes a word for the shell tmux runs the command with.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The shell command of a pane: sc_console with HOME set to the sandbox
/// (so the prompt shows a socket there as `~/...`), then its exit status;
/// the pane stays open so the status can be read.
fn shell_command(home: &Path, history: &Path, socket: &Path) -> String {
    format!(
        "HOME={home} SC_CONSOLE_HISTORY={history} {bin} --socket {socket}; \
         echo \"[exited $?]\"; exec cat",
        home = sh_quote(&home.display().to_string()),
        history = sh_quote(&history.display().to_string()),
        bin = sh_quote(env!("CARGO_BIN_EXE_sc_console")),
        socket = sh_quote(&socket.display().to_string()),
    )
}

#[test]
fn completes_runs_help_and_keeps_history_across_sessions() {
    if !have_tmux() {
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let sandbox = Sandbox::new("tmux");
    let socket = sandbox.dir.join("s.sock");
    let history = sandbox.dir.join("state/history");
    let seen = fake_daemon(&socket);
    let command = shell_command(&sandbox.dir, &history, &socket);
    let prompt = "scored[~/s.sock]>";
    let tmux = Tmux::new(&sandbox);

    // First session.
    tmux.start("one", &command);
    tmux.wait_for_prompt("one", prompt);

    // A command word: `sta` completes to `status`. Only the completed line
    // reaches the daemon; `sta` alone would fail to parse locally.
    tmux.type_text("one", "sta");
    tmux.press("one", &["Tab", "Enter"]);
    tmux.wait_for("one", "done: status");
    tmux.wait_for_prompt("one", prompt);

    // A job id, asked of the daemon at completion time.
    tmux.type_text("one", "job 1");
    tmux.press("one", &["Tab"]);
    tmux.wait_for("one", &format!("{prompt} job 12"));
    tmux.press("one", &["Enter"]);
    tmux.wait_for("one", "done: job 12");
    tmux.wait_for_prompt("one", prompt);

    // Two candidates: the second Tab lists them; Ctrl-C drops the line.
    tmux.type_text("one", "resume ");
    tmux.press("one", &["Tab", "Tab"]);
    tmux.wait_for_line("one", "the candidates 7 and 12", |line| {
        line.split_whitespace().collect::<Vec<_>>() == ["7", "12"]
    });
    tmux.press("one", &["C-c"]);
    tmux.wait_for_prompt("one", prompt);

    // Help comes from the table compiled into sc_console.
    tmux.type_text("one", "help queue");
    tmux.press("one", &["Enter"]);
    tmux.wait_for("one", "usage: queue Q enable|disable|activate|deactivate");
    tmux.wait_for_prompt("one", prompt);

    tmux.press("one", &["C-d"]);
    tmux.wait_for("one", "[exited 0]");

    let lines = seen.lock().expect("log lock").clone();
    assert!(lines.contains(&"jobs".to_string()), "{lines:?}");
    assert!(lines.contains(&"job 12".to_string()), "{lines:?}");
    assert!(
        !lines.iter().any(|line| line.starts_with("kill")),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|line| line.starts_with("help")),
        "{lines:?}"
    );
    let saved = std::fs::read_to_string(&history).expect("the history file was written");
    for line in ["status", "job 12", "help queue"] {
        assert!(saved.lines().any(|saved| saved == line), "{saved}");
    }

    // Second session: the history of the first is there, newest first.
    tmux.start("two", &command);
    tmux.wait_for_prompt("two", prompt);
    tmux.press("two", &["Up"]);
    tmux.wait_for("two", &format!("{prompt} help queue"));
    tmux.press("two", &["Up"]);
    tmux.wait_for("two", &format!("{prompt} job 12"));
    tmux.press("two", &["Enter"]);
    tmux.wait_for("two", "done: job 12");
    tmux.wait_for_prompt("two", prompt);
    tmux.type_text("two", "quit");
    tmux.press("two", &["Enter"]);
    tmux.wait_for("two", "[exited 0]");
}

#[test]
fn a_lost_daemon_ends_the_shell_and_keeps_the_history() {
    if !have_tmux() {
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let sandbox = Sandbox::new("tmux-lost");
    let socket = sandbox.dir.join("s.sock");
    let history = sandbox.dir.join("history");
    fake_daemon(&socket);
    let tmux = Tmux::new(&sandbox);

    tmux.start("lost", &shell_command(&sandbox.dir, &history, &socket));
    tmux.wait_for("lost", "scored[~/s.sock]>");
    tmux.type_text("lost", "shutdown now");
    tmux.press("lost", &["Enter"]);
    tmux.wait_for(
        "lost",
        "sc_console: lost the connection to scored: scored closed the connection",
    );
    tmux.wait_for("lost", "[exited 70]");
    let saved = std::fs::read_to_string(&history).expect("the history file was written");
    assert!(saved.lines().any(|line| line == "shutdown now"), "{saved}");

    // No daemon at all: the shell says so before the first prompt.
    let missing = sandbox.dir.join("missing.sock");
    tmux.start("none", &shell_command(&sandbox.dir, &history, &missing));
    tmux.wait_for(
        "none",
        &format!(
            "sc_console: cannot reach scored at {}: no such file or directory",
            missing.display()
        ),
    );
    tmux.wait_for("none", "[exited 69]");
}

/// What is typed while sc_console is not yet reading (before it starts,
/// while a command runs) and what is pasted, several lines at once, all
/// run, in order, as in a shell.
#[test]
fn keeps_lines_typed_or_pasted_before_the_prompt() {
    if !have_tmux() {
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let sandbox = Sandbox::new("tmux-ahead");
    let socket = sandbox.dir.join("s.sock");
    let history = sandbox.dir.join("history");
    let seen = fake_daemon(&socket);
    let prompt = "scored[~/s.sock]>";
    let tmux = Tmux::new(&sandbox);

    // Typed before sc_console starts: the terminal keeps it.
    tmux.start(
        "ahead",
        &format!(
            "echo ready; sleep 1; {}",
            shell_command(&sandbox.dir, &history, &socket)
        ),
    );
    tmux.wait_for("ahead", "ready");
    tmux.type_text("ahead", "status");
    tmux.press("ahead", &["Enter"]);
    tmux.type_text("ahead", "hosts");
    tmux.press("ahead", &["Enter"]);
    tmux.wait_for("ahead", "done: hosts");
    tmux.wait_for_prompt("ahead", prompt);

    // Typed while a command runs (the daemon takes a second to answer).
    tmux.type_text("ahead", "clusters");
    tmux.press("ahead", &["Enter"]);
    tmux.wait_for("ahead", &format!("{prompt} clusters"));
    for line in ["timeslice", "jobs all"] {
        tmux.type_text("ahead", line);
        tmux.press("ahead", &["Enter"]);
    }
    tmux.wait_for("ahead", "done: jobs all");
    tmux.wait_for_prompt("ahead", prompt);

    // Pasted, three lines at once, then Enter.
    tmux.paste("ahead", "timeslice 2s\nqueues\nstatus all");
    tmux.press("ahead", &["Enter"]);
    tmux.wait_for_line("ahead", "the error of the third line", |line| {
        line.starts_with("error: extra argument 'all' in 'status all'")
    });
    tmux.wait_for_prompt("ahead", prompt);

    // A quit typed right after a command ends the shell.
    tmux.type_text("ahead", "clusters");
    tmux.press("ahead", &["Enter"]);
    tmux.type_text("ahead", "quit");
    tmux.press("ahead", &["Enter"]);
    tmux.wait_for("ahead", "[exited 0]");

    let lines = seen.lock().expect("log lock").clone();
    assert_eq!(
        lines,
        [
            "status",
            "hosts",
            "clusters",
            "timeslice",
            "jobs all",
            "timeslice 2s",
            "queues",
            "clusters",
        ],
        "{}",
        tmux.screen("ahead")
    );
}

/// Completion offers every setting of `queue Q set`, the values of those
/// whose values are words, and the hint after `queue Q ` names `set`.
#[test]
fn completes_queue_settings_and_hints_both_forms() {
    if !have_tmux() {
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let sandbox = Sandbox::new("tmux-set");
    let socket = sandbox.dir.join("s.sock");
    let history = sandbox.dir.join("history");
    let seen = fake_daemon(&socket);
    let prompt = "scored[~/s.sock]>";
    let tmux = Tmux::new(&sandbox);
    tmux.start("set", &shell_command(&sandbox.dir, &history, &socket));
    tmux.wait_for_prompt("set", prompt);

    tmux.type_text("set", "queue 1 ");
    tmux.wait_for(
        "set",
        &format!("{prompt} queue 1 enable|disable|activate|deactivate|set ..."),
    );
    tmux.type_text("set", "set mp");
    tmux.press("set", &["Tab"]);
    tmux.wait_for("set", &format!("{prompt} queue 1 set mpl="));
    tmux.type_text("set", "2 b");
    tmux.press("set", &["Tab"]);
    tmux.wait_for("set", &format!("{prompt} queue 1 set mpl=2 backfill="));
    tmux.type_text("set", "of");
    tmux.press("set", &["Tab", "Enter"]);
    tmux.wait_for("set", "done: queue 1 set mpl=2 backfill=off");
    tmux.wait_for_prompt("set", prompt);
    tmux.press("set", &["C-d"]);
    tmux.wait_for("set", "[exited 0]");
    assert!(
        seen.lock()
            .expect("log lock")
            .contains(&"queue 1 set mpl=2 backfill=off".to_string()),
        "{}",
        tmux.screen("set")
    );
}
