//! What a job's idle descendants cost: two CPU-bound gang jobs of 4×4
//! ranks at 50 ms slices, each rank of the first having started idle
//! `sleep`s in its process group first (none, 20 and 188 a rank: 0, 320
//! and 3,008 in all), under a root scored with cgroups; the switch
//! latency `status` reports, the daemon's descriptors and CPU time, and
//! root's `status` round trip, against the same jobs without descendants
//! in the same run.

use std::time::{Duration, Instant};

use super::launch::console_latency;
use crate::{hosts_file, median, ms, row, scaled, Row};
use nix::sys::signal::Signal;
use scored_tests::*;

/// One run: the switch median, the daemon's descriptors, its CPU share
/// over the measured time, and root's `status` round trips (median, max).
struct Run {
    switch: f64,
    fds: usize,
    cpu: f64,
    status: (f64, f64),
}

fn run(sleeps_per_rank: u32, time: Duration) -> Run {
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts_file(4, 4))
        .timeslice("50ms")
        .start();
    let spin = format!("exec {} spin 0", testprog());
    let with_sleeps =
        format!("i=0; while [ $i -lt {sleeps_per_rank} ]; do sleep 600 & i=$((i+1)); done; {spin}");
    let mut jobs = vec![daemon.spawn(&["-nodes=4x4,priority=1", "sh", "-c", &with_sleeps])];
    // Job 1 is the one with sleeps before the other is submitted.
    assert!(
        wait_until(Duration::from_secs(60), || !daemon.job_pids(1).is_empty()),
        "the first job never started"
    );
    jobs.push(daemon.spawn(&["-nodes=4x4,priority=1", "sh", "-c", &spin]));
    let first = 16 * (1 + sleeps_per_rank as usize);
    assert!(
        wait_until(Duration::from_secs(600), || {
            daemon.job_pids(1).len() >= first && daemon.job_pids(2).len() >= 16
        }),
        "the jobs never had all their processes"
    );
    // The first switches after the sleeps started are left out.
    std::thread::sleep(Duration::from_secs(1));
    let ticks = |daemon: &Daemon| proc_stat(daemon.pid() as i32).map_or(0, |stat| stat.cpu_ticks);
    let (ticks_before, started) = (ticks(&daemon), Instant::now());
    let mut stream = std::os::unix::net::UnixStream::connect(&daemon.socket).expect("connect");
    let mut status = Vec::new();
    while started.elapsed() < time {
        status.push(console_latency(&mut stream));
        std::thread::sleep(Duration::from_millis(20));
    }
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let cpu = (ticks(&daemon) - ticks_before) as f64 / hz / started.elapsed().as_secs_f64();
    let fds = daemon.open_fds();
    let switch = daemon.json("status")["switch latency"]["median"]
        .as_f64()
        .unwrap_or(f64::NAN);
    for job in &jobs {
        job.signal(Signal::SIGINT);
    }
    for job in &mut jobs {
        job.wait(Duration::from_secs(60));
    }
    let max = status.iter().copied().fold(0.0, f64::max);
    Run {
        switch,
        fds,
        cpu,
        status: (median(&mut status), max),
    }
}

pub(crate) fn descendants(rows: &mut Vec<Row>) {
    let time = Duration::from_secs(scaled(6, 3));
    for sleeps in [20u32, 188] {
        let mut with = Vec::new();
        let mut without = Vec::new();
        for round in 0..scaled(3, 1) {
            if round % 2 == 1 {
                without.push(run(0, time));
            }
            with.push(run(sleeps, time));
            if round % 2 == 0 {
                without.push(run(0, time));
            }
        }
        let pick = |runs: &[Run], get: fn(&Run) -> f64| {
            median(&mut runs.iter().map(get).collect::<Vec<_>>())
        };
        let (switch, switch_base) = (pick(&with, |r| r.switch), pick(&without, |r| r.switch));
        rows.push(row(
            &format!(
                "gang switch, 4×4 ranks, the first job's ranks with {} idle `sleep`s in all",
                16 * sleeps
            ),
            format!(
                "{} (descriptors {}, daemon CPU {:.1} %, `status` {} median, {} max)",
                ms(switch),
                pick(&with, |r| r.fds as f64),
                pick(&with, |r| r.cpu) * 100.0,
                ms(pick(&with, |r| r.status.0)),
                ms(with.iter().map(|r| r.status.1).fold(0.0, f64::max)),
            ),
            format!(
                "{} without them (descriptors {}, CPU {:.1} %, `status` {})",
                ms(switch_base),
                pick(&without, |r| r.fds as f64),
                pick(&without, |r| r.cpu) * 100.0,
                ms(pick(&without, |r| r.status.0)),
            ),
            format!("{:.2}×", switch / switch_base),
            "nothing measurable; < 1,000 descriptors, < 10 % CPU, `status` < 100 ms",
        ));
    }
}
