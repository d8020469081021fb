//! Gang switch latency: scored's own measure against the same switch
//! made by hand (a group per host, a session per process), and the
//! freezer's switch for comparison.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{hosts_file, median, scaled};
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use scored_tests::*;

pub(crate) fn layout(n: u32) -> (u32, u32) {
    match n {
        1 => (1, 1),
        n if n <= 16 => (n.div_ceil(4), 4),
        n => (n / 4, 4),
    }
}

pub(crate) fn switch_scored(n: u32) -> (f64, f64, u64) {
    switch_scored_with(n, &[])
}

pub(crate) fn switch_scored_with(n: u32, args: &[&str]) -> (f64, f64, u64) {
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
pub(crate) fn switch_baseline(n: u32) -> f64 {
    switch_baseline_with(n, Groups::PerHost)
}

/// How the spinners of a hand-made switch are grouped.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Groups {
    /// One process group per host: one `killpg` per host each way.
    PerHost,
    /// A session (and so a group) per process, as scored gives each rank:
    /// one `killpg` per process each way. The kernel lets a session be
    /// shared only by descent, so ranks that are all scored's children
    /// cannot share one; this is the least a switch of scored's layout
    /// can cost.
    PerProcess,
}

pub(crate) fn switch_baseline_with(n: u32, grouping: Groups) -> f64 {
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
    scored::sys::set_scheduler(Some(10), true).expect("SCHED_FIFO for the baseline (run as root)");
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
    let _ = scored::sys::set_scheduler(None, false);
    for child in children_a.iter_mut().chain(children_b.iter_mut()) {
        let _ = child.kill();
        let _ = nix::sys::signal::kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
        let _ = child.wait();
    }
    median(&mut samples)
}

/// Which freezer a freezer switch uses.
#[derive(Clone, Copy)]
pub(crate) enum Freezer {
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
pub(crate) fn switch_freezer(n: u32, freezer: Freezer) -> Option<f64> {
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
    scored::sys::set_scheduler(Some(10), true).expect("SCHED_FIFO for the baseline (run as root)");
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
    let _ = scored::sys::set_scheduler(None, false);
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
