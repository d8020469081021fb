//! A bug does not cost a job: a panic while handling an event rolls the
//! core back to the state before it, brings the processes in line with
//! that state, and restarts the daemon in place. The panics are injected
//! through the daemon's fault injection (`SCORED_TEST_PANIC_ON`).

use std::time::{Duration, Instant};

use crate::restart::{all_gone, cpu_ticks, daemon_status, state_of};
use scored_tests::*;

/// A panic while handling an event (injected through the test hook
/// SCORED_TEST_PANIC_ON) is logged with the event, and scored restarts in
/// place: jobs and their clients carry on.
#[test]
fn a_panic_restarts_in_place_and_loses_no_job() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .env("SCORED_TEST_PANIC_ON", "clusters")
        .start();
    let mut gangs = Vec::new();
    let mut pids = Vec::new();
    for _ in 0..2 {
        let mut job = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
        pids.push(job.wait_pids(2));
        gangs.push(job);
    }
    let mut late = daemon.spawn(&[
        "-nodes=1",
        "-priority=0",
        "sh",
        "-c",
        "sleep 1; echo done; exit 4",
    ]);
    assert!(wait_until(Duration::from_secs(10), || state_of(&daemon, 3)
        == "running"));
    let output = daemon.console("clusters");
    assert!(!output.status.success());
    let text = stdout(&output) + &stderr(&output);
    assert!(text.contains("scored hit a bug"), "{text}");
    assert!(wait_until(Duration::from_secs(10), || daemon_status(
        &daemon
    )["restarts"]
        == 1));
    let log = daemon.log();
    assert!(
        log.contains("a bug: scored panicked handling an event"),
        "{log}"
    );
    assert!(
        log.contains("Client(Token("),
        "the log names the event:\n{log}"
    );
    for job_pids in &pids {
        assert!(job_pids.iter().all(|pid| alive(*pid)));
    }
    late.wait_lines("done", 1);
    let (status, _) = late.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(4));
    let start: Vec<u64> = pids.iter().map(|p| cpu_ticks(p)).collect();
    assert!(wait_until(Duration::from_secs(10), || pids
        .iter()
        .zip(&start)
        .all(|(p, before)| cpu_ticks(p) > *before + 5)));
    for (idx, mut job) in gangs.into_iter().enumerate() {
        daemon.ok(&format!("kill {} KILL", idx + 1));
        let (status, _) = job.wait(Duration::from_secs(10));
        assert_eq!(status.code(), Some(137));
    }
}

/// A daemon whose test hook (SCORED_TEST_PANIC_ON) is `hook`, on one host.
fn panicking_daemon(hook: &str, slice: &str) -> Daemon {
    Daemon::builder()
        .hosts("host0 cpus=0\n")
        .timeslice(slice)
        .arg("--kill-grace")
        .arg("500ms")
        .env("SCORED_TEST_PANIC_ON", hook)
        .start()
}

/// Sends `line`, which the hook makes panic once applied: the console is
/// told of the bug, and scored restarts in place.
fn panic_after(daemon: &Daemon, line: &str) {
    let output = daemon.console(line);
    let text = stdout(&output) + &stderr(&output);
    assert!(!output.status.success(), "{line}: {text}");
    assert!(text.contains("scored hit a bug"), "{text}");
    assert!(
        wait_until(Duration::from_secs(10), || daemon_status(daemon)
            ["restarts"]
            == 1),
        "no restart after the panic:\n{}",
        daemon.log()
    );
}

/// A panic after the core applied a console command
/// (and before the reply) restarts scored from the state before that
/// command: the time slice it set is not kept.
#[test]
fn a_panic_after_a_command_restores_the_state_before_it() {
    let daemon = panicking_daemon("after:timeslice 300ms", "100ms");
    let before = daemon_status(&daemon)["timeslice"].clone();
    panic_after(&daemon, "timeslice 300ms");
    assert_eq!(daemon_status(&daemon)["timeslice"], before);
    let log = daemon.log();
    assert!(log.contains("injected panic after applying"), "{log}");
    assert!(log.contains("restored the state before the event"), "{log}");
    // The console works as before, and the same setting applies when it
    // comes without the bug.
    daemon.ok("timeslice 250ms");
    assert_ne!(daemon_status(&daemon)["timeslice"], before);
}

/// `suspend` stopped the job before the panic; the state
/// before it holds the job as running, so the restart continues it, its
/// scrun stays connected, and the job ends with its own status.
#[test]
fn a_panic_after_a_hold_leaves_the_job_running() {
    let daemon = panicking_daemon("after:suspend 1", "100ms");
    let mut job = daemon.spawn(&["sh", "-c", "echo pid $$; sleep 3; exit 7"]);
    let pid = job.wait_pids(1)[0];
    assert!(wait_until(Duration::from_secs(10), || state_of(&daemon, 1)
        == "running"));
    panic_after(&daemon, "suspend 1");
    assert_eq!(state_of(&daemon, 1), "running");
    assert!(
        !stopped(pid),
        "the job the restored state holds as running is stopped"
    );
    assert!(alive(job.pid()), "scrun lost its job");
    let (status, stderr) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(7), "{stderr}");
}

/// `kill` sent SIGTERM before the panic. The signal
/// cannot be taken back, but the kill is not carried on: a job that
/// ignores SIGTERM is not sent SIGKILL after the grace, and ends with its
/// own status.
#[test]
fn a_panic_after_a_kill_does_not_carry_the_kill_on() {
    let daemon = panicking_daemon("after:kill 1", "100ms");
    let mut job = daemon.spawn(&[&testprog(), "ignore-term", "3"]);
    job.wait_pids(1);
    assert!(wait_until(Duration::from_secs(10), || state_of(&daemon, 1)
        == "running"));
    panic_after(&daemon, "kill 1");
    assert_eq!(state_of(&daemon, 1), "running");
    let (status, stderr) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{stderr}");
}

/// A panic in the middle of a switch, after the first
/// of two leaving jobs was stopped and before the second was. scored
/// restarts from the state before the switch: no job that it holds as
/// running is stopped, rotation goes on (a state taken at the panic would
/// wait forever for the second job's stop, which was never sent), every
/// scrun keeps its job, ids continue and no process is left behind.
#[test]
fn a_panic_in_the_middle_of_a_switch_leaves_no_job_stopped() {
    let trigger = std::env::temp_dir().join(format!(
        "scored-mid-switch-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_file(&trigger);
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("1s")
        .env(
            "SCORED_TEST_PANIC_ON",
            &format!("mid-switch:{}", trigger.display()),
        )
        .start();
    // Job 1 spans both hosts; jobs 2 and 3 take one each and run
    // together, so the switch back to job 1 stops two jobs.
    let mut jobs = Vec::new();
    let mut pids = Vec::new();
    for nodes in [2, 1, 1] {
        let mut job = daemon.spawn(&[&format!("-nodes={nodes}"), &testprog(), "spin", "0"]);
        pids.push(job.wait_pids(nodes));
        jobs.push(job);
    }
    std::fs::write(&trigger, "").expect("create the trigger");
    assert!(
        wait_until(Duration::from_secs(10), || daemon_status(&daemon)
            ["restarts"]
            == 1),
        "no restart:\n{}",
        daemon.log()
    );
    assert!(!trigger.exists());
    assert!(daemon
        .log()
        .contains("injected panic in the middle of a switch"));
    // After the restart, what the core says of each job is what the
    // kernel says of its processes (a sample taken across a switch proves
    // nothing and is skipped).
    let mut consistent_samples = 0;
    let began = Instant::now();
    while consistent_samples < 3 && began.elapsed() < Duration::from_secs(5) {
        let switches = daemon_status(&daemon)["switches"].clone();
        let states: Vec<(String, bool)> = pids
            .iter()
            .enumerate()
            .map(|(idx, job_pids)| {
                (
                    state_of(&daemon, idx as u64 + 1),
                    job_pids.iter().any(|pid| stopped(*pid)),
                )
            })
            .collect();
        if daemon_status(&daemon)["switches"] != switches {
            continue;
        }
        for (idx, (state, is_stopped)) in states.iter().enumerate() {
            if state == "running" {
                assert!(
                    !is_stopped,
                    "job {} is running for scored but stopped for the kernel",
                    idx + 1
                );
            }
        }
        consistent_samples += 1;
    }
    assert!(consistent_samples > 0);
    // Rotation goes on: each job gets the CPU again.
    daemon.ok("timeslice 100ms");
    let start: Vec<u64> = pids.iter().map(|job_pids| cpu_ticks(job_pids)).collect();
    assert!(
        wait_until(Duration::from_secs(10), || pids
            .iter()
            .zip(&start)
            .all(|(job_pids, before)| cpu_ticks(job_pids) > *before + 5)),
        "rotation stopped after the restart:\n{}",
        daemon.log()
    );
    // Ids continue.
    let output = daemon.run(&["sh", "-c", "echo id $SCORE_JOBID"]);
    assert_eq!(stdout(&output).trim(), "id 4");
    for (idx, job) in jobs.iter_mut().enumerate() {
        assert!(alive(job.pid()), "scrun of job {} lost its job", idx + 1);
        daemon.ok(&format!("kill {} KILL", idx + 1));
        let (status, _) = job.wait(Duration::from_secs(10));
        assert_eq!(status.code(), Some(137));
    }
    let all: Vec<i32> = pids.concat();
    assert!(all_gone(&all, Duration::from_secs(5)));
}

/// A panic after a rank's exit was reaped and before the
/// core heard of it. The kernel will not report that exit again, so the
/// restored state is told it again: the job ends with its own status
/// through its scrun, and the other job runs on.
#[test]
fn an_exit_reaped_by_an_event_that_panicked_is_reported() {
    let trigger = std::env::temp_dir().join(format!(
        "scored-after-exit-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_file(&trigger);
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .env(
            "SCORED_TEST_PANIC_ON",
            &format!("after-exit:{}", trigger.display()),
        )
        .start();
    let mut other = daemon.spawn(&[&testprog(), "spin", "0"]);
    let other_pids = other.wait_pids(1);
    std::fs::write(&trigger, "").expect("create the trigger");
    let mut ending = daemon.spawn(&["sh", "-c", "echo pid $$; sleep 1; exit 5"]);
    let ending_pid = ending.wait_pids(1)[0];
    let (status, stderr) = ending.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(5), "{stderr}\n{}", daemon.log());
    assert!(!trigger.exists(), "the hook never fired");
    assert_eq!(daemon_status(&daemon)["restarts"], 1);
    let log = daemon.log();
    assert!(log.contains("injected panic after reaping a rank"), "{log}");
    assert!(!alive(ending_pid));
    // Alone on its host, the other job was never switched out.
    assert!(alive(other_pids[0]) && !stopped(other_pids[0]));
    daemon.ok("kill 1 KILL");
    let (status, _) = other.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(137));
}

/// `queue 2 activate` started a queued job (its process
/// was created) before the panic. The state before it holds the queue as
/// deactivated and the job as never started, so the process is killed and
/// reaped; the job starts for real once the queue is activated again and
/// ends with its own status through its scrun.
#[test]
fn a_process_created_by_an_event_that_panicked_is_killed() {
    let daemon = Daemon::builder()
        .timeslice("100ms")
        .rc("queue 2 deactivate\n")
        .env("SCORED_TEST_PANIC_ON", "after:queue 2 activate")
        .start();
    let mut job = daemon.spawn(&["-priority=2", "sh", "-c", "echo pid $$; sleep 2; exit 6"]);
    assert!(wait_until(Duration::from_secs(10), || state_of(&daemon, 1) == "queued"));
    panic_after(&daemon, "queue 2 activate");
    assert_eq!(state_of(&daemon, 1), "queued");
    assert!(
        daemon.job_pids(1).is_empty(),
        "a process of the lost launch is left: {:?}",
        daemon.job_pids(1)
    );
    assert!(daemon
        .log()
        .contains("killing processes the restored state does not know"));
    // The same command, not spelled as the hook's line, starts it for real.
    daemon.ok("queue  2 activate");
    let (status, stderr) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(6), "{stderr}\n{}", daemon.log());
}
