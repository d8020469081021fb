//! The reply model of console commands and its two renderings.
//!
//! A command produces a [`Reply`] made of typed [`Value`]s. The text form is
//! for people (aligned tables, sizes and durations in human units, `key:
//! value` lines); the JSON form carries the same keys with raw numbers
//! (bytes, seconds), so that every fact in a table is in its JSON too.
#![forbid(unsafe_code)]

use std::time::Duration;

use serde_json::{json, Map, Value as Json};

use crate::units::{format_duration, format_size};

/// One typed value in a reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Plain text.
    Text(String),
    /// A count or identifier.
    Uint(u64),
    /// A signed number.
    Int(i64),
    /// A real number shown with two decimals.
    Float(f64),
    /// A size in bytes (text: `1.5G`; JSON: bytes).
    Size(u64),
    /// A duration (text: `1.25s`; JSON: seconds).
    Duration(Duration),
    /// A percentage (text: `50%`; JSON: the number).
    Percent(f64),
    /// Yes or no.
    Bool(bool),
    /// Nothing set (text: `-`; JSON: null).
    None,
    /// Several values (text: comma-separated; JSON: array).
    List(Vec<Value>),
    /// Named values (text: `name value, ...`; JSON: object).
    Map(Vec<(String, Value)>),
}

impl Value {
    /// A text value.
    pub fn text(text: impl Into<String>) -> Value {
        Value::Text(text.into())
    }

    /// An optional value, `-` when absent.
    pub fn opt(value: Option<Value>) -> Value {
        value.unwrap_or(Value::None)
    }

    /// The human text of the value. Text is shown on one line with no
    /// control character: a job's arguments, its reason and paths are a
    /// user's text, shown to root, and a newline would draw a row of the
    /// user's making in a listing, an escape sequence reach the reader's
    /// terminal. They are written as the log writes them (`\n`, `\r`,
    /// `\t`, `\xHH`, `\u{2028}`); JSON keeps the text as given.
    pub fn to_text(&self) -> String {
        match self {
            Value::Text(text) => one_line(text),
            Value::Uint(n) => n.to_string(),
            Value::Int(n) => n.to_string(),
            Value::Float(x) => format!("{x:.2}"),
            Value::Size(bytes) => format_size(*bytes),
            Value::Duration(duration) => format_duration(*duration),
            Value::Percent(pct) => {
                if pct.fract() == 0.0 {
                    format!("{pct:.0}%")
                } else {
                    format!("{pct:.1}%")
                }
            }
            Value::Bool(true) => "yes".to_string(),
            Value::Bool(false) => "no".to_string(),
            Value::None => "-".to_string(),
            Value::List(items) if items.is_empty() => "-".to_string(),
            Value::List(items) => items
                .iter()
                .map(Value::to_text)
                .collect::<Vec<_>>()
                .join(","),
            Value::Map(fields) => fields
                .iter()
                .map(|(key, value)| format!("{key} {}", value.to_text()))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// The JSON of the value.
    pub fn to_json(&self) -> Json {
        match self {
            Value::Text(text) => json!(text),
            Value::Uint(n) => json!(n),
            Value::Int(n) => json!(n),
            Value::Float(x) => json!(x),
            Value::Size(bytes) => json!(bytes),
            Value::Duration(duration) => json!(duration.as_secs_f64()),
            Value::Percent(pct) => json!(pct),
            Value::Bool(flag) => json!(flag),
            Value::None => Json::Null,
            Value::List(items) => Json::Array(items.iter().map(Value::to_json).collect()),
            Value::Map(fields) => object(fields),
        }
    }

    fn right_aligned(&self) -> bool {
        matches!(
            self,
            Value::Uint(_)
                | Value::Int(_)
                | Value::Float(_)
                | Value::Size(_)
                | Value::Duration(_)
                | Value::Percent(_)
        )
    }
}

/// `text` with its control characters and line separators escaped.
fn one_line(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for ch in text.chars() {
        match ch {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{85}' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{{{:x}}}", ch as u32));
            }
            _ if ch.is_control() => out.push_str(&format!("\\x{:02x}", ch as u32)),
            _ => out.push(ch),
        }
    }
    out
}

fn needs_escape(ch: char) -> bool {
    ch.is_control() || matches!(ch, '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn object(fields: &[(String, Value)]) -> Json {
    let mut map = Map::new();
    for (key, value) in fields {
        map.insert(key.clone(), value.to_json());
    }
    Json::Object(map)
}

/// A listing: named columns and rows of values.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    /// Column keys, lowercase; the text header shows them in capitals.
    pub columns: Vec<String>,
    /// Rows, each with one value per column.
    pub rows: Vec<Vec<Value>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(columns: &[&str]) -> Table {
        Table {
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; it must have one value per column.
    pub fn push(&mut self, row: Vec<Value>) {
        debug_assert_eq!(
            row.len(),
            self.columns.len(),
            "row width must match the columns"
        );
        self.rows.push(row);
    }

    fn to_text(&self) -> String {
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|row| row.iter().map(Value::to_text).collect())
            .collect();
        let headers: Vec<String> = self.columns.iter().map(|c| c.to_uppercase()).collect();
        let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
        for row in &cells {
            for (idx, cell) in row.iter().enumerate() {
                if let Some(width) = widths.get_mut(idx) {
                    *width = (*width).max(cell.chars().count());
                }
            }
        }
        let numeric: Vec<bool> = (0..self.columns.len())
            .map(|idx| {
                self.rows
                    .iter()
                    .any(|row| row.get(idx).is_some_and(Value::right_aligned))
            })
            .collect();
        let mut out = String::new();
        let mut line = |fields: &[String]| {
            let mut text = String::new();
            for (idx, field) in fields.iter().enumerate() {
                let width = widths.get(idx).copied().unwrap_or(0);
                let pad = width.saturating_sub(field.chars().count());
                if idx > 0 {
                    text.push_str("  ");
                }
                if numeric.get(idx).copied().unwrap_or(false) {
                    text.extend(std::iter::repeat_n(' ', pad));
                    text.push_str(field);
                } else {
                    text.push_str(field);
                    if idx + 1 < fields.len() {
                        text.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&headers);
        for row in &cells {
            line(row);
        }
        out
    }

    fn to_json(&self) -> Json {
        Json::Array(
            self.rows
                .iter()
                .map(|row| {
                    let mut map = Map::new();
                    for (key, value) in self.columns.iter().zip(row) {
                        map.insert(key.clone(), value.to_json());
                    }
                    Json::Object(map)
                })
                .collect(),
        )
    }
}

/// What a console command answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A change was made; the sentence says what.
    Done(String),
    /// One fact per line, `key: value`.
    Record(Vec<(String, Value)>),
    /// A listing.
    Table(Table),
    /// Free text (help).
    Text(String),
    /// The command failed and changed nothing.
    Error(String),
}

impl Reply {
    /// An error reply.
    pub fn error(message: impl Into<String>) -> Reply {
        Reply::Error(message.into())
    }

    /// Whether this is an error.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// The text form; errors start with `error:`.
    pub fn to_text(&self) -> String {
        match self {
            Reply::Done(text) | Reply::Text(text) => {
                let mut out = text.clone();
                if !out.ends_with('\n') && !out.is_empty() {
                    out.push('\n');
                }
                out
            }
            Reply::Record(fields) => {
                let mut out = String::new();
                for (key, value) in fields {
                    out.push_str(key);
                    out.push_str(": ");
                    out.push_str(&value.to_text());
                    out.push('\n');
                }
                out
            }
            Reply::Table(table) => table.to_text(),
            Reply::Error(message) => format!("error: {message}\n"),
        }
    }

    /// The JSON form, with the same keys as the text.
    pub fn to_json(&self) -> Json {
        match self {
            Reply::Done(text) => json!({ "ok": true, "message": text }),
            Reply::Text(text) => json!({ "text": text }),
            Reply::Record(fields) => object(fields),
            Reply::Table(table) => table.to_json(),
            Reply::Error(message) => json!({ "error": message }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_and_keeps_facts_in_json() {
        let mut table = Table::new(&["id", "user", "memory"]);
        table.push(vec![
            Value::Uint(7),
            Value::text("alice"),
            Value::Size(3 << 29),
        ]);
        table.push(vec![Value::Uint(12), Value::text("bo"), Value::None]);
        assert_eq!(
            Reply::Table(table.clone()).to_text(),
            "ID  USER   MEMORY\n 7  alice    1.5G\n12  bo          -\n"
        );
        let json = Reply::Table(table).to_json();
        assert_eq!(json[0]["memory"], 1610612736u64);
        assert_eq!(json[1]["memory"], Json::Null);
        assert_eq!(json[1]["user"], "bo");
    }

    #[test]
    fn record_lines_and_json_keys_match() {
        let reply = Reply::Record(vec![
            ("id".into(), Value::Uint(3)),
            ("cpu".into(), Value::Duration(Duration::from_millis(1500))),
            (
                "switch latency".into(),
                Value::Map(vec![
                    ("median".into(), Value::Duration(Duration::from_micros(420))),
                    ("max".into(), Value::Duration(Duration::from_millis(2))),
                ]),
            ),
        ]);
        assert_eq!(
            reply.to_text(),
            "id: 3\ncpu: 1.50s\nswitch latency: median 0.42ms, max 2ms\n"
        );
        let json = reply.to_json();
        assert_eq!(json["cpu"], 1.5);
        assert_eq!(json["switch latency"]["max"], 0.002);
    }

    #[test]
    fn errors_start_with_error() {
        assert_eq!(Reply::error("no job 9").to_text(), "error: no job 9\n");
    }
}
