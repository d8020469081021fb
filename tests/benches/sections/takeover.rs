//! Taking jobs over after a kill -9 of scored: 120 one-process gang batch
//! jobs on 100 hosts (100 running, 20 switched out at 200 ms slices), the
//! daemon killed with SIGKILL and a new one started on the same state
//! directory. Timed from the new daemon's start to the end of its
//! takeover of the keepers (by its log) and to its first switch, as the
//! jobs show it in /proc (a job that was switched out at the kill runs
//! again); against an in-place `restart` of the same daemon and jobs in
//! the same rounds, from the request to the new image's answer and to the
//! first switch after it.

use std::time::{Duration, Instant};

use super::restart::console_raw;
use crate::{hosts_file, median, ms, row, scaled, Row};
use scored_tests::*;

/// The jobs' processes that are stopped (state T) now.
fn stopped(pids: &[i32]) -> Vec<i32> {
    pids.iter()
        .copied()
        .filter(|pid| proc_stat(*pid).is_some_and(|stat| stat.state == 'T'))
        .collect()
}

/// Waits until one of `pids` (stopped when the clock started) runs again:
/// a switch; the time it was seen.
fn first_continue(pids: &[i32]) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if pids
            .iter()
            .any(|pid| proc_stat(*pid).is_some_and(|stat| stat.state != 'T'))
        {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "no switch within 30 s");
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// The time of day (UTC, seconds) of the last line of `log` that
/// contains `what`.
fn logged_at(log: &str, what: &str) -> Option<f64> {
    let line = log.lines().rfind(|line| line.contains(what))?;
    let time = line.split_whitespace().next()?.split('T').nth(1)?;
    let mut parts = time.trim_end_matches('Z').split(':');
    let hours: f64 = parts.next()?.parse().ok()?;
    let minutes: f64 = parts.next()?.parse().ok()?;
    let seconds: f64 = parts.next()?.parse().ok()?;
    Some(hours * 3600.0 + minutes * 60.0 + seconds)
}

/// The time of day now (UTC, seconds), as the log writes it.
fn time_of_day() -> f64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch");
    since.as_secs_f64() % 86_400.0
}

/// Running and stopped jobs, as `status` counts them.
fn counts(daemon: &Daemon) -> (u64, u64) {
    let status = daemon.json("status");
    let jobs = &status["jobs"];
    (
        jobs["running"].as_u64().unwrap_or(0),
        jobs["stopped"].as_u64().unwrap_or(0),
    )
}

pub(crate) fn takeover(rows: &mut Vec<Row>) {
    let mut daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts_file(100, 1))
        .timeslice("200ms")
        .start();
    for _ in 0..120 {
        let output = daemon.run(&["-batch,output=/dev/null", "sleep", "3600"]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let settled =
        |daemon: &Daemon| wait_until(Duration::from_secs(60), || counts(daemon) == (100, 20));
    assert!(
        settled(&daemon),
        "the jobs did not all start: {:?}",
        counts(&daemon)
    );
    // A rank switched out before its exec shows the job's environment
    // only once it has run again.
    let mut pids = Vec::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            pids = daemon.all_job_pids();
            pids.len() == 120
        }),
        "{} job processes",
        pids.len()
    );
    let rounds = scaled(5, 2);
    let mut answers = Vec::new();
    let mut restarts = Vec::new();
    let mut taken = Vec::new();
    let mut takeovers = Vec::new();
    for _ in 0..rounds {
        // In place: the request to the first switch after it.
        let out = stopped(&pids);
        let start = Instant::now();
        let (answer, reply) = console_raw(&daemon, "restart");
        assert!(reply.contains("restarted in place"), "{reply}");
        answers.push(answer);
        restarts.push(first_continue(&out).duration_since(start).as_secs_f64());
        assert!(settled(&daemon), "after a restart: {:?}", counts(&daemon));
        // A kill -9: the jobs keep their states while no daemon runs.
        daemon.kill_hard();
        let out = stopped(&pids);
        assert!(!out.is_empty(), "no job was switched out at the kill");
        let start = Instant::now();
        let started_at = time_of_day();
        daemon.start_again();
        takeovers.push(first_continue(&out).duration_since(start).as_secs_f64());
        assert!(settled(&daemon), "after a takeover: {:?}", counts(&daemon));
        let log = daemon.log();
        let done = logged_at(&log, "took over the keepers of the jobs").expect("logged");
        assert!(
            log.lines()
                .rfind(|line| line.contains("took over the keepers of the jobs"))
                .is_some_and(|line| line.contains("jobs=120 of=120")),
            "not every job was taken over"
        );
        taken.push(done - started_at);
    }
    let alive = pids
        .iter()
        .filter(|pid| proc_stat(**pid).is_some_and(|stat| stat.state != 'Z'))
        .count();
    let history = daemon.ok("history");
    let lost = history.lines().filter(|line| line.contains("lost")).count();
    let worst = taken.iter().cloned().fold(0.0, f64::max);
    let taken = median(&mut taken);
    let answer = median(&mut answers);
    rows.push(row(
        "takeover after a kill -9, 100 running + 20 stopped gang jobs: new scored's start to the end of its takeover (its log)",
        format!("{} (max {}, {rounds} kills)", ms(taken), ms(worst)),
        format!("{} (in-place restart: request to answer)", ms(answer)),
        format!("{:.2}×", taken / answer),
        "-",
    ));
    let takeover = median(&mut takeovers);
    let restart = median(&mut restarts);
    rows.push(row(
        "the same: new scored's start to its first switch (/proc)",
        ms(takeover),
        format!(
            "{} (in-place restart: request to first switch)",
            ms(restart)
        ),
        format!("{:.2}×", takeover / restart),
        "within a slice (200 ms)",
    ));
    rows.push(row(
        "job processes alive / jobs recorded lost over those kills",
        format!("{alive} / {lost}"),
        "120 jobs".into(),
        "-".into(),
        "120 / 0",
    ));
}
