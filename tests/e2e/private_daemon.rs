//! The private daemon: with no daemon at the default socket, the user's
//! scruns share one private scored, started by the first of them (racing
//! ones start one between them), silent unless asked, working under any
//! umask, leaving nothing behind when it cannot start, and exiting by
//! itself after its idle time, never while a job runs. Each test runs as
//! root and as a plain user, in a runtime directory of its own
//! (`XDG_RUNTIME_DIR`), so that tests running at the same time never
//! share a daemon.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use scored_tests::*;

/// A runtime directory of its own for one user (root when `user` is
/// `None`); the private daemon started in it is ended when dropped.
struct Runtime {
    _sandbox: Sandbox,
    dir: PathBuf,
    user: Option<TestUser>,
}

impl Runtime {
    fn new(user: Option<&TestUser>) -> Runtime {
        let sandbox = Sandbox::new();
        let dir = sandbox.path.join("run");
        std::fs::create_dir(&dir).expect("mkdir");
        if let Some(user) = user {
            std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).expect("chown");
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        Runtime {
            _sandbox: sandbox,
            dir,
            user: user.cloned(),
        }
    }

    /// `sh -c SCRIPT` as the user, with `$SCRUN` naming scrun and no
    /// daemon named, so that scrun looks at the default socket.
    fn shell(&self, script: &str) -> Command {
        let sh = Path::new("/bin/sh");
        let mut command = match &self.user {
            Some(user) => command_as(user, sh, &["-c", script]),
            None => {
                let mut command = Command::new(sh);
                command.args(["-c", script]).stdin(Stdio::null());
                command
            }
        };
        command
            .env_remove("SCORED_SOCKET")
            .env_remove("SCORE_OPTIONS")
            .env("XDG_RUNTIME_DIR", &self.dir)
            .env("SCRUN", bin("scrun"))
            .current_dir("/");
        command
    }

    fn run(&self, script: &str) -> Output {
        self.shell(script).output().expect("run sh")
    }

    fn daemon(&self) -> Option<i32> {
        private_daemon_pid(&self.dir)
    }

    /// Every private daemon whose socket is in this directory.
    fn daemons(&self) -> Vec<i32> {
        let socket = self.dir.join("scored.sock").display().to_string();
        std::fs::read_dir("/proc")
            .expect("read /proc")
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|bytes| {
                    let line = String::from_utf8_lossy(&bytes).replace('\0', " ");
                    line.contains("--single-user") && line.contains(&socket)
                })
            })
            .filter(|pid| alive(*pid))
            .collect()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        end_private_daemon(&self.dir);
    }
}

/// Runs `check` as root and, at the same time, as a plain user (or says
/// why not).
fn both(test: &str, check: impl Fn(Option<&TestUser>) + Sync) {
    let users = test_users(test);
    std::thread::scope(|scope| {
        let as_user = users
            .as_ref()
            .map(|users| scope.spawn(|| check(Some(&users.a))));
        check(None);
        match as_user {
            Some(half) => {
                if let Err(panic) = half.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            None => println!("{test}: the plain-user half skipped"),
        }
    });
}

fn shown(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        output.status.code(),
        stdout(output),
        stderr(output)
    )
}

fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[test]
fn concurrent_scruns_of_a_user_share_one_private_daemon_and_its_hosts() {
    both(
        "concurrent_scruns_of_a_user_share_one_private_daemon_and_its_hosts",
        |user| {
            let runtime = Runtime::new(user);
            let output = runtime.run(
                "seq 4 | xargs -P4 -I{} \"$SCRUN\" sh -c 'grep Cpus_allowed_list /proc/self/status'",
            );
            assert_eq!(code(&output), Some(0), "{}", shown(&output));
            let cpus: Vec<String> = stdout(&output)
                .lines()
                .map(|line| {
                    line.trim_start_matches("Cpus_allowed_list:")
                        .trim()
                        .to_string()
                })
                .collect();
            assert_eq!(cpus.len(), 4, "{}", shown(&output));
            let mut distinct = cpus.clone();
            distinct.sort();
            distinct.dedup();
            // The embedded default has a host per CPU: four jobs placed
            // side by side take as many CPUs as there are, up to four.
            assert_eq!(
                distinct.len(),
                online_cpus().min(4),
                "{cpus:?}\n{}",
                shown(&output)
            );
            assert_eq!(stderr(&output), "", "{}", shown(&output));
            assert_eq!(runtime.daemons().len(), 1, "{:?}", runtime.daemons());
            // A later scrun uses the same daemon.
            let before = runtime.daemon().expect("a private daemon runs");
            let output = runtime.run("\"$SCRUN\" true");
            assert_eq!(code(&output), Some(0), "{}", shown(&output));
            assert_eq!(runtime.daemon(), Some(before));
        },
    );
}

#[test]
fn racing_scruns_start_one_private_daemon() {
    both("racing_scruns_start_one_private_daemon", |user| {
        let runtime = Runtime::new(user);
        let output = runtime.run(
            "for i in 1 2 3 4 5 6 7 8; do \"$SCRUN\" -v sh -c 'echo $SCORE_JOBID' & done; wait",
        );
        let mut ids: Vec<u64> = stdout(&output)
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (1..=8).collect::<Vec<_>>(), "{}", shown(&output));
        let notices = stderr(&output).matches("started a private one").count();
        assert_eq!(notices, 1, "{}", shown(&output));
        assert_eq!(runtime.daemons().len(), 1, "{:?}", runtime.daemons());
    });
}

#[test]
fn the_private_daemon_says_nothing_unless_asked() {
    both("the_private_daemon_says_nothing_unless_asked", |user| {
        let runtime = Runtime::new(user);
        let output = runtime.run("x=$(\"$SCRUN\" echo hi 2>&1); printf '[%s]' \"$x\"");
        assert_eq!(stdout(&output), "[hi]", "{}", shown(&output));
        end_private_daemon(&runtime.dir);
        let output = runtime.run("\"$SCRUN\" -v echo hi");
        assert_eq!(stdout(&output), "hi\n", "{}", shown(&output));
        assert!(
            stderr(&output).starts_with("scrun: no scored running; started a private one at "),
            "{}",
            shown(&output)
        );
        end_private_daemon(&runtime.dir);
        let output = runtime.run("SCORE_OPTIONS=-v \"$SCRUN\" echo hi");
        assert!(
            stderr(&output).contains("started a private one"),
            "{}",
            shown(&output)
        );
        // Once it runs, there is nothing to say.
        let output = runtime.run("\"$SCRUN\" -v echo hi");
        assert_eq!(stderr(&output), "", "{}", shown(&output));
    });
}

#[test]
fn the_private_daemon_works_under_any_umask_and_leaves_nothing_when_it_fails() {
    both(
        "the_private_daemon_works_under_any_umask_and_leaves_nothing_when_it_fails",
        |user| {
            let runtime = Runtime::new(user);
            for mask in ["0177", "0277", "0777", "0022"] {
                let output = runtime.run(&format!("umask {mask}; \"$SCRUN\" sh -c umask"));
                assert_eq!(code(&output), Some(0), "umask {mask}: {}", shown(&output));
                assert_eq!(stdout(&output), format!("{mask}\n"), "{}", shown(&output));
                // The next start is under the next umask.
                end_private_daemon(&runtime.dir);
                let private = std::fs::metadata(runtime.dir.join("scored-private"))
                    .expect("the private directory");
                assert_eq!(private.permissions().mode() & 0o777, 0o700);
            }
            // A start that fails (here its state directory cannot be
            // made) says why in the daemon's words and leaves nothing.
            let state = runtime.dir.join("scored-private/state");
            std::fs::remove_dir_all(&state).expect("remove the state directory");
            std::fs::write(&state, "in the way").expect("plant a file");
            if let Some(user) = &runtime.user {
                std::os::unix::fs::chown(&state, Some(user.uid), Some(user.gid)).expect("chown");
            }
            let output = runtime.run("umask 0777; \"$SCRUN\" true");
            assert_eq!(code(&output), Some(69), "{}", shown(&output));
            let text = stderr(&output);
            assert!(
                text.contains("cannot start a private one: it exited before listening at")
                    && text.contains("scored: state directory: "),
                "{}",
                shown(&output)
            );
            let left: Vec<_> = std::fs::read_dir(&runtime.dir)
                .expect("read the runtime directory")
                .flatten()
                .map(|entry| entry.file_name())
                .collect();
            assert!(left.is_empty(), "left behind: {left:?}");
            // And the next start works.
            let output = runtime.run("\"$SCRUN\" true");
            assert_eq!(code(&output), Some(0), "{}", shown(&output));
        },
    );
}

#[test]
fn the_private_daemon_outlives_a_job_longer_than_its_idle_time_then_exits_when_idle() {
    both(
        "the_private_daemon_outlives_a_job_longer_than_its_idle_time_then_exits_when_idle",
        |user| {
            let runtime = Runtime::new(user);
            // A job longer than the idle time (30s): the daemon stays.
            let output = runtime.run("\"$SCRUN\" sleep 32");
            assert_eq!(code(&output), Some(0), "{}", shown(&output));
            let pid = runtime
                .daemon()
                .expect("the private daemon runs after its job");
            let output = runtime.run("\"$SCRUN\" true");
            assert_eq!(code(&output), Some(0), "{}", shown(&output));
            assert_eq!(runtime.daemon(), Some(pid));
            // Then, idle, it exits by itself and removes its socket.
            let idle_from = Instant::now();
            assert!(
                wait_until(Duration::from_secs(90), || !alive(pid)),
                "the private daemon {pid} did not exit when idle"
            );
            assert!(
                idle_from.elapsed() >= Duration::from_secs(20),
                "it exited after {:?}, before its idle time",
                idle_from.elapsed()
            );
            assert!(!runtime.dir.join("scored.sock").exists());
        },
    );
}

/// With a shared (root) daemon at its default socket, a plain user's
/// scrun and sc_console use it rather than a private daemon: the user's
/// jobs share the machine's hosts with everyone's. The shared daemon runs
/// in a mount namespace of the test's own, with a fresh /run, so that no
/// other test's client sees it.
#[test]
fn a_plain_users_clients_use_the_shared_daemon_before_a_private_one() {
    let Some(users) =
        test_users("a_plain_users_clients_use_the_shared_daemon_before_a_private_one")
    else {
        return;
    };
    let user = &users.a;
    let runtime = Runtime::new(Some(user));
    let state = runtime._sandbox.path.join("shared-state");
    let script = format!(
        r#"mount -t tmpfs -o mode=755 tmpfs /run || exit 77
"$SCORED" --socket /run/scored/scored.sock --state-dir {state} 2>{log} &
daemon=$!
trap 'kill $daemon; wait $daemon' EXIT
i=0
while ! "$SC_CONSOLE" -c status >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 400 ] || exit 78; sleep 0.05
done
as_user() {{ setpriv --reuid={uid} --regid={gid} --init-groups -- env -u SCORED_SOCKET XDG_RUNTIME_DIR={run} "$@"; }}
as_user "$SCRUN" sh -c 'echo job $SCORE_JOBID'
echo "scrun=$?"
as_user "$SC_CONSOLE" -c 'jobs all'
echo "console=$?"
echo "root sees:"
"$SC_CONSOLE" -c 'jobs all'
"#,
        state = state.display(),
        log = runtime._sandbox.path.join("shared.log").display(),
        uid = user.uid,
        gid = user.gid,
        run = runtime.dir.display(),
    );
    let output = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env_remove("SCORED_SOCKET")
        .env_remove("SCORE_OPTIONS")
        .env("SCORED", bin("scored"))
        .env("SCRUN", bin("scrun"))
        .env("SC_CONSOLE", bin("sc_console"))
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .expect("run unshare");
    if code(&output) == Some(77) || stderr(&output).starts_with("unshare:") {
        println!(
            "skipped: no private mount namespace here\n{}",
            shown(&output)
        );
        return;
    }
    let text = stdout(&output);
    assert!(text.contains("job 1\nscrun=0\n"), "{}", shown(&output));
    assert!(text.contains("console=0"), "{}", shown(&output));
    let root_sees = text.split("root sees:").nth(1).unwrap_or_default();
    assert!(root_sees.contains(&user.name), "{}", shown(&output));
    assert!(
        runtime.daemon().is_none() && !runtime.dir.join("scored-private").exists(),
        "a private daemon was started\n{}",
        shown(&output)
    );
}

#[test]
fn a_spawn_from_a_job_on_the_private_daemon_runs_there_as_the_user() {
    both(
        "a_spawn_from_a_job_on_the_private_daemon_runs_there_as_the_user",
        |user| {
            let runtime = Runtime::new(user);
            let parent = r#"
D=$(mktemp -d)
printf 'cmd=init pmi_version=1 pmi_subversion=1\n' >&$PMI_FD; read -r line <&$PMI_FD
printf 'mcmd=spawn\nnprocs=1\nexecname=sh\ntotspawns=1\nspawnssofar=1\nargcnt=2\narg1=-c\narg2=echo child spawned=$PMI_SPAWNED uid=$(id -u) job=$SCORE_JOBID; touch %s/done\npreput_num=0\ninfo_num=0\nendcmd\n' "$D" >&$PMI_FD
read -r line <&$PMI_FD; echo "$line uid=$(id -u) job=$SCORE_JOBID"
for i in $(seq 300); do [ -e "$D/done" ] && break; sleep 0.1; done
rm -rf "$D"
printf 'cmd=finalize\n' >&$PMI_FD; read -r line <&$PMI_FD
"#;
            let output = runtime
                .shell("\"$SCRUN\" bash -c \"$PARENT\"")
                .env("PARENT", parent)
                .output()
                .expect("run sh");
            assert_eq!(code(&output), Some(0), "{}", shown(&output));
            let uid = user.map_or(0, |user| user.uid);
            let mut lines: Vec<String> = stdout(&output).lines().map(str::to_string).collect();
            lines.sort();
            assert_eq!(
                lines,
                [
                    format!("child spawned=1 uid={uid} job=2"),
                    format!("cmd=spawn_result rc=0 uid={uid} job=1"),
                ],
                "{}",
                shown(&output)
            );
            assert_eq!(runtime.daemons().len(), 1, "{:?}", runtime.daemons());
        },
    );
}

/// A scrun that found the user's private daemon running (a plain user's
/// default socket is that daemon's) starts it again when it is killed, as
/// one that started it does: the new daemon takes the job over, and scrun
/// reattaches and ends with the job's status, saying nothing without `-v`.
#[test]
fn a_killed_private_daemon_found_running_is_started_again_for_its_job() {
    both(
        "a_killed_private_daemon_found_running_is_started_again_for_its_job",
        |user| {
            let runtime = Runtime::new(user);
            let output = runtime.run("\"$SCRUN\" true");
            assert_eq!(code(&output), Some(0), "{}", shown(&output));
            let first = runtime.daemon().expect("a private daemon runs");
            let started = runtime.dir.join("started");
            let go = runtime.dir.join("go");
            let job = runtime
                .shell(
                    "exec \"$SCRUN\" sh -c 'touch \"$XDG_RUNTIME_DIR/started\"; \
                     while [ ! -e \"$XDG_RUNTIME_DIR/go\" ]; do sleep 0.05; done; echo done'",
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start scrun");
            assert!(
                wait_until(Duration::from_secs(20), || started.exists()),
                "the job did not start"
            );
            assert_eq!(runtime.daemon(), Some(first));
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(first),
                nix::sys::signal::Signal::SIGKILL,
            )
            .expect("kill the private daemon");
            assert!(
                wait_until(Duration::from_secs(10), || runtime
                    .daemon()
                    .is_some_and(|pid| pid != first)),
                "no private daemon was started again"
            );
            std::fs::write(&go, "").expect("let the job end");
            let output = job.wait_with_output().expect("scrun's end");
            assert_eq!(code(&output), Some(0), "{}", shown(&output));
            assert_eq!(stdout(&output), "done\n", "{}", shown(&output));
            assert_eq!(stderr(&output), "", "{}", shown(&output));
            assert_eq!(runtime.daemons().len(), 1, "{:?}", runtime.daemons());
        },
    );
}
