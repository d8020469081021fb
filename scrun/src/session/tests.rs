//! Tests of the session core: a transcript of events in, the same
//! transcript with each event's actions indented under it out.
//!
//! An event line is `waiting REASON`, `admitted N`, `started N`, `held N`,
//! `rejected REASON`, `ended KIND STATUS REASON`, `ended-by SIGNAL` (a
//! rank killed by it), `error MESSAGE`, `lost`, `garbled MESSAGE`,
//! `output-gone`, `why REASON` (the answer to `job ID` with `waits`
//! REASON, or without `waits` when REASON is empty), a signal name such as `SIGINT`, or `+MS` (the clock
//! moves on by MS milliseconds and the shell ticks).

use std::time::{Duration, Instant};

use scored_proto::proto::{Accounting, EndKind, RejectKind, Reply, Request};

use super::*;

fn event(line: &str) -> (Duration, Event) {
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    let number = || rest.parse::<u64>().expect("a number in the test");
    let reply = match word {
        "waiting" => Reply::Waiting {
            reason: rest.into(),
        },
        "admitted" => Reply::Admitted {
            job: number(),
            queue: 1,
            cluster: "c0".into(),
            hosts: vec!["host0".into()],
            ranks: 1,
        },
        "started" => Reply::Started {
            job: number(),
            winch: true,
            signals: true,
        },
        "started-by-an-older-daemon" => Reply::Started {
            job: number(),
            winch: false,
            signals: false,
        },
        "held" => Reply::Held { job: number() },
        "reattached" => Reply::Reattached {
            job: number(),
            started: true,
            held: false,
            ranks: 2,
        },
        "reattached-unstarted" => Reply::Reattached {
            job: number(),
            started: false,
            held: false,
            ranks: 2,
        },
        "connected" => return (Duration::ZERO, Event::Connected),
        "connect-failed" => return (Duration::ZERO, Event::ConnectFailed(rest.into())),
        "broken" => return (Duration::ZERO, Event::Broken(rest.into())),
        "why" => Reply::Console {
            ok: true,
            text: String::new(),
            json: Some(if rest.is_empty() {
                serde_json::json!({"id": 7})
            } else {
                serde_json::json!({"id": 7, "waits": rest})
            }),
        },
        "rejected" => Reply::Rejected {
            reason: rest.into(),
            kind: RejectKind::Resources,
        },
        "ended" => {
            let mut parts = rest.splitn(3, ' ');
            let kind = match parts.next() {
                Some("exited") => EndKind::Exited,
                Some("limit") => EndKind::Limit,
                Some("killed") => EndKind::Killed,
                Some("shutdown") => EndKind::Shutdown,
                other => panic!("unknown end kind {other:?}"),
            };
            Reply::Ended {
                job: 7,
                kind,
                status: parts.next().and_then(|s| s.parse().ok()).expect("status"),
                reason: parts.next().unwrap_or_default().into(),
                signal: None,
                accounting: Accounting::default(),
            }
        }
        "ended-by" => {
            let signal: Signal = rest.parse().expect("a signal name");
            Reply::Ended {
                job: 7,
                kind: EndKind::Exited,
                status: 128 + signal as i32,
                reason: format!("rank 0 killed by {}", signal.as_str()),
                signal: Some(signal as i32),
                accounting: Accounting::default(),
            }
        }
        "error" => Reply::Error {
            message: rest.into(),
        },
        "lost" => return (Duration::ZERO, Event::Lost),
        "output-gone" => return (Duration::ZERO, Event::OutputGone),
        "terminal-gone" => return (Duration::ZERO, Event::TerminalGone),
        "garbled" => return (Duration::ZERO, Event::Garbled(rest.into())),
        _ if word.starts_with("SIG") => {
            let signal: Signal = word.parse().expect("a signal name");
            return (Duration::ZERO, Event::Signal(signal));
        }
        _ if word.starts_with('+') => {
            let millis = word[1..].parse().expect("milliseconds");
            return (Duration::from_millis(millis), Event::Tick);
        }
        _ => panic!("unknown event {line:?}"),
    };
    (Duration::ZERO, Event::Reply(reply))
}

fn render(action: &Action) -> String {
    match action {
        Action::Send(Request::Kill) => "send kill".into(),
        Action::Send(Request::Hold) => "send hold".into(),
        Action::Send(Request::Release) => "send release".into(),
        Action::Send(Request::Winch) => "send winch".into(),
        Action::Send(Request::Console { line, json, .. }) => {
            format!("send console {line}{}", if *json { " --json" } else { "" })
        }
        Action::Send(Request::Signal { signal }) => format!(
            "send {}",
            Signal::try_from(*signal).map_or("?", |signal| signal.as_str())
        ),
        Action::Send(other) => format!("send {other:?}"),
        Action::Say(line) => format!("say {line}"),
        Action::StopSelf => "stop".into(),
        Action::FollowSize => "copy the size to the pty".into(),
        Action::Reconnect { job, descriptors } => {
            format!("reconnect to job {job} (descriptors: {descriptors})")
        }
        Action::Finish(end) => match end.reraise {
            Some(signal) => format!(
                "finish {} by {}: {}",
                end.code,
                signal.as_str(),
                end.stderr.trim_end()
            ),
            None => format!("finish {}: {}", end.code, end.stderr.trim_end()),
        },
    }
}

fn run_transcript(input: &str, pty: bool) -> String {
    transcript(Session::new(false, pty), input)
}

fn transcript(mut session: Session, input: &str) -> String {
    let mut now = Instant::now();
    let mut out = String::new();
    for line in input.lines().map(str::trim).filter(|line| !line.is_empty()) {
        let (advance, event) = event(line);
        now += advance;
        out.push_str(line);
        out.push('\n');
        for action in session.handle(event, now) {
            out.push_str("  ");
            out.push_str(&render(&action));
            out.push('\n');
        }
    }
    out
}

fn check(input: &str, expected: &str) {
    check_mode(input, false, expected);
}

/// As [`check`], for a job on a pty (`-pty`).
fn check_pty(input: &str, expected: &str) {
    check_mode(input, true, expected);
}

fn check_mode(input: &str, pty: bool, expected: &str) {
    let actual = run_transcript(input, pty);
    let expected = expected
        .lines()
        .map(|line| line.strip_prefix("        ").unwrap_or(line))
        .filter(|line| !line.trim().is_empty())
        .map(|line| format!("{line}\n"))
        .collect::<String>();
    assert!(
        actual == expected,
        "\n--- expected ---\n{expected}--- actual ---\n{actual}"
    );
}

#[test]
fn a_job_that_exits_ends_silently_with_its_status() {
    check(
        "admitted 7
        started 7
        ended exited 3 exited with status 3",
        "admitted 7
        started 7
        ended exited 3 exited with status 3
          finish 3: ",
    );
}

#[test]
fn waiting_is_said_once() {
    check(
        "waiting memory: 2G asked, 1G free
        waiting memory: 2G asked, 512M free
        admitted 7",
        "waiting memory: 2G asked, 1G free
          say waiting for resources: memory: 2G asked, 1G free
        waiting memory: 2G asked, 512M free
        admitted 7",
    );
}

#[test]
fn rejection_error_and_lost_connection_end_the_session() {
    check(
        "rejected queue 0 is disabled",
        "rejected queue 0 is disabled
          finish 75: scrun: job rejected: queue 0 is disabled",
    );
    check(
        "error unknown request",
        "error unknown request
          finish 70: scrun: scored: unknown request",
    );
    check(
        "admitted 7
        lost",
        "admitted 7
        lost
          finish 69: scrun: scored died: lost the connection to it before job 7 ended",
    );
    check(
        "garbled bad reply from scored: malformed message",
        "garbled bad reply from scored: malformed message
          finish 70: scrun: bad reply from scored: malformed message",
    );
}

#[test]
fn an_interrupt_goes_to_the_job_and_its_end_by_it_is_scruns() {
    check(
        "admitted 7
        started 7
        SIGINT
        ended-by SIGINT",
        "admitted 7
        started 7
        SIGINT
          send SIGINT
        ended-by SIGINT
          finish 130 by SIGINT: ",
    );
    check(
        "started 7
        SIGHUP
        ended-by SIGHUP",
        "started 7
        SIGHUP
          send SIGHUP
        ended-by SIGHUP
          finish 129 by SIGHUP: ",
    );
}

#[test]
fn a_job_that_handles_the_interrupt_ends_with_its_own_status() {
    check(
        "started 7
        SIGINT
        ended exited 1 exited with status 1",
        "started 7
        SIGINT
          send SIGINT
        ended exited 1 exited with status 1
          finish 1: ",
    );
    // Ended by another signal than the one passed on: said, not raised.
    check(
        "started 7
        SIGINT
        ended-by SIGTERM",
        "started 7
        SIGINT
          send SIGINT
        ended-by SIGTERM
          finish 143: scrun: job 7 rank 0 killed by SIGTERM",
    );
}

#[test]
fn the_same_interrupt_within_a_second_kills_and_a_third_leaves() {
    check(
        "started 7
        SIGTERM
        +999
        SIGTERM
        SIGHUP",
        "started 7
        SIGTERM
          send SIGTERM
        +999
        SIGTERM
          send kill
          say SIGTERM twice within 1s; killing job 7
        SIGHUP
          finish 129: scrun: interrupted again; leaving",
    );
}

#[test]
fn a_terminal_gone_is_a_hang_up_for_the_job_once() {
    // Not scrun's controlling terminal: its end is all that tells.
    check(
        "started 7
        terminal-gone
        ended-by SIGHUP",
        "started 7
        terminal-gone
          send SIGHUP
        ended-by SIGHUP
          finish 129 by SIGHUP: ",
    );
    // Its controlling terminal: the kernel's SIGHUP came first.
    check(
        "started 7
        SIGHUP
        terminal-gone
        ended-by SIGHUP",
        "started 7
        SIGHUP
          send SIGHUP
        terminal-gone
        ended-by SIGHUP
          finish 129 by SIGHUP: ",
    );
    // Before the start, the submission is withdrawn.
    check(
        "admitted 7
        terminal-gone",
        "admitted 7
        terminal-gone
          send kill
          finish 129 by SIGHUP: ",
    );
}

#[test]
fn a_hang_up_twice_is_passed_on_twice() {
    check(
        "started 7
        SIGHUP
        SIGHUP
        ended-by SIGHUP",
        "started 7
        SIGHUP
          send SIGHUP
        SIGHUP
          send SIGHUP
        ended-by SIGHUP
          finish 129 by SIGHUP: ",
    );
}

#[test]
fn interrupts_apart_or_of_different_kinds_are_each_passed_on() {
    check(
        "started 7
        SIGINT
        +1000
        SIGINT
        SIGQUIT
        ended-by SIGQUIT",
        "started 7
        SIGINT
          send SIGINT
        +1000
        SIGINT
          send SIGINT
        SIGQUIT
          send SIGQUIT
        ended-by SIGQUIT
          finish 131 by SIGQUIT: ",
    );
}

#[test]
fn an_older_daemon_gets_a_kill_for_an_interrupt() {
    check(
        "started-by-an-older-daemon 7
        SIGINT
        ended killed 143 killed by its owner",
        "started-by-an-older-daemon 7
        SIGINT
          send kill
          say interrupted; killing job 7
        ended killed 143 killed by its owner
          finish 143: scrun: job 7 killed by its owner",
    );
}

#[test]
fn an_interrupt_before_the_job_starts_withdraws_it_and_ends_scrun_by_it() {
    check(
        "waiting hosts busy
        SIGQUIT",
        "waiting hosts busy
          say waiting for resources: hosts busy
        SIGQUIT
          send kill
          finish 131 by SIGQUIT: ",
    );
    check(
        "admitted 7
        SIGINT",
        "admitted 7
        SIGINT
          send kill
          finish 130 by SIGINT: ",
    );
}

#[test]
fn an_admitted_job_that_does_not_start_is_said_to_be_queued_once() {
    check(
        "admitted 7
        +999
        +1
        why because queue 2 is deactivated
        +5000
        started 7",
        "admitted 7
        +999
        +1
          send console job 7 --json
        why because queue 2 is deactivated
          say job 7 waits because queue 2 is deactivated (Ctrl-C withdraws it)
        +5000
        started 7",
    );
    // An answer without a reason, or after the start, says what it can.
    check(
        "admitted 7
        +1000
        why",
        "admitted 7
        +1000
          send console job 7 --json
        why
          say job 7 waits for its hosts (Ctrl-C withdraws it)",
    );
    check(
        "admitted 7
        +1000
        started 7
        why for its hosts",
        "admitted 7
        +1000
          send console job 7 --json
        started 7
        why for its hosts",
    );
    check(
        "admitted 7
        started 7
        +5000",
        "admitted 7
        started 7
        +5000",
    );
}

#[test]
fn a_reader_gone_from_a_pty_jobs_output_is_its_sigpipe() {
    check_pty(
        "started 7
        output-gone
        output-gone
        ended-by SIGPIPE",
        "started 7
        output-gone
          send SIGPIPE
        output-gone
        ended-by SIGPIPE
          finish 141 by SIGPIPE: ",
    );
}

#[test]
fn a_reader_gone_before_the_start_is_heard_is_the_jobs_sigpipe_once_it_is() {
    // scored spawns the processes, then says they started: their output
    // and its reader's end can come first.
    check_pty(
        "admitted 7
        output-gone
        output-gone
        started 7
        output-gone
        ended-by SIGPIPE",
        "admitted 7
        output-gone
        output-gone
        started 7
          send SIGPIPE
        output-gone
        ended-by SIGPIPE
          finish 141 by SIGPIPE: ",
    );
    check_pty(
        "output-gone
        admitted 7
        started 7
        ended-by SIGPIPE",
        "output-gone
        admitted 7
        started 7
          send SIGPIPE
        ended-by SIGPIPE
          finish 141 by SIGPIPE: ",
    );
    // A daemon that cannot pass it on is asked to kill the job instead.
    check_pty(
        "admitted 7
        output-gone
        started-by-an-older-daemon 7
        output-gone
        ended killed 143 killed by its owner",
        "admitted 7
        output-gone
        started-by-an-older-daemon 7
          send kill
        output-gone
        ended killed 143 killed by its owner
          finish 143: scrun: job 7 killed by its owner",
    );
}

#[test]
fn the_output_is_not_read_while_its_readers_end_waits_for_the_start() {
    let mut session = Session::new(false, true);
    let now = Instant::now();
    assert!(session.reads_output());
    session.handle(Event::OutputGone, now);
    assert!(!session.reads_output(), "the job waits on its terminal");
    session.handle(
        Event::Reply(Reply::Started {
            job: 7,
            winch: true,
            signals: true,
        }),
        now,
    );
    // A job that ignores its SIGPIPE writes on, to nobody.
    assert!(session.reads_output());
    session.handle(Event::OutputGone, now);
    assert!(session.reads_output());
}

#[test]
fn a_reader_gone_before_the_start_leaves_every_other_end_as_it_is() {
    check_pty(
        "admitted 7
        output-gone
        SIGINT",
        "admitted 7
        output-gone
        SIGINT
          send kill
          finish 130 by SIGINT: ",
    );
    check_pty(
        "output-gone
        rejected queue 0 is disabled",
        "output-gone
        rejected queue 0 is disabled
          finish 75: scrun: job rejected: queue 0 is disabled",
    );
    check_pty(
        "admitted 7
        output-gone
        ended exited 0 exited",
        "admitted 7
        output-gone
        ended exited 0 exited
          finish 0: ",
    );
    check_pty(
        "admitted 7
        output-gone
        lost",
        "admitted 7
        output-gone
        lost
          finish 69: scrun: scored died: lost the connection to it before job 7 ended",
    );
}

#[test]
fn suspend_waits_for_held_then_stops_and_continue_releases() {
    check(
        "admitted 7
        SIGTSTP
        SIGTSTP
        +500
        held 7
        SIGCONT
        ended exited 0 exited",
        "admitted 7
        SIGTSTP
          send hold
        SIGTSTP
        +500
        held 7
          stop
        SIGCONT
          send release
        ended exited 0 exited
          finish 0: ",
    );
}

#[test]
fn suspend_stops_anyway_when_held_does_not_come() {
    check(
        "admitted 7
        SIGTSTP
        +1999
        +1
        held 7",
        "admitted 7
        SIGTSTP
          send hold
        +1999
        +1
          say scored did not confirm the hold of job 7 within 2s; stopping anyway
          stop
        held 7",
    );
}

#[test]
fn suspend_before_admission_stops_at_once() {
    check(
        "SIGTSTP
        SIGCONT",
        "SIGTSTP
          send hold
          stop
        SIGCONT
          send release",
    );
}

#[test]
fn the_job_may_end_while_a_hold_is_pending() {
    check(
        "admitted 7
        SIGTSTP
        ended limit 76 killed: cpu time 1s over the limit of 1s",
        "admitted 7
        SIGTSTP
          send hold
        ended limit 76 killed: cpu time 1s over the limit of 1s
          finish 76: scrun: job 7 killed: cpu time 1s over the limit of 1s",
    );
}

#[test]
fn stray_signals_and_held_change_nothing() {
    check(
        "SIGCHLD
        held 3
        +10000",
        "SIGCHLD
        held 3
        +10000",
    );
}

#[test]
fn deadline_follows_the_hold() {
    let mut session = Session::new(false, false);
    let now = Instant::now();
    assert_eq!(session.deadline(), None);
    session.handle(
        Event::Reply(Reply::Started {
            job: 1,
            winch: true,
            signals: true,
        }),
        now,
    );
    session.handle(Event::Signal(Signal::SIGTSTP), now);
    assert_eq!(session.deadline(), Some(now + HOLD_TIMEOUT));
    session.handle(Event::Reply(Reply::Held { job: 1 }), now);
    assert_eq!(session.deadline(), None);
}

#[test]
fn a_resize_is_passed_on_to_a_job_that_has_started() {
    check(
        "SIGWINCH
        admitted 7
        SIGWINCH
        started 7
        SIGWINCH
        SIGWINCH",
        "SIGWINCH
        admitted 7
        SIGWINCH
        started 7
        SIGWINCH
          send winch
        SIGWINCH
          send winch",
    );
}

#[test]
fn a_daemon_that_does_not_take_winch_is_never_sent_it() {
    check(
        "admitted 7
        started-by-an-older-daemon 7
        SIGWINCH",
        "admitted 7
        started-by-an-older-daemon 7
        SIGWINCH",
    );
}

#[test]
fn on_a_pty_a_resize_is_copied_to_it_and_the_kernel_tells_the_job() {
    check_pty(
        "SIGWINCH
        admitted 7
        SIGWINCH",
        "SIGWINCH
          copy the size to the pty
        admitted 7
        SIGWINCH
          copy the size to the pty",
    );
}

/// A session that reattaches (`-reattach=2s`, `-v`): the transcript of a
/// daemon that went away and came back.
fn check_reattach(input: &str, expected: &str) {
    let actual: String = transcript(
        Session::new(false, false).reattach(Duration::from_secs(2), true),
        input,
    )
    .lines()
    .map(|line| format!("{}\n", line.trim_end()))
    .collect();
    let expected = expected
        .lines()
        .map(|line| line.strip_prefix("        ").unwrap_or(line))
        .filter(|line| !line.trim().is_empty())
        .map(|line| format!("{}\n", line.trim_end()))
        .collect::<String>();
    assert!(
        actual == expected,
        "\n--- expected ---\n{expected}--- actual ---\n{actual}"
    );
}

#[test]
fn a_lost_daemon_is_waited_for_and_the_job_reattached() {
    check_reattach(
        "
        admitted 7
        started 7
        lost
        +0
        connect-failed no socket
        +100
        +100
        connected
        SIGINT
        reattached 7
        ended-by SIGINT
        ",
        "
        admitted 7
        started 7
        lost
          say scored went away; waiting up to 2s for it to come back to job 7
        +0
          reconnect to job 7 (descriptors: false)
        connect-failed no socket
        +100
        +100
          reconnect to job 7 (descriptors: false)
        connected
        SIGINT
        reattached 7
          say reattached to job 7
          send SIGINT
        ended-by SIGINT
          finish 130 by SIGINT:
        ",
    );
}

#[test]
fn a_job_that_had_not_started_is_reattached_with_its_descriptors() {
    check_reattach(
        "
        admitted 7
        lost
        +0
        connected
        reattached-unstarted 7
        started 7
        ended exited 0 all processes exited with status 0
        ",
        "
        admitted 7
        lost
          say scored went away; waiting up to 2s for it to come back to job 7
        +0
          reconnect to job 7 (descriptors: true)
        connected
        reattached-unstarted 7
          say reattached to job 7
        started 7
        ended exited 0 all processes exited with status 0
          finish 0:
        ",
    );
}

#[test]
fn a_daemon_that_does_not_come_back_in_time_is_left() {
    check_reattach(
        "
        admitted 7
        started 7
        lost
        +1000
        +1000
        ",
        "
        admitted 7
        started 7
        lost
          say scored went away; waiting up to 2s for it to come back to job 7
        +1000
          reconnect to job 7 (descriptors: false)
        +1000
          finish 69: scrun: scored did not come back within 2s (-reattach); leaving job 7, which is killed when scored returns
        ",
    );
}

/// A suspension while the daemon is away waits for it: scrun stops only
/// once the job is held, as a stopped scrun could not reattach; a daemon
/// that does not come back in time leaves the session, unstopped.
#[test]
fn a_suspension_while_the_daemon_is_away_waits_for_the_hold() {
    check_reattach(
        "
        admitted 7
        started 7
        lost
        +0
        connect-failed no socket
        SIGTSTP
        +1000
        connected
        reattached 7
        +1999
        held 7
        SIGCONT
        ",
        "
        admitted 7
        started 7
        lost
          say scored went away; waiting up to 2s for it to come back to job 7
        +0
          reconnect to job 7 (descriptors: false)
        connect-failed no socket
        SIGTSTP
          say scored is away; job 7 is suspended once it is back
        +1000
          reconnect to job 7 (descriptors: false)
        connected
        reattached 7
          say reattached to job 7
          send hold
        +1999
        held 7
          stop
        SIGCONT
          send release
        ",
    );
    check_reattach(
        "
        admitted 7
        started 7
        lost
        SIGTSTP
        +1000
        +1000
        ",
        "
        admitted 7
        started 7
        lost
          say scored went away; waiting up to 2s for it to come back to job 7
        SIGTSTP
          say scored is away; job 7 is suspended once it is back
        +1000
          reconnect to job 7 (descriptors: false)
        +1000
          finish 69: scrun: scored did not come back within 2s (-reattach); leaving job 7, which is killed when scored returns
        ",
    );
}

/// A connection broken by a killed daemon (a reset) is said only when
/// scrun does not wait quietly for the daemon to come back: with `-v`, or
/// with no job to wait for, or with `-reattach=0`.
#[test]
fn a_broken_connection_is_said_unless_scrun_waits_quietly() {
    let input = "admitted 7\nstarted 7\nbroken connection reset by peer\nlost";
    let reattaching =
        |verbose| Session::new(false, false).reattach(Duration::from_secs(2), verbose);
    let said = "say connection to scored: connection reset by peer";
    let quiet = transcript(reattaching(false), input);
    assert!(!quiet.contains("say "), "{quiet}");
    for (session, input) in [
        (reattaching(true), input),
        (reattaching(false), "broken connection reset by peer\nlost"),
        (Session::new(false, false), input),
    ] {
        let out = transcript(session, input);
        assert!(out.contains(said), "{out}");
    }
}

#[test]
fn a_daemon_that_refuses_the_job_ends_the_session() {
    check_reattach(
        "
        admitted 7
        started 7
        lost
        +0
        connected
        rejected cannot reattach to job 7: no such job
        ",
        "
        admitted 7
        started 7
        lost
          say scored went away; waiting up to 2s for it to come back to job 7
        +0
          reconnect to job 7 (descriptors: false)
        connected
        rejected cannot reattach to job 7: no such job
          finish 69: scrun: scored came back, but: cannot reattach to job 7: no such job
        ",
    );
}

#[test]
fn a_job_that_ended_while_the_daemon_was_away_is_reattached_to_its_end() {
    check_reattach(
        "
        admitted 7
        started 7
        lost
        +0
        connected
        SIGINT
        ended exited 3 rank 0 exited with status 3
        ",
        "
        admitted 7
        started 7
        lost
          say scored went away; waiting up to 2s for it to come back to job 7
        +0
          reconnect to job 7 (descriptors: false)
        connected
        SIGINT
        ended exited 3 rank 0 exited with status 3
          say reattached to job 7, which ended meanwhile
          finish 3:
        ",
    );
}

#[test]
fn a_job_that_ended_before_it_started_is_a_rejected_one_when_reattaching() {
    check_reattach(
        "
        admitted 7
        lost
        +0
        connected
        rejected cannot reattach to job 7: it ended before it started: killed
        ",
        "
        admitted 7
        lost
          say scored went away; waiting up to 2s for it to come back to job 7
        +0
          reconnect to job 7 (descriptors: true)
        connected
        rejected cannot reattach to job 7: it ended before it started: killed
          finish 75: scrun: job rejected: cannot reattach to job 7: it ended before it started: killed
        ",
    );
}
