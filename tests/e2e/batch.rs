//! Jobs that need no terminal: `scrun -batch` returns at once with the
//! job's id, the job runs with no client and writes its output files as
//! its user; names, dependencies (`-after=`, `-afterany=`), arrays with a
//! throttle, and all of it across `restart`. The tests that need a plain
//! user need root (to create one); elsewhere they print why they skip.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use scored_tests::*;

/// A directory of the sandbox that `user` owns, for its job's files.
fn user_dir(daemon: &Daemon, user: &TestUser) -> PathBuf {
    let dir = daemon.sandbox.path.join(format!("home-{}", user.name));
    std::fs::create_dir_all(&dir).expect("make the user's directory");
    nix::unistd::chown(
        &dir,
        Some(nix::unistd::Uid::from_raw(user.uid)),
        Some(nix::unistd::Gid::from_raw(user.gid)),
    )
    .expect("give the directory to the user");
    dir
}

/// `scrun ARGS` as `user` in `dir`, to its end.
fn run_as(daemon: &Daemon, user: &TestUser, dir: &Path, args: &[&str]) -> Output {
    daemon
        .scrun_as(user, args)
        .current_dir(dir)
        .output()
        .expect("run scrun as the user")
}

/// The id `scrun -batch` printed: its whole stdout.
fn printed_id(output: &Output) -> u64 {
    assert_eq!(
        code(output),
        Some(0),
        "scrun -batch failed: {}",
        stderr(output)
    );
    let text = stdout(output);
    assert!(
        text.ends_with('\n') && text.lines().count() == 1,
        "scrun -batch must print the id alone: {text:?}"
    );
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not an id: {text:?}"))
}

/// Submits `args` with `-batch` as root in the sandbox; the job's id.
fn submit(daemon: &Daemon, args: &[&str]) -> u64 {
    let mut all = vec!["-batch"];
    all.extend_from_slice(args);
    printed_id(&daemon.run(&all))
}

/// A field of `job ID` as text ("" while unknown).
fn field(daemon: &Daemon, job: u64, key: &str) -> String {
    match &daemon.job_field(job, key) {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Waits until job `job` has ended (its state is done or killed).
fn wait_ended(daemon: &Daemon, job: u64) {
    let ended = wait_until(Duration::from_secs(60), || {
        matches!(field(daemon, job, "state").as_str(), "done" | "killed")
    });
    assert!(
        ended,
        "job {job} did not end: {}",
        daemon.ok(&format!("job {job}"))
    );
}

/// Reads a file that a job writes, once it is there and complete
/// (`lines` lines).
fn read_lines(path: &Path, lines: usize) -> Vec<String> {
    let mut text = String::new();
    let complete = wait_until(Duration::from_secs(30), || {
        text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines().count() >= lines
    });
    assert!(complete, "{} has {text:?}", path.display());
    text.lines().map(str::to_string).collect()
}

#[test]
fn a_batch_job_returns_at_once_and_writes_its_file_as_its_user() {
    let Some(users) = test_users("a_batch_job_returns_at_once_and_writes_its_file_as_its_user")
    else {
        return;
    };
    let daemon = Daemon::start();
    let dir = user_dir(&daemon, &users.a);
    let output = run_as(
        &daemon,
        &users.a,
        &dir,
        &[
            "-batch",
            "sh",
            "-c",
            "echo started; readlink /proc/self/fd/0; id -u; echo to-stderr >&2; \
             while [ ! -e go ]; do sleep 0.05; done; echo done",
        ],
    );
    let id = printed_id(&output);
    // scrun is gone; the job is not: it waits for its go.
    assert_eq!(field(&daemon, id, "state"), "running");
    assert_eq!(field(&daemon, id, "batch"), "true");
    let file = dir.join(format!("scored-{id}.out"));
    let first = read_lines(&file, 4);
    assert_eq!(first[0], "started");
    assert_eq!(first[1], "/dev/null", "a batch job's stdin");
    assert_eq!(first[2], users.a.uid.to_string());
    assert_eq!(first[3], "to-stderr", "stderr goes to stdout's file");
    std::fs::write(dir.join("go"), "").expect("let the job end");
    wait_ended(&daemon, id);
    let meta = std::fs::metadata(&file).expect("the job's file");
    assert_eq!(
        (meta.uid(), meta.gid()),
        (users.a.uid, users.a.gid),
        "the file belongs to the user, not to root"
    );
    assert_eq!(read_lines(&file, 5)[4], "done");
    assert_eq!(field(&daemon, id, "exit"), "0");
    assert_eq!(
        field(&daemon, id, "output"),
        format!("scored-{id}.out"),
        "job ID names the file"
    );
}

#[test]
fn each_rank_gets_a_file_of_its_own_with_r() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let id = submit(
        &daemon,
        &[
            "-nodes=2,output=rank.%j.%r,error=err.%x",
            "-name=ranks",
            "sh",
            "-c",
            "echo rank $SCORE_RANK of job $SCORE_JOBID; echo oops $SCORE_RANK >&2",
        ],
    );
    wait_ended(&daemon, id);
    for rank in 0..2 {
        let lines = read_lines(&daemon.sandbox.path.join(format!("rank.{id}.{rank}")), 1);
        assert_eq!(lines, [format!("rank {rank} of job {id}")]);
    }
    // Both ranks' stderr in the one error file, neither lost.
    let mut errors = read_lines(&daemon.sandbox.path.join("err.ranks"), 2);
    errors.sort();
    assert_eq!(errors, ["oops 0", "oops 1"]);
    assert_eq!(field(&daemon, id, "output"), format!("rank.{id}.%r"));
}

#[test]
fn an_interactive_job_writes_to_its_file_too() {
    let daemon = Daemon::start();
    let output = daemon.run(&[
        "-output=out.%j",
        "sh",
        "-c",
        "echo to-file; echo err-too >&2",
    ]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "", "the output went to the file");
    assert_eq!(
        read_lines(&daemon.sandbox.path.join("out.1"), 2),
        ["to-file", "err-too"]
    );
    // -error= alone: stdout stays the terminal's.
    let output = daemon.run(&["-error=err.%j", "sh", "-c", "echo shown; echo hidden >&2"]);
    assert_eq!(stdout(&output), "shown\n");
    assert_eq!(
        read_lines(&daemon.sandbox.path.join("err.2"), 1),
        ["hidden"]
    );
}

#[test]
fn a_fifo_nobody_reads_ends_the_job_naming_it_and_one_read_is_written() {
    let daemon = Daemon::start();
    let fifo = daemon.sandbox.path.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .expect("make a fifo");
    // Nobody reads it: the rank's open is refused at once (a shell's
    // `> fifo` would wait for a reader forever), and the job ends naming it.
    let id = submit(&daemon, &["-output=fifo", "echo", "lost"]);
    wait_ended(&daemon, id);
    let reason = field(&daemon, id, "reason");
    assert!(
        reason.contains("cannot open the output file fifo")
            && reason.contains("No such device or address"),
        "{reason}"
    );
    // With a reader, the job writes into it, as through a shell's `> fifo`.
    let reader = std::process::Command::new("cat")
        .arg(&fifo)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start a reader");
    // A reader counts from the moment it sleeps in its open, waiting for
    // a writer.
    let pid = reader.id();
    let waiting = wait_until(Duration::from_secs(10), || {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        comm == "cat\n"
            && stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.starts_with(" S"))
    });
    assert!(waiting, "the reader did not wait in its open");
    let id = submit(&daemon, &["-output=fifo", "echo", "through-the-fifo"]);
    wait_ended(&daemon, id);
    let read = reader.wait_with_output().expect("the reader's output");
    assert_eq!(String::from_utf8_lossy(&read.stdout), "through-the-fifo\n");
    assert_eq!(field(&daemon, id, "exit"), "0");
}

#[test]
fn a_path_the_user_may_not_create_is_refused_and_nothing_is_created() {
    let Some(users) =
        test_users("a_path_the_user_may_not_create_is_refused_and_nothing_is_created")
    else {
        return;
    };
    let daemon = Daemon::start();
    let dir = user_dir(&daemon, &users.a);
    // Root's directory (the sandbox, 0755): refused at submission.
    let forbidden = daemon.sandbox.path.join("root-only.%j");
    let forbidden_text = forbidden.display().to_string();
    let output = run_as(
        &daemon,
        &users.a,
        &dir,
        &["-batch", &format!("-output={forbidden_text}"), "true"],
    );
    assert_eq!(code(&output), Some(64), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("option 'output'") && message.contains("may not create files in"),
        "{message}"
    );
    assert!(
        message.contains(&daemon.sandbox.path.display().to_string()),
        "{message}"
    );
    // Nothing was submitted: the next job is job 1.
    assert!(
        daemon.ok("jobs all").lines().count() <= 1,
        "{}",
        daemon.ok("jobs all")
    );
    let created: Vec<_> = std::fs::read_dir(&daemon.sandbox.path)
        .expect("list the sandbox")
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("root-only"))
        .collect();
    assert!(created.is_empty(), "{created:?}");
    // A symbolic link of the user's own to where only root may write
    // passes scrun's check (its target does not exist yet), and the rank,
    // which opens it as the user, is refused: the job ends naming the path,
    // and root's file is never made.
    let target = daemon.sandbox.path.join("made-by-root");
    std::os::unix::fs::symlink(&target, dir.join("link")).expect("plant a link");
    let output = run_as(&daemon, &users.a, &dir, &["-batch,output=link", "true"]);
    let id = printed_id(&output);
    wait_ended(&daemon, id);
    let reason = field(&daemon, id, "reason");
    assert!(
        reason.contains("cannot open the output file link") && reason.contains("ermission denied"),
        "{reason}"
    );
    assert!(!target.exists(), "root made the file a user named");
    // A file the user may not write is refused at submission.
    std::fs::write(&target, "root's\n").expect("root's file");
    let output = run_as(
        &daemon,
        &users.a,
        &dir,
        &["-batch", &format!("-output={}", target.display()), "true"],
    );
    assert_eq!(code(&output), Some(64), "{}", stderr(&output));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "root's\n");
}

/// A link of the user's own to a file in a directory closed to the user
/// (root's, mode 0700) names a file the user may not write: scrun, which
/// cannot even look at it as the user, refuses it at submission, naming
/// the option and the path, for `-output=` and `-error=` alike, and
/// nothing is submitted or written.
#[test]
fn a_link_into_a_directory_closed_to_the_user_is_refused_at_submission() {
    let Some(users) =
        test_users("a_link_into_a_directory_closed_to_the_user_is_refused_at_submission")
    else {
        return;
    };
    let daemon = Daemon::start();
    let dir = user_dir(&daemon, &users.a);
    let closed = daemon.sandbox.path.join("root-only");
    std::fs::create_dir(&closed).expect("root's directory");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700))
        .expect("close root's directory");
    let target = closed.join("secret");
    std::fs::write(&target, "root's\n").expect("root's file");
    plant_link(&users.a, &target, &dir.join("out.link"));
    for options in ["-output=out.link", "-output=mine.out,error=out.link"] {
        let output = run_as(&daemon, &users.a, &dir, &["-batch", options, "echo", "x"]);
        assert_eq!(code(&output), Some(64), "{options}: {}", stderr(&output));
        let option = if options.contains("error") {
            "error"
        } else {
            "output"
        };
        let message = stderr(&output);
        assert!(
            message.contains(&format!("option '{option}'"))
                && message.contains("out.link")
                && message.contains("ermission denied"),
            "{options}: {message}"
        );
        assert_eq!(stdout(&output), "", "{options}");
    }
    assert!(
        daemon.ok("jobs all").lines().count() <= 1,
        "{}",
        daemon.ok("jobs all")
    );
    assert!(!dir.join("mine.out").exists(), "a file was made");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "root's\n");
}

/// A batch job without `-output=` writes to `scored-%j.out` in its
/// working directory, so a plain user's batch job from a directory the
/// user may not write in (root's) is refused at submission, as a given
/// pattern there is: nothing is submitted and nothing is created.
#[test]
fn the_default_output_file_is_checked_as_a_given_one() {
    let Some(users) = test_users("the_default_output_file_is_checked_as_a_given_one") else {
        return;
    };
    let daemon = Daemon::start();
    let output = run_as(&daemon, &users.a, &daemon.sandbox.path, &["-batch", "true"]);
    assert_eq!(code(&output), Some(64), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("scored-%j.out") && message.contains("may not create files in"),
        "{message}"
    );
    assert_eq!(stdout(&output), "");
    assert!(
        daemon.ok("jobs all").lines().count() <= 1,
        "{}",
        daemon.ok("jobs all")
    );
    let created: Vec<_> = std::fs::read_dir(&daemon.sandbox.path)
        .expect("list the sandbox")
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("scored-"))
        .collect();
    assert!(created.is_empty(), "{created:?}");
    // From the user's own directory the same submission runs, and its
    // default file is the user's.
    let dir = user_dir(&daemon, &users.a);
    let output = run_as(&daemon, &users.a, &dir, &["-batch", "sh", "-c", "echo ran"]);
    let id = printed_id(&output);
    let path = dir.join(format!("scored-{id}.out"));
    assert_eq!(read_lines(&path, 1), ["ran"]);
    assert_eq!(
        std::fs::metadata(&path).expect("the file").uid(),
        users.a.uid
    );
}

#[test]
fn a_chain_after_a_success_runs_in_order_and_after_a_failure_never() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let stamp = "date +%s.%N";
    let first = submit(
        &daemon,
        &["-output=first", "sh", "-c", &format!("sleep 0.5; {stamp}")],
    );
    let second = submit(
        &daemon,
        &[
            &format!("-after={first}"),
            "-output=second",
            "sh",
            "-c",
            stamp,
        ],
    );
    assert_eq!(field(&daemon, second, "state"), "waiting");
    assert!(
        field(&daemon, second, "reason").contains(&format!("after={first}")),
        "{}",
        daemon.ok(&format!("job {second}"))
    );
    assert!(daemon
        .ok("jobs")
        .contains(&format!("waits for after={first}")));
    wait_ended(&daemon, second);
    let ended: f64 = read_lines(&daemon.sandbox.path.join("first"), 1)[0]
        .parse()
        .unwrap();
    let started: f64 = read_lines(&daemon.sandbox.path.join("second"), 1)[0]
        .parse()
        .unwrap();
    assert!(
        started >= ended,
        "the dependant ran before its dependency ended"
    );
    // A failure: its dependant never runs, nor the one after that.
    let failing = submit(&daemon, &["sh", "-c", "sleep 0.3; exit 3"]);
    let never = submit(
        &daemon,
        &[&format!("-after={failing}"), "-output=never", "true"],
    );
    let nor = submit(&daemon, &[&format!("-after={never}"), "true"]);
    wait_ended(&daemon, nor);
    assert_eq!(field(&daemon, never, "state"), "killed");
    assert_eq!(field(&daemon, never, "exit"), "75");
    let reason = field(&daemon, never, "reason");
    assert!(
        reason.contains(&format!("job {failing} ended with status 3")),
        "{reason}"
    );
    assert!(field(&daemon, nor, "reason").contains(&format!("job {never}")));
    assert!(!daemon.sandbox.path.join("never").exists());
}

#[test]
fn afterany_runs_however_the_job_ended() {
    let daemon = Daemon::start();
    let failing = submit(&daemon, &["sh", "-c", "sleep 0.2; exit 1"]);
    let any = submit(
        &daemon,
        &[
            &format!("-afterany={failing}"),
            "-output=any",
            "echo",
            "ran",
        ],
    );
    wait_ended(&daemon, any);
    assert_eq!(read_lines(&daemon.sandbox.path.join("any"), 1), ["ran"]);
    assert_eq!(field(&daemon, any, "exit"), "0");
}

#[test]
fn bad_batch_options_and_unknown_dependencies_change_nothing() {
    let daemon = Daemon::start();
    for (args, expected, status) in [
        (vec!["-batch,array=5-1", "true"], "option 'array'", 64),
        (vec!["-batch,after=abc", "true"], "option 'after'", 64),
        (vec!["-batch,output=%q", "true"], "option 'output'", 64),
        (vec!["-batch,output=no/such/dir/x", "true"], "directory", 64),
        (vec!["-batch,after=999", "true"], "there is no job 999", 75),
        (vec!["-batch,array=0-99999", "true"], "at most 10000", 64),
        (vec!["-batch,array=1,3,5", "true"], "option 'array'", 64),
        (vec!["-batch,array=3:2", "true"], "option 'array'", 64),
        (vec!["-batch,pty", "true"], "option 'pty'", 64),
    ] {
        let output = daemon.run(&args);
        assert_eq!(code(&output), Some(status), "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(expected),
            "{args:?}: {}",
            stderr(&output)
        );
        assert_eq!(stdout(&output), "", "{args:?}");
    }
    // Nothing was taken: the first job that is gets id 1.
    assert_eq!(submit(&daemon, &["true"]), 1);
}

#[test]
fn an_array_runs_at_most_max_at_once_by_its_own_timestamps() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let first = submit(
        &daemon,
        &[
            "-array=1-6%2,output=el.%a",
            "sh",
            "-c",
            "echo $SCORE_ARRAY_INDEX $SCORE_ARRAY_JOBID $SCORE_JOBID; date +%s.%N; sleep 0.4; date +%s.%N",
        ],
    );
    let after_all = submit(
        &daemon,
        &[&format!("-after={first}"), "-output=all", "date", "+%s.%N"],
    );
    wait_ended(&daemon, after_all);
    let mut spans = Vec::new();
    let mut ids = Vec::new();
    for index in 1..=6 {
        let lines = read_lines(&daemon.sandbox.path.join(format!("el.{index}")), 3);
        let words: Vec<&str> = lines[0].split(' ').collect();
        assert_eq!(words[0], index.to_string());
        assert_eq!(words[1], first.to_string(), "SCORE_ARRAY_JOBID");
        ids.push(words[2].parse::<u64>().unwrap());
        spans.push((
            lines[1].parse::<f64>().unwrap(),
            lines[2].parse::<f64>().unwrap(),
        ));
    }
    assert_eq!(
        ids,
        (first..first + 6).collect::<Vec<_>>(),
        "one id per element"
    );
    for (start, _) in &spans {
        let at_once = spans
            .iter()
            .filter(|(from, to)| from <= start && start < to)
            .count();
        assert!(at_once <= 2, "{at_once} elements ran at once: {spans:?}");
    }
    let last_end = spans.iter().map(|(_, end)| *end).fold(0.0, f64::max);
    let all: f64 = read_lines(&daemon.sandbox.path.join("all"), 1)[0]
        .parse()
        .unwrap();
    assert!(
        all >= last_end,
        "-after= on the array's id ran before all of it ended"
    );
}

/// `-array=N`, as Slurm's `--array=N`: one element, index N, whose id is
/// the array's; a job after the array's id waits for it.
#[test]
fn a_single_index_is_an_array_of_one() {
    let daemon = Daemon::start();
    let first = submit(
        &daemon,
        &[
            "-array=3%1,output=one.%a",
            "sh",
            "-c",
            "echo $SCORE_ARRAY_INDEX $SCORE_ARRAY_JOBID $SCORE_JOBID",
        ],
    );
    let after = submit(
        &daemon,
        &[&format!("-after={first}"), "-output=after", "echo", "after"],
    );
    wait_ended(&daemon, after);
    assert_eq!(
        read_lines(&daemon.sandbox.path.join("one.3"), 1),
        [format!("3 {first} {first}")]
    );
    assert_eq!(read_lines(&daemon.sandbox.path.join("after"), 1), ["after"]);
    assert_eq!(after, first + 1, "the array took one id");
    let outputs: Vec<_> = std::fs::read_dir(&daemon.sandbox.path)
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("one."))
        .collect();
    assert_eq!(outputs, ["one.3"]);
    assert_eq!(field(&daemon, first, "exit"), "0");
}

#[test]
fn names_show_in_jobs_and_job_id() {
    let daemon = Daemon::start();
    let named = submit(&daemon, &["-name=sweep-7", "sleep", "5"]);
    let unnamed = submit(&daemon, &["/bin/sleep", "5"]);
    assert_eq!(field(&daemon, named, "name"), "sweep-7");
    assert_eq!(field(&daemon, unnamed, "name"), "sleep");
    let jobs = daemon.ok("jobs");
    assert!(jobs.contains("sweep-7"), "{jobs}");
    daemon.ok(&format!("kill {named}"));
    daemon.ok(&format!("kill {unnamed}"));
}

#[test]
fn batch_jobs_dependants_and_arrays_survive_a_restart() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let long = submit(
        &daemon,
        &[
            "-output=long",
            "sh",
            "-c",
            "while [ ! -e go ]; do sleep 0.05; done; echo long",
        ],
    );
    let after = submit(
        &daemon,
        &[&format!("-after={long}"), "-output=after", "echo", "after"],
    );
    let array = submit(
        &daemon,
        &[
            "-array=1-3%1,output=a.%a",
            "sh",
            "-c",
            "echo $SCORE_ARRAY_INDEX",
        ],
    );
    assert!(wait_until(Duration::from_secs(30), || field(
        &daemon, long, "state"
    ) == "running"));
    let output = daemon.console("restart");
    assert_eq!(
        code(&output),
        Some(0),
        "{}{}",
        stdout(&output),
        daemon.log()
    );
    assert_eq!(field(&daemon, after, "state"), "waiting");
    assert_eq!(field(&daemon, long, "batch"), "true");
    std::fs::write(daemon.sandbox.path.join("go"), "").unwrap();
    wait_ended(&daemon, after);
    wait_ended(&daemon, array + 2);
    assert_eq!(read_lines(&daemon.sandbox.path.join("long"), 1), ["long"]);
    assert_eq!(read_lines(&daemon.sandbox.path.join("after"), 1), ["after"]);
    for index in 1..=3 {
        assert_eq!(
            read_lines(&daemon.sandbox.path.join(format!("a.{index}")), 1),
            [index.to_string()]
        );
    }
    let history = daemon.json("history");
    let records = history.as_array().expect("history is a list");
    let record = records
        .iter()
        .find(|record| record["id"] == long)
        .expect("the batch job in history");
    assert_eq!(record["output"], "long");
    assert_eq!(record["batch"], true);
}

#[test]
fn batch_jobs_dependants_and_arrays_survive_a_kill_of_scored() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    // One that runs when scored is killed: it runs on (its keeper holds
    // it), ends with its status, and what waits for it runs after it.
    let running = submit(
        &daemon,
        &[
            "-output=running",
            "sh",
            "-c",
            "echo before; sleep 3; echo after; exit 3",
        ],
    );
    assert!(wait_until(Duration::from_secs(30), || field(
        &daemon, running, "state"
    ) == "running"));
    assert_eq!(
        read_lines(&daemon.sandbox.path.join("running"), 1),
        ["before"]
    );
    let rank = daemon.wait_job_pids(running, 1)[0];
    let on_running = submit(
        &daemon,
        &[
            &format!("-afterany={running}"),
            "-output=on_running",
            "echo",
            "next",
        ],
    );
    // The others wait: admitted and queued, waiting for a job, or for
    // their array's turn.
    daemon.ok("queue 1 deactivate");
    let first = submit(&daemon, &["-output=first", "echo", "first"]);
    let after = submit(
        &daemon,
        &[&format!("-after={first}"), "-output=after", "echo", "after"],
    );
    let array = submit(
        &daemon,
        &[
            "-array=1-3%1,output=a.%a",
            "sh",
            "-c",
            "echo $SCORE_ARRAY_INDEX",
        ],
    );
    daemon.kill_hard();
    assert!(
        std::path::Path::new(&format!("/proc/{rank}")).exists(),
        "the running job died with scored"
    );
    daemon.start_again();
    assert_eq!(field(&daemon, first, "state"), "queued", "{}", daemon.log());
    assert_eq!(field(&daemon, first, "batch"), "true");
    assert_eq!(field(&daemon, after, "state"), "waiting");
    assert_eq!(field(&daemon, array, "state"), "queued");
    assert!(
        field(&daemon, array + 1, "reason").contains("%1"),
        "{}",
        daemon.ok(&format!("job {}", array + 1))
    );
    daemon.ok("queue 1 activate");
    wait_ended(&daemon, running);
    assert_eq!(field(&daemon, running, "state"), "done");
    assert_eq!(field(&daemon, running, "exit"), "3");
    assert_eq!(
        read_lines(&daemon.sandbox.path.join("running"), 2),
        ["before", "after"]
    );
    wait_ended(&daemon, on_running);
    assert_eq!(
        read_lines(&daemon.sandbox.path.join("on_running"), 1),
        ["next"]
    );
    wait_ended(&daemon, after);
    wait_ended(&daemon, array + 2);
    assert_eq!(read_lines(&daemon.sandbox.path.join("first"), 1), ["first"]);
    assert_eq!(read_lines(&daemon.sandbox.path.join("after"), 1), ["after"]);
    for index in 1..=3 {
        assert_eq!(
            read_lines(&daemon.sandbox.path.join(format!("a.{index}")), 1),
            [index.to_string()]
        );
    }
    // History has each of them once, with its true end and its file.
    let history = daemon.json("history");
    let records = history.as_array().expect("history is a list");
    for job in [running, on_running, first, after, array, array + 2] {
        let matching: Vec<_> = records
            .iter()
            .filter(|record| record["id"] == job)
            .collect();
        assert_eq!(matching.len(), 1, "job {job}: {matching:?}");
    }
    let record = records
        .iter()
        .find(|record| record["id"] == after)
        .expect("the dependant in history");
    assert_eq!(record["state"], "done", "{record}");
    assert_eq!(record["exit"], 0, "{record}");
    assert_eq!(record["output"], "after");
    // The job that ran across the crash: its true end and wall time.
    let record = records
        .iter()
        .find(|record| record["id"] == running)
        .expect("the running job in history");
    assert_eq!(record["state"], "done", "{record}");
    assert_eq!(record["exit"], 3, "{record}");
    assert!(record["wall"].as_f64().unwrap_or(0.0) >= 3.0, "{record}");
    assert!(
        !record["reason"].as_str().unwrap_or("").contains("lost"),
        "{record}"
    );
}

/// Whether job `job` has not ended (running, or time-sharing its hosts).
fn unfinished(daemon: &Daemon, job: u64) -> bool {
    matches!(
        field(daemon, job, "state").as_str(),
        "queued" | "running" | "stopped"
    )
}

/// What a command said, on stdout and stderr.
fn said(output: &Output) -> String {
    format!("{}{}", stdout(output), stderr(output))
}

/// Lines of `jobs` (without its header) that mention `word`.
fn listed(daemon: &Daemon, line: &str, word: &str) -> Vec<String> {
    daemon
        .ok(line)
        .lines()
        .skip(1)
        .filter(|row| row.split_whitespace().any(|cell| cell == word))
        .map(str::to_string)
        .collect()
}

#[test]
fn jobs_lists_by_user_name_and_state_and_kill_ends_by_name_only_ones_own() {
    let Some(users) =
        test_users("jobs_lists_by_user_name_and_state_and_kill_ends_by_name_only_ones_own")
    else {
        return;
    };
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let dir_a = user_dir(&daemon, &users.a);
    let dir_b = user_dir(&daemon, &users.b);
    let sweep = printed_id(&run_as(
        &daemon,
        &users.a,
        &dir_a,
        &["-batch,name=sweep,array=1-3%1", "sleep", "60"],
    ));
    let other = printed_id(&run_as(
        &daemon,
        &users.a,
        &dir_a,
        &["-batch", "sleep", "60"],
    ));
    let theirs = printed_id(&run_as(
        &daemon,
        &users.b,
        &dir_b,
        &["-batch,name=sweep", "sleep", "60"],
    ));
    let ids = |rows: Vec<String>| -> Vec<u64> {
        let mut ids: Vec<u64> = rows
            .iter()
            .filter_map(|row| row.split_whitespace().next()?.parse().ok())
            .collect();
        ids.sort_unstable();
        ids
    };
    assert_eq!(
        ids(listed(
            &daemon,
            &format!("jobs --user {}", users.a.name),
            &users.a.name
        )),
        [sweep, sweep + 1, sweep + 2, other]
    );
    assert_eq!(
        ids(listed(&daemon, "jobs --name sweep", "sweep")),
        [sweep, sweep + 1, sweep + 2, theirs]
    );
    let waiting = listed(&daemon, "jobs --name sweep --state waiting", "waiting");
    assert_eq!(ids(waiting.clone()), [sweep + 1, sweep + 2]);
    assert!(
        waiting[0].contains("waits for its array: 1 of %1 running"),
        "{waiting:?}"
    );
    let unknown = daemon.console("jobs --user nobody-at-all");
    assert_eq!(code(&unknown), Some(1), "{}", said(&unknown));
    // Another user's jobs are not a plain user's to kill: nothing is done.
    let refused = daemon.console_as(&users.a, &format!("kill --user {}", users.b.name));
    assert_eq!(code(&refused), Some(1), "{}", said(&refused));
    assert!(
        said(&refused).contains("permission denied"),
        "{}",
        said(&refused)
    );
    assert!(unfinished(&daemon, theirs));
    let refused = daemon.console_as(&users.a, &format!("kill {other} {theirs}"));
    assert_eq!(code(&refused), Some(1));
    assert!(unfinished(&daemon, other));
    // By name, a user's own: the running element and the waiting ones.
    let output = daemon.console_as(&users.a, "kill --name sweep");
    assert_eq!(code(&output), Some(0), "{}", stdout(&output));
    let reply = stdout(&output);
    assert!(
        reply.contains(&format!("job {sweep}: killing (SIGTERM")),
        "{reply}"
    );
    assert!(
        reply.contains(&format!("job {}: killed before it started", sweep + 2)),
        "{reply}"
    );
    assert_eq!(reply.lines().count(), 3, "{reply}");
    wait_ended(&daemon, sweep);
    wait_ended(&daemon, sweep + 2);
    assert!(unfinished(&daemon, theirs));
    assert!(unfinished(&daemon, other));
    // Root may end another user's jobs.
    daemon.ok(&format!("kill --user {}", users.b.name));
    wait_ended(&daemon, theirs);
    daemon.ok(&format!("kill {other}"));
}

#[test]
fn a_batch_job_whose_program_cannot_run_says_why_in_its_output_file() {
    let daemon = Daemon::start();
    std::fs::write(daemon.sandbox.path.join("not-executable"), "echo never\n")
        .expect("write a script");
    for (program, status, why) in [
        ("no-such-program-here", "127", "No such file or directory"),
        ("./not-executable", "126", "Permission denied"),
    ] {
        let job = submit(&daemon, &[program, "arg"]);
        wait_ended(&daemon, job);
        assert_eq!(field(&daemon, job, "exit"), status, "{program}");
        let file = daemon.sandbox.path.join(format!("scored-{job}.out"));
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert_eq!(
            text,
            format!("scored: cannot run '{program}': {why}\n"),
            "{program}"
        );
    }
    // An interactive job without files says it once, on scrun's stderr.
    let output = daemon.run(&["no-such-program-here"]);
    assert_eq!(code(&output), Some(127));
    assert_eq!(stderr(&output).lines().count(), 1, "{}", stderr(&output));
}

#[test]
fn a_batch_job_with_stat_or_pty_is_refused_naming_both_and_nothing_is_made() {
    let daemon = Daemon::start();
    for (args, option) in [
        (vec!["-batch", "-stat", "echo", "x"], "stat"),
        (vec!["-stat,batch", "echo", "x"], "stat"),
        (vec!["-batch,pty", "echo", "x"], "pty"),
    ] {
        let output = daemon.run(&args);
        assert_eq!(code(&output), Some(64), "{args:?}: {}", said(&output));
        let text = stderr(&output);
        assert!(
            text.contains(&format!("option '{option}'")) && text.contains("-batch"),
            "{args:?}: {text}"
        );
        assert_eq!(stdout(&output), "", "{args:?}");
    }
    // Nothing was submitted, and no output file was made.
    assert_eq!(
        daemon.ok("jobs all").lines().count(),
        1,
        "{}",
        daemon.ok("jobs all")
    );
    let files: Vec<_> = std::fs::read_dir(&daemon.sandbox.path)
        .expect("the sandbox")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("scored-"))
        .collect();
    assert!(files.is_empty(), "{files:?}");
}

#[test]
fn a_user_filter_naming_no_user_is_an_error_that_changes_nothing() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let job = submit(&daemon, &["sleep", "60"]);
    let running = wait_until(Duration::from_secs(30), || {
        field(&daemon, job, "state") == "running"
    });
    assert!(running, "{}", daemon.ok("jobs"));
    for line in [
        "jobs --user no-such-user-here",
        "jobs all --user no-such-user-here",
        "jobs --user no-such-user-here --name sleep",
        "kill --user no-such-user-here",
        "kill --user no-such-user-here --name sleep",
        "kill -s USR1 --user no-such-user-here",
    ] {
        let output = daemon.console(line);
        assert_eq!(code(&output), Some(1), "{line}: {}", said(&output));
        assert!(
            said(&output).contains("no user named 'no-such-user-here'"),
            "{line}: {}",
            said(&output)
        );
    }
    assert_eq!(field(&daemon, job, "state"), "running");
    // A user that exists, by name or by uid, filters as before.
    assert_eq!(listed(&daemon, "jobs --user root", "sleep").len(), 1);
    assert_eq!(listed(&daemon, "jobs --user 0", "sleep").len(), 1);
    assert!(listed(&daemon, "jobs --user 4000000", "sleep").is_empty());
    daemon.ok(&format!("kill {job}"));
    wait_ended(&daemon, job);
}

#[test]
fn kill_of_two_ids_ends_both_and_a_realtime_signal_is_delivered() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let trap = "trap 'echo got-rt' RTMIN+2; trap 'echo got-usr1' USR1; \
                trap 'echo got-64' RTMAX; echo ready; while :; do sleep 0.05; done";
    let first = submit(&daemon, &["-output=first", "bash", "-c", trap]);
    let second = submit(&daemon, &["sleep", "60"]);
    read_lines(&daemon.sandbox.path.join("first"), 1);
    // A signal by name, with -s or after the id, really reaches the job.
    let reply = daemon.ok(&format!("kill -s RTMIN+2 {first}"));
    assert_eq!(reply, format!("job {first}: sent SIGRTMIN+2\n"));
    // Each reaches every process: the shell's trap runs (and its `sleep`
    // dies of it, which the shell may say).
    let file = daemon.sandbox.path.join("first");
    let trapped = |line: &str| {
        let mut lines = Vec::new();
        let seen = wait_until(Duration::from_secs(30), || {
            lines = std::fs::read_to_string(&file)
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect();
            lines.iter().any(|seen| seen == line)
        });
        assert!(seen, "{line} not in {lines:?}");
    };
    trapped("got-rt");
    let reply = daemon.ok(&format!("kill {first} USR1"));
    assert_eq!(reply, format!("job {first}: sent SIGUSR1\n"));
    trapped("got-usr1");
    // A signal's number goes with -s: signal 64, not job 64.
    let reply = daemon.ok(&format!("kill -s 64 {first}"));
    assert_eq!(reply, format!("job {first}: sent SIGRTMAX\n"));
    trapped("got-64");
    // Every number is a job id: both end.
    let reply = daemon.ok(&format!("kill {first} {second}"));
    assert_eq!(reply.lines().count(), 2, "{reply}");
    assert!(
        reply.contains(&format!("job {first}: killing (SIGTERM")),
        "{reply}"
    );
    assert!(
        reply.contains(&format!("job {second}: killing (SIGTERM")),
        "{reply}"
    );
    wait_ended(&daemon, first);
    wait_ended(&daemon, second);
    // A job that does not exist refuses the whole command.
    let third = submit(&daemon, &["sleep", "60"]);
    let output = daemon.console(&format!("kill {third} 999"));
    assert_eq!(code(&output), Some(1));
    assert!(said(&output).contains("no job 999"), "{}", said(&output));
    assert!(unfinished(&daemon, third));
    // A signal other than an end is not sent to a job without processes,
    // and the reply says so.
    let waiting = submit(&daemon, &[&format!("-after={third}"), "true"]);
    let output = daemon.console(&format!("kill -s USR1 {waiting}"));
    assert_eq!(code(&output), Some(1));
    assert!(
        said(&output).contains(&format!("job {waiting}: not sent SIGUSR1")),
        "{}",
        said(&output)
    );
    daemon.ok(&format!("kill {third}"));
}

#[test]
fn history_shows_the_name_and_the_command() {
    let daemon = Daemon::start();
    let id = submit(&daemon, &["-name=reporter", "echo", "history-me"]);
    wait_ended(&daemon, id);
    let history = daemon.ok("history");
    let header = history.lines().next().unwrap_or_default().to_string();
    assert!(
        header.contains("NAME") && header.contains("COMMAND"),
        "{header}"
    );
    let row = history
        .lines()
        .find(|line| line.split_whitespace().next() == Some(&id.to_string()))
        .unwrap_or_else(|| panic!("job {id} in history:\n{history}"));
    assert!(
        row.contains("reporter") && row.contains("echo history-me"),
        "{row}"
    );
}

#[test]
fn output_files_of_queued_and_running_jobs_are_kept_across_a_restart() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let path = |name: &str| daemon.sandbox.path.join(name);
    // A job of two `::` stages whose first stage writes before the restart
    // and whose second writes after it, into the same files: the second
    // stage appends to what the first wrote.
    let staged = submit(
        &daemon,
        &[
            "-output=staged.%j.out,error=staged.%j.err",
            "sh",
            "-c",
            "echo one; echo one-err >&2; while [ ! -e go ]; do sleep 0.05; done",
            "::",
            "sh",
            "-c",
            "echo two; echo two-err >&2",
        ],
    );
    let staged_out = path(&format!("staged.{staged}.out"));
    let staged_err = path(&format!("staged.{staged}.err"));
    assert_eq!(read_lines(&staged_out, 1), ["one"]);
    assert_eq!(read_lines(&staged_err, 1), ["one-err"]);
    // Jobs that wait in the queue through the restart, with their own
    // patterns for stdout and stderr: a batch job, an array element and an
    // interactive job.
    daemon.ok("queue 1 deactivate");
    let queued = submit(
        &daemon,
        &[
            "-output=q.%x.%j.out,error=q.%x.%j.err,name=late",
            "sh",
            "-c",
            "echo out-$SCORE_JOBID; echo err-$SCORE_JOBID >&2",
        ],
    );
    let array = submit(
        &daemon,
        &[
            "-array=1-2,output=arr.%a.out,error=arr.%a.err",
            "sh",
            "-c",
            "echo out-$SCORE_ARRAY_INDEX; echo err-$SCORE_ARRAY_INDEX >&2",
        ],
    );
    let mut interactive = daemon.spawn(&[
        "-output=inter.out,error=inter.err",
        "sh",
        "-c",
        "echo inter-out; echo inter-err >&2",
    ]);
    let counted = wait_until(Duration::from_secs(30), || {
        daemon.json("status")["jobs"]["queued"].as_u64() >= Some(3)
    });
    assert!(counted, "{}", daemon.ok("jobs"));
    let output = daemon.console("restart");
    assert_eq!(
        code(&output),
        Some(0),
        "{}{}",
        stdout(&output),
        daemon.log()
    );
    // The patterns came through the restart: `job ID` still shows them.
    assert_eq!(
        field(&daemon, queued, "output"),
        format!("q.late.{queued}.out")
    );
    assert_eq!(
        field(&daemon, queued, "error"),
        format!("q.late.{queued}.err")
    );
    assert_eq!(field(&daemon, queued, "state"), "queued");
    daemon.ok("queue 1 activate");
    std::fs::write(path("go"), "").unwrap();
    wait_ended(&daemon, staged);
    wait_ended(&daemon, queued);
    wait_ended(&daemon, array + 1);
    let (status, message) = interactive.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{message}");
    assert_eq!(read_lines(&staged_out, 2), ["one", "two"]);
    assert_eq!(read_lines(&staged_err, 2), ["one-err", "two-err"]);
    assert_eq!(
        read_lines(&path(&format!("q.late.{queued}.out")), 1),
        [format!("out-{queued}")]
    );
    assert_eq!(
        read_lines(&path(&format!("q.late.{queued}.err")), 1),
        [format!("err-{queued}")]
    );
    for index in 1..=2 {
        assert_eq!(
            read_lines(&path(&format!("arr.{index}.out")), 1),
            [format!("out-{index}")]
        );
        assert_eq!(
            read_lines(&path(&format!("arr.{index}.err")), 1),
            [format!("err-{index}")]
        );
    }
    assert_eq!(read_lines(&path("inter.out"), 1), ["inter-out"]);
    assert_eq!(read_lines(&path("inter.err"), 1), ["inter-err"]);
    // Nothing went to a default file.
    let strays: Vec<_> = std::fs::read_dir(&daemon.sandbox.path)
        .expect("list the sandbox")
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("scored-"))
        .collect();
    assert!(strays.is_empty(), "{strays:?}");
}

/// Makes `link` a symbolic link to `target` owned by `user`, as if the
/// user had made it.
fn plant_link(user: &TestUser, target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).expect("plant a link");
    nix::unistd::fchownat(
        nix::fcntl::AT_FDCWD,
        link,
        Some(nix::unistd::Uid::from_raw(user.uid)),
        Some(nix::unistd::Gid::from_raw(user.gid)),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .expect("give the link to the user");
}

#[test]
fn output_paths_swapped_after_submission_never_make_root_write_nor_block() {
    let Some(users) =
        test_users("output_paths_swapped_after_submission_never_make_root_write_nor_block")
    else {
        return;
    };
    let daemon = Daemon::start();
    let dir = user_dir(&daemon, &users.a);
    let other = user_dir(&daemon, &users.b);
    let give = |path: &Path, user: &TestUser| {
        nix::unistd::chown(
            path,
            Some(nix::unistd::Uid::from_raw(user.uid)),
            Some(nix::unistd::Gid::from_raw(user.gid)),
        )
        .expect("chown");
    };
    // What the links will point at: root's file, root's directory, and
    // another user's file.
    let root_file = daemon.sandbox.path.join("root-file");
    std::fs::write(&root_file, "root's\n").unwrap();
    let root_dir = daemon.sandbox.path.join("root-dir");
    std::fs::create_dir(&root_dir).unwrap();
    let other_file = other.join("b-file");
    std::fs::write(&other_file, "b's\n").unwrap();
    give(&other_file, &users.b);
    let sub = dir.join("sub");
    std::fs::create_dir(&sub).unwrap();
    give(&sub, &users.a);
    // Each path is one the user may create when the job is submitted; the
    // jobs wait in the queue while the user swaps them.
    daemon.ok("queue 1 deactivate");
    let submit_as = |options: &str| -> u64 {
        printed_id(&run_as(
            &daemon,
            &users.a,
            &dir,
            &["-batch", options, "sh", "-c", "echo written; echo err >&2"],
        ))
    };
    let file_swapped = submit_as("-output=out.file");
    let parent_swapped = submit_as("-output=sub/out");
    let other_swapped = submit_as("-output=mine.out,error=out.other");
    let fifo_swapped = submit_as("-output=out.fifo");
    // The swaps, as the user makes them.
    plant_link(&users.a, &root_file, &dir.join("out.file"));
    std::fs::rename(&sub, dir.join("sub.old")).unwrap();
    plant_link(&users.a, &root_dir, &sub);
    plant_link(&users.a, &other_file, &dir.join("out.other"));
    nix::unistd::mkfifo(
        &dir.join("out.fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("make a fifo");
    give(&dir.join("out.fifo"), &users.a);
    daemon.ok("queue 1 activate");
    // The loop is never held by what the user planted: root's console
    // answers, and root's own job runs, while the user's jobs fail.
    let started = std::time::Instant::now();
    assert_eq!(code(&daemon.console("status")), Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "status took {:?}",
        started.elapsed()
    );
    assert_eq!(code(&daemon.run(&["true"])), Some(0));
    for (job, file, error) in [
        (file_swapped, "output file out.file", "ermission denied"),
        (parent_swapped, "output file sub/out", "ermission denied"),
        (other_swapped, "error file out.other", "ermission denied"),
        (
            fifo_swapped,
            "output file out.fifo",
            "No such device or address",
        ),
    ] {
        wait_ended(&daemon, job);
        let reason = field(&daemon, job, "reason");
        assert!(
            reason.contains(&format!("cannot open the {file}")) && reason.contains(error),
            "job {job}: {reason}"
        );
        assert_ne!(field(&daemon, job, "exit"), "0", "job {job}");
    }
    assert_eq!(std::fs::read_to_string(&root_file).unwrap(), "root's\n");
    assert_eq!(
        std::fs::read_dir(&root_dir).unwrap().count(),
        0,
        "a file was made in root's directory"
    );
    assert_eq!(std::fs::read_to_string(&other_file).unwrap(), "b's\n");
    let meta = std::fs::metadata(&root_file).unwrap();
    assert_eq!((meta.uid(), meta.len()), (0, 7));
}

#[test]
fn an_interactive_dependant_is_told_it_ended_with_a_killed_scored() {
    let mut daemon = Daemon::builder().hosts(&two_hosts()).start();
    let first = submit(
        &daemon,
        &["sh", "-c", "while [ ! -e go ]; do sleep 0.05; done"],
    );
    let mut dependant = daemon.spawn(&[&format!("-after={first}"), "echo", "never"]);
    // Until its scrun has submitted it, `job ID` knows no such job.
    let waiting = wait_until(Duration::from_secs(30), || {
        stdout(&daemon.console(&format!("job {}", first + 1))).contains("state: waiting")
    });
    assert!(waiting, "{}", daemon.ok("jobs all"));
    daemon.kill_hard();
    daemon.start_again();
    // Its scrun comes back to the new daemon, which tells it that the job
    // ended with the killed one, and why; the job never ran.
    // As scrun(1) says: a rejected job, status 75.
    let (status, message) = dependant.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(75), "{message}");
    assert!(
        message.contains(&format!(
            "scrun: job rejected: cannot reattach to job {}: it ended before it started",
            first + 1
        )) && message.contains("lost with a killed scored"),
        "{message}"
    );
    assert!(!message.contains("never"), "{message}");
    assert_eq!(field(&daemon, first + 1, "state"), "killed");
}
