//! Setting up as a newcomer does: the clients' system-wide setting (the
//! shared daemon's socket, and whether scrun may fall back to a private
//! daemon, saying so when it does), the install script, and the sample
//! configuration, which runs well on any machine.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use scored_tests::*;

/// A shell with its own runtime directory (where a private daemon would
/// live) and the clients' file `config`, naming no socket itself.
struct Client {
    sandbox: Sandbox,
    runtime: PathBuf,
    config: PathBuf,
}

impl Client {
    fn new(config: &str) -> Client {
        let sandbox = Sandbox::new();
        let runtime = sandbox.path.join("run");
        std::fs::create_dir(&runtime).expect("mkdir");
        let config = sandbox.write("scored.toml", config);
        Client {
            sandbox,
            runtime,
            config,
        }
    }

    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = Command::new(bin(program));
        command
            .args(args)
            .env_remove("SCORED_SOCKET")
            .env_remove("SCORE_OPTIONS")
            .env("XDG_RUNTIME_DIR", &self.runtime)
            .env("SCORED_CLIENT_CONFIG", &self.config)
            .current_dir(&self.sandbox.path)
            .stdin(Stdio::null());
        command
    }

    fn run(&self, program: &str, args: &[&str]) -> Output {
        self.command(program, args).output().expect("run")
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        end_private_daemon(&self.runtime);
    }
}

fn shown(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        output.status.code(),
        stdout(output),
        stderr(output)
    )
}

#[test]
fn the_system_wide_setting_names_the_shared_daemon_for_scrun_and_sc_console() {
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let client = Client::new(&format!(
        "# the shared daemon's file\ntimeslice = \"500ms\"\n[client]\nsocket = \"{}\"\nprivate = false\n",
        daemon.socket.display()
    ));
    let output = client.run("scrun", &["sh", "-c", "echo job $SCORE_JOBID"]);
    assert_eq!(stdout(&output), "job 1\n", "{}", shown(&output));
    assert_eq!(stderr(&output), "", "{}", shown(&output));
    let output = client.run("sc_console", &["-c", "jobs all"]);
    assert!(stdout(&output).contains("echo job"), "{}", shown(&output));
    assert!(private_daemon_pid(&client.runtime).is_none());
}

#[test]
fn roots_console_finds_the_private_daemon_that_roots_scrun_started() {
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: the console's fallback to a private daemon is root's");
        return;
    }
    let client = Client::new("# no [client] table\n");
    let output = client.run("scrun", &["sh", "-c", "echo job $SCORE_JOBID"]);
    assert_eq!(stdout(&output), "job 1\n", "{}", shown(&output));
    assert!(private_daemon_pid(&client.runtime).is_some());
    if std::os::unix::net::UnixStream::connect(scored_proto::paths::ROOT_SOCKET).is_ok() {
        println!("skipped: a shared daemon answers at the default socket, and comes first");
        return;
    }
    let output = client.run("sc_console", &["-c", "jobs all"]);
    assert_eq!(code(&output), Some(0), "{}", shown(&output));
    assert!(stdout(&output).contains("echo job"), "{}", shown(&output));
}

#[test]
fn scrun_refuses_a_private_daemon_the_setting_forbids_and_says_when_it_falls_back() {
    let sandbox = Sandbox::new();
    let socket = sandbox.path.join("down.sock");
    let client = Client::new(&format!(
        "socket = \"{}\"\n[client]\nprivate = false\n",
        socket.display()
    ));
    let output = client.run("scrun", &["echo", "never"]);
    assert_eq!(code(&output), Some(69), "{}", shown(&output));
    assert_eq!(
        stderr(&output),
        format!(
            "scrun: no scored answers at {}, and {} allows no private scored (private = \
             false): ask the operator to start it\n",
            socket.display(),
            client.config.display()
        )
    );
    assert_eq!(stdout(&output), "");
    assert!(!client.runtime.join("scored-private").exists());

    // Allowed, the fall-back is said: the job misses the shared policy.
    std::fs::write(
        &client.config,
        format!("socket = \"{}\"\n", socket.display()),
    )
    .expect("write");
    let output = client.run("scrun", &["echo", "ran"]);
    assert_eq!(code(&output), Some(0), "{}", shown(&output));
    assert_eq!(stdout(&output), "ran\n");
    assert_eq!(
        stderr(&output),
        format!(
            "scrun: no scored answers at {}; the job runs on a private scored of yours, \
             without the shared daemon's queues and limits\n",
            socket.display()
        )
    );
    assert!(private_daemon_pid(&client.runtime).is_some());
}

#[test]
fn a_mistake_in_the_setting_is_named_by_scrun_sc_console_and_scored() {
    let client = Client::new("[client]\nprivate = \"no\"\n");
    let said = format!(
        "cannot tell where scored is: {}: [client]: invalid type: string \"no\", expected a \
         boolean\n",
        client.config.display()
    );
    let output = client.run("scrun", &["true"]);
    assert_eq!(code(&output), Some(69), "{}", shown(&output));
    assert_eq!(stderr(&output), format!("scrun: {said}"));
    let output = client.run("sc_console", &["-c", "status"]);
    assert_eq!(code(&output), Some(69), "{}", shown(&output));
    assert_eq!(stderr(&output), format!("sc_console: {said}"));

    let config = client
        .sandbox
        .write("daemon.toml", "[client]\nsocket = \"run/x.sock\"\n");
    let output = Command::new(bin("scored"))
        .arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(client.sandbox.path.join("s.sock"))
        .arg("--state-dir")
        .arg(client.sandbox.path.join("state"))
        .output()
        .expect("scored");
    assert_eq!(code(&output), Some(1), "{}", shown(&output));
    assert!(
        stderr(&output).contains("[client] socket run/x.sock is not an absolute path"),
        "{}",
        shown(&output)
    );
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_path_buf()
}

/// After the README's release build the install script builds nothing
/// more: one `cargo build --release`, then a copy; it installs under the
/// prefix the README and scored(8) give.
#[test]
fn the_install_script_builds_once_and_installs_where_the_documents_say() {
    let sandbox = Sandbox::new();
    let target = sandbox.path.join("target");
    let calls = sandbox.path.join("cargo.calls");
    // A cargo that records how it was called and leaves the four programs
    // where a release build puts them.
    let cargo = sandbox.write(
        "cargo",
        &format!(
            "#!/bin/sh\necho \"$@\" >> {calls}\nmkdir -p \"$CARGO_TARGET_DIR/release\"\n\
             for p in scored scrun sc_console sc_replay; do\n\
             printf '#!/bin/sh\\necho %s\\n' $p > \"$CARGO_TARGET_DIR/release/$p\"\n\
             chmod +x \"$CARGO_TARGET_DIR/release/$p\"\ndone\n",
            calls = calls.display()
        ),
    );
    std::fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let prefix = sandbox.path.join("prefix");
    let output = Command::new("sh")
        .arg(repository().join("config/install.sh"))
        .env("PREFIX", &prefix)
        .env("CARGO", &cargo)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("SCORED_PREBUILT")
        .stdin(Stdio::null())
        .output()
        .expect("install.sh");
    assert_eq!(code(&output), Some(0), "{}", shown(&output));
    assert_eq!(
        std::fs::read_to_string(&calls).expect("cargo was run"),
        "build --release --locked -p scored -p scored-replay -p scrun -p sc_console\n"
    );
    for program in ["scored", "scrun", "sc_console", "sc_replay"] {
        let ran = Command::new(prefix.join("bin").join(program))
            .output()
            .expect("run the installed program");
        assert_eq!(stdout(&ran), format!("{program}\n"));
    }

    // The default prefix, as the script has it, is the one the documents give.
    let script = std::fs::read_to_string(repository().join("config/install.sh")).expect("read");
    let default = script
        .lines()
        .find_map(|line| line.strip_prefix("PREFIX=${PREFIX:-"))
        .and_then(|rest| rest.strip_suffix('}'))
        .expect("install.sh sets a default PREFIX");
    let readme = std::fs::read_to_string(repository().join("README.md")).expect("read");
    assert!(
        readme.contains(&format!("`{default}` by default")),
        "README.md does not give {default} as the default prefix"
    );
    let page = std::fs::read_to_string(repository().join("man/scored.8")).expect("read");
    assert!(
        page.contains(&format!("(by default\n.IR {default} ;")),
        "scored(8) does not give {default} as the default prefix"
    );
}

/// The sample hosts database runs as well wherever it is tried: no
/// warning at start, and its hosts on every CPU rather than all on one.
#[test]
fn the_sample_hosts_start_without_warnings_on_every_cpu() {
    let daemon = Daemon::builder()
        .arg("--hosts")
        .arg(
            &repository()
                .join("config/scorehosts.db")
                .display()
                .to_string(),
        )
        .arg("--rc")
        .arg(&repository().join("config/scored.rc").display().to_string())
        .start();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("read");
    let hosts = daemon.json("hosts");
    for host in hosts.as_array().expect("a listing") {
        assert_eq!(host["cpus"], online.trim(), "{hosts:#}");
    }
    // A real program runs under the sample policy; one write per line, so
    // that the ranks' lines do not mix when Python writes unbuffered
    // (PYTHONUNBUFFERED in the environment).
    let output = daemon.run(&[
        "-nodes=2",
        "python3",
        "-c",
        "import sys; sys.stdout.write('ran\\n')",
    ]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "ran\nran\n");
    let log = daemon.log();
    assert!(
        !log.lines().any(|line| line.contains(" WARN ")),
        "the sample logs warnings:\n{log}"
    );
}
