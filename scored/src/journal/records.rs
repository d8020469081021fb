//! A journal record as text: the JSON of a `job ID` record read back as
//! typed values (for `history` and `job ID`), what others may not see of
//! it, and the `admitted` line, serialized from the core's fields.

use std::io;
use std::time::Duration;

use serde_json::{Map, Value as Json};

use super::HISTORY_LIMIT;
use scored_proto::command::reply::{Table, Value};

/// Leaves out of a `job ID` record what only the job's owner, root and
/// operators may see: its command, exit status and reason (which may name
/// its files). The keys stay, as null, as in `job ID`.
pub fn redact(record: &mut Json) {
    if let Json::Object(map) = record {
        for key in ["command", "exit", "reason"] {
            if let Some(value) = map.get_mut(key) {
                *value = Json::Null;
            }
        }
    }
}

/// The line `history` adds under its table when it lists only the last
/// [`HISTORY_LIMIT`] matching jobs (or those within [`HISTORY_BYTES`](super::HISTORY_BYTES)).
pub fn left_out_note(left_out: usize) -> String {
    format!(
        "({left_out} earlier job{} not listed: at most {HISTORY_LIMIT} are; narrow with --since or --user)\n",
        if left_out == 1 { "" } else { "s" }
    )
}

/// The text table `history` prints (its JSON is the full records).
pub fn history_table(records: &[Json]) -> Table {
    let mut table = Table::new(&[
        "id", "user", "name", "queue", "state", "procs", "hosts", "cpu", "wall", "exit", "ended",
        "command", "reason",
    ]);
    for record in records {
        table.push(
            table
                .columns
                .iter()
                .map(|column| match column.as_str() {
                    "ended" => {
                        Value::text(record["ended"].as_f64().map_or("-".to_string(), |secs| {
                            scored_proto::command::parse::format_utc(secs as u64)
                        }))
                    }
                    key => value_of(key, &record[key]),
                })
                .collect(),
        );
    }
    table
}

/// A `job ID` record read back from the journal, with its typed values.
pub fn record_fields(record: &Json) -> Vec<(String, Value)> {
    let Json::Object(map) = record else {
        return Vec::new();
    };
    map.iter()
        .map(|(key, value)| {
            let value = match key.as_str() {
                "ended" => Value::text(value.as_f64().map_or("-".to_string(), |secs| {
                    scored_proto::command::parse::format_utc(secs as u64)
                })),
                key => value_of(key, value),
            };
            (key.clone(), value)
        })
        .collect()
}

/// The typed value of a `job ID` key, from its JSON (seconds, bytes).
pub(super) fn value_of(key: &str, json: &Json) -> Value {
    const DURATIONS: &[&str] = &[
        "cpu",
        "wall",
        "run",
        "stopped",
        "wait",
        "cputime limit",
        "residency",
    ];
    const SIZES: &[&str] = &["disk", "peak disk", "memory limit", "disk limit"];
    match json {
        Json::Null => Value::None,
        Json::Number(number) if DURATIONS.contains(&key) => Value::Duration(
            Duration::from_secs_f64(number.as_f64().unwrap_or(0.0).max(0.0)),
        ),
        Json::Number(number) if SIZES.contains(&key) => Value::Size(number.as_u64().unwrap_or(0)),
        Json::Number(number) => match (number.as_u64(), number.as_i64()) {
            (Some(n), _) => Value::Uint(n),
            (None, Some(n)) => Value::Int(n),
            _ => Value::Float(number.as_f64().unwrap_or(0.0)),
        },
        Json::Bool(flag) => Value::Bool(*flag),
        Json::String(text) => Value::text(text),
        Json::Array(items) => Value::List(items.iter().map(|item| value_of("", item)).collect()),
        Json::Object(map) => Value::Map(
            map.iter()
                .map(|(name, value)| {
                    // Maps in a job record are per-host sizes.
                    let value = match value.as_u64() {
                        Some(bytes) if key.contains("memory") => Value::Size(bytes),
                        _ => value_of("", value),
                    };
                    (name.clone(), value)
                })
                .collect(),
        ),
    }
}

/// The `admitted` line of job `job`, without its newline: the text that
/// `append` writes for `{"t", "event", "job", "submitted", "record"}` with
/// the record as `fields_json` makes it, but serialized from the fields
/// without building that tree (the core gives each key once).
pub(super) fn admitted_line(
    now: f64,
    job: u64,
    waited: Duration,
    record: &[(String, Value)],
) -> io::Result<Vec<u8>> {
    let mut line = line_start(now, "admitted", job)?;
    entry(&mut line, "submitted", &(now - waited.as_secs_f64()))?;
    entry(&mut line, "record", &FieldsJson(record, None))?;
    line.push(b'}');
    Ok(line)
}

/// `{"t":NOW,"event":EVENT,"job":JOB`, as serde_json writes the start of
/// every line, left open for [`entry`] and the closing brace.
fn line_start(now: f64, event: &str, job: u64) -> io::Result<Vec<u8>> {
    let mut line = Vec::with_capacity(1024);
    line.push(b'{');
    serde_json::to_writer(&mut line, "t").map_err(io::Error::other)?;
    line.push(b':');
    serde_json::to_writer(&mut line, &now).map_err(io::Error::other)?;
    entry(&mut line, "event", event)?;
    entry(&mut line, "job", &job)?;
    Ok(line)
}

/// Appends `,"KEY":VALUE` to a line [`line_start`] opened.
fn entry(
    line: &mut Vec<u8>,
    key: &str,
    value: &(impl serde::Serialize + ?Sized),
) -> io::Result<()> {
    line.push(b',');
    serde_json::to_writer(&mut *line, key).map_err(io::Error::other)?;
    line.push(b':');
    serde_json::to_writer(&mut *line, value).map_err(io::Error::other)
}

/// A job's `ended` line as `ended_line` writes it, and what the journal
/// keeps of it.
pub(super) struct EndedLine {
    /// The line, without its newline.
    pub line: Vec<u8>,
    /// Where the record lies in the line.
    pub record: std::ops::Range<usize>,
    /// The record's `id`, `uid` and `ended`, and the line's `job`.
    pub id: Option<u64>,
    pub uid: Option<u32>,
    pub ended: f64,
    pub job: u64,
}

/// The `ended` line of job `job`, without its newline: the text that
/// `append` writes for `{"t", "event", "job", "record"}` with the record
/// as `fields_json` makes it and its `ended` added last, serialized from
/// the fields without building that tree. `None` where the line must be
/// built as a tree: a record that names a key twice (the tree keeps its
/// first place and last value) or `ended` itself, or one over
/// [`MAX_RECORD`](super::MAX_RECORD) that `fit_record` cuts.
pub(super) fn ended_line(
    now: f64,
    job: u64,
    ended: f64,
    record: &[(String, Value)],
) -> io::Result<Option<EndedLine>> {
    let named_twice = record.iter().enumerate().any(|(at, (key, _))| {
        key == "ended" || record[..at].iter().any(|(earlier, _)| earlier == key)
    });
    if named_twice {
        return Ok(None);
    }
    let mut line = line_start(now, "ended", job)?;
    line.extend_from_slice(b",\"record\":");
    let start = line.len();
    serde_json::to_writer(&mut line, &FieldsJson(record, Some(ended))).map_err(io::Error::other)?;
    let end = line.len();
    line.push(b'}');
    if line.len() > super::MAX_RECORD {
        return Ok(None);
    }
    let number = |key: &str| {
        record
            .iter()
            .find(|(name, _)| name == key)
            .and_then(|(_, value)| value.to_json().as_u64())
    };
    Ok(Some(EndedLine {
        line,
        record: start..end,
        id: number("id"),
        uid: number("uid").and_then(|uid| u32::try_from(uid).ok()),
        ended: Json::from(ended).as_f64().unwrap_or(0.0),
        job,
    }))
}

/// A record's fields serialized as the JSON object `fields_json` builds,
/// with an `ended` entry last if given.
struct FieldsJson<'a>(&'a [(String, Value)], Option<f64>);

impl serde::Serialize for FieldsJson<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let extra = usize::from(self.1.is_some());
        let mut map = serializer.serialize_map(Some(self.0.len() + extra))?;
        for (key, value) in self.0 {
            map.serialize_entry(key, &ValueJson(value))?;
        }
        if let Some(ended) = self.1 {
            map.serialize_entry("ended", &Json::from(ended))?;
        }
        map.end()
    }
}

/// A value serialized as `Value::to_json` makes it, without building it.
struct ValueJson<'a>(&'a Value);

impl serde::Serialize for ValueJson<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        match self.0 {
            Value::Text(text) => serializer.serialize_str(text),
            Value::Uint(n) | Value::Size(n) => serializer.serialize_u64(*n),
            Value::Int(n) => serializer.serialize_i64(*n),
            Value::Float(x) | Value::Percent(x) => serializer.serialize_f64(*x),
            Value::Duration(duration) => serializer.serialize_f64(duration.as_secs_f64()),
            Value::Bool(flag) => serializer.serialize_bool(*flag),
            Value::None => serializer.serialize_unit(),
            Value::List(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&ValueJson(item))?;
                }
                seq.end()
            }
            // A map (memory per host) is small; through `to_json`, a key
            // given twice keeps its first place and its last value, as in
            // any other record.
            map @ Value::Map(_) => map.to_json().serialize(serializer),
        }
    }
}

pub(super) fn fields_json(fields: &[(String, Value)]) -> Json {
    let mut map = Map::new();
    for (key, value) in fields {
        map.insert(key.clone(), value.to_json());
    }
    Json::Object(map)
}
