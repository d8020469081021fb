//! One log record, one line.
//!
//! Log records carry what users hand to scored (working directories,
//! arguments, reasons, the text of errors that quote a path), and a newline
//! in such a string would let a user write a line of their own into root's
//! log: a forged `WARN ... operator root granted`. [`OneLine`] sits between
//! the log formatter and standard error and escapes, inside each record,
//! every character that could start a new line or rewrite one: the control
//! characters (`\n` and `\r` written as such, the others as `\xHH`) and the
//! Unicode line and paragraph separators (`\u{85}`, `\u{2028}`, `\u{2029}`).
//! The record's own final newline is kept. Escape sequences that colour the
//! output are kept only when the log goes to a terminal with colours on.
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::io::{self, Write};

/// Escapes one record so that it is one line (see the module doc); keeps
/// ESC when `keep_escape` (colours on a terminal).
pub fn escape_record(record: &str, keep_escape: bool) -> String {
    let (body, newline) = match record.strip_suffix('\n') {
        Some(body) => (body, true),
        None => (record, false),
    };
    let mut out = String::with_capacity(record.len() + 8);
    for ch in body.chars() {
        match ch {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push('\t'),
            '\x1b' if keep_escape => out.push(ch),
            '\u{85}' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{{{:x}}}", ch as u32);
            }
            _ if ch.is_control() => {
                let _ = write!(out, "\\x{:02x}", ch as u32);
            }
            _ => out.push(ch),
        }
    }
    if newline {
        out.push('\n');
    }
    out
}

/// A writer that escapes each record it is given (one `write` per record, as
/// the log formatter writes them) and writes it to standard error.
#[derive(Debug, Clone, Copy)]
pub struct OneLine {
    /// Whether colour escape sequences are kept.
    pub ansi: bool,
}

impl Write for OneLine {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        io::stderr()
            .lock()
            .write_all(escape_record(&text, self.ansi).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_with_newlines_stays_one_line() {
        let record = "INFO launch failed job=3 message=cannot enter /tmp/x\n2026-11-27T09:00:00Z  WARN operator root granted\r\n";
        let escaped = escape_record(record, false);
        assert_eq!(
            escaped,
            "INFO launch failed job=3 message=cannot enter /tmp/x\\n2026-11-27T09:00:00Z  WARN operator root granted\\r\n"
        );
        assert_eq!(escaped.lines().count(), 1);
    }

    #[test]
    fn controls_and_separators_are_escaped_tabs_and_text_kept() {
        assert_eq!(
            escape_record("a\tb\x1b[2Kc\x07d\u{85}e\u{2028}f\u{2029}g é ✓\n", false),
            "a\tb\\x1b[2Kc\\x07d\\u{85}e\\u{2028}f\\u{2029}g é ✓\n"
        );
        assert_eq!(
            escape_record("\x1b[32mINFO\x1b[0m x\n", true),
            "\x1b[32mINFO\x1b[0m x\n"
        );
        assert_eq!(escape_record("no newline", false), "no newline");
    }
}
