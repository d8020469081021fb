//! Launch latency against fork+exec+wait, and the console and a gang
//! pair while a job of 3,000 processes starts.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::{hosts_file, median, ms, row, scaled, Row};
use nix::sys::signal::Signal;
use scored_tests::*;

pub(crate) fn time_command(mut make: impl FnMut() -> bool, rounds: u64) -> f64 {
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        assert!(make(), "command failed");
        samples.push(start.elapsed().as_secs_f64());
    }
    median(&mut samples)
}

/// `scrun true` of 1, 2 and 16 processes (the latter two with
/// `-mpi=none`: a stage of two or more ranks otherwise starts a PMIx
/// server in scrun) against spawning as many `true`s and waiting for
/// them, rounds taking turns; and preemption.
pub(crate) fn launch(rows: &mut Vec<Row>) {
    // scrun is started as the baseline's `true`s are (posix_spawn), not
    // by a fork of this whole process, which a `pre_exec` step would make
    // std do: so no descriptor of ours may reach it.
    seal_own_descriptors();
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts_file(4, 4))
        .start();
    let rounds = scaled(40, 8);
    for n in [1u32, 2, 16] {
        let nodes = if n == 1 {
            "-nodes=1".to_string()
        } else {
            format!("-nodes={n},mpi=none")
        };
        let mut scrun = Vec::new();
        let mut fork = Vec::new();
        for _ in 0..rounds {
            scrun.push(time_command(
                || {
                    daemon
                        .scrun_spawned(&[&nodes, "true"])
                        .output()
                        .expect("run scrun")
                        .status
                        .success()
                },
                1,
            ));
            fork.push(time_command(|| spawn_trues(n), 1));
        }
        let (scrun, fork) = (median(&mut scrun), median(&mut fork));
        rows.push(row(
            &format!("launch `scrun {nodes} true`"),
            ms(scrun),
            format!("{} (fork+exec+wait of {n} `true`)", ms(fork)),
            format!("+{} over", ms(scrun - fork)),
            if n == 1 {
                "within 2 ms of fork+exec"
            } else if n == 2 {
                "within 2.5 ms of fork+exec"
            } else {
                "a few ms over fork+exec"
            },
        ));
    }
    drop(daemon);
    preemption(rows, rounds);
}

/// Spawns `n` `true`s and waits for them all.
fn spawn_trues(n: u32) -> bool {
    let children: Vec<Child> = (0..n)
        .map(|_| Command::new("true").spawn().expect("true"))
        .collect();
    children
        .into_iter()
        .all(|mut child| child.wait().is_ok_and(|status| status.success()))
}

/// Preemption: a job of queue 2 spins on the only host; `scrun
/// -priority=0 sleep 30` is started, and the time until the spinner shows
/// stopped in /proc is taken (scrun's own start-up, its submission, the
/// decision and the stop), against fork+exec+wait of one `true` in the
/// same rounds, while the spinner runs. The high job is ended once the stop is seen, and the
/// spinner runs again before the next round. (The stop comes before the
/// high job's processes are created, so what it runs does not count;
/// with `true` the spinner was stopped only for as long as `true` ran,
/// which a benchmark that waits for a CPU of a busy machine may never
/// see.)
///
/// The benchmark looks at /proc every 20 µs and sleeps in between, as
/// the shell that started scrun would sleep: a loop that spun between
/// looks held a CPU of the two at scrun's priority, and scrun, started on
/// that CPU, waited for it behind the loop for up to two 4 ms ticks
/// (traced), so the figure measured the loop. Looking late by up to a
/// sleep and the wakeup of a halted CPU only adds to the figure.
fn preemption(rows: &mut Vec<Row>, rounds: u64) {
    // Sleeps of 20 µs, not 20 µs plus the default 50 µs of slack.
    let slack = nix::sys::prctl::get_timerslack().expect("read the timer slack");
    nix::sys::prctl::set_timerslack(1).expect("set the timer slack");
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts_file(1, 1))
        .start();
    let mut low = daemon.spawn(&["-nodes=1,priority=2", &testprog(), "spin", "0"]);
    let pid = low.wait_pids(1)[0];
    let mut stop = Vec::new();
    let mut fork = Vec::new();
    let running = || {
        wait_until(Duration::from_secs(10), || {
            proc_stat(pid).is_some_and(|stat| stat.state == 'R')
        })
    };
    for _ in 0..rounds {
        assert!(running(), "the lower job never ran again");
        // The baseline while the spinner runs, before the scrun: right
        // after it, `true` shared the CPUs with the daemon's end of the
        // high job.
        fork.push(time_command(|| spawn_trues(1), 1));
        assert!(running(), "the lower job stopped");
        let start = Instant::now();
        let mut high = daemon
            .scrun_spawned(&["-nodes=1,priority=0", "sleep", "30"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn scrun");
        while !stopped(pid) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the lower job was not stopped"
            );
            std::thread::sleep(Duration::from_micros(20));
        }
        stop.push(start.elapsed().as_secs_f64());
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(high.id() as i32), Signal::SIGINT);
        let _ = high.wait().expect("wait for scrun");
    }
    nix::sys::prctl::set_timerslack(slack as _).expect("restore the timer slack");
    low.signal(Signal::SIGINT);
    low.wait(Duration::from_secs(30));
    let (stop, fork) = (median(&mut stop), median(&mut fork));
    rows.push(row(
        "preemption: `scrun -priority=0 sleep 30` started → the queue-2 job's rank stopped",
        ms(stop),
        format!("{} (fork+exec+wait of `true`)", ms(fork)),
        format!("+{} over", ms(stop - fork)),
        "within 2 ms",
    ));
}

/// One `status` on an open connection: how long the answer took.
pub(crate) fn console_latency(stream: &mut UnixStream) -> f64 {
    let request = scored_proto::proto::encode(&scored_proto::proto::Request::Console {
        version: scored_proto::proto::VERSION,
        line: "status".into(),
        json: true,
    });
    let start = Instant::now();
    stream.write_all(&request).expect("send status");
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Ok(Some(reply)) = scored_proto::proto::decode::<scored_proto::proto::Reply>(
            &mut bytes,
            scored_proto::proto::MAX_REPLY,
        ) {
            assert!(
                matches!(reply, scored_proto::proto::Reply::Console { ok: true, .. }),
                "{reply:?}"
            );
            return start.elapsed().as_secs_f64();
        }
        let len = stream.read(&mut chunk).expect("read status");
        assert!(len > 0, "the daemon closed the console connection");
        bytes.extend_from_slice(&chunk[..len]);
    }
}

/// Asks for the status every 20 ms while `busy` holds; returns the
/// latencies and the pair's switches over that time.
pub(crate) fn console_while(
    daemon: &Daemon,
    stream: &mut UnixStream,
    mut busy: impl FnMut() -> bool,
) -> (Vec<f64>, u64, f64) {
    let switches = |daemon: &Daemon| daemon.json("status")["switches"].as_u64().unwrap_or(0);
    let before = switches(daemon);
    let start = Instant::now();
    let mut latencies = Vec::new();
    while busy() {
        latencies.push(console_latency(stream));
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = start.elapsed().as_secs_f64();
    (latencies, switches(daemon) - before, elapsed)
}

pub(crate) fn big_launch(rows: &mut Vec<Row>) {
    let n = scaled(3000, 500) as usize;
    // The pair shares h0 and switches every 50 ms; the large job holds h1
    // to hn. Placement takes the emptiest hosts, so: the first of the pair
    // takes h0; the large job, admitted to a deactivated queue (hosts are
    // fixed at admission), takes h1 to hn; the second of the pair then
    // finds every host with one process and takes the lowest, h0.
    let hosts: String = (0..=n).map(|idx| format!("h{idx} cores=1\n")).collect();
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts)
        .timeslice("50ms")
        .start();
    daemon.ok("queue 2 deactivate");
    let mut pair = vec![daemon.spawn(&["-nodes=1,priority=1", &testprog(), "spin", "0"])];
    pair[0].wait_pids(1);
    let nodes = format!("-nodes={n},priority=2");
    let mut large = daemon.spawn(&[&nodes, &testprog(), "ignore-term", "2"]);
    assert!(
        wait_until(Duration::from_secs(30), || daemon
            .json("jobs")
            .as_array()
            .is_some_and(|jobs| jobs.len() == 2)),
        "the large job is admitted"
    );
    pair.push(daemon.spawn(&["-nodes=1,priority=1", &testprog(), "spin", "0"]));
    pair[1].wait_pids(1);
    let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
    std::thread::sleep(Duration::from_millis(500));
    // Before: the same for as long as the launch will take, roughly.
    let quiet_until = Instant::now() + Duration::from_secs(scaled(3, 1));
    let (mut quiet, quiet_switches, quiet_secs) =
        console_while(&daemon, &mut stream, || Instant::now() < quiet_until);
    // The command that starts the launch is answered after the decision
    // it causes is carried out: its latency counts too.
    let switches_before = daemon.json("status")["switches"].as_u64().unwrap_or(0);
    let launched = Instant::now();
    daemon.ok("queue 2 activate");
    let activate = launched.elapsed().as_secs_f64();
    let (mut during, _, _) = console_while(&daemon, &mut stream, || large.count_lines("pid ") < n);
    during.push(activate);
    let launch_secs = launched.elapsed().as_secs_f64();
    let launch_switches = daemon.json("status")["switches"].as_u64().unwrap_or(0) - switches_before;
    let all_started = launched.elapsed().as_secs_f64();
    let status = daemon.json("status");
    let switch_max = status["switch latency"]["max"].as_f64().unwrap_or(f64::NAN);
    let switch_median = status["switch latency"]["median"]
        .as_f64()
        .unwrap_or(f64::NAN);
    let (end, _) = large.wait(Duration::from_secs(600));
    assert!(end.success(), "the large job failed");
    for job in &pair {
        job.signal(Signal::SIGINT);
    }
    for job in &mut pair {
        job.wait(Duration::from_secs(30));
    }
    let max = |values: &[f64]| values.iter().copied().fold(0.0, f64::max);
    rows.push(row(
        &format!(
            "`status` while {n} processes start ({} s for all)",
            format_args!("{all_started:.1}")
        ),
        format!(
            "{} median, {} max ({} asked; `queue 2 activate`, which starts it, {})",
            ms(median(&mut during.clone())),
            ms(max(&during)),
            during.len(),
            ms(activate)
        ),
        format!(
            "{} median, {} max (before the launch)",
            ms(median(&mut quiet)),
            ms(max(&quiet))
        ),
        format!("max {:.1}×", max(&during) / max(&quiet).max(1e-6)),
        "< 50 ms",
    ));
    during.clear();
    rows.push(row(
        &format!("switches of a gang pair at 50 ms slices while {n} processes start"),
        format!(
            "{:.1}/s (median latency {}, max {})",
            launch_switches as f64 / launch_secs,
            ms(switch_median),
            ms(switch_max)
        ),
        format!(
            "{:.1}/s (before the launch)",
            quiet_switches as f64 / quiet_secs
        ),
        format!(
            "{:.2}×",
            (launch_switches as f64 / launch_secs) / (quiet_switches as f64 / quiet_secs)
        ),
        "keeps its cadence",
    ));
}
