//! Lexing of hosts database text: logical lines, comments and words.
//!
//! [`LogicalLines`] joins physical lines ending in `\`; [`Lexer::line`] removes
//! comments from one logical line and splits it into words with their
//! positions, recognising directive lines. Both only borrow the text and never
//! fail on any input: problems come back as [`LexError`] values. The lexer
//! knows nothing of macros, files or records.
#![forbid(unsafe_code)]

use super::MAX_LINE_LEN;

/// A 1-based line and column (in characters) in one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pos {
    /// The 1-based line.
    pub line: usize,
    /// The 1-based column, in characters.
    pub col: usize,
}

/// A word of a line and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tok {
    /// The word as it is written in the file.
    pub text: String,
    /// Where its first character is.
    pub pos: Pos,
}

/// Physical lines joined by trailing backslashes.
#[derive(Debug)]
pub(super) struct LogicalLine<'t> {
    /// The number of its first physical line.
    pub first_line: usize,
    /// Each physical line's number and text, without the line end and the
    /// joining `\`.
    pub segments: Vec<(usize, &'t str)>,
    /// Whether it is longer than [`MAX_LINE_LEN`]; its segments are then
    /// incomplete and it must be reported, not read.
    pub too_long: bool,
}

/// Iterates over the logical lines of a text.
pub(super) struct LogicalLines<'t> {
    physical: std::str::Split<'t, char>,
    line_no: usize,
}

impl<'t> LogicalLines<'t> {
    /// The logical lines of `text`.
    pub fn new(text: &'t str) -> LogicalLines<'t> {
        LogicalLines {
            physical: text.split('\n'),
            line_no: 0,
        }
    }
}

impl<'t> Iterator for LogicalLines<'t> {
    type Item = LogicalLine<'t>;

    fn next(&mut self) -> Option<LogicalLine<'t>> {
        let mut raw = self.physical.next()?;
        self.line_no += 1;
        let first_line = self.line_no;
        let mut segments = Vec::new();
        let mut length = 0usize;
        let mut too_long = false;
        loop {
            let text = raw.strip_suffix('\r').unwrap_or(raw);
            let (content, continues) = match text.trim_end_matches([' ', '\t']).strip_suffix('\\') {
                Some(content) => (content, true),
                None => (text, false),
            };
            length = length.saturating_add(raw.len() + 1);
            // Past the limit the segments are no longer kept, so that a file
            // made of nothing but backslashes costs no memory; the lines are
            // still consumed so that the next logical line starts right.
            if length > MAX_LINE_LEN {
                too_long = true;
                segments.clear();
            } else {
                segments.push((self.line_no, content));
            }
            if !continues {
                break;
            }
            match self.physical.next() {
                Some(next) => {
                    self.line_no += 1;
                    raw = next;
                }
                None => break,
            }
        }
        Some(LogicalLine {
            first_line,
            segments,
            too_long,
        })
    }
}

/// A directive the hosts database supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Directive {
    /// `#define NAME words...`
    Define,
    /// `#undef NAME`
    Undef,
    /// `#include "FILE"`
    Include,
}

/// What one logical line holds.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Line {
    /// Nothing but blanks and comments.
    Empty,
    /// A `#` comment line.
    Comment,
    /// A directive and its words.
    Directive {
        /// Which directive.
        directive: Directive,
        /// Where its `#` is.
        pos: Pos,
        /// The words after the directive's name.
        args: Vec<Tok>,
    },
    /// A C conditional (`#ifdef` and the like), which the format lacks.
    Conditional {
        /// The directive's name, without `#`.
        word: String,
        /// Where its `#` is.
        pos: Pos,
    },
    /// The words of a record, before macro expansion.
    Record(Vec<Tok>),
}

/// A line the lexer could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LexError {
    /// Where the problem is.
    pub pos: Pos,
    /// What it is.
    pub message: String,
}

/// Lexes the logical lines of one file in order, carrying an open `/*`
/// comment from line to line.
#[derive(Debug, Default)]
pub(super) struct Lexer {
    /// Where the `/*` comment that is still open started, if any.
    pub open_comment: Option<Pos>,
}

impl Lexer {
    /// Splits one logical line into words, without comments.
    pub fn line(&mut self, line: &LogicalLine<'_>) -> Result<Line, LexError> {
        let mut chars = line
            .segments
            .iter()
            .flat_map(|&(line_no, text)| {
                text.chars().enumerate().map(move |(idx, ch)| {
                    (
                        ch,
                        Pos {
                            line: line_no,
                            col: idx + 1,
                        },
                    )
                })
            })
            .peekable();
        let mut words: Vec<Tok> = Vec::new();
        let mut current: Option<Tok> = None;
        let mut directive: Option<(Directive, Pos)> = None;
        let mut started = false;
        let mut open_quote: Option<Pos> = None;
        let mut error: Option<LexError> = None;
        let finish = |current: &mut Option<Tok>, words: &mut Vec<Tok>| {
            if let Some(word) = current.take() {
                words.push(word);
            }
        };
        let push = |current: &mut Option<Tok>, ch: char, pos: Pos| match current {
            Some(word) => word.text.push(ch),
            None => {
                *current = Some(Tok {
                    text: ch.to_string(),
                    pos,
                })
            }
        };
        while let Some((ch, pos)) = chars.next() {
            let next = chars.peek().map(|&(next, _)| next);
            if self.open_comment.is_some() {
                if ch == '*' && next == Some('/') {
                    chars.next();
                    self.open_comment = None;
                }
                continue;
            }
            if ch.is_control() && ch != '\t' && error.is_none() {
                // The scan goes on after an error so that a `/*` later on the
                // line still opens a comment for the lines that follow.
                error = Some(LexError {
                    pos,
                    message: format!(
                        "control character U+{:04X} is not allowed in a hosts database",
                        ch as u32
                    ),
                });
            }
            if open_quote.is_some() {
                push(&mut current, ch, pos);
                if ch == '"' {
                    open_quote = None;
                }
                continue;
            }
            match ch {
                ' ' | '\t' => finish(&mut current, &mut words),
                '/' if next == Some('/') => break,
                '/' if next == Some('*') => {
                    chars.next();
                    finish(&mut current, &mut words);
                    self.open_comment = Some(pos);
                }
                '#' if !started => {
                    started = true;
                    let mut word = String::new();
                    while let Some(&(next, _)) = chars.peek() {
                        if !(next.is_ascii_alphanumeric() || next == '_') {
                            break;
                        }
                        word.push(next);
                        chars.next();
                    }
                    match word.as_str() {
                        "define" => directive = Some((Directive::Define, pos)),
                        "undef" => directive = Some((Directive::Undef, pos)),
                        "include" => directive = Some((Directive::Include, pos)),
                        "if" | "ifdef" | "ifndef" | "elif" | "else" | "endif" => {
                            return Ok(Line::Conditional { word, pos });
                        }
                        // A comment: nothing after `#` is read, not even a `/*`.
                        _ => return Ok(Line::Comment),
                    }
                }
                '"' if matches!(directive, Some((Directive::Include, _))) => {
                    push(&mut current, ch, pos);
                    open_quote = Some(pos);
                }
                _ => {
                    started = true;
                    push(&mut current, ch, pos);
                }
            }
        }
        finish(&mut current, &mut words);
        if let Some(error) = error {
            return Err(error);
        }
        if let Some(pos) = open_quote {
            return Err(LexError {
                pos,
                message: "unterminated quoted file name: expected a closing '\"'".into(),
            });
        }
        Ok(match directive {
            Some((directive, pos)) => Line::Directive {
                directive,
                pos,
                args: words,
            },
            None if words.is_empty() => Line::Empty,
            None => Line::Record(words),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lexes `text` line by line and renders each logical line compactly.
    fn lex(text: &str) -> String {
        let mut lexer = Lexer::default();
        let mut out = Vec::new();
        for line in LogicalLines::new(text) {
            let rendered = match lexer.line(&line) {
                Ok(Line::Empty) => "empty".to_string(),
                Ok(Line::Comment) => "comment".to_string(),
                Ok(Line::Conditional { word, pos }) => {
                    format!("conditional {word} @{}:{}", pos.line, pos.col)
                }
                Ok(Line::Directive {
                    directive, args, ..
                }) => format!("{directive:?} {}", words(&args)),
                Ok(Line::Record(toks)) => format!("record {}", words(&toks)),
                Err(error) => format!(
                    "error @{}:{} {}",
                    error.pos.line, error.pos.col, error.message
                ),
            };
            out.push(format!("{}: {rendered}", line.first_line));
        }
        if let Some(pos) = lexer.open_comment {
            out.push(format!("open comment @{}:{}", pos.line, pos.col));
        }
        out.join("\n")
    }

    fn words(toks: &[Tok]) -> String {
        toks.iter()
            .map(|tok| format!("{}@{}:{}", tok.text, tok.pos.line, tok.pos.col))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn check(text: &str, expected: &str) {
        let actual = lex(text);
        assert_eq!(
            actual, expected,
            "\nexpected:\n{expected}\nactual:\n{actual}\n"
        );
    }

    #[test]
    fn words_and_positions() {
        check("a b=1\tc", "1: record a@1:1 b=1@1:3 c@1:7");
        check("  a  ", "1: record a@1:3");
        check("", "1: empty");
        check("a\r\nb", "1: record a@1:1\n2: record b@2:1");
    }

    #[test]
    fn continuation_joins_without_a_blank() {
        check("a b\\\nc", "1: record a@1:1 bc@1:3");
        check("a \\  \n c", "1: record a@1:1 c@2:2");
        check("a \\", "1: record a@1:1");
        check("# x \\\nb", "1: comment");
    }

    #[test]
    fn comments() {
        check("a // b", "1: record a@1:1");
        check("a/*x*/b", "1: record a@1:1 b@1:7");
        check("a /* x\ny */ b", "1: record a@1:1\n2: record b@2:6");
        check("a /* x", "1: record a@1:1\nopen comment @1:3");
        check("# a /* b", "1: comment");
        check("  #a", "1: comment");
        check("a #b", "1: record a@1:1 #b@1:3");
        check("/* x */ #c", "1: comment");
    }

    #[test]
    fn directives() {
        check("#define A b c", "1: Define A@1:9 b@1:11 c@1:13");
        check("#include \"a b.db\" x", "1: Include \"a b.db\"@1:10 x@1:19");
        check("#include\"a\"", "1: Include \"a\"@1:9");
        check("#include \"a //b\"", "1: Include \"a //b\"@1:10");
        check("#ifdef X", "1: conditional ifdef @1:1");
        check("#defined X", "1: comment");
        check("# define X", "1: comment");
        check(
            "#include \"a",
            "1: error @1:10 unterminated quoted file name: expected a closing '\"'",
        );
    }

    #[test]
    fn control_characters() {
        check(
            "a\0b",
            "1: error @1:2 control character U+0000 is not allowed in a hosts database",
        );
        check("a /*\0*/", "1: record a@1:1");
        check(
            "a\x0c /* x",
            "1: error @1:2 control character U+000C is not allowed in a hosts database\nopen comment @1:4",
        );
    }

    #[test]
    fn long_lines_are_flagged_not_kept() {
        let long = format!("{}b\nc", "\\\n".repeat(MAX_LINE_LEN));
        let lines: Vec<_> = LogicalLines::new(&long).collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].too_long && lines[0].segments.is_empty());
        assert_eq!(lines[1].segments, [(MAX_LINE_LEN + 2, "c")]);
    }
}
