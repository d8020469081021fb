//! Arrays of batch jobs: 10,000 elements of `true` submitted by one
//! `scrun -batch -array=` to a daemon on the default hosts (one per CPU,
//! journal on), as a user runs it: the time `scrun` takes to submit, the
//! elements finished per second from submission to the last end, and the
//! daemon's resident memory before and after (and at its peak); against
//! sequential interactive `scrun true` jobs in the same run, and the figure
//! of Slurm's `sbatch` measured on this kind of machine. The CPU time each
//! job costs (the daemon's own, and its children's: the zygote, the
//! keepers and the ranks they reaped) does not depend on what else the
//! machine runs, as the rates do.

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

/// The fields of `/proc/PID/stat` after the command name.
fn stat_fields(pid: u32) -> Vec<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .map(|field| field.parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default()
}

/// The CPU time of the daemon (seconds): its own; and that of its
/// children, reaped (`/proc/PID/stat` cutime + cstime) or alive (each
/// one's own and reaped children's time: the zygote, and the keepers that
/// outlive their jobs, idle for the next, with the ranks they reaped).
fn cpu_seconds(daemon: &Daemon) -> (f64, f64) {
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    // Fields 14 to 17 of proc(5), counted from field 3 after the name.
    let ticks =
        |fields: &[u64], from: usize| fields.get(from..from + 2).map_or(0, |two| two[0] + two[1]);
    let own = stat_fields(daemon.pid());
    let live: u64 = daemon
        .all_children()
        .into_iter()
        .map(|child| {
            let fields = stat_fields(child as u32);
            ticks(&fields, 11) + ticks(&fields, 13)
        })
        .sum();
    (
        ticks(&own, 11) as f64 / hz,
        (ticks(&own, 13) + live) as f64 / hz,
    )
}

/// CPU time per job, in ms, of the daemon and of its children, between two
/// readings of [`cpu_seconds`].
fn cpu_per_job(before: (f64, f64), after: (f64, f64), jobs: u64) -> (f64, f64) {
    let per = |from: f64, to: f64| (to - from).max(0.0) * 1e3 / jobs as f64;
    (per(before.0, after.0), per(before.1, after.1))
}

/// What one run measured.
struct Measured {
    /// Seconds to submit (0 for sequential jobs).
    submitted: f64,
    /// Jobs finished per second.
    rate: f64,
    /// The daemon's CPU time per job, and its children's (ms).
    cpu: (f64, f64),
    /// The daemon's RSS growth (MiB), after and at its peak.
    growth: (f64, f64),
}

/// Whether the daemon holds no job: none admitted, none waiting.
fn idle(daemon: &Daemon) -> bool {
    let status = daemon.json("status");
    let jobs = &status["jobs"];
    ["running", "stopped", "queued", "held", "ending", "waiting"]
        .iter()
        .all(|state| jobs[*state].as_u64().unwrap_or(0) == 0)
}

/// One array of `n` elements of `true` on a fresh daemon.
fn one_array(n: u64) -> Measured {
    let daemon = Daemon::builder().log("scored=warn").start();
    // Warm: a few jobs, so that what is measured is the array's own cost.
    for _ in 0..5 {
        assert_eq!(code(&daemon.run(&["true"])), Some(0));
    }
    let before = rss_kib(daemon.pid());
    let cpu_before = cpu_seconds(&daemon);
    let array = format!("-array=1-{n}");
    let start = Instant::now();
    let output = daemon.run(&["-batch", &array, "-output=/dev/null", "true"]);
    let submitted = start.elapsed().as_secs_f64();
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    // The array's end is heard as a user waits for it: an interactive job
    // depending on all of it, which adds one `true` and no polling (a
    // `status` asked every few ms through `sc_console` would take a CPU
    // share from the array it measures).
    let first = stdout(&output).trim().to_string();
    let after = daemon.run(&[&format!("-afterany={first}"), "true"]);
    assert_eq!(code(&after), Some(0), "{}", stderr(&after));
    let total = start.elapsed().as_secs_f64();
    assert!(
        wait_until(Duration::from_secs(60), || idle(&daemon)),
        "the array did not finish"
    );
    let cpu_after = cpu_seconds(&daemon);
    let after = rss_kib(daemon.pid());
    let peak = hwm_kib(daemon.pid());
    let mib = |kib: u64| kib.saturating_sub(before) as f64 / 1024.0;
    Measured {
        submitted,
        rate: n as f64 / total,
        cpu: cpu_per_job(cpu_before, cpu_after, n),
        growth: (mib(after), mib(peak)),
    }
}

/// `n` interactive `scrun true` one after the other.
fn sequential(n: u64) -> Measured {
    let daemon = Daemon::builder().log("scored=warn").start();
    for _ in 0..5 {
        assert_eq!(code(&daemon.run(&["true"])), Some(0));
    }
    let cpu_before = cpu_seconds(&daemon);
    let start = Instant::now();
    for _ in 0..n {
        assert_eq!(code(&daemon.run(&["true"])), Some(0));
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    Measured {
        submitted: 0.0,
        rate,
        cpu: cpu_per_job(cpu_before, cpu_seconds(&daemon), n),
        growth: (0.0, 0.0),
    }
}

pub(crate) fn batch(rows: &mut Vec<Row>) {
    let n = scaled(10_000, 1_000);
    let repeats = scaled(3, 1);
    let mut arrays = Vec::new();
    let mut sequentials = Vec::new();
    for _ in 0..repeats {
        // Interleaved with the arrays, so that both see the same machine.
        sequentials.push(sequential(scaled(300, 50)));
        arrays.push(one_array(n));
    }
    let of = |runs: &[Measured], value: fn(&Measured) -> f64| {
        median(&mut runs.iter().map(value).collect::<Vec<_>>())
    };
    let sequential_rate = of(&sequentials, |m| m.rate);
    let rate = of(&arrays, |m| m.rate);
    rows.push(row(
        &format!("submission of an array of {n} `true` (scrun -batch -array=1-{n})"),
        format!("{:.3} s", of(&arrays, |m| m.submitted)),
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
    let (daemon, children) = (of(&arrays, |m| m.cpu.0), of(&arrays, |m| m.cpu.1));
    let (sequential_daemon, sequential_children) =
        (of(&sequentials, |m| m.cpu.0), of(&sequentials, |m| m.cpu.1));
    rows.push(row(
        "CPU time per job: the daemon; its children (keepers and ranks)",
        format!("{daemon:.2} ms; {children:.2} ms (array element)"),
        format!("{sequential_daemon:.2} ms; {sequential_children:.2} ms (sequential scrun true)"),
        format!(
            "{:.2}×; {:.2}×",
            daemon / sequential_daemon,
            children / sequential_children
        ),
        "-",
    ));
    rows.push(row(
        &format!("daemon RSS growth through an array of {n} (after; at its peak)"),
        format!(
            "{:.1} MB; {:.1} MB",
            of(&arrays, |m| m.growth.0),
            of(&arrays, |m| m.growth.1)
        ),
        "-".into(),
        "-".into(),
        "under 20 MB",
    ));
}
