//! A crash of scored loses no job: a new scored on the same state
//! directory takes over every job the killed one held, and each
//! interactive scrun reattaches and ends with its job's status.

use std::time::Duration;

use scored_tests::*;

/// Every finished job of `history --json`, as (id, state, exit, reason).
fn history(daemon: &Daemon) -> Vec<(u64, String, i64, String)> {
    let records = daemon.json("history");
    records
        .as_array()
        .expect("history is a list")
        .iter()
        .map(|record| {
            (
                record["id"].as_u64().unwrap_or(0),
                record["state"].as_str().unwrap_or("").to_string(),
                record["exit"].as_i64().unwrap_or(-1),
                record["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// A queued job and a held one survive a kill -9 of scored: the new
/// scored holds them as they were (queued, held), their scruns reattach,
/// and once the queue is activated and the hold released both run and
/// end with status 0, their output on their scruns' stdout.
#[test]
fn a_queued_and_a_held_job_survive_a_kill_of_scored() {
    let mut daemon = Daemon::builder().hosts("h0 cpus=0\n").start();
    daemon.ok("queue 1 deactivate");
    let mut queued = daemon.spawn(&["-priority=1", "sh", "-c", "echo queued-ran"]);
    let mut held = daemon.spawn(&["-priority=1", "sh", "-c", "echo held-ran; exit 0"]);
    assert!(wait_until(Duration::from_secs(10), || daemon
        .ok("jobs")
        .lines()
        .count()
        == 3));
    daemon.ok("suspend 2");
    assert_eq!(daemon.job_state(1), "queued");
    assert_eq!(daemon.job_state(2), "held");

    daemon.kill_hard();
    daemon.start_again();
    // The scruns reattach within a few tries; until then their jobs wait
    // for them (held).
    assert!(
        wait_until(Duration::from_secs(10), || daemon
            .log()
            .matches("reattached")
            .count()
            >= 2),
        "{}",
        daemon.log()
    );
    assert_eq!(daemon.job_state(1), "queued", "{}", daemon.log());
    assert_eq!(daemon.job_state(2), "held", "{}", daemon.log());
    daemon.ok("queue 1 activate");
    daemon.ok("resume 2");
    queued.wait_lines("queued-ran", 1);
    held.wait_lines("held-ran", 1);
    let (status, stderr) = queued.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let (status, stderr) = held.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let history = history(&daemon);
    assert_eq!(history.len(), 2, "{history:?}");
    assert!(
        history
            .iter()
            .all(|(_, state, exit, _)| state == "done" && *exit == 0),
        "{history:?}"
    );
}

/// A scrun whose daemon does not come back within `-reattach=` says so
/// and exits 69; the job is killed when a daemon returns, and recorded.
#[test]
fn a_scrun_whose_daemon_does_not_come_back_gives_up() {
    let mut daemon = Daemon::builder().hosts("h0 cpus=0\n").start();
    daemon.ok("queue 1 deactivate");
    let mut job = daemon.spawn(&["-priority=1,reattach=1s", "true"]);
    assert!(wait_until(Duration::from_secs(10), || daemon.job_state(1) == "queued"));
    daemon.kill_hard();
    let (status, stderr) = job.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(69), "{stderr}");
    assert!(
        stderr.contains("scored did not come back within 1s") && stderr.contains("job 1"),
        "{stderr}"
    );
}

/// The processes of a running job die with a killed scored: the new
/// scored records the job as lost with the reason, and its scrun, once
/// reattached, says so and exits non-zero; no process of it is left.
#[test]
fn a_running_job_lost_with_scored_is_told_so() {
    let mut daemon = Daemon::builder().hosts("h0 cpus=0\n").start();
    let mut job = daemon.spawn(&["sh", "-c", "echo started; exec sleep 60"]);
    job.wait_lines("started", 1);
    let pids = daemon.wait_job_pids(1, 1);
    daemon.kill_hard();
    daemon.start_again();
    let (status, stderr) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(137), "{stderr}");
    assert_eq!(
        stderr,
        "scrun: job 1 lost: scored was killed and the job's processes with it\n"
    );
    assert!(
        wait_until(Duration::from_secs(10), || pids
            .iter()
            .all(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())),
        "a process of the lost job is left"
    );
    let history = history(&daemon);
    assert_eq!(history.len(), 1, "{history:?}");
    let (id, state, _, reason) = &history[0];
    assert_eq!((*id, state.as_str()), (1, "killed"), "{history:?}");
    assert!(reason.starts_with("lost: scored was killed"), "{history:?}");
}

/// A queued job with a pseudo-terminal (`-pty`) survives a kill -9 of
/// scored: its scrun keeps the terminal, sends the slave again when it
/// reattaches, and the job, once run, has it as its terminal and ends
/// with its status.
#[test]
fn a_queued_pty_job_survives_a_kill_of_scored() {
    let mut daemon = Daemon::builder().hosts("h0 cpus=0\n").start();
    daemon.ok("queue 1 deactivate");
    let mut job = daemon.spawn(&[
        "-priority=1,pty",
        "sh",
        "-c",
        "tty; test -t 0 && echo stdin-is-tty; exit 5",
    ]);
    assert!(wait_until(Duration::from_secs(10), || daemon.job_state(1) == "queued"));
    daemon.kill_hard();
    daemon.start_again();
    assert!(
        wait_until(Duration::from_secs(10), || daemon
            .log()
            .contains("its scrun reattached")),
        "{}",
        daemon.log()
    );
    daemon.ok("queue 1 activate");
    let out = job.wait_lines("", 2).join("\n");
    let (status, stderr) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(5), "{stderr}");
    assert!(
        out.contains("/dev/pts/") && out.contains("stdin-is-tty"),
        "{out}"
    );
}
