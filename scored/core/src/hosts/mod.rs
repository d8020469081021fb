//! The hosts database (scorehosts.db(5)): parsing and resolution into a topology.
//!
//! This module owns the text format of the hosts database and its meaning. It
//! works in two pure layers, following the two-layer parsers of the style guide
//! (§1.6). [`parse`] turns the text of the database, and of the files it
//! includes, into a [`Database`] of records together with every diagnostic it
//! found; it reads files only through a [`Loader`], so tests feed it strings.
//! [`resolve`] checks the host attributes against the [`Machine`] the shell
//! read and builds the [`Topology`]. The daemon's loader touches the file
//! system; nothing here reads a clock, spawns, signals or calls the kernel.
//!
//! # Syntax
//!
//! The format is the SCore-compatible subset of scorehosts.db(5). Where SCore leaves a
//! choice open, we follow the C preprocessor, because SCore runs this file
//! through one, and we write the choice down here:
//!
//! - A line ending in `\` (blanks after the `\` are allowed) is joined to the
//!   next one with nothing in between, before comments are removed. As in C, a
//!   `\` at the end of a `#` or `//` comment continues the comment.
//! - `/* ... */` may span lines and separates words like a blank. `//` ends
//!   the line. A line whose first word starts with `#` is a comment, except the
//!   directives `#define`, `#undef` and `#include`, written without a blank
//!   after `#`. The C conditionals (`#if`, `#ifdef`, `#ifndef`, `#elif`,
//!   `#else`, `#endif`) are errors rather than comments, because ignoring one
//!   would silently enable both of its branches.
//! - `#define NAME words...` defines an object-like macro; a later word equal to
//!   `NAME` is replaced by the words. A redefinition replaces the old body
//!   without a diagnostic (the most recent definition wins, as with `#undef`
//!   followed by `#define`); `#undef NAME` removes a macro. A macro is never
//!   expanded inside its own expansion, so `#define A B` with `#define B A`
//!   terminates. Macros defined in an included file stay defined afterwards.
//! - `#include "FILE"` reads FILE relative to the directory of the including
//!   file. Paths are compared after removing `.` and `..` lexically, without
//!   asking the file system, to detect include cycles.
//! - Any control character (other than the tab, a blank) outside comments is
//!   an error and drops its line, so binary garbage never becomes a host.
//!
//! # Limits
//!
//! Hostile input yields diagnostics, never a panic or unbounded memory: see the
//! `MAX_*` constants. After [`MAX_DIAGNOSTICS`] errors, parsing stops with a
//! final diagnostic that says so.
#![forbid(unsafe_code)]

mod lex;
mod parse;
mod resolve;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cluster::{Machine, Topology};

pub use parse::parse;
pub use resolve::{
    embedded_default, resolve, resolve_with_warnings, DEFAULT_CPUGEN, KNOWN_ATTRIBUTES,
};

/// The largest file a [`Loader`] should read, in bytes.
pub const MAX_FILE_SIZE: u64 = 16 << 20;
/// The most bytes a parse loads over all files, the main file included.
pub const MAX_TOTAL_SIZE: usize = 64 << 20;
/// The longest logical line (physical lines joined by `\`), in bytes.
pub const MAX_LINE_LEN: usize = 1 << 20;
/// The most records (distinct names) a database may hold.
pub const MAX_RECORDS: usize = 100_000;
/// The most attributes and values a database may hold over all records.
pub const MAX_ITEMS: usize = 1_000_000;
/// The most bytes macro expansion may produce for one record.
pub const MAX_EXPANSION: usize = 64 << 10;
/// The most words macro expansion may visit for one record; this bounds macros
/// that expand to nothing but do so exponentially often.
pub const MAX_EXPANSION_STEPS: usize = 1_000_000;
/// The most bytes macro expansion may produce over the whole parse.
pub const MAX_TOTAL_EXPANSION: usize = 64 << 20;
/// How deeply `#include` may nest below the main file.
pub const MAX_INCLUDE_DEPTH: usize = 16;
/// The most `#include` directives one parse follows.
pub const MAX_INCLUDES: usize = 1024;
/// The most diagnostics one parse or resolution reports before it gives up.
pub const MAX_DIAGNOSTICS: usize = 100;
/// The largest `cores=` value.
pub const MAX_CORES: u32 = 4096;

/// How many characters of the offending line a diagnostic shows.
const EXCERPT_WIDTH: usize = 120;
/// How much of the offending line a diagnostic keeps, in bytes; enough for any
/// real line, and small enough that a hostile megabyte line costs little.
const SOURCE_LINE_KEEP: usize = 64 << 10;

/// Reads the files of a hosts database. The parser reaches files only through
/// this trait, so tests can give it text from memory.
pub trait Loader {
    /// Returns the whole text of the file at `path`.
    fn load(&mut self, path: &Path) -> io::Result<String>;
}

/// Reads, parses and resolves the hosts database at `path`. Parse errors win:
/// when parsing reports any, they are returned and resolution is not tried.
pub fn load_topology(
    path: &Path,
    loader: &mut dyn Loader,
    group: Option<&str>,
    machine: &Machine,
) -> Result<Topology, Vec<Diagnostic>> {
    load_topology_with_warnings(path, loader, group, machine).map(|(topology, _)| topology)
}

/// Like [`load_topology`], and also returns the warnings of
/// [`resolve_with_warnings`].
pub fn load_topology_with_warnings(
    path: &Path,
    loader: &mut dyn Loader,
    group: Option<&str>,
    machine: &Machine,
) -> Result<(Topology, Vec<Diagnostic>), Vec<Diagnostic>> {
    let (database, diagnostics) = parse(path, loader);
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }
    resolve_with_warnings(&database, group, machine)
}

/// An error in a hosts database, with where it is.
///
/// It renders as `FILE:LINE:COL: message` (or `FILE:LINE: message` without a
/// column, or `FILE: message` for line 0, which means the file as a whole,
/// e.g. when it cannot be read), followed by the offending line and a caret
/// under the column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file the error is in.
    pub path: PathBuf,
    /// The 1-based line, or 0 for the file as a whole.
    pub line: usize,
    /// The 1-based column in characters, if the error has one.
    pub col: Option<usize>,
    /// What is wrong, naming the object involved.
    pub message: String,
    /// The offending line, if there is one (only its first 64 KiB are kept).
    pub source_line: Option<String>,
}

impl Diagnostic {
    /// A diagnostic at `line` (and `col`) of `path`, keeping a bounded copy of
    /// the offending line.
    pub fn new(
        path: &Path,
        line: usize,
        col: Option<usize>,
        message: impl Into<String>,
        source_line: Option<&str>,
    ) -> Diagnostic {
        Diagnostic {
            path: path.to_path_buf(),
            line,
            col,
            message: message.into(),
            source_line: source_line.map(|text| clip(text, SOURCE_LINE_KEEP).to_string()),
        }
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a
/// character boundary.
fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl Diagnostic {
    /// The diagnostic on one line, for a log whose records are one line
    /// each: `FILE:LINE:COL: message: in 'the offending line'` (the line
    /// cut to the width of an excerpt), where [`fmt::Display`] puts the
    /// line and a caret on lines of their own.
    pub fn one_line(&self) -> String {
        let Some(source_line) = &self.source_line else {
            return self.to_string();
        };
        let (excerpt, _) = excerpt(source_line, self.col);
        let head = Diagnostic {
            source_line: None,
            ..self.clone()
        };
        format!("{head}: in '{}'", excerpt.trim())
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
            if let Some(col) = self.col {
                write!(f, ":{col}")?;
            }
        }
        write!(f, ": {}", self.message)?;
        if let Some(source_line) = &self.source_line {
            let (excerpt, caret) = excerpt(source_line, self.col);
            write!(f, "\n{excerpt}")?;
            if let Some(caret_idx) = caret {
                // Copy the tabs of the excerpt so that the caret lines up
                // whatever the terminal's tab width.
                let padding: String = excerpt
                    .chars()
                    .take(caret_idx)
                    .map(|ch| if ch == '\t' { '\t' } else { ' ' })
                    .collect();
                write!(f, "\n{padding}^")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostic {}

/// The part of `line` a diagnostic shows, at most about [`EXCERPT_WIDTH`]
/// characters around the column, with control characters made visible as `?`
/// so that garbage cannot drive the terminal; and the index of the caret in it.
fn excerpt(line: &str, col: Option<usize>) -> (String, Option<usize>) {
    let chars: Vec<char> = line
        .chars()
        .map(|ch| {
            if ch.is_control() && ch != '\t' {
                '?'
            } else {
                ch
            }
        })
        .collect();
    let caret = col.map(|col| col.saturating_sub(1));
    let head = |n_chars: usize| -> String {
        let mut out: String = chars.iter().take(n_chars).collect();
        if chars.len() > n_chars {
            out.push_str("...");
        }
        out
    };
    match caret {
        // The caret may sit just past the last character (a missing word).
        Some(idx) if idx > chars.len() => (head(EXCERPT_WIDTH), None),
        None => (head(EXCERPT_WIDTH), None),
        Some(idx) if chars.len() <= EXCERPT_WIDTH || idx < EXCERPT_WIDTH - 20 => {
            (head(EXCERPT_WIDTH), Some(idx))
        }
        Some(idx) => {
            let half = EXCERPT_WIDTH / 2;
            let start = idx - half;
            let end = (idx + half).min(chars.len());
            let mut out = String::from("...");
            out.extend(&chars[start..end]);
            if end < chars.len() {
                out.push_str("...");
            }
            (out, Some(3 + half))
        }
    }
}

/// A file of the database: an index into [`Database::files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u32);

impl FileId {
    /// The index into [`Database::files`].
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// Where a word of the database was written: a file and a 1-based line and
/// column (in characters). A word that came from a macro has the position of
/// the macro's name where it was used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    /// The file, by its index among the files read.
    pub file: FileId,
    /// The 1-based line.
    pub line: usize,
    /// The 1-based column, in characters.
    pub col: usize,
}

/// A file read while parsing, kept so that diagnostics can quote its lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// Its path: the main path as given, or an include path with `.` and `..`
    /// removed.
    pub path: PathBuf,
    /// Its whole text, as read.
    pub text: Arc<str>,
}

impl SourceFile {
    /// The text of the 1-based `line`, without its line end.
    pub fn line(&self, line: usize) -> Option<&str> {
        let text = self.text.strip_prefix('\u{feff}').unwrap_or(&self.text);
        let found = text.split('\n').nth(line.checked_sub(1)?)?;
        Some(found.strip_suffix('\r').unwrap_or(found))
    }
}

/// One attribute of a record: its name, its values (empty for a word without
/// `=`, such as SCore's `-ethernet`) and where it was written.
pub type Attr = (String, Vec<String>, Span);

/// A record: every line with one name, merged.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The name, without the `~` that marks a defective host.
    pub name: String,
    /// Whether any line marked it defective with `~`.
    pub defective: bool,
    /// Where the name first appeared.
    pub span: Span,
    /// The attributes of all its lines, in order; repeated ones stay separate
    /// here and their values concatenate in [`Record::values`].
    pub attrs: Vec<Attr>,
}

impl Record {
    /// Whether this record is an SCore network definition (it has `type=`)
    /// rather than a host.
    pub fn is_network(&self) -> bool {
        self.attrs
            .iter()
            .any(|(name, values, _)| name == "type" && !values.is_empty())
    }

    /// The values of every `name=` attribute, concatenated in order.
    pub fn values<'r>(&'r self, name: &'r str) -> impl Iterator<Item = &'r str> + 'r {
        self.attrs
            .iter()
            .filter(move |(attr, _, _)| attr == name)
            .flat_map(|(_, values, _)| values.iter().map(String::as_str))
    }
}

/// The parsed hosts database: records in order of first appearance, and the
/// files they came from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Database {
    /// Every file read; the main file is first.
    pub files: Vec<SourceFile>,
    /// The records, in order of first appearance.
    pub records: Vec<Record>,
}

impl Database {
    /// The path of the main file (empty if there is none).
    pub fn main_path(&self) -> &Path {
        self.files
            .first()
            .map_or(Path::new(""), |file| file.path.as_path())
    }

    /// The path of the file `span` is in.
    pub fn path(&self, span: Span) -> &Path {
        self.files
            .get(span.file.idx())
            .map_or(Path::new(""), |file| file.path.as_path())
    }

    /// A diagnostic at `span`, quoting its line.
    pub fn diagnostic(&self, span: Span, message: impl Into<String>) -> Diagnostic {
        let file = self.files.get(span.file.idx());
        let source_line = file.and_then(|file| file.line(span.line));
        Diagnostic::new(
            self.path(span),
            span.line,
            Some(span.col),
            message,
            source_line,
        )
    }
}
