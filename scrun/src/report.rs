//! What scrun tells the user when its job is over, and the status it exits with.
//!
//! Pure: each function takes the daemon's last word (or the lack of one)
//! and returns the text for stderr together with the exit status, so the
//! whole mapping is tested without a daemon. Nothing here prints.
#![forbid(unsafe_code)]

use nix::sys::signal::Signal;
use scored_proto::exitcode;
use scored_proto::proto::{Accounting, EndKind, Reply};
use scored_proto::units::format_size;

/// SIGPIPE's number.
const SIGPIPE: i32 = 13;

/// How scrun ends: what it prints on stderr (whole lines, possibly none)
/// and its exit status, or the signal it ends by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Final {
    /// Complete lines for stderr, each ending in a newline.
    pub stderr: String,
    /// scrun's exit status (128+N when it ends by signal N).
    pub code: i32,
    /// The signal scrun ends by, once its terminal and connection are
    /// cleaned up: the one it received and passed on, which ended the
    /// job, so that its parent sees what it would have seen of the
    /// program itself (a shell's loop stops on a child killed by SIGINT).
    pub reraise: Option<Signal>,
}

impl Final {
    /// A one-line message (the `scrun: ` prefix is added) and a status.
    pub fn line(code: i32, message: impl AsRef<str>) -> Final {
        Final {
            stderr: format!("scrun: {}\n", message.as_ref()),
            code,
            reraise: None,
        }
    }

    /// Ending silently by `signal`, as the program would have.
    pub fn by_signal(signal: Signal) -> Final {
        Final {
            stderr: String::new(),
            code: exitcode::from_signal(signal as i32),
            reraise: Some(signal),
        }
    }
}

/// The end of scrun for a reply that ends the session, or `None` for a
/// reply after which scrun keeps waiting (`Waiting`, `Admitted`, `Started`,
/// `Held`). `passed` is the signal scrun passed on to the job last, if
/// any: a job that it ended ends scrun by the same signal.
pub fn final_report(reply: &Reply, stat: bool, passed: Option<i32>) -> Option<Final> {
    match reply {
        Reply::Waiting { .. }
        | Reply::Accepted { .. }
        | Reply::Admitted { .. }
        | Reply::Started { .. }
        | Reply::Held { .. }
        | Reply::Reattached { .. } => None,
        // Every kind of rejection is one status: scripts that care about
        // the kind read the message, and `wait` exists for the one kind
        // that a retry would fix.
        Reply::Rejected { reason, .. } => Some(Final::line(
            exitcode::REJECTED,
            format!("job rejected: {reason}"),
        )),
        Reply::Ended {
            job,
            kind,
            status,
            reason,
            signal,
            accounting,
        } => Some(ended(
            *job, kind, *status, reason, *signal, accounting, stat, passed,
        )),
        Reply::Error { message } => Some(Final::line(
            exitcode::INTERNAL,
            format!("scored: {message}"),
        )),
        Reply::Console { .. } => Some(Final::line(
            exitcode::INTERNAL,
            "scored answered the job submission with a console reply",
        )),
    }
}

/// The end of a job: the accounting block if asked for, the reason unless
/// the job simply exited with a code, and the status to pass on; or, for
/// a job ended by the signal scrun passed on, only the block, and scrun
/// ends by that signal (a shell says what a signal did to its child).
#[allow(clippy::too_many_arguments)]
fn ended(
    job: u64,
    kind: &EndKind,
    status: i32,
    reason: &str,
    signal: Option<i32>,
    accounting: &Accounting,
    stat: bool,
    passed: Option<i32>,
) -> Final {
    let by_passed = signal
        .filter(|signal| passed == Some(*signal))
        .and_then(|signal| Signal::try_from(signal).ok());
    if let (Some(signal), EndKind::Exited) = (by_passed, kind) {
        let mut end = Final::by_signal(signal);
        if stat {
            end.stderr = accounting_block(job, accounting, end.code);
        }
        return end;
    }
    let code = match kind {
        // The daemon sends 76 already; the constant keeps the documented
        // status even if it did not.
        EndKind::Limit => exitcode::LIMIT,
        _ => pass_on(status),
    };
    let mut stderr = String::new();
    if stat {
        stderr.push_str(&accounting_block(job, accounting, code));
    }
    // A job that exited with a code speaks through its own output; scrun
    // adds nothing. One that a signal ended gets a line naming the signal,
    // as a shell prints one, except for SIGPIPE: the normal end of a
    // producer whose reader went away (`scrun yes | head`), which shells
    // do not report either.
    let signalled = signal.is_some_and(|signal| signal != SIGPIPE);
    if *kind != EndKind::Exited || signalled {
        stderr.push_str(&format!("scrun: job {job} {reason}\n"));
    }
    Final {
        stderr,
        code,
        reraise: None,
    }
}

/// The job's status as scrun's exit status: 0-255 as is, anything else
/// (which a correct daemon never sends) as an internal error.
pub fn pass_on(status: i32) -> i32 {
    if (0..=255).contains(&status) {
        status
    } else {
        exitcode::INTERNAL
    }
}

/// The connection ended before the job did. scored keeps its clients'
/// connections across an in-place restart, so a connection closes without
/// a last word only when scored died (SIGKILL, a crash it could not
/// recover from): the daemon is unavailable, as when it cannot be reached.
pub fn lost_connection(job: Option<u64>) -> Final {
    match job {
        Some(job) => Final::line(
            exitcode::UNREACHABLE,
            format!("scored died: lost the connection to it before job {job} ended"),
        ),
        None => Final::line(
            exitcode::UNREACHABLE,
            "scored died: lost the connection to it before the job was admitted",
        ),
    }
}

/// The `-stat` block: a heading, then one `  key: value` line per fact.
pub fn accounting_block(job: u64, accounting: &Accounting, exit_status: i32) -> String {
    let queues = if accounting.queues.is_empty() {
        "-".to_string()
    } else {
        accounting
            .queues
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let peak_memory = if accounting.peak_memory.is_empty() {
        "-".to_string()
    } else {
        accounting
            .peak_memory
            .iter()
            .map(|(host, bytes)| format!("{host} {}", format_size(*bytes)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "scrun: job {job} accounting\n\
         \x20 queues: {queues}\n\
         \x20 wait: {}\n\
         \x20 wall: {}\n\
         \x20 cpu: {}\n\
         \x20 stopped: {}\n\
         \x20 switches: {}\n\
         \x20 peak memory: {peak_memory}\n\
         \x20 peak disk: {}\n\
         \x20 exit status: {exit_status}\n",
        seconds(accounting.wait_secs),
        seconds(accounting.wall_secs),
        seconds(accounting.cpu_secs),
        seconds(accounting.stopped_secs),
        accounting.switches,
        format_size(accounting.peak_disk),
    )
}

/// Seconds with three decimals. The value comes from the daemon, so a
/// negative or non-finite one is shown as zero rather than as `NaN`.
fn seconds(value: f64) -> String {
    let value = if value.is_finite() && value > 0.0 {
        value
    } else {
        0.0
    };
    format!("{value:.3}s")
}

#[cfg(test)]
mod tests {
    use super::*;
    use scored_proto::proto::RejectKind;

    /// Renders the outcome of a reply as `code | stderr`, or `continue`.
    fn render(reply: Reply, stat: bool) -> String {
        match final_report(&reply, stat, None) {
            None => "continue".to_string(),
            Some(end) => format!("{} | {}", end.code, end.stderr.trim_end()),
        }
    }

    fn check(reply: Reply, expected: &str) {
        assert_eq!(render(reply, false), expected);
    }

    fn ended(kind: EndKind, status: i32, reason: &str) -> Reply {
        Reply::Ended {
            job: 12,
            kind,
            status,
            reason: reason.to_string(),
            signal: None,
            accounting: Accounting::default(),
        }
    }

    fn signalled(kind: EndKind, status: i32, reason: &str, signal: i32) -> Reply {
        Reply::Ended {
            job: 12,
            kind,
            status,
            reason: reason.to_string(),
            signal: Some(signal),
            accounting: Accounting::default(),
        }
    }

    #[test]
    #[rustfmt::skip]
    fn a_signal_gets_a_line_naming_it_and_sigpipe_does_not() {
        check(signalled(EndKind::Exited, 139, "rank 0 killed by SIGSEGV (segmentation fault)", 11), "139 | scrun: job 12 rank 0 killed by SIGSEGV (segmentation fault)");
        check(signalled(EndKind::Exited, 138, "rank 1 killed by SIGUSR1 (user defined signal 1); the other processes were killed", 10), "138 | scrun: job 12 rank 1 killed by SIGUSR1 (user defined signal 1); the other processes were killed");
        check(signalled(EndKind::Exited, 141, "rank 0 killed by SIGPIPE (broken pipe)", 13), "141 | ");
        check(signalled(EndKind::Killed, 143, "killed by its owner: rank 0 ended by SIGTERM (terminated)", 15), "143 | scrun: job 12 killed by its owner: rank 0 ended by SIGTERM (terminated)");
        check(ended(EndKind::Killed, 0, "asked to end by an operator; it exited with status 0"), "0 | scrun: job 12 asked to end by an operator; it exited with status 0");
    }

    fn rejected(kind: RejectKind) -> Reply {
        Reply::Rejected {
            reason: "queue 7 does not exist".to_string(),
            kind,
        }
    }

    #[test]
    #[rustfmt::skip]
    fn replies_map_to_messages_and_statuses() {
        check(Reply::Waiting { reason: "memory".into() }, "continue");
        check(Reply::Started { job: 1, winch: true, signals: true }, "continue");
        check(Reply::Held { job: 1 }, "continue");
        check(rejected(RejectKind::Invalid), "75 | scrun: job rejected: queue 7 does not exist");
        check(rejected(RejectKind::Resources), "75 | scrun: job rejected: queue 7 does not exist");
        check(rejected(RejectKind::ShuttingDown), "75 | scrun: job rejected: queue 7 does not exist");
        check(ended(EndKind::Exited, 0, "exited"), "0 | ");
        check(ended(EndKind::Exited, 3, "exited with status 3"), "3 | ");
        check(ended(EndKind::Exited, 137, "killed by SIGKILL"), "137 | ");
        check(ended(EndKind::Limit, 76, "killed: cpu time 2s over the limit of 1s"), "76 | scrun: job 12 killed: cpu time 2s over the limit of 1s");
        check(ended(EndKind::Limit, 9, "killed: memory over"), "76 | scrun: job 12 killed: memory over");
        check(ended(EndKind::Killed, 130, "killed by its owner"), "130 | scrun: job 12 killed by its owner");
        check(ended(EndKind::Shutdown, 143, "killed: scored shut down"), "143 | scrun: job 12 killed: scored shut down");
        check(ended(EndKind::LaunchFailed, 127, "could not start nosuch: no such file"), "127 | scrun: job 12 could not start nosuch: no such file");
        check(ended(EndKind::Exited, 256, "exited"), "70 | ");
        check(ended(EndKind::Killed, -1, "killed"), "70 | scrun: job 12 killed");
        check(Reply::Error { message: "protocol version 9 is not 1".into() }, "70 | scrun: scored: protocol version 9 is not 1");
        check(Reply::Console { ok: true, text: String::new(), json: None }, "70 | scrun: scored answered the job submission with a console reply");
    }

    #[test]
    #[rustfmt::skip]
    fn lost_connection_names_the_job_once_known() {
        assert_eq!(lost_connection(Some(4)), Final::line(69, "scored died: lost the connection to it before job 4 ended"));
        assert_eq!(lost_connection(None), Final::line(69, "scored died: lost the connection to it before the job was admitted"));
    }

    #[test]
    fn accounting_block_has_one_fact_per_line() {
        let accounting = Accounting {
            queues: vec![1, 2],
            wait_secs: 0.0123,
            wall_secs: 1.0214,
            cpu_secs: 1.003,
            stopped_secs: 0.0,
            switches: 0,
            peak_memory: vec![("host0".into(), 1_258_291), ("host1".into(), 1_153_434)],
            peak_disk: 12 << 10,
        };
        let expected = "\
scrun: job 12 accounting
  queues: 1,2
  wait: 0.012s
  wall: 1.021s
  cpu: 1.003s
  stopped: 0.000s
  switches: 0
  peak memory: host0 1.2M, host1 1.1M
  peak disk: 12K
  exit status: 0
";
        assert_eq!(accounting_block(12, &accounting, 0), expected);
    }

    #[test]
    fn accounting_block_shows_empty_and_hostile_values_plainly() {
        let accounting = Accounting {
            wall_secs: f64::NAN,
            cpu_secs: -2.0,
            stopped_secs: f64::INFINITY,
            ..Accounting::default()
        };
        let block = accounting_block(3, &accounting, 70);
        assert!(block.contains("  queues: -\n"), "{block}");
        assert!(
            block.contains("  wall: 0.000s\n  cpu: 0.000s\n  stopped: 0.000s\n"),
            "{block}"
        );
        assert!(
            block.contains("  peak memory: -\n  peak disk: 0\n  exit status: 70\n"),
            "{block}"
        );
    }

    #[test]
    fn stat_prints_the_block_before_the_reason() {
        let reply = ended(EndKind::Killed, 130, "killed by its owner");
        let end = final_report(&reply, true, None).expect("ended is final");
        assert!(
            end.stderr.starts_with("scrun: job 12 accounting\n"),
            "{}",
            end.stderr
        );
        assert!(
            end.stderr
                .ends_with("  exit status: 130\nscrun: job 12 killed by its owner\n"),
            "{}",
            end.stderr
        );
    }
}
