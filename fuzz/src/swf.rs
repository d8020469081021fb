//! Property of sc_replay's trace reader (`scored_replay::swf`) and of the
//! replay of what it accepts.
//!
//! The input is a trace file: it is cut into lines at `\n` (a trailing
//! `\r` dropped), and a line that is not UTF-8 is counted as malformed, as
//! sc_replay reads files.
//!
//! Properties:
//! - the reader never panics, whatever the numbers (huge, negative,
//!   fractional, not finite) or the headers;
//! - every malformed line is counted, at most `MAX_REPORTED` are kept, in
//!   line order, each naming a line of the input with a message;
//! - every job it accepts is within the documented bounds (times, processors,
//!   memory), and so is the `MaxProcs` header;
//! - a trace without malformed lines replays (first come, first served on a
//!   small machine, at the largest arrival scale) without a panic, and every
//!   job is either replayed or skipped with a reason.
#![forbid(unsafe_code)]

use std::time::Duration;

use scored_replay::swf::{self, MAX_MEMORY_KB, MAX_PROCS, MAX_REPORTED, MAX_SECONDS};
use scored_replay::{run, uniform_machine, Setup};

/// Traces with more jobs are only parsed: a replay of them is not what the
/// fuzzer should spend its time on.
const MAX_REPLAYED_JOBS: usize = 64;

/// Checks the properties on one input; panics when one fails.
pub fn check(data: &[u8]) {
    let mut parser = swf::Parser::default();
    let mut n_lines = 0usize;
    for line in data.split(|&byte| byte == b'\n') {
        n_lines += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match std::str::from_utf8(line) {
            Ok(text) => parser.line(text),
            Err(_) => parser.bad_line("the line is not valid UTF-8 text"),
        }
    }
    assert_eq!(parser.line_no(), n_lines, "lines were lost");
    let (trace, errors) = parser.finish();

    assert!(errors.first.len() <= MAX_REPORTED, "too many errors kept");
    assert!(errors.first.len() <= errors.count, "more kept than counted");
    assert_eq!(
        errors.first.len(),
        errors.count.min(MAX_REPORTED),
        "the first errors are not all kept"
    );
    let mut last = 0;
    for error in &errors.first {
        assert!(
            error.line > last && error.line <= n_lines,
            "error on line {} after line {last} of {n_lines}",
            error.line
        );
        last = error.line;
        assert!(!error.message.is_empty(), "empty message on {}", error.line);
    }
    if let Some(max_procs) = trace.max_procs {
        assert!((1..=MAX_PROCS).contains(&max_procs), "MaxProcs {max_procs}");
    }
    for job in &trace.jobs {
        assert!(
            job.line >= 1 && job.line <= n_lines,
            "job line {}",
            job.line
        );
        for time in [job.submit, job.run, job.requested_time]
            .into_iter()
            .flatten()
        {
            assert!((0.0..=MAX_SECONDS).contains(&time), "time {time}");
        }
        if let Some(procs) = job.procs {
            assert!(
                procs >= 1 && procs as u64 <= MAX_PROCS,
                "processors {procs}"
            );
        }
        if let Some(memory) = job.memory_kb {
            assert!(memory > 0.0 && memory <= MAX_MEMORY_KB, "memory {memory}");
        }
    }

    if !errors.is_empty() || trace.jobs.len() > MAX_REPLAYED_JOBS {
        return;
    }
    let mut setup = Setup::new(uniform_machine(4, 1 << 30));
    setup.timeslice = Duration::from_millis(500);
    setup.arrival_scale = 1000.0;
    setup.rc = Some((
        "fuzz.rc".to_string(),
        "queue 1 set mode=exclusive\n".to_string(),
    ));
    let outcome = run(&trace, &setup, &mut |_, _| {}).expect("the replay of a valid trace");
    assert_eq!(
        outcome.jobs.len() + outcome.skipped.len(),
        trace.jobs.len(),
        "jobs were lost"
    );
    for skipped in &outcome.skipped {
        assert!(!skipped.reason.is_empty(), "skipped without a reason");
    }
}
