//! Property of the console language parser (`scored_proto::command`).
//!
//! The input is one console line (bytes that are not UTF-8 are replaced,
//! since the protocol carries the line as a JSON string).
//!
//! Properties:
//! - `parse_line` never panics, and every error has a message;
//! - a parsed command prints back (`render`) to text that parses to the
//!   same command, and that text is canonical: printing it again gives the
//!   same text;
//! - a final `\n`, as read from `scored.rc`, changes nothing;
//! - `is_changing` and the help for the command's name never panic.
#![forbid(unsafe_code)]

use scored_proto::command::help;
use scored_proto::command::parse::{parse_line, render, MAX_LINE};

/// Checks the properties on one input; panics when one fails.
pub fn check(data: &[u8]) {
    let line = String::from_utf8_lossy(data);
    let parsed = parse_line(&line);
    match &parsed {
        Ok(None) => {}
        Ok(Some(command)) => {
            let text = render(command);
            let reparsed = parse_line(&text);
            assert_eq!(
                reparsed,
                Ok(Some(command.clone())),
                "{line:?} parses to {command:?}, printed as {text:?}"
            );
            assert_eq!(render(command), text, "printing {command:?} twice differs");
            let _ = command.is_changing();
            if let Some(name) = text.split(' ').next() {
                assert!(
                    help::help(Some(name)).is_ok(),
                    "{text:?} parses but has no help entry"
                );
            }
        }
        Err(error) => {
            assert!(
                !error.message.is_empty(),
                "{line:?}: an empty error message"
            );
            let _ = error.to_string();
        }
    }
    if !line.ends_with(['\n', '\r']) && line.len() < MAX_LINE {
        assert_eq!(
            parse_line(&format!("{line}\n")),
            parsed,
            "{line:?} parses differently with a final newline"
        );
    }
}
