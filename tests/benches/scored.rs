//! The benchmark: `cargo bench -p scored-tests` starts real daemons and
//! prints one Markdown table, each figure a median over repeated runs next
//! to a baseline measured in the same run and the ratio between them.
//!
//! 1. Gang switch latency (first SIGSTOP to last SIGCONT) as `status`
//!    reports it, two CPU-bound jobs of 1×1, 16×1, 4×4 and 16×4 processes
//!    (hosts × per host) under a scored run as users run it, against a
//!    program that stops, confirms and continues the same processes itself
//!    at the same priority, in rounds that take turns; the phases of
//!    scored's switches; and (`freezer`) the freezer as the stop.
//!    (`guard`, only when named) Fails when the switch leaves 1.2× the
//!    hand-made one in some layout, three measurements running.
//!    (`descendants`) The same with hundreds and thousands of idle
//!    processes in one job's ranks' groups: the switch, and what they
//!    cost the daemon (descriptors, CPU time, root's `status`).
//! 2. Launch latency of `scrun true` (1, 2 and 16 processes, the latter
//!    two with `-mpi=none`) against fork+exec+wait, rounds taking turns;
//!    and preemption: a queue-0 `scrun` started until the queue-2 job's
//!    rank is seen stopped.
//! 3. Fairness: k = 2, 4 CPU-bound gang jobs on the same hosts for 10 s.
//! 4. Slice overhead: the same work by two gang jobs at 10, 50, 100 and
//!    500 ms slices, against running it back to back without scored.
//! 5. Scale: admission throughput into a deactivated queue, daemon memory
//!    per admitted job at 1,000 and 10,000 jobs, and the time of one
//!    scheduling decision at 10,000 jobs on 256 hosts (pure core).
//!
//! 6. A large launch: console latency, and the switches of a gang pair on
//!    other hosts, while a job of 3,000 processes starts on 3,000 hosts,
//!    against the same before the launch.
//! 7. In-place restart with 100 running gang jobs, 20 stopped and 1,000
//!    queued, each with its client connection: time from the `restart`
//!    request to the new image's answer (against a `status` round trip),
//!    jobs lost, connections dropped, and how soon the gang rotation goes
//!    on; and the job journal's cost to launching and switching (the same
//!    measurements with `--no-journal`, in the same run).
//!
//! 8. The checkpoint of the core kept before each event (to restart from
//!    the state before an event that panicked): its cost per event in the
//!    pure core with 100 running and 1,000 queued jobs, against the
//!    serialized restart snapshot of the same state; and the gang switch
//!    latency with that load and the launch latency, with and without the
//!    checkpoint (`SCORED_NO_CHECKPOINT=1`), in the same run.
//!
//! 9. What may block the loop: `history` and `job ID` on a
//!    journal of the default size, `status` while other clients flood
//!    them, the journal's sync, a user-name lookup, and start-up on that
//!    journal.
//!
//! 10. What gang scheduling is for: two MPI jobs of busy-polling ranks
//!     (MPICH and OpenMPI: allreduce, ping-pong; NetPIPE), each round one
//!     alone then both (turned each round), under the kernel and under
//!     scored at 100 and 10 ms slices, every job's status and output
//!     checked; and the launch cost of PMI, and of PMI with PMIx, against
//!     `-mpi=none`.
//!
//! 11. What a plain user can make a root scored spend: memory through
//!     floods of oversize submissions and queued environments, root's
//!     `status` while the user floods the console or has 300,000 files
//!     removed (needs root, for the test users).
//!
//! 12. Arrays of batch jobs: 10,000 elements of `true` by one
//!     `scrun -batch -array=` on the default hosts: the time to submit,
//!     elements finished per second and the daemon's memory, against
//!     sequential `scrun true` in the same run and Slurm's `sbatch`.
//!
//! 13. Takeover after a kill -9 of scored: 100 running and 20 stopped
//!     gang jobs, a new scored on the same state directory, timed from
//!     its start to its takeover (by its log) and to its first switch (in
//!     /proc), against an in-place restart of the same jobs in the same
//!     rounds.
//!
//! `BENCH_QUICK=1` shortens every run (for a smoke test of the benchmark);
//! `BENCH_ONLY=switch,freezer,descendants,launch,fairness,slices,scale,decision,biglaunch,restart,journal,checkpoint,blocking,mpi,attacks,batch,takeover`
//! runs only those sections. `SCORED_TEST_BIN_DIR=DIR` runs the daemons of
//! DIR (an earlier build) instead of this build's, to compare.
//!
//! This file holds `main`, the table and the helpers the sections share;
//! each section is a file of `sections/`.

use scored_tests::*;
use sections::{
    attacks::attacks,
    batch::batch,
    blocking::blocking,
    descendants::descendants,
    fairness::{fairness, slice_overhead},
    launch::{big_launch, launch},
    mpi::mpi,
    restart::{checkpoint_cost, journal_cost, restart_under_load},
    scale::{decision_time, machine, scale},
    switch::{guard, hand_switches, layout, switch, switch_freezer, Freezer, Groups},
    takeover::takeover,
};

mod sections {
    pub mod attacks;
    pub mod batch;
    pub mod blocking;
    pub mod descendants;
    pub mod fairness;
    pub mod launch;
    pub mod mpi;
    pub mod restart;
    pub mod scale;
    pub mod switch;
    pub mod takeover;
}

/// Counts the bytes the benchmark process holds, to tell how much of the
/// daemon's memory per job is the scheduling core's.
struct Counting;

static HELD: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged and only
// keeps a count of the bytes it holds.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        HELD.fetch_add(layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        HELD.fetch_sub(layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn held() -> isize {
    HELD.load(std::sync::atomic::Ordering::Relaxed)
}

fn wanted(section: &str) -> bool {
    std::env::var("BENCH_ONLY").is_err() || asked(section)
}

/// Whether `BENCH_ONLY` names the section (the guard runs only then).
fn asked(section: &str) -> bool {
    std::env::var("BENCH_ONLY").is_ok_and(|list| list.split(',').any(|item| item.trim() == section))
}

fn quick() -> bool {
    std::env::var_os("BENCH_QUICK").is_some()
}

fn scaled(full: u64, quick_value: u64) -> u64 {
    if quick() {
        quick_value
    } else {
        full
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    values[values.len() / 2]
}

struct Row {
    what: String,
    value: String,
    baseline: String,
    ratio: String,
    target: String,
}

fn row(what: &str, value: String, baseline: String, ratio: String, target: &str) -> Row {
    eprintln!("  {what}: {value} (baseline {baseline}, {ratio})");
    Row {
        what: what.into(),
        value,
        baseline,
        ratio,
        target: target.into(),
    }
}

fn ms(seconds: f64) -> String {
    format!("{:.3} ms", seconds * 1e3)
}

fn online_cpus() -> Vec<u32> {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    scored_proto::units::CpuSet::parse(online.trim())
        .map(|set| set.cpus().to_vec())
        .unwrap_or_else(|_| vec![0])
}

fn all_cpus() -> String {
    scored_proto::units::CpuSet::from_cpus(online_cpus()).to_string()
}

/// `n_hosts` hosts on all CPUs, `cores` processes each.
fn hosts_file(n_hosts: u32, cores: u32) -> String {
    (0..n_hosts)
        .map(|idx| format!("h{idx} cpus={} cores={cores}\n", all_cpus()))
        .collect()
}

/// Two hosts, one per CPU where the machine has two.
fn pinned_hosts() -> String {
    let cpus = online_cpus();
    let second = cpus.get(1).copied().unwrap_or(cpus[0]);
    format!("h0 cpus={}\nh1 cpus={second}\n", cpus[0])
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn job_cpu_ticks(daemon: &Daemon, job: u64) -> u64 {
    daemon
        .job_pids(job)
        .iter()
        .filter_map(|pid| proc_stat(*pid))
        .map(|stat| stat.cpu_ticks)
        .sum()
}

// ----- 1. switch latency -----

// ----- 2. launch -----

// ----- 6. a large launch -----

// ----- 3. fairness -----

// ----- 4. slice overhead -----

// ----- 5. scale -----

// ----- 6. restart and journal -----

// ----- 8. the checkpoint before each event -----

// ----- 9. what may block the loop -----

fn main() {
    // `cargo bench` passes `--bench`; there are no options of our own.
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    eprintln!("benchmarking on {}", machine());
    let mut rows = Vec::new();
    if wanted("switch") {
        eprintln!("1. switch latency");
        switch(&mut rows);
    }
    if asked("guard") {
        eprintln!("1. the guard of the switch's cost");
        guard(&mut rows);
    }
    if wanted("freezer") {
        // The freezer as the switch's stop: measured to choose between
        // it and SIGSTOP.
        eprintln!("1. the freezer's switch");
        for n in [1u32, 16, 64] {
            let (n_hosts, per_host) = layout(n);
            let baseline = median(&mut hand_switches(
                n_hosts,
                per_host,
                Groups::PerHost,
                scaled(100, 30) as usize,
            ));
            for (freezer, name) in [
                (Freezer::V1, "cgroup v1 freezer.state"),
                (Freezer::V2, "cgroup v2 cgroup.freeze + cgroup.events"),
            ] {
                let seconds = switch_freezer(n, freezer);
                rows.push(row(
                    &format!("freezer switch ({name}), 2 sets of {n}"),
                    seconds.map_or_else(|| "not available here".into(), ms),
                    format!("{} (killpg+waitpid+killpg)", ms(baseline)),
                    seconds.map_or_else(|| "-".into(), |value| format!("{:.2}×", value / baseline)),
                    "for comparison",
                ));
            }
        }
    }
    if wanted("descendants") {
        eprintln!("1. idle descendants and the switch");
        descendants(&mut rows);
    }
    if wanted("launch") {
        eprintln!("2. launch latency");
        launch(&mut rows);
    }
    if wanted("fairness") {
        eprintln!("3. fairness");
        fairness(&mut rows);
    }
    if wanted("slices") {
        eprintln!("4. slice overhead");
        slice_overhead(&mut rows);
    }
    if wanted("scale") {
        eprintln!("5. scale");
        scale(&mut rows);
    } else if wanted("decision") {
        // The pure core's decision alone, without the daemons of `scale`.
        eprintln!("5. the decision at 10,000 jobs");
        decision_time(&mut rows);
    }
    if wanted("biglaunch") {
        eprintln!("6. a large launch");
        big_launch(&mut rows);
    }
    if wanted("restart") {
        eprintln!("7. in-place restart");
        restart_under_load(&mut rows);
    }
    if wanted("journal") {
        eprintln!("7. the job journal's cost");
        journal_cost(&mut rows);
    }
    if wanted("checkpoint") {
        eprintln!("8. the checkpoint before each event");
        checkpoint_cost(&mut rows);
    }
    if wanted("blocking") {
        eprintln!("9. what may block the loop");
        blocking(&mut rows);
    }
    if wanted("mpi") {
        eprintln!("10. MPI under gang scheduling");
        mpi(&mut rows);
    }
    if wanted("attacks") {
        eprintln!("11. what a plain user can make root's scored spend");
        attacks(&mut rows);
    }
    if wanted("batch") {
        eprintln!("12. arrays of batch jobs");
        batch(&mut rows);
    }
    if wanted("takeover") {
        eprintln!("13. takeover after a kill -9 of scored");
        takeover(&mut rows);
    }

    println!("Machine: {}\n", machine());
    println!("| measure | scored (median) | baseline (same run) | ratio | target |");
    println!("|---|---|---|---|---|");
    for row in rows {
        println!(
            "| {} | {} | {} | {} | {} |",
            row.what, row.value, row.baseline, row.ratio, row.target
        );
    }
}
