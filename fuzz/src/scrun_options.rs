//! Property of scrun's command-line parser (`scrun::cli::parse`).
//!
//! The input is split at NUL bytes into words (argv without argv\[0\]; a
//! real argument can hold no NUL). When the input starts with
//! `SCORE_OPTIONS=`, the first word minus that prefix is the value of the
//! `SCORE_OPTIONS` environment variable instead of an argument.
//!
//! Properties:
//! - `parse` never panics, and parsing twice gives the same result;
//! - an error message is not empty and stays short (the parser quotes user
//!   text shortened, so hostile input cannot flood the terminal);
//! - a job to run keeps the documented invariants: at least one stage, no
//!   empty stage, no separator word inside a stage, no empty program name,
//!   a single stage joined by `::`, and options within their limits;
//! - printing the resolved options back as one option word, followed by
//!   `--` and the stages, parses to the same invocation without
//!   `SCORE_OPTIONS`.
#![forbid(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use scored_proto::proto::{Joiner, ProcRequest};
use scrun::cli::{parse, Invocation, Options, Parsed, MAX_HOSTS, MAX_PRIORITY, MAX_PROCS};

/// The prefix that marks the first word as `SCORE_OPTIONS`.
const ENV_PREFIX: &[u8] = b"SCORE_OPTIONS=";

/// The longest error message accepted: a few quoted words of at most 40
/// characters each, plus the fixed text.
const MAX_MESSAGE: usize = 2048;

/// Checks the properties on one input; panics when one fails.
pub fn check(data: &[u8]) {
    let (score_options, rest) = match data.strip_prefix(ENV_PREFIX) {
        Some(rest) => {
            let mut parts = rest.splitn(2, |&byte| byte == 0);
            let value = parts.next().unwrap_or_default();
            let rest = parts.next().unwrap_or_default();
            (Some(OsString::from_vec(value.to_vec())), rest)
        }
        None => (None, data),
    };
    let words: Vec<OsString> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split(|&byte| byte == 0)
            .map(|word| OsString::from_vec(word.to_vec()))
            .collect()
    };
    let parsed = parse(words.clone(), score_options.as_deref());
    assert_eq!(
        parse(words.clone(), score_options.as_deref()),
        parsed,
        "parsing twice differs"
    );
    match parsed {
        Ok(Parsed::Help | Parsed::Version) => {}
        Err(error) => {
            let message = error.to_string();
            assert!(!message.is_empty(), "{words:?}: an empty error message");
            assert!(
                message.len() <= MAX_MESSAGE,
                "{words:?}: an error message of {} bytes",
                message.len()
            );
        }
        Ok(Parsed::Run(invocation)) => {
            check_invocation(&invocation);
            let printed = print(&invocation);
            assert_eq!(
                parse(printed.clone(), None),
                Ok(Parsed::Run(invocation.clone())),
                "{words:?} (SCORE_OPTIONS {score_options:?}) parses to {invocation:?}, printed as {printed:?}"
            );
        }
    }
}

fn check_invocation(invocation: &Invocation) {
    let stages = &invocation.stages;
    assert!(!stages.is_empty(), "a job without stages");
    for stage in stages {
        assert!(
            stage.first().is_some_and(|program| !program.is_empty()),
            "a stage without a program: {stage:?}"
        );
        assert!(
            stage.iter().all(|word| word != "::" && word != "=="),
            "a separator inside a stage: {stage:?}"
        );
    }
    if stages.len() == 1 {
        assert_eq!(
            invocation.joiner,
            Joiner::Sequence,
            "one stage joined by '=='"
        );
    }
    let options = &invocation.options;
    let total = match options.procs {
        ProcRequest::Nodes(n) => u64::from(n),
        ProcRequest::Grid { hosts, per_host } => u64::from(hosts) * u64::from(per_host),
        ProcRequest::Hosts(h) => {
            assert!(u64::from(h) <= MAX_HOSTS, "hosts={h} is over the limit");
            u64::from(h)
        }
    };
    assert!(
        (1..=MAX_PROCS).contains(&total),
        "{total} processes accepted"
    );
    if let Some(priority) = options.priority {
        assert!(
            u64::from(priority) <= MAX_PRIORITY,
            "priority {priority} accepted"
        );
    }
    assert!(options.memory != Some(0), "a memory limit of 0 accepted");
    assert!(options.disk != Some(0), "a disk limit of 0 accepted");
    assert!(options.time_ms != Some(0), "a time limit of 0 accepted");
    let _ = options.job_options();
}

/// The invocation as arguments: one option word with every option that
/// differs from the default (sizes in plain bytes), `--`, then the stages
/// joined by their separator.
fn print(invocation: &Invocation) -> Vec<OsString> {
    let Options {
        procs,
        priority,
        wait,
        memory,
        disk,
        time_ms,
        stat,
        pty,
        mpi,
        scored,
        reattach,
        verbose,
        batch,
    } = &invocation.options;
    let mut items = vec![match procs {
        ProcRequest::Nodes(n) => format!("nodes={n}"),
        ProcRequest::Grid { hosts, per_host } => format!("nodes={hosts}x{per_host}"),
        ProcRequest::Hosts(h) => format!("hosts={h}"),
    }];
    items.extend(priority.map(|queue| format!("priority={queue}")));
    items.extend(wait.then(|| "wait".to_string()));
    items.extend(memory.map(|bytes| format!("memory={bytes}")));
    items.extend(disk.map(|bytes| format!("disk={bytes}")));
    items.extend(time_ms.map(|ms| format!("time={ms}ms")));
    items.extend(stat.then(|| "stat".to_string()));
    items.extend(pty.then(|| "pty".to_string()));
    items.push(format!("mpi={}", mpi.name()));
    items.push(format!("reattach={}ms", reattach.as_millis()));
    items.extend(verbose.then(|| "verbose".to_string()));
    items.extend(batch.detach.then(|| "batch".to_string()));
    items.extend(batch.name.as_ref().map(|name| format!("name={name}")));
    items.extend(batch.output.as_ref().map(|text| format!("output={text}")));
    items.extend(batch.error.as_ref().map(|text| format!("error={text}")));
    let ids = |ids: &[u64]| ids.iter().map(u64::to_string).collect::<Vec<_>>().join(":");
    if !batch.after.is_empty() {
        items.push(format!("after={}", ids(&batch.after)));
    }
    if !batch.afterany.is_empty() {
        items.push(format!("afterany={}", ids(&batch.afterany)));
    }
    items.extend(batch.array.map(|spec| format!("array={}", spec.describe())));
    let mut words = Vec::new();
    let mut option_word = format!("-{}", items.join(","));
    if let Some(path) = scored {
        let path = path
            .to_str()
            .expect("a scored= path comes from a UTF-8 option word");
        option_word.push_str(",scored=");
        option_word.push_str(path);
    }
    words.push(OsString::from(option_word));
    words.push(OsString::from("--"));
    let separator = match invocation.joiner {
        Joiner::Sequence => "::",
        Joiner::Pipe => "==",
    };
    for (idx, stage) in invocation.stages.iter().enumerate() {
        if idx > 0 {
            words.push(OsString::from(separator));
        }
        words.extend(stage.iter().cloned());
    }
    debug_assert!(words.iter().all(|word| !OsStr::as_bytes(word).contains(&0)));
    words
}
