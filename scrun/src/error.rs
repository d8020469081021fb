//! scrun's own failures: a message naming the object, the exit status it
//! maps to, and the cause it wraps.
//!
//! `main` prints a [`Fatal`] once, as `scrun: message: cause: cause`, by
//! walking [`std::error::Error::source`] with [`chain`]. Nothing here prints
//! by itself, and the job's own exit status never travels as a `Fatal`: that
//! is an ordinary outcome of the session, not an error of scrun.
#![forbid(unsafe_code)]

use std::error::Error;
use std::fmt;
use std::io;

/// A failure of scrun itself, which ends it with [`Fatal::code`].
#[derive(Debug)]
pub struct Fatal {
    code: i32,
    message: String,
    source: Option<Box<dyn Error + Send + Sync>>,
    signal: Option<nix::sys::signal::Signal>,
}

impl Fatal {
    /// A failure with no underlying cause.
    pub fn new(code: i32, message: impl Into<String>) -> Fatal {
        Fatal {
            code,
            message: message.into(),
            source: None,
            signal: None,
        }
    }

    /// scrun was interrupted by `signal` before its job started: it ends
    /// by that signal, silently, as the program would have; `message`
    /// says where it was, for the rare case the signal does not end it.
    pub fn interrupted(signal: nix::sys::signal::Signal, message: impl Into<String>) -> Fatal {
        Fatal {
            code: scored_proto::exitcode::from_signal(signal as i32),
            message: message.into(),
            source: None,
            signal: Some(signal),
        }
    }

    /// The signal scrun ends by, if it was interrupted.
    pub fn signal(&self) -> Option<nix::sys::signal::Signal> {
        self.signal
    }

    /// A failure caused by `source`, which is printed after the message.
    pub fn with_source(
        code: i32,
        message: impl Into<String>,
        source: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> Fatal {
        Fatal {
            code,
            message: message.into(),
            source: Some(source.into()),
            signal: None,
        }
    }

    /// The exit status scrun ends with.
    pub fn code(&self) -> i32 {
        self.code
    }
}

impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error for Fatal {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn Error + 'static))
    }
}

/// Renders an error and its causes as `outer: inner: errno text`.
///
/// System errors are shown by their description alone, lowercased
/// (`no such file or directory`), without the `(os error 2)` that
/// `io::Error` appends, so that messages read as one sentence.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut current = Some(error);
    while let Some(error) = current {
        parts.push(describe(error));
        // An io::Error that wraps a custom error shows that error's text
        // in its own Display and returns it again as its source; skip the
        // repeat.
        current = match error.downcast_ref::<io::Error>() {
            Some(io_error) if io_error.get_ref().is_some() => None,
            _ => error.source(),
        };
    }
    parts.join(": ")
}

/// One link of the chain.
fn describe(error: &(dyn Error + 'static)) -> String {
    match error.downcast_ref::<io::Error>() {
        Some(io_error) => describe_io(io_error),
        None => error.to_string(),
    }
}

/// An I/O error as a lowercase phrase.
pub fn describe_io(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(errno) => lowercase_first(nix::errno::Errno::from_raw(errno).desc()),
        None => error.to_string(),
    }
}

/// Lowercases the first letter of a system error description.
fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_shows_system_errors_as_phrases() {
        let fatal = Fatal::with_source(
            69,
            "cannot reach scored at /run/x.sock",
            io::Error::from_raw_os_error(libc::EACCES),
        );
        assert_eq!(
            chain(&fatal),
            "cannot reach scored at /run/x.sock: permission denied"
        );
        assert_eq!(fatal.code(), 69);
    }

    #[test]
    fn chain_shows_custom_io_errors_once() {
        let inner = io::Error::new(io::ErrorKind::InvalidData, "bad reply from scored: junk");
        let fatal = Fatal::with_source(70, "cannot read from scored", inner);
        assert_eq!(
            chain(&fatal),
            "cannot read from scored: bad reply from scored: junk"
        );
    }

    #[test]
    fn chain_without_source_is_the_message() {
        assert_eq!(
            chain(&Fatal::new(64, "no program given")),
            "no program given"
        );
    }
}
