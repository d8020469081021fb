//! Parsing: directives, macro expansion, includes and records.
//!
//! [`parse`] drives the lexer over the main file and every file it includes,
//! keeps the macro table, and merges lines into [`Record`]s. It reads files
//! only through the [`Loader`] it is given, never panics, and never stops at
//! the first error: each problem becomes a [`Diagnostic`] and the rest of the
//! input is still read, up to [`MAX_DIAGNOSTICS`].
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::lex::{Directive, LexError, Lexer, Line, LogicalLines, Pos, Tok};
use super::{
    Database, Diagnostic, FileId, Loader, Record, SourceFile, Span, MAX_DIAGNOSTICS, MAX_EXPANSION,
    MAX_EXPANSION_STEPS, MAX_INCLUDES, MAX_INCLUDE_DEPTH, MAX_ITEMS, MAX_LINE_LEN, MAX_RECORDS,
    MAX_TOTAL_EXPANSION, MAX_TOTAL_SIZE,
};
use scored_proto::units::quote;

/// Parses the hosts database at `path`, and the files it includes, into
/// records. Returns every diagnostic found; the database holds whatever could
/// be read, so a caller must not use it when there are diagnostics.
pub fn parse(path: &Path, loader: &mut dyn Loader) -> (Database, Vec<Diagnostic>) {
    let mut parser = Parser {
        loader,
        database: Database::default(),
        file_index: HashMap::new(),
        record_index: HashMap::new(),
        macros: HashMap::new(),
        stack: Vec::new(),
        diagnostics: Vec::new(),
        n_includes: 0,
        n_loaded_bytes: 0,
        n_items: 0,
        n_expanded_bytes: 0,
        stopped: false,
        records_full: false,
        items_full: false,
    };
    parser.main_file(path);
    (parser.database, parser.diagnostics)
}

/// The state of one parse.
struct Parser<'l> {
    loader: &'l mut dyn Loader,
    database: Database,
    /// Files already read, by normalized path, so a file included twice is
    /// read once.
    file_index: HashMap<PathBuf, FileId>,
    /// Records by name.
    record_index: HashMap<String, usize>,
    macros: HashMap<String, Vec<String>>,
    /// The normalized paths of the files being read, the main file first.
    stack: Vec<PathBuf>,
    diagnostics: Vec<Diagnostic>,
    n_includes: usize,
    n_loaded_bytes: usize,
    /// Attributes and values stored so far, bounded by [`MAX_ITEMS`].
    n_items: usize,
    n_expanded_bytes: usize,
    /// Set when the parse gives up: too many errors, or a global limit.
    stopped: bool,
    /// Whether the record limit was reported already.
    records_full: bool,
    /// Whether the attribute limit was reported already.
    items_full: bool,
}

impl Parser<'_> {
    fn main_file(&mut self, path: &Path) {
        let normalized = normalize(path);
        let text: Arc<str> = match self.loader.load(path) {
            Ok(text) => Arc::from(text),
            Err(error) => {
                self.database.files.push(SourceFile {
                    path: path.to_path_buf(),
                    text: Arc::from(""),
                });
                self.push(Diagnostic::new(
                    path,
                    0,
                    None,
                    format!("cannot read the hosts database: {error}"),
                    None,
                ));
                return;
            }
        };
        self.n_loaded_bytes = text.len();
        let file = self.add_file(path.to_path_buf(), normalized.clone(), text);
        if self.n_loaded_bytes > MAX_TOTAL_SIZE {
            self.push(Diagnostic::new(
                path,
                0,
                None,
                format!(
                    "the hosts database is larger than {} MiB",
                    MAX_TOTAL_SIZE >> 20
                ),
                None,
            ));
            return;
        }
        self.stack.push(normalized);
        self.read_file(file);
        self.stack.pop();
    }

    fn add_file(&mut self, path: PathBuf, normalized: PathBuf, text: Arc<str>) -> FileId {
        let file = FileId(self.database.files.len() as u32);
        self.database.files.push(SourceFile { path, text });
        self.file_index.insert(normalized, file);
        file
    }

    /// Records a diagnostic, or gives up once there are too many.
    fn push(&mut self, diagnostic: Diagnostic) {
        if self.stopped {
            return;
        }
        if self.diagnostics.len() == MAX_DIAGNOSTICS {
            self.diagnostics.push(Diagnostic {
                message: format!("too many errors; stopped after {MAX_DIAGNOSTICS}"),
                source_line: None,
                ..diagnostic
            });
            self.stopped = true;
            return;
        }
        self.diagnostics.push(diagnostic);
    }

    /// Records a diagnostic at `pos` of `file`, quoting the line.
    fn error(&mut self, file: FileId, pos: Pos, col: bool, message: impl Into<String>) {
        let span = Span {
            file,
            line: pos.line,
            col: pos.col,
        };
        let mut diagnostic = self.database.diagnostic(span, message);
        if !col {
            diagnostic.col = None;
        }
        self.push(diagnostic);
    }

    /// Gives up on the whole parse after a global limit, with one diagnostic.
    fn give_up(&mut self, file: FileId, pos: Pos, message: String) {
        self.error(file, pos, true, message);
        self.stopped = true;
    }

    fn read_file(&mut self, file: FileId) {
        let text = Arc::clone(&self.database.files[file.idx()].text);
        // A byte order mark is not part of the first record's name.
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        let mut lexer = Lexer::default();
        for logical in LogicalLines::new(text) {
            if self.stopped {
                return;
            }
            if logical.too_long {
                let pos = Pos {
                    line: logical.first_line,
                    col: 1,
                };
                self.error(
                    file,
                    pos,
                    false,
                    format!("line is longer than {} MiB", MAX_LINE_LEN >> 20),
                );
                continue;
            }
            match lexer.line(&logical) {
                Err(LexError { pos, message }) => self.error(file, pos, true, message),
                Ok(Line::Empty | Line::Comment) => {}
                Ok(Line::Conditional { word, pos }) => self.error(
                    file,
                    pos,
                    true,
                    format!("#{word} is not supported: the hosts database has no conditionals"),
                ),
                Ok(Line::Directive {
                    directive,
                    pos,
                    args,
                }) => match directive {
                    Directive::Define => self.define(file, pos, args),
                    Directive::Undef => self.undef(file, pos, args),
                    Directive::Include => self.include_directive(file, pos, args),
                },
                Ok(Line::Record(words)) => self.record(file, words),
            }
        }
        if let Some(pos) = lexer.open_comment {
            self.error(file, pos, true, "unterminated /* comment");
        }
    }

    /// Checks the name of a `#define` or `#undef`.
    fn macro_name(
        &mut self,
        file: FileId,
        pos: Pos,
        directive: &str,
        args: &[Tok],
    ) -> Option<String> {
        let Some(name) = args.first() else {
            self.error(file, pos, true, format!("#{directive} needs a macro name"));
            return None;
        };
        if name.text.contains('(') {
            self.error(
                file,
                name.pos,
                true,
                format!(
                    "function-like macro {} is not supported: a macro is a name for words",
                    quote(&name.text)
                ),
            );
            return None;
        }
        if !is_identifier(&name.text) {
            self.error(
                file,
                name.pos,
                true,
                format!(
                    "invalid macro name {}: expected a letter or '_' followed by letters, digits or '_'",
                    quote(&name.text)
                ),
            );
            return None;
        }
        Some(name.text.clone())
    }

    fn define(&mut self, file: FileId, pos: Pos, args: Vec<Tok>) {
        let Some(name) = self.macro_name(file, pos, "define", &args) else {
            return;
        };
        let body = args.into_iter().skip(1).map(|tok| tok.text).collect();
        self.macros.insert(name, body);
    }

    fn undef(&mut self, file: FileId, pos: Pos, args: Vec<Tok>) {
        let Some(name) = self.macro_name(file, pos, "undef", &args) else {
            return;
        };
        if let Some(extra) = args.get(1) {
            self.error(
                file,
                extra.pos,
                true,
                format!("unexpected {} after #undef {name}", quote(&extra.text)),
            );
            return;
        }
        self.macros.remove(&name);
    }

    fn include_directive(&mut self, file: FileId, pos: Pos, args: Vec<Tok>) {
        let name = match args.first() {
            Some(tok)
                if tok.text.len() > 2 && tok.text.starts_with('"') && tok.text.ends_with('"') =>
            {
                tok
            }
            Some(tok) => {
                self.error(
                    file,
                    tok.pos,
                    true,
                    format!(
                        "invalid #include {}: expected a file name in double quotes, as in #include \"racks.db\"",
                        quote(&tok.text)
                    ),
                );
                return;
            }
            None => {
                self.error(
                    file,
                    pos,
                    true,
                    "#include needs a file name in double quotes, as in #include \"racks.db\"",
                );
                return;
            }
        };
        if let Some(extra) = args.get(1) {
            self.error(
                file,
                extra.pos,
                true,
                format!(
                    "unexpected {} after the #include file name",
                    quote(&extra.text)
                ),
            );
            return;
        }
        let relative = &name.text[1..name.text.len() - 1];
        self.include(file, name.pos, relative);
    }

    /// Reads the file `relative` names, relative to the directory of the
    /// current file; every error is reported at the `#include` line.
    fn include(&mut self, from: FileId, pos: Pos, relative: &str) {
        let current = self.stack.last().cloned().unwrap_or_default();
        let directory = current.parent().unwrap_or(Path::new(""));
        let target = normalize(&directory.join(relative));
        if let Some(start) = self.stack.iter().position(|path| *path == target) {
            let chain: Vec<String> = self.stack[start..]
                .iter()
                .chain(std::iter::once(&target))
                .map(|path| path.display().to_string())
                .collect();
            self.error(
                from,
                pos,
                true,
                format!("recursive #include: {}", chain.join(" -> ")),
            );
            return;
        }
        if self.stack.len() > MAX_INCLUDE_DEPTH {
            self.error(
                from,
                pos,
                true,
                format!(
                    "#include of {} is nested more than {MAX_INCLUDE_DEPTH} levels deep",
                    quote(relative)
                ),
            );
            return;
        }
        self.n_includes += 1;
        if self.n_includes > MAX_INCLUDES {
            self.give_up(
                from,
                pos,
                format!("more than {MAX_INCLUDES} #include directives; stopped reading"),
            );
            return;
        }
        let file = match self.file_index.get(&target) {
            Some(&file) => file,
            None => match self.loader.load(&target) {
                Ok(text) => {
                    self.n_loaded_bytes = self.n_loaded_bytes.saturating_add(text.len());
                    if self.n_loaded_bytes > MAX_TOTAL_SIZE {
                        self.give_up(
                            from,
                            pos,
                            format!(
                                "the hosts database and its included files are larger than {} MiB",
                                MAX_TOTAL_SIZE >> 20
                            ),
                        );
                        return;
                    }
                    self.add_file(target.clone(), target.clone(), Arc::from(text))
                }
                Err(error) => {
                    self.error(
                        from,
                        pos,
                        true,
                        format!(
                            "cannot read included file {} ({}): {error}",
                            quote(relative),
                            target.display()
                        ),
                    );
                    return;
                }
            },
        };
        self.stack.push(target);
        self.read_file(file);
        self.stack.pop();
    }

    /// Expands the macros of a record line and merges it into its record.
    fn record(&mut self, file: FileId, words: Vec<Tok>) {
        let words = match expand(&self.macros, words) {
            Ok((words, n_bytes)) => {
                self.n_expanded_bytes = self.n_expanded_bytes.saturating_add(n_bytes);
                if self.n_expanded_bytes > MAX_TOTAL_EXPANSION {
                    let pos = words.first().map_or(Pos { line: 1, col: 1 }, |tok| tok.pos);
                    self.give_up(
                        file,
                        pos,
                        format!(
                            "macros expand to more than {} MiB in all; stopped reading",
                            MAX_TOTAL_EXPANSION >> 20
                        ),
                    );
                    return;
                }
                words
            }
            Err(LexError { pos, message }) => {
                self.error(file, pos, true, message);
                return;
            }
        };
        let mut words = words.into_iter();
        let Some(first) = words.next() else {
            // A line of macros that expand to nothing.
            return;
        };
        let span_of = |tok: &Tok| Span {
            file,
            line: tok.pos.line,
            col: tok.pos.col,
        };
        let (name, defective) = match first.text.strip_prefix('~') {
            Some(name) => (name, true),
            None => (first.text.as_str(), false),
        };
        if name.is_empty() {
            self.error(
                file,
                first.pos,
                true,
                "'~' must be followed by the name of the defective host",
            );
            return;
        }
        if name.contains('=') {
            self.error(
                file,
                first.pos,
                true,
                format!(
                    "record name {} contains '=': a line starts with the host name (did the previous line miss a '\\'?)",
                    quote(name)
                ),
            );
            return;
        }
        let mut attrs = Vec::new();
        let mut n_items = 0usize;
        for word in words {
            let span = span_of(&word);
            match word.text.split_once('=') {
                Some(("", _)) => self.error(
                    file,
                    word.pos,
                    true,
                    format!("attribute {} has no name before '='", quote(&word.text)),
                ),
                Some((attr, values)) => {
                    let values: Vec<String> = values.split(',').map(String::from).collect();
                    n_items += 1 + values.len();
                    attrs.push((attr.to_string(), values, span));
                }
                None => {
                    n_items += 1;
                    attrs.push((word.text, Vec::new(), span));
                }
            }
        }
        let existing = self.record_index.get(name).copied();
        if existing.is_none() && self.database.records.len() == MAX_RECORDS {
            if !self.records_full {
                self.records_full = true;
                self.error(
                    file,
                    first.pos,
                    true,
                    format!(
                        "the hosts database holds more than {MAX_RECORDS} records; record {} and later new ones are ignored",
                        quote(name)
                    ),
                );
            }
            return;
        }
        self.n_items = self.n_items.saturating_add(n_items);
        if self.n_items > MAX_ITEMS {
            if !self.items_full {
                self.items_full = true;
                self.error(
                    file,
                    first.pos,
                    true,
                    format!(
                        "the hosts database holds more than {MAX_ITEMS} attributes and values; this line and later ones are ignored"
                    ),
                );
            }
            return;
        }
        if let Some(idx) = existing {
            let record = &mut self.database.records[idx];
            record.defective |= defective;
            record.attrs.extend(attrs);
            return;
        }
        self.record_index
            .insert(name.to_string(), self.database.records.len());
        self.database.records.push(Record {
            name: name.to_string(),
            defective,
            span: span_of(&first),
            attrs,
        });
    }
}

/// Whether `text` is a macro name: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// Replaces every word that names a macro by the macro's words, recursively,
/// never expanding a macro inside its own expansion (C's rule), so every
/// expansion ends. Expanded words take the position of the macro use. Returns
/// the words and how many bytes expansion produced.
fn expand(
    macros: &HashMap<String, Vec<String>>,
    words: Vec<Tok>,
) -> Result<(Vec<Tok>, usize), LexError> {
    if macros.is_empty() {
        return Ok((words, 0));
    }
    let mut out = Vec::with_capacity(words.len());
    let mut n_bytes = 0usize;
    let mut n_steps = 0usize;
    for word in words {
        let Some((name, body)) = macros.get_key_value(&word.text) else {
            out.push(word);
            continue;
        };
        // An explicit stack rather than recursion: a chain of a hundred
        // thousand macros must not overflow the thread's stack.
        let mut active: HashSet<&str> = HashSet::from([name.as_str()]);
        let mut stack: Vec<(&str, &[String])> = vec![(name.as_str(), body.as_slice())];
        while let Some((current, rest)) = stack.last_mut() {
            let Some((next, tail)) = rest.split_first() else {
                active.remove(*current);
                stack.pop();
                continue;
            };
            *rest = tail;
            n_steps += 1;
            if n_steps > MAX_EXPANSION_STEPS {
                return Err(LexError {
                    pos: word.pos,
                    message: format!(
                        "expanding macro {} takes more than {MAX_EXPANSION_STEPS} steps",
                        quote(&word.text)
                    ),
                });
            }
            if !active.contains(next.as_str()) {
                if let Some((inner, inner_body)) = macros.get_key_value(next) {
                    active.insert(inner.as_str());
                    stack.push((inner.as_str(), inner_body.as_slice()));
                    continue;
                }
            }
            n_bytes += next.len() + 1;
            if n_bytes > MAX_EXPANSION {
                return Err(LexError {
                    pos: word.pos,
                    message: format!(
                        "macro {} expands to more than {} KiB on one line",
                        quote(&word.text),
                        MAX_EXPANSION >> 10
                    ),
                });
            }
            out.push(Tok {
                text: next.clone(),
                pos: word.pos,
            });
        }
    }
    Ok((out, n_bytes))
}

/// Removes `.` and resolves `..` in `path` without asking the file system, so
/// that `racks/../a.db` and `a.db` name the same file for cycle detection.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    let mut n_normal = 0usize;
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir if n_normal > 0 => {
                out.pop();
                n_normal -= 1;
            }
            // `/..` is `/`.
            Component::ParentDir if out.has_root() => {}
            Component::ParentDir => out.push(".."),
            Component::Normal(part) => {
                out.push(part);
                n_normal += 1;
            }
            Component::RootDir | Component::Prefix(_) => out.push(component.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_normalize(path: &str, expected: &str) {
        assert_eq!(
            normalize(Path::new(path)),
            PathBuf::from(expected),
            "{path}"
        );
    }

    #[test]
    fn normalize_is_lexical() {
        check_normalize("a/./b", "a/b");
        check_normalize("./a", "a");
        check_normalize("a/../b", "b");
        check_normalize("../a/../../b", "../../b");
        check_normalize("/../a", "/a");
        check_normalize("/etc/score/../x.db", "/etc/x.db");
        check_normalize("", "");
    }

    #[test]
    fn identifiers() {
        assert!(is_identifier("_A1"));
        assert!(!is_identifier("1A"));
        assert!(!is_identifier(""));
        assert!(!is_identifier("A-B"));
    }
}
