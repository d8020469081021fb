//! Arrays of batch jobs: 10,000 elements of `true` submitted by one
//! `scrun -batch -array=` to a daemon on the default hosts (one per CPU,
//! journal on), as a user runs it: the time `scrun` takes to submit, the
//! elements finished per second from submission to the last end, and the
//! daemon's resident memory before and after (and at its peak); against
//! sequential interactive `scrun true` jobs in the same run, and the figure
//! of Slurm's `sbatch` measured on this kind of machine.

use std::time::{Duration, Instant};

use crate::{median, row, rss_kib, scaled, Row};
use scored_tests::*;

/// Slurm's `sbatch` of one `true` after another to its end, on this kind of
/// machine (2 CPUs, slurmctld and slurmd local, default configuration).
const SBATCH_JOBS_PER_SECOND: f64 = 2.7;

/// The peak resident memory of process `pid`, in KiB.
fn hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Whether the daemon holds no job: none admitted, none waiting.
fn idle(daemon: &Daemon) -> bool {
    let status = daemon.json("status");
    let jobs = &status["jobs"];
    ["running", "stopped", "queued", "held", "ending", "waiting"]
        .iter()
        .all(|state| jobs[*state].as_u64().unwrap_or(0) == 0)
}

/// One array of `n` elements of `true` on a fresh daemon: seconds to
/// submit, elements finished per second, and the daemon's RSS (KiB)
/// before, after and at its peak.
fn one_array(n: u64) -> (f64, f64, u64, u64, u64) {
    let daemon = Daemon::builder().log("scored=warn").start();
    // Warm: a few jobs, so that what is measured is the array's own cost.
    for _ in 0..5 {
        assert_eq!(code(&daemon.run(&["true"])), Some(0));
    }
    let before = rss_kib(daemon.pid());
    let array = format!("-array=1-{n}");
    let start = Instant::now();
    let output = daemon.run(&["-batch", &array, "-output=/dev/null", "true"]);
    let submitted = start.elapsed().as_secs_f64();
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let done = wait_until(Duration::from_secs(3600), || idle(&daemon));
    assert!(done, "the array did not finish");
    let total = start.elapsed().as_secs_f64();
    let after = rss_kib(daemon.pid());
    let peak = hwm_kib(daemon.pid());
    (submitted, n as f64 / total, before, after, peak)
}

/// `n` interactive `scrun true` one after the other: jobs per second.
fn sequential(n: u64) -> f64 {
    let daemon = Daemon::builder().log("scored=warn").start();
    for _ in 0..5 {
        assert_eq!(code(&daemon.run(&["true"])), Some(0));
    }
    let start = Instant::now();
    for _ in 0..n {
        assert_eq!(code(&daemon.run(&["true"])), Some(0));
    }
    n as f64 / start.elapsed().as_secs_f64()
}

pub(crate) fn batch(rows: &mut Vec<Row>) {
    let n = scaled(10_000, 1_000);
    let repeats = scaled(3, 1);
    let mut submits = Vec::new();
    let mut rates = Vec::new();
    let mut sequential_rates = Vec::new();
    let mut growth = Vec::new();
    let mut peaks = Vec::new();
    for _ in 0..repeats {
        // Interleaved with the arrays, so that both see the same machine.
        sequential_rates.push(sequential(scaled(300, 50)));
        let (submitted, rate, before, after, peak) = one_array(n);
        submits.push(submitted);
        rates.push(rate);
        growth.push(after.saturating_sub(before) as f64 / 1024.0);
        peaks.push(peak.saturating_sub(before) as f64 / 1024.0);
    }
    let sequential_rate = median(&mut sequential_rates);
    let rate = median(&mut rates);
    rows.push(row(
        &format!("submission of an array of {n} `true` (scrun -batch -array=1-{n})"),
        format!("{:.3} s", median(&mut submits)),
        "-".into(),
        "-".into(),
        "under 1 s",
    ));
    rows.push(row(
        &format!("array elements finished per second ({n}, from submission to the last end)"),
        format!("{rate:.0} jobs/s"),
        format!(
            "{sequential_rate:.0} jobs/s (sequential scrun true); sbatch {SBATCH_JOBS_PER_SECOND} jobs/s"
        ),
        format!(
            "{:.1}× sequential, {:.0}× sbatch",
            rate / sequential_rate,
            rate / SBATCH_JOBS_PER_SECOND
        ),
        "at least 1,000 jobs/s",
    ));
    rows.push(row(
        &format!("daemon RSS growth through an array of {n} (after; at its peak)"),
        format!(
            "{:.1} MB; {:.1} MB",
            median(&mut growth),
            median(&mut peaks)
        ),
        "-".into(),
        "-".into(),
        "under 20 MB",
    ));
}
