//! Gang scheduling on real CPU-bound processes, witnessed through
//! /proc: alternation, space partitioning, exclusive mode, preemption,
//! queue states, holds, and jobs that leave their session.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use scored_tests::*;

fn running(pids: &[i32]) -> usize {
    pids.iter()
        .filter(|pid| proc_stat(**pid).is_some_and(|stat| stat.state == 'R'))
        .count()
}

/// The longest a sample of process states may take to count: well under
/// the shortest time slice these tests use (100 ms), so that no switch
/// and switch back can fall within one. A sample that took longer (the
/// test was preempted on a loaded machine) says nothing and is dropped.
const SAMPLE_BOUND: Duration = Duration::from_millis(20);

/// How many of `pids` are running, from two passes over their states
/// that agree; `None` when a state changed between them, or when the
/// passes took longer than [`SAMPLE_BOUND`]. The reads of /proc are not
/// atomic: a switch between reading the job it stops and the one it
/// continues would show both running. States that are the same in both
/// passes held together at the moment between the passes.
fn running_at_once(pids: &[i32]) -> Option<usize> {
    let states = || -> Vec<Option<char>> {
        pids.iter()
            .map(|pid| proc_stat(*pid).map(|stat| stat.state))
            .collect()
    };
    let started = Instant::now();
    let first = states();
    let agree = states() == first;
    (agree && started.elapsed() < SAMPLE_BOUND)
        .then(|| first.iter().filter(|state| **state == Some('R')).count())
}

fn cpu(pids: &[i32]) -> u64 {
    pids.iter()
        .filter_map(|pid| proc_stat(*pid))
        .map(|stat| stat.cpu_ticks)
        .sum()
}

/// Samples for `duration`; returns how often processes of both sets were
/// seen running at once, and how many samples were taken.
///
/// The sampling is `scored-testprog watch`'s (read it for how a sample
/// is taken and when it counts): a process of its own at the daemon's
/// priority, so that the samples are quick enough on a loaded machine.
/// Panics if fewer than ten samples were taken.
fn overlap(a: &[i32], b: &[i32], duration: Duration) -> (u64, u64) {
    let list = |pids: &[i32]| -> String {
        pids.iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let output = std::process::Command::new(testprog())
        .args([
            "watch",
            &duration.as_secs_f64().to_string(),
            &list(a),
            &list(b),
        ])
        .output()
        .expect("run the watcher");
    let report = stdout(&output);
    let field = |name: &str| -> u64 { report_field(&report, "the watcher", name) };
    let (both, samples) = (field("both"), field("samples"));
    if both > 0 {
        eprintln!("{report}");
    }
    assert!(
        samples >= 10,
        "only {samples} samples of process states in {duration:?} were quick enough"
    );
    (both, samples)
}

#[test]
fn two_full_width_gang_jobs_alternate_and_share_the_cpu() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .start();
    let mut first = daemon.spawn(&["-nodes=2,priority=1", &testprog(), "spin", "0"]);
    let a = first.wait_pids(2);
    let mut second = daemon.spawn(&["-nodes=2,priority=1", &testprog(), "spin", "0"]);
    let b = second.wait_pids(2);
    let (cpu_a, cpu_b) = (cpu(&a), cpu(&b));
    let (both, samples) = overlap(&a, &b, Duration::from_secs(10));
    assert_eq!(
        both, 0,
        "processes of both jobs were running at once in {both} of {samples} samples"
    );
    let (used_a, used_b) = ((cpu(&a) - cpu_a) as f64, (cpu(&b) - cpu_b) as f64);
    let share = used_a / (used_a + used_b);
    assert!(
        (0.35..=0.65).contains(&share),
        "job 1 got {:.0}% of the CPU",
        share * 100.0
    );
    let switches = daemon.json("status")["switches"].as_u64().unwrap_or(0);
    assert!(
        switches >= 20,
        "only {switches} switches in 10 s of 100 ms slices"
    );
    for job in [&first, &second] {
        job.signal(Signal::SIGINT);
    }
    first.wait(Duration::from_secs(30));
    second.wait(Duration::from_secs(30));
}

#[test]
fn one_host_jobs_share_the_hosts_space_and_time() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .start();
    let mut jobs: Vec<Job> = Vec::new();
    let mut pids: Vec<i32> = Vec::new();
    for _ in 0..2 {
        let mut job = daemon.spawn(&["-nodes=1,priority=1", &testprog(), "spin", "0"]);
        pids.push(job.wait_pids(1)[0]);
        jobs.push(job);
    }
    // Two one-host jobs on two hosts run together and are never stopped.
    let end = Instant::now() + Duration::from_secs(2);
    let mut together = false;
    while Instant::now() < end {
        assert!(
            !stopped(pids[0]) && !stopped(pids[1]),
            "a job was stopped though each has a host of its own"
        );
        together |= running(&pids) == 2;
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(together, "the two jobs never ran at the same time");
    // A third one time-shares with one of them; all three make progress
    // and at most two run at any moment.
    let mut third = daemon.spawn(&["-nodes=1,priority=1", &testprog(), "spin", "0"]);
    pids.push(third.wait_pids(1)[0]);
    jobs.push(third);
    // Sampled for 3 s, and on until each has run 10 ticks: the jobs run
    // at the nice value of their scrun, which on a loaded machine may get
    // them little of a CPU.
    let before: Vec<u64> = pids.iter().map(|pid| cpu(&[*pid])).collect();
    let progressed = || {
        pids.iter()
            .zip(&before)
            .all(|(pid, start)| cpu(&[*pid]) > start + 10)
    };
    let began = Instant::now();
    let (mut samples, mut taken) = (0, 0);
    while began.elapsed() < Duration::from_secs(3)
        || (!progressed() && began.elapsed() < Duration::from_secs(60))
    {
        samples += 1;
        if let Some(n) = running_at_once(&pids) {
            taken += 1;
            assert!(n <= 2, "three one-host jobs ran on two hosts at once");
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    assert!(
        taken * 2 > samples,
        "only {taken} of {samples} samples were taken between switches"
    );
    for (pid, start) in pids.iter().zip(&before) {
        let ran = cpu(&[*pid]) - start;
        assert!(
            ran > 10,
            "job process {pid} ran {ran} ticks in {:?}",
            began.elapsed()
        );
    }
    for job in &jobs {
        job.signal(Signal::SIGINT);
    }
    for job in &mut jobs {
        job.wait(Duration::from_secs(30));
    }
}

#[test]
fn an_exclusive_job_is_never_stopped_by_equal_or_lower_priority() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("50ms")
        .start();
    let mut first = daemon.spawn(&["-nodes=2,priority=0", &testprog(), "spin", "0"]);
    let a = first.wait_pids(2);
    let mut same = daemon.spawn(&["-nodes=2,priority=0", &testprog(), "spin", "0"]);
    let mut lower = daemon.spawn(&["-nodes=1,priority=1", &testprog(), "spin", "0"]);
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        assert!(
            a.iter().all(|pid| !stopped(*pid)),
            "the exclusive job was stopped"
        );
        std::thread::sleep(Duration::from_millis(3));
    }
    assert!(
        daemon.all_job_pids().iter().all(|pid| a.contains(pid)),
        "no other job may have started"
    );
    for job in [&first, &same, &lower] {
        job.signal(Signal::SIGINT);
    }
    for job in [&mut first, &mut same, &mut lower] {
        job.wait(Duration::from_secs(30));
    }
}

#[test]
fn a_higher_queue_preempts_at_once_and_the_lower_job_continues_after() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("60s")
        .start();
    let mut low = daemon.spawn(&["-nodes=2,priority=2", &testprog(), "spin", "0"]);
    let a = low.wait_pids(2);
    let submitted = Instant::now();
    let mut high = daemon.spawn(&["-nodes=2,priority=0", &testprog(), "spin", "1"]);
    let b = high.wait_pids(2);
    assert!(
        wait_until(Duration::from_secs(5), || a.iter().all(|pid| stopped(*pid))),
        "the lower job was not stopped"
    );
    // "At once": well before the 60 s slice would end, however loaded
    // the machine.
    assert!(submitted.elapsed() < Duration::from_secs(20));
    let (both, _) = overlap(&a, &b, Duration::from_millis(500));
    assert_eq!(both, 0);
    let (status, _) = high.wait(Duration::from_secs(30));
    assert!(status.success());
    assert!(
        wait_until(Duration::from_secs(5), || a
            .iter()
            .all(|pid| !stopped(*pid))),
        "the lower job did not continue after the higher one ended"
    );
    low.signal(Signal::SIGINT);
    low.wait(Duration::from_secs(30));
}

#[test]
fn a_deactivated_queue_creates_no_process_until_activated() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .rc("queue 2 deactivate\n")
        .start();
    let mut job = daemon.spawn(&["-priority=2", &testprog(), "spin", "0"]);
    assert!(wait_until(Duration::from_secs(10), || daemon
        .json("jobs")
        .as_array()
        .is_some_and(|jobs| !jobs.is_empty())));
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        daemon.all_job_pids().is_empty(),
        "a job of a deactivated queue has processes"
    );
    assert_eq!(daemon.job_field(1, "state"), "queued");
    daemon.ok("queue 2 activate");
    let pids = job.wait_pids(1);
    assert!(alive(pids[0]));
    daemon.ok("queue 2 deactivate");
    assert!(
        wait_until(Duration::from_secs(5), || stopped(pids[0])),
        "deactivating did not stop the job"
    );
    // Stopped by the deactivation, it would get an interrupt only once
    // it ran again: killed from the console instead.
    daemon.ok("kill 1");
    job.wait(Duration::from_secs(30));
}

#[test]
fn a_disabled_queue_rejects_submissions() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    daemon.ok("queue 1 disable");
    let output = daemon.run(&["-priority=1", "true"]);
    assert_eq!(code(&output), Some(scored_proto::exitcode::REJECTED));
    assert!(stderr(&output).contains("disabled"), "{}", stderr(&output));
    assert_eq!(code(&daemon.run(&["-priority=2", "true"])), Some(0));
    daemon.ok("queue 1 enable");
    assert_eq!(code(&daemon.run(&["-priority=1", "true"])), Some(0));
}

#[test]
fn a_held_job_stays_stopped_until_resumed() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("50ms")
        .start();
    let mut held = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let a = held.wait_pids(2);
    let mut other = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    other.wait_pids(2);
    daemon.ok("suspend 1");
    assert!(wait_until(Duration::from_secs(5), || a
        .iter()
        .all(|pid| stopped(*pid))));
    for line in [
        "queue 1 deactivate",
        "queue 1 activate",
        "move 1 2",
        "move 1 1",
        "timeslice 20ms",
    ] {
        daemon.ok(line);
        let end = Instant::now() + Duration::from_millis(400);
        while Instant::now() < end {
            assert!(
                a.iter().all(|pid| stopped(*pid)),
                "the held job ran after '{line}'"
            );
            std::thread::sleep(Duration::from_millis(3));
        }
    }
    assert_eq!(daemon.job_field(1, "state"), "held");
    daemon.ok("resume 1");
    let mut ran = false;
    assert!(wait_until(Duration::from_secs(5), || {
        ran |= a.iter().all(|pid| !stopped(*pid));
        ran
    }));
    for job in [&held, &other] {
        job.signal(Signal::SIGINT);
    }
    held.wait(Duration::from_secs(30));
    other.wait(Duration::from_secs(30));
}

#[test]
fn ctrl_z_on_scrun_holds_the_job_and_fg_resumes_it() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let mut job = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let pids = job.wait_pids(2);
    job.signal(Signal::SIGTSTP);
    assert!(
        wait_until(Duration::from_secs(5), || pids
            .iter()
            .all(|pid| stopped(*pid))),
        "the job kept running"
    );
    assert!(
        wait_until(Duration::from_secs(5), || stopped(job.pid())),
        "scrun did not stop itself"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        pids.iter().all(|pid| stopped(*pid)),
        "the scheduler resumed a held job"
    );
    job.signal(Signal::SIGCONT);
    assert!(
        wait_until(Duration::from_secs(5), || pids
            .iter()
            .all(|pid| !stopped(*pid))),
        "fg did not resume the job"
    );
    job.signal(Signal::SIGINT);
    job.wait(Duration::from_secs(30));
}

#[test]
fn a_job_in_a_new_session_is_still_stopped() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .start();
    // `setsid -w` forks the spinner into a session of its own and waits for it.
    let mut escaper = daemon.spawn(&["-nodes=2", "setsid", "-w", &testprog(), "spin", "0"]);
    let a = escaper.wait_pids(2);
    for pid in &a {
        let stat = proc_stat(*pid).expect("spinner");
        assert_eq!(stat.session, *pid, "the spinner leads a session of its own");
    }
    let mut other = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let b = other.wait_pids(2);
    // Let discovery see the escaped processes, then watch.
    std::thread::sleep(Duration::from_millis(500));
    let (both, samples) = overlap(&a, &b, Duration::from_secs(3));
    assert_eq!(
        both, 0,
        "the escaped job ran together with the other in {both} of {samples} samples"
    );
    assert!(a.iter().all(|pid| cpu(&[*pid]) > 0));
    for job in [&escaper, &other] {
        job.signal(Signal::SIGINT);
    }
    escaper.wait(Duration::from_secs(30));
    other.wait(Duration::from_secs(30));
    assert!(
        wait_until(Duration::from_secs(10), || a.iter().all(|pid| !alive(*pid))),
        "escaped processes survived"
    );
}

/// A gang queue at level 2 (`mode=gang` brings it): two jobs without an
/// estimate time-share their hosts as in any gang queue, never running at
/// once; a third that needs the same hosts waits, and starts when one of
/// them ends. `queues` shows the level.
#[test]
fn at_level_two_two_jobs_time_share_and_a_third_waits() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .rc("queue 1 set mode=gang\n")
        .start();
    let queues = daemon.json("queues");
    let level = queues
        .as_array()
        .and_then(|queues| queues.iter().find(|queue| queue["queue"] == 1))
        .map(|queue| queue["mpl"].clone());
    assert_eq!(level, Some(serde_json::json!(2)), "queues: {queues}");
    let mut first = daemon.spawn(&["-nodes=2,priority=1", &testprog(), "spin", "0"]);
    let a = first.wait_pids(2);
    let mut second = daemon.spawn(&["-nodes=2,priority=1", &testprog(), "spin", "0"]);
    let b = second.wait_pids(2);
    let (cpu_a, cpu_b) = (cpu(&a), cpu(&b));
    let (both, samples) = overlap(&a, &b, Duration::from_secs(3));
    assert_eq!(
        both, 0,
        "processes of both jobs were running at once in {both} of {samples} samples"
    );
    assert!(
        cpu(&a) > cpu_a && cpu(&b) > cpu_b,
        "both jobs run in turn: {} and {} ticks",
        cpu(&a) - cpu_a,
        cpu(&b) - cpu_b
    );
    let mut third = daemon.spawn(&["-nodes=2,priority=1", &testprog(), "spin", "0"]);
    assert!(
        wait_until(Duration::from_secs(20), || daemon.job_state(3) == "queued"),
        "job 3 is {}",
        daemon.job_state(3)
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(daemon.job_state(3), "queued", "a third job above the level");
    assert!(daemon.job_pids(3).is_empty(), "job 3 has processes");
    first.signal(Signal::SIGINT);
    first.wait(Duration::from_secs(30));
    let c = third.wait_pids(2);
    let (both, samples) = overlap(&b, &c, Duration::from_secs(2));
    assert_eq!(
        both, 0,
        "jobs 2 and 3 overlapped in {both} of {samples} samples"
    );
    for job in [&second, &third] {
        job.signal(Signal::SIGINT);
    }
    second.wait(Duration::from_secs(30));
    third.wait(Duration::from_secs(30));
}

/// Two clusters of one host each (a fast and a slow one), a gang queue at
/// level 2: five one-rank jobs, each submitted with `-wait`, are placed
/// two on each host wherever admission booked them, and the fifth waits;
/// when a job ends, the waiting one takes its place on that host.
#[test]
fn a_waiting_job_is_placed_on_any_cluster_with_room_under_the_level() {
    let daemon = Daemon::builder()
        .hosts("f0 cpus=0 speed=2\ns0 cpus=1 speed=1\n")
        .timeslice("100ms")
        .rc("queue 1 set mode=gang\n")
        .start();
    let mut jobs = Vec::new();
    for id in 1..=5u64 {
        jobs.push(daemon.spawn(&["-wait,priority=1", &testprog(), "spin", "0"]));
        assert!(
            wait_until(Duration::from_secs(20), || !daemon.job_state(id).is_empty()),
            "job {id} was not admitted"
        );
    }
    let host = |id: u64| daemon.job_field(id, "hosts").to_string();
    for id in 1..=4u64 {
        assert!(
            wait_until(Duration::from_secs(20), || daemon.job_state(id) != "queued"),
            "job {id} is {}",
            daemon.job_state(id)
        );
    }
    let hosts: Vec<String> = (1..=4).map(host).collect();
    for name in ["f0", "s0"] {
        assert_eq!(
            hosts.iter().filter(|hosts| hosts.contains(name)).count(),
            2,
            "two jobs on {name}: {hosts:?}"
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        daemon.job_state(5),
        "queued",
        "the fifth job is above the level"
    );
    let on_s0 = (1..=4u64)
        .find(|id| host(*id).contains("s0"))
        .expect("a job on s0");
    let mut ended = jobs.remove(on_s0 as usize - 1);
    ended.signal(Signal::SIGINT);
    ended.wait(Duration::from_secs(30));
    assert!(
        wait_until(Duration::from_secs(20), || daemon.job_state(5) != "queued"),
        "job 5 is {}",
        daemon.job_state(5)
    );
    assert!(host(5).contains("s0"), "job 5 on {}", host(5));
    for mut job in jobs {
        job.signal(Signal::SIGINT);
        job.wait(Duration::from_secs(30));
    }
}

/// The share of the CPU the one job of user b gets on one host beside
/// three jobs of user a, in a gang queue with `share`.
fn lone_users_share(users: &TestUsers, share: &str) -> f64 {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let first = online
        .trim()
        .split([',', '-'])
        .next()
        .unwrap_or("0")
        .to_string();
    let daemon = Daemon::builder()
        .hosts(&format!("host0 cpus={first}\n"))
        .timeslice("100ms")
        .rc(&format!("queue 1 set share={share}\n"))
        .start();
    let mut jobs = Vec::new();
    let mut a_pids = Vec::new();
    for _ in 0..3 {
        let mut job = daemon.spawn_as(&users.a, &["-priority=1", &testprog(), "spin", "0"]);
        a_pids.extend(job.wait_pids(1));
        jobs.push(job);
    }
    let mut lone = daemon.spawn_as(&users.b, &["-priority=1", &testprog(), "spin", "0"]);
    let b_pids = lone.wait_pids(1);
    jobs.push(lone);
    std::thread::sleep(Duration::from_secs(1));
    let (a_before, b_before) = (cpu(&a_pids), cpu(&b_pids));
    // At least 6 s, and on until the jobs have run 100 ticks between them
    // (a loaded machine gives the host's CPU to others too): the shares
    // are of the CPU the jobs got, whatever the time it took.
    let started = Instant::now();
    let used = || (cpu(&a_pids) - a_before, cpu(&b_pids) - b_before);
    while started.elapsed() < Duration::from_secs(6)
        || (used().0 + used().1 <= 100 && started.elapsed() < Duration::from_secs(120))
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let (a_used, b_used) = used();
    for job in &jobs {
        job.signal(Signal::SIGINT);
    }
    for job in &mut jobs {
        job.wait(Duration::from_secs(30));
    }
    assert!(
        a_used + b_used > 100,
        "the four jobs ran only {} ticks in {:?}",
        a_used + b_used,
        started.elapsed()
    );
    b_used as f64 / (a_used + b_used) as f64
}

/// One host, three jobs of one user and one of another: by user, the
/// lone job gets about half the CPU; by job, about a quarter.
#[test]
fn a_lone_users_job_gets_half_a_host_shared_by_user_and_a_quarter_by_job() {
    let Some(users) =
        test_users("a_lone_users_job_gets_half_a_host_shared_by_user_and_a_quarter_by_job")
    else {
        return;
    };
    let by_user = lone_users_share(&users, "user");
    assert!(
        by_user >= 0.4,
        "shared by user, the lone job got {:.0}% of the CPU",
        by_user * 100.0
    );
    let by_job = lone_users_share(&users, "job");
    println!("the lone job's share of the CPU: {by_user:.2} by user, {by_job:.2} by job");
    assert!(
        (0.15..=0.35).contains(&by_job),
        "shared by job, the lone job got {:.0}% of the CPU",
        by_job * 100.0
    );
}

/// A trace instance of the kernel's own, recording one process's changes
/// of its CPU latency request (the `power:pm_qos_update_request` event);
/// removed when dropped.
pub(crate) struct QosTrace {
    dir: std::path::PathBuf,
}

impl QosTrace {
    /// `None` where tracefs or the event is not there.
    pub(crate) fn of(pid: u32) -> Option<QosTrace> {
        let dir = std::path::PathBuf::from(format!(
            "/sys/kernel/tracing/instances/scored-e2e-qos-{}-{pid}",
            std::process::id()
        ));
        std::fs::create_dir(&dir).ok()?;
        let trace = QosTrace { dir };
        let event = trace.dir.join("events/power/pm_qos_update_request");
        std::fs::write(event.join("filter"), format!("common_pid == {pid}")).ok()?;
        std::fs::write(event.join("enable"), "1").ok()?;
        Some(trace)
    }

    /// The values the process asked for, in order.
    pub(crate) fn values(&self) -> Vec<i64> {
        std::fs::read_to_string(self.dir.join("trace"))
            .unwrap_or_default()
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.split("value=").nth(1)?.trim().parse().ok())
            .collect()
    }
}

impl Drop for QosTrace {
    fn drop(&mut self) {
        let event = self.dir.join("events/power/pm_qos_update_request");
        let _ = std::fs::write(event.join("enable"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// While a switch waits for its keeper to confirm its stops, scored asks
/// for no CPU wake-up latency (its request at 0, so that idle CPUs poll), and it
/// lets go of the request (back at the default, -1) before the next switch
/// and once no job is switched: the kernel's trace of its requests shows
/// one hold and one release a switch, ending released.
#[test]
fn the_cpu_latency_is_held_at_zero_during_each_switch_only() {
    if !is_root() {
        eprintln!("skipped: the CPU latency request and tracefs need root");
        return;
    }
    if !std::path::Path::new("/dev/cpu_dma_latency").exists() {
        eprintln!("skipped: no /dev/cpu_dma_latency");
        return;
    }
    // More ranks a job than CPUs: a stop of such a job always waits for
    // its keeper's answer.
    let ranks = std::thread::available_parallelism().map_or(2, usize::from) + 1;
    let hosts: String = (0..ranks).map(|host| format!("host{host}\n")).collect();
    let nodes = format!("-nodes={ranks},priority=1");
    let daemon = Daemon::builder().hosts(&hosts).timeslice("50ms").start();
    let Some(trace) = QosTrace::of(daemon.pid()) else {
        eprintln!("skipped: no tracefs instance with the power:pm_qos_update_request event");
        return;
    };
    let mut first = daemon.spawn(&[&nodes, &testprog(), "spin", "0"]);
    first.wait_pids(ranks);
    let mut second = daemon.spawn(&[&nodes, &testprog(), "spin", "0"]);
    second.wait_pids(ranks);
    std::thread::sleep(Duration::from_secs(2));
    let switches = daemon.json("status")["switches"].as_u64().unwrap_or(0);
    assert!(
        switches >= 10,
        "only {switches} switches in 2 s of 50 ms slices"
    );
    for job in [&first, &second] {
        job.signal(Signal::SIGINT);
    }
    first.wait(Duration::from_secs(30));
    second.wait(Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    let values = trace.values();
    let holds = values.iter().filter(|value| **value == 0).count() as u64;
    assert!(
        holds >= switches / 2,
        "the CPU latency was held {holds} times in {switches} switches: {values:?}"
    );
    // Each hold is let go of before the next one, and the last at the end.
    for pair in values.chunks(2) {
        assert_eq!(
            pair,
            [0, -1],
            "not one hold and one release a switch: {values:?}"
        );
    }
}

/// Two jobs of more ranks than the machine has CPUs, whose stops only
/// their keepers' answers confirm (each told to the keeper before its
/// SIGSTOPs, each continue noted on its pipe before its SIGCONTs):
/// switched many times, none of scored's own continues is taken for one
/// from outside; a SIGCONT sent from outside to a switched-out rank is
/// undone at once, and scored hears of it.
#[test]
fn a_wide_job_tells_scored_continues_from_one_from_outside() {
    let n = std::thread::available_parallelism().map_or(2, usize::from) + 2;
    let hosts: String = (0..n).map(|idx| format!("h{idx} cores=1\n")).collect();
    let daemon = Daemon::builder().hosts(&hosts).timeslice("20ms").start();
    let nodes = format!("-nodes={n},priority=1");
    let mut first = daemon.spawn(&[&nodes, &testprog(), "spin", "0"]);
    let a = first.wait_pids(n);
    let mut second = daemon.spawn(&[&nodes, &testprog(), "spin", "0"]);
    let b = second.wait_pids(n);
    let switches = || daemon.json("status")["switches"].as_u64().unwrap_or(0);
    let before = switches();
    assert!(
        wait_until(Duration::from_secs(30), || switches() >= before + 40),
        "only {} switches of 20 ms slices",
        switches() - before
    );
    // Each stop is confirmed by its keeper's answer; without that answer,
    // by /proc once the fallback delay (20 ms) has passed.
    let median = daemon.json("status")["switch latency"]["median"]
        .as_f64()
        .unwrap_or(f64::MAX);
    assert!(
        median < 0.010,
        "the median switch took {median} s: the keepers' answers did not confirm the stops"
    );
    assert!(
        !daemon.log().contains("continued from outside"),
        "a continue of scored's was taken for one from outside:\n{}",
        daemon.log()
    );
    // Slices long enough to act in one: the rank is continued from
    // outside right after its job was switched out.
    daemon.ok("timeslice 3s");
    let cannot_run = |pid: i32| proc_stat(pid).is_some_and(|stat| matches!(stat.state, 'T' | 'D'));
    assert!(
        wait_until(Duration::from_secs(10), || running(&a) > 0),
        "the first job never ran again"
    );
    assert!(
        wait_until(Duration::from_secs(10), || a
            .iter()
            .all(|pid| cannot_run(*pid))),
        "the first job was never switched out whole"
    );
    let switched_out_at = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(a[0]), Signal::SIGCONT)
        .expect("SIGCONT to a rank");
    let held = wait_until(Duration::from_millis(1500), || {
        cannot_run(a[0]) && daemon.log().contains("continued from outside")
    });
    let in_slice = switched_out_at.elapsed() < Duration::from_millis(2500);
    assert!(
        held || !in_slice,
        "a rank continued from outside ran on (state {:?}), or scored did not hear of it:\n{}",
        proc_stat(a[0]).map(|stat| stat.state),
        daemon.log()
    );
    assert!(
        running(&b) > 0 || !in_slice,
        "the second job lost its slice"
    );
    for job in [&first, &second] {
        job.signal(Signal::SIGINT);
    }
    first.wait(Duration::from_secs(30));
    second.wait(Duration::from_secs(30));
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
}

/// A job of more ranks than CPUs has each stop confirmed by its keeper,
/// which waits for every rank in turn: ranks that end one after another
/// while it is switched every 10 ms (some perhaps just before a stop)
/// end the job whole, each rank's output and status told, and the job it
/// shares its host with goes on being switched.
#[test]
fn ranks_that_end_between_a_wide_jobs_switches_end_it_whole() {
    let n = (std::thread::available_parallelism().map_or(2, usize::from) * 3).min(24);
    let daemon = Daemon::builder()
        .hosts(&format!("h0 cores={n}\n"))
        .timeslice("10ms")
        .start();
    let nodes = format!("-nodes={n},priority=1");
    let mut other = daemon.spawn(&[&nodes, &testprog(), "spin", "0"]);
    let b = other.wait_pids(n);
    let switches = || daemon.json("status")["switches"].as_u64().unwrap_or(0);
    // Each rank spins for its own share of CPU time, then says so and ends.
    let script = format!(
        "{} spin 0.0$((SCORE_RANK % 9 + 1)) >/dev/null; echo rank $SCORE_RANK done",
        testprog()
    );
    for round in 0..3 {
        let before = switches();
        let started = Instant::now();
        let mut ending = daemon.spawn(&[&nodes, "sh", "-c", &script]);
        let (status, stderr) = ending.wait(Duration::from_secs(120));
        // Under a second of CPU time on a host it shares half the time:
        // a lost end, or a stop that is never confirmed, shows as seconds more.
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(20),
            "round {round}: the job took {took:?}"
        );
        assert!(
            status.success(),
            "round {round}: the job ended with {status:?}:\n{stderr}\n{}",
            daemon.log()
        );
        let lines = ending.lines_with("rank ");
        let mut done: Vec<usize> = lines
            .iter()
            .filter_map(|line| line.strip_suffix(" done")?.parse().ok())
            .collect();
        done.sort_unstable();
        assert_eq!(
            done,
            (0..n).collect::<Vec<_>>(),
            "round {round}: not every rank's end was told: {lines:?}"
        );
        assert!(
            switches() > before + 4,
            "round {round}: the two jobs were not switched while the ranks ended"
        );
    }
    // Its stops were confirmed by the keepers' answers, not by /proc once
    // the fallback delay (20 ms) had passed.
    let median = daemon.json("status")["switch latency"]["median"]
        .as_f64()
        .unwrap_or(f64::MAX);
    assert!(median < 0.010, "the median switch took {median} s");
    // The other job runs on alone, whole.
    assert!(
        wait_until(Duration::from_secs(10), || running(&b) == b.len()),
        "the job left on the host does not run ({} of {} running)",
        running(&b),
        b.len()
    );
    other.signal(Signal::SIGINT);
    other.wait(Duration::from_secs(30));
}
