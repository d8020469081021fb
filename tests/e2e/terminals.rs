//! Terminals. scrun runs in a real terminal (a tmux pane);
//! without `-pty` the job shares it from its own session and SIGWINCH is
//! passed on, and with `-pty` rank 0 gets a pseudo-terminal of its own as
//! its controlling terminal: `/dev/tty` works, the size follows the
//! user's window, keys typed reach the job through the pty's line
//! discipline, the job's status passes through, and scrun gives the
//! terminal back as it found it.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use scored_tests::*;

/// A tmux server of its own running one pane, killed when dropped.
struct Tmux {
    name: String,
}

impl Tmux {
    /// Runs `sh SCRIPT` in a new `width`x`height` pane with the daemon's
    /// socket and tag in its environment; `None` (with a printed reason)
    /// where tmux is missing.
    fn start(daemon: &Daemon, script: &str, width: u16, height: u16) -> Option<Tmux> {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "scored-test-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path: PathBuf = daemon.sandbox.write(&format!("{name}.sh"), script);
        let started = Command::new("tmux")
            .args(["-L", &name, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", &width.to_string(), "-y", &height.to_string()])
            .arg("-c")
            .arg(&daemon.sandbox.path)
            .arg("-e")
            .arg(format!("SCORED_SOCKET={}", daemon.socket.display()))
            .arg("-e")
            .arg(format!("SCORED_TEST_TAG={}", daemon.tag))
            .arg("-e")
            .arg(format!("SCRUN={}", bin("scrun").display()))
            .arg(format!("sh {}; exec sleep 600", path.display()))
            .stdin(Stdio::null())
            .status();
        match started {
            Ok(status) if status.success() => Some(Tmux { name }),
            Ok(status) => panic!("tmux could not start a session: {status}"),
            Err(error) => {
                println!("skipped: tmux is needed for terminal tests ({error})");
                None
            }
        }
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
    fn expect(&self, text: &str) {
        let mut screen = String::new();
        let shown = wait_until(Duration::from_secs(20), || {
            screen = self.screen();
            screen.contains(text)
        });
        assert!(shown, "the terminal never showed {text:?}:\n{screen}");
    }

    /// Types keys (tmux key names, such as `C-c`).
    fn keys(&self, keys: &str) {
        self.tmux(&["send-keys", keys]);
    }

    fn resize(&self, width: u16, height: u16) {
        self.tmux(&[
            "resize-window",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
        ]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

/// A script that runs scrun with `args` between two `stty -g` of the
/// terminal, then prints scrun's status and whether the terminal's modes
/// came back unchanged. Job control is on (`set -m`), as in an interactive
/// shell: scrun runs in a process group of its own, the terminal's
/// foreground group, so keys typed signal scrun and not the script. As an
/// interactive shell, the script goes on after a command that Ctrl-C
/// ended (a script with job control interrupts itself then, unless it
/// handles SIGINT: the handler is reset in scrun).
fn around_scrun(args: &str) -> String {
    format!(
        "set -m\n\
         trap : INT\n\
         stty -g > modes.before\n\
         \"$SCRUN\" {args}\n\
         echo \"status=$?\"\n\
         stty -g > modes.after\n\
         if cmp -s modes.before modes.after; then echo modes=same; else echo modes=changed; fi\n"
    )
}

#[test]
fn on_a_pty_dev_tty_works_the_size_is_the_terminals_and_the_status_passes_through() {
    let daemon = Daemon::start();
    let script = around_scrun(
        "-pty sh -c 'echo hi-from-dev-tty > /dev/tty; tty; stty size; test -t 0 && echo stdin-is-tty; exit 7'",
    );
    let Some(tmux) = Tmux::start(&daemon, &script, 100, 30) else {
        return;
    };
    tmux.expect("modes=");
    let screen = tmux.screen();
    assert!(screen.contains("hi-from-dev-tty"), "{screen}");
    assert!(screen.contains("/dev/pts/"), "{screen}");
    assert!(screen.contains("30 100"), "{screen}");
    assert!(screen.contains("stdin-is-tty"), "{screen}");
    assert!(screen.contains("status=7"), "{screen}");
    assert!(screen.contains("modes=same"), "{screen}");
}

#[test]
fn without_a_pty_the_job_shares_the_terminal_but_has_no_controlling_terminal() {
    let daemon = Daemon::start();
    let script = around_scrun(
        "sh -c 'test -t 1 && echo stdout-is-tty; if echo x > /dev/tty; then echo tty-opened; else echo no-tty; fi'",
    );
    let Some(tmux) = Tmux::start(&daemon, &script, 100, 30) else {
        return;
    };
    tmux.expect("modes=");
    let screen = tmux.screen();
    assert!(screen.contains("stdout-is-tty"), "{screen}");
    assert!(screen.contains("no-tty"), "{screen}");
    assert!(screen.contains("status=0"), "{screen}");
    assert!(screen.contains("modes=same"), "{screen}");
}

/// A bash job that prints the size of its stdin's terminal on SIGWINCH.
const WINCH_JOB: &str = "bash -c 'trap \"echo winch \\$(stty size)\" WINCH; echo ready; \
                         while :; do sleep 0.05; done'";

fn sigwinch_reaches_the_job(pty: bool) {
    let daemon = Daemon::start();
    let flag = if pty { "-pty " } else { "" };
    let script = around_scrun(&format!("{flag}{WINCH_JOB}"));
    let Some(tmux) = Tmux::start(&daemon, &script, 100, 30) else {
        return;
    };
    tmux.expect("ready");
    tmux.resize(90, 25);
    tmux.expect("winch 25 90");
    tmux.resize(70, 20);
    tmux.expect("winch 20 70");
    daemon.ok("kill 1 KILL");
    tmux.expect("modes=");
    let screen = tmux.screen();
    assert!(screen.contains("status=137"), "{screen}");
    assert!(screen.contains("modes=same"), "{screen}");
}

#[test]
fn sigwinch_reaches_the_job_without_a_pty() {
    sigwinch_reaches_the_job(false);
}

#[test]
fn sigwinch_reaches_the_job_on_a_pty_and_its_size_follows() {
    sigwinch_reaches_the_job(true);
}

#[test]
fn ctrl_c_typed_on_a_pty_reaches_the_job_through_its_line_discipline() {
    let daemon = Daemon::start();
    // The job clears its signal mask itself and handles SIGINT: what is
    // checked here is the way Ctrl-C takes, from scrun's raw terminal
    // through the pty to the job's foreground group.
    let job = "-pty perl -e 'use POSIX; sigprocmask(SIG_SETMASK, POSIX::SigSet->new); \
               $SIG{INT} = sub { print \"got-INT\\n\"; exit 3 }; $| = 1; print \"ready\\n\"; \
               sleep 1 while 1'";
    let Some(tmux) = Tmux::start(&daemon, &around_scrun(job), 100, 30) else {
        return;
    };
    tmux.expect("ready");
    let scrun_before = daemon.json("job 1");
    tmux.keys("C-c");
    tmux.expect("modes=");
    let screen = tmux.screen();
    assert!(screen.contains("got-INT"), "{screen}");
    assert!(screen.contains("status=3"), "{screen}\njob: {scrun_before}");
    assert!(screen.contains("modes=same"), "{screen}");
}

/// Ctrl-C typed on a pty that ends the job ends scrun by SIGINT, silently,
/// as it does without `-pty` and as the program run directly would end:
/// so a shell loop around it stops.
#[test]
fn ctrl_c_that_ends_a_pty_job_ends_scrun_by_it_silently() {
    let daemon = Daemon::start();
    let script = "set -m\n\
        perl -e 'system(@ARGV); printf \"signal=%d exit=%d\\n\", $? & 127, $? >> 8' \
        \"$SCRUN\" -pty sh -c 'echo ready; exec sleep 600'\n";
    let Some(tmux) = Tmux::start(&daemon, script, 100, 30) else {
        return;
    };
    tmux.expect("ready");
    tmux.keys("C-c");
    tmux.expect("signal=");
    let screen = tmux.screen();
    assert!(screen.contains("signal=2 exit=0"), "{screen}");
    assert!(!screen.contains("killed by SIGINT"), "{screen}");
}

#[test]
fn the_terminal_is_restored_when_a_pty_job_is_killed() {
    let daemon = Daemon::start();
    let script = around_scrun("-pty sh -c 'echo ready; exec sleep 600'");
    let Some(tmux) = Tmux::start(&daemon, &script, 100, 30) else {
        return;
    };
    tmux.expect("ready");
    daemon.ok("kill 1 KILL");
    tmux.expect("modes=");
    let screen = tmux.screen();
    assert!(screen.contains("status=137"), "{screen}");
    assert!(screen.contains("modes=same"), "{screen}");
}

#[test]
fn a_pty_job_without_a_terminal_still_gets_one() {
    let daemon = Daemon::start();
    let output = daemon.run(&["-pty", "sh", "-c", "tty; stty size; exit 5"]);
    let text = stdout(&output);
    assert_eq!(code(&output), Some(5), "{text}{}", stderr(&output));
    assert!(text.starts_with("/dev/pts/"), "{text}");
    assert!(text.contains("24 80"), "{text}");
}

/// Job control in a `-pty` job and gang switching stay out of each other's
/// way: a program that the job's shell stopped on Ctrl-Z is left stopped
/// when the scheduler continues the job after switching it out.
#[test]
fn a_program_stopped_by_ctrl_z_in_a_pty_shell_stays_stopped_across_gang_switches() {
    let daemon = Daemon::builder()
        .hosts("h0 cpus=0\n")
        .timeslice("50ms")
        .start();
    let Some(tmux) = Tmux::start(&daemon, &around_scrun("-pty bash --norc -i"), 100, 30) else {
        return;
    };
    tmux.keys("echo shell-$((40+2))");
    tmux.keys("Enter");
    tmux.expect("shell-42");
    tmux.keys("sh -c 'echo sleeper=$$; exec sleep 300'");
    tmux.keys("Enter");
    let mut sleeper: Option<i32> = None;
    wait_until(Duration::from_secs(20), || {
        sleeper = tmux
            .screen()
            .lines()
            .find_map(|line| line.trim().strip_prefix("sleeper="))
            .and_then(|pid| pid.trim().parse().ok());
        sleeper.is_some()
    });
    let sleeper = sleeper.unwrap_or_else(|| panic!("no sleeper pid:\n{}", tmux.screen()));
    tmux.keys("C-z");
    tmux.expect("Stopped");
    assert!(proc_stat(sleeper).is_some_and(|stat| stat.state == 'T'));
    // Another job on the one host: job 1 is now switched out and in every
    // 50 ms.
    let mut other = daemon.spawn(&["sh", "-c", "echo pid $$; exec sleep 600"]);
    other.wait_pids(1);
    let switches = |daemon: &Daemon| daemon.json("job 1")["switches"].as_u64().unwrap_or(0);
    let before = switches(&daemon);
    let mut woken = 0;
    // Six switches take 300 ms on a quiet machine; the bound is for a
    // loaded one, and the wait ends at the sixth.
    wait_until(Duration::from_secs(10), || {
        if proc_stat(sleeper).is_some_and(|stat| stat.state != 'T') {
            woken += 1;
        }
        switches(&daemon) >= before + 6
    });
    let after = switches(&daemon);
    assert!(
        after >= before + 6,
        "job 1 was switched {before} -> {after} times"
    );
    assert_eq!(
        woken, 0,
        "the gang's continue woke the program the job's shell had stopped"
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sleeper),
        nix::sys::signal::Signal::SIGKILL,
    );
    // bash refuses the first exit while its table lists a stopped job.
    for _ in 0..2 {
        tmux.keys("exit");
        tmux.keys("Enter");
        std::thread::sleep(Duration::from_millis(300));
    }
    tmux.expect("modes=");
    let screen = tmux.screen();
    // bash's exit status is its last command's: 128 + SIGTSTP for the
    // program stopped by Ctrl-Z.
    assert!(screen.contains("status=148"), "{screen}");
    assert!(screen.contains("modes=same"), "{screen}");
    other.signal(nix::sys::signal::Signal::SIGINT);
    other.wait(Duration::from_secs(30));
}

/// Ctrl-Z in an interactive shell stops scrun as it stops the program run
/// without it: by SIGTSTP, which the shell reports as status 148 (`$?`,
/// and `wait` in scripts and `make` see the same signal).
#[test]
fn ctrl_z_stops_scrun_by_sigtstp_as_it_stops_the_program() {
    let daemon = Daemon::start();
    let Some(tmux) = Tmux::start(&daemon, "PS1='$ ' exec bash --norc -i\n", 100, 30) else {
        return;
    };
    for (what, command) in [("plain", "sleep 300"), ("scrun", "\"$SCRUN\" sleep 300")] {
        tmux.keys(&format!("echo go-{what}; {command}"));
        tmux.keys("Enter");
        tmux.expect(&format!("\ngo-{what}"));
        if what == "scrun" {
            assert!(
                wait_until(Duration::from_secs(20), || daemon.job_state(1) == "running"),
                "the job never ran:\n{}",
                tmux.screen()
            );
        }
        tmux.keys("C-z");
        tmux.expect(&format!("{command}\n"));
        tmux.keys(&format!("echo {what}-status=$?"));
        tmux.keys("Enter");
        tmux.expect(&format!("\n{what}-status="));
    }
    let screen = tmux.screen();
    assert!(screen.contains("\nplain-status=148"), "{screen}");
    assert!(screen.contains("\nscrun-status=148"), "{screen}");
    assert_eq!(daemon.job_state(1), "held", "{screen}");
    tmux.keys("kill -KILL %1 %2");
    tmux.keys("Enter");
}

/// Until the job runs, scrun's terminal stays as it is, so that Ctrl-C
/// still interrupts a `-pty` job that waits in a deactivated queue.
#[test]
fn ctrl_c_withdraws_a_pty_job_that_has_not_started() {
    let daemon = Daemon::start();
    daemon.ok("queue 1 deactivate");
    let Some(tmux) = Tmux::start(
        &daemon,
        &around_scrun("-pty sh -c 'echo never-ran'"),
        100,
        30,
    ) else {
        return;
    };
    let queued = wait_until(Duration::from_secs(20), || {
        daemon.console("job 1").status.success()
    });
    assert!(queued, "job 1 was never admitted:\n{}", tmux.screen());
    tmux.keys("C-c");
    tmux.expect("modes=");
    let screen = tmux.screen();
    assert!(!screen.contains("never-ran"), "{screen}");
    // Withdrawn, scrun ends by the interrupt, as the program would have.
    assert!(screen.contains("status=130"), "{screen}");
    assert!(screen.contains("modes=same"), "{screen}");
}

/// A plain user's `-pty` job: the rank runs as the user, takes the pty as
/// its controlling terminal after the change of user, and owns it.
#[test]
fn a_plain_users_pty_job_has_its_own_terminal() {
    let Some(users) = test_users("a_plain_users_pty_job_has_its_own_terminal") else {
        return;
    };
    let daemon = Daemon::start();
    let user = &users.a;
    let script = around_scrun(
        "-pty sh -c 'echo uid=$(id -u); echo hi-from-user > /dev/tty; stat -c owner=%u $(tty)'",
    )
    .replace(
        "\"$SCRUN\"",
        &format!(
            "setpriv --reuid={} --regid={} --init-groups \"$SCRUN\"",
            user.uid, user.gid
        ),
    );
    let Some(tmux) = Tmux::start(&daemon, &script, 100, 30) else {
        return;
    };
    tmux.expect("modes=");
    let screen = tmux.screen();
    assert!(screen.contains(&format!("uid={}", user.uid)), "{screen}");
    assert!(screen.contains("hi-from-user"), "{screen}");
    assert!(screen.contains(&format!("owner={}", user.uid)), "{screen}");
    assert!(screen.contains("status=0"), "{screen}");
    assert!(screen.contains("modes=same"), "{screen}");
}
