//! Listings in text and JSON carry the same facts; both shutdown
//! forms leave no job process and tell scrun why.

use std::time::Duration;

use nix::sys::signal::Signal;
use scored_tests::*;

/// Splits an aligned table into its header keys and rows of cells; cells
/// are separated by two or more blanks.
fn parse_table(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let split = |line: &str| -> Vec<String> {
        line.split("  ")
            .map(str::trim)
            .filter(|cell| !cell.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut lines = text.lines();
    let header = lines.next().map(split).unwrap_or_default();
    (header, lines.map(split).collect())
}

/// Checks that a table and its JSON form have the same columns and rows,
/// and that text cells of plain values match their JSON.
fn same_facts(daemon: &Daemon, line: &str) {
    let (header, rows) = parse_table(&daemon.ok(line));
    let json = daemon.json(line);
    let array = json
        .as_array()
        .unwrap_or_else(|| panic!("'{line}' JSON is not an array: {json}"));
    assert_eq!(array.len(), rows.len(), "'{line}': rows differ");
    for (row, object) in rows.iter().zip(array) {
        let object = object.as_object().expect("rows are objects");
        let keys: Vec<String> = object.keys().map(|key| key.to_uppercase()).collect();
        for column in &header {
            assert!(
                keys.contains(column),
                "'{line}': column {column} missing from JSON {object:?}"
            );
        }
        assert_eq!(
            row.len(),
            header.len(),
            "'{line}': a row has empty cells: {row:?}"
        );
        for (column, cell) in header.iter().zip(row) {
            let value = &object[&column.to_lowercase()];
            match value {
                serde_json::Value::String(text) => {
                    assert_eq!(text, cell, "'{line}' column {column}")
                }
                serde_json::Value::Number(number)
                    if number.is_u64() && cell.chars().all(|c| c.is_ascii_digit()) =>
                {
                    assert_eq!(number.to_string(), *cell, "'{line}' column {column}");
                }
                serde_json::Value::Null => assert_eq!(cell, "-", "'{line}' column {column}"),
                serde_json::Value::Bool(flag) => assert_eq!(cell, if *flag { "yes" } else { "no" }),
                _ => {}
            }
        }
    }
}

#[test]
fn every_listing_has_a_json_form_with_the_same_facts() {
    let daemon = Daemon::builder()
        .hosts(
            "a0 cpugen=amd speed=2 cpus=0\na1 cpugen=amd speed=2 cpus=0\nb0 cpugen=intel cpus=0\n",
        )
        .rc("queue 1 set memory=25% residency=5m\ncluster amd limit jobs=10\n")
        .start();
    let mut job = daemon.spawn(&["-nodes=2", "sleep", "30"]);
    assert!(wait_until(Duration::from_secs(10), || !daemon
        .job_pids(1)
        .is_empty()));
    assert_eq!(code(&daemon.run(&["true"])), Some(0));
    for line in ["hosts", "clusters", "queues", "jobs", "jobs all"] {
        same_facts(&daemon, line);
    }
    // Records: one `key: value` line per JSON key.
    for line in ["status", "job 1", "job 2", "timeslice"] {
        let text = daemon.ok(line);
        let json = daemon.json(line);
        let object = json
            .as_object()
            .unwrap_or_else(|| panic!("'{line}' JSON is not an object"));
        let keys: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once(": ").map(|(key, _)| key))
            .collect();
        assert_eq!(
            keys,
            object.keys().map(String::as_str).collect::<Vec<_>>(),
            "'{line}' keys differ"
        );
    }
    let record = daemon.json("job 1");
    for key in [
        "id", "user", "state", "queue", "hosts", "procs", "cpu", "wall", "stopped", "switches",
        "memory",
    ] {
        assert!(record.get(key).is_some(), "job 1 lacks {key}");
    }
    let ended = daemon.json("job 2");
    assert_eq!(ended["exit"], 0);
    assert_eq!(ended["state"], "done");
    assert!(ended.get("reason").is_some());
    let status = daemon.json("status");
    for key in ["uptime", "timeslice", "jobs", "switches", "switch latency"] {
        assert!(status.get(key).is_some(), "status lacks {key}");
    }
    // Errors are errors in both forms.
    let output = daemon.console("job 99");
    assert!(!output.status.success());
    assert!(
        stderr(&output).starts_with("error: no job 99"),
        "{}",
        stderr(&output)
    );
    job.signal(Signal::SIGINT);
    job.wait(Duration::from_secs(30));
}

#[test]
fn shutdown_lets_running_jobs_finish_then_exits() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    let mut job = daemon.spawn(&["sh", "-c", "sleep 1; echo finished"]);
    assert!(wait_until(Duration::from_secs(10), || !daemon
        .job_pids(1)
        .is_empty()));
    let reply = daemon.ok("shutdown");
    assert!(reply.contains("waiting for 1 job"), "{reply}");
    let late = daemon.run(&["true"]);
    assert_eq!(code(&late), Some(scored_proto::exitcode::REJECTED));
    assert!(stderr(&late).contains("shutting down"), "{}", stderr(&late));
    assert_eq!(job.wait_lines("finished", 1).len(), 1);
    let (status, _) = job.wait(Duration::from_secs(30));
    assert!(status.success());
    let exit = daemon
        .wait_exit(Duration::from_secs(20))
        .expect("scored exits after its last job");
    assert!(exit.success(), "{exit}");
    assert!(!daemon.socket.exists(), "the socket is removed at exit");
}

#[test]
fn shutdown_now_kills_jobs_tells_scrun_and_leaves_nothing() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("50ms")
        .arg("--kill-grace")
        .arg("1s")
        .start();
    let mut running = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let mut stopped = daemon.spawn(&["-nodes=2", &testprog(), "ignore-term", "600"]);
    let mut pids = running.wait_pids(2);
    pids.extend(stopped.wait_pids(2));
    daemon.ok("suspend 2");
    let reply = daemon.ok("shutdown now");
    assert!(reply.contains("killing 2 jobs"), "{reply}");
    for job in [&mut running, &mut stopped] {
        let (status, message) = job.wait(Duration::from_secs(30));
        assert!(!status.success());
        assert!(
            message.contains("shutting down"),
            "scrun must say why: {message}"
        );
    }
    assert!(
        daemon.wait_exit(Duration::from_secs(20)).is_some(),
        "scored must exit"
    );
    assert!(
        pids.iter().all(|pid| !alive(*pid)),
        "job processes survived the shutdown"
    );
    assert!(daemon.all_job_pids().is_empty());
}

#[test]
fn sigterm_to_scored_kills_every_job_even_stopped_ones() {
    let mut daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("50ms")
        .start();
    let mut first = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let mut second = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let mut pids = first.wait_pids(2);
    pids.extend(second.wait_pids(2));
    assert!(wait_until(Duration::from_secs(5), || pids.iter().any(
        |pid| proc_stat(*pid).is_some_and(|stat| stat.state == 'T')
    )));
    let status = daemon.stop().expect("scored was running");
    assert!(
        status.success(),
        "scored exits cleanly on SIGTERM: {status}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || pids
            .iter()
            .all(|pid| !alive(*pid))),
        "processes left behind: {:?}",
        pids.iter()
            .filter_map(|pid| proc_stat(*pid).map(|stat| (pid, stat.state)))
            .collect::<Vec<_>>()
    );
    first.wait(Duration::from_secs(10));
    second.wait(Duration::from_secs(10));
}

/// A console command is an input like any other, so a switch it
/// causes is carried out as a tick's is: the stop is waited for and the job
/// that takes the hosts enters before the reply goes out. When `suspend`
/// is answered, the suspended job's processes are stopped and the other
/// job's run (the kernel's word, read the moment the reply arrives).
#[test]
fn a_suspend_is_answered_once_its_switch_is_done() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .start();
    let mut jobs = Vec::new();
    let mut pids = Vec::new();
    for _ in 0..2 {
        let mut job = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
        pids.push(job.wait_pids(2));
        jobs.push(job);
    }
    // No rotation from now on: only the suspend switches.
    daemon.ok("timeslice 1h");
    let all = |pids: &[i32], state: fn(i32) -> bool| pids.iter().all(|pid| state(*pid));
    let mut running = None;
    assert!(
        wait_until(Duration::from_secs(10), || {
            running = (0..2)
                .find(|&idx| all(&pids[idx], |pid| !stopped(pid)) && all(&pids[1 - idx], stopped));
            running.is_some()
        }),
        "the two jobs never settled into one running, one stopped\n{}",
        daemon.log()
    );
    let running = running.expect("checked");
    let mut console = scored_proto::client::Connection::connect(&daemon.socket).expect("connect");
    let (ok, text, _) = console
        .console(&format!("suspend {}", running + 1), false)
        .expect("a reply");
    let suspended_stopped = all(&pids[running], stopped);
    let other_running = all(&pids[1 - running], |pid| !stopped(pid));
    assert!(ok, "suspend failed: {text}");
    assert!(
        suspended_stopped,
        "job {} still runs when its suspend is answered",
        running + 1
    );
    assert!(
        other_running,
        "job {} is still stopped when the suspend of job {} is answered\n{}",
        2 - running,
        running + 1,
        daemon.log()
    );
    // The suspended job would get an interrupt only once resumed: both
    // are killed from the console.
    daemon.ok("kill 1");
    daemon.ok("kill 2");
    for job in &mut jobs {
        job.wait(Duration::from_secs(30));
    }
}
