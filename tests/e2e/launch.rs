//! scrun runs real parallel jobs through scored; exit statuses,
//! interrupts and client death; admission of jobs that cannot fit.

use std::time::Duration;

use nix::sys::signal::Signal;
use scored_tests::*;

#[test]
fn ranks_get_their_environment_cwd_and_the_callers_variables() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let output = daemon
        .scrun(&["-nodes=2", "sh", "-c", "echo \"$SCORE_RANK $SCORE_NPROCS $SCORE_HOST $SCORE_HOSTID $SCORE_JOBID $(pwd) $CALLER_VAR\"; test -d \"$SCORE_TMPDIR\""])
        .env("CALLER_VAR", "from-the-caller")
        .output()
        .expect("scrun");
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let mut lines: Vec<String> = stdout(&output).lines().map(str::to_string).collect();
    lines.sort();
    let cwd = daemon.sandbox.path.display().to_string();
    assert_eq!(
        lines,
        vec![
            format!("0 2 host0 0 1 {cwd} from-the-caller"),
            format!("1 2 host1 1 1 {cwd} from-the-caller"),
        ]
    );
}

#[test]
fn stdin_goes_to_rank_zero_only() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let output = daemon
        .scrun(&[
            "-nodes=2",
            "sh",
            "-c",
            "echo \"$SCORE_RANK read $(cat | wc -c)\"",
        ])
        .stdin(std::fs::File::open(daemon.sandbox.write("input", "twelve bytes")).expect("input"))
        .output()
        .expect("scrun");
    let mut lines: Vec<String> = stdout(&output).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, vec!["0 read 12", "1 read 0"]);
}

#[test]
fn exit_status_is_the_first_failing_ranks() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let ok = daemon.run(&["-nodes=2", "true"]);
    assert_eq!(code(&ok), Some(0));
    let failing = daemon.run(&[
        "-nodes=2",
        "sh",
        "-c",
        "[ $SCORE_RANK = 1 ] && exit 5; exit 0",
    ]);
    assert_eq!(code(&failing), Some(5), "{}", stderr(&failing));
}

#[test]
fn a_rank_killed_by_a_signal_gives_128_plus_n_and_ends_the_job() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let started = std::time::Instant::now();
    let output = daemon.run(&[
        "-nodes=2",
        "sh",
        "-c",
        "[ $SCORE_RANK = 1 ] && kill -9 $$; sleep 60",
    ]);
    assert_eq!(code(&output), Some(137), "{}", stderr(&output));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the other rank was not killed"
    );
    assert!(daemon.all_job_pids().is_empty());
}

#[test]
fn a_missing_program_exits_127() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let output = daemon.run(&["/no/such/program"]);
    assert_eq!(code(&output), Some(127));
    assert!(
        stderr(&output).contains("/no/such/program"),
        "{}",
        stderr(&output)
    );
}

fn interrupt_leaves_nothing(signal: Signal) {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let mut job = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let pids = job.wait_pids(2);
    assert!(pids.iter().all(|pid| alive(*pid)));
    job.signal(signal);
    let (status, _) = job.wait(Duration::from_secs(30));
    if signal != Signal::SIGKILL {
        assert!(
            !status.success(),
            "scrun must report the interrupted job as failed"
        );
    }
    assert!(
        wait_until(Duration::from_secs(10), || pids
            .iter()
            .all(|pid| !alive(*pid))),
        "job processes survived scrun's {signal}: {:?}",
        pids.iter().filter(|pid| alive(**pid)).collect::<Vec<_>>()
    );
    assert!(wait_until(Duration::from_secs(10), || daemon
        .all_job_pids()
        .is_empty()));
}

#[test]
fn sigint_to_scrun_kills_the_job() {
    interrupt_leaves_nothing(Signal::SIGINT);
}

#[test]
fn sigterm_to_scrun_kills_the_job() {
    interrupt_leaves_nothing(Signal::SIGTERM);
}

#[test]
fn sighup_to_scrun_kills_the_job() {
    interrupt_leaves_nothing(Signal::SIGHUP);
}

#[test]
fn sigkill_to_scrun_makes_the_daemon_kill_the_job() {
    interrupt_leaves_nothing(Signal::SIGKILL);
}

#[test]
fn a_job_too_big_is_rejected_with_its_code_and_what_exists() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let output = daemon.run(&["-nodes=3", "true"]);
    assert_eq!(
        code(&output),
        Some(scored_proto::exitcode::REJECTED),
        "{}",
        stderr(&output)
    );
    let message = stderr(&output);
    assert!(
        message.contains("nodes=3") && message.contains("2 hosts"),
        "{message}"
    );
    // Waiting makes no sense for a job that can never fit: still rejected.
    let waiting = daemon.run(&["-nodes=3,wait", "true"]);
    assert_eq!(code(&waiting), Some(scored_proto::exitcode::REJECTED));
}

#[test]
fn usage_errors_have_their_own_code() {
    let daemon = Daemon::start();
    let output = daemon.run(&["-nodes=0", "true"]);
    assert_eq!(code(&output), Some(scored_proto::exitcode::USAGE));
    assert!(stderr(&output).contains("nodes"), "{}", stderr(&output));
}

#[test]
fn an_unreachable_daemon_has_its_own_code() {
    let sandbox = Sandbox::new();
    let output = std::process::Command::new(bin("scrun"))
        .arg(format!(
            "-scored={}",
            sandbox.path.join("nobody.sock").display()
        ))
        .arg("true")
        .output()
        .expect("scrun");
    assert_eq!(
        code(&output),
        Some(scored_proto::exitcode::UNREACHABLE),
        "{}",
        stderr(&output)
    );
}

#[test]
fn sc_console_status_answers() {
    let daemon = Daemon::start();
    let status = daemon.ok("status");
    for key in [
        "uptime: ",
        "timeslice: 500ms",
        "jobs: ",
        "switches: ",
        "switch latency: ",
    ] {
        assert!(status.contains(key), "status lacks {key:?}:\n{status}");
    }
}

/// The keepers among the daemon's children.
fn keepers(daemon: &Daemon) -> Vec<i32> {
    daemon
        .all_children()
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.starts_with("scored keeper of job"))
        })
        .collect()
}

/// A job killed while its processes are still being created ends: its
/// keeper creates nothing more, what it created dies, the job is over in
/// the daemon's books and its keeper gone, so nothing of it holds scrun's
/// output. Killed both ways a job dies during its launch: by `kill`, and
/// by its scrun dying. The launch is held in flight by a working
/// directory on a file system that hangs, where the ranks created wait
/// before their exec until the kill's signal interrupts them.
#[test]
fn a_job_killed_during_its_launch_ends_and_leaves_nothing() {
    let n = 40;
    let daemon = Daemon::builder()
        .hosts(&format!("host0 cores={n}\n"))
        .start();
    let Some(hung) = HungDir::mount(&daemon.sandbox.path.join("hung")) else {
        println!("no FUSE here: no launch can be held in flight");
        return;
    };
    let nodes = format!("-nodes={n}");
    for (id, by_scrun) in [(1, false), (2, true)] {
        let mut job = Job::start(
            daemon
                .scrun(&[&nodes, "sh", "-c", "echo pid $$"])
                .current_dir(hung.path()),
        );
        assert!(
            wait_until(Duration::from_secs(30), || hung.held() > 0),
            "job {id}: no rank reached its working directory:\n{}",
            daemon.log()
        );
        if by_scrun {
            job.signal(Signal::SIGKILL);
        } else {
            daemon.ok(&format!("kill {id} KILL"));
        }
        let (status, stderr) = job.wait(Duration::from_secs(30));
        if !by_scrun {
            assert_eq!(status.code(), Some(137), "job {id}: {stderr}");
        }
        // `jobs` lists live jobs under its header.
        assert!(
            wait_until(Duration::from_secs(30), || daemon
                .ok("jobs")
                .lines()
                .count()
                <= 1
                && keepers(&daemon).is_empty()),
            "job {id} lives on ({:?}) with keepers {:?}:\n{}",
            daemon.job_state(id),
            keepers(&daemon),
            daemon.log()
        );
        assert_eq!(job.count_lines("pid "), 0, "job {id}: a rank ran");
    }
}

/// From a submission's arrival until its ranks are created, scored asks
/// for no CPU wake-up latency (its request at 0, so that idle CPUs poll),
/// and it lets go of the request (back at the default, -1) once they are,
/// at once for a submission refused or a launch that failed, and after a
/// bounded time for a launch that hangs: the kernel's trace of its
/// requests shows one hold and one release a submission, ending released
/// while the hung launch is still in flight.
#[test]
fn the_cpu_latency_is_held_at_zero_during_each_launch_only() {
    if !is_root() {
        eprintln!("skipped: the CPU latency request and tracefs need root");
        return;
    }
    if !std::path::Path::new("/dev/cpu_dma_latency").exists() {
        eprintln!("skipped: no /dev/cpu_dma_latency");
        return;
    }
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let Some(trace) = crate::gang::QosTrace::of(daemon.pid()) else {
        eprintln!("skipped: no tracefs instance with the power:pm_qos_update_request event");
        return;
    };
    let runs: [(&[&str], i32); 4] = [
        (&["-nodes=1", "true"], 0),
        (&["-nodes=2", "true"], 0),
        // Refused at its arrival: more hosts than there are.
        (&["-nodes=3", "true"], scored_proto::exitcode::REJECTED),
        // Its rank fails to exec.
        (&["-nodes=1", "/nonexistent/program"], 127),
    ];
    for (args, status) in runs {
        let output = daemon.scrun(args).output().expect("scrun");
        assert_eq!(code(&output), Some(status), "{args:?}: {}", stderr(&output));
    }
    std::thread::sleep(Duration::from_millis(200));
    let values = trace.values();
    assert_eq!(
        values,
        [0, -1].repeat(runs.len()),
        "not one hold and one release a submission"
    );
    let Some(hung) = HungDir::mount(&daemon.sandbox.path.join("hung")) else {
        println!("no FUSE here: no launch can be held in flight");
        return;
    };
    let mut job = Job::start(daemon.scrun(&["-nodes=1", "true"]).current_dir(hung.path()));
    assert!(
        wait_until(Duration::from_secs(30), || hung.held() > 0),
        "the rank never reached its working directory:\n{}",
        daemon.log()
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(hung.held(), 1, "the launch is no longer held in flight");
    let values = trace.values();
    assert_eq!(
        values,
        [0, -1].repeat(runs.len() + 1),
        "the hung launch's hold is not let go of"
    );
    job.signal(Signal::SIGKILL);
    job.wait(Duration::from_secs(30));
}

/// On two CPUs or more a keeper sets two ranks up at once: a rank whose
/// set-up waits (its working directory on a file system that does not
/// answer) does not keep the next one from being created and set up
/// beside it, and once the file system answers both run.
#[test]
fn a_rank_whose_set_up_waits_does_not_hold_the_next_one() {
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        eprintln!("skipped: one CPU, one rank set up at a time");
        return;
    }
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let Some(hung) = HungDir::mount(&daemon.sandbox.path.join("hung")) else {
        println!("no FUSE here: no set-up can be held");
        return;
    };
    let mut job = Job::start(
        daemon
            .scrun(&["-nodes=2", "sh", "-c", "echo rank $SCORE_RANK"])
            .current_dir(hung.path()),
    );
    assert!(
        wait_until(Duration::from_secs(10), || hung.held() == 2),
        "{} of the 2 ranks reached their working directory:\n{}",
        hung.held(),
        daemon.log()
    );
    hung.release();
    let (status, stderr) = job.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(job.count_lines("rank "), 2, "{stderr}");
}
