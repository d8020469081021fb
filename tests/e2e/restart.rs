//! scored restarts without losing a job. The job journal keeps
//! finished jobs and job ids across restarts and crashes (`history`,
//! `jobs all`, `job ID`); after a SIGKILL the next scored kills what the
//! dead daemon left and never reuses an id or a job directory (what it
//! takes over: `crash.rs`). Launches in progress are handed over.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use scored_tests::*;

pub(crate) fn all_gone(pids: &[i32], timeout: Duration) -> bool {
    wait_until(timeout, || pids.iter().all(|pid| !alive(*pid)))
}

/// The state of job `id`, or "" while the daemon does not know it yet.
pub(crate) fn state_of(daemon: &Daemon, id: u64) -> String {
    let output = daemon.console(&format!("job {id}"));
    stdout(&output)
        .lines()
        .find_map(|line| line.strip_prefix("state: "))
        .unwrap_or("")
        .to_string()
}

fn keys(value: &serde_json::Value) -> BTreeSet<String> {
    value
        .as_object()
        .expect("a JSON object")
        .keys()
        .cloned()
        .collect()
}

fn history(daemon: &Daemon, line: &str) -> Vec<serde_json::Value> {
    daemon
        .json(line)
        .as_array()
        .unwrap_or_else(|| panic!("{line} gives a JSON array"))
        .clone()
}

#[test]
fn the_journal_keeps_finished_jobs_and_ids_across_restarts() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    assert_eq!(code(&daemon.run(&["true"])), Some(0));
    assert_eq!(code(&daemon.run(&["sh", "-c", "exit 3"])), Some(3));
    let mut long = daemon.spawn(&["-nodes=1", &testprog(), "spin", "0"]);
    long.wait_pids(1);
    daemon.ok("move 3 2");
    let live_keys = keys(&daemon.json("job 3"));
    assert_eq!(
        code(&daemon.run(&["-priority=0", "sh", "-c", "exit 0"])),
        Some(0)
    );
    daemon.ok("kill 3 KILL");
    let (status, _) = long.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(137));

    daemon.restart();
    // Ids continue after the highest one the journal has seen.
    let output = daemon.run(&["-stat", "true"]);
    assert_eq!(code(&output), Some(0));
    assert!(
        stderr(&output).contains("job 5"),
        "the first job after a restart must be job 5:\n{}",
        stderr(&output)
    );
    let records = history(&daemon, "history");
    // In the order the jobs ended.
    let ids: Vec<u64> = records.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, vec![1, 2, 4, 3, 5]);
    let exits: Vec<i64> = records
        .iter()
        .map(|r| r["exit"].as_i64().unwrap())
        .collect();
    assert_eq!(exits, vec![0, 3, 0, 137, 0]);
    let moved = &records[3];
    assert_eq!(moved["queues"], serde_json::json!([1, 2]));
    assert_eq!(moved["state"], "killed");
    assert!(moved["reason"].as_str().unwrap().contains("killed"));
    // The same keys as `job ID`, plus exit, reason and when it ended.
    let mut expected = live_keys.clone();
    expected.extend(["exit", "reason", "ended"].map(String::from));
    assert_eq!(keys(moved), expected);
    // `job ID` and `jobs all` of a job an earlier daemon ran.
    let text = daemon.ok("job 2");
    assert!(text.contains("exit: 3"), "{text}");
    let all = daemon.ok("jobs all");
    assert!(all.contains("sh -c exit 3"), "{all}");
    // Filters.
    assert_eq!(
        history(&daemon, "history --user 0").len(),
        if is_root() { 5 } else { 0 }
    );
    assert_eq!(history(&daemon, "history --since 1h").len(), 5);
    assert!(history(&daemon, "history --since 2999-01-01").is_empty());
    assert_eq!(history(&daemon, "history --user 4000000").len(), 0);
    let text = daemon.ok("history");
    assert!(text.starts_with("ID"), "{text}");
    assert_eq!(text.lines().count(), 6, "{text}");
}

#[test]
fn bad_history_arguments_are_named() {
    let daemon = Daemon::start();
    for (line, needle) in [
        ("history --since yesterday", "invalid time 'yesterday'"),
        ("history --since 2026-02-30", "invalid time '2026-02-30'"),
        ("history --user", "missing a user name or uid after --user"),
        ("history --user a --user b", "'--user' given twice"),
        ("history --all", "unexpected '--all'"),
        (
            "history --user no-such-user-here",
            "error: --user: no user named 'no-such-user-here'",
        ),
    ] {
        let output = daemon.console(line);
        assert!(!output.status.success(), "{line} must fail");
        let text = String::from_utf8_lossy(&output.stdout).to_string()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(text.contains(needle), "{line}: {text}");
    }
}

#[test]
fn the_journal_rotates_and_keeps_ids() {
    let mut daemon = Daemon::builder().arg("--journal-size").arg("4K").start();
    for _ in 0..6 {
        assert_eq!(code(&daemon.run(&["true"])), Some(0));
    }
    let state = daemon.sandbox.path.join("state");
    assert!(
        state.join("journal.1").exists(),
        "the journal was not rotated"
    );
    let size = std::fs::metadata(state.join("journal")).unwrap().len();
    assert!(size < 8192, "the journal grew to {size} bytes");
    daemon.restart();
    let output = daemon.run(&["-stat", "true"]);
    assert!(stderr(&output).contains("job 7"), "{}", stderr(&output));
}

/// Jobs of a killed scored live on: the next scored takes every one of
/// them over as it was (running, switched out, held, waiting for its
/// hosts, a grandchild left by a rank that ended), nothing is recorded
/// lost, ids continue; once they are killed nothing of them is left, their
/// scratch directories included.
#[test]
fn after_kill_9_the_next_scored_takes_every_job_over() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("50ms")
        .start();
    let (mut jobs, pids) = gang_pair_and_held_job(&daemon);
    // A job whose rank leaves a grandchild behind when it ends.
    let script = format!("{} spin 0; true", testprog());
    let mut parent = daemon.spawn(&["-nodes=1", "sh", "-c", &script]);
    let grandchild = parent.wait_pids(1)[0];
    let mut waiting = daemon.spawn(&["-nodes=2", "-priority=2", &testprog(), "spin", "0"]);
    assert!(wait_until(Duration::from_secs(10), || daemon
        .ok("jobs")
        .lines()
        .count()
        == 6));
    let scratch = daemon.sandbox.path.join("state/jobs/1");
    assert!(scratch.exists());
    let states: Vec<String> = (1..=5).map(|id| daemon.job_state(id)).collect();

    daemon.kill_hard();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        pids.iter().chain([&grandchild]).all(|pid| alive(*pid)),
        "job processes died with scored"
    );
    daemon.start_again();
    let after: Vec<String> = (1..=5).map(|id| daemon.job_state(id)).collect();
    // A gang job may be running or switched out; the held one stays held.
    assert_eq!(after[2], "held", "{after:?} (before {states:?})");
    assert!(scratch.exists());
    assert!(history(&daemon, "history").is_empty());
    for id in 1..=5 {
        daemon.ok(&format!("kill {id} KILL"));
    }
    for job in jobs.iter_mut().chain([&mut parent, &mut waiting]) {
        let (status, text) = job.wait(Duration::from_secs(20));
        assert!(!status.success(), "{text}");
    }
    assert!(
        all_gone(&pids, Duration::from_secs(10))
            && all_gone(&[grandchild], Duration::from_secs(10)),
        "processes left behind"
    );
    let records = history(&daemon, "history");
    assert_eq!(records.len(), 5, "{records:?}");
    assert!(
        records
            .iter()
            .all(|r| !r["reason"].as_str().unwrap_or("").contains("lost")),
        "{records:?}"
    );
    let output = daemon.run(&["-stat", "true"]);
    assert!(stderr(&output).contains("job 6"), "{}", stderr(&output));
    assert!(wait_until(Duration::from_secs(10), || !scratch.exists()));
}

/// Two spinning jobs time-sharing `daemon`'s one host, started with
/// `option`; the first one's rank is continued from outside whenever it is
/// switched out, until scored freezes its job. Their scruns, their ranks'
/// pids and the first one's freezer state file; `None` (said) where no v1
/// freezer holds jobs.
fn a_frozen_job_and_another(
    daemon: &Daemon,
    option: &str,
) -> Option<([Job; 2], [i32; 2], std::path::PathBuf)> {
    let spin = testprog();
    let mut first = daemon.spawn(&[option, &spin, "spin", "0"]);
    let pid_a = first.wait_pids(1)[0];
    let mut second = daemon.spawn(&[option, &spin, "spin", "0"]);
    let pid_b = second.wait_pids(1)[0];
    let Some(state_file) =
        freezer_state_file(pid_a).filter(|_| daemon.log().contains("jobs are held in cgroups"))
    else {
        println!("no v1 freezer cgroups here: scored never freezes a job");
        return None;
    };
    let froze = wait_until(Duration::from_secs(30), || {
        if stopped(pid_a) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid_a),
                nix::sys::signal::Signal::SIGCONT,
            );
        }
        is_frozen(&state_file)
    });
    assert!(froze, "scored never froze the job:\n{}", daemon.log());
    Some(([first, second], [pid_a, pid_b], state_file))
}

/// The freezer state file says FROZEN.
fn is_frozen(state_file: &std::path::Path) -> bool {
    std::fs::read_to_string(state_file).is_ok_and(|state| state.trim() == "FROZEN")
}

/// A job that scored froze (its rank was continued from outside while it
/// was switched out) stays frozen while no scored runs, so it never runs
/// beside the job sharing its host; the next scored takes it over frozen,
/// confirms its stops through the freezer, and gang switching goes on.
#[test]
fn a_job_frozen_when_scored_is_killed_stays_frozen_until_the_next_scored() {
    let mut daemon = Daemon::builder()
        .hosts("host0 cores=1\n")
        .timeslice("1s")
        .log("scored=info")
        .start();
    // Kill scored while it holds a job frozen.
    let Some(([mut first, mut second], [pid_a, pid_b], state_file)) =
        a_frozen_job_and_another(&daemon, "-nodes=1")
    else {
        return;
    };
    let frozen = || is_frozen(&state_file);
    daemon.kill_hard();
    std::thread::sleep(Duration::from_millis(500));
    assert!(frozen(), "the job thawed while no scored ran");
    assert!(alive(pid_a) && alive(pid_b));
    daemon.start_again();
    // Both run in turns again.
    let ticks = |pid: i32| proc_stat(pid).map_or(0, |stat| stat.cpu_ticks);
    let (a0, b0) = (ticks(pid_a), ticks(pid_b));
    assert!(
        wait_until(Duration::from_secs(20), || ticks(pid_a) > a0 + 20
            && ticks(pid_b) > b0 + 20),
        "the jobs did not both run after the takeover:\n{}",
        daemon.log()
    );
    daemon.ok("kill 1 KILL");
    daemon.ok("kill 2 KILL");
    for scrun in [&mut first, &mut second] {
        let (status, text) = scrun.wait(Duration::from_secs(10));
        assert_eq!(status.code(), Some(137), "{text}");
    }
    assert!(all_gone(&[pid_a, pid_b], Duration::from_secs(5)));
}

/// A job frozen when scored is killed, whose scored never comes back, is
/// ended by its keeper after `--keeper-wait`: the keeper thaws the job's
/// cgroup after its SIGKILL, without which the frozen rank would never
/// take the signal and stay for good.
#[test]
fn a_frozen_job_whose_scored_never_returns_is_ended_by_its_keeper() {
    let mut daemon = Daemon::builder()
        .hosts("host0 cores=1\n")
        .timeslice("1s")
        .log("scored=info")
        .arg("--keeper-wait")
        .arg("2s")
        .start();
    let Some(([mut first, mut second], [pid_a, pid_b], state_file)) =
        a_frozen_job_and_another(&daemon, "-nodes=1,reattach=3s")
    else {
        return;
    };
    let keepers = [
        crate::crash::parent_of(pid_a),
        crate::crash::parent_of(pid_b),
    ];
    let frozen = || is_frozen(&state_file);
    daemon.kill_hard();
    assert!(
        all_gone(&[pid_a, pid_b], Duration::from_secs(20)),
        "a rank outlived its keeper's wait (frozen: {})",
        frozen()
    );
    assert!(
        all_gone(&keepers, Duration::from_secs(10)),
        "a keeper stayed"
    );
    for scrun in [&mut first, &mut second] {
        let (status, text) = scrun.wait(Duration::from_secs(20));
        assert_eq!(status.code(), Some(69), "{text}");
    }
}

/// A killed daemon that its parent has not reaped stays in /proc as a
/// zombie with its pid: the next scored must still see it as dead, and
/// take its jobs over.
#[test]
fn a_zombie_daemon_is_known_dead() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    let script = format!("{} spin 0; true", testprog());
    let mut job = daemon.spawn(&["-nodes=1", "sh", "-c", &script]);
    let grandchild = job.wait_pids(1)[0];
    let mut zombie = daemon.kill_leaving_zombie();
    daemon.start_again();
    assert_eq!(
        proc_stat(zombie.id() as i32).map(|stat| stat.state),
        Some('Z'),
        "the old daemon must still be a zombie while the new one starts"
    );
    // The daemon's log lines reach the file as its loop writes them out,
    // which may be after its socket accepts.
    let recognised = wait_until(Duration::from_secs(5), || {
        daemon.log().contains("did not exit cleanly")
    });
    let log = daemon.log();
    assert!(
        recognised,
        "the new scored did not recognise the dead one:\n{log}"
    );
    assert!(alive(grandchild));
    assert_eq!(daemon.job_state(1), "running");
    daemon.ok("kill 1 KILL");
    let (status, stderr) = job.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(137), "{stderr}");
    assert!(all_gone(&[grandchild], Duration::from_secs(5)));
    let records = history(&daemon, "history");
    assert_eq!(records.len(), 1);
    assert!(
        !records[0]["reason"].as_str().unwrap_or("").contains("lost"),
        "{records:?}"
    );
    let _ = zombie.wait();
}

#[test]
fn a_live_daemon_keeps_its_state_directory() {
    let daemon = Daemon::start();
    let output = std::process::Command::new(bin("scored"))
        .arg("--socket")
        .arg(daemon.sandbox.path.join("other.sock"))
        .arg("--state-dir")
        .arg(daemon.sandbox.path.join("state"))
        .output()
        .expect("run scored");
    assert_eq!(output.status.code(), Some(1));
    let text = stderr(&output);
    assert!(
        text.contains(&format!(
            "scored: another scored (pid {}) uses the state directory",
            daemon.pid()
        )),
        "{text}"
    );
    assert!(!daemon.sandbox.path.join("other.sock").exists());
    daemon.ok("status");
}

/// Restarts in place through the console and waits for the new image.
fn restart(daemon: &Daemon) -> String {
    let output = daemon.console("restart");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "restart failed: {text}{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        daemon.log()
    );
    text
}

pub(crate) fn daemon_status(daemon: &Daemon) -> serde_json::Value {
    daemon.json("status")
}

pub(crate) fn cpu_ticks(pids: &[i32]) -> u64 {
    pids.iter()
        .filter_map(|pid| proc_stat(*pid))
        .map(|stat| stat.cpu_ticks)
        .sum()
}

/// A copy of scored in a directory of its own, as an installation.
fn installed_scored(dir: &Sandbox) -> std::path::PathBuf {
    let path = dir.path.join("scored");
    std::fs::copy(bin("scored"), &path).expect("copy scored");
    path
}

/// Installs over `path` a build of scored stamped `tag` (a new file
/// renamed over the old one, as package managers do).
fn install_stamped(path: &std::path::Path, tag: &str) {
    const MARKER: &[u8] = b"@@scored-build-stamp@@";
    let mut bytes = std::fs::read(bin("scored")).expect("read scored");
    let mut stamped = 0;
    let mut at = 0;
    while let Some(found) = bytes[at..]
        .windows(MARKER.len())
        .position(|window| window == MARKER)
    {
        let start = at + found + MARKER.len();
        if bytes[start..start + 32].iter().all(|byte| *byte == 0) {
            bytes[start..start + tag.len()].copy_from_slice(tag.as_bytes());
            stamped += 1;
        }
        at = start;
    }
    assert_eq!(stamped, 1, "the build stamp field must appear once");
    let temp = path.with_extension("new");
    std::fs::write(&temp, bytes).expect("write the new build");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::rename(&temp, path).expect("install the new build");
}

/// Jobs of every state keep their ids, states, queues, holds, processes
/// and accounting across `restart`; the gang rotation goes on; output
/// written after the restart reaches scrun; statuses come through scrun.
#[test]
fn jobs_of_every_state_survive_a_restart() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .start();
    let mut gangs = Vec::new();
    let mut gang_pids = Vec::new();
    for _ in 0..2 {
        let mut job = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
        gang_pids.push(job.wait_pids(2));
        gangs.push(job);
    }
    let mut held = daemon.spawn(&["-nodes=1", &testprog(), "spin", "0"]);
    let held_pids = held.wait_pids(1);
    daemon.ok("suspend 3");
    assert!(wait_until(Duration::from_secs(10), || stopped(
        held_pids[0]
    )));
    // Runs across the restart and writes after it.
    let script = "sleep 1.5; echo after the restart; exit 5";
    let mut late = daemon.spawn(&["-nodes=1", "-priority=0", "sh", "-c", script]);
    assert!(wait_until(Duration::from_secs(10), || state_of(&daemon, 4)
        == "running"));
    daemon.ok("kill 4 KILL");
    let (status, _) = late.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(137));
    let mut late = daemon.spawn(&["-nodes=1", "sh", "-c", script]);
    // It is job 5 before the next submission can take that number.
    assert!(wait_until(Duration::from_secs(10), || !state_of(
        &daemon, 5
    )
    .is_empty()));
    // Never runs: its queue is deactivated.
    daemon.ok("queue 2 deactivate");
    let mut queued = daemon.spawn(&["-nodes=1", "-priority=2", &testprog(), "spin", "0"]);
    // Job 6 is this one, admitted before the limit makes the next wait.
    assert!(wait_until(Duration::from_secs(10), || state_of(&daemon, 6) == "queued"));
    daemon.ok("cluster 0 limit jobs=5");
    let mut waiting = daemon.spawn(&["-wait", "-nodes=1", "true"]);
    assert!(wait_until(Duration::from_secs(10), || daemon_status(
        &daemon
    )["waiting"]
        == 1));
    let before: Vec<serde_json::Value> = (1..=6)
        .map(|id| daemon.json(&format!("job {id}")))
        .collect();
    let pid = daemon.pid();

    let text = restart(&daemon);
    assert!(text.starts_with("restarted in place: version "), "{text}");
    let after = daemon_status(&daemon);
    assert_eq!(after["restarts"], 1);
    assert_eq!(after["waiting"], 1);
    assert_eq!(daemon.pid(), pid);
    assert!(daemon.log().contains("took over from the previous image"));
    for (idx, old) in before.iter().enumerate() {
        let id = idx + 1;
        let new = daemon.json(&format!("job {id}"));
        if id == 4 {
            assert_eq!(new["state"], "killed");
            continue;
        }
        for key in [
            "id",
            "user",
            "queue",
            "queues",
            "hosts",
            "procs",
            "command",
            "held",
            "cputime limit",
            "memory limit",
        ] {
            assert_eq!(new[key], old[key], "job {id}: {key}");
        }
        assert!(
            new["cpu"].as_f64() >= old["cpu"].as_f64(),
            "job {id}: CPU time went back from {} to {}",
            old["cpu"],
            new["cpu"]
        );
        assert!(new["wall"].as_f64() >= old["wall"].as_f64(), "job {id}");
    }
    // Finished jobs stay listed: the journal's memory is handed over too.
    let all = daemon.ok("jobs all");
    assert!(
        all.lines()
            .any(|line| line.trim_start().starts_with("4 ") && line.contains("killed")),
        "{all}"
    );
    assert_eq!(daemon.job_field(3, "state"), "held");
    assert_eq!(daemon.job_field(6, "state"), "queued");
    assert!(
        stopped(held_pids[0]),
        "the held job was continued by the restart"
    );
    for pids in &gang_pids {
        assert!(pids.iter().all(|pid| alive(*pid)));
    }
    // The rotation goes on: both gangs get the CPU after the restart.
    let start: Vec<u64> = gang_pids.iter().map(|pids| cpu_ticks(pids)).collect();
    assert!(
        wait_until(Duration::from_secs(10), || gang_pids
            .iter()
            .zip(&start)
            .all(|(pids, before)| cpu_ticks(pids) > *before + 5)),
        "the gang rotation stopped after the restart:\n{}",
        daemon.log()
    );
    // Output after the restart, and the exit status, reach scrun.
    late.wait_lines("after the restart", 1);
    let (status, _) = late.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(5));
    // Holds and waiting jobs carry on.
    daemon.ok("resume 3");
    assert!(wait_until(Duration::from_secs(10), || !stopped(
        held_pids[0]
    ) || state_of(
        &daemon, 3
    ) == "stopped"));
    daemon.ok("cluster 0 limit jobs=none");
    let (status, _) = waiting.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0));
    daemon.ok("kill 1 KILL");
    let (status, _) = gangs.remove(0).wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(137));
    // A job killed before it ever ran reports SIGTERM's status, as without a restart.
    daemon.ok("kill 6 KILL");
    let (status, _) = queued.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(143));
    let ids: Vec<u64> = history(&daemon, "history")
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    assert!(
        ids.contains(&5) && ids.contains(&1) && ids.contains(&7),
        "{ids:?}"
    );
    assert_eq!(
        history(&daemon, "history")
            .iter()
            .filter(|r| r["reason"] == "lost: scored was killed")
            .count(),
        0
    );
}

/// A new binary installed over the old one takes over: `status` shows its
/// version, and the jobs keep running.
#[test]
fn restart_onto_a_new_binary() {
    let install = Sandbox::new();
    let program = installed_scored(&install);
    let daemon = Daemon::builder().program(&program).start();
    assert_eq!(daemon_status(&daemon)["version"], env!("CARGO_PKG_VERSION"));
    let mut job = daemon.spawn(&["-nodes=1", &testprog(), "spin", "0"]);
    let pids = job.wait_pids(1);
    install_stamped(&program, "test2");
    let text = restart(&daemon);
    let version = format!("{}+test2", env!("CARGO_PKG_VERSION"));
    assert!(text.contains(&version), "{text}");
    let after = daemon_status(&daemon);
    assert_eq!(after["version"], version);
    assert_eq!(after["restarts"], 1);
    assert!(alive(pids[0]));
    // And again, onto the same binary.
    restart(&daemon);
    assert_eq!(daemon_status(&daemon)["restarts"], 2);
    daemon.ok("kill 1 KILL");
    let (status, _) = job.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(137));
}

/// A binary that cannot take over leaves the old image serving, with its
/// jobs, and the console is told why.
#[test]
fn a_restart_that_cannot_happen_leaves_the_daemon_serving() {
    let install = Sandbox::new();
    let program = installed_scored(&install);
    let daemon = Daemon::builder().program(&program).start();
    let mut job = daemon.spawn(&["-nodes=1", "sh", "-c", "sleep 2; echo still here; exit 3"]);
    assert!(wait_until(Duration::from_secs(10), || state_of(&daemon, 1)
        == "running"));
    let temp = program.with_extension("new");
    std::fs::write(
        &temp,
        "#!/bin/sh\necho 'scored: handover format 99 cannot be read' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&temp, &program).unwrap();
    let output = daemon.console("restart");
    assert!(!output.status.success());
    let text = stdout(&output) + &stderr(&output);
    assert!(
        text.contains("error: restart failed, scored carries on"),
        "{text}"
    );
    assert!(text.contains("handover format 99 cannot be read"), "{text}");
    std::fs::remove_file(&program).unwrap();
    let output = daemon.console("restart");
    let text = stdout(&output) + &stderr(&output);
    assert!(text.contains("cannot run"), "{text}");
    assert_eq!(daemon_status(&daemon)["restarts"], 0);
    assert!(!daemon.sandbox.path.join("state/handover").exists());
    job.wait_lines("still here", 1);
    let (status, _) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(3));
}

#[test]
fn sigusr2_restarts_in_place() {
    let daemon = Daemon::start();
    let mut job = daemon.spawn(&["-nodes=1", &testprog(), "spin", "0"]);
    let pids = job.wait_pids(1);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.pid() as i32),
        nix::sys::signal::Signal::SIGUSR2,
    );
    assert!(wait_until(Duration::from_secs(10), || daemon
        .console("status")
        .stdout
        .starts_with(b"uptime")
        && daemon_status(&daemon)["restarts"] == 1));
    assert!(alive(pids[0]));
    daemon.ok("kill 1 KILL");
    let (status, _) = job.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(137));
}

#[test]
fn only_the_operator_may_restart() {
    let Some(users) = test_users("restart") else {
        return;
    };
    let daemon = Daemon::start();
    let output = daemon.console_as(&users.a, "restart");
    assert!(!output.status.success());
    let text = stdout(&output) + &stderr(&output);
    assert!(text.contains("permission denied"), "{text}");
    assert_eq!(daemon_status(&daemon)["restarts"], 0);
}

/// The real binary refuses a state it cannot take over (here: the hosts
/// database now gives other hosts), and the daemon carries on.
#[test]
fn a_state_the_new_image_cannot_take_over_is_refused() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let mut job = daemon.spawn(&["-nodes=1", &testprog(), "spin", "0"]);
    let pids = job.wait_pids(1);
    let hosts = two_hosts() + "host9 cpus=0\n";
    daemon.sandbox.write("scorehosts.db", &hosts);
    let output = daemon.console("restart");
    assert!(!output.status.success());
    let text = stdout(&output) + &stderr(&output);
    assert!(text.contains("restart failed, scored carries on"), "{text}");
    assert!(text.contains("the hosts changed"), "{text}");
    assert!(daemon
        .log()
        .contains("in-place restart failed; carrying on"));
    assert_eq!(daemon_status(&daemon)["restarts"], 0);
    assert!(alive(pids[0]));
    daemon.sandbox.write("scorehosts.db", &two_hosts());
    restart(&daemon);
    assert!(alive(pids[0]));
    daemon.ok("kill 1 KILL");
    let (status, _) = job.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(137));
}

/// Jobs started after a restart get their scrun's descriptor limits, as
/// before it, never the raised ones the daemon's new image starts with.
#[test]
fn jobs_after_a_restart_keep_the_original_descriptor_limit() {
    let daemon = Daemon::builder().nofile(1000, 4000).start();
    let limits = |daemon: &Daemon| {
        let scrun = daemon.scrun(&[]);
        let output = Command::new("prlimit")
            .arg("--nofile=700:3000")
            .arg("--")
            .arg(bin("scrun"))
            .args(["sh", "-c", "ulimit -Sn; ulimit -Hn"])
            .envs(
                scrun
                    .get_envs()
                    .filter_map(|(key, value)| Some((key, value?))),
            )
            .env_remove("SCORE_OPTIONS")
            .current_dir(&daemon.sandbox.path)
            .stdin(Stdio::null())
            .output()
            .expect("prlimit scrun");
        assert_eq!(code(&output), Some(0), "{}", stderr(&output));
        stdout(&output)
    };
    let before = limits(&daemon);
    assert_eq!(before, "700\n3000\n");
    restart(&daemon);
    assert_eq!(limits(&daemon), before);
}

/// A restart asked for while a job's processes are still being created
/// happens at once: the job's keeper goes on creating them, and the new
/// image takes the keeper over; no process is lost.
#[test]
fn a_restart_during_a_launch_hands_it_over() {
    let n = 600;
    let daemon = Daemon::builder()
        .hosts(&format!("host0 cores={n}\n"))
        .start();
    let mut job = daemon.spawn(&[
        &format!("-nodes={n}"),
        "sh",
        "-c",
        "echo pid $$; exec sleep 60",
    ]);
    job.wait_pids(1);
    let asked = std::time::Instant::now();
    let text = restart(&daemon);
    let took = asked.elapsed();
    assert!(text.contains("restarted in place"), "{text}");
    assert!(took < Duration::from_secs(5), "the restart took {took:?}");
    assert_eq!(daemon_status(&daemon)["restarts"], 1);
    let pids = job.wait_pids(n);
    assert!(pids.iter().all(|pid| alive(*pid)));
    // Each rank once: n ranks, no more.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(job.count_lines("pid "), n);
    assert_eq!(ranks_of(&daemon.job_pids(1)).len(), n);
    daemon.ok("kill 1 KILL");
    let (status, _) = job.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(137));
    assert!(all_gone(&pids, Duration::from_secs(10)));
}

/// A plain user's large launches in flight do not hold a restart up:
/// four jobs submitted at once, the restart asked for while they launch,
/// one of them held in flight by a working directory on a file system
/// that hangs. It happens without waiting for them (their launches are
/// handed over and go on in the new image), and once the file system
/// answers every job gets each of its ranks once and ends with its
/// status; nothing is left.
#[test]
fn a_restart_is_not_held_up_by_a_user_s_launches_in_flight() {
    let (n, jobs) = (300, 4);
    let daemon = Daemon::builder()
        .hosts(&format!("host0 cores={}\n", n * jobs))
        .start();
    let users = test_users("a_restart_is_not_held_up (as root instead)");
    // The first job works in a directory whose file system hangs until
    // released: its ranks wait in their chdir, before their exec, and as a
    // launch has fewer ranks between fork and exec at a time than the job
    // has, its keeper is still creating them for as long as it hangs.
    let Some(hung) = HungDir::mount(&daemon.sandbox.path.join("hung")) else {
        println!("no FUSE here: no launch can be held in flight");
        return;
    };
    let nodes = format!("-nodes={n}");
    let args = [&nodes, "sh", "-c", "echo pid $$; sleep 1; exit 5"];
    let start = |dir: &std::path::Path| {
        let mut scrun = match &users {
            Some(users) => daemon.scrun_as(&users.a, &args),
            None => daemon.scrun(&args),
        };
        Job::start(scrun.current_dir(dir))
    };
    let mut spawned = vec![start(hung.path())];
    spawned.extend((1..jobs).map(|_| start(&daemon.sandbox.path)));
    assert!(
        wait_until(Duration::from_secs(60), || hung.held() > 0),
        "no rank of the first job reached its working directory:\n{}",
        daemon.log()
    );
    spawned[1].wait_pids(1);
    let asked = std::time::Instant::now();
    let text = restart(&daemon);
    let took = asked.elapsed();
    assert!(text.contains("restarted in place"), "{text}");
    println!("the restart took {took:?} with launches of {jobs} x {n} ranks in flight");
    // The keepers are taken over after the reply.
    assert!(
        wait_until(Duration::from_secs(30), || daemon
            .log()
            .contains("took over a keeper still creating")),
        "the launch held in flight was not handed over:\n{}",
        daemon.log()
    );
    assert!(
        hung.held() > 0,
        "the held launch went on before its release"
    );
    hung.release();
    for (i, job) in spawned.iter_mut().enumerate() {
        let (status, stderr) = job.wait(Duration::from_secs(120));
        let pids = job.wait_pids(n);
        assert_eq!(status.code(), Some(5), "job {}: {stderr}", i + 1);
        assert_eq!(job.count_lines("pid "), n, "job {}: each rank once", i + 1);
        assert!(all_gone(&pids, Duration::from_secs(10)));
    }
    assert!(daemon.all_job_pids().is_empty());
}

/// The launch of a pipe of stages (`==`) handed over by a restart keeps
/// its pipes: each reader gets its writer's whole output and its end, and
/// no rank waits for an end that a leaked descriptor holds back.
#[test]
fn a_restart_hands_over_the_pipes_of_a_launch() {
    let n = 300;
    let daemon = Daemon::builder()
        .hosts(&format!("host0 cores={}\n", 2 * n))
        .start();
    let mut job = daemon.spawn(&[
        &format!("-nodes={n}"),
        "sh",
        "-c",
        "seq 3",
        "==",
        "sh",
        "-c",
        "echo pid $$; echo lines=$(wc -l)",
    ]);
    assert!(wait_until(Duration::from_secs(20), || state_of(&daemon, 1)
        == "running"));
    let text = restart(&daemon);
    assert!(text.contains("restarted in place"), "{text}");
    if !daemon.log().contains("took over a keeper still creating") {
        eprintln!("the launch ended before the restart was asked for; nothing handed over");
    }
    job.wait_pids(n);
    let (status, stderr) = job.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let counts = job.lines_with("lines=");
    assert_eq!(
        counts.iter().filter(|l| l.trim() == "3").count(),
        n,
        "every reader counts its writer's 3 lines: {counts:?}\n{}",
        daemon.log()
    );
    assert!(daemon.all_job_pids().is_empty());
}

/// The ranks (leaders of their own process groups) among `pids`.
fn ranks_of(pids: &[i32]) -> Vec<i32> {
    pids.iter()
        .copied()
        .filter(|pid| proc_stat(*pid).is_some_and(|stat| stat.pgrp == *pid))
        .collect()
}

/// A job suspended while its processes are still being created does not
/// make a restart fail or wait: its keeper stops what it created and
/// creates nothing more while the job is suspended, and the new image takes
/// it over so. After the restart the job is suspended with every process
/// it has stopped; `resume` has its keeper create the rest, the job runs to
/// its end, whose status scrun reports, and nothing of it is left. The
/// suspend is issued as soon as the job exists, again until it falls within
/// the launch. The job is a plain user's when the tests can make one.
#[test]
fn a_restart_hands_over_the_launch_of_a_job_suspended_during_it() {
    let n = 200;
    let daemon = Daemon::builder()
        .hosts(&format!("host0 cores={n}\n"))
        .start();
    let users = test_users("a_restart_hands_over_the_launch (as root instead)");
    let mut hit = 0;
    let mut id = 0;
    while hit < 2 {
        id += 1;
        assert!(
            id <= 10,
            "no suspend fell within a launch of {n} ranks in {} attempts",
            id - 1
        );
        let nodes = format!("-nodes={n}");
        let args = [&nodes, "bash", "-c", "echo pid $$; sleep 1; exit 3"];
        let mut job = match &users {
            Some(users) => daemon.spawn_as(&users.a, &args),
            None => daemon.spawn(&args),
        };
        let suspended = wait_until(Duration::from_secs(20), || {
            code(&daemon.console(&format!("suspend {id}"))) == Some(0)
        });
        assert!(suspended, "job {id} never suspended:\n{}", daemon.log());
        let created = ranks_of(&daemon.job_pids(id)).len();
        if created < n {
            hit += 1;
        }
        let text = restart(&daemon);
        assert!(text.contains("restarted in place"), "{text}");
        assert_eq!(state_of(&daemon, id), "held", "job {id}");
        let ranks = ranks_of(&daemon.job_pids(id));
        assert!(
            ranks.len() >= created && ranks.len() <= n,
            "job {id}: {} ranks after the restart, {created} before it",
            ranks.len()
        );
        let pids = daemon.job_pids(id);
        let running: Vec<i32> = pids.iter().copied().filter(|pid| !stopped(*pid)).collect();
        assert!(
            running.is_empty(),
            "job {id}: processes of the suspended job run after the restart: {:?}\n{}",
            running
                .iter()
                .map(|pid| (*pid, proc_stat(*pid)))
                .collect::<Vec<_>>(),
            daemon.log()
        );
        daemon.ok(&format!("resume {id}"));
        // Every rank runs, and what it writes reaches scrun.
        let pids = job.wait_pids(n);
        let (status, stderr) = job.wait(Duration::from_secs(60));
        assert_eq!(status.code(), Some(3), "job {id}: {stderr}");
        assert_eq!(job.count_lines("pid "), n, "job {id}: each rank once");
        assert!(
            all_gone(&pids, Duration::from_secs(10))
                && wait_until(Duration::from_secs(10), || daemon.job_pids(id).is_empty()),
            "job {id}: processes left behind"
        );
    }
    assert_eq!(daemon_status(&daemon)["restarts"], id);
    assert!(daemon.all_job_pids().is_empty());
}

/// A job that scored froze (a rank continued from outside while it was
/// suspended) with its launch still in progress is handed over frozen: it
/// never runs while suspended, across the restart; `resume` then has it
/// created whole and run to its end.
#[test]
fn a_restart_hands_over_a_frozen_job_during_its_launch() {
    let n = 200;
    let daemon = Daemon::builder()
        .hosts(&format!("host0 cores={n}\n"))
        .log("scored=info")
        .start();
    let nodes = format!("-nodes={n}");
    let args = [nodes.as_str(), "bash", "-c", "echo pid $$; sleep 1; exit 3"];
    let mut id = 0;
    let (mut job, rank) = loop {
        id += 1;
        assert!(id <= 10, "no suspend fell within a launch of {n} ranks");
        let job = daemon.spawn(&args);
        assert!(wait_until(Duration::from_secs(20), || {
            code(&daemon.console(&format!("suspend {id}"))) == Some(0)
        }));
        let ranks = ranks_of(&daemon.job_pids(id));
        if !ranks.is_empty() && ranks.len() < n {
            break (job, ranks[0]);
        }
        daemon.ok(&format!("kill {id} KILL"));
        drop(job);
    };
    let Some(state_file) =
        freezer_state_file(rank).filter(|_| daemon.log().contains("jobs are held in cgroups"))
    else {
        println!("no v1 freezer cgroups here: scored never freezes a job");
        return;
    };
    let frozen =
        || std::fs::read_to_string(&state_file).is_ok_and(|state| state.trim() == "FROZEN");
    assert!(wait_until(Duration::from_secs(10), || stopped(rank)));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(rank),
        nix::sys::signal::Signal::SIGCONT,
    )
    .expect("SIGCONT to the rank");
    assert!(
        wait_until(Duration::from_secs(10), frozen),
        "scored never froze the job:\n{}",
        daemon.log()
    );
    let text = restart(&daemon);
    assert!(text.contains("restarted in place"), "{text}");
    assert_eq!(state_of(&daemon, id), "held");
    assert!(
        frozen(),
        "the job is not frozen after the restart:\n{}",
        daemon.log()
    );
    let ranks = ranks_of(&daemon.job_pids(id));
    assert!(!ranks.is_empty() && ranks.len() <= n);
    assert!(
        ranks
            .iter()
            .all(|pid| freezer_state_file(*pid).as_ref() == Some(&state_file)),
        "every rank is in the job's frozen cgroup"
    );
    daemon.ok(&format!("resume {id}"));
    job.wait_pids(n);
    let (status, stderr) = job.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(
        wait_until(Duration::from_secs(10), || daemon.all_job_pids().is_empty()),
        "processes left behind"
    );
}
