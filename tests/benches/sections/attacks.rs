//! What one plain user can make a root scored spend: its memory through
//! floods of oversize submissions and queued environments, and root's
//! `status` latency while the user floods the console or has hundreds of
//! thousands of files removed. Needs root (to create the test users).

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::blocking::request_times;
use crate::{median, ms, row, Row};
use scored_tests::*;

/// The daemon's resident memory and its peak, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// `status` round trips on a fresh connection each (as sc_console makes
/// them), `rounds` of them spaced by `gap`: median and max in seconds.
fn status_times(daemon: &Daemon, rounds: usize, gap: Duration) -> (f64, f64) {
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
        let (time, _) = request_times(&mut stream, "status", 1);
        samples.push(time);
        std::thread::sleep(gap);
    }
    let max = samples.iter().copied().fold(0.0, f64::max);
    (median(&mut samples), max)
}

pub(crate) fn attacks(rows: &mut Vec<Row>) {
    let Some(users) = test_users("the attacks benchmark") else {
        return;
    };
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&two_hosts())
        .rc("queue 1 deactivate\n")
        .start();
    let pid = daemon.pid();
    let (status_alone, status_alone_max) = status_times(&daemon, 50, Duration::from_millis(5));
    let (rest, _) = memory_kib(pid);

    // 200 submissions naming a 1 MB working directory (refused: PATH_MAX),
    // then user a queues jobs of 840 KB of environment until refused.
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    for _ in 0..200 {
        let request = scored_proto::proto::Request::Submit {
            version: scored_proto::proto::VERSION,
            submit: scored_proto::proto::Submit {
                stages: vec![vec!["true".into()]],
                joiner: scored_proto::proto::Joiner::Sequence,
                options: scored_proto::proto::JobOptions {
                    procs: scored_proto::proto::ProcRequest::Nodes(1),
                    priority: None,
                    wait: false,
                    memory: None,
                    disk: None,
                    pty: false,
                    time_ms: None,
                    batch: Default::default(),
                },
                env: Vec::new(),
                cwd: format!("/{}", "x".repeat(1_000_000)).as_str().into(),
                ignored_signals: Vec::new(),
                rlimits: Vec::new(),
                umask: None,
                nice: None,
                ioprio: None,
                closed_stdio: Vec::new(),
                fds: Vec::new(),
                pmi_ranks: 0,
                pmix_namespace: None,
                pmi_port: false,
            },
        };
        let mut connection =
            scored_proto::client::Connection::connect(&daemon.socket).expect("connect");
        connection
            .send_with_fds(&request, &[null.as_fd(), null.as_fd(), null.as_fd()])
            .expect("send");
        let _ = connection.recv();
    }
    let (after_paths, _) = memory_kib(pid);
    let mut queued = Vec::new();
    let mut refused = 0;
    for tag in 0..40 {
        let mut command = daemon.scrun_as(&users.a, &["true"]);
        for idx in 0..7 {
            command.env(
                format!("BIG_{idx}"),
                format!("{tag}{}", "e".repeat(120_000)),
            );
        }
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("scrun");
        std::thread::sleep(Duration::from_millis(100));
        if let Ok(Some(_)) = child.try_wait() {
            refused += 1;
        } else {
            queued.push(child);
        }
    }
    let (after_env, peak) = memory_kib(pid);
    rows.push(row(
        "scored's memory after 200 submissions of a 1 MB directory (refused)",
        mib(after_paths),
        format!("{} (at rest)", mib(rest)),
        format!("{:.2}×", after_paths as f64 / rest as f64),
        "tens of MB",
    ));
    rows.push(row(
        &format!(
            "scored's memory with a user's 40 submissions of 840 KB of environment ({} queued, {refused} refused)",
            queued.len()
        ),
        format!("{} (peak {})", mib(after_env), mib(peak)),
        format!("{} (at rest)", mib(rest)),
        format!("{:.2}×", after_env as f64 / rest as f64),
        "under 64 MiB",
    ));
    for mut child in queued {
        let _ = child.kill();
        let _ = child.wait();
    }

    // A user's 100 connections pipelining `history` (100 jobs of theirs).
    daemon.ok("queue 1 activate");
    for _ in 0..100 {
        let _ = daemon.scrun_as(&users.a, &["true"]).output();
    }
    let socket = daemon.socket.display().to_string();
    let flood = command_as(
        &users.a,
        Path::new(&testprog()),
        &["flood", &socket, "100", "history", "6"],
    )
    .stdout(Stdio::piped())
    .spawn()
    .expect("flood");
    std::thread::sleep(Duration::from_millis(500));
    let (flooded, flooded_max) = status_times(&daemon, 40, Duration::from_millis(100));
    let output = flood.wait_with_output().expect("flood");
    let served = String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("served ").map(str::to_string))
        .unwrap_or_default();
    rows.push(row(
        &format!(
            "root's `status` while a user's 100 connections pipeline `history` ({served} served)"
        ),
        format!("{} (max {})", ms(flooded), ms(flooded_max)),
        format!("{} (max {}, alone)", ms(status_alone), ms(status_alone_max)),
        format!("{:.0}×", flooded / status_alone),
        "under 100 ms",
    ));

    // A job of user a that leaves 300,000 empty files.
    let started = Instant::now();
    let output = daemon
        .scrun_as(
            &users.a,
            &[
                "sh",
                "-c",
                "mkdir \"$SCORE_TMPDIR/w\" && cd \"$SCORE_TMPDIR/w\" && seq 1 300000 | xargs touch",
            ],
        )
        .output()
        .expect("scrun");
    let made = started.elapsed();
    let removing = daemon.sandbox.path.join("state/removing");
    let busy = || std::fs::read_dir(&removing).map_or(0, |dir| dir.count()) > 0;
    let removal_start = Instant::now();
    let mut samples = Vec::new();
    while busy() && removal_start.elapsed() < Duration::from_secs(120) {
        let (time, _) = status_times(&daemon, 1, Duration::from_millis(20));
        samples.push(time);
    }
    let removal = removal_start.elapsed();
    let max = samples.iter().copied().fold(0.0, f64::max);
    rows.push(row(
        &format!(
            "root's `status` while a job's 300,000 files are removed ({} requests over {:.1} s; files made in {:.1} s, exit {:?})",
            samples.len(),
            removal.as_secs_f64(),
            made.as_secs_f64(),
            output.status.code()
        ),
        format!("{} (max {})", ms(median(&mut samples)), ms(max)),
        format!("{} (max {}, alone)", ms(status_alone), ms(status_alone_max)),
        format!("{:.0}×", median(&mut samples.clone()) / status_alone),
        "under 100 ms",
    ));
}
