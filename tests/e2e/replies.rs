//! Honest replies: what scrun, sc_console and scored's log say when a job
//! cannot run, waits, is refused or killed, and when a start is refused,
//! each naming the real cause and what to do about it.

use std::process::Stdio;
use std::time::Duration;

use scored_tests::*;

#[test]
fn a_program_not_on_path_is_said_to_be_so() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let output = daemon.run(&["no-such-program-here", "x"]);
    assert_eq!(code(&output), Some(127));
    assert_eq!(
        stderr(&output),
        format!(
            "scrun: job 1 launch failed: cannot run 'no-such-program-here' in {}: no such \
             program on PATH (give its path, as ./no-such-program-here, for one in the working \
             directory)\n",
            daemon.sandbox.path.display()
        )
    );
}

/// A job of a deactivated queue says why it waits; when it starts at
/// last in a directory removed meanwhile, the failure names that step.
#[test]
fn a_waiting_job_says_why_and_a_directory_it_cannot_enter_is_named() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .rc("queue 2 deactivate\n")
        .start();
    let dir = daemon.sandbox.path.join("gone");
    std::fs::create_dir(&dir).expect("mkdir");
    let said = daemon.sandbox.path.join("scrun.err");
    let mut scrun = daemon
        .scrun(&["-priority=2", "true"])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&said).expect("create"))
        .spawn()
        .expect("scrun");
    let waits = "scrun: job 1 waits because queue 2 is deactivated (Ctrl-C withdraws it)\n";
    assert!(
        wait_until(Duration::from_secs(20), || std::fs::read_to_string(&said)
            .is_ok_and(|text| text == waits)),
        "{:?}",
        std::fs::read_to_string(&said)
    );
    assert_eq!(
        daemon.job_field(1, "waits"),
        "because queue 2 is deactivated"
    );
    std::fs::remove_dir(&dir).expect("rmdir");
    daemon.ok("queue 2 activate");
    let status = scrun.wait().expect("wait");
    assert_eq!(status.code(), Some(126));
    assert_eq!(
        std::fs::read_to_string(&said).expect("read"),
        format!(
            "{waits}scrun: job 1 launch failed: cannot run 'true': cannot enter the working \
             directory {}: No such file or directory (os error 2)\n",
            dir.display()
        )
    );
}

#[test]
fn a_held_job_is_said_to_be_held() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .rc("queue 2 deactivate\n")
        .start();
    let mut job = daemon.spawn(&["-priority=2", "true"]);
    assert!(wait_until(Duration::from_secs(10), || daemon.job_state(1) == "queued"));
    daemon.ok("suspend 1");
    assert_eq!(daemon.job_field(1, "waits"), "because an operator holds it");
    daemon.ok("queue 2 activate");
    assert_eq!(daemon.job_field(1, "waits"), "because an operator holds it");
    daemon.ok("resume 1");
    let (status, _) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0));
    assert_eq!(daemon.job_field(1, "waits"), serde_json::Value::Null);
}

#[test]
fn a_refusal_for_want_of_room_names_wait() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .rc("cluster 0 limit jobs=1\n")
        .start();
    let mut holder = daemon.spawn(&["sh", "-c", "echo holding; exec sleep 60"]);
    holder.wait_lines("holding", 1);
    let output = daemon.run(&["true"]);
    assert_eq!(code(&output), Some(75));
    assert_eq!(
        stderr(&output),
        "scrun: job rejected: jobs: cluster default already has 1 admitted job (limit 1) (scrun \
         -wait waits until it fits)\n"
    );
    // A refusal that waiting cannot mend says nothing of -wait.
    let output = daemon.run(&["-nodes=3", "true"]);
    assert_eq!(code(&output), Some(75));
    assert!(!stderr(&output).contains("-wait"), "{}", stderr(&output));
}

#[test]
fn a_job_over_its_disk_limit_is_told_its_program_counts() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .timeslice("100ms")
        .rc("cluster 0 limit disk=1M\nqueue 1 set disk=100%\n")
        .start();
    // The test program is far larger than 1M and writes nothing.
    let output = daemon.run(&[&testprog(), "spin", "0"]);
    assert_eq!(code(&output), Some(76), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(
        said.starts_with("scrun: job 1 killed: disk ")
            && said.contains(" over the limit of 1M (")
            && said.ends_with(
                " of it the job's program files, which count as its disk, the rest its \
                 SCORE_TMPDIR)\n"
            ),
        "{said}"
    );
}

fn start_scored(sandbox: &Sandbox, rc: &str) -> std::process::Output {
    std::process::Command::new(bin("scored"))
        .arg("--rc")
        .arg(sandbox.write("scored.rc", rc))
        .arg("--hosts")
        .arg(sandbox.write("scorehosts.db", "h0 cpus=0 comment=rack1\n"))
        .arg("--socket")
        .arg(sandbox.path.join("s.sock"))
        .arg("--state-dir")
        .arg(sandbox.path.join("state"))
        .arg("--idle-exit")
        .arg("1s")
        .current_dir(&sandbox.path)
        .env_remove("SCORED_SOCKET")
        .output()
        .expect("scored")
}

/// An rc typo gets no far-fetched suggestion and leaves nothing that the
/// next start takes for a crash; a warning of the hosts database is one
/// log line that quotes the line it is about.
#[test]
fn a_refused_start_is_not_taken_for_a_crash_and_warnings_are_one_line() {
    let sandbox = Sandbox::new();
    let output = start_scored(&sandbox, "foo bar\n");
    assert_eq!(code(&output), Some(1));
    let said = stderr(&output);
    assert!(
        said.contains("scored.rc:1: unknown command 'foo' in 'foo bar': help lists the commands"),
        "{said}"
    );
    assert!(!said.contains("did you mean"), "{said}");

    let output = start_scored(&sandbox, "timeslice 200ms\n");
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let log = stderr(&output);
    assert!(!log.contains("did not exit cleanly"), "{log}");
    let warning = log
        .lines()
        .find(|line| line.contains("WARN"))
        .unwrap_or_else(|| panic!("no warning in\n{log}"));
    assert!(
        warning.ends_with(
            "scorehosts.db:1:11: warning: host 'h0', attribute comment: unknown attribute; kept \
             and ignored (scored reads group, cpugen, speed, cores, cpus, memory, watchfs): in \
             'h0 cpus=0 comment=rack1'"
        ),
        "{warning}"
    );
    assert!(!log.contains("\\n"), "{log}");
}

#[test]
fn a_program_on_path_that_cannot_be_run_is_told_apart_from_one_not_found() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let dir = daemon.sandbox.path.join("bin");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("not-executable"), "#!/bin/sh\necho ran\n").expect("write");
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = daemon
        .scrun(&["not-executable"])
        .env("PATH", &path)
        .output()
        .expect("scrun");
    assert_eq!(code(&output), Some(126), "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        format!(
            "scrun: job 1 launch failed: cannot run 'not-executable' in {}: permission denied \
             while searching PATH (a directory of PATH the user may not search, or a \
             'not-executable' there the user may not execute)\n",
            daemon.sandbox.path.display()
        )
    );
}
