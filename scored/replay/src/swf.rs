//! The Standard Workload Format (SWF) of the Parallel Workloads Archive:
//! one job a line, 18 blank-separated numeric fields, `;` starting a
//! header comment, `-1` meaning unknown.
//!
//! Parsing is pure (text in, jobs and errors out) and reports every
//! malformed line with its number, as the hosts database does.
#![forbid(unsafe_code)]

use std::fmt;

/// How many fields a job line has.
pub const FIELDS: usize = 18;

/// The names of the fields, 1-based as the format numbers them.
pub const FIELD_NAMES: [&str; FIELDS] = [
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user",
    "group",
    "application",
    "queue",
    "partition",
    "preceding job",
    "think time",
];

/// One job of a trace, as the fields give it (`None` where the trace says -1).
#[derive(Debug, Clone, PartialEq)]
pub struct SwfJob {
    /// The line it was read from (1-based).
    pub line: usize,
    /// Field 1.
    pub number: i64,
    /// Field 2, seconds from the start of the trace (`None`: unknown, so
    /// the replay skips the job, as archive traces have such jobs).
    pub submit: Option<f64>,
    /// Field 4, seconds.
    pub run: Option<f64>,
    /// Field 5, else field 8.
    pub procs: Option<i64>,
    /// Field 9, seconds (0 is a request of no time, not an unknown).
    pub requested_time: Option<f64>,
    /// Field 10, else field 7: kilobytes per processor.
    pub memory_kb: Option<f64>,
    /// Field 12.
    pub user: Option<i64>,
    /// Field 15.
    pub queue: Option<i64>,
}

/// The most processors a trace may name (fields 5 and 8, and the
/// `MaxProcs` and `MaxNodes` headers): the replay builds one host per
/// processor, so a larger number is refused rather than allocated.
pub const MAX_PROCS: u64 = 1 << 18;

/// The longest time a field may give, in seconds (about 136 years).
pub const MAX_SECONDS: f64 = 4_294_967_295.0;

/// The most memory per processor a field may give, in kilobytes (1 PiB).
pub const MAX_MEMORY_KB: f64 = (1u64 << 40) as f64;

/// The largest number an identifier field may hold (job, user, group,
/// application, queue, partition and preceding job numbers, and status):
/// the largest whole number a double holds exactly.
pub const MAX_NUMBER: f64 = ((1u64 << 53) - 1) as f64;

/// The longest line, in bytes; a longer one is not SWF.
pub const MAX_LINE_LEN: usize = 64 * 1024;

/// How many malformed lines are kept with their messages; the others are
/// only counted.
pub const MAX_REPORTED: usize = 20;

/// A parsed trace.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trace {
    /// The jobs, in file order.
    pub jobs: Vec<SwfJob>,
    /// The header's `MaxProcs` (else `MaxNodes`), if given: at most
    /// [`MAX_PROCS`].
    pub max_procs: Option<u64>,
}

/// A malformed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwfError {
    /// Its number (1-based).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SwfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.line, self.message)
    }
}

/// The malformed lines of a trace: the first [`MAX_REPORTED`] with their
/// messages, in line order, and how many there were in all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Errors {
    /// The first malformed lines.
    pub first: Vec<SwfError>,
    /// All malformed lines, reported or not.
    pub count: usize,
}

impl Errors {
    /// Whether the trace had no malformed line.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn push(&mut self, error: SwfError) {
        self.count += 1;
        if self.first.len() < MAX_REPORTED {
            self.first.push(error);
        }
    }
}

/// Parses a whole trace; returns it with its malformed lines.
pub fn parse<'a>(lines: impl IntoIterator<Item = &'a str>) -> (Trace, Errors) {
    let mut parser = Parser::default();
    for line in lines {
        parser.line(line);
    }
    parser.finish()
}

/// A line-at-a-time parser, for traces read in pieces.
#[derive(Debug, Default)]
pub struct Parser {
    trace: Trace,
    errors: Errors,
    line_no: usize,
    max_nodes: Option<u64>,
}

impl Parser {
    /// Feeds the next line (without its newline).
    pub fn line(&mut self, line: &str) {
        self.line_no += 1;
        if line.len() > MAX_LINE_LEN {
            self.bad(format!(
                "the line is longer than {} KiB",
                MAX_LINE_LEN / 1024
            ));
            return;
        }
        let text = line.trim();
        if text.is_empty() {
            return;
        }
        let result = match text.strip_prefix(';') {
            Some(comment) => self.header(comment),
            None => job(self.line_no, text).map(|job| self.trace.jobs.push(job)),
        };
        if let Err(message) = result {
            self.bad(message);
        }
    }

    /// Counts the next line as malformed for a reason found before parsing
    /// (such as bytes that are not text).
    pub fn bad_line(&mut self, message: impl Into<String>) {
        self.line_no += 1;
        self.bad(message.into());
    }

    /// The number of the last line fed.
    pub fn line_no(&self) -> usize {
        self.line_no
    }

    /// The trace and the malformed lines.
    pub fn finish(mut self) -> (Trace, Errors) {
        if self.trace.max_procs.is_none() {
            self.trace.max_procs = self.max_nodes;
        }
        (self.trace, self.errors)
    }

    fn bad(&mut self, message: String) {
        self.errors.push(SwfError {
            line: self.line_no,
            message,
        });
    }

    fn header(&mut self, comment: &str) -> Result<(), String> {
        let Some((key, value)) = comment.split_once(':') else {
            return Ok(());
        };
        let key = key.trim();
        if key != "MaxProcs" && key != "MaxNodes" {
            return Ok(());
        }
        // The archive's headers may follow the number with a remark, as
        // "MaxNodes: 338 (batch partition; 512 total)".
        let value = value.trim();
        let count = value
            .split_whitespace()
            .next()
            .unwrap_or("")
            .parse::<u64>()
            .ok()
            .filter(|count| (1..=MAX_PROCS).contains(count))
            .ok_or_else(|| {
                format!(
                    "header {key} is {}; expected a whole number from 1 to {MAX_PROCS}",
                    scored_proto::units::quote(value)
                )
            })?;
        match key {
            "MaxProcs" => self.trace.max_procs = Some(count),
            _ => self.max_nodes = Some(count),
        }
        Ok(())
    }
}

/// What one field may hold besides -1 (unknown).
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A whole number from 0 to [`MAX_NUMBER`].
    Number,
    /// Seconds, from 0 to [`MAX_SECONDS`].
    Seconds,
    /// A whole number of processors, from 0 to [`MAX_PROCS`].
    Procs,
    /// Kilobytes, from 0 to [`MAX_MEMORY_KB`].
    Memory,
    /// A whole number of either sign up to [`MAX_NUMBER`]: archive traces
    /// give statuses below -1 (as -2 and -4) that the format does not name.
    Code,
}

/// The kind of each field, in the order of [`FIELD_NAMES`].
const KINDS: [Kind; FIELDS] = [
    Kind::Number,
    Kind::Seconds,
    Kind::Seconds,
    Kind::Seconds,
    Kind::Procs,
    Kind::Seconds,
    Kind::Memory,
    Kind::Procs,
    Kind::Seconds,
    Kind::Memory,
    Kind::Code,
    Kind::Number,
    Kind::Number,
    Kind::Number,
    Kind::Number,
    Kind::Number,
    Kind::Number,
    Kind::Seconds,
];

impl Kind {
    /// The largest value and whether it must be whole.
    fn bound(self) -> (f64, bool) {
        match self {
            Kind::Number | Kind::Code => (MAX_NUMBER, true),
            Kind::Seconds => (MAX_SECONDS, false),
            Kind::Procs => (MAX_PROCS as f64, true),
            Kind::Memory => (MAX_MEMORY_KB, false),
        }
    }

    fn expected(self) -> String {
        match self {
            Kind::Number => format!("a whole number up to {MAX_NUMBER}"),
            Kind::Seconds => format!("seconds up to {MAX_SECONDS}"),
            Kind::Procs => format!("a whole number of processors up to {MAX_PROCS}"),
            Kind::Memory => format!("kilobytes up to {MAX_MEMORY_KB}"),
            Kind::Code => format!("a whole number from -{MAX_NUMBER} to {MAX_NUMBER}"),
        }
    }
}

/// Checks one field: a number, -1 for unknown, else within its kind's
/// range.
fn field(idx: usize, word: &str) -> Result<f64, String> {
    let kind = KINDS[idx];
    let name = || format!("field {} ({})", idx + 1, FIELD_NAMES[idx]);
    let value = word
        .parse::<f64>()
        .ok()
        .filter(|value| value.is_finite())
        .ok_or_else(|| {
            format!(
                "{} is not a number: {}",
                name(),
                scored_proto::units::quote(word)
            )
        })?;
    if value == -1.0 {
        return Ok(value);
    }
    let (max, whole) = kind.bound();
    let min = if matches!(kind, Kind::Code) {
        -max
    } else {
        0.0
    };
    if !(min..=max).contains(&value) || (whole && value.fract() != 0.0) {
        return Err(format!(
            "{} is {}; expected -1 (unknown) or {}",
            name(),
            scored_proto::units::quote(word),
            kind.expected()
        ));
    }
    Ok(value)
}

fn job(line: usize, text: &str) -> Result<SwfJob, String> {
    let found = text.split_whitespace().count();
    if found != FIELDS {
        return Err(format!(
            "expected {FIELDS} fields, found {found}: {}",
            scored_proto::units::quote(text)
        ));
    }
    let mut values = [0f64; FIELDS];
    for (idx, word) in text.split_whitespace().enumerate() {
        values[idx] = field(idx, word)?;
    }
    let known = |value: f64| (value >= 0.0).then_some(value);
    let procs = [values[4], values[7]]
        .into_iter()
        .find(|value| *value > 0.0)
        .map(|value| value as i64);
    Ok(SwfJob {
        line,
        number: values[0] as i64,
        submit: known(values[1]),
        run: known(values[3]),
        procs,
        requested_time: known(values[8]),
        memory_kb: [values[9], values[6]]
            .into_iter()
            .find(|value| *value > 0.0),
        user: known(values[11]).map(|user| user as i64),
        queue: known(values[14]).map(|queue| queue as i64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_header_and_unknowns() {
        let (trace, errors) = parse([
            "; MaxProcs: 128",
            "",
            "1 0 5 100 4 -1 -1 4 200 -1 1 1 1 1 1 -1 -1 -1",
            "2 10 -1 -1 -1 -1 2048 8 -1 4096 0 2 1 1 3 -1 -1 -1",
        ]);
        assert_eq!(errors, Errors::default());
        assert_eq!(trace.max_procs, Some(128));
        assert_eq!(trace.jobs[0].procs, Some(4));
        assert_eq!(trace.jobs[0].requested_time, Some(200.0));
        assert_eq!(trace.jobs[0].memory_kb, None);
        assert_eq!(trace.jobs[1].run, None);
        assert_eq!(trace.jobs[1].procs, Some(8), "requested processors");
        assert_eq!(trace.jobs[1].memory_kb, Some(4096.0), "requested memory");
        assert_eq!(trace.jobs[1].queue, Some(3));
        assert_eq!(trace.jobs[1].line, 4);
    }

    #[test]
    fn malformed_lines_are_all_reported_with_their_numbers() {
        let (trace, errors) = parse([
            "1 0 5 100 4 -1 -1 4 200 -1 1 1 1 1 1 -1 -1 -1",
            "2 0 5 100",
            "3 0 5 abc 4 -1 -1 4 200 -1 1 1 1 1 1 -1 -1 -1",
            "4 -5 5 100 4 -1 -1 4 200 -1 1 1 1 1 1 -1 -1 -1",
        ]);
        assert_eq!(trace.jobs.len(), 1);
        let text: Vec<String> = errors.first.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            vec![
                "2: expected 18 fields, found 4: '2 0 5 100'",
                "3: field 4 (run time) is not a number: 'abc'",
                "4: field 2 (submit time) is '-5'; expected -1 (unknown) or seconds up to 4294967295",
            ]
        );
    }

    /// A line of 18 fields with `value` in field `number` (1-based).
    fn with_field(number: usize, value: &str) -> String {
        let mut words: Vec<&str> = "1 0 -1 10 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1"
            .split(' ')
            .collect();
        words[number - 1] = value;
        words.join(" ")
    }

    #[test]
    fn every_field_is_checked_against_its_range() {
        let cases = [
            (4, "1e300", "field 4 (run time) is '1e300'; expected -1 (unknown) or seconds up to 4294967295"),
            (4, "-2", "field 4 (run time) is '-2'; expected -1 (unknown) or seconds up to 4294967295"),
            (4, "inf", "field 4 (run time) is not a number: 'inf'"),
            (4, "NaN", "field 4 (run time) is not a number: 'NaN'"),
            (5, "2.5", "field 5 (allocated processors) is '2.5'; expected -1 (unknown) or a whole number of processors up to 262144"),
            (8, "4294967295", "field 8 (requested processors) is '4294967295'; expected -1 (unknown) or a whole number of processors up to 262144"),
            (9, "1e10", "field 9 (requested time) is '1e10'; expected -1 (unknown) or seconds up to 4294967295"),
            (10, "1e300", "field 10 (requested memory) is '1e300'; expected -1 (unknown) or kilobytes up to 1099511627776"),
            (1, "1e19", "field 1 (job number) is '1e19'; expected -1 (unknown) or a whole number up to 9007199254740991"),
            (15, "-7", "field 15 (queue) is '-7'; expected -1 (unknown) or a whole number up to 9007199254740991"),
            (18, "1e300", "field 18 (think time) is '1e300'; expected -1 (unknown) or seconds up to 4294967295"),
            (11, "2.5", "field 11 (status) is '2.5'; expected -1 (unknown) or a whole number from -9007199254740991 to 9007199254740991"),
            (11, "-1e16", "field 11 (status) is '-1e16'; expected -1 (unknown) or a whole number from -9007199254740991 to 9007199254740991"),
        ];
        for (number, value, expected) in cases {
            let line = with_field(number, value);
            let (trace, errors) = parse([line.as_str()]);
            assert!(trace.jobs.is_empty(), "{line}");
            assert_eq!(errors.count, 1, "{line}");
            assert_eq!(errors.first[0].to_string(), format!("1: {expected}"));
        }
        let largest = with_field(4, "4294967295");
        let (trace, errors) = parse([largest.as_str()]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(trace.jobs[0].run, Some(MAX_SECONDS));
        // Archive traces hold statuses the format does not name, and jobs
        // without a submit time: both are read (the replay skips the latter).
        let odd = [with_field(11, "-4"), with_field(2, "-1")];
        let (trace, errors) = parse(odd.iter().map(String::as_str));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(trace.jobs.len(), 2);
        assert_eq!(trace.jobs[0].submit, Some(0.0));
        assert_eq!(trace.jobs[1].submit, None);
    }

    #[test]
    fn processor_headers_are_bounded() {
        for header in [
            "; MaxProcs: 4294967295",
            "; MaxProcs: 0",
            "; MaxNodes: many",
            "; MaxNodes: (338)",
            "; MaxProcs: 12x (dual)",
            "; MaxProcs: 262145",
        ] {
            let (trace, errors) = parse([header]);
            assert_eq!(trace.max_procs, None, "{header}");
            assert_eq!(errors.count, 1, "{header}");
            assert!(
                errors.first[0]
                    .message
                    .ends_with("expected a whole number from 1 to 262144"),
                "{}",
                errors.first[0]
            );
        }
        let (trace, errors) = parse(["; MaxNodes: 262144", "; Note: anything: at all"]);
        assert!(errors.is_empty());
        assert_eq!(trace.max_procs, Some(MAX_PROCS));
        let (trace, errors) = parse(["; MaxNodes: 338 (batch partition; 512 total)"]);
        assert!(errors.is_empty(), "{:?}", errors.first);
        assert_eq!(trace.max_procs, Some(338));
        let (trace, errors) = parse(["; MaxProcs: 1664 (72, 1368, 224)", "; MaxNodes: 184"]);
        assert!(errors.is_empty(), "{:?}", errors.first);
        assert_eq!(trace.max_procs, Some(1664));
    }

    #[test]
    fn many_bad_lines_are_counted_and_a_few_kept() {
        let long = "1 ".repeat(MAX_LINE_LEN);
        let mut lines = vec![long.as_str()];
        lines.extend(std::iter::repeat_n("x", 1000));
        let (trace, errors) = parse(lines);
        assert!(trace.jobs.is_empty());
        assert_eq!(errors.count, 1001);
        assert_eq!(errors.first.len(), MAX_REPORTED);
        assert_eq!(
            errors.first[0].to_string(),
            "1: the line is longer than 64 KiB"
        );
        assert_eq!(errors.first[1].line, 2);
    }
}
