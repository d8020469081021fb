//! `MPI_Comm_spawn` through scrun's PMI-1 and PMI-2 server, driven by a
//! client of the tests' own (bash on `$PMI_FD`): the children are a job
//! of their own with their own world and key-value space, holding what
//! the parent put for them; a spawn scored refuses, or of a program that
//! does not exist, is an error to the rank; the children end with the
//! parent's job.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use scored_tests::*;

/// bash functions for a rank that speaks PMI by hand on `$PMI_FD`.
const CLIENT: &str = r#"
send1() { printf '%s\n' "$1" >&$PMI_FD; }
recv1() { read -r line <&$PMI_FD; echo "$1$line"; }
send2() { printf '%-6d%s' ${#1} "$1" >&$PMI_FD; }
recv2() { read -r -N 6 len <&$PMI_FD; read -r -N $len body <&$PMI_FD; echo "$1$body"; }
"#;

/// Two hosts of two processes each.
fn hosts() -> String {
    two_hosts()
        .lines()
        .map(|line| format!("{line} cores=2\n"))
        .collect()
}

/// A child program: bash with the client functions and `body`, which
/// ends by creating `$DONE.$PMI_RANK`.
fn child(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/bash\n{CLIENT}\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

fn assert_no_process_left(daemon: &Daemon) {
    let gone = wait_until(Duration::from_secs(15), || daemon.all_job_pids().is_empty());
    assert!(gone, "processes left: {:?}", daemon.all_job_pids());
}

/// The parent waits (bounded) for the children's `$DONE` files.
const WAIT_CHILDREN: &str = r#"
for _ in $(seq 600); do [ -e "$DONE.0" ] && [ -e "$DONE.1" ] && break; sleep 0.1; done
"#;

#[test]
fn a_pmi1_spawn_starts_a_world_of_its_own_holding_the_parents_keys() {
    let daemon = Daemon::builder().hosts(&hosts()).start();
    let dir = &daemon.sandbox.path;
    let done = dir.join("done1");
    let kid = child(
        dir,
        "kid1",
        r#"
send1 "cmd=init pmi_version=1 pmi_subversion=1"; read -r _ <&$PMI_FD
send1 "cmd=get_my_kvsname"; read -r kvs <&$PMI_FD; kvs=${kvs##*kvsname=}
send1 "cmd=get_universe_size"; recv1 "$PMI_RANK/$PMI_SIZE spawned=$PMI_SPAWNED arg=$1 "
send1 "cmd=get kvsname=$kvs key=PARENT_ROOT_PORT_NAME"; recv1 "$PMI_RANK/$PMI_SIZE "
send1 "cmd=barrier_in"; read -r _ <&$PMI_FD
send1 "cmd=finalize"; read -r _ <&$PMI_FD
touch "$DONE.$PMI_RANK"
"#,
    );
    let parent = format!(
        r#"{CLIENT}
send1 "cmd=init pmi_version=1 pmi_subversion=1"; read -r _ <&$PMI_FD
printf 'mcmd=spawn\nnprocs=2\nexecname=%s\ntotspawns=1\nspawnssofar=1\nargcnt=1\narg1=a b\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=tag#0$port#5$\ninfo_num=0\nendcmd\n' "{kid}" >&$PMI_FD
recv1 "parent "
{WAIT_CHILDREN}
send1 "cmd=finalize"; recv1 "parent "
"#,
        kid = kid.display()
    );
    let output = daemon
        .scrun(&["-nodes=1", "bash", "-c", &parent])
        .env("DONE", &done)
        .output()
        .unwrap();
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(
        sorted_lines(&stdout(&output)),
        [
            "0/2 cmd=get_result rc=0 msg=success value=tag#0$port#5$",
            "0/2 spawned=1 arg=a b cmd=universe_size rc=0 size=2",
            "1/2 cmd=get_result rc=0 msg=success value=tag#0$port#5$",
            "1/2 spawned=1 arg=a b cmd=universe_size rc=0 size=2",
            "parent cmd=finalize_ack rc=0",
            "parent cmd=spawn_result rc=0",
        ],
        "{}",
        stderr(&output)
    );
    assert_no_process_left(&daemon);
}

#[test]
fn a_pmi2_spawn_gives_the_children_their_world_and_the_parent_their_job() {
    let daemon = Daemon::builder().hosts(&hosts()).start();
    let dir = &daemon.sandbox.path;
    let done = dir.join("done2");
    let kid = child(
        dir,
        "kid2",
        r#"
send2 "cmd=fullinit;pmirank=$PMI_RANK;"; recv2 "$PMI_RANK: " | sed 's/spawner-jobid=scrun_[0-9]*_0/spawner-jobid=PARENT/'
send2 "cmd=info-getjobattr;key=universeSize;"; recv2 "$PMI_RANK: "
send2 "cmd=kvs-get;jobid=x;srcid=-1;key=PARENT_ROOT_PORT_NAME;"; recv2 "$PMI_RANK: "
send2 "cmd=finalize;"; read -r -N 6 len <&$PMI_FD; read -r -N $len _ <&$PMI_FD
touch "$DONE.$PMI_RANK"
"#,
    );
    let parent = format!(
        r#"{CLIENT}
send2 "cmd=fullinit;pmirank=0;"; read -r -N 6 len <&$PMI_FD; read -r -N $len _ <&$PMI_FD
send2 "cmd=spawn;ncmds=1;preputcount=1;ppkey0=PARENT_ROOT_PORT_NAME;ppval0=port;;5;subcmd={kid};maxprocs=2;argc=0;infokeycount=0;"
recv2 "parent " | sed 's/jobid=scrun_[0-9]*_0;/jobid=CHILDREN;/'
{WAIT_CHILDREN}
send2 "cmd=finalize;"; recv2 "parent "
"#,
        kid = kid.display()
    );
    let output = daemon
        .scrun(&["-nodes=1,mpi=pmi2", "bash", "-c", &parent])
        .env("DONE", &done)
        .output()
        .unwrap();
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let mut expected = vec![
        "parent cmd=spawn-response;rc=0;jobid=CHILDREN;".to_string(),
        "parent cmd=finalize-response;rc=0;".to_string(),
    ];
    for rank in 0..2 {
        expected.extend([
            format!("{rank}: cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank={rank};size=2;appnum=0;spawner-jobid=PARENT;debugged=FALSE;pmiverbose=FALSE;"),
            format!("{rank}: cmd=info-getjobattr-response;rc=0;found=TRUE;value=2;"),
            format!("{rank}: cmd=kvs-get-response;rc=0;found=TRUE;value=port;;5;"),
        ]);
    }
    expected.sort();
    assert_eq!(
        sorted_lines(&stdout(&output)),
        expected,
        "{}",
        stderr(&output)
    );
    assert_no_process_left(&daemon);
}

#[test]
fn a_refused_spawn_is_an_error_to_the_rank_which_goes_on() {
    let daemon = Daemon::builder().hosts(&hosts()).start();
    let dir = &daemon.sandbox.path;
    let kid = child(dir, "kid3", "exit 0");
    let spawn = |nprocs: u32, execname: &str| {
        format!(
            r#"printf 'mcmd=spawn\nnprocs={nprocs}\nexecname=%s\ntotspawns=1\nspawnssofar=1\nargcnt=0\npreput_num=0\ninfo_num=0\nendcmd\n' "{execname}" >&$PMI_FD; recv1"#
        )
    };
    let parent = format!(
        r#"{CLIENT}
send1 "cmd=init pmi_version=1 pmi_subversion=1"; read -r _ <&$PMI_FD
{over}
{missing}
{zero}
send1 "cmd=finalize"; recv1
"#,
        // More processes than the hosts hold: scored refuses the job.
        over = spawn(5, &kid.display().to_string()),
        missing = spawn(1, "/nonexistent/program"),
        zero = spawn(0, &kid.display().to_string()),
    );
    let output = daemon.run(&["-nodes=1", "bash", "-c", &parent]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let out = stdout(&output);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}\n{}", stderr(&output));
    assert!(
        lines[0].starts_with("cmd=spawn_result rc=-1 msg=the_spawned_job_was_not_admitted:_job_rejected:_nodes=5_needs_")
            && lines[0].ends_with("_(its_scrun_ended_with_exit_status:_75)"),
        "{out}\n{}",
        stderr(&output)
    );
    assert_eq!(
        lines[1],
        "cmd=spawn_result rc=-1 msg=cannot_spawn_\"/nonexistent/program\":_no_such_program,_or_not_executable"
    );
    assert_eq!(
        lines[2],
        "cmd=spawn_result rc=-1 msg=spawn_with_nprocs=0:_at_least_one_process_is_needed"
    );
    assert_eq!(lines[3], "cmd=finalize_ack rc=0");
    // The refused job's scrun said why, on the user's stderr.
    assert!(stderr(&output).contains("scrun: "), "{}", stderr(&output));
    assert_no_process_left(&daemon);
}

#[test]
fn spawned_children_end_with_their_parents_job() {
    let daemon = Daemon::builder().hosts(&hosts()).start();
    let dir = &daemon.sandbox.path;
    let up = dir.join("up");
    let kid = child(dir, "kid4", r#"touch "$UP.$PMI_RANK"; exec sleep 300"#);
    // The parent spawns, sees the children run, and exits without waiting.
    let parent = format!(
        r#"{CLIENT}
send1 "cmd=init pmi_version=1 pmi_subversion=1"; read -r _ <&$PMI_FD
printf 'mcmd=spawn\nnprocs=2\nexecname=%s\ntotspawns=1\nspawnssofar=1\nargcnt=0\npreput_num=0\ninfo_num=0\nendcmd\n' "{kid}" >&$PMI_FD
recv1
for _ in $(seq 600); do [ -e "$UP.0" ] && [ -e "$UP.1" ] && break; sleep 0.1; done
ls "$UP".* | wc -l
send1 "cmd=finalize"; read -r _ <&$PMI_FD
"#,
        kid = kid.display()
    );
    let output = daemon
        .scrun(&["-nodes=1", "bash", "-c", &parent])
        .env("UP", &up)
        .output()
        .unwrap();
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "cmd=spawn_result rc=0\n2\n",
        "{}",
        stderr(&output)
    );
    assert_no_process_left(&daemon);
}

#[test]
fn spawned_children_end_when_their_parents_scrun_is_killed() {
    let daemon = Daemon::builder().hosts(&hosts()).start();
    let dir = &daemon.sandbox.path;
    let kid = child(dir, "kid5", r#"echo "up $PMI_RANK"; exec sleep 300"#);
    let parent = format!(
        r#"{CLIENT}
send1 "cmd=init pmi_version=1 pmi_subversion=1"; read -r _ <&$PMI_FD
printf 'mcmd=spawn\nnprocs=2\nexecname=%s\ntotspawns=1\nspawnssofar=1\nargcnt=0\npreput_num=0\ninfo_num=0\nendcmd\n' "{kid}" >&$PMI_FD
recv1
exec sleep 300
"#,
        kid = kid.display()
    );
    let mut job = Job::start(&mut daemon.scrun(&["-nodes=1", "bash", "-c", &parent]));
    job.wait_lines("cmd=spawn_result rc=0", 1);
    job.wait_lines("up ", 2);
    // Three ranks run: the parent's and its two children (a rank in the
    // middle of its exec shows no environment for a moment, so the count
    // is taken again until it settles).
    assert!(
        wait_until(Duration::from_secs(10), || daemon.all_job_pids().len() == 3),
        "{:?}",
        daemon.all_job_pids()
    );
    job.signal(nix::sys::signal::Signal::SIGKILL);
    assert_no_process_left(&daemon);
}
