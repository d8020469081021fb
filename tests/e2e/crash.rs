//! A crash of scored loses no job: a new scored on the same state
//! directory takes over every job the killed one held, and each
//! interactive scrun reattaches and ends with its job's status.

use std::path::Path;
use std::time::Duration;

use scored_tests::*;

use crate::restart::all_gone;

/// Every finished job of `history --json`, as (id, state, exit, reason).
fn history(daemon: &Daemon) -> Vec<(u64, String, i64, String)> {
    let records = daemon.json("history");
    records
        .as_array()
        .expect("history is a list")
        .iter()
        .map(|record| {
            (
                record["id"].as_u64().unwrap_or(0),
                record["state"].as_str().unwrap_or("").to_string(),
                record["exit"].as_i64().unwrap_or(-1),
                record["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Waits until nothing of the daemon is left in the cgroup hierarchies:
/// no directory of its, nor any job's cgroup in one.
fn assert_no_cgroup_left(daemon: &Daemon) {
    if daemon.cgroup_dirs().is_empty() {
        eprintln!("no cgroup hierarchy in use: no cgroup to look for");
        return;
    }
    let mut left = Vec::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            left = daemon.cgroups_left();
            left.is_empty()
        }),
        "left in the cgroup hierarchies: {left:?}\n{}",
        daemon.log()
    );
}

/// A queued job and a held one survive a kill -9 of scored: the new
/// scored holds them as they were (queued, held), their scruns reattach,
/// and once the queue is activated and the hold released both run and
/// end with status 0, their output on their scruns' stdout.
#[test]
fn a_queued_and_a_held_job_survive_a_kill_of_scored() {
    let mut daemon = Daemon::builder().hosts("h0 cpus=0\n").start();
    daemon.ok("queue 1 deactivate");
    let mut queued = daemon.spawn(&["-priority=1", "sh", "-c", "echo queued-ran"]);
    let mut held = daemon.spawn(&["-priority=1", "sh", "-c", "echo held-ran; exit 0"]);
    assert!(wait_until(Duration::from_secs(10), || daemon
        .ok("jobs")
        .lines()
        .count()
        == 3));
    daemon.ok("suspend 2");
    assert_eq!(daemon.job_state(1), "queued");
    assert_eq!(daemon.job_state(2), "held");

    daemon.kill_hard();
    daemon.start_again();
    // The scruns reattach within a few tries; until then their jobs wait
    // for them (held).
    assert!(
        wait_until(Duration::from_secs(10), || daemon
            .log()
            .matches("reattached")
            .count()
            >= 2),
        "{}",
        daemon.log()
    );
    assert_eq!(daemon.job_state(1), "queued", "{}", daemon.log());
    assert_eq!(daemon.job_state(2), "held", "{}", daemon.log());
    daemon.ok("queue 1 activate");
    daemon.ok("resume 2");
    queued.wait_lines("queued-ran", 1);
    held.wait_lines("held-ran", 1);
    let (status, stderr) = queued.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let (status, stderr) = held.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let history = history(&daemon);
    assert_eq!(history.len(), 2, "{history:?}");
    assert!(
        history
            .iter()
            .all(|(_, state, exit, _)| state == "done" && *exit == 0),
        "{history:?}"
    );
}

/// A scrun whose daemon does not come back within `-reattach=` says so
/// and exits 69; the job is killed when a daemon returns, and recorded.
/// The daemon, which never launched a job, leaves no cgroup.
#[test]
fn a_scrun_whose_daemon_does_not_come_back_gives_up() {
    let mut daemon = Daemon::builder().hosts("h0 cpus=0\n").start();
    daemon.ok("queue 1 deactivate");
    let mut job = daemon.spawn(&["-priority=1,reattach=1s", "true"]);
    assert!(wait_until(Duration::from_secs(10), || daemon.job_state(1) == "queued"));
    daemon.kill_hard();
    let (status, stderr) = job.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(69), "{stderr}");
    assert!(
        stderr.contains("scored did not come back within 1s") && stderr.contains("job 1"),
        "{stderr}"
    );
    assert_no_cgroup_left(&daemon);
}

/// A scrun that gave up waiting for its daemon (its `-reattach=` ran
/// out) is gone for good: the new scored kills its job at once, as it
/// kills one whose scrun went away, rather than waiting for a reattach
/// that cannot come; the job's processes are gone and its end recorded.
#[test]
fn a_job_whose_scrun_gave_up_is_killed_when_scored_returns() {
    let mut daemon = Daemon::builder().hosts("h0 cpus=0\n").start();
    // The job's processes hold scrun's output past its end: a file, not
    // a pipe, holds what scrun says.
    let said = daemon.sandbox.path.join("scrun.err");
    let mut scrun = daemon
        .scrun(&["-reattach=1s", "sleep", "300"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&said).expect("a file for scrun's stderr"))
        .spawn()
        .expect("start scrun");
    let ranks = daemon.wait_job_pids(1, 1);
    daemon.kill_hard();
    let mut status = None;
    assert!(wait_until(Duration::from_secs(10), || {
        status = scrun.try_wait().expect("try_wait");
        status.is_some()
    }));
    let stderr = std::fs::read_to_string(&said).unwrap_or_default();
    assert_eq!(
        status.and_then(|status| status.code()),
        Some(69),
        "{stderr}"
    );
    assert!(stderr.contains("did not come back"), "{stderr}");
    assert!(
        ranks.iter().all(|pid| alive(*pid)),
        "the job ended with scored"
    );
    daemon.start_again();
    assert!(
        all_gone(&ranks, Duration::from_secs(15)),
        "the job of a scrun that gave up still runs:\n{}",
        daemon.ok("job 1")
    );
    assert!(
        wait_until(Duration::from_secs(10), || daemon.job_state(1) == "killed"),
        "{}",
        daemon.ok("job 1")
    );
    let records = history(&daemon);
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(
        !records[0].3.contains("lost"),
        "the job was recorded lost: {records:?}"
    );
}

/// A job that ends while no scored runs is recorded as it ended: its wall
/// time and end in `history` are those of its processes, which its keeper
/// saw end, not those of the new scored's takeover seconds later.
#[test]
fn a_job_that_ends_while_scored_is_away_keeps_its_true_wall_time() {
    let mut daemon = Daemon::builder().hosts("h0 cpus=0\n").start();
    let output = daemon.run(&["-batch,output=/dev/null", "sleep", "1"]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let ranks = daemon.wait_job_pids(1, 1);
    daemon.kill_hard();
    assert!(
        all_gone(&ranks, Duration::from_secs(10)),
        "the job did not end"
    );
    std::thread::sleep(Duration::from_secs(4));
    let restarted = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs_f64();
    daemon.start_again();
    assert!(
        wait_until(Duration::from_secs(10), || daemon.job_state(1) == "done"),
        "{}",
        daemon.ok("job 1")
    );
    let records = daemon.json("history");
    let record = &records.as_array().expect("a list")[0];
    assert_eq!(record["exit"], 0, "{record}");
    let wall = record["wall"].as_f64().unwrap_or(f64::MAX);
    assert!(
        (1.0..2.5).contains(&wall),
        "wall {wall} s, where sleep 1 ended before the new scored started: {record}"
    );
    let ended = record["ended"].as_f64().unwrap_or(f64::MAX);
    assert!(
        ended < restarted,
        "ended at {ended}, after the new scored's start at {restarted}: {record}"
    );
}

/// A job that ended before a kill of scored is one the new scored knows
/// only from its journal: `kill`, `suspend`, `resume` and `move` of it say
/// that it has already ended, as they do before the crash, and change
/// nothing; an id never handed out is still no job.
#[test]
fn commands_on_a_job_that_ended_before_a_kill_of_scored_say_it_ended() {
    let mut daemon = Daemon::builder().hosts("h0 cpus=0\n").start();
    let output = daemon.run(&["true"]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    daemon.kill_hard();
    daemon.start_again();
    for line in [
        "kill 1",
        "kill -s TERM 1",
        "suspend 1",
        "resume 1",
        "move 1 2",
    ] {
        let output = daemon.console(line);
        assert_ne!(code(&output), Some(0), "{line}");
        let said = format!("{}{}", stdout(&output), stderr(&output));
        assert!(
            said.contains("error: job 1 has already ended"),
            "{line}: {said}"
        );
    }
    let output = daemon.console("kill 7");
    assert!(
        stderr(&output).contains("error: no job 7") || stdout(&output).contains("error: no job 7"),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    let records = daemon.json("history");
    let records = records.as_array().expect("a list");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["state"], "done", "{records:?}");
    assert_eq!(records[0]["exit"], 0, "{records:?}");
}

/// A suspension of scrun (SIGTSTP, Ctrl-Z) while its daemon is away waits
/// for the daemon, since a stopped scrun could not reattach: scrun says so
/// and stays, the job runs on meanwhile (nothing signals it but its
/// keeper), and once a new scored takes the job over the job is held, its
/// rank held and scrun stopped; a continue of scrun releases it, and both
/// end as the job does. The rank, a shell, may be caught in a vfork whose
/// child the stop reached before its exec: it then waits in `D` with its
/// SIGSTOP pending, running none of its code, as `held` tells.
#[test]
fn a_suspension_while_scored_is_away_holds_the_job_once_it_is_back() {
    let mut daemon = Daemon::builder().hosts("h0 cpus=0\n").start();
    let go = daemon.sandbox.path.join("go");
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done", go.display());
    let mut job = daemon.spawn(&["sh", "-c", &script]);
    let ranks = daemon.wait_job_pids(1, 1);
    let scrun = nix::unistd::Pid::from_raw(job.pid());
    daemon.kill_hard();
    job.signal(nix::sys::signal::Signal::SIGTSTP);
    // Longer than scrun waits for a hold to be confirmed while its daemon
    // runs (2 s): scrun neither stops nor leaves the job to run unheld.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !stopped(scrun.as_raw()),
        "scrun stopped while scored was away"
    );
    assert!(!held(ranks[0]), "the job stopped while scored was away");
    daemon.start_again();
    assert!(
        wait_until(Duration::from_secs(10), || daemon.job_state(1) == "held"),
        "{}",
        daemon.ok("job 1")
    );
    assert!(
        wait_until(Duration::from_secs(10), || held(ranks[0])
            && stopped(scrun.as_raw())),
        "rank held: {}, scrun stopped: {}\n{}\n{}\n{}",
        held(ranks[0]),
        stopped(scrun.as_raw()),
        describe(ranks[0]),
        describe(scrun.as_raw()),
        daemon.log()
    );
    nix::sys::signal::kill(scrun, nix::sys::signal::Signal::SIGCONT).expect("continue scrun");
    assert!(
        wait_until(Duration::from_secs(10), || daemon.job_state(1) == "running"),
        "{}",
        daemon.ok("job 1")
    );
    std::fs::write(&go, "").expect("let the job end");
    let (status, stderr) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("scored is away; job 1 is suspended once it is back"),
        "{stderr}"
    );
    let history = history(&daemon);
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(
        (history[0].1.as_str(), history[0].2),
        ("done", 0),
        "{history:?}"
    );
}

/// With `-v`, a scrun says that its daemon went away and that it
/// reattached, also when its job ended while no daemon ran: the new
/// scored answers with the job's end, which scrun reports as it ended.
#[test]
fn a_verbose_scrun_says_it_reattached_to_a_job_that_ended_meanwhile() {
    let mut daemon = Daemon::builder().hosts("h0 cpus=0\n").start();
    let mut job = daemon.spawn(&["-v", "sh", "-c", "echo started; sleep 1; exit 3"]);
    job.wait_lines("started", 1);
    let ranks = daemon.wait_job_pids(1, 1);
    daemon.kill_hard();
    assert!(
        all_gone(&ranks, Duration::from_secs(10)),
        "the job did not end"
    );
    daemon.start_again();
    let (status, stderr) = job.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(3), "{stderr}");
    let went = stderr.find("scored went away; waiting up to 1m for it to come back to job 1");
    let back = stderr.find("reattached to job 1, which ended meanwhile");
    assert!(went.is_some() && back.is_some() && went < back, "{stderr}");
}

/// A queued job with a pseudo-terminal (`-pty`) survives a kill -9 of
/// scored: its scrun keeps the terminal, sends the slave again when it
/// reattaches, and the job, once run, has it as its terminal and ends
/// with its status.
#[test]
fn a_queued_pty_job_survives_a_kill_of_scored() {
    let mut daemon = Daemon::builder().hosts("h0 cpus=0\n").start();
    daemon.ok("queue 1 deactivate");
    let mut job = daemon.spawn(&[
        "-priority=1,pty",
        "sh",
        "-c",
        "tty; test -t 0 && echo stdin-is-tty; exit 5",
    ]);
    assert!(wait_until(Duration::from_secs(10), || daemon.job_state(1) == "queued"));
    daemon.kill_hard();
    daemon.start_again();
    assert!(
        wait_until(Duration::from_secs(10), || daemon
            .log()
            .contains("its scrun reattached")),
        "{}",
        daemon.log()
    );
    daemon.ok("queue 1 activate");
    let out = job.wait_lines("", 2).join("\n");
    let (status, stderr) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(5), "{stderr}");
    assert!(
        out.contains("/dev/pts/") && out.contains("stdin-is-tty"),
        "{out}"
    );
}

/// The pid of the parent of `pid` (a rank's keeper).
pub(crate) fn parent_of(pid: i32) -> i32 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    rest.split_whitespace()
        .nth(1)
        .and_then(|ppid| ppid.parse().ok())
        .unwrap_or(0)
}

/// (a) An interactive job survives a kill -9 of scored: its processes run
/// on (the same ones), its scrun reattaches to the new scored and exits
/// with the job's status, its output whole, and `history` records its
/// true wall and CPU time.
#[test]
fn an_interactive_job_outlives_a_kill_of_scored() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    // Each rank spends 0.2 s of CPU, by the kernel's count of its own
    // time, before scored is killed: an amount of work that a build
    // optimized or not takes alike.
    let script = format!(
        "{} spin 0.2 >/dev/null; echo first; sleep 2; echo second; exit 5",
        testprog()
    );
    let mut job = daemon.spawn(&["-nodes=2,stat", "sh", "-c", &script]);
    job.wait_lines("first", 2);
    let ranks = daemon.job_pids(1);
    assert!(!ranks.is_empty());
    daemon.kill_hard();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        ranks.iter().all(|pid| alive(*pid)),
        "the job's processes died with scored"
    );
    daemon.start_again();
    job.wait_lines("second", 2);
    let (status, stderr) = job.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("job 1 accounting"), "{stderr}");
    let records = daemon.json("history");
    let record = &records.as_array().unwrap()[0];
    assert_eq!(record["state"], "done", "{record}");
    assert_eq!(record["exit"], 5, "{record}");
    assert!(record["wall"].as_f64().unwrap() >= 2.0, "{record}");
    // At least what the two ranks spent before the crash (their waited-for
    // time, to the microsecond).
    assert!(record["cpu"].as_f64().unwrap() >= 0.399, "{record}");
    assert!(
        !record["reason"].as_str().unwrap().contains("lost"),
        "{record}"
    );
}

/// (b) Two gang jobs time-sharing one host: while no scored runs, the
/// switched-out one stays stopped (never both running), and after the new
/// scored starts both finish with status 0 and gang switching resumes.
#[test]
fn two_gang_jobs_sharing_a_host_never_run_together_while_scored_is_away() {
    let mut daemon = Daemon::builder()
        .hosts("h0 cpus=0\n")
        .timeslice("50ms")
        .start();
    let spin = testprog();
    let mut first = daemon.spawn(&[&spin, "spin", "2"]);
    let mut second = daemon.spawn(&[&spin, "spin", "2"]);
    let a = first.wait_pids(1)[0];
    let b = second.wait_pids(1)[0];
    // Both have run a little: gang switching is under way.
    std::thread::sleep(Duration::from_millis(300));
    daemon.kill_hard();
    let runs = |pid: i32| proc_stat(pid).is_some_and(|stat| stat.state != 'T' && stat.state != 't');
    let mut samples = 0;
    let until = std::time::Instant::now() + Duration::from_secs(1);
    while std::time::Instant::now() < until {
        let (ra, rb) = (runs(a), runs(b));
        assert!(!(ra && rb), "both jobs ran while no scored was there");
        samples += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(samples > 50);
    daemon.start_again();
    let (status, stderr) = first.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let (status, stderr) = second.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let status = daemon.ok("status");
    let switches: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("switches:"))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0);
    assert!(switches > 0, "{status}");
    let records = daemon.json("history");
    for record in records.as_array().unwrap() {
        assert_eq!(record["exit"], 0, "{record}");
        assert!(record["switches"].as_u64().unwrap() > 0, "{record}");
    }
}

/// The time of day of a log line's timestamp, in seconds.
fn logged_at(line: &str) -> Option<f64> {
    let time = line.split_whitespace().next()?.split('T').nth(1)?;
    let mut parts = time.trim_end_matches('Z').split(':');
    let hours: f64 = parts.next()?.parse().ok()?;
    let minutes: f64 = parts.next()?.parse().ok()?;
    let seconds: f64 = parts.next()?.parse().ok()?;
    Some(hours * 3600.0 + minutes * 60.0 + seconds)
}

/// Gang switching resumes after a kill -9 of scored: once the new scored
/// has taken the two jobs sharing a host over, the one that was switched
/// out at the crash is the next to run and the other stops (never both
/// running), the new scored's first switch comes within a few slices of
/// its takeover by its own log, and the jobs go on alternating.
#[test]
fn gang_switching_resumes_within_a_slice_after_a_kill_of_scored() {
    const SLICE: Duration = Duration::from_millis(200);
    let mut daemon = Daemon::builder()
        .hosts("h0 cpus=0\n")
        .timeslice("200ms")
        .start();
    let spin = testprog();
    let mut first = daemon.spawn(&[&spin, "spin", "0"]);
    let mut second = daemon.spawn(&[&spin, "spin", "0"]);
    let pids = [first.wait_pids(1)[0], second.wait_pids(1)[0]];
    std::thread::sleep(3 * SLICE);
    daemon.kill_hard();
    let stopped = held;
    // While no scored runs, the jobs keep their states for longer than a
    // slice: one stopped, the other running (or both stopped, had scored
    // died between the stop and the continue of a switch).
    std::thread::sleep(SLICE / 2);
    let away = [stopped(pids[0]), stopped(pids[1])];
    assert!(
        away[0] || away[1],
        "both jobs ran while no scored was there"
    );
    std::thread::sleep(2 * SLICE);
    assert_eq!(
        [stopped(pids[0]), stopped(pids[1])],
        away,
        "the jobs keep their states while no scored runs"
    );
    daemon.start_again();
    // Watches the two jobs until `done` holds for the pair of "runs"
    // states, failing if both ever run at once; the states then.
    let watch = |done: &dyn Fn([bool; 2]) -> bool| {
        let until = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < until {
            // The reads of /proc are not atomic: a switch between the
            // first two would look like overlap, so the first job is read
            // again, and a sample that took long enough for a switch and
            // a switch back (a slice) says nothing.
            let sampled = std::time::Instant::now();
            let runs = [!stopped(pids[0]), !stopped(pids[1])];
            let both = runs[0] && runs[1] && !stopped(pids[0]);
            assert!(
                !both || sampled.elapsed() >= SLICE / 10,
                "both jobs ran at once after the takeover:\n{}",
                daemon.log()
            );
            if done(runs) {
                return Some(runs);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    };
    // The job switched out at the crash runs next, the other one stopped;
    // then the other runs again: they alternate.
    let next = match away {
        [true, false] => 0,
        [false, true] => 1,
        // Both stopped by a crash mid-switch: either may come first.
        _ => watch(&|runs| runs[0] || runs[1]).map_or(0, |runs| usize::from(runs[1])),
    };
    assert!(
        watch(&|runs| runs[next]).is_some(),
        "the switched-out job never ran after the takeover:\n{}",
        daemon.log()
    );
    assert!(
        watch(&|runs| runs[1 - next]).is_some(),
        "the jobs did not go on alternating after the takeover:\n{}",
        daemon.log()
    );
    // By the new scored's own clock, its first switch came within a few
    // slices of its takeover.
    let log = daemon.log();
    let took_over = log
        .lines()
        .rfind(|line| line.contains("took over the keepers of the jobs"))
        .and_then(logged_at)
        .expect("the takeover is logged");
    let first_switch = log
        .lines()
        .filter(|line| line.contains("switch complete"))
        .filter_map(logged_at)
        .find(|at| *at >= took_over)
        .expect("a switch is logged after the takeover");
    println!(
        "first switch {:.3} s after the takeover",
        first_switch - took_over
    );
    assert!(
        first_switch - took_over < 5.0 * SLICE.as_secs_f64(),
        "the first switch came {:.3} s after the takeover, at {} ms slices",
        first_switch - took_over,
        SLICE.as_millis()
    );
    for job in [&first, &second] {
        job.signal(nix::sys::signal::Signal::SIGINT);
    }
    for job in [&mut first, &mut second] {
        job.wait(Duration::from_secs(60));
    }
    assert!(wait_until(Duration::from_secs(10), || daemon
        .all_job_pids()
        .is_empty()));
}

/// (d) A job on a pseudo-terminal (`-pty`) keeps its terminal across a
/// kill -9 of scored: what it writes after the new scored took over
/// reaches the user's terminal, and its status passes through.
#[test]
fn a_pty_job_keeps_its_terminal_across_a_kill_of_scored() {
    let mut daemon = Daemon::start();
    let log = daemon.sandbox.path.join("pty.out");
    let command = format!(
        "{} -pty sh -c 'tty; echo before; sleep 2; echo after; test -t 0 && echo still-a-tty; exit 4'; echo status=$?",
        bin("scrun").display()
    );
    // util-linux script(1) gives scrun a terminal.
    let mut session = std::process::Command::new("script")
        .args(["-qfec", &command])
        .arg(&log)
        .env("SCORED_SOCKET", &daemon.socket)
        .env("SCORED_TEST_TAG", &daemon.tag)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run script(1)");
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(20), || read().contains("before")),
        "{}",
        read()
    );
    daemon.kill_hard();
    daemon.start_again();
    assert!(
        wait_until(Duration::from_secs(30), || read().contains("status=")),
        "{}",
        read()
    );
    let _ = session.wait();
    let text = read();
    assert!(text.contains("/dev/pts/"), "{text}");
    assert!(text.contains("after"), "{text}");
    assert!(text.contains("still-a-tty"), "{text}");
    assert!(text.contains("status=4"), "{text}");
}

/// (e) An MPI job under PMI (MPICH) survives a kill -9 of scored: scrun
/// keeps serving its PMI, the ranks finish their world, and the job ends
/// with status 0.
#[test]
fn an_mpi_job_outlives_a_kill_of_scored() {
    const RING: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0, one;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("ready %d\n", rank);
    fflush(stdout);
    sleep(2);
    one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d of %d sum %d\n", rank, size, sum);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
"#;
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    let found = std::process::Command::new("mpicc.mpich")
        .arg("--version")
        .output();
    if found.is_err() {
        println!("skipped: mpicc.mpich is not installed (apt-get install mpich libmpich-dev)");
        return;
    }
    let src = daemon.sandbox.write("ring.c", RING);
    let exe = daemon.sandbox.path.join("ring");
    let built = std::process::Command::new("mpicc.mpich")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run mpicc.mpich");
    assert!(built.status.success(), "{}", stderr(&built));
    let mut job = daemon.spawn(&["-nodes=2", exe.to_str().unwrap()]);
    job.wait_lines("ready", 2);
    daemon.kill_hard();
    std::thread::sleep(Duration::from_millis(200));
    daemon.start_again();
    let lines = job.wait_lines("rank ", 2);
    let (status, stderr) = job.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let mut lines = lines;
    lines.sort();
    assert_eq!(lines, ["0 of 2 sum 3", "1 of 2 sum 3"]);
}

/// A kill -9 of a job's keeper ends that job only: its processes die,
/// it is recorded with a reason naming the keeper, its scrun says so, and
/// another job runs on untouched.
#[test]
fn a_killed_keeper_ends_its_job_only() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let spin = testprog();
    // One after the other, so that the victim is job 1.
    let mut victim = daemon.spawn(&["-nodes=1", &spin, "spin", "0"]);
    let rank = victim.wait_pids(1)[0];
    let mut bystander = daemon.spawn(&["-nodes=1", &spin, "spin", "3"]);
    let other = bystander.wait_pids(1)[0];
    let keeper = parent_of(rank);
    assert!(keeper > 1 && keeper != daemon.pid() as i32);
    assert_eq!(
        parent_of(keeper),
        daemon.pid() as i32,
        "a keeper is scored's child"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(keeper),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the keeper");
    let (status, stderr) = victim.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(137), "{stderr}");
    assert!(
        stderr.contains(&format!("its keeper (pid {keeper}) was killed by SIGKILL")),
        "{stderr}"
    );
    assert!(all_gone(&[rank], Duration::from_secs(5)));
    assert!(alive(other), "the other job died with the keeper");
    let (status, stderr) = bystander.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let records = daemon.json("history");
    let lost = records
        .as_array()
        .unwrap()
        .iter()
        .find(|record| record["id"] == 1)
        .expect("the victim is in the history")
        .clone();
    assert!(
        lost["reason"].as_str().unwrap().contains("its keeper (pid"),
        "{lost}"
    );
}

/// Keepers whose scored never comes back end their jobs after
/// `--keeper-wait` (no process is left, nor any cgroup of the daemon's),
/// and the scrun gives up after its `-reattach=`.
#[test]
fn a_scored_that_never_returns_leaves_no_process() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--keeper-wait")
        .arg("2s")
        .start();
    let spin = testprog();
    let mut job = daemon.spawn(&["-nodes=2,reattach=5s", &spin, "spin", "0"]);
    let ranks = job.wait_pids(2);
    let keeper = parent_of(ranks[0]);
    daemon.kill_hard();
    std::thread::sleep(Duration::from_millis(1000));
    assert!(ranks.iter().all(|pid| alive(*pid)), "ended before the wait");
    assert!(
        all_gone(&ranks, Duration::from_secs(10)),
        "the keeper did not end its job"
    );
    assert!(
        all_gone(&[keeper], Duration::from_secs(5)),
        "the keeper stayed"
    );
    assert_no_cgroup_left(&daemon);
    let (status, stderr) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(69), "{stderr}");
}

/// A job that ends while no scored runs keeps its end for the next
/// scored; if none comes within `--keeper-wait`, its keeper leaves all the
/// same, and its job's cgroups with it.
#[test]
fn a_keeper_whose_job_ended_while_no_scored_came_back_leaves() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--keeper-wait")
        .arg("2s")
        .start();
    let mut job = daemon.spawn(&[
        "-nodes=1,reattach=1s",
        "sh",
        "-c",
        "echo pid $$; sleep 1; exit 3",
    ]);
    let rank = job.wait_pids(1)[0];
    let keeper = parent_of(rank);
    daemon.kill_hard();
    assert!(
        all_gone(&[rank], Duration::from_secs(10)),
        "the job did not end"
    );
    assert!(
        all_gone(&[keeper], Duration::from_secs(10)),
        "the keeper stayed after its wait"
    );
    assert_no_cgroup_left(&daemon);
    let (status, stderr) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(69), "{stderr}");
}

/// A scored killed after its job ended, which kept the job's cgroup for
/// a later job and its keeper idle: the keeper leaves with its link, and
/// takes the cgroup, and the daemon's directory, with it.
#[test]
fn a_scored_killed_after_its_job_ended_leaves_no_cgroup() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    assert_eq!(code(&daemon.run(&["true"])), Some(0));
    assert!(wait_until(Duration::from_secs(10), || daemon
        .idle_keepers()
        == 1));
    let idle: Vec<i32> = daemon
        .all_children()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line.starts_with(b"scored keeper, idle"))
        })
        .collect();
    daemon.kill_hard();
    assert!(
        all_gone(&idle, Duration::from_secs(10)),
        "an idle keeper outlived its scored"
    );
    assert_no_cgroup_left(&daemon);
}

/// A removed state directory: no scored can find the keepers, which end
/// their jobs after their wait; the next scored starts clean.
#[test]
fn a_removed_state_directory_ends_the_jobs_after_the_keepers_wait() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--keeper-wait")
        .arg("2s")
        .start();
    let spin = testprog();
    let mut job = daemon.spawn(&["-nodes=1,reattach=1s", &spin, "spin", "0"]);
    let ranks = job.wait_pids(1);
    daemon.kill_hard();
    std::fs::remove_dir_all(daemon.sandbox.path.join("state")).expect("remove the state");
    daemon.start_again();
    let (status, _) = job.wait(Duration::from_secs(20));
    assert_ne!(status.code(), Some(0));
    assert!(
        all_gone(&ranks, Duration::from_secs(10)),
        "the keeper did not end its job"
    );
    assert!(daemon.ok("jobs").lines().count() <= 1);
}

/// A process that is not the recorded keeper (another process, even
/// root's, listening at a keeper's socket) is not taken over: the job is
/// recorded lost, and the impostor is told nothing of it.
#[test]
fn a_process_posing_as_a_keeper_is_not_taken_over() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    let spin = testprog();
    let mut job = daemon.spawn(&["-nodes=1", &spin, "spin", "0"]);
    let rank = job.wait_pids(1)[0];
    let keeper = parent_of(rank);
    daemon.kill_hard();
    // The real keeper dies (its rank with it); a stranger binds its socket.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(keeper),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(all_gone(&[keeper, rank], Duration::from_secs(5)));
    let path = daemon.sandbox.path.join("state/keepers/1.sock");
    let _ = std::fs::remove_file(&path);
    let impostor = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    impostor.set_nonblocking(true).unwrap();
    daemon.start_again();
    let (status, stderr) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(137), "{stderr}");
    assert!(
        stderr.contains("keeper could not be found again"),
        "{stderr}"
    );
    assert!(
        daemon.log().contains("cannot take over the job's keeper"),
        "{}",
        daemon.log()
    );
}

/// A plain user can neither reattach to another user's job after a crash
/// nor reach a keeper: the keepers' sockets are in a directory only
/// scored's user may enter, and a reattach is the job owner's only.
#[test]
fn a_plain_user_can_neither_take_another_users_job_nor_reach_a_keeper() {
    let Some(users) = test_users("a_plain_user_can_neither_take_another_users_job") else {
        return;
    };
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    let spin = testprog();
    let mut job = daemon.spawn(&["-nodes=1", &spin, "spin", "3"]);
    job.wait_pids(1);
    daemon.kill_hard();
    daemon.start_again();
    let script = daemon.sandbox.write(
        "reattach.py",
        r#"
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
body = json.dumps({"type": "reattach", "version": int(sys.argv[3]), "reattach": {"job": 1, "descriptors": False}}).encode()
s.sendall(struct.pack(">I", len(body)) + body)
size = struct.unpack(">I", s.recv(4))[0]
data = b""
while len(data) < size:
    data += s.recv(size - len(data))
print(data.decode())
try:
    k = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    k.connect(sys.argv[2])
    print("keeper-reached")
except OSError as error:
    print("keeper-refused", error.errno)
"#,
    );
    let keeper = daemon.sandbox.path.join("state/keepers/1.sock");
    let output = command_as(
        &users.a,
        Path::new("/usr/bin/python3"),
        &[
            script.to_str().unwrap(),
            daemon.socket.to_str().unwrap(),
            keeper.to_str().unwrap(),
            &scored_proto::proto::VERSION.to_string(),
        ],
    )
    .output()
    .expect("run python3 as the user");
    let text = stdout(&output);
    assert!(
        text.contains("cannot reattach to job 1: it is not yours"),
        "{text}{}",
        stderr(&output)
    );
    assert!(text.contains("keeper-refused 13"), "{text}");
    // The owner's scrun still has its job.
    let (status, stderr) = job.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{stderr}");
}

/// scored keeps the keeper of a finished job for its next job: a job
/// given such a keeper is held as one given a new keeper is. It outlives
/// a kill -9 of scored, the new scored takes it over, and it ends with its
/// own status; nothing of the earlier job is counted in it.
#[test]
fn a_job_given_the_keeper_of_an_earlier_job_outlives_a_kill_of_scored() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    let first = daemon.run(&["sh", "-c", "echo keeper $PPID"]);
    assert_eq!(code(&first), Some(0), "{}", stderr(&first));
    let first_keeper: i32 = stdout(&first)
        .trim()
        .strip_prefix("keeper ")
        .and_then(|pid| pid.parse().ok())
        .expect("the first job's keeper");
    let idle = |daemon: &Daemon| {
        daemon.all_children().contains(&first_keeper)
            && std::fs::read(format!("/proc/{first_keeper}/cmdline"))
                .is_ok_and(|line| line.starts_with(b"scored keeper, idle"))
    };
    assert!(
        wait_until(Duration::from_secs(10), || idle(&daemon)),
        "the first job's keeper was not kept:\n{}",
        daemon.log()
    );
    let mut job = daemon.spawn(&[
        "-nodes=1",
        "sh",
        "-c",
        "echo pid $$; sleep 2; echo second; exit 4",
    ]);
    let rank = job.wait_pids(1)[0];
    assert_eq!(
        parent_of(rank),
        first_keeper,
        "the second job was not given the idle keeper"
    );
    daemon.kill_hard();
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(rank), "the job died with scored");
    daemon.start_again();
    job.wait_lines("second", 1);
    let (status, stderr) = job.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(4), "{stderr}");
    let history = history(&daemon);
    assert!(
        history
            .iter()
            .any(|(id, state, exit, _)| *id == 2 && state == "done" && *exit == 4),
        "{history:?}"
    );
}

/// The id `scrun -batch` printed.
fn batch_id(output: &std::process::Output) -> u64 {
    assert_eq!(code(output), Some(0), "{}", stderr(output));
    stdout(output)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not an id: {}", stdout(output)))
}

/// Seconds since the epoch, as `history` gives times.
fn epoch_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs_f64()
}

/// The `history --json` record of `job`.
fn history_record(daemon: &Daemon, job: u64) -> serde_json::Value {
    let records = daemon.json("history");
    records
        .as_array()
        .expect("history is a list")
        .iter()
        .find(|record| record["id"] == job)
        .unwrap_or_else(|| panic!("job {job} is not in the history: {records}"))
        .clone()
}

/// The file the keeper of `job` leaves when it ends with no scored.
fn left_file(daemon: &Daemon, job: u64) -> std::path::PathBuf {
    daemon
        .sandbox
        .path
        .join(format!("state/keepers/{job}.held"))
}

/// A batch job that ends while no scored runs, and whose keeper's wait
/// runs out before a scored comes back, is recorded as it ended: its
/// status 0, its CPU time, its end before the new scored's start, its
/// output; not lost. Its `-after` dependant runs, and the file its keeper
/// left goes once the job is recorded.
///
/// The job spins before scored is killed, and only waits for its signal
/// to end after: its end then takes a few forks, within the keeper's wait
/// on a loaded machine, where half a second of CPU may take longer than
/// the wait. Its CPU time still comes from the keeper's file alone: the
/// journal keeps no usage.
#[test]
fn a_job_that_ended_after_its_keepers_wait_ran_out_is_recorded_as_it_ended() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--keeper-wait")
        .arg("3s")
        .start();
    let script = format!(
        "echo ids $$ $PPID; {} spin 0.5 >/dev/null; echo spun; \
         while [ ! -e go ]; do sleep 0.05; done; echo finished; exit 0",
        testprog()
    );
    let first = batch_id(&daemon.run(&["-batch,output=first.out", "sh", "-c", &script]));
    let after = batch_id(&daemon.run(&[
        "-batch",
        &format!("-after={first}"),
        "-output=after.out",
        "echo",
        "after",
    ]));
    // The rank and its keeper, as the rank says, once it has spun.
    let out = daemon.sandbox.path.join("first.out");
    let mut ids: Vec<i32> = Vec::new();
    assert!(
        wait_until(Duration::from_secs(60), || {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            ids = text
                .lines()
                .next()
                .and_then(|line| line.strip_prefix("ids "))
                .map(|line| line.split(' ').filter_map(|id| id.parse().ok()).collect())
                .unwrap_or_default();
            ids.len() == 2 && text.lines().nth(1) == Some("spun")
        }),
        "the job did not start and spin: {}",
        daemon.log()
    );
    let (rank, keeper): (i32, i32) = (ids[0], ids[1]);
    daemon.kill_hard();
    std::fs::write(daemon.sandbox.path.join("go"), "").expect("let the job end");
    assert!(
        all_gone(&[rank], Duration::from_secs(20)),
        "the job did not end"
    );
    assert!(
        all_gone(&[keeper], Duration::from_secs(15)),
        "the keeper stayed after its wait"
    );
    let left = left_file(&daemon, first);
    assert!(
        left.exists(),
        "the keeper left no file at {}",
        left.display()
    );
    let restarted = epoch_now();
    daemon.start_again();
    assert!(
        wait_until(Duration::from_secs(10), || daemon.job_state(first)
            == "done"),
        "{}\n{}",
        daemon.ok(&format!("job {first}")),
        daemon.log()
    );
    let record = history_record(&daemon, first);
    assert_eq!(record["exit"], 0, "{record}");
    assert!(
        !record["reason"].as_str().unwrap_or("").contains("lost"),
        "{record}"
    );
    let cpu = record["cpu"].as_f64().unwrap_or(0.0);
    assert!(
        cpu >= 0.4,
        "cpu {cpu} s, where the job spun 0.5 s: {record}"
    );
    let ended = record["ended"].as_f64().unwrap_or(f64::MAX);
    assert!(
        ended < restarted,
        "ended at {ended}, after the new scored's start at {restarted}: {record}"
    );
    assert_eq!(daemon.job_field(first, "output"), "first.out");
    let output = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(output.ends_with("finished\n"), "{output:?}");
    assert!(
        wait_until(Duration::from_secs(20), || daemon.job_state(after)
            == "done"),
        "the dependant did not run: {}",
        daemon.ok(&format!("job {after}"))
    );
    assert_eq!(
        std::fs::read_to_string(daemon.sandbox.path.join("after.out")).unwrap_or_default(),
        "after\n"
    );
    assert!(
        wait_until(Duration::from_secs(5), || !left.exists()),
        "the keeper's file stayed once the job was recorded"
    );
}

/// A job still running when its keeper's wait runs out is killed by its
/// keeper, and the next scored records it killed for that reason, at
/// the time of the kill: not lost, and not ended at the new scored's
/// start.
#[test]
fn a_job_its_keeper_killed_at_the_end_of_its_wait_is_recorded_with_the_reason() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--keeper-wait")
        .arg("3s")
        .start();
    let job = batch_id(&daemon.run(&["-batch,output=/dev/null", "sleep", "300"]));
    let ranks = daemon.wait_job_pids(job, 1);
    let keeper = parent_of(ranks[0]);
    daemon.kill_hard();
    assert!(
        all_gone(&ranks, Duration::from_secs(20)),
        "the keeper did not end its job"
    );
    assert!(
        all_gone(&[keeper], Duration::from_secs(10)),
        "the keeper stayed"
    );
    std::thread::sleep(Duration::from_secs(1));
    let restarted = epoch_now();
    daemon.start_again();
    assert!(
        wait_until(Duration::from_secs(10), || daemon.job_state(job)
            == "killed"),
        "{}\n{}",
        daemon.ok(&format!("job {job}")),
        daemon.log()
    );
    let record = history_record(&daemon, job);
    assert_eq!(record["exit"], 137, "{record}");
    let reason = record["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("no scored took it over within 3s (--keeper-wait)"),
        "{record}"
    );
    assert!(!reason.contains("lost"), "{record}");
    let ended = record["ended"].as_f64().unwrap_or(f64::MAX);
    assert!(
        ended < restarted,
        "ended at {ended}, after the new scored's start at {restarted}: {record}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || !left_file(&daemon, job).exists()),
        "the keeper's file stayed once the job was recorded"
    );
}

/// The file a keeper leaves is believed only as the keeper wrote it: a
/// symbolic link in its place (to a true copy), or a file naming another
/// keeper process, is refused with the reason in the log, left as it is,
/// and the job is lost as it would be without a file.
#[test]
fn a_planted_keeper_file_is_refused_and_changes_nothing() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--keeper-wait")
        .arg("3s")
        .start();
    let linked = batch_id(&daemon.run(&["-batch,output=/dev/null", "sleep", "300"]));
    let other = batch_id(&daemon.run(&["-batch,output=/dev/null", "sleep", "300"]));
    let mut ranks = daemon.wait_job_pids(linked, 1);
    ranks.extend(daemon.wait_job_pids(other, 1));
    let keepers: Vec<i32> = ranks.iter().map(|rank| parent_of(*rank)).collect();
    daemon.kill_hard();
    assert!(
        all_gone(&ranks, Duration::from_secs(20)),
        "the keepers did not end their jobs"
    );
    assert!(
        all_gone(&keepers, Duration::from_secs(10)),
        "the keepers stayed"
    );
    // A link to a true copy in place of one file.
    let link = left_file(&daemon, linked);
    let copy = daemon.sandbox.path.join("state/keepers/copy");
    std::fs::copy(&link, &copy).expect("copy the keeper's file");
    let copied = std::fs::read(&copy).expect("the copy");
    std::fs::remove_file(&link).expect("remove the keeper's file");
    std::os::unix::fs::symlink(&copy, &link).expect("plant a link");
    // Another keeper's pid in the other.
    let planted = left_file(&daemon, other);
    let mut file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&planted).expect("the keeper's file"))
            .expect("the keeper's file is JSON");
    file["pid"] = serde_json::json!(file["pid"].as_i64().expect("a pid") + 1);
    let planted_bytes = serde_json::to_vec(&file).unwrap();
    std::fs::write(&planted, &planted_bytes).expect("plant another pid");
    daemon.start_again();
    for job in [linked, other] {
        assert!(
            wait_until(Duration::from_secs(15), || daemon.job_state(job)
                == "killed"),
            "{}\n{}",
            daemon.ok(&format!("job {job}")),
            daemon.log()
        );
        let record = history_record(&daemon, job);
        assert!(
            record["reason"]
                .as_str()
                .unwrap_or("")
                .contains("the job's keeper could not be found again"),
            "{record}"
        );
    }
    let log = daemon.log();
    assert!(
        log.contains("refused the file the job's keeper left") && log.contains("symbolic link"),
        "{log}"
    );
    assert!(log.contains("not the keeper recorded"), "{log}");
    assert!(
        std::fs::symlink_metadata(&link).is_ok_and(|meta| meta.file_type().is_symlink()),
        "the planted link was touched"
    );
    assert_eq!(
        std::fs::read(&copy).ok(),
        Some(copied),
        "its target changed"
    );
    assert_eq!(
        std::fs::read(&planted).ok(),
        Some(planted_bytes),
        "the planted file changed"
    );
}
