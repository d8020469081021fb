//! Fairness between gang jobs, and the cost of the slice length against
//! the same work run back to back.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{job_cpu_ticks, median, online_cpus, pinned_hosts, quick, row, scaled, Row};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use scored_tests::*;

pub(crate) fn fairness(rows: &mut Vec<Row>) {
    for k in [2u64, 4] {
        let daemon = Daemon::builder()
            .log("scored=info")
            .hosts(&pinned_hosts())
            .timeslice("100ms")
            .start();
        let mut jobs: Vec<Job> = (0..k)
            .map(|_| daemon.spawn(&["-nodes=2,priority=1", &testprog(), "spin", "0"]))
            .collect();
        for job in &mut jobs {
            job.wait_pids(2);
        }
        let before: Vec<u64> = (1..=k).map(|job| job_cpu_ticks(&daemon, job)).collect();
        std::thread::sleep(Duration::from_secs(scaled(10, 3)));
        let used: Vec<f64> = (1..=k)
            .zip(&before)
            .map(|(job, start)| (job_cpu_ticks(&daemon, job) - start) as f64)
            .collect();
        let total: f64 = used.iter().sum();
        let ideal = 1.0 / k as f64;
        let worst = used
            .iter()
            .map(|cpu| (cpu / total - ideal).abs())
            .fold(0.0, f64::max);
        let shares: Vec<String> = used
            .iter()
            .map(|cpu| format!("{:.1}%", 100.0 * cpu / total))
            .collect();
        rows.push(row(
            &format!("fairness, {k} gang jobs, 100 ms slices, 10 s"),
            shares.join(" / "),
            format!("{:.1}% each", 100.0 * ideal),
            format!("worst {:.1} points off", 100.0 * worst),
            "within ±3 points",
        ));
        for job in &jobs {
            job.signal(Signal::SIGINT);
        }
        for job in &mut jobs {
            job.wait(Duration::from_secs(30));
        }
    }
}

pub(crate) fn work_process(millions: u64, cpu: Option<u32>) -> Child {
    let mut command = Command::new(testprog());
    command
        .args(["work", &millions.to_string()])
        .stdout(Stdio::null());
    if let Some(cpu) = cpu {
        let mut mask = nix::sched::CpuSet::new();
        let _ = mask.set(cpu as usize);
        // SAFETY: sched_setaffinity is a plain system call on data built
        // before the fork; nothing is allocated or locked in the child.
        unsafe {
            command.pre_exec(move || {
                nix::sched::sched_setaffinity(Pid::from_raw(0), &mask).map_err(Into::into)
            });
        }
    }
    command.spawn().expect("work process")
}

pub(crate) fn slice_overhead(rows: &mut Vec<Row>) {
    // Everything on one CPU: this machine's two CPUs run at different
    // speeds and slow each other down when both are busy (SMT siblings),
    // which would make the comparison about CPU placement, not switching.
    let cpu = online_cpus()[0];
    let one_cpu_host = format!("h0 cpus={cpu} cores=2\n");
    // Calibrate: about 2 s (0.5 s quick) of work per job when alone.
    // The fastest of three probes: this machine's speed wanders, and one
    // slow probe would make every run too short to measure.
    let probe = 200;
    let per_million = (0..3)
        .map(|_| {
            let start = Instant::now();
            let _ = work_process(probe, Some(cpu)).wait();
            start.elapsed().as_secs_f64() / probe as f64
        })
        .fold(f64::INFINITY, f64::min);
    // Two processes of a job share the CPU: each does half of the job's work.
    let millions = ((if quick() { 0.25 } else { 1.0 }) / per_million)
        .round()
        .max(1.0) as u64;
    eprintln!(
        "  calibration: {probe} million iterations in {:.3} s; {millions} million per process",
        per_million * probe as f64
    );
    // Baseline and every slice length take turns in each round, so that
    // drift in the machine's speed affects them alike.
    let reps = scaled(5, 1);
    let slices = ["10ms", "50ms", "100ms", "500ms"];
    let mut base = Vec::new();
    let mut walls: Vec<Vec<f64>> = vec![Vec::new(); slices.len()];
    for _ in 0..reps {
        let start = Instant::now();
        for _job in 0..2 {
            let children: Vec<Child> = (0..2).map(|_| work_process(millions, Some(cpu))).collect();
            for mut child in children {
                let _ = child.wait();
            }
        }
        base.push(start.elapsed().as_secs_f64());
        for (idx, slice) in slices.iter().enumerate() {
            let daemon = Daemon::builder()
                .log("scored=info")
                .hosts(&one_cpu_host)
                .timeslice(slice)
                .start();
            let work = millions.to_string();
            let start = Instant::now();
            let mut jobs: Vec<Job> = (0..2)
                .map(|_| daemon.spawn(&["-nodes=2,priority=1", &testprog(), "work", &work]))
                .collect();
            for job in &mut jobs {
                let (status, message) = job.wait(Duration::from_secs(600));
                assert!(status.success(), "{message}");
            }
            walls[idx].push(start.elapsed().as_secs_f64());
        }
    }
    let base = median(&mut base);
    let medians: Vec<f64> = walls.iter_mut().map(|wall| median(wall)).collect();
    // The 500 ms run switches only a few times: against it, what remains
    // is the cost of switching alone (both go through scrun and scored).
    let long = medians[slices.len() - 1];
    for (slice, wall) in slices.iter().zip(&medians) {
        rows.push(row(
            &format!("2 gang jobs × 2 processes on one CPU, {slice} slices"),
            format!("{wall:.3} s"),
            format!("{base:.3} s back to back without scored; {long:.3} s at 500 ms slices"),
            format!(
                "{:+.1}% time vs back to back; {:+.1}% vs 500 ms slices",
                100.0 * (wall / base - 1.0),
                100.0 * (wall / long - 1.0)
            ),
            if *slice == "10ms" {
                "under 2% at 10 ms"
            } else {
                ""
            },
        ));
    }
}
