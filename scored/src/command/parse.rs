//! The console line parser.
#![forbid(unsafe_code)]

/// A parse error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

/// Parses one line.
pub fn parse_line(_line: &str) -> Result<Option<super::Command>, ParseError> {
    Err(ParseError("not yet".into()))
}
