//! The daemon's spawn never waits for a child to exec. A user
//! who stops their own ranks between the change of user and the exec (a
//! loop of `kill(-1, SIGSTOP)` as that user does it) must not stall the
//! daemon: other users' requests are answered meanwhile, a rank that has
//! not exec'd within the bound is killed, its job's launch fails with a
//! message naming the rank, and nothing is left behind.
//!
//! The attacker runs as a uid of its own that no passwd entry and no other
//! process has (scored runs jobs as the peer's uid, name or not): as the
//! harness's `scored-test-a`, its `kill(-1, SIGSTOP)` would stop the
//! processes of other tests running at the same time.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use scored_tests::*;

/// A uid that no user and no process has now.
fn unused_uid() -> u32 {
    let in_use = |uid: u32| {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .is_some()
            || std::fs::read_dir("/proc")
                .into_iter()
                .flatten()
                .flatten()
                .any(|entry| {
                    std::fs::metadata(entry.path())
                        .map(|meta| std::os::unix::fs::MetadataExt::uid(&meta) == uid)
                        .unwrap_or(false)
                })
    };
    (61_000..62_000)
        .find(|uid| !in_use(*uid))
        .expect("a free uid between 61000 and 62000")
}

/// `program args` run with uid and gid `uid` and no supplementary group.
fn as_uid(uid: u32, program: &str, args: &[&str]) -> Command {
    let mut command = Command::new("setpriv");
    command
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg("--")
        .arg(program)
        .args(args)
        .stdin(Stdio::null());
    command
}

/// The processes whose real uid is `uid`.
fn processes_of(uid: u32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|status| {
                    status
                        .lines()
                        .find_map(|line| line.strip_prefix("Uid:"))
                        .and_then(|ids| ids.split_whitespace().next()?.parse::<u32>().ok())
                })
                == Some(uid)
        })
        .collect()
}

/// `sc_console -c LINE` aimed at the daemon.
fn console_command(daemon: &Daemon, line: &str) -> Command {
    let mut command = Command::new(bin("sc_console"));
    command
        .arg("--socket")
        .arg(&daemon.socket)
        .arg("-c")
        .arg(line)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// How long a console line takes to be answered, or `None` if it was not
/// within `limit` (sc_console is then killed).
fn answer_time(daemon: &Daemon, line: &str, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut console = console_command(daemon, line)
        .spawn()
        .expect("run sc_console");
    loop {
        if let Ok(Some(_)) = console.try_wait() {
            return Some(started.elapsed());
        }
        if started.elapsed() > limit {
            kill_and_reap(console);
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn kill_and_reap(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_user_stopping_their_own_launching_ranks_does_not_stall_the_daemon() {
    if !is_root() {
        println!("skipped: needs root (to run a job as another user)");
        return;
    }
    let uid = unused_uid();
    let hosts: String = (0..96).map(|idx| format!("h{idx} cores=1\n")).collect();
    let daemon = Daemon::builder()
        .hosts(&hosts)
        .rc("queue 2 deactivate\n")
        .start();
    // Six jobs of sixteen ranks each, admitted to a deactivated queue: they
    // are all launched at once when it is activated, under the attack
    // (more ranks than one user may have between fork and exec at once).
    let mut jobs: Vec<Child> = (0..6)
        .map(|_| {
            as_uid(
                uid,
                &bin("scrun").display().to_string(),
                &["-nodes=16,priority=2", "true"],
            )
            .env("SCORED_SOCKET", &daemon.socket)
            .env("SCORED_TEST_TAG", &daemon.tag)
            .env_remove("SCORE_OPTIONS")
            .current_dir("/")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn scrun as the attacker")
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(20), || daemon
            .json("jobs")
            .as_array()
            .is_some_and(|listed| listed.len() == 6)),
        "the six jobs were not admitted: {}",
        daemon.ok("jobs")
    );
    // The attack: as the jobs' user, stop every process of that user,
    // over and over, for longer than the bound on a rank's exec.
    let attack = Duration::from_secs(8);
    let attacker = as_uid(
        uid,
        "/usr/bin/python3",
        &[
            "-c",
            &format!(
                "import os, signal, time\n\
                 end = time.time() + {}\n\
                 while time.time() < end:\n\
                 \x20   try:\n\
                 \x20       os.kill(-1, signal.SIGSTOP)\n\
                 \x20   except OSError:\n\
                 \x20       pass\n",
                attack.as_secs()
            ),
        ],
    )
    .current_dir("/")
    .spawn()
    .expect("start the attacker");
    std::thread::sleep(Duration::from_millis(300));
    let activated = answer_time(&daemon, "queue 2 activate", Duration::from_secs(20));
    let mut latencies = Vec::new();
    let mut stalled = 0;
    let started = Instant::now();
    while started.elapsed() < attack - Duration::from_millis(500) {
        match answer_time(&daemon, "status", Duration::from_secs(3)) {
            Some(latency) => latencies.push(latency),
            None => stalled += 1,
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // It stops on its own at the end of the attack; that it ran to the
    // end (and ran at all) is part of the test.
    let mut attacker = attacker;
    let attacked = wait_until(Duration::from_secs(10), || {
        matches!(attacker.try_wait(), Ok(Some(_)))
    });
    let attacker_status = attacker.wait().expect("reap the attacker");
    assert!(
        attacked && attacker_status.success(),
        "the attacker did not run: {attacker_status:?}"
    );
    let slowest = latencies.iter().max().copied().unwrap_or_default();
    println!(
        "queue 2 activate answered in {activated:?}; {} status answers during the attack, \
         slowest {slowest:?}; {stalled} not answered within 3 s",
        latencies.len()
    );
    // Everything of the attacker's user runs again, and every scrun ends.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut statuses = Vec::new();
    for job in &mut jobs {
        loop {
            for pid in processes_of(uid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGCONT,
                );
            }
            if let Ok(Some(status)) = job.try_wait() {
                let mut text = String::new();
                if let Some(mut stderr) = job.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
                }
                statuses.push((status.code(), text));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "a scrun of the attacker did not end once continued"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    println!("the attacker's jobs ended: {statuses:?}");
    assert!(
        activated.is_some_and(|latency| latency < Duration::from_secs(1)),
        "`queue 2 activate`, which launches the jobs under attack, took {activated:?}"
    );
    assert_eq!(
        stalled, 0,
        "the daemon stalled while a user stopped their own launching ranks"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "the console waited {slowest:?} for the daemon during the attack"
    );
    // Each job either ran (exit 0) or had a rank caught before its exec
    // and killed at the bound, which its launch failure says.
    for (code, text) in &statuses {
        assert!(
            *code == Some(0)
                || (*code == Some(scored_proto::exitcode::NOT_EXECUTABLE)
                    && text.contains("had not started")
                    && text.contains("rank ")),
            "unexpected end of an attacked job: {code:?} {text}"
        );
    }
    assert!(
        wait_until(Duration::from_secs(10), || daemon.all_job_pids().is_empty()
            && processes_of(uid).is_empty()
            && daemon.children().is_empty()),
        "processes left: job {:?}, user {:?}, daemon's children {:?}",
        daemon.all_job_pids(),
        processes_of(uid),
        daemon.children()
    );
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
}
