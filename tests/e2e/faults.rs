//! Faults. A job that ignores SIGTERM is killed after the grace; a
//! process that escapes its process group is stopped with its job and
//! killed at its end (with a cgroup, and without one through /proc); a job
//! that forks without pause does not stall switching; scored under SIGTERM
//! kills and reaps everything, stopped jobs included; and when scored is
//! killed outright its job processes die with it.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use scored_tests::*;

fn running(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|stat| stat.state == 'R')
}

/// Whether processes of `a` and `b` run at the same moment. Reading /proc
/// is not atomic, and a switch between reading `b` and reading `a` would
/// look like an overlap, so `a` is read before and after `b`: with slices
/// far longer than the reads, `a` running at both ends means it ran while
/// `b` was read.
fn run_together(a: &[i32], b: &[i32]) -> bool {
    let any = |pids: &[i32]| pids.iter().any(|pid| running(*pid));
    any(a) && any(b) && any(a)
}

fn cpu(pids: &[i32]) -> u64 {
    pids.iter()
        .filter_map(|pid| proc_stat(*pid))
        .map(|stat| stat.cpu_ticks)
        .sum()
}

fn all_gone(pids: &[i32], timeout: Duration) -> bool {
    wait_until(timeout, || pids.iter().all(|pid| !alive(*pid)))
}

fn switches(daemon: &Daemon) -> u64 {
    daemon.json("status")["switches"].as_u64().unwrap_or(0)
}

#[test]
fn a_job_that_ignores_sigterm_is_killed_after_the_grace() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--kill-grace")
        .arg("1s")
        .start();
    let mut job = daemon.spawn(&["-nodes=2", &testprog(), "ignore-term", "60"]);
    let pids = job.wait_pids(2);
    // The handler is in place once the program printed its pid.
    let started = Instant::now();
    daemon.ok("kill 1");
    let (status, message) = job.wait(Duration::from_secs(30));
    let took = started.elapsed();
    assert!(!status.success());
    assert!(
        took < Duration::from_secs(6),
        "a SIGTERM-ignoring job took {took:?} to die with a 1s grace"
    );
    assert!(
        took >= Duration::from_millis(900),
        "the job died after {took:?}, before the grace passed: was SIGTERM ignored?"
    );
    assert!(message.contains("killed"), "{message}");
    assert!(all_gone(&pids, Duration::from_secs(5)));
    let reason = daemon.job_field(1, "reason");
    assert!(
        reason.as_str().is_some_and(|text| text.contains("killed")),
        "{reason}"
    );
    assert_eq!(
        daemon.job_field(1, "exit"),
        128 + 9,
        "the job died of SIGKILL"
    );
    assert!(daemon.all_job_pids().is_empty());
}

/// The escaped children an `escape` job printed (`child PID` lines).
fn escaped_children(job: &mut Job, n: usize) -> Vec<i32> {
    job.wait_lines("child ", n)
        .iter()
        .filter_map(|text| text.trim().parse().ok())
        .collect()
}

/// Runs an escaping job against a full-width spinner with short slices:
/// the escaped children must never run while the other job does, must be
/// seen stopped, and must be gone once their job is killed.
fn escaped_children_are_stopped_and_killed(daemon: Daemon) {
    let mut escaper = daemon.spawn(&["-nodes=2", &testprog(), "escape", "600"]);
    let ranks = escaper.wait_pids(2);
    let children = escaped_children(&mut escaper, 2);
    for child in &children {
        let stat = proc_stat(*child).unwrap_or_else(|| {
            panic!(
                "escaped child {child} is gone right after it was printed; job 1: {}\n{}",
                daemon.json("job 1"),
                daemon.log()
            )
        });
        assert_eq!(stat.session, *child, "the child leads a session of its own");
    }
    let mut other = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let spinners = other.wait_pids(2);
    // Watch for 3 s: whenever the other job runs, no escaped child may.
    let end = Instant::now() + Duration::from_secs(3);
    let (mut together, mut seen_stopped, mut samples) = (0, 0, 0);
    while Instant::now() < end {
        if run_together(&children, &spinners) {
            together += 1;
        }
        if children.iter().all(|pid| stopped(*pid)) {
            seen_stopped += 1;
        }
        samples += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        together, 0,
        "escaped children ran together with the other job in {together} of {samples} samples"
    );
    assert!(
        seen_stopped > 0,
        "the escaped children were never seen stopped in {samples} samples"
    );
    assert!(
        cpu(&children) > 0,
        "the escaped children never ran in their own slices"
    );
    daemon.ok("kill 1");
    let (status, _) = escaper.wait(Duration::from_secs(30));
    assert!(!status.success());
    assert!(
        all_gone(&children, Duration::from_secs(10)),
        "escaped children survived their job: {:?}",
        children
            .iter()
            .filter(|pid| alive(**pid))
            .collect::<Vec<_>>()
    );
    assert!(all_gone(&ranks, Duration::from_secs(5)));
    other.signal(Signal::SIGINT);
    other.wait(Duration::from_secs(30));
    assert!(wait_until(Duration::from_secs(10), || daemon
        .all_job_pids()
        .is_empty()));
}

#[test]
fn an_escaped_child_is_stopped_and_killed_with_its_job() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .arg("--kill-grace")
        .arg("1s")
        .start();
    escaped_children_are_stopped_and_killed(daemon);
}

/// Without cgroups, escaped processes are found by walking /proc down from
/// the job's processes: this works as long as the escaped process's parent
/// is alive when scored first looks (here the parent sleeps).
#[test]
fn without_cgroups_an_escaped_child_is_found_through_its_parent() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .arg("--kill-grace")
        .arg("1s")
        .arg("--no-cgroups")
        .start();
    escaped_children_are_stopped_and_killed(daemon);
}

/// `escape 0`: the parent exits at once, leaving its escaped child behind
/// as an orphan that scored (the subreaper) inherits. The job ends when its
/// ranks are gone, and its leftovers are killed with it.
fn an_orphaned_escapee_dies_with_its_job(daemon: Daemon) {
    let mut job = daemon.spawn(&["-nodes=2", &testprog(), "escape", "0"]);
    let children = escaped_children(&mut job, 2);
    let (status, _) = job.wait(Duration::from_secs(30));
    assert!(status.success());
    assert!(
        all_gone(&children, Duration::from_secs(10)),
        "the orphaned escaped children survived their job: {:?}",
        children
            .iter()
            .filter(|pid| alive(**pid))
            .collect::<Vec<_>>()
    );
    assert!(daemon.all_job_pids().is_empty());
}

#[test]
fn an_orphaned_escapee_dies_with_its_job_in_a_cgroup() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    an_orphaned_escapee_dies_with_its_job(daemon);
}

#[test]
fn an_orphaned_escapee_dies_with_its_job_without_cgroups() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--no-cgroups")
        .start();
    an_orphaned_escapee_dies_with_its_job(daemon);
}

#[test]
fn a_job_that_forks_rapidly_does_not_stall_switching() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("20ms")
        .start();
    let mut forker = daemon.spawn(&["-nodes=2", &testprog(), "forks", "10"]);
    let forker_pids = forker.wait_pids(2);
    let mut other = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let spinners = other.wait_pids(2);
    let (switches_before, cpu_before) = (switches(&daemon), cpu(&spinners));
    // 3 s of 20 ms slices is 150 slices and 150 ticks of CPU for the other
    // job; a slow, loaded machine is allowed far fewer, and more time, as
    // long as the forker is still forking when they are counted.
    let progressed = wait_until(Duration::from_secs(7), || {
        switches(&daemon) >= switches_before + 20 && cpu(&spinners) > cpu_before + 20
    });
    let (switches_after, cpu_after) = (switches(&daemon), cpu(&spinners));
    assert!(
        progressed,
        "{} switches of 20 ms slices and {} ticks of CPU for the other job in 7 s beside a forking job",
        switches_after - switches_before,
        cpu_after - cpu_before
    );
    assert!(
        forker_pids.iter().all(|pid| alive(*pid)),
        "the forker ended before the other job's progress was counted"
    );
    // The forker finishes (its 10 s are wall-clock time) and leaves nothing.
    let (status, _) = forker.wait(Duration::from_secs(60));
    assert!(status.success());
    let forked = forker.wait_lines("forked ", 2);
    assert!(
        forked
            .iter()
            .all(|n| n.trim().parse::<u64>().unwrap_or(0) > 0),
        "{forked:?}"
    );
    assert!(wait_until(Duration::from_secs(10), || daemon
        .all_job_pids()
        .iter()
        .all(|pid| spinners.contains(pid))));
    other.signal(Signal::SIGINT);
    other.wait(Duration::from_secs(30));
    assert!(wait_until(Duration::from_secs(10), || daemon
        .all_job_pids()
        .is_empty()));
}

/// Jobs in every state: two full-width gang jobs that alternate (one of
/// them always stopped), a job that ignores SIGTERM, a held job, and a job
/// whose child escaped its session. Returns the scruns and every pid.
fn jobs_in_every_state(daemon: &Daemon) -> (Vec<Job>, Vec<i32>) {
    let mut jobs = Vec::new();
    let mut pids = Vec::new();
    let mut first = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    pids.extend(first.wait_pids(2));
    jobs.push(first);
    let mut second = daemon.spawn(&["-nodes=2", &testprog(), "ignore-term", "600"]);
    pids.extend(second.wait_pids(2));
    jobs.push(second);
    let mut third = daemon.spawn(&["-nodes=2", &testprog(), "escape", "600"]);
    pids.extend(third.wait_pids(2));
    pids.extend(escaped_children(&mut third, 2));
    jobs.push(third);
    daemon.ok("suspend 1");
    assert!(
        wait_until(Duration::from_secs(10), || pids
            .iter()
            .any(|pid| stopped(*pid))),
        "no job was ever stopped"
    );
    (jobs, pids)
}

#[test]
fn scored_under_sigterm_kills_and_reaps_everything() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("50ms")
        .arg("--kill-grace")
        .arg("1s")
        .start();
    let (mut jobs, pids) = jobs_in_every_state(&daemon);
    let started = Instant::now();
    let status = daemon.stop().expect("scored exits");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "scored took {:?} to exit",
        started.elapsed()
    );
    assert!(status.success(), "scored exited with {status}");
    // Nothing is left, and above all nothing is left stopped.
    let left: Vec<(i32, char)> = pids
        .iter()
        .filter_map(|pid| proc_stat(*pid).map(|stat| (*pid, stat.state)))
        .filter(|(_, state)| *state != 'Z' && *state != 'X')
        .collect();
    assert!(left.is_empty(), "processes left by scored: {left:?}");
    assert!(daemon.all_job_pids().is_empty());
    for job in &mut jobs {
        let (status, message) = job.wait(Duration::from_secs(10));
        assert!(!status.success());
        assert!(message.contains("shutting down"), "{message}");
    }
}

/// The ppid of `pid` (a rank's keeper).
fn parent_of(pid: i32) -> i32 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    rest.split_whitespace()
        .nth(1)
        .and_then(|ppid| ppid.parse().ok())
        .unwrap_or(0)
}

/// The processes of every job outlive a scored killed with SIGKILL (their
/// keepers hold them): the running ones run, the suspended one stays
/// stopped; the next scored takes them over, and its console ends them.
#[test]
fn when_scored_is_killed_its_job_processes_live_on() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("50ms")
        .start();
    let (mut jobs, pids) = gang_pair_and_held_job(&daemon);
    let held = *pids.last().expect("the held job's rank");
    daemon.kill_hard();
    std::thread::sleep(Duration::from_millis(500));
    let gone: Vec<i32> = pids.iter().copied().filter(|pid| !alive(*pid)).collect();
    assert!(gone.is_empty(), "job processes died with scored: {gone:?}");
    assert!(
        stopped(held),
        "the suspended job ran while no scored was there"
    );
    daemon.start_again();
    assert!(
        stopped(held),
        "the suspended job was continued by the takeover"
    );
    for id in 1..=3 {
        daemon.ok(&format!("kill {id} KILL"));
    }
    for job in &mut jobs {
        let (status, stderr) = job.wait(Duration::from_secs(20));
        assert_eq!(status.code(), Some(137), "{stderr}");
    }
    assert!(all_gone(&pids, Duration::from_secs(10)));
    assert!(wait_until(Duration::from_secs(5), || daemon
        .all_job_pids()
        .is_empty()));
}

/// A rank's own children outlive a killed scored with their rank (its
/// keeper holds the job), and the next scored ends them with their job.
#[test]
fn when_scored_is_killed_a_grandchild_lives_on_with_its_job() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    let script = format!("{} spin 0; true", testprog());
    let mut job = daemon.spawn(&["-nodes=1", "sh", "-c", &script]);
    let grandchild = job.wait_pids(1)[0];
    let rank = proc_stat(grandchild).expect("spinner").pgrp;
    daemon.kill_hard();
    std::thread::sleep(Duration::from_millis(500));
    assert!(alive(rank) && alive(grandchild), "the job died with scored");
    daemon.start_again();
    daemon.ok("kill 1 KILL");
    let (status, stderr) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(137), "{stderr}");
    assert!(
        all_gone(&[rank, grandchild], Duration::from_secs(10)),
        "a process of the killed job is left"
    );
}

/// A job whose keeper is gone too (killed while no scored ran): its rank
/// died with the keeper, but a grandchild (whose parent-death signal the
/// kernel cleared at its fork) runs on in the job's cgroup; the next
/// scored kills it, removes the cgroup, and records the job lost.
#[test]
fn the_next_scored_kills_what_a_job_without_a_keeper_left_in_its_cgroup() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    if !daemon.log().contains("jobs are held in cgroups") {
        println!(
            "skipped: no cgroup hierarchy in use (needs root and a writable cgroup hierarchy)"
        );
        return;
    }
    let script = format!("{} spin 0; true", testprog());
    let mut job = daemon.spawn(&["-nodes=1", "sh", "-c", &script]);
    let grandchild = job.wait_pids(1)[0];
    let rank = proc_stat(grandchild).expect("spinner").pgrp;
    let keeper = parent_of(rank);
    daemon.kill_hard();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(keeper), Signal::SIGKILL);
    assert!(
        all_gone(&[keeper, rank], Duration::from_secs(5)),
        "the rank must die with its keeper"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        alive(grandchild),
        "the grandchild is expected to outlive its keeper"
    );
    daemon.start_again();
    assert!(
        all_gone(&[grandchild], Duration::from_secs(5)),
        "the next scored left the job's process running:\n{}",
        daemon.log()
    );
    assert!(
        daemon
            .log()
            .contains("killing a process left by a daemon that is gone"),
        "{}",
        daemon.log()
    );
    let (status, stderr) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(137), "{stderr}");
    assert!(
        stderr.contains("keeper could not be found again"),
        "{stderr}"
    );
}
