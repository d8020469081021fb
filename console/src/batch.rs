//! The non-interactive modes: one line given with `-c`, and a script read
//! from standard input.
//!
//! Both write to the streams they are given and return the exit status, so
//! tests run them on strings with a fake daemon. They never read the
//! terminal and never exit the process themselves.
#![forbid(unsafe_code)]

use std::io::{self, Write};

use scored_proto::exitcode;

use crate::session::{chain, execute, io_text, SendLine};

/// Runs the line of `-c`: the answer goes to `out` when the command
/// succeeds, its text to `err` when it fails (status 1).
pub fn run_line(
    line: &str,
    json: bool,
    send: &mut SendLine<'_>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> io::Result<i32> {
    match execute(line, json, send) {
        Ok(None) => Ok(exitcode::OK),
        Ok(Some(answer)) if answer.ok => {
            out.write_all(answer.output(json).as_bytes())?;
            out.flush()?;
            Ok(exitcode::OK)
        }
        Ok(Some(answer)) => {
            // The failure's own text, `error: ...`, as the daemon wrote it.
            out.flush()?;
            err.write_all(answer.output(false).as_bytes())?;
            Ok(exitcode::FAILURE)
        }
        Err(error) => {
            writeln!(err, "sc_console: {}", chain(&error))?;
            Ok(error.exit_code())
        }
    }
}

/// Runs a script, one console line per line: blank and `#` lines are
/// skipped, answers are written to `out` as they come, and the first line
/// that fails stops the script with `sc_console: stdin:LINE: message` on
/// `err` (status 1). Lines that do not parse fail the same way without
/// reaching the daemon.
pub fn run_script<I>(
    lines: I,
    json: bool,
    send: &mut SendLine<'_>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> io::Result<i32>
where
    I: IntoIterator<Item = io::Result<String>>,
{
    for (idx, line) in lines.into_iter().enumerate() {
        let line_no = idx + 1;
        let line = match line {
            Ok(line) => line,
            Err(error) => {
                out.flush()?;
                writeln!(
                    err,
                    "sc_console: stdin:{line_no}: cannot read the line: {}",
                    io_text(&error)
                )?;
                return Ok(exitcode::FAILURE);
            }
        };
        match execute(&line, json, send) {
            Ok(None) => {}
            Ok(Some(answer)) if answer.ok => {
                out.write_all(answer.output(json).as_bytes())?;
                out.flush()?;
            }
            Ok(Some(answer)) => {
                out.flush()?;
                writeln!(err, "sc_console: stdin:{line_no}: {}", answer.message())?;
                return Ok(exitcode::FAILURE);
            }
            Err(error) => {
                out.flush()?;
                writeln!(err, "sc_console: {}", chain(&error))?;
                return Ok(error.exit_code());
            }
        }
    }
    Ok(exitcode::OK)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::session::{Answer, DaemonError};

    /// A daemon that answers `done: LINE` (JSON `{"ok": true}`), fails lines
    /// starting with `kill 9` with `error: no job 9`, and breaks the
    /// connection on `shutdown now`.
    fn fake(line: &str, json: bool) -> Result<Answer, DaemonError> {
        if line.starts_with("kill 9") {
            return Ok(Answer {
                ok: false,
                text: "error: no job 9\n".to_string(),
                json: json.then(|| serde_json::json!({ "error": "no job 9" })),
            });
        }
        if line == "shutdown now" {
            return Err(DaemonError::Lost(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "scored closed the connection",
            )));
        }
        Ok(Answer {
            ok: true,
            text: format!("done: {line}\n"),
            json: json.then(|| serde_json::json!({ "ok": true })),
        })
    }

    /// Runs a script on the fake daemon: exit status, stdout, stderr, and
    /// the lines the daemon saw.
    fn script(input: &str, json: bool) -> (i32, String, String, Vec<String>) {
        let mut seen = Vec::new();
        let mut send = |line: &str, json: bool| {
            seen.push(line.to_string());
            fake(line, json)
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let lines = input.lines().map(|line| Ok(line.to_string()));
        let status = run_script(lines, json, &mut send, &mut out, &mut err).unwrap();
        (
            status,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
            seen,
        )
    }

    #[track_caller]
    fn check(input: &str, status: i32, stdout: &str, stderr: &str) {
        let (actual_status, actual_out, actual_err, _) = script(input, false);
        assert_eq!(
            (actual_status, actual_out.as_str(), actual_err.as_str()),
            (status, stdout, stderr),
            "\n--- script ---\n{input}\n--- stdout ---\n{actual_out}--- stderr ---\n{actual_err}"
        );
    }

    #[test]
    fn runs_every_line_and_skips_blanks_and_comments() {
        check(
            "jobs\n\n# a comment\n   \nqueue 1 disable\n",
            0,
            "done: jobs\ndone: queue 1 disable\n",
            "",
        );
        check("", 0, "", "");
    }

    #[test]
    fn first_failing_line_stops_the_script_with_its_number() {
        check(
            "jobs\n# next fails\nkill 9\nqueues\n",
            1,
            "done: jobs\n",
            "sc_console: stdin:3: no job 9\n",
        );
    }

    #[test]
    fn lines_that_do_not_parse_never_reach_the_daemon() {
        let (status, out, err, seen) = script("jobs\n\nqueue x enable\nqueues\n", false);
        assert_eq!(status, 1);
        assert_eq!(out, "done: jobs\n");
        assert!(
            err.starts_with("sc_console: stdin:3: ") && !err.contains("error:"),
            "{err}"
        );
        assert!(err.contains("'x'"), "{err}");
        assert_eq!(seen, ["jobs"]);
    }

    #[test]
    fn help_is_answered_locally() {
        let (status, out, err, seen) = script("help move\n", false);
        assert_eq!((status, err.as_str()), (0, ""));
        assert!(out.starts_with("usage: move ID Q\n"), "{out}");
        assert!(seen.is_empty());
    }

    #[test]
    fn a_lost_connection_ends_the_script_as_an_internal_error() {
        check(
            "jobs\nshutdown now\njobs\n",
            70,
            "done: jobs\n",
            "sc_console: lost the connection to scored: scored closed the connection\n",
        );
    }

    #[test]
    fn unreadable_input_names_the_line() {
        let lines = vec![
            Ok("jobs".to_string()),
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            )),
        ];
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = run_script(lines, false, &mut fake, &mut out, &mut err).unwrap();
        assert_eq!(status, 1);
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "sc_console: stdin:2: cannot read the line: stream did not contain valid UTF-8\n"
        );
    }

    #[test]
    fn json_answers_are_pretty_printed() {
        let (status, out, _, _) = script("jobs\nqueues\n", true);
        assert_eq!(status, 0);
        assert_eq!(out, "{\n  \"ok\": true\n}\n{\n  \"ok\": true\n}\n");
    }

    /// Runs `-c LINE` on the fake daemon.
    fn line(line: &str, json: bool) -> (i32, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = run_line(line, json, &mut fake, &mut out, &mut err).unwrap();
        (
            status,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn one_line_prints_its_answer() {
        assert_eq!(line("jobs", false), (0, "done: jobs\n".into(), "".into()));
        assert_eq!(
            line("jobs", true),
            (0, "{\n  \"ok\": true\n}\n".into(), "".into())
        );
        assert_eq!(line("# nothing", false), (0, "".into(), "".into()));
    }

    #[test]
    fn one_failing_line_prints_the_error_text() {
        assert_eq!(
            line("kill 9", false),
            (1, "".into(), "error: no job 9\n".into())
        );
        // Errors stay text with --json: scripts read the JSON of successes only.
        assert_eq!(
            line("kill 9", true),
            (1, "".into(), "error: no job 9\n".into())
        );
        let (status, out, err) = line("queue x enable", false);
        assert_eq!((status, out.as_str()), (1, ""));
        assert!(err.starts_with("error: "), "{err}");
    }

    #[test]
    fn one_help_line_needs_no_daemon() {
        let mut unreachable = |_: &str, _: bool| -> Result<Answer, DaemonError> {
            Err(DaemonError::Unreachable {
                path: PathBuf::from("/nonexistent/scored.sock"),
                source: io::Error::from_raw_os_error(2),
            })
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = run_line("help", false, &mut unreachable, &mut out, &mut err).unwrap();
        assert_eq!(status, 0);
        assert!(String::from_utf8(out).unwrap().starts_with("commands"));

        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = run_line("jobs", false, &mut unreachable, &mut out, &mut err).unwrap();
        assert_eq!(status, 69);
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "sc_console: cannot reach scored at /nonexistent/scored.sock: \
             no such file or directory\n"
        );
    }
}
