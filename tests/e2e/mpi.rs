//! MPI under scrun: real MPICH programs compiled here find one world of
//! their ranks through scrun's PMI server, real OpenMPI programs and
//! Debian's mpi4py through its PMIx server; hand-written PMI clients (bash
//! on the rank's descriptor) show the PMI-2 wire and what a hostile or
//! dying rank does to its job, and to nothing else. The tests print why
//! they are skipped where `mpicc.mpich`, `mpicc.openmpi` or mpi4py is
//! absent.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use scored_tests::*;

/// An MPI program: `rank R of N score S sum X`, where X is the allreduce
/// of rank+1 and S is SCORE_RANK; with an argument A, rank A calls
/// MPI_Abort(MPI_COMM_WORLD, 7) after the allreduce.
const HELLO: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank, size, one, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d score %s sum %d\n", rank, size, getenv("SCORE_RANK"), sum);
    fflush(stdout);
    if (argc > 1 && rank == atoi(argv[1]))
        MPI_Abort(MPI_COMM_WORLD, 7);
    MPI_Finalize();
    return 0;
}
"#;

/// Compiles `source` with MPICH's compiler into the sandbox, or says why
/// the test is skipped and returns `None`.
fn mpicc(dir: &Path, name: &str, source: &str) -> Option<PathBuf> {
    compile_with("mpicc.mpich", "mpich libmpich-dev", dir, name, source)
}

/// Compiles `source` with `compiler`, or says why the test is skipped
/// (the Debian packages to install) and returns `None`.
fn compile_with(
    compiler: &str,
    packages: &str,
    dir: &Path,
    name: &str,
    source: &str,
) -> Option<PathBuf> {
    let found = Command::new(compiler).arg("--version").output();
    if found.is_err() {
        eprintln!("skipped: {compiler} is not installed (apt-get install {packages})");
        return None;
    }
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write the MPI source");
    let exe = dir.join(name);
    let output = Command::new(compiler)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run mpicc.mpich");
    assert!(output.status.success(), "{compiler}: {}", stderr(&output));
    Some(exe)
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// The environment of process `pid`. A rank that printed its pid and
/// then `exec`s shows an empty environment while the kernel builds the
/// new image, so an empty one is read again until it is filled.
fn environ_of(pid: i32) -> Vec<u8> {
    let read = || std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let mut environ = read();
    wait_until(Duration::from_secs(10), || {
        environ = read();
        !environ.is_empty()
    });
    environ
}

/// Waits for the job processes of `daemon` to be gone.
fn assert_no_process_left(daemon: &Daemon) {
    let gone = wait_until(Duration::from_secs(10), || daemon.all_job_pids().is_empty());
    assert!(gone, "processes left: {:?}", daemon.all_job_pids());
}

#[test]
fn mpich_ranks_form_one_world_in_rank_order_and_reduce() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let Some(hello) = mpicc(&daemon.sandbox.path, "hello", HELLO) else {
        return;
    };
    let hello = hello.to_str().unwrap();
    let output = daemon.run(&["-nodes=2", hello]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(
        sorted_lines(&stdout(&output)),
        ["rank 0 of 2 score 0 sum 3", "rank 1 of 2 score 1 sum 3"]
    );
    // Each `::` stage is a world of its own.
    let output = daemon.run(&["-nodes=2", hello, "::", hello]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let lines = sorted_lines(&stdout(&output));
    let expected: Vec<String> = (0..2)
        .flat_map(|rank| vec![format!("rank {rank} of 2 score {rank} sum 3"); 2])
        .collect();
    assert_eq!(lines, expected);
    // Without PMI each rank is a singleton.
    let output = daemon.run(&["-nodes=2,mpi=none", hello]);
    assert_eq!(
        sorted_lines(&stdout(&output)),
        ["rank 0 of 1 score 0 sum 1", "rank 0 of 1 score 1 sum 1"]
    );
    assert_no_process_left(&daemon);
}

#[test]
fn mpi_abort_ends_the_job_with_the_ranks_code_and_a_message() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let Some(hello) = mpicc(&daemon.sandbox.path, "hello", HELLO) else {
        return;
    };
    let output = daemon.run(&["-nodes=2", hello.to_str().unwrap(), "1"]);
    assert_eq!(code(&output), Some(7), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("scrun: rank 1 called abort with exit code 7\n"),
        "{}",
        stderr(&output)
    );
    assert_no_process_left(&daemon);
}

/// bash functions for a rank that speaks PMI by hand on `$PMI_FD`.
const CLIENT: &str = r#"
send1() { printf '%s\n' "$1" >&$PMI_FD; }
recv1() { read -r line <&$PMI_FD; echo "$PMI_RANK: $line"; }
send2() { printf '%-6d%s' ${#1} "$1" >&$PMI_FD; }
recv2() { read -r -N 6 len <&$PMI_FD; read -r -N $len body <&$PMI_FD; echo "$PMI_RANK: $body"; }
"#;

fn client(script: &str) -> String {
    format!("{CLIENT}\n{script}")
}

#[test]
fn a_pmi2_client_puts_fences_and_gets_across_ranks() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let script = client(
        r#"
send2 "cmd=fullinit;pmirank=$PMI_RANK;threaded=FALSE;"; recv2
send2 "cmd=info-getjobattr;key=PMI_process_mapping;"; recv2
send2 "cmd=kvs-put;key=card$PMI_RANK;value=addr;;$PMI_RANK;"; recv2
send2 "cmd=kvs-fence;"; recv2
send2 "cmd=kvs-get;jobid=x;srcid=-1;key=card$((1 - PMI_RANK));"; recv2
send2 "cmd=finalize;"; recv2
"#,
    );
    let output = daemon.run(&["-nodes=2", "bash", "-c", &script]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let mut expected = Vec::new();
    for rank in 0..2 {
        let other = 1 - rank;
        expected.extend([
            format!("{rank}: cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank={rank};size=2;appnum=0;debugged=FALSE;pmiverbose=FALSE;"),
            format!("{rank}: cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,2));"),
            format!("{rank}: cmd=kvs-put-response;rc=0;"),
            format!("{rank}: cmd=kvs-fence-response;rc=0;"),
            format!("{rank}: cmd=kvs-get-response;rc=0;found=TRUE;value=addr;;{other};"),
            format!("{rank}: cmd=finalize-response;rc=0;"),
        ]);
    }
    expected.sort();
    assert_eq!(sorted_lines(&stdout(&output)), expected);
    // Served PMI-1 only, a PMI-2 client is told so, and its job ends.
    let output = daemon.run(&["-nodes=2,mpi=pmi1", "bash", "-c", &script]);
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("sent a PMI-2 fullinit, but scrun serves PMI-1 only (-mpi=pmi1)"),
        "{}",
        stderr(&output)
    );
}

/// A job of two ranks whose rank 1 runs `rank1` (bash, with the client
/// functions) while rank 0 initializes with PMI-1 and waits at the barrier.
fn hostile_job(daemon: &Daemon, rank1: &str) -> std::process::Output {
    let script = client(&format!(
        r#"
if [ "$PMI_RANK" = 1 ]; then
{rank1}
else
  send1 "cmd=init pmi_version=1 pmi_subversion=1"; recv1
  send1 "cmd=barrier_in"; recv1
  sleep 60
fi
"#
    ));
    daemon.run(&["-nodes=2", "bash", "-c", &script])
}

#[test]
fn garbage_or_a_flood_from_a_rank_ends_its_job_only_naming_the_rank() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    // A job of another user's kind that must run on untouched.
    let mut bystander = daemon.spawn(&["-nodes=2", "sh", "-c", "echo up; exec sleep 60"]);
    bystander.wait_lines("up", 2);
    // The daemon's sockets but its links to keepers it keeps idle for the
    // next jobs (they hold nothing of a job).
    let sockets = || {
        daemon
            .fd_listing()
            .matches("socket:")
            .count()
            .saturating_sub(daemon.idle_keepers())
    };
    let sockets_before = sockets();
    let cases = [
        (
            "echo garbage >&$PMI_FD; sleep 60",
            "scrun: rank 1 sent what is not PMI on its PMI descriptor: \"garbage\" where a key=value pair belongs",
        ),
        (
            "head -c 100000 /dev/zero >&$PMI_FD; sleep 60",
            "scrun: rank 1 sent what is not PMI on its PMI descriptor: a PMI-1 line longer than 1024 bytes",
        ),
        (
            "send1 'cmd=init pmi_version=1 pmi_subversion=1'; yes cmd=get_maxes >&$PMI_FD",
            "scrun: rank 1 left more than 256 KiB of PMI replies unread (a flood of requests)",
        ),
        (
            "send1 'cmd=init pmi_version=1 pmi_subversion=1'; recv1; exit 3",
            "scrun: rank 1 ended its PMI connection without finalize (did it exit or crash inside MPI?)",
        ),
        (
            "exit 0",
            "scrun: rank 1 ended without ever using its PMI descriptor while rank 0 waits at the PMI barrier",
        ),
    ];
    for (rank1, message) in cases {
        let output = hostile_job(&daemon, rank1);
        assert_eq!(code(&output), Some(1), "{rank1}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(message),
            "{rank1}: {}",
            stderr(&output)
        );
        let left = wait_until(Duration::from_secs(10), || {
            daemon.all_job_pids().len() == bystander_pids(&daemon)
        });
        assert!(left, "{rank1}: processes left: {:?}", daemon.all_job_pids());
    }
    // The daemon holds no connection of those jobs, and the bystander runs on.
    assert!(
        wait_until(Duration::from_secs(5), || sockets() <= sockets_before),
        "{} sockets, {sockets_before} before (keepers kept idle left out: {})\n{}",
        sockets(),
        daemon.idle_keepers(),
        daemon.fd_listing()
    );
    assert_eq!(daemon.job_pids(1).len(), 2, "the bystander lost a rank");
    bystander.signal(nix::sys::signal::Signal::SIGINT);
}

/// The bystander's processes (job 1's).
fn bystander_pids(daemon: &Daemon) -> usize {
    daemon.job_pids(1).len()
}

#[test]
fn a_rank_past_a_limit_gets_an_error_reply_saying_which() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let long_key = "k".repeat(65);
    let script = client(&format!(
        r#"
send1 "cmd=init pmi_version=1 pmi_subversion=1"; recv1
send1 "cmd=put kvsname=x key=a value=b"; recv1
send1 "cmd=put key={long_key} value=b"; recv1
send1 "cmd=finalize"; recv1
"#
    ));
    let output = daemon.run(&["-nodes=1", "bash", "-c", &script]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let pid_name = stdout(&output);
    assert!(
        pid_name.contains("0: cmd=put_result rc=-1 msg=kvsname_\"x\"_is_not_this_job's_scrun_"),
        "{pid_name}"
    );
    assert!(
        pid_name.contains("0: cmd=put_result rc=-1 msg=key_of_65_bytes:_keys_are_1_to_64_bytes"),
        "{pid_name}"
    );
}

/// A queued MPI job's PMI connections survive a kill -9 of scored: its
/// scrun keeps the job's PMI server, reattaches to the next scored with the
/// ranks' PMI ends again, and once the queue runs the ranks meet as one
/// world and end with status 0.
#[test]
fn a_queued_jobs_pmi_connections_survive_a_kill_of_scored() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    daemon.ok("queue 1 deactivate");
    let script = client(
        r#"
send1 "cmd=init pmi_version=1 pmi_subversion=1"; recv1
send1 "cmd=put kvsname=x key=r$PMI_RANK value=v$PMI_RANK" >/dev/null; read -r _ <&$PMI_FD
send1 "cmd=barrier_in"; recv1
send1 "cmd=get key=r$((1 - PMI_RANK))"; recv1
send1 "cmd=finalize"; recv1
"#,
    )
    .replace("kvsname=x ", "");
    let mut job = daemon.spawn(&["-priority=1", "-nodes=2", "bash", "-c", &script]);
    assert!(
        wait_until(Duration::from_secs(20), || stdout(&daemon.console("job 1"))
            .contains("state: queued")),
        "{}",
        daemon.ok("jobs")
    );
    daemon.kill_hard();
    daemon.start_again();
    assert!(
        wait_until(Duration::from_secs(10), || daemon
            .log()
            .contains("its scrun reattached")),
        "{}",
        daemon.log()
    );
    daemon.ok("queue 1 activate");
    let mut lines = job.wait_lines("", 8);
    let (status, errors) = job.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{errors}");
    lines.sort();
    assert_eq!(
        lines,
        [
            "0: cmd=barrier_out rc=0",
            "0: cmd=finalize_ack rc=0",
            "0: cmd=get_result rc=0 msg=success value=v1",
            "0: cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1",
            "1: cmd=barrier_out rc=0",
            "1: cmd=finalize_ack rc=0",
            "1: cmd=get_result rc=0 msg=success value=v0",
            "1: cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1",
        ]
    );
}

#[test]
fn a_queued_jobs_pmi_connections_survive_an_in_place_restart() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    // The exclusive queue 0: the second job waits, its PMI descriptors
    // held by the daemon, while the first runs.
    let mut first = daemon.spawn(&["-priority=0", "-nodes=2", &testprog(), "spin", "0"]);
    first.wait_pids(2);
    let script = client(
        r#"
send1 "cmd=init pmi_version=1 pmi_subversion=1"; recv1
send1 "cmd=put kvsname=x key=r$PMI_RANK value=v$PMI_RANK" >/dev/null; read -r _ <&$PMI_FD
send1 "cmd=barrier_in"; recv1
send1 "cmd=get key=r$((1 - PMI_RANK))"; recv1
send1 "cmd=finalize"; recv1
"#,
    )
    .replace("kvsname=x ", "");
    let mut second = daemon.spawn(&["-priority=0", "-nodes=2", "bash", "-c", &script]);
    assert!(
        wait_until(Duration::from_secs(20), || stdout(&daemon.console("job 2"))
            .contains("state: queued")),
        "{}",
        daemon.ok("jobs")
    );
    let output = daemon.console("restart");
    assert!(
        stdout(&output).contains("restarted in place"),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    daemon.ok("kill 1 KILL");
    first.wait(Duration::from_secs(10));
    let mut lines = second.wait_lines("", 8);
    let (status, errors) = second.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{errors}");
    lines.sort();
    assert_eq!(
        lines,
        [
            "0: cmd=barrier_out rc=0",
            "0: cmd=finalize_ack rc=0",
            "0: cmd=get_result rc=0 msg=success value=v1",
            "0: cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1",
            "1: cmd=barrier_out rc=0",
            "1: cmd=finalize_ack rc=0",
            "1: cmd=get_result rc=0 msg=success value=v0",
            "1: cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1",
        ]
    );
}

/// Compiles `source` with OpenMPI's compiler, or says why the test is
/// skipped.
fn mpicc_openmpi(dir: &Path, name: &str, source: &str) -> Option<PathBuf> {
    compile_with(
        "mpicc.openmpi",
        "openmpi-bin libopenmpi-dev",
        dir,
        name,
        source,
    )
}

/// Two hosts of `cores` processes each, on two CPUs when the machine has them.
fn two_hosts_of(cores: u32) -> String {
    two_hosts()
        .lines()
        .map(|line| format!("{line} cores={cores}\n"))
        .collect()
}

#[test]
fn openmpi_ranks_form_one_world_in_rank_order_and_reduce() {
    let daemon = Daemon::builder().hosts(&two_hosts_of(2)).start();
    let Some(hello) = mpicc_openmpi(&daemon.sandbox.path, "hello_ompi", HELLO) else {
        return;
    };
    let hello = hello.to_str().unwrap();
    for ranks in [2, 4] {
        let output = daemon.run(&[&format!("-nodes={ranks}"), hello]);
        assert_eq!(code(&output), Some(0), "{}", stderr(&output));
        let sum = ranks * (ranks + 1) / 2;
        let expected: Vec<String> = (0..ranks)
            .map(|rank| format!("rank {rank} of {ranks} score {rank} sum {sum}"))
            .collect();
        assert_eq!(sorted_lines(&stdout(&output)), expected);
    }
    // With PMIx asked for by name, and each `::` stage a world of its own.
    let output = daemon.run(&["-nodes=2,mpi=pmix", hello, "::", hello]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let expected: Vec<String> = (0..2)
        .flat_map(|rank| vec![format!("rank {rank} of 2 score {rank} sum 3"); 2])
        .collect();
    assert_eq!(sorted_lines(&stdout(&output)), expected);
    // Without PMIx each OpenMPI rank is a singleton.
    let output = daemon.run(&["-nodes=2,mpi=pmi2", hello]);
    assert_eq!(
        sorted_lines(&stdout(&output)),
        ["rank 0 of 1 score 0 sum 1", "rank 0 of 1 score 1 sum 1"]
    );
    assert_no_process_left(&daemon);
}

#[test]
fn a_hosts_job_is_one_openmpi_world_of_the_ranks_placed() {
    let daemon = Daemon::builder().hosts(&two_hosts_of(2)).start();
    let Some(hello) = mpicc_openmpi(&daemon.sandbox.path, "hello_ompi", HELLO) else {
        return;
    };
    let hello = hello.to_str().unwrap();
    // Hosts of 2 cores: hosts=2 is 4 ranks and hosts=1 is 2, which scrun
    // learns only once scored has placed the job.
    for (args, ranks) in [(["-hosts=2", hello], 4), (["-hosts=1,mpi=pmix", hello], 2)] {
        let output = daemon.run(&args);
        assert_eq!(code(&output), Some(0), "{args:?}: {}", stderr(&output));
        let sum = ranks * (ranks + 1) / 2;
        let expected: Vec<String> = (0..ranks)
            .map(|rank| format!("rank {rank} of {ranks} score {rank} sum {sum}"))
            .collect();
        assert_eq!(sorted_lines(&stdout(&output)), expected, "{args:?}");
    }
    assert_no_process_left(&daemon);
}

#[test]
fn a_hosts_job_is_one_mpich_world_through_pmi_by_port() {
    let daemon = Daemon::builder().hosts(&two_hosts_of(2)).start();
    let Some(hello) = mpicc(&daemon.sandbox.path, "hello", HELLO) else {
        return;
    };
    let hello = hello.to_str().unwrap();
    // scrun learns the rank count (4, then 2) once scored has placed the
    // job; the ranks reach its PMI-1 server at PMI_PORT.
    for (args, ranks) in [(["-hosts=2", hello], 4), (["-hosts=1,mpi=pmi1", hello], 2)] {
        let output = daemon.run(&args);
        assert_eq!(code(&output), Some(0), "{args:?}: {}", stderr(&output));
        let sum = ranks * (ranks + 1) / 2;
        let expected: Vec<String> = (0..ranks)
            .map(|rank| format!("rank {rank} of {ranks} score {rank} sum {sum}"))
            .collect();
        assert_eq!(sorted_lines(&stdout(&output)), expected, "{args:?}");
    }
    // Each `::` stage a world of its own, and an abort ends the job.
    let output = daemon.run(&["-hosts=1", hello, "::", hello]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let expected: Vec<String> = (0..2)
        .flat_map(|rank| vec![format!("rank {rank} of 2 score {rank} sum 3"); 2])
        .collect();
    assert_eq!(sorted_lines(&stdout(&output)), expected);
    let output = daemon.run(&["-hosts=1", hello, "1"]);
    assert_eq!(code(&output), Some(7), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("scrun: rank 1 called abort with exit code 7\n"),
        "{}",
        stderr(&output)
    );
    // PMI-2 needs the rank count before placement.
    let output = daemon.run(&["-hosts=1,mpi=pmi2", hello]);
    assert_eq!(code(&output), Some(64), "{}", stderr(&output));
    assert!(
        stderr(&output)
            .contains("-mpi=pmi2: the number of ranks of a -hosts= job is known only once placed"),
        "{}",
        stderr(&output)
    );
    assert_no_process_left(&daemon);
}

#[test]
fn a_connection_to_the_pmi_port_that_is_not_a_waiting_rank_is_closed() {
    let daemon = Daemon::builder().hosts(&two_hosts_of(2)).start();
    // Each rank connects by bash's /dev/tcp and names itself; rank 1 then
    // tries a second connection as rank 0 and one that speaks garbage:
    // both are closed, and the world goes on.
    let script = r#"
exec 5<>/dev/tcp/${PMI_PORT%:*}/${PMI_PORT#*:}
printf 'cmd=initack pmiid=%s\n' "$PMI_ID" >&5
for i in 1 2 3 4; do read -r line <&5; echo "$PMI_RANK: $line"; done
if [ "$PMI_RANK" = 1 ]; then
  exec 6<>/dev/tcp/${PMI_PORT%:*}/${PMI_PORT#*:}
  printf 'cmd=initack pmiid=0\n' >&6
  read -r line <&6 && echo "second: $line"
  exec 7<>/dev/tcp/${PMI_PORT%:*}/${PMI_PORT#*:}
  printf 'GET / HTTP/1.0\n' >&7
  read -r line <&7 && echo "garbage: $line"
fi
printf 'cmd=init pmi_version=1 pmi_subversion=1\n' >&5; read -r line <&5; echo "$PMI_RANK: $line"
printf 'cmd=barrier_in\n' >&5; read -r line <&5; echo "$PMI_RANK: $line"
printf 'cmd=finalize\n' >&5; read -r line <&5; echo "$PMI_RANK: $line"
"#;
    let output = daemon.run(&["-hosts=1", "bash", "-c", script]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let mut expected = Vec::new();
    for rank in 0..2 {
        expected.extend([
            format!("{rank}: cmd=initack"),
            format!("{rank}: cmd=set size=2"),
            format!("{rank}: cmd=set rank={rank}"),
            format!("{rank}: cmd=set debug=0"),
            format!("{rank}: cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1"),
            format!("{rank}: cmd=barrier_out rc=0"),
            format!("{rank}: cmd=finalize_ack rc=0"),
        ]);
    }
    expected.sort();
    assert_eq!(sorted_lines(&stdout(&output)), expected);
    assert_no_process_left(&daemon);
}

#[test]
fn only_the_jobs_user_reaches_its_pmi_port() {
    let Some(users) = test_users("only_the_jobs_user_reaches_its_pmi_port") else {
        return;
    };
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let mut job = daemon.spawn_as(
        &users.a,
        &["-hosts=1", "sh", "-c", "echo pid $$; exec sleep 60"],
    );
    let pids = job.wait_pids(1);
    let environ = environ_of(pids[0]);
    let port = environ
        .split(|&b| b == 0)
        .filter_map(|entry| std::str::from_utf8(entry).ok())
        .find_map(|entry| entry.strip_prefix("PMI_PORT="))
        .expect("PMI_PORT in the rank's environment")
        .to_string();
    let (host, number) = port.split_once(':').unwrap();
    assert_eq!(host, "127.0.0.1");
    // Says it is rank 0 and prints the first line it is answered, if any.
    let claim = format!(
        "exec 5<>/dev/tcp/{host}/{number}; printf 'cmd=initack pmiid=0\\n' >&5; \
         read -t 10 -r line <&5; echo \"answer: $line\""
    );
    let run = |user: &TestUser| {
        let output = command_as(user, Path::new("/bin/bash"), &["-c", &claim])
            .output()
            .expect("bash");
        stdout(&output).trim().to_string()
    };
    assert_eq!(
        run(&users.b),
        "answer:",
        "another user's connection is closed"
    );
    assert_eq!(run(&users.a), "answer: cmd=initack");
    job.signal(nix::sys::signal::Signal::SIGTERM);
    job.wait(Duration::from_secs(20));
    assert_no_process_left(&daemon);
}

/// Rank 0 spawns a copy of the program (the others wait in the
/// collective); errors are returned, not fatal, so that only scrun can
/// end the wait.
const SPAWN: &str = r#"
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    MPI_Comm parent, child;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent == MPI_COMM_NULL) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int err = MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0,
                                 MPI_COMM_WORLD, &child, MPI_ERRCODES_IGNORE);
        printf("spawn %s\n", err == MPI_SUCCESS ? "ok" : "failed");
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
"#;

#[test]
fn an_openmpi_spawn_ends_the_job_saying_scrun_does_not_serve_it() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let Some(spawn) = mpicc_openmpi(&daemon.sandbox.path, "spawn_ompi", SPAWN) else {
        return;
    };
    let mut job = daemon.spawn(&["-nodes=2", spawn.to_str().unwrap()]);
    let (status, errors) = job.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{errors}");
    assert!(
        errors.contains(
            "scrun: rank 0 called MPI_Comm_spawn, which scrun does not serve (start each program as a :: stage, or as a job of its own)"
        ),
        "{errors}"
    );
    assert_no_process_left(&daemon);
}

#[test]
fn openmpi_abort_ends_the_job_with_the_ranks_status_and_a_message() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let Some(hello) = mpicc_openmpi(&daemon.sandbox.path, "hello_ompi", HELLO) else {
        return;
    };
    let output = daemon.run(&["-nodes=2", hello.to_str().unwrap(), "1"]);
    assert_eq!(code(&output), Some(7), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("scrun: rank 1 called abort with exit code 7\n"),
        "{}",
        stderr(&output)
    );
    assert_no_process_left(&daemon);
}

/// An MPI program whose rank 1 dies (status 3) after `MPI_Init` while
/// rank 0 waits for it in a barrier, which would wait for ever.
const DIES: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 1)
        _exit(3);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    printf("rank %d finalized\n", rank);
    return 0;
}
"#;

#[test]
fn an_openmpi_rank_that_dies_while_others_wait_ends_the_job_naming_it() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let Some(dies) = mpicc_openmpi(&daemon.sandbox.path, "dies", DIES) else {
        return;
    };
    let mut job = daemon.spawn(&["-nodes=2", dies.to_str().unwrap()]);
    let (status, errors) = job.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "{errors}");
    assert!(
        errors.contains(
            "scrun: rank 1 ended its PMIx connection without finalize (did it exit or crash inside MPI?)\n"
        ),
        "{errors}"
    );
    assert_no_process_left(&daemon);
}

/// Each rank's CPUs after `MPI_Init`, as the kernel gives them.
const CPUS: &str = r#"
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, cpu, first = 1;
    cpu_set_t set;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sched_getaffinity(0, sizeof set, &set);
    printf("rank %d cpus", rank);
    for (cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &set)) {
            printf("%s%d", first ? " " : ",", cpu);
            first = 0;
        }
    printf("\n");
    MPI_Finalize();
    return 0;
}
"#;

#[test]
fn each_openmpi_rank_keeps_its_hosts_cpus() {
    let hosts = two_hosts();
    let daemon = Daemon::builder().hosts(&hosts).start();
    let Some(cpus) = mpicc_openmpi(&daemon.sandbox.path, "cpus", CPUS) else {
        return;
    };
    let expected: Vec<String> = hosts
        .lines()
        .enumerate()
        .map(|(rank, line)| {
            let cpu = line.split("cpus=").nth(1).unwrap_or("?").trim();
            format!("rank {rank} cpus {cpu}")
        })
        .collect();
    let output = daemon.run(&["-nodes=2", cpus.to_str().unwrap()]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(sorted_lines(&stdout(&output)), expected);
}

#[test]
fn debians_mpi4py_is_one_world_under_scrun() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let probe = Command::new("/usr/bin/python3")
        .args(["-c", "import mpi4py"])
        .output();
    if !probe.is_ok_and(|out| out.status.success()) {
        eprintln!("skipped: Debian's mpi4py is not installed (apt-get install python3-mpi4py)");
        return;
    }
    // One write per line, so that the ranks' lines do not mix.
    let script = "import sys\n\
        from mpi4py import MPI\n\
        c = MPI.COMM_WORLD\n\
        sys.stdout.write(f'rank {c.rank} of {c.size} sum {c.allreduce(c.rank + 1)}\\n')\n";
    let output = daemon.run(&["-nodes=2", "/usr/bin/python3", "-c", script]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(
        sorted_lines(&stdout(&output)),
        ["rank 0 of 2 sum 3", "rank 1 of 2 sum 3"]
    );
}

/// Rank 0 publishes a port under a service name; rank 1 finds it, and
/// no longer once rank 0 withdrew it.
const PUBLISH: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    int rank, rc;
    char port[MPI_MAX_PORT_NAME] = "port-of-rank-0", found[MPI_MAX_PORT_NAME] = "";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    if (rank == 0)
        printf("publish %s\n", MPI_Publish_name("svc", MPI_INFO_NULL, port) ? "failed" : "ok");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        rc = MPI_Lookup_name("svc", MPI_INFO_NULL, found);
        printf("lookup %s %s\n", rc ? "failed" : "ok", found);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("unpublish %s\n", MPI_Unpublish_name("svc", MPI_INFO_NULL, port) ? "failed" : "ok");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1)
        printf("again %s\n", MPI_Lookup_name("svc", MPI_INFO_NULL, found) ? "not found" : "found");
    MPI_Finalize();
    return 0;
}
"#;

#[test]
fn a_name_one_rank_publishes_another_finds_with_mpich_and_openmpi() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let expected = [
        "again not found",
        "lookup ok port-of-rank-0",
        "publish ok",
        "unpublish ok",
    ];
    let mut ran = 0;
    for program in [
        mpicc(&daemon.sandbox.path, "publish", PUBLISH),
        mpicc_openmpi(&daemon.sandbox.path, "publish_ompi", PUBLISH),
    ]
    .into_iter()
    .flatten()
    {
        let output = daemon.run(&["-nodes=2", program.to_str().unwrap()]);
        assert_eq!(code(&output), Some(0), "{}", stderr(&output));
        assert_eq!(sorted_lines(&stdout(&output)), expected);
        ran += 1;
    }
    if ran == 0 {
        return;
    }
    assert_no_process_left(&daemon);
}

/// Rank 0 accepts on a published port, rank 1 connects to it: OpenMPI
/// agrees on the new communicator through the server's names.
const CONNECT: &str = r#"
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, remote;
    char port[MPI_MAX_PORT_NAME];
    MPI_Comm inter;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        MPI_Open_port(MPI_INFO_NULL, port);
        MPI_Publish_name("meeting", MPI_INFO_NULL, port);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
    } else {
        MPI_Lookup_name("meeting", MPI_INFO_NULL, port);
        MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
    }
    MPI_Comm_remote_size(inter, &remote);
    printf("rank %d connected to %d\n", rank, remote);
    MPI_Comm_disconnect(&inter);
    if (rank == 0)
        MPI_Unpublish_name("meeting", MPI_INFO_NULL, port);
    MPI_Finalize();
    return 0;
}
"#;

#[test]
fn openmpi_ranks_connect_and_accept_through_a_published_port() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let Some(connect) = mpicc_openmpi(&daemon.sandbox.path, "connect", CONNECT) else {
        return;
    };
    let mut job = daemon.spawn(&["-nodes=2", connect.to_str().unwrap()]);
    let mut lines = job.wait_lines("", 2);
    let (status, errors) = job.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{errors}");
    lines.sort();
    assert_eq!(lines, ["rank 0 connected to 1", "rank 1 connected to 1"]);
}

#[test]
fn a_queued_pmix_job_survives_an_in_place_restart() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let Some(hello) = mpicc_openmpi(&daemon.sandbox.path, "hello_ompi", HELLO) else {
        return;
    };
    let mut first = daemon.spawn(&["-priority=0", "-nodes=2", &testprog(), "spin", "0"]);
    first.wait_pids(2);
    let mut second = daemon.spawn(&["-priority=0", "-nodes=2", hello.to_str().unwrap()]);
    assert!(
        wait_until(Duration::from_secs(20), || stdout(&daemon.console("job 2"))
            .contains("state: queued")),
        "{}",
        daemon.ok("jobs")
    );
    let output = daemon.console("restart");
    assert!(
        stdout(&output).contains("restarted in place"),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    daemon.ok("kill 1 KILL");
    first.wait(Duration::from_secs(10));
    let mut lines = second.wait_lines("", 2);
    let (status, errors) = second.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{errors}");
    lines.sort();
    assert_eq!(
        lines,
        ["rank 0 of 2 score 0 sum 3", "rank 1 of 2 score 1 sum 3"]
    );
}

#[test]
fn without_libpmix_pmix_says_what_is_missing_and_auto_falls_back() {
    if !is_root() {
        eprintln!("skipped: hiding libpmix needs root (a private mount)");
        return;
    }
    let Ok(library) = std::fs::canonicalize("/lib/x86_64-linux-gnu/libpmix.so.2") else {
        eprintln!("skipped: libpmix is not installed, so nothing to hide");
        return;
    };
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let Some(hello) = mpicc(&daemon.sandbox.path, "hello", HELLO) else {
        return;
    };
    // scrun in a mount namespace of its own where the library is empty.
    let hidden = |args: &[&str]| {
        let scrun = daemon.scrun(args);
        let mut words: Vec<String> = vec![scrun.get_program().to_string_lossy().into_owned()];
        words.extend(
            scrun
                .get_args()
                .map(|arg| arg.to_string_lossy().into_owned()),
        );
        let mut command = Command::new("unshare");
        command
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount --bind /dev/null {} && exec \"$@\"",
                library.display()
            ))
            .arg("sh")
            .args(&words);
        for (key, value) in scrun.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        command.output().expect("unshare")
    };
    let output = hidden(&["-nodes=2,mpi=pmix", "true"]);
    assert_eq!(code(&output), Some(69), "{}", stderr(&output));
    assert!(
        stderr(&output)
            .starts_with("scrun: -mpi=pmix: cannot load libpmix.so.2, the PMIx library ("),
        "{}",
        stderr(&output)
    );
    // `auto` serves PMI-1 and PMI-2 alone: MPICH is still one world.
    let output = hidden(&["-nodes=2", hello.to_str().unwrap()]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(
        sorted_lines(&stdout(&output)),
        ["rank 0 of 2 score 0 sum 3", "rank 1 of 2 score 1 sum 3"]
    );
}

#[test]
fn a_job_that_is_not_mpi_starts_no_pmix_server() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let mut job = daemon.spawn(&["-nodes=2", "sh", "-c", "echo pid $$; exec sleep 60"]);
    let pids = job.wait_pids(2);
    // The ranks are told where the server is, as any MPI needs ...
    let environ = environ_of(pids[0]);
    assert!(
        environ
            .split(|&b| b == 0)
            .any(|entry| entry.starts_with(b"PMIX_SERVER_URI41=")),
        "no PMIx server named to the ranks"
    );
    // ... but nothing of libpmix runs until one of them asks.
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", job.pid())).unwrap();
    assert!(!maps.contains("libpmix"), "scrun loaded libpmix for sleep");
    job.signal(nix::sys::signal::Signal::SIGTERM);
    job.wait(Duration::from_secs(20));
    assert_no_process_left(&daemon);
}

/// A PMIx client of the tests' own: says whether the server in its
/// environment serves it.
const PMIX_CLIENT: &str = r#"
#include <pmix.h>
#include <stdio.h>
int main(void) {
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    printf("%s\n", rc == PMIX_SUCCESS ? "served" : "refused");
    if (rc == PMIX_SUCCESS)
        PMIx_Finalize(NULL, 0);
    return 0;
}
"#;

#[test]
fn only_the_jobs_user_who_knows_its_namespace_reaches_its_pmix_server() {
    let Some(users) =
        test_users("only_the_jobs_user_who_knows_its_namespace_reaches_its_pmix_server")
    else {
        return;
    };
    let include = Path::new("/usr/lib/x86_64-linux-gnu/pmix2/include");
    if !include.join("pmix.h").exists() {
        eprintln!("skipped: no PMIx headers (apt-get install libpmix-dev)");
        return;
    }
    // The client where both test users can run it.
    let dir = std::env::temp_dir().join(format!("scored-pmix-client-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("client.c"), PMIX_CLIENT).unwrap();
    let client = dir.join("client");
    let built = Command::new("cc")
        .arg(format!("-I{}", include.display()))
        .arg("-o")
        .arg(&client)
        .arg(dir.join("client.c"))
        .arg("-lpmix")
        .output()
        .expect("cc");
    assert!(built.status.success(), "{}", stderr(&built));
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let mut job = daemon.spawn_as(
        &users.a,
        &["-nodes=2", "sh", "-c", "echo pid $$; exec sleep 60"],
    );
    let pids = job.wait_pids(2);
    let environ = environ_of(pids[0]);
    let pmix: Vec<(String, String)> = environ
        .split(|&b| b == 0)
        .filter_map(|entry| std::str::from_utf8(entry).ok())
        .filter(|entry| entry.starts_with("PMIX_"))
        .filter_map(|entry| entry.split_once('='))
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    let get = |key: &str| {
        pmix.iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.clone())
            .unwrap_or_else(|| panic!("no {key} in {pmix:?}"))
    };
    // The server's files: a directory of the job's user, mode 0700.
    let tmpdir = get("PMIX_SERVER_TMPDIR");
    let meta = std::fs::metadata(&tmpdir).unwrap();
    assert_eq!(
        (
            std::os::unix::fs::MetadataExt::mode(&meta) & 0o7777,
            std::os::unix::fs::MetadataExt::uid(&meta)
        ),
        (0o700, users.a.uid)
    );
    let namespace = get("PMIX_NAMESPACE");
    let run = |user: &TestUser, namespace: &str| {
        let mut command = command_as(user, &client, &[]);
        command.env_clear().env("PATH", "/usr/bin:/bin");
        for (key, value) in &pmix {
            command.env(key, value);
        }
        command.env("PMIX_NAMESPACE", namespace);
        let output = command.output().expect("client");
        stdout(&output).trim().to_string()
    };
    // Until a rank connects, no server runs: scrun has not loaded
    // libpmix, and another user's connection neither starts it nor is
    // served.
    let loaded = || {
        std::fs::read_to_string(format!("/proc/{}/maps", job.pid()))
            .unwrap()
            .contains("libpmix")
    };
    assert!(!loaded(), "libpmix loaded before any rank asked");
    assert_eq!(run(&users.b, &namespace), "refused");
    assert!(!loaded(), "another user's connection started libpmix");
    // The job's own user with its namespace is served (as rank 0 could
    // be); a guessed namespace, or another user, is not.
    assert_eq!(run(&users.a, &namespace), "served");
    assert!(loaded());
    let guessed = format!(
        "{}.{}.0",
        namespace.rsplitn(3, '.').nth(2).unwrap(),
        "0".repeat(32)
    );
    assert_eq!(run(&users.a, &guessed), "refused");
    assert_eq!(run(&users.b, &namespace), "refused");
    job.signal(nix::sys::signal::Signal::SIGTERM);
    job.wait(Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!Path::new(&tmpdir).exists(), "{tmpdir} left behind");
}
