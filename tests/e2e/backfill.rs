//! `scrun -time` as a limit, and exclusive queues on real
//! processes: first come, first served without backfill, and EASY
//! backfilling with it (a short job started in a hole before a reserved
//! wide job, which is not delayed).

use std::time::{Duration, Instant};

use scored_tests::*;

fn wait_state(daemon: &Daemon, job: u64, wanted: &[&str]) {
    assert!(
        wait_until(Duration::from_secs(20), || wanted
            .contains(&daemon.job_state(job).as_str())),
        "job {job} never reached {wanted:?}; it is {}",
        daemon.job_state(job)
    );
}

fn seconds(value: &serde_json::Value) -> f64 {
    value.as_f64().unwrap_or(f64::NAN)
}

#[test]
fn a_job_past_its_time_limit_is_ended_with_status_76_and_a_message() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let started = Instant::now();
    // A shell with a trap, as users write them: SIGKILL leaves it no say.
    let output = daemon.run(&[
        "-time=1s",
        "bash",
        "-c",
        "trap 'echo trapped' TERM; sleep 30 & wait",
    ]);
    let elapsed = started.elapsed();
    assert_eq!(
        code(&output),
        Some(scored_proto::exitcode::LIMIT),
        "{}",
        stderr(&output)
    );
    let message = stderr(&output);
    assert!(
        message.contains("job 1 killed: run time reached the time limit of 1.00s (-time)"),
        "{message}"
    );
    assert!(
        (Duration::from_millis(900)..Duration::from_secs(10)).contains(&elapsed),
        "ended after {elapsed:?}"
    );
    assert_eq!(daemon.job_state(1), "killed");
    assert!(
        wait_until(Duration::from_secs(10), || daemon.job_pids(1).is_empty()),
        "the job's processes (the shell and its sleep) are all gone"
    );
    // From SCORE_OPTIONS too, with lower precedence than the command line.
    let output = daemon
        .scrun(&["-time=20s", "sleep", "1"])
        .env("SCORE_OPTIONS", "-time=100ms")
        .output()
        .expect("run scrun");
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let output = daemon
        .scrun(&["sleep", "5"])
        .env("SCORE_OPTIONS", "-time=300ms")
        .output()
        .expect("run scrun");
    assert_eq!(
        code(&output),
        Some(scored_proto::exitcode::LIMIT),
        "{}",
        stderr(&output)
    );
}

#[test]
fn time_spent_stopped_does_not_count_against_the_time_limit() {
    // One host, two gang jobs: each runs half of the time.
    let hosts = two_hosts();
    let one_host = format!("{}\n", hosts.lines().next().unwrap_or("host0"));
    let daemon = Daemon::builder()
        .hosts(&one_host)
        .timeslice("200ms")
        .start();
    let mut other = daemon.spawn(&["-priority=1", &testprog(), "spin", "0"]);
    wait_state(&daemon, 1, &["running"]);
    let started = Instant::now();
    let output = daemon.run(&["-priority=1,time=2s", &testprog(), "spin", "0"]);
    let elapsed = started.elapsed();
    assert_eq!(
        code(&output),
        Some(scored_proto::exitcode::LIMIT),
        "{}",
        stderr(&output)
    );
    assert!(
        elapsed >= Duration::from_millis(3500),
        "2s of running while sharing the host takes about 4s, not {elapsed:?}"
    );
    let run = seconds(&daemon.job_field(2, "run"));
    assert!((1.9..2.6).contains(&run), "ran {run}s");
    other.signal(nix::sys::signal::Signal::SIGINT);
    other.wait(Duration::from_secs(30));
}

/// Two hosts, queue 0 exclusive: job 1 holds one host until the test
/// ends it (declaring 60s), job 2 needs both and waits. Returns the daemon,
/// the two scruns and what ends job 1: the test decides when, so that the
/// order it checks does not depend on how fast a loaded machine gets there.
fn wide_job_waiting(rc: &str) -> (Daemon, Job, Job, Release) {
    let daemon = Daemon::builder().hosts(&two_hosts()).rc(rc).start();
    let release = Release(daemon.sandbox.path.join("release-job-1"));
    let wait_for_release = format!(
        "until [ -e '{}' ]; do sleep 0.05; done",
        release.0.display()
    );
    let first = daemon.spawn(&["-priority=0,time=60s", "sh", "-c", &wait_for_release]);
    wait_state(&daemon, 1, &["running"]);
    let wide = daemon.spawn(&["-priority=0,nodes=2,time=20s", "sleep", "1"]);
    wait_state(&daemon, 2, &["queued"]);
    (daemon, first, wide, release)
}

/// The file whose creation ends job 1 of [`wide_job_waiting`].
struct Release(std::path::PathBuf);

impl Release {
    fn job_1(&self) {
        std::fs::write(&self.0, "").expect("create the release file");
    }
}

#[test]
fn an_exclusive_queue_without_backfill_is_first_come_first_served() {
    let (daemon, mut first, mut wide, release) = wide_job_waiting("");
    // Job 3 fits on the idle host, but job 2 came first.
    let mut small = daemon.spawn(&["-priority=0,time=2s", "sleep", "1"]);
    wait_state(&daemon, 3, &["queued"]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(daemon.job_state(3), "queued", "job 3 did not pass job 2");
    assert_eq!(daemon.job_state(2), "queued");
    release.job_1();
    let (status, message) = first.wait(Duration::from_secs(30));
    assert!(status.success(), "{message}");
    wait_state(&daemon, 2, &["running", "done"]);
    let (status, message) = wide.wait(Duration::from_secs(30));
    assert!(status.success(), "{message}");
    let (status, message) = small.wait(Duration::from_secs(30));
    assert!(status.success(), "{message}");
    let wide_wait = seconds(&daemon.job_field(2, "wait"));
    let small_wait = seconds(&daemon.job_field(3, "wait"));
    // Job 3 started only once job 2 had run (1s), itself started only
    // once job 1 ended, at least 0.5s after job 3 came.
    assert!(
        small_wait >= 1.5,
        "job 3 waited {small_wait}s, job 2 {wide_wait}s"
    );
}

#[test]
fn backfill_starts_a_short_job_in_the_hole_without_delaying_the_wide_one() {
    let (daemon, mut first, mut wide, release) = wide_job_waiting("queue 0 set backfill=on\n");
    // Job 2 is reserved for when job 1's estimate runs out (60s, though it
    // ends sooner). Job 3 declares 2s: it ends before that, so it starts
    // now on the idle host; job 4 declares 120s and would delay job 2.
    let mut short = daemon.spawn(&["-priority=0,time=2s", "sleep", "1"]);
    // Admitted before the next one is submitted, so that it is job 3.
    wait_state(&daemon, 3, &["queued", "running", "done"]);
    let mut long = daemon.spawn(&["-priority=0,time=120s", "sleep", "1"]);
    wait_state(&daemon, 4, &["queued"]);
    assert!(
        ["running", "done"].contains(&daemon.job_state(3).as_str()),
        "job 3 backfilled: {}",
        daemon.job_state(3)
    );
    assert_eq!(daemon.job_state(2), "queued");
    assert_eq!(daemon.job_state(4), "queued", "job 4 would delay job 2");
    let (status, message) = short.wait(Duration::from_secs(30));
    assert!(status.success(), "{message}");
    release.job_1();
    let (status, message) = first.wait(Duration::from_secs(30));
    assert!(status.success(), "{message}");
    let (status, message) = wide.wait(Duration::from_secs(30));
    assert!(status.success(), "{message}");
    let (status, message) = long.wait(Duration::from_secs(30));
    assert!(status.success(), "{message}");
    // Job 2 started as soon as job 1 ended, as it would have without
    // job 3; job 4 only after job 2.
    let first_wall = seconds(&daemon.job_field(1, "wall"));
    let wide_wait = seconds(&daemon.job_field(2, "wait"));
    assert!(
        wide_wait < first_wall + 0.5,
        "job 2 waited {wide_wait}s; job 1 ran {first_wall}s"
    );
    let short_wait = seconds(&daemon.job_field(3, "wait"));
    assert!(short_wait < 1.0, "job 3 waited {short_wait}s");
    let long_wait = seconds(&daemon.job_field(4, "wait"));
    assert!(long_wait > wide_wait, "job 4 waited {long_wait}s");
    let queues = daemon.json("queues");
    assert_eq!(queues[0]["backfill"], "on", "{queues}");
}
