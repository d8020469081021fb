//! The documentation and the samples against the code: every command,
//! setting, option, flag, TOML key, exit status and job variable the
//! programs define appears in its man page; every man page renders without
//! warnings; and every sample in `config/` starts a daemon that does what
//! it says.
//!
//! The lists come from the code itself (the help table, clap's flags, the
//! TOML parser's error, scrun's own messages, a real job's environment), so
//! a new command or option that is not documented fails here.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clap::CommandFactory;
use scored::config;
use scored_proto::command::{self, help, Command as ConsoleCommand, Setting};
use scored_proto::exitcode;
use scored_tests::*;

/// The repository root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the repository root")
        .to_path_buf()
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

const PAGES: &[&str] = &[
    "man/scored.8",
    "man/sc_console.8",
    "man/scrun.1",
    "man/scorehosts.db.5",
    "man/scored.rc.5",
    "man/sc_replay.1",
];

// ----- a little roff reader -----

/// Splits a macro line's arguments, honouring double quotes.
fn macro_args(rest: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut any = false;
    for ch in rest.chars() {
        match ch {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            ' ' | '\t' if !quoted => {
                if any {
                    args.push(std::mem::take(&mut current));
                    any = false;
                }
            }
            _ => {
                current.push(ch);
                any = true;
            }
        }
    }
    if any {
        args.push(current);
    }
    args
}

/// Resolves the escapes the pages use into plain characters.
fn unescape(text: &str) -> String {
    let mut out = text.to_string();
    for (escape, plain) in [
        ("\\fB", ""),
        ("\\fI", ""),
        ("\\fR", ""),
        ("\\fP", ""),
        ("\\(dq", "\""),
        ("\\(aq", "'"),
        ("\\(en", "-"),
        ("\\(em", "--"),
        ("\\(<=", "<="),
        ("\\(bu", "*"),
        ("\\&", ""),
        ("\\%", ""),
        ("\\-", "-"),
        ("\\e", "\\"),
    ] {
        out = out.replace(escape, plain);
    }
    out
}

/// The text of roff source roughly as a reader sees it: font macros joined
/// the way they join their arguments, escapes resolved, blanks collapsed.
fn roff_text(source: &str) -> String {
    let mut out = String::new();
    for line in source.lines() {
        if line.starts_with(".\\\"") {
            continue;
        }
        let text = match line.strip_prefix('.') {
            Some(rest) => {
                let (name, args) = rest.split_once(' ').unwrap_or((rest, ""));
                let args = macro_args(args);
                match name {
                    "B" | "I" | "SH" | "SS" => args.join(" "),
                    "BR" | "RB" | "BI" | "IB" | "IR" | "RI" => args.concat(),
                    _ => String::new(),
                }
            }
            None => line.to_string(),
        };
        out.push_str(&unescape(&text));
        out.push('\n');
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A man page's sections: heading and text.
fn sections(source: &str) -> Vec<(String, String)> {
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in source.lines() {
        if let Some(heading) = line.strip_prefix(".SH ") {
            sections.push((roff_text(&format!(".B {heading}")), String::new()));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    sections
        .into_iter()
        .map(|(heading, body)| (heading, roff_text(&body)))
        .collect()
}

fn section(page: &str, heading: &str) -> String {
    sections(&read(page))
        .into_iter()
        .find(|(name, _)| name == heading)
        .map(|(_, text)| text)
        .unwrap_or_else(|| panic!("{page} has no section {heading}"))
}

/// Words of a text, splitting at everything but letters, digits, `+`, `_`.
fn tokens(text: &str) -> Vec<&str> {
    text.split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '+' || ch == '_'))
        .filter(|word| !word.is_empty())
        .collect()
}

#[track_caller]
fn assert_mentions(page: &str, text: &str, wanted: &[String]) {
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|item| !text.contains(item.as_str()))
        .collect();
    assert!(missing.is_empty(), "{page} does not mention {missing:?}");
}

#[track_caller]
fn assert_numbers(page: &str, text: &str, numbers: &[String]) {
    let words = tokens(text);
    let missing: Vec<&String> = numbers
        .iter()
        .filter(|number| !words.contains(&number.as_str()))
        .collect();
    assert!(missing.is_empty(), "{page} does not list {missing:?}");
}

#[test]
fn roff_reader_joins_like_man() {
    assert_eq!(
        roff_text(".BI \"queue \" Q \" enable\" \"\\fR|\\fP\" disable\n.BR \\-\\-hosts ,\ntext \\(dqx\\(dq\n"),
        "queue Q enable|disable --hosts, text \"x\""
    );
    assert_eq!(
        tokens("128+N and 1\\(en125, 64."),
        ["128+N", "and", "1", "en125", "64"]
    );
}

// ----- every name of the code in its page -----

#[test]
fn sc_console_page_has_every_command_usage_and_setting() {
    let page = "man/sc_console.8";
    let text = roff_text(&read(page));
    let names: Vec<String> = help::command_names().map(String::from).collect();
    assert!(names.len() >= 15, "{names:?}");
    assert_numbers(page, &text, &names);
    // Each usage line as the help table spells it, settings and all.
    let usages: Vec<String> = help::entries()
        .iter()
        .flat_map(|entry| entry.usage.lines().map(String::from))
        .collect();
    assert_mentions(page, &section(page, "COMMANDS"), &usages);
    let settings = setting_keys();
    assert!(settings.contains(&"residency=".to_string()), "{settings:?}");
    assert_mentions(page, &text, &settings);
    assert_numbers(
        page,
        &section(page, "EXIT STATUS"),
        &[
            exitcode::OK,
            exitcode::FAILURE,
            exitcode::UNREACHABLE,
            exitcode::INTERNAL,
        ]
        .map(|code| code.to_string()),
    );
    assert_mentions(
        page,
        &text,
        &["SC_CONSOLE_HISTORY".into(), "SCORED_SOCKET".into()],
    );
}

/// The `key=` words of every usage in the help table.
fn setting_keys() -> Vec<String> {
    let mut keys: Vec<String> = help::entries()
        .iter()
        .flat_map(|entry| entry.usage.split_whitespace())
        .filter_map(|word| word.split_once('=').map(|(key, _)| format!("{key}=")))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[test]
fn scored_rc_page_has_the_language() {
    let page = "man/scored.rc.5";
    let text = roff_text(&read(page));
    let names: Vec<String> = help::command_names().map(String::from).collect();
    assert_numbers(page, &section(page, "COMMANDS"), &names);
    assert_mentions(page, &text, &setting_keys());
    assert_mentions(
        page,
        &text,
        &[
            "./scored.rc",
            "BINDIR/scored.rc",
            "PREFIX/etc/scored.rc",
            "--rc",
        ]
        .map(String::from),
    );
}

#[test]
fn scrun_page_has_every_option_exit_status_and_variable() {
    let page = "man/scrun.1";
    let text = roff_text(&read(page));

    // The option keys, as scrun itself lists them in its error message.
    let output = Command::new(bin("scrun"))
        .args(["-no_such_option", "true"])
        .env_remove("SCORE_OPTIONS")
        .stdin(Stdio::null())
        .output()
        .expect("run scrun");
    assert_eq!(code(&output), Some(exitcode::USAGE));
    let message = stderr(&output);
    let list = message
        .split("valid options are ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("scrun did not list its options: {message}"));
    let keys: Vec<String> = list.split(", ").map(|key| format!("-{key}")).collect();
    assert!(keys.len() >= 8, "{keys:?}");
    assert_mentions(page, &section(page, "OPTIONS"), &keys);

    // Every option form of `scrun -help`, such as -nodes=NxM.
    let help_output = Command::new(bin("scrun"))
        .arg("-help")
        .output()
        .expect("scrun -help");
    let forms: Vec<String> = stdout(&help_output)
        .lines()
        .filter_map(|line| line.strip_prefix("  -"))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(|form| format!("-{}", form.trim_end_matches(',')))
        .collect();
    assert!(forms.contains(&"-nodes=NxM".to_string()), "{forms:?}");
    assert_mentions(page, &section(page, "OPTIONS"), &forms);

    let statuses: Vec<String> = [
        exitcode::OK,
        exitcode::USAGE,
        exitcode::UNREACHABLE,
        exitcode::INTERNAL,
        exitcode::REJECTED,
        exitcode::LIMIT,
        exitcode::NOT_EXECUTABLE,
        exitcode::NOT_FOUND,
    ]
    .map(|code| code.to_string())
    .into_iter()
    .chain(["128+N".to_string()])
    .collect();
    assert_eq!(exitcode::from_signal(15), 128 + 15);
    assert_numbers(page, &section(page, "EXIT STATUS"), &statuses);
    assert_mentions(
        page,
        &section(page, "ENVIRONMENT"),
        &["SCORE_OPTIONS", "SCORED_SOCKET", "XDG_RUNTIME_DIR"].map(String::from),
    );
    assert_mentions(page, &text, &["-stat", "::", "=="].map(String::from));
}

#[test]
fn scrun_page_lists_every_variable_a_job_gets() {
    let daemon = Daemon::start();
    // A `==` job, so that the stage variable shows too.
    let output = daemon.run(&["-nodes=1", "env", "==", "cat"]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let variables: Vec<String> = stdout(&output)
        .lines()
        .filter(|line| line.starts_with("SCORE_"))
        .filter_map(|line| line.split_once('=').map(|(name, _)| name.to_string()))
        .collect();
    for expected in ["SCORE_JOBID", "SCORE_RANK", "SCORE_TMPDIR", "SCORE_STAGE"] {
        assert!(
            variables.iter().any(|name| name == expected),
            "{variables:?}"
        );
    }
    let page = "man/scrun.1";
    assert_mentions(page, &section(page, "THE JOB'S PROCESSES"), &variables);
}

#[test]
fn scored_page_has_every_flag_and_toml_key() {
    let page = "man/scored.8";
    let text = roff_text(&read(page));
    let flags: Vec<String> = config::Flags::command()
        .get_arguments()
        .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
        .collect();
    assert!(flags.contains(&"--kill-grace".to_string()), "{flags:?}");
    // The synopsis spells -v/--verbose by its short name.
    let long_only: Vec<String> = config::Flags::command()
        .get_arguments()
        .filter(|arg| arg.get_short().is_none())
        .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
        .collect();
    assert_mentions(page, &section(page, "SYNOPSIS"), &long_only);
    assert_mentions(page, &section(page, "OPTIONS"), &flags);
    let shorts: Vec<String> = config::Flags::command()
        .get_arguments()
        .filter_map(|arg| arg.get_short().map(|short| format!("-{short}")))
        .collect();
    assert_mentions(page, &section(page, "OPTIONS"), &shorts);

    let keys = toml_keys();
    assert!(keys.contains(&"state_dir".to_string()), "{keys:?}");
    assert_numbers(page, &section(page, "CONFIGURATION FILE"), &keys);
    assert_numbers(
        page,
        &section(page, "EXIT STATUS"),
        &[exitcode::OK, exitcode::FAILURE].map(|code| code.to_string()),
    );
    assert_mentions(
        page,
        &text,
        &[
            "SCORED_LOG",
            "XDG_RUNTIME_DIR",
            "/run/scored/scored.sock",
            "/var/scored",
            "STATE_DIR/jobs/ID",
        ]
        .map(String::from),
    );
}

#[test]
fn sc_replay_page_has_every_flag_and_exit_status() {
    let page = "man/sc_replay.1";
    let output = Command::new(bin("sc_replay"))
        .arg("--help")
        .output()
        .expect("sc_replay --help");
    let help = stdout(&output);
    let flags: Vec<String> = help
        .split_whitespace()
        .map(|word| word.trim_end_matches(','))
        .filter(|word| word.starts_with("--") && word.len() > 2)
        .map(String::from)
        .collect();
    assert!(flags.contains(&"--arrival-scale".to_string()), "{flags:?}");
    assert!(flags.contains(&"--generate".to_string()), "{flags:?}");
    assert_mentions(page, &section(page, "OPTIONS"), &flags);
    let long_only: Vec<String> = flags
        .iter()
        .filter(|flag| !["--help", "--version"].contains(&flag.as_str()))
        .cloned()
        .collect();
    assert_mentions(page, &section(page, "SYNOPSIS"), &long_only);
    assert_numbers(
        page,
        &section(page, "EXIT STATUS"),
        &[exitcode::OK, exitcode::FAILURE, exitcode::BAD_FLAG].map(|code| code.to_string()),
    );
    for key in [
        "jobs",
        "skipped",
        "mean_wait",
        "median_wait",
        "p95_wait",
        "mean_bounded_slowdown",
        "utilisation",
        "makespan",
        "queues",
    ] {
        assert_mentions(page, &section(page, "OPTIONS"), &[key.to_string()]);
    }
}

/// The keys of the TOML file, as its parser names them when refusing one.
fn toml_keys() -> Vec<String> {
    let error = config::parse_file(Path::new("x.toml"), "no_such_key = 1\n")
        .expect_err("an unknown key is refused")
        .to_string();
    let list = error
        .split("expected one of ")
        .nth(1)
        .unwrap_or_else(|| panic!("the TOML error lists no keys: {error}"));
    list.split(", ")
        .map(|key| key.trim_matches('`').to_string())
        .collect()
}

#[test]
fn every_page_names_itself() {
    for page in PAGES {
        let file = Path::new(page)
            .file_name()
            .and_then(|n| n.to_str())
            .expect("name");
        let (name, section_number) = file.rsplit_once('.').expect("a section suffix");
        let source = read(page);
        let th = source
            .lines()
            .find(|line| line.starts_with(".TH "))
            .unwrap_or_else(|| panic!("{page} has no .TH"));
        let args = macro_args(&th[4..]);
        assert_eq!(args[0], name.to_uppercase(), "{page}: {th}");
        assert_eq!(args[1], section_number, "{page}: {th}");
        let name_section = section(page, "NAME");
        assert!(
            name_section.starts_with(&format!("{name} - ")),
            "{page}: {name_section}"
        );
        for heading in ["SYNOPSIS", "DESCRIPTION", "SEE ALSO"] {
            section(page, heading);
        }
    }
}

// ----- rendering -----

#[test]
fn pages_render_without_warnings() {
    if Command::new("groff").arg("--version").output().is_err() {
        println!("groff is not installed; man pages not rendered");
        return;
    }
    for page in PAGES {
        let output = Command::new("groff")
            .args(["-man", "-ww", "-z"])
            .arg(root().join(page))
            .output()
            .expect("run groff");
        assert!(
            output.status.success() && output.stderr.is_empty(),
            "groff -man -ww warns about {page}:\n{}",
            stderr(&output)
        );
    }
    if Command::new("man").arg("--version").output().is_err() {
        println!("man is not installed; man -l not tried");
        return;
    }
    for page in PAGES {
        let output = Command::new("man")
            .arg("-l")
            .arg(root().join(page))
            .env("MANWIDTH", "80")
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .stdin(Stdio::null())
            .output()
            .expect("run man");
        assert!(
            output.status.success() && output.stderr.is_empty(),
            "man -l {page} failed:\n{}",
            stderr(&output)
        );
        let rendered = stdout(&output);
        assert!(
            rendered.contains("NAME") && rendered.len() > 1000,
            "{page}:\n{rendered}"
        );
        let too_wide: Vec<&str> = rendered
            .lines()
            .filter(|line| line.chars().count() > 80)
            .collect();
        assert!(
            too_wide.is_empty(),
            "{page} has lines over 80 columns: {too_wide:#?}"
        );
    }
}

// ----- the samples -----

fn config_path(name: &str) -> String {
    root().join("config").join(name).display().to_string()
}

#[test]
fn sample_hosts_and_rc_start_with_the_policy_the_rc_sets() {
    let daemon = Daemon::builder()
        .arg("--hosts")
        .arg(&config_path("scorehosts.db"))
        .arg("--rc")
        .arg(&config_path("scored.rc"))
        .start();

    let clusters = daemon.json("clusters");
    let names: Vec<&str> = clusters
        .as_array()
        .expect("clusters is a listing")
        .iter()
        .filter_map(|row| row["name"].as_str())
        .collect();
    assert_eq!(names, ["fast", "slow"], "{clusters:#}");
    let hosts = daemon.json("hosts");
    assert_eq!(hosts.as_array().map(Vec::len), Some(5), "{hosts:#}");

    // Every line of the rc file, checked against what the daemon reports.
    let queues = daemon.json("queues");
    let mut checked = 0;
    for line in read("config/scored.rc").lines() {
        let parsed = command::parse_line(line).unwrap_or_else(|error| panic!("{line}: {error}"));
        match parsed {
            None => {}
            Some(ConsoleCommand::Timeslice(Some(slice))) => {
                assert_eq!(
                    daemon.json("status")["timeslice"],
                    slice.as_secs_f64(),
                    "{line}"
                );
                checked += 1;
            }
            Some(ConsoleCommand::QueueSet { queue, settings }) => {
                let row = &queues[queue as usize];
                if let Some(mode) = settings.mode {
                    assert_eq!(row["mode"], mode.as_str(), "{line}: {row}");
                }
                if let Some(share) = settings.share {
                    assert_eq!(row["share"], share.as_str(), "{line}: {row}");
                }
                for (key, setting) in [
                    ("cputime", settings.cputime),
                    ("residency", settings.residency),
                ] {
                    if let Some(setting) = setting {
                        let expected = match setting {
                            Setting::Set(duration) => serde_json::json!(duration.as_secs_f64()),
                            Setting::Clear => serde_json::Value::Null,
                        };
                        assert_eq!(row[key], expected, "{line}: {key} in {row}");
                    }
                }
                for (key, setting) in [("memory", settings.memory), ("disk", settings.disk)] {
                    if let Some(setting) = setting {
                        let expected = match setting {
                            Setting::Set(pct) => serde_json::json!(pct),
                            Setting::Clear => serde_json::Value::Null,
                        };
                        assert_eq!(row[key], expected, "{line}: {key} in {row}");
                    }
                }
                checked += 1;
            }
            Some(ConsoleCommand::ClusterLimit { cluster, limits }) => {
                let row = clusters
                    .as_array()
                    .and_then(|rows| {
                        rows.iter().find(|row| match &cluster {
                            command::ClusterRef::Index(idx) => row["cluster"] == *idx,
                            command::ClusterRef::Name(name) => row["name"] == name.as_str(),
                        })
                    })
                    .unwrap_or_else(|| panic!("{line}: no such cluster in {clusters}"));
                for (key, setting) in [
                    ("memory", limits.memory),
                    ("disk", limits.disk),
                    ("jobs limit", limits.jobs),
                ] {
                    if let Some(setting) = setting {
                        let expected = match setting {
                            Setting::Set(value) => serde_json::json!(value),
                            Setting::Clear => serde_json::Value::Null,
                        };
                        assert_eq!(row[key], expected, "{line}: {key} in {row}");
                    }
                }
                checked += 1;
            }
            Some(other) => panic!("the sample rc has an unexpected command: {other:?}"),
        }
    }
    assert!(
        checked >= 5,
        "the sample rc sets too little: {checked} lines"
    );

    // The policy admits and runs a job: queue 0 gives it the CPU time limit.
    let output = daemon.run(&["-priority=0", "true"]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(daemon.job_field(1, "cputime limit"), 600.0);
    assert_eq!(daemon.job_field(1, "queue"), 0);
}

/// A scored started by hand, stopped (SIGTERM, then SIGKILL) when dropped.
struct Started {
    child: Child,
    log: PathBuf,
}

impl Drop for Started {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let stopped = wait_until(Duration::from_secs(20), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        if !stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "----- scored log -----\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}

#[test]
fn sample_toml_has_every_key_and_starts_a_daemon() {
    let text = read("config/scored.toml");
    for key in toml_keys() {
        let present = text
            .lines()
            .map(|line| line.trim_start_matches(['#', ' ']))
            .any(|line| line.starts_with(&format!("{key} =")));
        assert!(present, "config/scored.toml does not show the key {key}");
    }
    // As shipped, with the commented key too, it resolves.
    let uncommented = text.replace("# operator =", "operator =");
    let file = config::parse_file(Path::new("scored.toml"), &uncommented).expect("sample parses");
    let settings = config::resolve(config::Flags::default(), file).expect("sample resolves");
    assert!(settings.cgroups);

    // A copy whose paths point into a sandbox and at the repository's samples.
    let sandbox = Sandbox::new();
    let socket = sandbox.path.join("s.sock");
    let rewritten: String = text
        .lines()
        .map(|line| {
            let value = |path: &Path| format!("\"{}\"", path.display());
            match line.split_once(" = ") {
                Some(("socket", _)) => format!("socket = {}", value(&socket)),
                Some(("state_dir", _)) => {
                    format!("state_dir = {}", value(&sandbox.path.join("state")))
                }
                Some(("hosts", _)) => format!("hosts = \"{}\"", config_path("scorehosts.db")),
                Some(("rc", _)) => format!("rc = \"{}\"", config_path("scored.rc")),
                _ => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(rewritten.contains(&sandbox.path.display().to_string()));
    let copy = sandbox.write("scored.toml", &rewritten);
    let log = sandbox.path.join("scored.log");
    let log_file = std::fs::File::create(&log).expect("log");
    let child = Command::new(bin("scored"))
        .arg("--config")
        .arg(&copy)
        .current_dir(&sandbox.path)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log"))
        .stderr(log_file)
        .spawn()
        .expect("start scored");
    let mut started = Started { child, log };
    let listening = wait_until(Duration::from_secs(30), || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
            || matches!(started.child.try_wait(), Ok(Some(_)))
    });
    assert!(
        listening && std::os::unix::net::UnixStream::connect(&socket).is_ok(),
        "scored --config did not start:\n{}",
        std::fs::read_to_string(&started.log).unwrap_or_default()
    );
    let output = Command::new(bin("sc_console"))
        .arg("--socket")
        .arg(&socket)
        .args(["--json", "-c", "status"])
        .output()
        .expect("sc_console");
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("status JSON");
    // The group "pcc" holds every host of the sample; the rc's slice wins.
    assert_eq!(status["clusters"]["hosts"], 5, "{status:#}");
    assert_eq!(status["timeslice"], 0.2, "{status:#}");
    drop(started);
}

#[test]
fn systemd_unit_is_a_valid_service_for_scored() {
    let text = read("config/scored.service");
    let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (idx, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
        {
            sections.push((name.to_string(), Vec::new()));
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("scored.service:{}: not key=value: {line}", idx + 1));
        let (_, entries) = sections
            .last_mut()
            .unwrap_or_else(|| panic!("scored.service:{}: a key before any section", idx + 1));
        entries.push((key.trim().to_string(), value.trim().to_string()));
    }
    let names: Vec<&str> = sections.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["Unit", "Service", "Install"]);
    let service = &sections[1].1;
    let get = |key: &str| {
        service
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
            .unwrap_or_else(|| panic!("[Service] has no {key}"))
    };
    assert_eq!(get("Type"), "simple");
    assert_eq!(get("Restart"), "on-failure");
    assert!(["mixed", "control-group"].contains(&get("KillMode")));
    let exec: Vec<&str> = get("ExecStart").split_whitespace().collect();
    assert_eq!(
        Path::new(exec[0])
            .file_name()
            .and_then(|name| name.to_str()),
        Some("scored"),
        "{exec:?}"
    );
    assert!(exec.contains(&"--config"), "{exec:?}");
    // The unit must not take from scored what it needs.
    for (key, forbidden) in [
        ("NoNewPrivileges", "yes"),
        ("RestrictRealtime", "yes"),
        ("ProtectControlGroups", "yes"),
        ("PrivateTmp", "yes"),
    ] {
        assert!(
            !service
                .iter()
                .any(|(name, value)| name == key && value == forbidden),
            "{key}={forbidden} would stop scored or its jobs"
        );
    }

    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("systemd-analyze is not installed; unit not verified");
        return;
    }
    let sandbox = Sandbox::new();
    let unit = sandbox.write(
        "scored.service",
        &text.replace(exec[0], &bin("scored").display().to_string()),
    );
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze");
    let complaints: Vec<String> = stderr(&output)
        .lines()
        .filter(|line| line.contains("scored.service"))
        .map(String::from)
        .collect();
    assert!(
        complaints.is_empty(),
        "systemd-analyze verify: {complaints:#?}"
    );
}

// ----- installation -----

#[test]
fn install_script_puts_binaries_pages_and_samples_under_the_prefix() {
    let sandbox = Sandbox::new();
    let prefix = sandbox.path.join("prefix");
    let prebuilt = bin("scored")
        .parent()
        .expect("binary directory")
        .to_path_buf();
    let output = Command::new("sh")
        .arg(root().join("config/install.sh"))
        .env("PREFIX", &prefix)
        .env("SCORED_PREBUILT", &prebuilt)
        .stdin(Stdio::null())
        .output()
        .expect("run install.sh");
    assert!(
        output.status.success(),
        "install.sh failed:\n{}{}",
        stdout(&output),
        stderr(&output)
    );
    for program in ["scored", "scrun", "sc_console", "sc_replay"] {
        let path = prefix.join("bin").join(program);
        let version = Command::new(&path)
            .arg("--version")
            .output()
            .expect("run installed binary");
        assert!(
            version.status.success(),
            "{} --version failed",
            path.display()
        );
    }
    for page in PAGES {
        let file = Path::new(page).file_name().expect("name");
        let section_number = page.rsplit('.').next().expect("suffix");
        let installed = prefix
            .join("share/man")
            .join(format!("man{section_number}"))
            .join(file);
        assert_eq!(
            std::fs::read_to_string(&installed).ok(),
            Some(read(page)),
            "{} is not a copy of {page}",
            installed.display()
        );
    }
    for sample in [
        "scorehosts.db",
        "scored.rc",
        "scored.toml",
        "scored.service",
    ] {
        assert!(
            prefix.join("share/doc/scored").join(sample).is_file(),
            "sample {sample} not installed"
        );
    }
    // Nothing goes to PREFIX/etc, where scored would read an rc file by itself.
    assert!(!prefix.join("etc").exists());

    // A missing prebuilt binary is an error, not a half install.
    let empty = sandbox.path.join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let output = Command::new("sh")
        .arg(root().join("config/install.sh"))
        .env("PREFIX", sandbox.path.join("other"))
        .env("SCORED_PREBUILT", &empty)
        .output()
        .expect("run install.sh");
    assert!(!output.status.success());
    assert!(stderr(&output).contains("missing"), "{}", stderr(&output));
    assert!(!sandbox.path.join("other/bin/scrun").exists());
}
