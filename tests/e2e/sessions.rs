//! Every rank leads a session of its own, so a
//! job cannot reach the terminal scored was started from and no process of
//! one user can join another user's job's process group; and scored never
//! signals a process group whose id was handed to a stranger after the
//! job's process that held it was gone.

use std::time::Duration;

use scored_tests::*;

/// The `tty_nr` field (7) of /proc/PID/stat: the controlling terminal.
fn controlling_terminal(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = text
        .get(text.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    // fields[0] is field 3 (state); tty_nr is field 7.
    fields.get(4)?.parse().ok()
}

/// No rank shares scored's session, nor another job's: each leads a
/// session of its own.
#[test]
fn every_rank_leads_a_session_of_its_own_apart_from_scored_and_other_jobs() {
    let daemon = Daemon::builder()
        .hosts("h0 cpus=0 cores=2\nh1 cpus=0 cores=2\n")
        .start();
    let mut first = daemon.spawn(&["-nodes=4", &testprog(), "spin", "0"]);
    let mut second = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
    let mut pids = first.wait_pids(4);
    pids.extend(second.wait_pids(2));
    let scored_session = proc_stat(daemon.pid() as i32).expect("scored runs").session;
    for pid in &pids {
        let stat = proc_stat(*pid).expect("a rank runs");
        assert_eq!(stat.session, *pid, "rank {pid} leads its session");
        assert_eq!(stat.pgrp, *pid, "rank {pid} leads its process group");
        assert_ne!(
            stat.session, scored_session,
            "rank {pid} is outside scored's session"
        );
    }
    first.signal(nix::sys::signal::Signal::SIGINT);
    second.signal(nix::sys::signal::Signal::SIGINT);
    first.wait(Duration::from_secs(30));
    second.wait(Duration::from_secs(30));
}

/// A job cannot open (to read it, or to inject input into it) the
/// terminal of the shell that started scored: no rank is in scored's
/// session.
#[test]
fn a_job_cannot_open_the_terminal_scored_was_started_from() {
    let pty = nix::pty::openpty(None, None).expect("a pseudo-terminal");
    let slave_path = nix::unistd::ttyname(&pty.slave).expect("the slave's name");
    let daemon = Daemon::builder().terminal(&slave_path).start();
    assert_ne!(
        controlling_terminal(daemon.pid() as i32),
        Some(0),
        "scored runs with {} as its controlling terminal",
        slave_path.display()
    );
    let output = daemon.run(&[
        "sh",
        "-c",
        "if echo injected > /dev/tty; then echo opened; else echo refused; fi",
    ]);
    assert_eq!(stdout(&output), "refused\n", "{}", stderr(&output));
    drop(pty);
}

/// A process of user A cannot move itself into user B's job's process
/// group: setpgid checks no uid, only that both are in one session, and no
/// two jobs share a session. Joined, it would count against B's job and
/// stall its stops.
#[test]
fn a_process_of_one_user_cannot_join_another_users_job_group() {
    let Some(users) = test_users("a_process_of_one_user_cannot_join_another_users_job_group")
    else {
        return;
    };
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let mut victim = daemon.spawn_as(&users.b, &["sh", "-c", "echo pid $$; exec sleep 600"]);
    let victim_group = victim.wait_pids(1)[0];
    // A child of the rank (a rank, leading its session, may not change its
    // group at all), trying to join B's group.
    let script = format!(
        "perl -e 'if (setpgrp(0, {victim_group})) {{ print \"joined\\n\" }} else {{ print \"refused: $!\\n\" }}'; true"
    );
    let output = daemon
        .scrun_as(&users.a, &["sh", "-c", &script])
        .output()
        .expect("scrun");
    assert_eq!(
        stdout(&output),
        "refused: Operation not permitted\n",
        "{}",
        stderr(&output)
    );
    victim.signal(nix::sys::signal::Signal::SIGINT);
    victim.wait(Duration::from_secs(30));
}

/// Starts `setsid sh -c SCRIPT` with pid `wanted` (by setting ns_last_pid,
/// as root), so that it leads a session and a process group with that id,
/// and waits until it does. `None` if the pid could not be had (another
/// process may take it first).
fn stranger_with_pid(wanted: i32, script: &str) -> Option<std::process::Child> {
    for _ in 0..50 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (wanted - 1).to_string()).ok()?;
        let mut child = std::process::Command::new("setsid")
            .args(["sh", "-c", script])
            .stdin(std::process::Stdio::null())
            .spawn()
            .ok()?;
        if child.id() as i32 == wanted {
            // setsid(1) execs sh once it leads its session.
            let leads = wait_until(Duration::from_secs(5), || {
                proc_stat(wanted).is_some_and(|stat| stat.session == wanted && stat.pgrp == wanted)
            });
            return leads.then_some(child);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    None
}

/// A group is signalled only while its leader, a rank, is unreaped: once
/// rank 0 is reaped and the other rank on its host has left the group
/// (setsid), a stranger given that pid leads a group of the same id, and
/// gets none of the job's SIGSTOP, SIGCONT, SIGTERM and SIGKILL.
fn a_reused_group_id_never_reaches_a_stranger(builder: DaemonBuilder) {
    if !is_root() {
        println!("skipped: choosing a pid (ns_last_pid) needs root");
        return;
    }
    let daemon = builder
        .hosts("h0 cpus=0 cores=2\n")
        .timeslice("50ms")
        .start();
    // Rank 0 ends at once; rank 1 leaves whatever group it is in and
    // keeps the job alive.
    let mut job = daemon.spawn(&[
        "-nodes=2",
        "sh",
        "-c",
        "echo pid $$; [ $SCORE_RANK = 0 ] && exit 0; exec setsid -w sleep 600",
    ]);
    let pids = job.wait_pids(2);
    let gone = wait_until(Duration::from_secs(10), || {
        pids.iter().filter(|pid| alive(**pid)).count() == 1
    });
    assert!(gone, "rank 0 ended and was reaped");
    let old = *pids
        .iter()
        .find(|pid| !alive(**pid))
        .expect("rank 0 is gone");
    // The other job shares the host, so job 1 is stopped and continued
    // every slice from now on.
    let mut other = daemon.spawn(&["sh", "-c", "echo pid $$; exec sleep 600"]);
    other.wait_pids(1);
    let record = daemon.sandbox.path.join("stranger.log");
    let script = format!(
        "trap 'echo CONT >> {log}' CONT; trap 'echo TERM >> {log}' TERM; \
         while :; do sleep 0.05; done",
        log = record.display()
    );
    let Some(mut stranger) = stranger_with_pid(old, &script) else {
        println!("skipped: pid {old} could not be had");
        return;
    };
    // Switches, then a kill with its grace and the sweep of leftovers.
    let mut seen_stopped = false;
    wait_until(Duration::from_millis(600), || {
        seen_stopped |= proc_stat(old).is_some_and(|stat| stat.state == 'T');
        false
    });
    daemon.ok("kill 1");
    let (status, _) = job.wait(Duration::from_secs(30));
    assert!(!status.success());
    assert!(wait_until(Duration::from_secs(10), || daemon
        .json("job 1")
        .get("state")
        .and_then(|state| state.as_str())
        .is_some_and(|state| state == "killed")));
    std::thread::sleep(Duration::from_millis(200));
    let survived = alive(old);
    let stopped_now = proc_stat(old).is_some_and(|stat| stat.state == 'T');
    let received = std::fs::read_to_string(&record).unwrap_or_default();
    let _ = stranger.kill();
    let _ = stranger.wait();
    other.signal(nix::sys::signal::Signal::SIGINT);
    other.wait(Duration::from_secs(30));
    assert!(
        survived && !stopped_now && !seen_stopped && received.is_empty(),
        "scored signalled a stranger that reused its job's old group id {old} \
         (alive {survived}, stopped {stopped_now}, seen stopped {seen_stopped}, \
         trapped {received:?}):\n{}",
        daemon.log()
    );
}

#[test]
fn a_reused_group_id_never_reaches_a_stranger_with_cgroups() {
    a_reused_group_id_never_reaches_a_stranger(Daemon::builder());
}

#[test]
fn a_reused_group_id_never_reaches_a_stranger_without_cgroups() {
    a_reused_group_id_never_reaches_a_stranger(Daemon::builder().arg("--no-cgroups"));
}
