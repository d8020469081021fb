//! The benchmark: `cargo bench -p scored-tests` starts real daemons and
//! prints one Markdown table, each figure a median over repeated runs next
//! to a baseline measured in the same run and the ratio between them.
//!
//! 1. Gang switch latency (first SIGSTOP to last SIGCONT, as scored measures
//!    it) for jobs of 1, 16 and 64 processes, against a program that stops,
//!    confirms and continues the same process groups itself at the same
//!    priority.
//! 2. Launch latency of `scrun true` (1 and 16 processes) against
//!    fork+exec+wait.
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
//! `BENCH_QUICK=1` shortens every run (for a smoke test of the benchmark);
//! `BENCH_ONLY=switch,launch,fairness,slices,scale,biglaunch,restart,journal,checkpoint,blocking`
//! runs only those sections. `SCORED_TEST_BIN_DIR=DIR` runs the daemons of
//! DIR (an earlier build) instead of this build's, to compare.

use std::ffi::OsString;
use std::io::{IoSlice, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use scored_tests::*;

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
    match std::env::var("BENCH_ONLY") {
        Ok(list) => list.split(',').any(|item| item.trim() == section),
        Err(_) => true,
    }
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
    scored::units::CpuSet::parse(online.trim())
        .map(|set| set.cpus().to_vec())
        .unwrap_or_else(|_| vec![0])
}

fn all_cpus() -> String {
    scored::units::CpuSet::from_cpus(online_cpus()).to_string()
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

fn layout(n: u32) -> (u32, u32) {
    match n {
        1 => (1, 1),
        n if n <= 16 => (n.div_ceil(4), 4),
        n => (n / 4, 4),
    }
}

fn switch_scored(n: u32) -> (f64, f64, u64) {
    switch_scored_with(n, &[])
}

fn switch_scored_with(n: u32, args: &[&str]) -> (f64, f64, u64) {
    let (n_hosts, cores) = layout(n);
    let mut builder = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts_file(n_hosts, cores))
        .timeslice("50ms");
    for arg in args {
        builder = builder.arg(arg);
    }
    let daemon = builder.start();
    let nodes = format!("-nodes={n},priority=1");
    let mut jobs: Vec<Job> = (0..2)
        .map(|_| daemon.spawn(&[&nodes, &testprog(), "spin", "0"]))
        .collect();
    for job in &mut jobs {
        job.wait_pids(n as usize);
    }
    std::thread::sleep(Duration::from_secs(scaled(6, 2)));
    let status = daemon.json("status");
    let latency = &status["switch latency"];
    let result = (
        latency["median"].as_f64().unwrap_or(f64::NAN),
        latency["max"].as_f64().unwrap_or(f64::NAN),
        status["switches"].as_u64().unwrap_or(0),
    );
    for job in &jobs {
        job.signal(Signal::SIGINT);
    }
    for job in &mut jobs {
        job.wait(Duration::from_secs(30));
    }
    result
}

/// The same switch done by hand: `n` spinners in groups of `cores`, two
/// sets; stop one set (killpg), confirm with waitpid(WUNTRACED), continue
/// the other (killpg), at SCHED_FIFO priority 10 like scored.
fn switch_baseline(n: u32) -> f64 {
    switch_baseline_with(n, Groups::PerHost)
}

/// How the spinners of a hand-made switch are grouped.
#[derive(Clone, Copy, PartialEq)]
enum Groups {
    /// One process group per host: one `killpg` per host each way.
    PerHost,
    /// A session (and so a group) per process, as scored gives each rank:
    /// one `killpg` per process each way. The kernel lets a session be
    /// shared only by descent, so ranks that are all scored's children
    /// cannot share one; this is the least a switch of scored's layout
    /// can cost.
    PerProcess,
}

fn switch_baseline_with(n: u32, grouping: Groups) -> f64 {
    let (n_hosts, cores) = layout(n);
    let spawn_set = || -> (Vec<i32>, Vec<Child>) {
        let mut groups = Vec::new();
        let mut children = Vec::new();
        for _ in 0..n_hosts {
            let mut leader = 0;
            for _ in 0..cores {
                if grouping == Groups::PerProcess {
                    // setsid(1) calls setsid() and execs in the same
                    // process, since the child is not a group leader.
                    let child = Command::new("setsid")
                        .arg(testprog())
                        .args(["spin", "0"])
                        .stdout(Stdio::null())
                        .spawn()
                        .expect("spawn spinner");
                    let pid = Pid::from_raw(child.id() as i32);
                    // Signalled as a group only once it leads one.
                    while nix::unistd::getsid(Some(pid)) != Ok(pid) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    groups.push(pid.as_raw());
                    children.push(child);
                    continue;
                }
                let child = Command::new(testprog())
                    .args(["spin", "0"])
                    .stdout(Stdio::null())
                    .process_group(leader)
                    .spawn()
                    .expect("spawn spinner");
                if leader == 0 {
                    leader = child.id() as i32;
                    groups.push(leader);
                }
                children.push(child);
            }
        }
        (groups, children)
    };
    let stop_and_confirm = |groups: &[i32], children: &[Child]| {
        for group in groups {
            let _ = killpg(Pid::from_raw(*group), Signal::SIGSTOP);
        }
        for child in children {
            let _ = waitpid(
                Pid::from_raw(child.id() as i32),
                Some(WaitPidFlag::WUNTRACED),
            );
        }
    };
    let cont = |groups: &[i32]| {
        for group in groups {
            let _ = killpg(Pid::from_raw(*group), Signal::SIGCONT);
        }
    };
    let (groups_a, mut children_a) = spawn_set();
    let (groups_b, mut children_b) = spawn_set();
    stop_and_confirm(&groups_b, &children_b);
    scored::actuator::sys::set_scheduler(Some(10), true)
        .expect("SCHED_FIFO for the baseline (run as root)");
    let mut samples = Vec::new();
    let rounds = scaled(100, 30);
    let mut running_a = true;
    for _ in 0..rounds {
        std::thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        if running_a {
            stop_and_confirm(&groups_a, &children_a);
            cont(&groups_b);
        } else {
            stop_and_confirm(&groups_b, &children_b);
            cont(&groups_a);
        }
        samples.push(start.elapsed().as_secs_f64());
        running_a = !running_a;
    }
    let _ = scored::actuator::sys::set_scheduler(None, false);
    for child in children_a.iter_mut().chain(children_b.iter_mut()) {
        let _ = child.kill();
        let _ = nix::sys::signal::kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
        let _ = child.wait();
    }
    median(&mut samples)
}

/// Which freezer a freezer switch uses.
#[derive(Clone, Copy)]
enum Freezer {
    /// cgroup v1 `freezer.state`, confirmed by reading it until `FROZEN`.
    V1,
    /// cgroup v2 `cgroup.freeze`, confirmed by the `frozen 1` line of
    /// `cgroup.events`, waited for with poll(2) (POLLPRI), as the kernel
    /// notifies it.
    V2,
}

/// The same switch as [`switch_baseline`] done with a freezer instead of
/// signals: each set of spinners in a cgroup of its own; freeze one set,
/// wait until the kernel says it is frozen, thaw the other. `None` where
/// the hierarchy is not there or not writable (not root).
fn switch_freezer(n: u32, freezer: Freezer) -> Option<f64> {
    use std::os::unix::fs::OpenOptionsExt;
    let root = match freezer {
        Freezer::V1 => "/sys/fs/cgroup/freezer",
        Freezer::V2 => "/sys/fs/cgroup/unified",
    };
    let (file, frozen_value, thawed_value) = match freezer {
        Freezer::V1 => ("freezer.state", "FROZEN", "THAWED"),
        Freezer::V2 => ("cgroup.freeze", "1", "0"),
    };
    let (n_hosts, cores) = layout(n);
    let dirs: Vec<std::path::PathBuf> = ["a", "b"]
        .iter()
        .map(|set| {
            std::path::Path::new(root).join(format!("scored-bench-{}-{set}", std::process::id()))
        })
        .collect();
    for dir in &dirs {
        if std::fs::create_dir(dir).is_err() || !dir.join(file).exists() {
            let _ = std::fs::remove_dir(dir);
            return None;
        }
    }
    let mut sets: Vec<Vec<Child>> = Vec::new();
    for dir in &dirs {
        let mut children = Vec::new();
        for _ in 0..n_hosts * cores {
            let child = Command::new(testprog())
                .args(["spin", "0"])
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn spinner");
            std::fs::write(dir.join("cgroup.procs"), child.id().to_string())
                .expect("move a spinner into its cgroup");
            children.push(child);
        }
        sets.push(children);
    }
    let write = |dir: &std::path::Path, value: &str| {
        std::fs::write(dir.join(file), value).expect("write the freezer");
    };
    let frozen = |dir: &std::path::Path| -> bool {
        match freezer {
            Freezer::V1 => {
                std::fs::read_to_string(dir.join(file)).is_ok_and(|state| state.trim() == "FROZEN")
            }
            Freezer::V2 => std::fs::read_to_string(dir.join("cgroup.events"))
                .is_ok_and(|events| events.lines().any(|line| line == "frozen 1")),
        }
    };
    // v2 notifies a change of `cgroup.events` with POLLPRI; v1 has no
    // notification, and is read until it says FROZEN.
    let events: Vec<Option<std::fs::File>> = dirs
        .iter()
        .map(|dir| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(dir.join("cgroup.events"))
                .ok()
        })
        .collect();
    let freeze_and_confirm = |idx: usize| {
        write(&dirs[idx], frozen_value);
        match freezer {
            Freezer::V1 => while !frozen(&dirs[idx]) {},
            Freezer::V2 => {
                while !frozen(&dirs[idx]) {
                    let Some(file) = &events[idx] else { continue };
                    let mut pollfd = libc::pollfd {
                        fd: file.as_raw_fd(),
                        events: libc::POLLPRI,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd for the call's duration.
                    unsafe { libc::poll(&mut pollfd, 1, 100) };
                }
            }
        }
    };
    freeze_and_confirm(1);
    scored::actuator::sys::set_scheduler(Some(10), true)
        .expect("SCHED_FIFO for the baseline (run as root)");
    let mut samples = Vec::new();
    let mut running = 0;
    for _ in 0..scaled(100, 30) {
        std::thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        freeze_and_confirm(running);
        write(&dirs[1 - running], thawed_value);
        samples.push(start.elapsed().as_secs_f64());
        running = 1 - running;
    }
    let _ = scored::actuator::sys::set_scheduler(None, false);
    for (dir, children) in dirs.iter().zip(sets.iter_mut()) {
        write(dir, thawed_value);
        for child in children.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for _ in 0..100 {
            if std::fs::remove_dir(dir).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Some(median(&mut samples))
}

// ----- 2. launch -----

fn time_command(mut make: impl FnMut() -> bool, rounds: u64) -> f64 {
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        assert!(make(), "command failed");
        samples.push(start.elapsed().as_secs_f64());
    }
    median(&mut samples)
}

fn launch(rows: &mut Vec<Row>) {
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts_file(4, 4))
        .start();
    let rounds = scaled(40, 8);
    for n in [1u32, 16] {
        let nodes = format!("-nodes={n}");
        let scrun = time_command(|| daemon.run(&[&nodes, "true"]).status.success(), rounds);
        let fork = time_command(
            || {
                let children: Vec<Child> = (0..n)
                    .map(|_| Command::new("true").spawn().expect("true"))
                    .collect();
                children
                    .into_iter()
                    .all(|mut child| child.wait().is_ok_and(|status| status.success()))
            },
            rounds,
        );
        rows.push(row(
            &format!(
                "launch `scrun true`, {n} process{}",
                if n == 1 { "" } else { "es" }
            ),
            ms(scrun),
            format!("{} (fork+exec+wait)", ms(fork)),
            format!("+{} over", ms(scrun - fork)),
            "a few ms over fork+exec",
        ));
    }
}

// ----- 6. a large launch -----

/// One `status` on an open connection: how long the answer took.
fn console_latency(stream: &mut UnixStream) -> f64 {
    let request = scored::proto::encode(&scored::proto::Request::Console {
        version: scored::proto::VERSION,
        line: "status".into(),
        json: true,
    });
    let start = Instant::now();
    stream.write_all(&request).expect("send status");
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Ok(Some(reply)) =
            scored::proto::decode::<scored::proto::Reply>(&mut bytes, scored::proto::MAX_REPLY)
        {
            assert!(
                matches!(reply, scored::proto::Reply::Console { ok: true, .. }),
                "{reply:?}"
            );
            return start.elapsed().as_secs_f64();
        }
        let len = stream.read(&mut chunk).expect("read status");
        assert!(len > 0, "the daemon closed the console connection");
        bytes.extend_from_slice(&chunk[..len]);
    }
}

/// Asks for the status every 20 ms while `busy` holds; returns the
/// latencies and the pair's switches over that time.
fn console_while(
    daemon: &Daemon,
    stream: &mut UnixStream,
    mut busy: impl FnMut() -> bool,
) -> (Vec<f64>, u64, f64) {
    let switches = |daemon: &Daemon| daemon.json("status")["switches"].as_u64().unwrap_or(0);
    let before = switches(daemon);
    let start = Instant::now();
    let mut latencies = Vec::new();
    while busy() {
        latencies.push(console_latency(stream));
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = start.elapsed().as_secs_f64();
    (latencies, switches(daemon) - before, elapsed)
}

fn big_launch(rows: &mut Vec<Row>) {
    let n = scaled(3000, 500) as usize;
    // The pair shares h0 and switches every 50 ms; the large job holds h1
    // to hn. Placement takes the emptiest hosts, so: the first of the pair
    // takes h0; the large job, admitted to a deactivated queue (hosts are
    // fixed at admission), takes h1 to hn; the second of the pair then
    // finds every host with one process and takes the lowest, h0.
    let hosts: String = (0..=n).map(|idx| format!("h{idx} cores=1\n")).collect();
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts)
        .timeslice("50ms")
        .start();
    daemon.ok("queue 2 deactivate");
    let mut pair = vec![daemon.spawn(&["-nodes=1,priority=1", &testprog(), "spin", "0"])];
    pair[0].wait_pids(1);
    let nodes = format!("-nodes={n},priority=2");
    let mut large = daemon.spawn(&[&nodes, &testprog(), "ignore-term", "2"]);
    assert!(
        wait_until(Duration::from_secs(30), || daemon
            .json("jobs")
            .as_array()
            .is_some_and(|jobs| jobs.len() == 2)),
        "the large job is admitted"
    );
    pair.push(daemon.spawn(&["-nodes=1,priority=1", &testprog(), "spin", "0"]));
    pair[1].wait_pids(1);
    let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
    std::thread::sleep(Duration::from_millis(500));
    // Before: the same for as long as the launch will take, roughly.
    let quiet_until = Instant::now() + Duration::from_secs(scaled(3, 1));
    let (mut quiet, quiet_switches, quiet_secs) =
        console_while(&daemon, &mut stream, || Instant::now() < quiet_until);
    // The command that starts the launch is answered after the decision
    // it causes is carried out: its latency counts too.
    let switches_before = daemon.json("status")["switches"].as_u64().unwrap_or(0);
    let launched = Instant::now();
    daemon.ok("queue 2 activate");
    let activate = launched.elapsed().as_secs_f64();
    let (mut during, _, _) = console_while(&daemon, &mut stream, || large.count_lines("pid ") < n);
    during.push(activate);
    let launch_secs = launched.elapsed().as_secs_f64();
    let launch_switches = daemon.json("status")["switches"].as_u64().unwrap_or(0) - switches_before;
    let all_started = launched.elapsed().as_secs_f64();
    let status = daemon.json("status");
    let switch_max = status["switch latency"]["max"].as_f64().unwrap_or(f64::NAN);
    let switch_median = status["switch latency"]["median"]
        .as_f64()
        .unwrap_or(f64::NAN);
    let (end, _) = large.wait(Duration::from_secs(600));
    assert!(end.success(), "the large job failed");
    for job in &pair {
        job.signal(Signal::SIGINT);
    }
    for job in &mut pair {
        job.wait(Duration::from_secs(30));
    }
    let max = |values: &[f64]| values.iter().copied().fold(0.0, f64::max);
    rows.push(row(
        &format!(
            "`status` while {n} processes start ({} s for all)",
            format_args!("{all_started:.1}")
        ),
        format!(
            "{} median, {} max ({} asked; `queue 2 activate`, which starts it, {})",
            ms(median(&mut during.clone())),
            ms(max(&during)),
            during.len(),
            ms(activate)
        ),
        format!(
            "{} median, {} max (before the launch)",
            ms(median(&mut quiet)),
            ms(max(&quiet))
        ),
        format!("max {:.1}×", max(&during) / max(&quiet).max(1e-6)),
        "< 50 ms",
    ));
    during.clear();
    rows.push(row(
        &format!("switches of a gang pair at 50 ms slices while {n} processes start"),
        format!(
            "{:.1}/s (median latency {}, max {})",
            launch_switches as f64 / launch_secs,
            ms(switch_median),
            ms(switch_max)
        ),
        format!(
            "{:.1}/s (before the launch)",
            quiet_switches as f64 / quiet_secs
        ),
        format!(
            "{:.2}×",
            (launch_switches as f64 / launch_secs) / (quiet_switches as f64 / quiet_secs)
        ),
        "keeps its cadence",
    ));
}

// ----- 3. fairness -----

fn fairness(rows: &mut Vec<Row>) {
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

// ----- 4. slice overhead -----

fn work_process(millions: u64, cpu: Option<u32>) -> Child {
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

fn slice_overhead(rows: &mut Vec<Row>) {
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

// ----- 5. scale -----

fn submit_frame() -> Vec<u8> {
    let submit = scored::proto::Submit {
        stages: vec![vec!["true".into()]],
        joiner: scored::proto::Joiner::Sequence,
        options: scored::proto::JobOptions {
            procs: scored::proto::ProcRequest::Nodes(1),
            priority: None,
            wait: false,
            memory: None,
            disk: None,
            pty: false,
            time_ms: None,
        },
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: "/".into(),
        ignored_signals: Vec::new(),
        rlimits: Vec::new(),
        umask: None,
    };
    scored::proto::encode(&scored::proto::Request::Submit {
        version: scored::proto::VERSION,
        submit,
    })
}

fn read_frame(stream: &mut UnixStream) -> Vec<u8> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).expect("reply length");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).expect("reply body");
    body
}

fn scale(rows: &mut Vec<Row>) {
    // The client side needs a socket per job.
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts_file(256, 1))
        .rc("queue 1 deactivate\n")
        .start();
    let pid = daemon.pid();
    let frame = submit_frame();
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    let fds = [null.as_raw_fd(); 3];
    let mut streams = Vec::new();
    let rss_before = rss_kib(pid);
    let mut mark = Instant::now();
    let target = scaled(10_000, 1_000);
    let mut checkpoints = Vec::new();
    for count in 1..=target {
        streams.push(submit_admitted(&daemon, &frame, &fds));
        if count == 1_000 || count == target {
            let elapsed = mark.elapsed().as_secs_f64();
            let batch = if count == 1_000 { 1_000 } else { count - 1_000 };
            checkpoints.push((count, batch as f64 / elapsed, rss_kib(pid)));
            mark = Instant::now();
        }
    }
    for (count, rate, rss) in &checkpoints {
        let per_job = (rss.saturating_sub(rss_before) as f64 * 1024.0) / *count as f64;
        rows.push(row(
            &format!(
                "admission into a deactivated queue, jobs {}",
                if *count == 1_000 {
                    "1-1,000".to_string()
                } else {
                    format!("1,001-{count}")
                }
            ),
            format!("{rate:.0} jobs/s"),
            "-".into(),
            "-".into(),
            "",
        ));
        rows.push(row(
            &format!("daemon memory per admitted job at {count} jobs"),
            format!("{per_job:.0} B"),
            "1 kB target".into(),
            format!("{:.2}×", per_job / 1024.0),
            "under 1 kB",
        ));
    }
    drop(streams);
    decision_time(rows);
}

/// A pure core on `n_hosts` one-core hosts of one cluster, with gang
/// slices of `slice`, for the benchmarks that drive the core alone.
fn pure_core(n_hosts: u32, slice: std::time::Duration) -> scored::core::Core {
    use scored::cluster::{Cluster, Host, Topology};
    use scored::core::{Core, CoreConfig};
    use scored::ids::{ClusterId, HostId};
    let mut topology = Topology::default();
    let mut cluster = Cluster {
        id: ClusterId(0),
        name: "c".into(),
        cpugen: "c".into(),
        speed: 1.0,
        cores: 1,
        hosts: Vec::new(),
    };
    for idx in 0..n_hosts {
        topology.hosts.push(Host {
            id: HostId(idx),
            name: format!("h{idx}"),
            cluster: ClusterId(0),
            cpus: scored::units::CpuSet::from_cpus([0]),
            cores: 1,
            speed: 1.0,
            cpugen: "c".into(),
            memory: 1 << 30,
            watchfs: Vec::new(),
            groups: Vec::new(),
        });
        cluster.hosts.push(HostId(idx));
    }
    topology.clusters.push(cluster);
    Core::new(
        CoreConfig {
            timeslice: slice,
            ..CoreConfig::default()
        },
        topology,
        vec![None],
    )
}

/// One scheduling decision at 10,000 admitted jobs on 256 hosts, on the
/// pure core with the actuator's answers simulated.
fn decision_time(rows: &mut Vec<Row>) {
    use scored::core::{Action, Core, Input};
    use scored::ids::{ClientToken, Cred, Tick};
    use scored::job::{JobRequest, Joiner, ProcRequest};
    let n_hosts = 256u32;
    let slice = Duration::from_millis(100);
    let mut core = pure_core(n_hosts, slice);
    let cred = Cred {
        pid: 1,
        uid: 0,
        gid: 0,
        groups: Vec::new(),
    };
    let mut now = Tick(0);
    // The actuator's answer to a switch: every stop confirmed, in one batch
    // (as the event loop delivers the children reaped after one SIGCHLD).
    let feed = |core: &mut Core, actions: Vec<Action>, now: Tick| {
        let mut actions = actions;
        loop {
            let stopped: Vec<Input> = actions
                .iter()
                .filter_map(|action| {
                    if let Action::Stop(job) = action {
                        Some(Input::Stopped(*job))
                    } else {
                        None
                    }
                })
                .collect();
            if stopped.is_empty() {
                break;
            }
            actions = core.handle_all(stopped, now);
        }
    };
    // Ten thousand jobs of 1 to 8 processes into queues 1 and 2.
    let submit_jobs = |core: &mut Core, cred: &Cred, now: Tick, commit: bool| {
        let mut seed = 12345u64;
        for idx in 0..10_000u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let nodes = 1 + ((seed >> 33) % 8) as u32;
            let request = JobRequest {
                stages: vec![vec![OsString::from("prog")]],
                joiner: Joiner::Sequence,
                procs: ProcRequest::Nodes(nodes),
                priority: Some(1 + (idx % 2) as u32),
                wait: false,
                memory: None,
                disk: None,
                time: None,
                env: Vec::new(),
                cwd: OsString::from("/"),
                inherited: Default::default(),
            };
            let actions = core.handle(
                Input::Submit {
                    client: ClientToken(idx + 1),
                    cred: cred.clone(),
                    user: "u".into(),
                    request: Box::new(request),
                },
                now,
            );
            feed(core, actions, now);
            if commit {
                core.commit();
            }
        }
    };
    let held_before = held();
    let start = Instant::now();
    submit_jobs(&mut core, &cred, now, false);
    let plain_time = start.elapsed().as_secs_f64();
    assert_eq!(core.n_jobs(), 10_000);
    let core_bytes = (held() - held_before) as f64 / 10_000.0;
    rows.push(row(
        "scheduling core's own memory per admitted job (heap bytes, counted)",
        format!("{core_bytes:.0} B"),
        "1 kB target".into(),
        format!("{:.2}×", core_bytes / 1024.0),
        "part of the above",
    ));
    let mut samples = Vec::new();
    for _ in 0..scaled(200, 20) {
        now = now.after(slice);
        let start = Instant::now();
        let actions = core.handle(Input::Tick, now);
        feed(&mut core, actions, now);
        samples.push(start.elapsed().as_secs_f64());
    }
    let decision = median(&mut samples);
    rows.push(row(
        "one scheduling decision (slice end: rotate, choose, stop, continue), 10,000 jobs on 256 hosts",
        ms(decision),
        "1 ms target".into(),
        format!("{:.2}×", decision / 1e-3),
        "under 1 ms",
    ));
    drop(core);
    // Measured last, so that the decision above runs on the same heap
    // as before this measure existed.
    // The same submissions into a core that commits after each one (the
    // daemon's panic checkpoint), counted apart: what the checkpoint keeps
    // (the undo log, the copy of the core's small part).
    let (committed_bytes, committed_time) = {
        let mut committed = pure_core(256, slice);
        let before = held();
        let start = Instant::now();
        committed.commit();
        submit_jobs(&mut committed, &cred, now, true);
        let elapsed = start.elapsed().as_secs_f64();
        let bytes = (held() - before) as f64 / 10_000.0;
        drop(committed);
        (bytes, elapsed)
    };
    rows.push(row(
        "admission in the pure core, 10,000 jobs on 256 hosts, committing after each submission",
        format!("{:.1} µs a job", committed_time / 10_000.0 * 1e6),
        format!(
            "{:.1} µs a job (never committing)",
            plain_time / 10_000.0 * 1e6
        ),
        format!("{:.2}×", committed_time / plain_time),
        "no measurable cost",
    ));
    rows.push(row(
        "the same, committing the panic checkpoint after each submission",
        format!("{committed_bytes:.0} B"),
        format!("{core_bytes:.0} B (never committing)"),
        format!("{:+.0} B", committed_bytes - core_bytes),
        "no per-job cost",
    ));
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let memory = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|line| {
            line.strip_prefix("MemTotal:")
                .map(|rest| rest.trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{} CPUs ({model}), {memory} memory, Linux {}",
        online_cpus().len(),
        kernel.trim()
    )
}

// ----- 6. restart and journal -----

/// Submits `argv` on a new connection, as scrun does, and returns the
/// connection once the job is admitted.
fn submit_raw(daemon: &Daemon, argv: &[&str], priority: u32, fds: &[i32; 3]) -> UnixStream {
    let submit = scored::proto::Submit {
        stages: vec![argv.iter().map(|arg| (*arg).into()).collect()],
        joiner: scored::proto::Joiner::Sequence,
        options: scored::proto::JobOptions {
            procs: scored::proto::ProcRequest::Nodes(1),
            priority: Some(priority),
            wait: false,
            memory: None,
            disk: None,
            pty: false,
            time_ms: None,
        },
        env: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("SCORED_TEST_TAG".into(), daemon.tag.as_str().into()),
        ],
        cwd: "/".into(),
        ignored_signals: Vec::new(),
        rlimits: Vec::new(),
        umask: None,
    };
    let frame = scored::proto::encode(&scored::proto::Request::Submit {
        version: scored::proto::VERSION,
        submit,
    });
    submit_admitted(daemon, &frame, fds)
}

/// Sends a `Submit` frame with `fds` attached on a new connection, as
/// scrun does, and returns the connection once the job is admitted.
fn submit_admitted(daemon: &Daemon, frame: &[u8], fds: &[i32; 3]) -> UnixStream {
    let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
    let control = [nix::sys::socket::ControlMessage::ScmRights(fds)];
    let sent = nix::sys::socket::sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(frame)],
        &control,
        nix::sys::socket::MsgFlags::empty(),
        None,
    )
    .expect("send");
    stream.write_all(&frame[sent..]).expect("send rest");
    let reply = read_frame(&mut stream);
    assert!(
        String::from_utf8_lossy(&reply).contains("\"admitted\""),
        "not admitted: {}",
        String::from_utf8_lossy(&reply)
    );
    stream
}

/// One console request on a raw connection: its round trip and reply.
fn console_raw(daemon: &Daemon, line: &str) -> (f64, String) {
    let frame = scored::proto::encode(&scored::proto::Request::Console {
        version: scored::proto::VERSION,
        line: line.to_string(),
        json: true,
    });
    let start = Instant::now();
    let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
    stream.write_all(&frame).expect("send");
    let reply = read_frame(&mut stream);
    (
        start.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&reply).into_owned(),
    )
}

fn restart_under_load(rows: &mut Vec<Row>) {
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let slice = 0.2;
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts_file(100, 1))
        .timeslice("200ms")
        .rc("queue 2 deactivate\n")
        .start();
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    let fds = [null.as_raw_fd(); 3];
    let mut streams = Vec::new();
    // 120 gang jobs on 100 hosts: 100 run, 20 are switched out at a time.
    for _ in 0..120 {
        streams.push(submit_raw(&daemon, &["sleep", "3600"], 1, &fds));
    }
    let n_queued = scaled(1_000, 200);
    for _ in 0..n_queued {
        streams.push(submit_raw(&daemon, &["true"], 2, &fds));
    }
    let counts = |daemon: &Daemon| {
        let status = daemon.json("status");
        let jobs = &status["jobs"];
        (
            jobs["running"].as_u64().unwrap_or(0),
            jobs["stopped"].as_u64().unwrap_or(0),
            jobs["queued"].as_u64().unwrap_or(0),
            status["switches"].as_u64().unwrap_or(0),
        )
    };
    assert!(
        wait_until(Duration::from_secs(60), || {
            let (running, stopped, _, _) = counts(&daemon);
            running == 100 && stopped == 20
        }),
        "the gang jobs did not all start: {:?}",
        counts(&daemon)
    );
    let pids_before = daemon.all_job_pids();
    assert_eq!(pids_before.len(), 120, "job processes");
    let rounds = scaled(5, 2);
    let mut status_times = Vec::new();
    let mut restart_times = Vec::new();
    let mut resume_times = Vec::new();
    for _ in 0..rounds {
        for _ in 0..5 {
            status_times.push(console_raw(&daemon, "status").0);
        }
        let (elapsed, reply) = console_raw(&daemon, "restart");
        assert!(reply.contains("restarted in place"), "{reply}");
        restart_times.push(elapsed);
        let answered = Instant::now();
        let (_, _, _, switches) = counts(&daemon);
        assert!(
            wait_until(Duration::from_secs(10), || counts(&daemon).3 > switches),
            "no switch after the restart"
        );
        resume_times.push(answered.elapsed().as_secs_f64());
    }
    let (running, stopped, queued, _) = counts(&daemon);
    let lost = 120 + n_queued - (running + stopped + queued);
    let pids_after = daemon.all_job_pids();
    let gone = pids_before
        .iter()
        .filter(|pid| !pids_after.contains(pid))
        .count();
    let mut dropped = 0;
    for stream in &mut streams {
        // Replies (started, held) may wait to be read; a dropped connection
        // reads as end of file or an error.
        stream.set_nonblocking(true).expect("non-blocking");
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer) {
                Ok(0) => {
                    dropped += 1;
                    break;
                }
                Ok(_) => continue,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    dropped += 1;
                    break;
                }
            }
        }
    }
    let status_rtt = median(&mut status_times);
    let restart_rtt = median(&mut restart_times);
    let worst = restart_times.iter().cloned().fold(0.0, f64::max);
    rows.push(row(
        &format!(
            "in-place restart, 100 running + 20 stopped gang jobs + {n_queued} queued: request to the new image's answer"
        ),
        format!("{} (max {}, {rounds} restarts)", ms(restart_rtt), ms(worst)),
        format!("{} (`status` round trip)", ms(status_rtt)),
        format!("+{} over", ms(restart_rtt - status_rtt)),
        "under 50 ms",
    ));
    rows.push(row(
        "jobs lost / job processes gone / connections dropped over those restarts",
        format!("{lost} / {gone} / {dropped}"),
        format!("{} jobs, {} connections", 120 + n_queued, streams.len()),
        "-".into(),
        "0 / 0 / 0",
    ));
    let worst_resume = resume_times.iter().cloned().fold(0.0, f64::max);
    rows.push(row(
        "gang rotation after a restart: answer to the next switch",
        format!(
            "{} (max {})",
            ms(median(&mut resume_times)),
            ms(worst_resume)
        ),
        format!("{} (time slice)", ms(slice)),
        format!("{:.2}×", worst_resume / slice),
        "within one slice",
    ));
    drop(streams);
}

/// Launching and switching with and without the journal, in the same run.
fn journal_cost(rows: &mut Vec<Row>) {
    let rounds = scaled(40, 8);
    let launch = |args: &[&str]| {
        let mut builder = Daemon::builder()
            .log("scored=info")
            .hosts(&hosts_file(4, 4));
        for arg in args {
            builder = builder.arg(arg);
        }
        let daemon = builder.start();
        time_command(|| daemon.run(&["true"]).status.success(), rounds)
    };
    // Alternate, so that a change of load hits both alike.
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..scaled(3, 1) {
        with.push(launch(&[]));
        without.push(launch(&["--no-journal"]));
    }
    let with = median(&mut with);
    let without = median(&mut without);
    rows.push(row(
        "launch `scrun true` with the job journal",
        ms(with),
        format!("{} (--no-journal)", ms(without)),
        format!("{:+.3} ms", (with - without) * 1e3),
        "no measurable cost",
    ));
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..scaled(3, 1) {
        with.push(switch_scored_with(16, &[]).0);
        without.push(switch_scored_with(16, &["--no-journal"]).0);
    }
    let with_median = median(&mut with);
    let without_median = median(&mut without);
    rows.push(row(
        "gang switch, 2 jobs of 16 processes, with the job journal",
        ms(with_median),
        format!("{} (--no-journal)", ms(without_median)),
        format!("{:.2}×", with_median / without_median),
        "no measurable cost",
    ));
}

// ----- 8. the checkpoint before each event -----

/// The checkpoint's cost in the pure core: 100 hosts, 120 gang jobs (100
/// running, 20 switched out) and 1,000 queued in a deactivated queue,
/// against the serialized snapshot an in-place restart writes; and what a
/// checkpoint held since the last event adds to the part of a switch
/// between the stop confirmations and the continues (the jobs that enter
/// are copied then, being shared with it).
fn checkpoint_in_core(rows: &mut Vec<Row>) {
    use scored::core::{Action, Core, Input};
    use scored::ids::{ClientToken, Cred, Tick};
    use scored::job::{JobRequest, Joiner, ProcRequest};
    let n_hosts = 100u32;
    let cred = Cred {
        pid: 1,
        uid: 0,
        gid: 0,
        groups: Vec::new(),
    };
    let now = Tick(0);
    let request = |priority: u32| JobRequest {
        stages: vec![vec![OsString::from("sleep"), OsString::from("3600")]],
        joiner: Joiner::Sequence,
        procs: ProcRequest::Nodes(1),
        priority: Some(priority),
        wait: false,
        memory: None,
        disk: None,
        time: None,
        env: vec![(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))],
        cwd: OsString::from("/"),
        inherited: Default::default(),
    };
    let build = || {
        let mut core = pure_core(n_hosts, Duration::from_millis(200));
        let command = scored::command::parse_line("queue 2 deactivate")
            .expect("valid")
            .expect("a command");
        core.handle(
            Input::Console {
                client: ClientToken(0),
                cred: cred.clone(),
                command: Box::new(command),
            },
            now,
        );
        for idx in 0..1_120u64 {
            core.handle(
                Input::Submit {
                    client: ClientToken(idx + 1),
                    cred: cred.clone(),
                    user: "u".into(),
                    request: Box::new(request(if idx < 120 { 1 } else { 2 })),
                },
                now,
            );
        }
        assert_eq!(core.n_jobs(), 1_120);
        let running = core
            .jobs()
            .filter(|job| job.phase() == scored::job::Phase::Running)
            .count();
        assert_eq!(running, 100, "a gang job runs on each host");
        core
    };
    // The commit after an event, as the loop makes it: here after each
    // submission into the deactivated queue (the event of the admission
    // benchmark), with 1,120 jobs and more held.
    let mut core = build();
    core.commit();
    let mut samples = Vec::new();
    for idx in 0..scaled(2_000, 200) {
        core.handle(
            Input::Submit {
                client: ClientToken(10_000 + idx),
                cred: cred.clone(),
                user: "u".into(),
                request: Box::new(request(2)),
            },
            now,
        );
        let start = Instant::now();
        core.commit();
        samples.push(start.elapsed().as_secs_f64());
    }
    let checkpoint = median(&mut samples);
    let worst = samples.iter().cloned().fold(0.0, f64::max);
    let mut samples = Vec::new();
    for _ in 0..scaled(50, 10) {
        let start = Instant::now();
        let bytes = serde_json::to_vec(&core.snapshot()).expect("serializable");
        samples.push(start.elapsed().as_secs_f64());
        drop(bytes);
    }
    let snapshot = median(&mut samples);
    // Slices of the gang rotation: the tick stops the leaving jobs; the
    // confirmations lead to the continues (timed), in a core that commits
    // after each event (so the switch logs what it changes) and in one
    // that never does (the loop feeds the tick and the confirmations
    // within one event).
    let mut with_core = build();
    let mut without_core = build();
    let confirm = |core: &mut Core, now: &mut Tick, commit: bool| -> f64 {
        *now = now.after(Duration::from_millis(200));
        if commit {
            core.commit();
        }
        let actions = core.handle(Input::Tick, *now);
        let stopped: Vec<Input> = actions
            .iter()
            .filter_map(|action| match action {
                Action::Stop(job) => Some(Input::Stopped(*job)),
                _ => None,
            })
            .collect();
        assert!(!stopped.is_empty(), "the slice switches");
        let start = Instant::now();
        let continues = core.handle_all(stopped, *now);
        let elapsed = start.elapsed().as_secs_f64();
        assert!(continues
            .iter()
            .any(|action| matches!(action, Action::Continue(_) | Action::Spawn(_))));
        elapsed
    };
    let (mut with_now, mut without_now) = (now, now);
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..scaled(500, 50) {
        with.push(confirm(&mut with_core, &mut with_now, true));
        without.push(confirm(&mut without_core, &mut without_now, false));
    }
    let with = median(&mut with);
    let without = median(&mut without);
    rows.push(row(
        "checkpoint of the core per event (commit after a submission), 120 gang jobs (100 running) + 1,000 queued on 100 hosts (pure core)",
        format!("{} (max {})", ms(checkpoint), ms(worst)),
        format!("{} (serialized restart snapshot)", ms(snapshot)),
        format!("{:.3}×", checkpoint / snapshot),
        "off the switch path",
    ));
    rows.push(row(
        "switch in the core, stop confirmations to continues of 20 jobs, committing after each event (pure core)",
        ms(with),
        format!("{} (never committing)", ms(without)),
        format!("{:+.4} ms", (with - without) * 1e3),
        "no measurable cost",
    ));
}

/// The switch latency under the restart benchmark's load (100 running
/// and 20 switched-out gang jobs, 1,000 queued), and the launch latency,
/// with and without the checkpoint, alternating daemons in one run.
fn checkpoint_cost(rows: &mut Vec<Row>) {
    checkpoint_in_core(rows);
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let loaded_switch = |checkpoint: bool| -> (f64, f64, u64) {
        let mut builder = Daemon::builder()
            .log("scored=info")
            .hosts(&hosts_file(100, 1))
            .timeslice("200ms")
            .rc("queue 2 deactivate\n");
        if !checkpoint {
            builder = builder.env("SCORED_NO_CHECKPOINT", "1");
        }
        let daemon = builder.start();
        let null = std::fs::File::open("/dev/null").expect("/dev/null");
        let fds = [null.as_raw_fd(); 3];
        let mut streams = Vec::new();
        for _ in 0..120 {
            streams.push(submit_raw(&daemon, &["sleep", "3600"], 1, &fds));
        }
        for _ in 0..scaled(1_000, 200) {
            streams.push(submit_raw(&daemon, &["true"], 2, &fds));
        }
        let status = daemon.json("status");
        let before = status["switches"].as_u64().unwrap_or(0);
        std::thread::sleep(Duration::from_secs(scaled(8, 2)));
        let status = daemon.json("status");
        let latency = &status["switch latency"];
        let result = (
            latency["median"].as_f64().unwrap_or(f64::NAN),
            latency["max"].as_f64().unwrap_or(f64::NAN),
            status["switches"].as_u64().unwrap_or(0) - before,
        );
        drop(streams);
        result
    };
    let small_launch = |checkpoint: bool| -> f64 {
        let mut builder = Daemon::builder()
            .log("scored=info")
            .hosts(&hosts_file(4, 4));
        if !checkpoint {
            builder = builder.env("SCORED_NO_CHECKPOINT", "1");
        }
        let daemon = builder.start();
        time_command(|| daemon.run(&["true"]).status.success(), scaled(40, 8))
    };
    // Alternate, so that a change of load hits both alike.
    let mut with = Vec::new();
    let mut without = Vec::new();
    let mut with_max: f64 = 0.0;
    let mut without_max: f64 = 0.0;
    let mut switches = (0, 0);
    for _ in 0..scaled(5, 1) {
        let (median_with, max_with, n_with) = loaded_switch(true);
        let (median_without, max_without, n_without) = loaded_switch(false);
        with.push(median_with);
        without.push(median_without);
        with_max = with_max.max(max_with);
        without_max = without_max.max(max_without);
        switches.0 += n_with;
        switches.1 += n_without;
    }
    let with_median = median(&mut with);
    let without_median = median(&mut without);
    rows.push(row(
        "gang switch, 100 running + 20 stopped gang jobs + 1,000 queued, with the checkpoint",
        format!(
            "{} (max {}, {} switches)",
            ms(with_median),
            ms(with_max),
            switches.0
        ),
        format!(
            "{} (max {}, {} switches, SCORED_NO_CHECKPOINT=1)",
            ms(without_median),
            ms(without_max),
            switches.1
        ),
        format!("{:.2}×", with_median / without_median),
        "no measurable cost",
    ));
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..scaled(3, 1) {
        with.push(small_launch(true));
        without.push(small_launch(false));
    }
    let with = median(&mut with);
    let without = median(&mut without);
    rows.push(row(
        "launch `scrun true` with the checkpoint",
        ms(with),
        format!("{} (SCORED_NO_CHECKPOINT=1)", ms(without)),
        format!("{:+.3} ms", (with - without) * 1e3),
        "no measurable cost",
    ));
}

// ----- 9. what may block the loop -----

/// Median and max of `rounds` requests of `line` on one connection.
fn request_times(stream: &mut UnixStream, line: &str, rounds: usize) -> (f64, f64) {
    let frame = scored::proto::encode(&scored::proto::Request::Console {
        version: scored::proto::VERSION,
        line: line.to_string(),
        json: true,
    });
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        stream.write_all(&frame).expect("send");
        read_frame(stream);
        samples.push(start.elapsed().as_secs_f64());
    }
    let max = samples.iter().copied().fold(0.0, f64::max);
    (median(&mut samples), max)
}

fn blocking(rows: &mut Vec<Row>) {
    let mut daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts_file(2, 1))
        .start();
    let (status_alone, _) = {
        let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
        request_times(&mut stream, "status", 50)
    };
    daemon.stop();
    let state = daemon.sandbox.path.join("state");
    let n_jobs = write_full_journal(&state, 16 << 20);
    let started = Instant::now();
    daemon.start_again();
    let start_up = started.elapsed().as_secs_f64();
    rows.push(row(
        &format!("start-up with a full journal (2 files of 16M, {n_jobs} jobs)"),
        ms(start_up),
        "-".into(),
        "-".into(),
        "before the loop runs",
    ));
    let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
    let rounds = scaled(20, 5) as usize;
    for (line, what) in [
        ("history", "`history` (every job)"),
        (
            "history --user 4000000",
            "`history --user` of a user with no jobs",
        ),
        ("job 1", "`job 1` (oldest job, in journal.1)"),
        ("job 999999999", "`job ID` of an id never used"),
    ] {
        let (median_time, max_time) = request_times(&mut stream, line, rounds);
        rows.push(row(
            &format!("{what}, full journal ({n_jobs} jobs)"),
            format!("{} (max {})", ms(median_time), ms(max_time)),
            format!("{} (`status`)", ms(status_alone)),
            format!("{:.0}×", median_time / status_alone),
            "blocks the loop that long",
        ));
    }
    // Six clients flood the journal reads; one more asks for `status`.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flooders: Vec<_> = ["history --user 4000000", "job 999999999", "history"]
        .into_iter()
        .cycle()
        .take(6)
        .map(|line| {
            let socket = daemon.socket.clone();
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut stream = UnixStream::connect(&socket).expect("connect");
                let mut n_answers = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    request_times(&mut stream, line, 1);
                    n_answers += 1;
                }
                n_answers
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let (flooded_median, flooded_max) = request_times(&mut stream, "status", rounds * 5);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let n_answers: u64 = flooders
        .into_iter()
        .map(|flooder| flooder.join().expect("flooder"))
        .sum();
    rows.push(row(
        "`status` while 6 clients flood `history` and `job ID`, full journal",
        format!(
            "{} (max {}, {n_answers} flood answers)",
            ms(flooded_median),
            ms(flooded_max)
        ),
        format!("{} (`status` alone)", ms(status_alone)),
        format!("{:.0}×", flooded_median / status_alone),
        "bounded",
    ));
    drop(stream);
    drop(daemon);

    // The journal's sync at a job's end: fdatasync after a record's write,
    // on a file in the same file system as the benchmark's state dirs.
    let dir = std::env::temp_dir().join(format!("scored-bench-sync-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut file = std::fs::File::create(dir.join("journal")).expect("file");
    let line = [b'x'; 1100];
    let mut samples = Vec::new();
    for _ in 0..scaled(100, 20) {
        file.write_all(&line).expect("write");
        let start = Instant::now();
        file.sync_data().expect("fdatasync");
        samples.push(start.elapsed().as_secs_f64());
    }
    let _ = std::fs::remove_dir_all(&dir);
    let sync_max = samples.iter().copied().fold(0.0, f64::max);
    rows.push(row(
        "fdatasync of a journal record (the sync at a job's end)",
        format!("{} (max {})", ms(median(&mut samples)), ms(sync_max)),
        "-".into(),
        "-".into(),
        "at most once per 100 ms",
    ));

    // The user-name lookup on a connection from a uid not seen before.
    let mut samples = Vec::new();
    for _ in 0..scaled(1000, 100) {
        let start = Instant::now();
        let _ = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(65534));
        samples.push(start.elapsed().as_secs_f64());
    }
    rows.push(row(
        "user-name lookup (getpwuid through NSS, this machine's files)",
        ms(median(&mut samples)),
        "-".into(),
        "-".into(),
        "once per uid",
    ));
}

fn main() {
    // `cargo bench` passes `--bench`; there are no options of our own.
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    eprintln!("benchmarking on {}", machine());
    let mut rows = Vec::new();
    if wanted("switch") {
        eprintln!("1. switch latency");
        for n in [1u32, 16, 64] {
            let baseline = switch_baseline(n);
            let (median_scored, max_scored, switches) = switch_scored(n);
            rows.push(row(
                &format!(
                    "gang switch, 2 jobs of {n} process{}",
                    if n == 1 { "" } else { "es" }
                ),
                format!(
                    "{} (max {}, {switches} switches)",
                    ms(median_scored),
                    ms(max_scored)
                ),
                format!("{} (killpg+waitpid+killpg)", ms(baseline)),
                format!("{:.2}×", median_scored / baseline),
                "within 1.2×",
            ));
            if n > 1 {
                // scored's own layout by hand: a session per rank, so one
                // killpg per process. The row above against it is the
                // daemon's own overhead; the two baselines apart are the
                // price of the sessions.
                let per_process = switch_baseline_with(n, Groups::PerProcess);
                rows.push(row(
                    &format!("gang switch, 2 jobs of {n} processes, against a session per process by hand"),
                    format!("{} (the row above)", ms(median_scored)),
                    format!("{} (killpg per process+waitpid+killpg)", ms(per_process)),
                    format!("{:.2}×", median_scored / per_process),
                    "within 1.2×",
                ));
            }
            // The freezer as the switch's stop:
            // measured here to choose between it and SIGSTOP.
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
