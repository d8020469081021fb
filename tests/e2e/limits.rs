//! Limits and accounting on real processes — memory shares at
//! admission, waiting for resources, memory, CPU time and disk limits,
//! residency demotion, cluster choice by speed, `::` and `==` jobs, and
//! `scrun -stat`.

use std::time::Duration;

use nix::sys::signal::Signal;
use scored_tests::*;

/// One host with 1G of memory: limits in these tests are shares of it.
fn one_gig_host() -> String {
    let hosts = two_hosts();
    let first = hosts.lines().next().unwrap_or("host0").to_string();
    format!("{first} memory=1G\n")
}

#[test]
fn a_half_memory_queue_admits_two_jobs_and_rejects_a_third() {
    let daemon = Daemon::builder()
        .hosts(&one_gig_host())
        .rc("queue 1 set memory=50%\n")
        .start();
    let mut first = daemon.spawn(&["-priority=1", "sleep", "30"]);
    let mut second = daemon.spawn(&["-priority=1", "sleep", "30"]);
    assert!(wait_until(Duration::from_secs(10), || daemon
        .json("jobs")
        .as_array()
        .is_some_and(|jobs| jobs.len() == 2)));
    let third = daemon.run(&["-priority=1", "true"]);
    assert_eq!(code(&third), Some(scored_proto::exitcode::REJECTED));
    let message = stderr(&third);
    assert!(
        message.contains("memory") && message.contains("512M"),
        "{message}"
    );
    let clusters = daemon.json("clusters");
    assert_eq!(clusters[0]["memory reserved"], 1u64 << 30);
    for job in [&first, &second] {
        job.signal(Signal::SIGINT);
    }
    first.wait(Duration::from_secs(30));
    second.wait(Duration::from_secs(30));
}

#[test]
fn a_waiting_job_is_admitted_when_one_ends() {
    let daemon = Daemon::builder()
        .hosts(&one_gig_host())
        .rc("queue 1 set memory=50%\n")
        .start();
    let mut first = daemon.spawn(&["-priority=1", "sleep", "30"]);
    let mut second = daemon.spawn(&["-priority=1", "sleep", "30"]);
    assert!(wait_until(Duration::from_secs(10), || daemon
        .json("jobs")
        .as_array()
        .is_some_and(|jobs| jobs.len() == 2)));
    let mut third = daemon.spawn(&["-priority=1,wait", "echo", "third ran"]);
    assert!(wait_until(Duration::from_secs(10), || daemon
        .json("status")["waiting"]
        == 1));
    first.signal(Signal::SIGINT);
    first.wait(Duration::from_secs(30));
    let lines = third.wait_lines("third ran", 1);
    assert_eq!(lines.len(), 1);
    let (status, message) = third.wait(Duration::from_secs(30));
    assert!(status.success(), "{message}");
    assert!(message.contains("waiting for resources"), "{message}");
    second.signal(Signal::SIGINT);
    second.wait(Duration::from_secs(30));
}

#[test]
fn a_job_allocating_past_its_memory_limit_is_killed_for_memory() {
    let daemon = Daemon::builder()
        .hosts(&one_gig_host())
        .timeslice("100ms")
        .rc("cluster 0 limit memory=64M\nqueue 1 set memory=100%\n")
        .start();
    let output = daemon.run(&["-priority=1", &testprog(), "alloc", "200M", "30"]);
    assert_eq!(
        code(&output),
        Some(scored_proto::exitcode::LIMIT),
        "{}",
        stderr(&output)
    );
    let message = stderr(&output);
    assert!(
        message.contains("memory") && message.contains("64M"),
        "{message}"
    );
    assert_eq!(daemon.job_field(1, "state"), "killed");
    let reason = daemon.job_field(1, "reason");
    assert!(
        reason.as_str().is_some_and(|text| text.contains("memory")),
        "{reason}"
    );
}

#[test]
fn the_users_memory_value_lowers_the_limit() {
    let daemon = Daemon::builder()
        .hosts(&one_gig_host())
        .timeslice("100ms")
        .rc("queue 1 set memory=100%\n")
        .start();
    let output = daemon.run(&["-priority=1,memory=32M", &testprog(), "alloc", "100M", "30"]);
    assert_eq!(
        code(&output),
        Some(scored_proto::exitcode::LIMIT),
        "{}",
        stderr(&output)
    );
    assert!(stderr(&output).contains("32M"), "{}", stderr(&output));
}

#[test]
fn a_spinner_past_its_cpu_time_limit_is_killed() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .rc("queue 1 set cputime=2s\n")
        .start();
    let started = std::time::Instant::now();
    let output = daemon.run(&["-priority=1", &testprog(), "spin", "0"]);
    assert_eq!(
        code(&output),
        Some(scored_proto::exitcode::LIMIT),
        "{}",
        stderr(&output)
    );
    assert!(stderr(&output).contains("CPU time"), "{}", stderr(&output));
    assert!(started.elapsed() < Duration::from_secs(30));
    let cpu = daemon.job_field(1, "cpu").as_f64().unwrap_or(0.0);
    assert!((2.0..3.5).contains(&cpu), "killed after {cpu} s of CPU");
}

#[test]
fn a_long_runner_sinks_to_the_next_queue() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .rc("queue 1 set residency=1s\n")
        .start();
    let mut job = daemon.spawn(&["-priority=1", &testprog(), "spin", "0"]);
    job.wait_pids(1);
    assert_eq!(daemon.job_field(1, "queue"), 1);
    assert!(
        wait_until(Duration::from_secs(20), || daemon.job_field(1, "queue")
            == 2),
        "the job stayed in queue 1"
    );
    assert_eq!(daemon.job_field(1, "queues"), serde_json::json!([1, 2]));
    // Queue 2 has no residency time: it stays there.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(daemon.job_field(1, "queue"), 2);
    job.signal(Signal::SIGINT);
    job.wait(Duration::from_secs(30));
}

#[test]
fn a_job_writing_past_its_disk_limit_is_killed() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .rc("cluster 0 limit disk=1G\nqueue 1 set disk=5%\n")
        .start();
    let output = daemon.run(&[
        "-priority=1",
        "sh",
        "-c",
        &format!("exec {} write \"$SCORE_TMPDIR/big\" 200M 30", testprog()),
    ]);
    assert_eq!(
        code(&output),
        Some(scored_proto::exitcode::LIMIT),
        "{}",
        stderr(&output)
    );
    assert!(stderr(&output).contains("disk"), "{}", stderr(&output));
    // The scratch directory went with the job.
    assert!(
        std::fs::read_dir(daemon.sandbox.path.join("state/jobs"))
            .map(|dir| dir.count())
            .unwrap_or(0)
            == 0
    );
}

#[test]
fn a_job_count_limit_admits_one_at_a_time() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .rc("cluster 0 limit jobs=1\n")
        .start();
    let mut first = daemon.spawn(&["sleep", "30"]);
    assert!(wait_until(Duration::from_secs(10), || daemon
        .json("jobs")
        .as_array()
        .is_some_and(|jobs| jobs.len() == 1)));
    let second = daemon.run(&["true"]);
    assert_eq!(code(&second), Some(scored_proto::exitcode::REJECTED));
    assert!(stderr(&second).contains("jobs"), "{}", stderr(&second));
    first.signal(Signal::SIGINT);
    first.wait(Duration::from_secs(30));
    assert_eq!(code(&daemon.run(&["true"])), Some(0));
}

#[test]
fn with_equal_load_the_faster_cluster_gets_the_job() {
    let daemon = Daemon::builder()
        .hosts("slow0 cpugen=x speed=1 cpus=0\nfast0 cpugen=x speed=3 cpus=0\n")
        .start();
    let output = daemon.run(&["sh", "-c", "echo $SCORE_HOST"]);
    assert_eq!(stdout(&output).trim(), "fast0");
    let clusters = daemon.json("clusters");
    assert_eq!(clusters.as_array().map(Vec::len), Some(2));
}

#[test]
fn sequential_stages_run_one_after_another() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let output = daemon.run(&[
        "-nodes=2",
        "sh",
        "-c",
        "echo first $SCORE_RANK",
        "::",
        "sh",
        "-c",
        "echo second $SCORE_RANK",
    ]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(
        lines[..2].iter().all(|line| line.starts_with("first")),
        "{lines:?}"
    );
    assert!(
        lines[2..].iter().all(|line| line.starts_with("second")),
        "{lines:?}"
    );
    let failing = daemon.run(&["sh", "-c", "exit 3", "::", "sh", "-c", "echo never"]);
    assert_eq!(code(&failing), Some(3));
    assert!(!stdout(&failing).contains("never"));
}

#[test]
fn piped_stages_join_rank_by_rank() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let output = daemon.run(&[
        "-nodes=2",
        "sh",
        "-c",
        "echo from-rank-$SCORE_RANK",
        "==",
        "sh",
        "-c",
        "read line; echo \"$SCORE_RANK got $line\"",
    ]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let mut lines: Vec<String> = stdout(&output).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, vec!["0 got from-rank-0", "1 got from-rank-1"]);
    let failing = daemon.run(&["true", "==", "sh", "-c", "cat >/dev/null; exit 4"]);
    assert_eq!(code(&failing), Some(4));
}

#[test]
fn stat_prints_what_the_job_did() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let output = daemon.run(&["-stat", &testprog(), "spin", "1"]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let text = stderr(&output);
    let field = |key: &str| -> String {
        text.lines()
            .find_map(|line| line.trim_start().strip_prefix(&format!("{key}: ")))
            .unwrap_or_else(|| panic!("no {key} in:\n{text}"))
            .to_string()
    };
    let seconds = |key: &str| -> f64 { field(key).trim_end_matches('s').parse().unwrap_or(-1.0) };
    let cpu = seconds("cpu");
    assert!(
        (0.9..1.6).contains(&cpu),
        "a 1 s spinner showed {cpu} s of CPU:\n{text}"
    );
    assert!(seconds("wall") >= cpu * 0.9);
    assert_eq!(field("exit status"), "0");
    assert_eq!(field("queues"), "1");
    assert!(field("peak memory").contains("host0"), "{text}");
}
