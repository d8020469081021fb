//! scrun as the shell's own child: what a user sees at a terminal and in
//! scripts is what the same program run directly gives. Interrupts from
//! the keyboard and hang-ups reach the job as the terminal sends them and
//! end scrun as they end the job (shell loops stop), descriptors are
//! passed as a shell passes them, the nice value and I/O priority are
//! carried, `-pty` follows a pipeline's rules and keeps type-ahead, and a
//! core dump is said. Every test runs as root on a shared daemon and, at
//! the same time, as a plain user on that user's private daemon, in a
//! runtime directory of its own; terminal tests run in a tmux pane with an
//! interactive bash.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use scored_tests::*;

/// Where a test's scruns run.
struct Side {
    /// `None`: root, on `daemon`.
    user: Option<TestUser>,
    /// Root's shared daemon.
    daemon: Option<Daemon>,
    /// A directory the side's user may write, the working directory.
    work: PathBuf,
    /// The plain user's `XDG_RUNTIME_DIR`, where its private daemon lives.
    runtime: PathBuf,
    _sandbox: Sandbox,
}

impl Side {
    fn root(builder: DaemonBuilder) -> Side {
        let daemon = builder.start();
        let sandbox = Sandbox::new();
        let work = sandbox.path.join("work");
        std::fs::create_dir(&work).expect("mkdir");
        Side {
            user: None,
            daemon: Some(daemon),
            runtime: sandbox.path.join("unused"),
            work,
            _sandbox: sandbox,
        }
    }

    fn user(user: &TestUser) -> Side {
        let sandbox = Sandbox::new();
        let private = |name: &str| {
            let dir = sandbox.path.join(name);
            std::fs::create_dir(&dir).expect("mkdir");
            std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).expect("chown");
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
            dir
        };
        let (work, runtime) = (private("work"), private("run"));
        Side {
            user: Some(user.clone()),
            daemon: None,
            work,
            runtime,
            _sandbox: sandbox,
        }
    }

    fn who(&self) -> &str {
        self.user.as_ref().map_or("root", |user| user.name.as_str())
    }

    /// The whole environment the side's shells get.
    fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "PATH".to_string(),
                "/usr/local/bin:/usr/bin:/bin".to_string(),
            ),
            ("HOME".to_string(), self.work.display().to_string()),
            ("SCRUN".to_string(), bin("scrun").display().to_string()),
            ("LC_ALL".to_string(), "C".to_string()),
        ];
        match &self.daemon {
            Some(daemon) => {
                env.push(("SCORED_SOCKET".into(), daemon.socket.display().to_string()));
                env.push(("SCORED_TEST_TAG".into(), daemon.tag.clone()));
            }
            None => env.push(("XDG_RUNTIME_DIR".into(), self.runtime.display().to_string())),
        }
        env
    }

    /// `bash -c script` as the side's user, in its working directory.
    fn bash(&self, script: &str) -> Command {
        let bash = Path::new("/bin/bash");
        let mut command = match &self.user {
            Some(user) => command_as(user, bash, &["-c", script]),
            None => {
                let mut command = Command::new(bash);
                without_stray_descriptors(&mut command);
                command.args(["-c", script]).stdin(Stdio::null());
                command
            }
        };
        command.env_clear().envs(self.env()).current_dir(&self.work);
        command
    }

    fn run(&self, script: &str) -> Output {
        self.bash(script).output().expect("run bash")
    }

    /// An interactive bash in a tmux pane, as the side's user.
    fn term(&self) -> Option<Term> {
        Term::start(self)
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if self.user.is_some() {
            end_private_daemon(&self.runtime);
        }
    }
}

/// Runs `check` as root on a shared daemon (from `builder`) and, at the
/// same time, as a plain user on the user's private daemon.
fn both(test: &str, builder: fn() -> DaemonBuilder, check: impl Fn(&Side) + Sync) {
    let users = test_users(test);
    std::thread::scope(|scope| {
        let as_user = users.as_ref().map(|users| {
            let check = &check;
            scope.spawn(move || check(&Side::user(&users.a)))
        });
        check(&Side::root(builder()));
        match as_user {
            Some(half) => {
                if let Err(panic) = half.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            None => println!("{test}: the plain-user half skipped"),
        }
    });
}

fn shown(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        output.status,
        stdout(output),
        stderr(output)
    )
}

/// Single-quotes a word for a shell.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// A tmux server of its own with one pane running an interactive bash
/// (prompt `$ `), killed when dropped.
struct Term {
    name: String,
}

impl Term {
    fn start(side: &Side) -> Option<Term> {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "scored-child-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut line = String::from("exec ");
        if let Some(user) = &side.user {
            line.push_str(&format!(
                "setpriv --reuid={} --regid={} --init-groups ",
                user.uid, user.gid
            ));
        }
        line.push_str("env -i TERM=screen PS1='$ ' ");
        for (key, value) in side.env() {
            line.push_str(&format!("{key}={} ", quote(&value)));
        }
        line.push_str("bash --norc --noprofile -i");
        let mut command = Command::new("tmux");
        without_stray_descriptors(&mut command);
        let started = command
            .args(["-L", &name, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", "150", "-y", "50", "-c"])
            .arg(&side.work)
            .arg(line)
            .stdin(Stdio::null())
            .status();
        match started {
            Ok(status) if status.success() => {}
            Ok(status) => panic!("tmux could not start a session: {status}"),
            Err(error) => {
                println!("skipped: tmux is needed for terminal tests ({error})");
                return None;
            }
        }
        let term = Term { name };
        term.expect("$ ");
        Some(term)
    }

    fn tmux(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .args(["-L", &self.name])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run tmux");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The pane's text, history included, wrapped lines joined.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-S", "-"])
    }

    /// Waits until the pane shows `text`; panics with the screen if not.
    fn expect(&self, text: &str) -> String {
        let mut screen = String::new();
        let shown = wait_until(Duration::from_secs(30), || {
            screen = self.screen();
            screen.contains(text)
        });
        assert!(shown, "the terminal never showed {text:?}:\n{screen}");
        screen
    }

    /// Types a line and Enter.
    fn line(&self, text: &str) {
        self.tmux(&["send-keys", "-l", text]);
        self.tmux(&["send-keys", "Enter"]);
    }

    /// Types keys by tmux name (`C-c`, `C-\`).
    fn keys(&self, keys: &str) {
        self.tmux(&["send-keys", keys]);
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

/// Gives an interactive program that has just prompted the time to read
/// its terminal.
fn settle() {
    std::thread::sleep(Duration::from_millis(300));
}

/// A job that says it runs, then sleeps: `echo MARK; exec sleep 100`.
/// The mark is expanded where the job runs (`$((1+1))` or `$i`), so that
/// what the screen shows of the typed line never matches it.
fn sleeper(mark: &str) -> String {
    format!("\"$SCRUN\" sh -c \"echo {mark}; exec sleep 100\"")
}

#[test]
fn ctrl_c_ends_a_shell_loop_around_scrun_as_around_the_program() {
    both(
        "ctrl_c_ends_a_shell_loop_around_scrun_as_around_the_program",
        Daemon::builder,
        |side| {
            let Some(term) = side.term() else { return };
            term.line(&format!(
                "for i in 1 2 3; do {}; echo \"iter $i rc=$?\"; done; echo loop-$((1+1))",
                sleeper("running-$i")
            ));
            term.expect("running-1");
            term.keys("C-c");
            term.line("echo after-$((1+1))");
            let screen = term.expect("after-2");
            for unseen in ["iter 1", "running-2", "loop-2", "scrun:"] {
                assert!(
                    !screen.contains(unseen),
                    "{}: {unseen:?} on the screen:\n{screen}",
                    side.who()
                );
            }
            // Ctrl-\ gives SIGQUIT's status, as for the program itself.
            term.line(&format!(
                "{}; echo quit-rc=$?",
                sleeper("quitting-$((1+1))")
            ));
            term.expect("quitting-2");
            term.keys("C-\\");
            term.expect("quit-rc=131");
        },
    );
}

#[test]
fn programs_that_handle_ctrl_c_handle_it_under_scrun() {
    both(
        "programs_that_handle_ctrl_c_handle_it_under_scrun",
        Daemon::builder,
        |side| {
            if Command::new("python3").arg("--version").output().is_err() {
                println!("skipped: python3 is not installed");
                return;
            }
            let Some(term) = side.term() else { return };
            // A program that saves a checkpoint on KeyboardInterrupt.
            std::fs::write(
                side.work.join("checkpoint.py"),
                "import time\ntry:\n    print('computing', flush=True)\n    time.sleep(100)\n\
                 except KeyboardInterrupt:\n    print('saved checkpoint')\n    raise SystemExit(3)\n",
            )
            .expect("write the program");
            term.line("\"$SCRUN\" python3 checkpoint.py; echo py-rc=$?");
            term.expect("computing");
            term.keys("C-c");
            term.expect("py-rc=3");
            assert!(term.screen().contains("saved checkpoint"));
            // The python3 prompt: Ctrl-C drops the line, the session goes on.
            term.line("\"$SCRUN\" python3 -q; echo repl-rc=$?");
            term.expect(">>> ");
            // An interactive program prompts before it reads: keys typed
            // in between may be dropped, with or without scrun.
            settle();
            term.line("x = 21");
            term.expect("x = 21\n>>>");
            settle();
            term.keys("C-c");
            term.expect("KeyboardInterrupt");
            term.line("print(x * 2)");
            term.expect("42\n>>>");
            settle();
            term.keys("C-d");
            term.expect("repl-rc=0");
            // An interactive bash: Ctrl-C ends its foreground program only.
            term.line(
                "\"$SCRUN\" env PS1='in-$((6*7))> ' bash --norc --noprofile -i; echo bash-rc=$?",
            );
            term.expect("in-42> ");
            settle();
            term.line("sleep 100; echo not-after-$((1+1))");
            settle();
            term.keys("C-c");
            term.expect("^C\nin-42>");
            settle();
            term.line("echo still-$((6 * 7))");
            term.expect("still-42");
            term.line("exit 4");
            let screen = term.expect("bash-rc=4");
            assert!(!screen.contains("not-after-2"), "{}:\n{screen}", side.who());
        },
    );
}

#[test]
fn the_same_interrupt_twice_within_a_second_kills_a_job_that_handles_it() {
    both(
        "the_same_interrupt_twice_within_a_second_kills_a_job_that_handles_it",
        Daemon::builder,
        |side| {
            let Some(term) = side.term() else { return };
            term.line(
                "\"$SCRUN\" bash -c 'trap \"echo caught-\\$((1+1))\" INT; echo stubborn-$((1+1)); while :; do sleep 0.1; done'; echo esc-rc=$?",
            );
            term.expect("stubborn-2");
            term.keys("C-c");
            term.expect("caught-2");
            // A second later, two within a second: the second kills the job.
            std::thread::sleep(Duration::from_millis(1100));
            term.keys("C-c");
            std::thread::sleep(Duration::from_millis(150));
            term.keys("C-c");
            let screen = term.expect("esc-rc=143");
            assert!(
                screen.contains("SIGINT twice within 1s; killing job"),
                "{}:\n{screen}",
                side.who()
            );
        },
    );
}

#[test]
fn a_hang_up_runs_the_jobs_hup_trap() {
    both(
        "a_hang_up_runs_the_jobs_hup_trap",
        Daemon::builder,
        |side| {
            let Some(term) = side.term() else { return };
            let out = side.work.join("trapped");
            term.line(
            "\"$SCRUN\" bash -c 'trap \"echo HUP > trapped; exit 0\" HUP; trap \"echo TERM > trapped; exit 0\" TERM; echo ready-$((1+1)); sleep 100 & wait'",
        );
            term.expect("ready-2");
            // Closing the terminal hangs it up: the kernel sends SIGHUP to its
            // foreground group, scrun's.
            drop(term);
            assert!(
                wait_until(Duration::from_secs(20), || std::fs::read_to_string(&out)
                    .is_ok_and(|text| !text.is_empty())),
                "{}: the job ran no trap",
                side.who()
            );
            assert_eq!(
                std::fs::read_to_string(&out).unwrap(),
                "HUP\n",
                "{}",
                side.who()
            );
        },
    );
}

#[test]
fn sigterm_to_scrun_reaches_the_job_and_ends_scrun_by_it() {
    both(
        "sigterm_to_scrun_reaches_the_job_and_ends_scrun_by_it",
        Daemon::builder,
        |side| {
            use std::io::{BufRead, BufReader};
            use std::os::unix::process::ExitStatusExt;
            let mut child = side
                .bash(
                    "exec \"$SCRUN\" sh -c 'trap \"echo got-TERM; trap - TERM; kill -TERM \\$\\$\" TERM; echo ready; sleep 100 & wait'",
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn scrun");
            let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
            assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("ready"));
            let scrun = nix::unistd::Pid::from_raw(child.id() as i32);
            nix::sys::signal::kill(scrun, nix::sys::signal::Signal::SIGTERM).expect("kill");
            assert_eq!(
                lines.next().and_then(Result::ok).as_deref(),
                Some("got-TERM"),
                "{}",
                side.who()
            );
            let status = child.wait().expect("wait");
            assert_eq!(
                status.signal(),
                Some(libc::SIGTERM),
                "{}: {status:?}",
                side.who()
            );
        },
    );
}

#[test]
fn ctrl_c_withdraws_a_job_waiting_in_an_exclusive_queue() {
    both(
        "ctrl_c_withdraws_a_job_waiting_in_an_exclusive_queue",
        Daemon::builder,
        |side| {
            let Some(term) = side.term() else { return };
            // Every host of the machine (one per online CPU) taken by a job
            // of the exclusive queue 0.
            term.line("\"$SCRUN\" -priority=0,hosts=$(getconf _NPROCESSORS_ONLN) sh -c 'echo holding-$((1+1)); exec sleep 100' &");
            term.expect("holding-2");
            term.line("\"$SCRUN\" -priority=0 echo never-$((1+1))");
            term.expect("waits for its hosts (Ctrl-C withdraws it)");
            term.keys("C-c");
            // An interactive shell drops the rest of a line whose command
            // Ctrl-C ended: the status is asked on a line of its own.
            term.line("echo queued-rc=$?");
            let screen = term.expect("queued-rc=130");
            assert!(!screen.contains("never-2"), "{}:\n{screen}", side.who());
            term.line("kill %1; wait; echo holder-$((1+1))");
            term.expect("holder-2");
        },
    );
}

#[test]
fn descriptors_reach_rank_0_as_a_shell_passes_them() {
    both(
        "descriptors_reach_rank_0_as_a_shell_passes_them",
        Daemon::builder,
        |side| {
            std::fs::write(side.work.join("a"), "pear\napple\n").expect("write");
            std::fs::write(side.work.join("b"), "apple\nplum\n").expect("write");
            for fd in ["a", "b"] {
                if let Some(user) = &side.user {
                    std::os::unix::fs::chown(side.work.join(fd), Some(user.uid), None)
                        .expect("chown");
                }
            }
            let compare = |command: &str| {
                let direct = side.run(&command.replace("$SCRUN_ ", ""));
                let under = side.run(&command.replace("$SCRUN_ ", "\"$SCRUN\" "));
                assert_eq!(
                    (stdout(&under), stderr(&under), under.status.code()),
                    (stdout(&direct), stderr(&direct), direct.status.code()),
                    "{}: {command}\nunder scrun: {}\ndirectly: {}",
                    side.who(),
                    shown(&under),
                    shown(&direct)
                );
                under
            };
            // Process substitution, a redirection, closed standard ones.
            let diff = compare("$SCRUN_ diff <(sort a) <(sort b)");
            assert_eq!(diff.status.code(), Some(1), "{}", shown(&diff));
            compare("$SCRUN_ sh -c 'echo x >&3' 3>three; cat three");
            let closed = compare("$SCRUN_ seq 3 >&-");
            assert_eq!(closed.status.code(), Some(1), "{}", shown(&closed));
            compare("$SCRUN_ cat <&-");
            compare("$SCRUN_ sh -c 'echo to-stderr >&2' 2>&-; echo rc=$?");
            // Only the rank that reads stdin gets them.
            let output = side.run(
                "\"$SCRUN\" -nodes=2 sh -c 'test -e /proc/self/fd/7 && echo rank $SCORE_RANK has 7; true' 7<a",
            );
            assert_eq!(stdout(&output), "rank 0 has 7\n", "{}", shown(&output));
            // More than the bound is refused before anything is sent.
            let output = side.run(
                "for fd in $(seq 10 80); do eval \"exec $fd</dev/null\"; done; \"$SCRUN\" true",
            );
            assert_eq!(output.status.code(), Some(75), "{}", shown(&output));
            assert!(
                stderr(&output).contains("descriptors passed, over the limit of 64"),
                "{}",
                shown(&output)
            );
        },
    );
}

#[test]
fn make_keeps_its_jobserver_through_scrun() {
    if Command::new("make").arg("--version").output().is_err() {
        println!("skipped: make is not installed");
        return;
    }
    both(
        "make_keeps_its_jobserver_through_scrun",
        Daemon::builder,
        |side| {
            std::fs::write(
                side.work.join("Makefile"),
                "all:\n\t+\"$(SCRUN)\" $(MAKE) -f sub.mk\n",
            )
            .expect("write");
            std::fs::write(
                side.work.join("sub.mk"),
                "all: a b c d\na b c d:\n\t@echo made-$@\n",
            )
            .expect("write");
            // make 4.4 shares its jobserver through a named pipe by
            // default; the descriptors are what scrun must pass.
            let style = if side
                .run("make --jobserver-style=pipe --version")
                .status
                .success()
            {
                " --jobserver-style=pipe"
            } else {
                ""
            };
            let output = side.run(&format!("make -s -j4{style}"));
            assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
            let text = stdout(&output);
            let mut made: Vec<&str> = text.lines().collect();
            made.sort_unstable();
            assert_eq!(
                made,
                ["made-a", "made-b", "made-c", "made-d"],
                "{}",
                shown(&output)
            );
            assert!(
                !stderr(&output).contains("jobserver"),
                "{}: {}",
                side.who(),
                shown(&output)
            );
        },
    );
}

#[test]
fn the_nice_value_and_io_priority_are_the_callers() {
    both(
        "the_nice_value_and_io_priority_are_the_callers",
        Daemon::builder,
        |side| {
            // A private daemon started at normal priority first: one
            // started under `nice` could give its jobs no better.
            let output = side.run("\"$SCRUN\" true");
            assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
            let state = "cut -d' ' -f19 /proc/self/stat; ionice -p $$";
            for prefix in [
                "nice -n 5",
                "ionice -c3",
                "nice -n 12 ionice -c2 -n6",
                "nice -n 0",
            ] {
                let direct = side.run(&format!("{prefix} sh -c {}", quote(state)));
                let under = side.run(&format!("{prefix} \"$SCRUN\" sh -c {}", quote(state)));
                assert_eq!(
                    under.status.code(),
                    Some(0),
                    "{}: {prefix}: {}",
                    side.who(),
                    shown(&under)
                );
                assert_eq!(
                    stdout(&under),
                    stdout(&direct),
                    "{}: {prefix}\nunder scrun: {}\ndirectly: {}",
                    side.who(),
                    shown(&under),
                    shown(&direct)
                );
            }
        },
    );
}

#[test]
fn a_pty_job_follows_the_rules_of_a_pipeline() {
    both(
        "a_pty_job_follows_the_rules_of_a_pipeline",
        Daemon::builder,
        |side| {
            let Some(term) = side.term() else { return };
            // A reader gone: the job gets SIGPIPE, scrun ends by it, as
            // the program does in the shell's pipeline and as scrun does
            // without a pty (where the job writes to the pipe itself);
            // whether the reader goes before or after scrun hears that
            // the job started. A few rounds, since that order varies.
            term.line("yes | head -1 >/dev/null; echo \"shell-ps=${PIPESTATUS[*]}\"");
            term.expect("shell-ps=141 0");
            for (name, job) in [
                ("plain", "\"$SCRUN\" yes"),
                ("yes", "\"$SCRUN\" -pty yes"),
                ("seq", "\"$SCRUN\" -pty seq 3000000"),
            ] {
                term.line(&format!(
                    "s=; for i in 1 2 3 4 5; do {job} | head -1 >/dev/null; s=\"$s${{PIPESTATUS[*]}},\"; done; echo \"{name}-ps=$s\""
                ));
                term.expect(&format!("{name}-ps=141 0,141 0,141 0,141 0,141 0,\n"));
            }
            // A last line without its newline is delivered, and the input ends.
            term.line("printf 'a\\nb' | \"$SCRUN\" -pty sh -c 'cat > got'; echo got-rc=$?");
            term.expect("got-rc=0");
            assert_eq!(
                std::fs::read_to_string(side.work.join("got")).expect("read"),
                "a\nb",
                "{}",
                side.who()
            );
            // Keys typed while the job does not read are the shell's after.
            term.line("\"$SCRUN\" -pty sh -c 'echo sleeping-$((1+1)); exec sleep 2'");
            term.expect("sleeping-2");
            term.line("echo typed-$((40 + 2))");
            term.expect("typed-42\n");
        },
    );
}

#[test]
fn with_tostop_a_background_pty_job_stops_on_output_as_a_program_does() {
    both(
        "with_tostop_a_background_pty_job_stops_on_output_as_a_program_does",
        Daemon::builder,
        |side| {
            let Some(term) = side.term() else { return };
            // Job changes are said at once, not at the next prompt.
            term.line("set -b");
            term.line("stty tostop");
            term.line("sh -c 'echo plain-$((1+1))' &");
            term.expect("[1]+  Stopped");
            term.line("\"$SCRUN\" -pty sh -c 'echo scrun-$((2+2))' &");
            let screen = term.expect("[2]+  Stopped");
            assert!(
                !screen.contains("plain-2\n") && !screen.contains("scrun-4\n"),
                "{screen}"
            );
            term.line("fg %1; fg %2; echo both-$((1+1))");
            let screen = term.expect("both-2");
            assert!(
                screen.contains("plain-2") && screen.contains("scrun-4"),
                "{}:\n{screen}",
                side.who()
            );
            // Without tostop, a background program writes and ends; so
            // does a background scrun, which leaves the terminal alone.
            term.line("stty -tostop");
            term.line("\"$SCRUN\" -pty sh -c 'echo free-$((3+3))' &");
            term.expect("free-6");
            let screen = term.expect("Done");
            assert!(
                !screen.contains("[1]+  Stopped                 \"$SCRUN\" -pty sh -c 'echo free"),
                "{}:\n{screen}",
                side.who()
            );
        },
    );
}

#[test]
fn a_pty_scrun_in_the_background_ends_and_obeys_its_signals_as_a_program_does() {
    both(
        "a_pty_scrun_in_the_background_ends_and_obeys_its_signals_as_a_program_does",
        Daemon::builder,
        |side| {
            let Some(term) = side.term() else { return };
            // A script (no job control): `timeout` runs scrun in a process
            // group of its own, in the terminal's background. Keys typed
            // meanwhile wait in the terminal for the shell; a background
            // reader of the terminal would be stopped on them.
            std::fs::write(
                side.work.join("bg.sh"),
                "timeout 20 \"$SCRUN\" -pty sh -c 'sleep 1; exec yes' | head -1 >/dev/null\n\
                 echo \"bg-ps=${PIPESTATUS[*]}\"\n",
            )
            .expect("write the script");
            term.line("yes | head -1 >/dev/null; echo \"direct-ps=${PIPESTATUS[*]}\"");
            term.expect("direct-ps=141 0");
            let started = Instant::now();
            term.line("bash bg.sh; read -r typed; echo \"typed=$typed\"");
            term.line("ahead");
            let screen = term.expect("bg-ps=");
            let took = started.elapsed();
            assert!(
                screen.contains("bg-ps=141 0"),
                "{}: the pipeline did not end as `yes | head -1` does:\n{screen}",
                side.who()
            );
            assert!(
                took < Duration::from_secs(15),
                "{}: the pipeline took {took:?} (the timeout is 20 s)",
                side.who()
            );
            term.expect("typed=ahead");
            // With tostop, a background scrun stops on the job's output as a
            // program does, and a SIGTERM with its continue (the shell's
            // `kill` of a stopped job) ends it as it ends the program.
            term.line("set -b; stty tostop");
            term.line("sh -c 'echo plain-$((1+1)); exec sleep 100' &");
            term.expect("[1]+  Stopped");
            term.line("\"$SCRUN\" -pty sh -c 'echo scrun-$((2+2)); exec sleep 100' &");
            term.expect("[2]+  Stopped");
            term.line("kill %1 %2");
            let screen = term.expect("Terminated              \"$SCRUN\"");
            assert!(screen.contains("Terminated              sh -c"), "{screen}");
            assert!(
                !screen.contains("scrun-4"),
                "{}: the output of a job killed in the background was written:\n{screen}",
                side.who()
            );
            term.line("stty -tostop");
        },
    );
}

#[test]
fn a_core_dump_is_said_as_a_shell_says_it() {
    both(
        "a_core_dump_is_said_as_a_shell_says_it",
        Daemon::builder,
        |side| {
            // `; true`: bash waits for its child and says how it died.
            let direct = side.run("ulimit -c unlimited; sh -c 'kill -SEGV $$'; true");
            let dumped = stderr(&direct).contains("core dumped");
            let under = side.run("ulimit -c unlimited; \"$SCRUN\" sh -c 'kill -SEGV $$'");
            assert_eq!(under.status.code(), Some(139), "{}", shown(&under));
            let said = stderr(&under);
            if dumped {
                assert!(
                    said.contains("killed by SIGSEGV (segmentation fault, core dumped)"),
                    "{}: {}",
                    side.who(),
                    shown(&under)
                );
            } else {
                println!(
                    "{}: no core is written here; checked only that none is claimed",
                    side.who()
                );
            }
            let under = side.run("ulimit -c 0; \"$SCRUN\" sh -c 'kill -SEGV $$'");
            assert!(
                stderr(&under).contains("killed by SIGSEGV (segmentation fault)\n"),
                "{}: {}",
                side.who(),
                shown(&under)
            );
            let _ = std::fs::remove_file(side.work.join("core"));
        },
    );
}

#[test]
fn the_readme_command_works_on_a_fresh_machine() {
    both(
        "the_readme_command_works_on_a_fresh_machine",
        Daemon::builder,
        |side| {
            let started = Instant::now();
            let output = side.run(
                "\"$SCRUN\" -nodes=2 sh -c 'echo \"rank $SCORE_RANK of $SCORE_NPROCS on $SCORE_HOST\"'",
            );
            assert_eq!(output.status.code(), Some(0), "{}", shown(&output));
            let text = stdout(&output);
            let mut lines: Vec<&str> = text.lines().collect();
            lines.sort_unstable();
            assert_eq!(lines.len(), 2, "{}", shown(&output));
            assert!(
                lines[0].starts_with("rank 0 of 2 on "),
                "{}",
                shown(&output)
            );
            assert!(
                lines[1].starts_with("rank 1 of 2 on "),
                "{}",
                shown(&output)
            );
            assert_eq!(stderr(&output), "", "{}", shown(&output));
            assert!(started.elapsed() < Duration::from_secs(60));
        },
    );
}
