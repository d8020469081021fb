//! Units that cannot surprise: sizes and durations that are surely a unit
//! forgotten are refused with a hint, on every surface that takes them
//! (scrun's options, console commands, scored's flags and TOML file), and
//! nothing changes.

use scored_tests::*;

/// A refused scrun ends with the usage status, says how to write the
/// value, and leaves the daemon without a job.
#[track_caller]
fn refused(daemon: &Daemon, args: &[&str], expected: &str) {
    let output = daemon.run(args);
    assert_eq!(code(&output), Some(64), "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        format!("scrun: {expected}\nscrun: try 'scrun -help' for usage\n")
    );
    assert_eq!(daemon.json("jobs all"), serde_json::json!([]));
}

#[test]
fn scrun_refuses_a_memory_limit_in_bytes_and_a_time_without_unit() {
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .rc("queue 1 set memory=100%\n")
        .start();
    refused(
        &daemon,
        &["-memory=10", "true"],
        "option 'memory' on the command line: limit '10' is 10 bytes, under the 1M that any \
         job needs (a size without a unit is in bytes: write 512M or 2G)",
    );
    refused(
        &daemon,
        &["-disk=512K", "true"],
        "option 'disk' on the command line: limit '512K' is 512K, under the 1M that any job \
         needs (a size without a unit is in bytes: write 512M or 2G)",
    );
    refused(
        &daemon,
        &["-time=5", "true"],
        "option 'time' on the command line: '5' has no unit: write 5m for minutes or 5s for \
         seconds (Slurm and LSF read a number alone as minutes)",
    );
    // With their units they are what they say.
    let output = daemon.run(&["-memory=64M,time=5m", "sh", "-c", "echo ran"]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "ran\n");
    assert_eq!(daemon.job_field(1, "memory limit"), 64 << 20);
}

#[test]
fn the_console_refuses_a_slice_over_a_minute_without_unit_and_a_limit_in_bytes() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let output = daemon.console("timeslice 100");
    assert_eq!(code(&output), Some(1));
    assert_eq!(
        stderr(&output),
        "error: time slice '100' has no unit in 'timeslice 100': a number alone is seconds, so \
         it would be 1m40s: write 100ms, or 100s if seconds are meant\n"
    );
    assert_eq!(daemon.ok("timeslice"), "timeslice: 500ms\n");
    assert_eq!(daemon.ok("timeslice 100s"), "timeslice: 1m40s\n");
    assert_eq!(daemon.ok("timeslice 2"), "timeslice: 2.00s\n");

    let before = daemon.ok("clusters");
    let output = daemon.console("cluster 0 limit memory=10");
    assert_eq!(code(&output), Some(1));
    assert!(
        stderr(&output)
            .contains("a memory limit of 10 is 10 bytes, under the 1M that any job needs"),
        "{}",
        stderr(&output)
    );
    assert_eq!(daemon.ok("clusters"), before);
}

fn start_scored(sandbox: &Sandbox, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin("scored"))
        .args(args)
        .arg("--socket")
        .arg(sandbox.path.join("s.sock"))
        .arg("--state-dir")
        .arg(sandbox.path.join("state"))
        .current_dir(&sandbox.path)
        .env_remove("SCORED_SOCKET")
        .output()
        .expect("scored")
}

#[test]
fn scored_names_the_slice_as_typed_and_reads_numbers_in_its_file_as_its_flags() {
    let sandbox = Sandbox::new();
    let output = start_scored(&sandbox, &["--timeslice", "0"]);
    assert_eq!(code(&output), Some(1));
    assert!(
        stderr(&output).contains(
            "--timeslice: time slice '0' out of range: expected a duration from 1ms to 1h such \
             as 500ms"
        ),
        "{}",
        stderr(&output)
    );
    let config = sandbox.write("scored.toml", "timeslice = 500\n");
    let output = start_scored(&sandbox, &["--config", &config.display().to_string()]);
    assert_eq!(code(&output), Some(1));
    assert!(
        stderr(&output).contains(
            "--timeslice: time slice '500' has no unit: a number alone is seconds, so it would \
             be 8m20s: write 500ms, or 500s if seconds are meant"
        ),
        "{}",
        stderr(&output)
    );
    assert!(!sandbox.path.join("s.sock").exists());

    // A number the flag takes, the file takes too.
    let config = sandbox.write("good.toml", "timeslice = 2\nkill_grace = 1\n");
    let daemon = Daemon::builder()
        .hosts(&two_hosts())
        .arg("--config")
        .arg(&config.display().to_string())
        .start();
    assert_eq!(daemon.ok("timeslice"), "timeslice: 2.00s\n");
}

#[test]
fn the_hosts_database_refuses_a_host_memory_in_bytes_where_it_is_written() {
    let sandbox = Sandbox::new();
    let hosts = sandbox.write(
        "scorehosts.db",
        "# two hosts\nhost0 cpus=0\nhost1 cpus=0 memory=512\n",
    );
    let output = start_scored(&sandbox, &["--hosts", &hosts.display().to_string()]);
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));
    let expected = format!(
        "{}:3:14: host 'host1', attribute memory: invalid memory '512': is 512 bytes, under the \
         1M that any job needs (a size without a unit is in bytes: write 512M or 2G)",
        hosts.display()
    );
    assert!(stderr(&output).contains(&expected), "{}", stderr(&output));
    assert!(!sandbox.path.join("s.sock").exists());
    // With its unit it is what it says.
    let hosts = sandbox.write("good.db", "host0 cpus=0 memory=512M\n");
    let daemon = Daemon::builder()
        .hosts(&std::fs::read_to_string(&hosts).expect("read"))
        .start();
    assert!(
        daemon.ok("hosts").contains("512M"),
        "{}",
        daemon.ok("hosts")
    );
}
