//! In-place restart under load, the job journal's cost, and the cost
//! of the checkpoint a panic rolls back to.

use std::ffi::OsString;
use std::io::{IoSlice, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::launch::time_command;
use super::scale::{pure_core, read_frame};
use super::switch::switch_scored_with;
use crate::{hosts_file, median, ms, row, scaled, Row};
use scored_tests::*;

/// Submits `argv` on a new connection, as scrun does, and returns the
/// connection once the job is admitted.
pub(crate) fn submit_raw(
    daemon: &Daemon,
    argv: &[&str],
    priority: u32,
    fds: &[i32; 3],
) -> UnixStream {
    let submit = scored_proto::proto::Submit {
        stages: vec![argv.iter().map(|arg| (*arg).into()).collect()],
        joiner: scored_proto::proto::Joiner::Sequence,
        options: scored_proto::proto::JobOptions {
            procs: scored_proto::proto::ProcRequest::Nodes(1),
            priority: Some(priority),
            wait: false,
            memory: None,
            disk: None,
            pty: false,
            time_ms: None,
            batch: Default::default(),
        },
        env: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("SCORED_TEST_TAG".into(), daemon.tag.as_str().into()),
        ],
        cwd: "/".into(),
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
    };
    let frame = scored_proto::proto::encode(&scored_proto::proto::Request::Submit {
        version: scored_proto::proto::VERSION,
        submit,
    });
    submit_admitted(daemon, &frame, fds)
}

/// Sends a `Submit` frame with `fds` attached on a new connection, as
/// scrun does, and returns the connection once the job is admitted.
pub(crate) fn submit_admitted(daemon: &Daemon, frame: &[u8], fds: &[i32; 3]) -> UnixStream {
    let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
    let control = [nix::sys::socket::ControlMessage::ScmRights(fds)];
    let sent = nix::sys::socket::sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(frame)],
        &control,
        nix::sys::socket::MsgFlags::empty(),
        None,
    )
    .expect("send");
    stream.write_all(&frame[sent..]).expect("send rest");
    let reply = read_frame(&mut stream);
    assert!(
        String::from_utf8_lossy(&reply).contains("\"admitted\""),
        "not admitted: {}",
        String::from_utf8_lossy(&reply)
    );
    stream
}

/// One console request on a raw connection: its round trip and reply.
pub(crate) fn console_raw(daemon: &Daemon, line: &str) -> (f64, String) {
    let frame = scored_proto::proto::encode(&scored_proto::proto::Request::Console {
        version: scored_proto::proto::VERSION,
        line: line.to_string(),
        json: true,
    });
    let start = Instant::now();
    let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
    stream.write_all(&frame).expect("send");
    let reply = read_frame(&mut stream);
    (
        start.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&reply).into_owned(),
    )
}

pub(crate) fn restart_under_load(rows: &mut Vec<Row>) {
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let slice = 0.2;
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts_file(100, 1))
        .timeslice("200ms")
        .rc("queue 2 deactivate\n")
        .start();
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    let fds = [null.as_raw_fd(); 3];
    let mut streams = Vec::new();
    // 120 gang jobs on 100 hosts: 100 run, 20 are switched out at a time.
    for _ in 0..120 {
        streams.push(submit_raw(&daemon, &["sleep", "3600"], 1, &fds));
    }
    let n_queued = scaled(1_000, 200);
    for _ in 0..n_queued {
        streams.push(submit_raw(&daemon, &["true"], 2, &fds));
    }
    let counts = |daemon: &Daemon| {
        let status = daemon.json("status");
        let jobs = &status["jobs"];
        (
            jobs["running"].as_u64().unwrap_or(0),
            jobs["stopped"].as_u64().unwrap_or(0),
            jobs["queued"].as_u64().unwrap_or(0),
            status["switches"].as_u64().unwrap_or(0),
        )
    };
    assert!(
        wait_until(Duration::from_secs(60), || {
            let (running, stopped, _, _) = counts(&daemon);
            running == 100 && stopped == 20
        }),
        "the gang jobs did not all start: {:?}",
        counts(&daemon)
    );
    let pids_before = daemon.all_job_pids();
    assert_eq!(pids_before.len(), 120, "job processes");
    let rounds = scaled(5, 2);
    let mut status_times = Vec::new();
    let mut restart_times = Vec::new();
    let mut resume_times = Vec::new();
    for _ in 0..rounds {
        for _ in 0..5 {
            status_times.push(console_raw(&daemon, "status").0);
        }
        let (elapsed, reply) = console_raw(&daemon, "restart");
        assert!(reply.contains("restarted in place"), "{reply}");
        restart_times.push(elapsed);
        let answered = Instant::now();
        let (_, _, _, switches) = counts(&daemon);
        assert!(
            wait_until(Duration::from_secs(10), || counts(&daemon).3 > switches),
            "no switch after the restart"
        );
        resume_times.push(answered.elapsed().as_secs_f64());
    }
    let (running, stopped, queued, _) = counts(&daemon);
    let lost = 120 + n_queued - (running + stopped + queued);
    let pids_after = daemon.all_job_pids();
    let gone = pids_before
        .iter()
        .filter(|pid| !pids_after.contains(pid))
        .count();
    let mut dropped = 0;
    for stream in &mut streams {
        // Replies (started, held) may wait to be read; a dropped connection
        // reads as end of file or an error.
        stream.set_nonblocking(true).expect("non-blocking");
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer) {
                Ok(0) => {
                    dropped += 1;
                    break;
                }
                Ok(_) => continue,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    dropped += 1;
                    break;
                }
            }
        }
    }
    let status_rtt = median(&mut status_times);
    let restart_rtt = median(&mut restart_times);
    let worst = restart_times.iter().cloned().fold(0.0, f64::max);
    rows.push(row(
        &format!(
            "in-place restart, 100 running + 20 stopped gang jobs + {n_queued} queued: request to the new image's answer"
        ),
        format!("{} (max {}, {rounds} restarts)", ms(restart_rtt), ms(worst)),
        format!("{} (`status` round trip)", ms(status_rtt)),
        format!("+{} over", ms(restart_rtt - status_rtt)),
        "under 50 ms",
    ));
    rows.push(row(
        "jobs lost / job processes gone / connections dropped over those restarts",
        format!("{lost} / {gone} / {dropped}"),
        format!("{} jobs, {} connections", 120 + n_queued, streams.len()),
        "-".into(),
        "0 / 0 / 0",
    ));
    let worst_resume = resume_times.iter().cloned().fold(0.0, f64::max);
    rows.push(row(
        "gang rotation after a restart: answer to the next switch",
        format!(
            "{} (max {})",
            ms(median(&mut resume_times)),
            ms(worst_resume)
        ),
        format!("{} (time slice)", ms(slice)),
        format!("{:.2}×", worst_resume / slice),
        "within one slice",
    ));
    drop(streams);
}

/// Launching and switching with and without the journal, in the same run.
pub(crate) fn journal_cost(rows: &mut Vec<Row>) {
    let rounds = scaled(40, 8);
    let launch = |args: &[&str]| {
        let mut builder = Daemon::builder()
            .log("scored=info")
            .hosts(&hosts_file(4, 4));
        for arg in args {
            builder = builder.arg(arg);
        }
        let daemon = builder.start();
        time_command(|| daemon.run(&["true"]).status.success(), rounds)
    };
    // Alternate, so that a change of load hits both alike.
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..scaled(3, 1) {
        with.push(launch(&[]));
        without.push(launch(&["--no-journal"]));
    }
    let with = median(&mut with);
    let without = median(&mut without);
    rows.push(row(
        "launch `scrun true` with the job journal",
        ms(with),
        format!("{} (--no-journal)", ms(without)),
        format!("{:+.3} ms", (with - without) * 1e3),
        "no measurable cost",
    ));
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..scaled(3, 1) {
        with.push(switch_scored_with(16, &[]).0);
        without.push(switch_scored_with(16, &["--no-journal"]).0);
    }
    let with_median = median(&mut with);
    let without_median = median(&mut without);
    rows.push(row(
        "gang switch, 2 jobs of 16 processes, with the job journal",
        ms(with_median),
        format!("{} (--no-journal)", ms(without_median)),
        format!("{:.2}×", with_median / without_median),
        "no measurable cost",
    ));
}

/// The checkpoint's cost in the pure core: 100 hosts, 120 gang jobs (100
/// running, 20 switched out) and 1,000 queued in a deactivated queue,
/// against the serialized snapshot an in-place restart writes; and what a
/// checkpoint held since the last event adds to the part of a switch
/// between the stop confirmations and the continues (the jobs that enter
/// are copied then, being shared with it).
pub(crate) fn checkpoint_in_core(rows: &mut Vec<Row>) {
    use scored_core::core::{Action, Core, Input};
    use scored_core::ids::{ClientToken, Cred, Tick};
    use scored_core::job::{JobRequest, Joiner, ProcRequest};
    let n_hosts = 100u32;
    let cred = Cred {
        pid: 1,
        uid: 0,
        gid: 0,
        groups: Vec::new(),
    };
    let now = Tick(0);
    let request = |priority: u32| JobRequest {
        stages: vec![vec![OsString::from("sleep"), OsString::from("3600")]],
        joiner: Joiner::Sequence,
        procs: ProcRequest::Nodes(1),
        priority: Some(priority),
        wait: false,
        memory: None,
        disk: None,
        time: None,
        env: vec![(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))],
        cwd: OsString::from("/"),
        inherited: Default::default(),
        batch: Default::default(),
    };
    let build = || {
        let mut core = pure_core(n_hosts, Duration::from_millis(200));
        let command = scored_proto::command::parse_line("queue 2 deactivate")
            .expect("valid")
            .expect("a command");
        core.handle(
            Input::Console {
                client: ClientToken(0),
                cred: cred.clone(),
                command: Box::new(command),
            },
            now,
        );
        for idx in 0..1_120u64 {
            core.handle(
                Input::Submit {
                    client: ClientToken(idx + 1),
                    cred: cred.clone(),
                    user: "u".into(),
                    request: Box::new(request(if idx < 120 { 1 } else { 2 })),
                },
                now,
            );
        }
        assert_eq!(core.n_jobs(), 1_120);
        let running = core
            .jobs()
            .filter(|job| job.phase() == scored_core::job::Phase::Running)
            .count();
        assert_eq!(running, 100, "a gang job runs on each host");
        core
    };
    // The commit after an event, as the loop makes it: here after each
    // submission into the deactivated queue (the event of the admission
    // benchmark), with 1,120 jobs and more held.
    let mut core = build();
    core.commit();
    let mut samples = Vec::new();
    for idx in 0..scaled(2_000, 200) {
        core.handle(
            Input::Submit {
                client: ClientToken(10_000 + idx),
                cred: cred.clone(),
                user: "u".into(),
                request: Box::new(request(2)),
            },
            now,
        );
        let start = Instant::now();
        core.commit();
        samples.push(start.elapsed().as_secs_f64());
    }
    let checkpoint = median(&mut samples);
    let worst = samples.iter().cloned().fold(0.0, f64::max);
    let mut samples = Vec::new();
    for _ in 0..scaled(50, 10) {
        let start = Instant::now();
        let bytes = serde_json::to_vec(&core.snapshot()).expect("serializable");
        samples.push(start.elapsed().as_secs_f64());
        drop(bytes);
    }
    let snapshot = median(&mut samples);
    // Slices of the gang rotation: the tick stops the leaving jobs; the
    // confirmations lead to the continues (timed), in a core that commits
    // after each event (so the switch logs what it changes) and in one
    // that never does (the loop feeds the tick and the confirmations
    // within one event).
    let mut with_core = build();
    let mut without_core = build();
    let confirm = |core: &mut Core, now: &mut Tick, commit: bool| -> f64 {
        *now = now.after(Duration::from_millis(200));
        if commit {
            core.commit();
        }
        let actions = core.handle(Input::Tick, *now);
        let stopped: Vec<Input> = actions
            .iter()
            .filter_map(|action| match action {
                Action::Stop(job) => Some(Input::Stopped(*job)),
                _ => None,
            })
            .collect();
        assert!(!stopped.is_empty(), "the slice switches");
        let start = Instant::now();
        let continues = core.handle_all(stopped, *now);
        let elapsed = start.elapsed().as_secs_f64();
        assert!(continues
            .iter()
            .any(|action| matches!(action, Action::Continue(_) | Action::Spawn(_))));
        elapsed
    };
    let (mut with_now, mut without_now) = (now, now);
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..scaled(500, 50) {
        with.push(confirm(&mut with_core, &mut with_now, true));
        without.push(confirm(&mut without_core, &mut without_now, false));
    }
    let with = median(&mut with);
    let without = median(&mut without);
    rows.push(row(
        "checkpoint of the core per event (commit after a submission), 120 gang jobs (100 running) + 1,000 queued on 100 hosts (pure core)",
        format!("{} (max {})", ms(checkpoint), ms(worst)),
        format!("{} (serialized restart snapshot)", ms(snapshot)),
        format!("{:.3}×", checkpoint / snapshot),
        "off the switch path",
    ));
    rows.push(row(
        "switch in the core, stop confirmations to continues of 20 jobs, committing after each event (pure core)",
        ms(with),
        format!("{} (never committing)", ms(without)),
        format!("{:+.4} ms", (with - without) * 1e3),
        "no measurable cost",
    ));
}

/// The switch latency under the restart benchmark's load (100 running
/// and 20 switched-out gang jobs, 1,000 queued), and the launch latency,
/// with and without the checkpoint, alternating daemons in one run.
pub(crate) fn checkpoint_cost(rows: &mut Vec<Row>) {
    checkpoint_in_core(rows);
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let loaded_switch = |checkpoint: bool| -> (f64, f64, u64) {
        let mut builder = Daemon::builder()
            .log("scored=info")
            .hosts(&hosts_file(100, 1))
            .timeslice("200ms")
            .rc("queue 2 deactivate\n");
        if !checkpoint {
            builder = builder.env("SCORED_NO_CHECKPOINT", "1");
        }
        let daemon = builder.start();
        let null = std::fs::File::open("/dev/null").expect("/dev/null");
        let fds = [null.as_raw_fd(); 3];
        let mut streams = Vec::new();
        for _ in 0..120 {
            streams.push(submit_raw(&daemon, &["sleep", "3600"], 1, &fds));
        }
        for _ in 0..scaled(1_000, 200) {
            streams.push(submit_raw(&daemon, &["true"], 2, &fds));
        }
        let status = daemon.json("status");
        let before = status["switches"].as_u64().unwrap_or(0);
        std::thread::sleep(Duration::from_secs(scaled(8, 2)));
        let status = daemon.json("status");
        let latency = &status["switch latency"];
        let result = (
            latency["median"].as_f64().unwrap_or(f64::NAN),
            latency["max"].as_f64().unwrap_or(f64::NAN),
            status["switches"].as_u64().unwrap_or(0) - before,
        );
        drop(streams);
        result
    };
    let small_launch = |checkpoint: bool| -> f64 {
        let mut builder = Daemon::builder()
            .log("scored=info")
            .hosts(&hosts_file(4, 4));
        if !checkpoint {
            builder = builder.env("SCORED_NO_CHECKPOINT", "1");
        }
        let daemon = builder.start();
        time_command(|| daemon.run(&["true"]).status.success(), scaled(40, 8))
    };
    // Alternate, so that a change of load hits both alike.
    let mut with = Vec::new();
    let mut without = Vec::new();
    let mut with_max: f64 = 0.0;
    let mut without_max: f64 = 0.0;
    let mut switches = (0, 0);
    for _ in 0..scaled(5, 1) {
        let (median_with, max_with, n_with) = loaded_switch(true);
        let (median_without, max_without, n_without) = loaded_switch(false);
        with.push(median_with);
        without.push(median_without);
        with_max = with_max.max(max_with);
        without_max = without_max.max(max_without);
        switches.0 += n_with;
        switches.1 += n_without;
    }
    let with_median = median(&mut with);
    let without_median = median(&mut without);
    rows.push(row(
        "gang switch, 100 running + 20 stopped gang jobs + 1,000 queued, with the checkpoint",
        format!(
            "{} (max {}, {} switches)",
            ms(with_median),
            ms(with_max),
            switches.0
        ),
        format!(
            "{} (max {}, {} switches, SCORED_NO_CHECKPOINT=1)",
            ms(without_median),
            ms(without_max),
            switches.1
        ),
        format!("{:.2}×", with_median / without_median),
        "no measurable cost",
    ));
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..scaled(3, 1) {
        with.push(small_launch(true));
        without.push(small_launch(false));
    }
    let with = median(&mut with);
    let without = median(&mut without);
    rows.push(row(
        "launch `scrun true` with the checkpoint",
        ms(with),
        format!("{} (SCORED_NO_CHECKPOINT=1)", ms(without)),
        format!("{:+.3} ms", (with - without) * 1e3),
        "no measurable cost",
    ));
}
