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
    /// Field 2, seconds from the start of the trace.
    pub submit: f64,
    /// Field 4, seconds.
    pub run: Option<f64>,
    /// Field 5, else field 8.
    pub procs: Option<i64>,
    /// Field 9, seconds.
    pub requested_time: Option<f64>,
    /// Field 10, else field 7: kilobytes per processor.
    pub memory_kb: Option<f64>,
    /// Field 15.
    pub queue: Option<i64>,
}

/// A parsed trace.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trace {
    /// The jobs, in file order.
    pub jobs: Vec<SwfJob>,
    /// The header's `MaxProcs` (else `MaxNodes`), if given.
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

/// Parses a whole trace; returns it with every malformed line's error.
pub fn parse<'a>(lines: impl IntoIterator<Item = &'a str>) -> (Trace, Vec<SwfError>) {
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
    errors: Vec<SwfError>,
    line_no: usize,
    max_nodes: Option<u64>,
}

impl Parser {
    /// Feeds the next line (without its newline).
    pub fn line(&mut self, line: &str) {
        self.line_no += 1;
        let text = line.trim();
        if text.is_empty() {
            return;
        }
        if let Some(comment) = text.strip_prefix(';') {
            self.header(comment);
            return;
        }
        match job(self.line_no, text) {
            Ok(job) => self.trace.jobs.push(job),
            Err(message) => self.errors.push(SwfError {
                line: self.line_no,
                message,
            }),
        }
    }

    /// The trace and the errors found.
    pub fn finish(mut self) -> (Trace, Vec<SwfError>) {
        if self.trace.max_procs.is_none() {
            self.trace.max_procs = self.max_nodes;
        }
        (self.trace, self.errors)
    }

    fn header(&mut self, comment: &str) {
        let Some((key, value)) = comment.split_once(':') else {
            return;
        };
        let value = value.trim().parse::<u64>().ok().filter(|n| *n > 0);
        match key.trim() {
            "MaxProcs" => self.trace.max_procs = value.or(self.trace.max_procs),
            "MaxNodes" => self.max_nodes = value,
            _ => {}
        }
    }
}

fn job(line: usize, text: &str) -> Result<SwfJob, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() != FIELDS {
        return Err(format!(
            "expected {FIELDS} fields, found {}: {}",
            words.len(),
            crate::units::quote(text)
        ));
    }
    let mut values = [0f64; FIELDS];
    for (idx, word) in words.iter().enumerate() {
        values[idx] = match word.parse::<f64>() {
            Ok(value) if value.is_finite() => value,
            _ => {
                return Err(format!(
                    "field {} ({}) is not a number: {}",
                    idx + 1,
                    FIELD_NAMES[idx],
                    crate::units::quote(word)
                ))
            }
        };
    }
    let known = |value: f64| (value >= 0.0).then_some(value);
    let submit = values[1];
    if submit < 0.0 {
        return Err(format!(
            "field 2 (submit time) is {}; a job needs a submit time",
            words[1]
        ));
    }
    let procs = [values[4], values[7]]
        .into_iter()
        .find(|value| *value > 0.0)
        .map(|value| value.round() as i64);
    Ok(SwfJob {
        line,
        number: values[0] as i64,
        submit,
        run: known(values[3]),
        procs,
        requested_time: known(values[8]).filter(|time| *time > 0.0),
        memory_kb: [values[9], values[6]]
            .into_iter()
            .find(|value| *value > 0.0),
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
        assert_eq!(errors, vec![]);
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
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            vec![
                "2: expected 18 fields, found 4: '2 0 5 100'",
                "3: field 4 (run time) is not a number: 'abc'",
                "4: field 2 (submit time) is -5; a job needs a submit time",
            ]
        );
    }
}
