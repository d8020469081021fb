//! The sc_replay program on small traces whose answers are
//! worked out by hand (first come, first served and EASY backfilling on
//! five jobs), gzip input, malformed lines, the generator, the picture,
//! and the workload built to starve.

use std::process::{Command, Output};

use scored_tests::*;

/// Five jobs on 4 processors (number, submit, run, procs, requested):
/// 1: 0 100 2 100; 2: 10 50 4 50; 3: 20 60 2 60; 4: 30 30 1 30;
/// 5: 40 200 2 200.
const FIVE: &str = "\
; Version: 2.2
; MaxProcs: 4
1 0 -1 100 2 -1 -1 2 100 -1 1 1 1 1 1 -1 -1 -1
2 10 -1 50 4 -1 -1 4 50 -1 1 1 1 1 1 -1 -1 -1
3 20 -1 60 2 -1 -1 2 60 -1 1 1 1 1 1 -1 -1 -1
4 30 -1 30 1 -1 -1 1 30 -1 1 1 1 1 1 -1 -1 -1
5 40 -1 200 2 -1 -1 2 200 -1 1 1 1 1 1 -1 -1 -1
";

fn sc_replay(sandbox: &Sandbox, args: &[&str]) -> Output {
    Command::new(bin("sc_replay"))
        .args(args)
        .current_dir(&sandbox.path)
        .output()
        .expect("run sc_replay")
}

fn json(output: &Output) -> serde_json::Value {
    assert_eq!(code(output), Some(0), "{}", stderr(output));
    serde_json::from_str(&stdout(output))
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", stdout(output)))
}

fn close(value: &serde_json::Value, expected: f64) -> bool {
    value
        .as_f64()
        .is_some_and(|got| (got - expected).abs() < 1e-9)
}

#[test]
fn five_jobs_first_come_first_served_as_worked_out_by_hand() {
    let sandbox = Sandbox::new();
    sandbox.write("five.swf", FIVE);
    sandbox.write("fcfs.rc", "queue 1 set mode=exclusive\n");
    let output = sc_replay(
        &sandbox,
        &[
            "five.swf",
            "--rc",
            "fcfs.rc",
            "--json",
            "--jobs-csv",
            "jobs.csv",
        ],
    );
    let report = json(&output);
    // Starts 0, 100, 150, 150, 180: waits 0, 90, 130, 120, 140.
    assert_eq!(report["jobs"], 5, "{report}");
    assert_eq!(report["skipped"], 0);
    assert!(close(&report["mean_wait"], 96.0), "{report}");
    assert!(close(&report["median_wait"], 120.0), "{report}");
    assert!(close(&report["p95_wait"], 140.0), "{report}");
    // (1 + 140/50 + 190/60 + 150/30 + 340/200) / 5
    assert!(
        close(
            &report["mean_bounded_slowdown"],
            (1.0 + 2.8 + 190.0 / 60.0 + 5.0 + 1.7) / 5.0
        ),
        "{report}"
    );
    assert!(close(&report["makespan"], 380.0), "{report}");
    assert!(close(&report["utilisation"], 950.0 / 1520.0), "{report}");
    assert!(close(&report["queues"]["1"]["mean_wait"], 96.0), "{report}");
    let csv = std::fs::read_to_string(sandbox.path.join("jobs.csv")).expect("jobs.csv");
    assert_eq!(
        csv,
        "id,submit,start,end,wait,run,slowdown,queues,ending\n\
         1,0.000,0.000,100.000,0.000,100.000,1.0000,1,done\n\
         2,10.000,100.000,150.000,90.000,50.000,2.8000,1,done\n\
         3,20.000,150.000,210.000,130.000,60.000,3.1667,1,done\n\
         4,30.000,150.000,180.000,120.000,30.000,5.0000,1,done\n\
         5,40.000,180.000,380.000,140.000,200.000,1.7000,1,done\n"
    );
}

#[test]
fn five_jobs_with_easy_backfilling_as_worked_out_by_hand() {
    let sandbox = Sandbox::new();
    sandbox.write("five.swf", FIVE);
    sandbox.write("easy.rc", "queue 1 set mode=exclusive backfill=on\n");
    let output = sc_replay(
        &sandbox,
        &[
            "five.swf",
            "--rc",
            "easy.rc",
            "--json",
            "--jobs-csv",
            "jobs.csv",
        ],
    );
    let report = json(&output);
    // Job 3 backfills at 20 (it ends at 80, before job 2's reservation at
    // 100); job 4 would end after 100 on a host job 2 needs: starts
    // 0, 100, 20, 150, 150: waits 0, 90, 0, 120, 110.
    assert!(close(&report["mean_wait"], 64.0), "{report}");
    assert!(close(&report["median_wait"], 90.0), "{report}");
    assert!(
        close(&report["mean_bounded_slowdown"], 11.35 / 5.0),
        "{report}"
    );
    assert!(close(&report["makespan"], 350.0), "{report}");
    let csv = std::fs::read_to_string(sandbox.path.join("jobs.csv")).expect("jobs.csv");
    assert!(
        csv.contains("\n3,20.000,20.000,80.000,0.000,60.000,1.0000,1,done\n"),
        "{csv}"
    );
    assert!(
        csv.contains("\n2,10.000,100.000,150.000,90.000,"),
        "job 2 starts at its reservation: {csv}"
    );
}

#[test]
fn the_default_policy_gang_schedules_and_reports_in_text() {
    let sandbox = Sandbox::new();
    sandbox.write("five.swf", FIVE);
    let output = sc_replay(&sandbox, &["five.swf", "--timeslice", "1s"]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    for key in [
        "jobs replayed: 5\n",
        "skipped: 0\n",
        "mean wait: ",
        "median wait: ",
        "p95 wait: ",
        "mean bounded slowdown: ",
        "utilisation: ",
        "makespan: ",
        "switches: ",
    ] {
        assert!(text.contains(key), "{key:?} missing: {text}");
    }
    let switches: u64 = text
        .lines()
        .find_map(|line| line.strip_prefix("switches: "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(switches > 10, "gang scheduling switches: {text}");
}

#[test]
fn gzip_traces_are_read_directly() {
    let sandbox = Sandbox::new();
    sandbox.write("five.swf", FIVE);
    let status = Command::new("gzip")
        .args(["-k", "five.swf"])
        .current_dir(&sandbox.path)
        .status();
    if !status.is_ok_and(|status| status.success()) {
        println!("gzip is not installed; gzip input not tested");
        return;
    }
    sandbox.write("fcfs.rc", "queue 1 set mode=exclusive\n");
    let plain = json(&sc_replay(
        &sandbox,
        &["five.swf", "--rc", "fcfs.rc", "--json"],
    ));
    let packed = json(&sc_replay(
        &sandbox,
        &["five.swf.gz", "--rc", "fcfs.rc", "--json"],
    ));
    assert_eq!(plain, packed);
    assert!(close(&packed["mean_wait"], 96.0), "{packed}");
}

#[test]
fn malformed_lines_are_reported_with_their_numbers_and_nothing_is_replayed() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "bad.swf",
        "; MaxProcs: 4\n1 0 -1 10 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1\n2 5 -1 ten 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1\n3 7 -1\n",
    );
    let output = sc_replay(&sandbox, &["bad.swf", "--json"]);
    assert_eq!(code(&output), Some(scored_proto::exitcode::FAILURE));
    assert_eq!(stdout(&output), "");
    assert_eq!(
        stderr(&output),
        "sc_replay: bad.swf:3: field 4 (run time) is not a number: 'ten'\n\
         sc_replay: bad.swf:4: expected 18 fields, found 3: '3 7 -1'\n\
         sc_replay: 2 malformed lines in bad.swf; nothing replayed\n"
    );
    let missing = sc_replay(&sandbox, &["none.swf"]);
    assert_eq!(code(&missing), Some(scored_proto::exitcode::FAILURE));
    assert!(
        stderr(&missing).starts_with("sc_replay: cannot open none.swf: "),
        "{}",
        stderr(&missing)
    );
    let bad_flag = sc_replay(&sandbox, &["bad.swf", "--timeslice"]);
    assert_eq!(code(&bad_flag), Some(scored_proto::exitcode::BAD_FLAG));
    let bad_value = sc_replay(&sandbox, &["bad.swf", "--arrival-scale", "0"]);
    assert_eq!(code(&bad_value), Some(scored_proto::exitcode::FAILURE));
    sandbox.write("bad.rc", "queue 1 set mode=fast\n");
    sandbox.write("ok.swf", "1 0 -1 10 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1\n");
    let bad_rc = sc_replay(&sandbox, &["ok.swf", "--procs", "2", "--rc", "bad.rc"]);
    assert_eq!(code(&bad_rc), Some(scored_proto::exitcode::FAILURE));
    assert!(
        stderr(&bad_rc).starts_with("sc_replay: bad.rc:1: "),
        "{}",
        stderr(&bad_rc)
    );
    let no_size = sc_replay(&sandbox, &["ok.swf"]);
    assert!(
        stderr(&no_size).contains("no MaxProcs header"),
        "{}",
        stderr(&no_size)
    );
}

#[test]
fn too_big_and_unknown_jobs_are_skipped_with_reasons() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "mixed.swf",
        "1 0 -1 10 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1\n\
         2 0 -1 10 9 -1 -1 9 -1 -1 1 1 1 1 1 -1 -1 -1\n\
         3 0 -1 -1 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1\n",
    );
    let report = json(&sc_replay(
        &sandbox,
        &["mixed.swf", "--procs", "4", "--json"],
    ));
    assert_eq!(report["jobs"], 1);
    assert_eq!(report["skipped"], 2);
    assert_eq!(report["skipped_reasons"]["unknown run time"], 1, "{report}");
    assert_eq!(
        report["skipped_reasons"]["rejected: nodes=9 needs 9 hosts with 1 process each, but cluster replay has 4 hosts with 1 core"],
        1,
        "{report}"
    );
}

#[test]
fn queue_map_sends_swf_queues_to_scored_queues() {
    let sandbox = Sandbox::new();
    // Queue 5 of the trace to scored's queue 0 (exclusive): its job runs
    // first; queue 7 to queue 2.
    sandbox.write(
        "queues.swf",
        "1 0 -1 10 2 -1 -1 2 -1 -1 1 1 1 1 7 -1 -1 -1\n\
         2 0 -1 10 2 -1 -1 2 -1 -1 1 1 1 1 5 -1 -1 -1\n",
    );
    let report = json(&sc_replay(
        &sandbox,
        &[
            "queues.swf",
            "--procs",
            "2",
            "--queue-map",
            "5=0,7=2",
            "--json",
        ],
    ));
    assert!(close(&report["queues"]["0"]["mean_wait"], 0.0), "{report}");
    assert!(close(&report["queues"]["2"]["mean_wait"], 10.0), "{report}");
    let bad = sc_replay(
        &sandbox,
        &["queues.swf", "--procs", "2", "--queue-map", "5:0"],
    );
    assert_eq!(code(&bad), Some(scored_proto::exitcode::FAILURE));
    assert!(
        stderr(&bad).contains("--queue-map: bad entry '5:0'"),
        "{}",
        stderr(&bad)
    );
}

/// The workload built to starve: a one-host job, a full-width job behind
/// it, then a stream of short one-host jobs that could always fit beside
/// the first. Exclusive queues start the wide job as soon as the first
/// job ends, with and without backfill.
#[test]
fn a_stream_of_small_jobs_does_not_starve_a_wide_one() {
    let sandbox = Sandbox::new();
    let mut trace = String::from(
        "1 0 -1 100 1 -1 -1 1 100 -1 1 1 1 1 1 -1 -1 -1\n\
         2 1 -1 50 4 -1 -1 4 50 -1 1 1 1 1 1 -1 -1 -1\n",
    );
    for idx in 0..200 {
        trace.push_str(&format!(
            "{} {} -1 30 1 -1 -1 1 30 -1 1 1 1 1 1 -1 -1 -1\n",
            idx + 3,
            2 + idx * 5
        ));
    }
    sandbox.write("starve.swf", &trace);
    for rc in [
        "queue 1 set mode=exclusive\n",
        "queue 1 set mode=exclusive backfill=on\n",
    ] {
        sandbox.write("policy.rc", rc);
        let output = sc_replay(
            &sandbox,
            &[
                "starve.swf",
                "--procs",
                "4",
                "--rc",
                "policy.rc",
                "--jobs-csv",
                "jobs.csv",
            ],
        );
        assert_eq!(code(&output), Some(0), "{}", stderr(&output));
        let csv = std::fs::read_to_string(sandbox.path.join("jobs.csv")).expect("jobs.csv");
        let wide = csv
            .lines()
            .find(|line| line.starts_with("2,"))
            .unwrap_or_default()
            .to_string();
        // Job 1 ends at 100; with backfilling, short jobs fill the other
        // hosts only if they end by then.
        assert!(wide.starts_with("2,1.000,100.000,150.000,"), "{rc}: {wide}");
    }
}

#[test]
fn the_generator_is_deterministic_and_replayable() {
    let sandbox = Sandbox::new();
    let generate = |seed: &str| {
        let output = sc_replay(
            &sandbox,
            &[
                "--generate",
                "300",
                "--procs",
                "64",
                "--load",
                "0.9",
                "--seed",
                seed,
            ],
        );
        assert_eq!(code(&output), Some(0), "{}", stderr(&output));
        stdout(&output)
    };
    let first = generate("3");
    assert_eq!(first, generate("3"));
    assert_ne!(first, generate("4"));
    assert!(first.contains("; MaxProcs: 64\n"), "{first}");
    sandbox.write("gen.swf", &first);
    // Gang scheduled with long slices, so that a debug build replays it quickly.
    let output = sc_replay(
        &sandbox,
        &[
            "gen.swf",
            "--timeslice",
            "10m",
            "--json",
            "--svg",
            "gen.svg",
        ],
    );
    let report = json(&output);
    assert_eq!(report["jobs"], 300);
    let svg = std::fs::read_to_string(sandbox.path.join("gen.svg")).expect("gen.svg");
    assert!(
        svg.starts_with("<svg") && svg.contains("bounded slowdown"),
        "{}",
        &svg[..200.min(svg.len())]
    );
    let conflict = sc_replay(&sandbox, &["--generate", "10", "gen.swf"]);
    assert_eq!(code(&conflict), Some(scored_proto::exitcode::BAD_FLAG));
}
