//! One console line from the operator to an answer, for every mode: the line
//! is checked locally with the console parser, `help` is answered locally,
//! and everything else goes to the daemon.
//!
//! The daemon is reached through a closure ([`execute`]) so that the modes
//! can be tested with a fake one; [`Daemon`] is the real one, a connection
//! opened on first use. This module prints nothing.
#![forbid(unsafe_code)]

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use scored_proto::client::{self, Connection, SocketSource};
use scored_proto::command::reply::Reply;
use scored_proto::command::{help, parse_line, Command};
use scored_proto::exitcode;

/// The answer to one console line.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// Whether the command succeeded.
    pub ok: bool,
    /// The text form (tables, `key: value` lines, or `error: ...`).
    pub text: String,
    /// The JSON form, when it was asked for and the daemon sent it.
    pub json: Option<serde_json::Value>,
}

impl Answer {
    /// The answer the daemon would give, rendered locally.
    fn local(reply: Reply) -> Answer {
        Answer {
            ok: !reply.is_error(),
            text: reply.to_text(),
            json: Some(reply.to_json()),
        }
    }

    /// What to print on success: the JSON pretty-printed when it was asked
    /// for, else the text; either ends with a newline unless it is empty.
    pub fn output(&self, json: bool) -> String {
        let mut out = match (&self.json, json) {
            (Some(value), true) => {
                serde_json::to_string_pretty(value).unwrap_or_else(|_| self.text.clone())
            }
            _ => self.text.clone(),
        };
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out
    }

    /// The error message without the `error: ` prefix and the final newline,
    /// for `stdin:LINE: message`.
    pub fn message(&self) -> &str {
        let text = self.text.trim_end();
        text.strip_prefix("error:").map_or(text, str::trim_start)
    }
}

/// Why a line got no answer at all.
#[derive(Debug)]
pub enum DaemonError {
    /// The daemon's socket could not be connected to.
    Unreachable {
        /// The socket path tried.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The connection broke, or the daemon broke the protocol.
    Lost(io::Error),
}

impl DaemonError {
    /// The exit status this error ends sc_console with.
    pub fn exit_code(&self) -> i32 {
        match self {
            DaemonError::Unreachable { .. } => exitcode::UNREACHABLE,
            DaemonError::Lost(_) => exitcode::INTERNAL,
        }
    }
}

impl fmt::Display for DaemonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DaemonError::Unreachable { path, .. } => {
                write!(f, "cannot reach scored at {}", path.display())
            }
            DaemonError::Lost(_) => f.write_str("lost the connection to scored"),
        }
    }
}

impl std::error::Error for DaemonError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DaemonError::Unreachable { source, .. } | DaemonError::Lost(source) => Some(source),
        }
    }
}

/// An error and its causes, `outer: inner: ...`, as printed once at the top.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error_text(error);
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&error_text(inner));
        cause = inner.source();
    }
    text
}

fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    match error.downcast_ref::<io::Error>() {
        Some(io_error) => io_text(io_error),
        None => error.to_string(),
    }
}

/// An I/O error as a lowercase phrase without the `(os error N)` suffix,
/// following the style of every other message.
pub fn io_text(error: &io::Error) -> String {
    let text = error.to_string();
    let text = match text.find(" (os error ") {
        Some(idx) if text.ends_with(')') => &text[..idx],
        _ => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// How a line is sent: the line, and whether to ask for JSON.
pub type SendLine<'a> = dyn FnMut(&str, bool) -> Result<Answer, DaemonError> + 'a;

/// Runs one line: `Ok(None)` for a blank or comment line, a local answer
/// for a line that does not parse or asks for help, else the daemon's.
pub fn execute(
    line: &str,
    json: bool,
    send: &mut SendLine<'_>,
) -> Result<Option<Answer>, DaemonError> {
    match parse_line(line) {
        Ok(None) => Ok(None),
        Err(error) => Ok(Some(Answer::local(Reply::Error(error.message)))),
        // The help table is compiled into sc_console too, so help works
        // without a daemon and costs no round trip.
        Ok(Some(Command::Help(topic))) => {
            Ok(Some(Answer::local(match help::help(topic.as_deref()) {
                Ok(text) => Reply::Text(text),
                Err(unknown) => Reply::Error(unknown.to_string()),
            })))
        }
        Ok(Some(_)) => send(line, json).map(Some),
    }
}

/// The real daemon: a connection opened at the first line that needs it,
/// so `help` and comment-only scripts work without one.
pub struct Daemon {
    path: PathBuf,
    source: SocketSource,
    connection: Option<Connection>,
}

impl Daemon {
    /// A daemon at this socket, not connected yet; a default socket where
    /// no daemon answers gives way to the shared one (see
    /// [`client::shared_socket`]).
    pub fn new(path: PathBuf, source: SocketSource) -> Daemon {
        Daemon {
            path,
            source,
            connection: None,
        }
    }

    /// The socket path this session connects to (the one it reached, once
    /// connected).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Connects now, if not connected yet.
    pub fn connect(&mut self) -> Result<&mut Connection, DaemonError> {
        match self.connection {
            Some(ref mut connection) => Ok(connection),
            None => {
                let (connection, reached) = client::connect_default(&self.path, self.source)
                    .or_else(|error| self.roots_private(error))
                    .map_err(|source| DaemonError::Unreachable {
                        path: self.path.clone(),
                        source,
                    })?;
                self.path = reached;
                Ok(self.connection.insert(connection))
            }
        }
    }

    /// For root, when no shared daemon answers at the default socket:
    /// root's private daemon, which scrun starts when none runs (a user's
    /// default socket is the private one already); else `error`.
    fn roots_private(&self, error: std::io::Error) -> std::io::Result<(Connection, PathBuf)> {
        let Some(private) = client::roots_private_socket(self.source) else {
            return Err(error);
        };
        if !client::means_no_daemon(&error) {
            return Err(error);
        }
        match Connection::connect(&private) {
            Ok(connection) => Ok((connection, private)),
            Err(_) => Err(error),
        }
    }

    /// Sends one line and waits for the answer.
    pub fn send(&mut self, line: &str, json: bool) -> Result<Answer, DaemonError> {
        let connection = self.connect()?;
        match connection.console(line, json) {
            Ok((ok, text, json)) => Ok(Answer { ok, text, json }),
            Err(error) => {
                // A connection that failed once is not used again.
                self.connection = None;
                Err(DaemonError::Lost(error))
            }
        }
    }

    /// The JSON listing `command` answers, or nothing if the daemon cannot
    /// give it. Used for completion, which must not fail loudly.
    pub fn listing(&mut self, command: &str) -> Option<serde_json::Value> {
        // Completion never opens a connection: the shell opened one at the
        // start, and a lost one is reported by the next command.
        let connection = self.connection.as_mut()?;
        match connection.console(command, true) {
            Ok((true, _, listing)) => listing,
            Ok(_) => None,
            Err(_) => {
                self.connection = None;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(ok: bool, text: &str) -> Answer {
        Answer {
            ok,
            text: text.to_string(),
            json: None,
        }
    }

    #[test]
    fn blank_and_comment_lines_are_skipped_without_the_daemon() {
        let mut send = |_: &str, _: bool| -> Result<Answer, DaemonError> {
            panic!("the daemon must not be asked")
        };
        for line in ["", "   ", "# a comment", "  # indented"] {
            assert_eq!(execute(line, false, &mut send).unwrap(), None);
        }
    }

    #[test]
    fn bad_lines_and_help_are_answered_locally() {
        let mut send = |_: &str, _: bool| -> Result<Answer, DaemonError> {
            panic!("the daemon must not be asked")
        };
        let bad = execute("stauts", true, &mut send).unwrap().unwrap();
        assert!(!bad.ok);
        assert!(bad.text.starts_with("error: "), "{}", bad.text);
        assert!(bad.text.contains("did you mean 'status'?"), "{}", bad.text);
        assert_eq!(bad.json.as_ref().unwrap()["error"], bad.message());

        let help = execute("help kill", false, &mut send).unwrap().unwrap();
        assert!(help.ok);
        assert!(
            help.text
                .starts_with("usage: kill [-s SIGNAL] ID [ID...]\n"),
            "{}",
            help.text
        );
        assert_eq!(help.json.as_ref().unwrap()["text"], help.text);
    }

    #[test]
    fn commands_go_to_the_daemon_unchanged() {
        let mut seen = Vec::new();
        let mut send = |line: &str, json: bool| {
            seen.push((line.to_string(), json));
            Ok(answer(true, "done\n"))
        };
        let reply = execute("jobs  all", true, &mut send).unwrap().unwrap();
        assert_eq!(reply, answer(true, "done\n"));
        assert_eq!(seen, [("jobs  all".to_string(), true)]);
    }

    #[test]
    fn output_prefers_json_when_asked() {
        let mut reply = answer(true, "ID\n7");
        assert_eq!(reply.output(false), "ID\n7\n");
        assert_eq!(reply.output(true), "ID\n7\n");
        reply.json = Some(serde_json::json!([{ "id": 7 }]));
        assert_eq!(reply.output(true), "[\n  {\n    \"id\": 7\n  }\n]\n");
        assert_eq!(answer(true, "").output(false), "");
    }

    #[test]
    fn message_drops_the_error_prefix() {
        assert_eq!(answer(false, "error: no job 9\n").message(), "no job 9");
        assert_eq!(answer(false, "odd failure\n").message(), "odd failure");
    }

    #[test]
    fn io_errors_read_like_the_other_messages() {
        let error = io::Error::from_raw_os_error(2);
        assert_eq!(io_text(&error), "no such file or directory");
        let custom = io::Error::new(io::ErrorKind::UnexpectedEof, "scored closed the connection");
        assert_eq!(io_text(&custom), "scored closed the connection");
        let lost = DaemonError::Lost(custom);
        assert_eq!(lost.to_string(), "lost the connection to scored");
        assert_eq!(
            chain(&lost),
            "lost the connection to scored: scored closed the connection"
        );
        assert_eq!(lost.exit_code(), exitcode::INTERNAL);
        let unreachable = DaemonError::Unreachable {
            path: PathBuf::from("/run/x.sock"),
            source: error,
        };
        assert_eq!(
            chain(&unreachable),
            "cannot reach scored at /run/x.sock: no such file or directory"
        );
        assert_eq!(unreachable.exit_code(), exitcode::UNREACHABLE);
    }
}
