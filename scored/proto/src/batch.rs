//! The options of jobs that need no terminal: `scrun -batch`, `-name=`,
//! `-output=`, `-error=`, `-after=`, `-afterany=` and `-array=`. Their wire
//! form is [`BatchOptions`], their rules are checked once by [`check`],
//! and what passes is a [`Batch`], which the scheduling core keeps.
//!
//! **API boundary.** The option names and the escapes of an output
//! pattern (`%j` job id, `%r` rank, `%a` array index, `%x` name, `%%`) are
//! fixed: scripts rely on them, and scrun(1) documents them (OPTIONS,
//! BATCH JOBS). Every error names the option and the value
//! ([`BatchError`]).
//!
//! Checks only: no system call. Whether the submitting user may create an
//! output file is checked by scrun, as that user, and the file is opened
//! by the rank's own process once it has the user's identity; scored never
//! opens it.
#![forbid(unsafe_code)]

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::units::quote;

/// Where a batch job's output goes when `-output=` is not given: a file of
/// the working directory named after the job, as Slurm's `slurm-%j.out`.
pub const DEFAULT_OUTPUT: &str = "scored-%j.out";
/// The longest job name, in bytes.
pub const MAX_NAME: usize = 64;
/// The most jobs one submission may depend on (`-after=` and `-afterany=` together).
pub const MAX_DEPENDENCIES: usize = 64;
/// The most elements one array may have. A user's elements also count
/// against the per-user budget of unfinished jobs (scored(8), LIMITS AND
/// BUDGETS), which is smaller by default.
pub const MAX_ARRAY: u32 = 10_000;
/// The longest output pattern, and the longest path one may expand to
/// (PATH_MAX without its terminating NUL).
pub const MAX_PATTERN: usize = 4095;
/// The most bytes one escape adds to a path: a job id or an index in
/// decimal, or a name.
const MAX_ESCAPE: usize = MAX_NAME;

/// The options as scrun sends them; absent from older clients, which send
/// none of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchOptions {
    /// `-batch`: the job runs without a client; scrun returns at once.
    #[serde(default)]
    pub detach: bool,
    /// `-name=NAME`.
    #[serde(default)]
    pub name: Option<String>,
    /// `-output=PATTERN`: the file of stdout (and of stderr, without `-error=`).
    #[serde(default)]
    pub output: Option<String>,
    /// `-error=PATTERN`: the file of stderr.
    #[serde(default)]
    pub error: Option<String>,
    /// `-after=ID[:ID...]`: start after these jobs ended with status 0.
    #[serde(default)]
    pub after: Vec<u64>,
    /// `-afterany=ID[:ID...]`: start after these jobs ended, however.
    #[serde(default)]
    pub afterany: Vec<u64>,
    /// `-array=A-B[:STEP][%MAX]`.
    #[serde(default)]
    pub array: Option<ArraySpec>,
}

/// `-array=A-B[:STEP][%MAX]`: one job for each index A, A+STEP, ... up to
/// B, at most MAX of them unfinished and admitted at once; `-array=N` is
/// `N-N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArraySpec {
    /// The first index.
    pub first: u32,
    /// The last index asked for (the last element's index is the highest
    /// index of the sequence not above it).
    pub last: u32,
    /// The step between indices, at least 1.
    pub step: u32,
    /// The most elements that run at once; `None`: no limit of its own.
    #[serde(default)]
    pub max: Option<u32>,
}

impl ArraySpec {
    /// Parses `A-B[:STEP][%MAX]`, or one index `N[%MAX]`, the array `N-N`
    /// (as Slurm's `--array=N`); the error says what is wrong with `text`.
    pub fn parse(text: &str) -> Result<ArraySpec, String> {
        let form = "expected A-B, A-B:STEP or A-B:STEP%MAX, such as 1-100%4, or one index N";
        let (range, max) = match text.split_once('%') {
            Some((range, max)) => (range, Some(max)),
            None => (text, None),
        };
        let (range, step) = match range.split_once(':') {
            Some((range, step)) => (range, Some(step)),
            None => (range, None),
        };
        let number = |part: &str| -> Option<u32> {
            if part.is_empty() || !part.bytes().all(|byte| byte.is_ascii_digit()) {
                return None;
            }
            part.parse().ok()
        };
        let (first, last) = match range.split_once('-') {
            Some(bounds) => bounds,
            None if range.is_empty() || !range.bytes().all(|byte| byte.is_ascii_digit()) => {
                return Err(format!(
                    "{} is not a range or an index: {form}",
                    quote(text)
                ))
            }
            None if step.is_some() => {
                return Err(format!(
                    "{} has a step but one index: a step needs a range A-B:STEP",
                    quote(text)
                ))
            }
            None => (range, range),
        };
        let (Some(first), Some(last)) = (number(first), number(last)) else {
            return Err(format!(
                "{} is not a range of indices from 0 to {}: {form}",
                quote(text),
                u32::MAX
            ));
        };
        let step = match step {
            None => 1,
            Some(step) => number(step)
                .ok_or_else(|| format!("{} has no step after ':': {form}", quote(text)))?,
        };
        let max = match max {
            None => None,
            Some(max) => Some(
                number(max)
                    .ok_or_else(|| format!("{} has no count after '%': {form}", quote(text)))?,
            ),
        };
        let spec = ArraySpec {
            first,
            last,
            step,
            max,
        };
        spec.check()
            .map_err(|reason| format!("{} {reason}", quote(text)))?;
        Ok(spec)
    }

    /// The rules: A no more than B, a step and a MAX of at least 1, and at
    /// most [`MAX_ARRAY`] elements. The error completes a sentence that
    /// starts with the array.
    fn check(&self) -> Result<(), String> {
        if self.first > self.last {
            return Err(format!(
                "ends before it starts: {} is above {}",
                self.first, self.last
            ));
        }
        if self.step == 0 {
            return Err("has a step of 0: the step must be at least 1".into());
        }
        if self.max == Some(0) {
            return Err("lets no element run (%0): MAX must be at least 1".into());
        }
        let len = u64::from(self.last - self.first) / u64::from(self.step) + 1;
        if len > u64::from(MAX_ARRAY) {
            return Err(format!(
                "has {len} elements; an array may have at most {MAX_ARRAY}"
            ));
        }
        Ok(())
    }

    /// How many elements the array has.
    pub fn len(&self) -> u32 {
        (self.last - self.first) / self.step.max(1) + 1
    }

    /// Never empty: an array has at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The index of element `k` (from 0).
    pub fn index(&self, k: u32) -> u32 {
        self.first + k * self.step.max(1)
    }

    /// The array as scrun spells it: `1-100:2%4`, step and MAX only when given.
    pub fn describe(&self) -> String {
        let mut text = format!("{}-{}", self.first, self.last);
        if self.step != 1 {
            text.push_str(&format!(":{}", self.step));
        }
        if let Some(max) = self.max {
            text.push_str(&format!("%{max}"));
        }
        text
    }
}

/// A job another one waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dependency {
    /// Its id (an array's id is its first element's: the whole array).
    pub job: u64,
    /// `-afterany`: however it ends; else (`-after`) only with status 0.
    pub any: bool,
}

impl Dependency {
    /// The option that names it.
    pub fn option(&self) -> &'static str {
        if self.any {
            "afterany"
        } else {
            "after"
        }
    }
}

/// An output pattern that keeps the rules: not empty, no NUL byte, only
/// the escapes `%j`, `%r`, `%a` (with an array), `%x` and `%%`, and no
/// expansion longer than [`MAX_PATTERN`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pattern(Box<str>);

/// What a pattern's escapes stand for, for one process.
#[derive(Debug, Clone, Copy)]
pub struct Expansion<'a> {
    /// The job's id (`%j`).
    pub job: u64,
    /// The rank (`%r`); `None` keeps `%r` as it is (to show a pattern of
    /// one file per rank).
    pub rank: Option<u32>,
    /// The array index (`%a`).
    pub index: Option<u32>,
    /// The job's name (`%x`).
    pub name: &'a str,
}

impl Pattern {
    /// Checks `text` as the pattern of `option` (`output` or `error`) of a
    /// job that is an array element or not.
    pub fn parse(option: &'static str, text: &str, array: bool) -> Result<Pattern, BatchError> {
        let refuse = |reason: String| Err(BatchError { option, reason });
        if text.is_empty() {
            return refuse("the pattern is empty: give a file name such as run.%j.out".into());
        }
        if text.contains('\0') {
            return refuse(format!("{} holds a NUL byte", quote(text)));
        }
        let mut escapes = 0usize;
        let mut chars = text.chars();
        while let Some(ch) = chars.next() {
            if ch != '%' {
                continue;
            }
            match chars.next() {
                Some('j' | 'r' | 'x' | '%') => {}
                Some('a') if array => {}
                Some('a') => {
                    return refuse(format!(
                        "{} has %a, the array index, but the job is not an array (-array=)",
                        quote(text)
                    ))
                }
                Some(other) => {
                    return refuse(format!(
                        "{} has an unknown escape '%{}': the escapes are %j (job id), %r (rank), \
                         %a (array index), %x (job name) and %% (a percent sign)",
                        quote(text),
                        other.escape_default()
                    ))
                }
                None => {
                    return refuse(format!(
                        "{} ends with a lone '%': write %% for a percent sign",
                        quote(text)
                    ))
                }
            }
            escapes += 1;
        }
        if text.len() + escapes * MAX_ESCAPE > MAX_PATTERN {
            return refuse(format!(
                "the pattern is {} bytes long with {escapes} escapes, which may expand past the \
                 {MAX_PATTERN} bytes of a path",
                text.len()
            ));
        }
        Ok(Pattern(text.into()))
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether each rank gets a file of its own (`%r`).
    pub fn per_rank(&self) -> bool {
        let mut chars = self.0.chars();
        while let Some(ch) = chars.next() {
            if ch == '%' && chars.next() == Some('r') {
                return true;
            }
        }
        false
    }

    /// The path for one process (or, with no rank, the pattern of the
    /// job's files with `%r` kept).
    pub fn expand(&self, with: &Expansion) -> String {
        let mut out = String::with_capacity(self.0.len() + 16);
        let mut chars = self.0.chars();
        while let Some(ch) = chars.next() {
            if ch != '%' {
                out.push(ch);
                continue;
            }
            match chars.next() {
                Some('j') => out.push_str(&with.job.to_string()),
                Some('r') => match with.rank {
                    Some(rank) => out.push_str(&rank.to_string()),
                    None => out.push_str("%r"),
                },
                Some('a') => out.push_str(&with.index.unwrap_or(0).to_string()),
                Some('x') => out.push_str(with.name),
                Some(other) => out.push(other),
                None => out.push('%'),
            }
        }
        out
    }
}

/// Where a job's stdout and stderr go, when not to its client's descriptors.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct OutputFiles {
    /// stdout's file; `None`: the client's stdout.
    pub stdout: Option<Pattern>,
    /// stderr's file; `None`: where stdout goes (its file, or the client's stderr).
    pub stderr: Option<Pattern>,
}

impl OutputFiles {
    /// Whether both go to the client.
    pub fn is_empty(&self) -> bool {
        self.stdout.is_none() && self.stderr.is_none()
    }

    /// The pattern of stderr's file, if stderr goes to a file: its own, or stdout's.
    pub fn stderr_file(&self) -> Option<&Pattern> {
        self.stderr.as_ref().or(self.stdout.as_ref())
    }
}

/// The options that passed [`check`], as the core keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Batch {
    /// Runs without a client (`-batch`).
    pub detach: bool,
    /// The name given (`-name=`); without one, listings show the program's base name.
    pub name: Option<Box<str>>,
    /// Output files (a batch job always has stdout's).
    pub output: OutputFiles,
    /// The jobs it waits for, each once, `-after` ones first.
    pub after: Vec<Dependency>,
    /// The array it makes, if any.
    pub array: Option<ArraySpec>,
}

impl Batch {
    /// Whether nothing was asked: an interactive job with its client's
    /// output, no name, no dependency and no array.
    pub fn is_plain(&self) -> bool {
        !self.detach
            && self.name.is_none()
            && self.output.is_empty()
            && self.after.is_empty()
            && self.array.is_none()
    }
}

/// A batch option that breaks a rule: the option and why, naming the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchError {
    /// The option, as scrun spells it (`output`, `after`, ...).
    pub option: &'static str,
    /// What is wrong, naming the value.
    pub reason: String,
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "option '{}': {}", self.option, self.reason)
    }
}

impl std::error::Error for BatchError {}

/// The rule on a job name: 1 to [`MAX_NAME`] bytes, no blank, no control
/// character and no `/` (a name is one word, and `%x` puts it in a path).
pub fn check_name(name: &str) -> Result<(), BatchError> {
    let refuse = |reason: String| {
        Err(BatchError {
            option: "name",
            reason,
        })
    };
    if name.is_empty() {
        return refuse("the name is empty".into());
    }
    if name.len() > MAX_NAME {
        return refuse(format!(
            "{} is {} bytes long; a name has at most {MAX_NAME}",
            quote(name),
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|ch| ch.is_control() || ch.is_whitespace() || *ch == '/')
    {
        return refuse(format!(
            "{} holds {}: a name is one word without blanks, control characters or '/'",
            quote(name),
            match bad {
                '/' => "'/'".to_string(),
                ch if ch.is_whitespace() && !ch.is_control() => "a blank".to_string(),
                ch => format!("the control character '{}'", ch.escape_default()),
            }
        ));
    }
    Ok(())
}

/// The name a job without `-name=` is shown by: its program's base name,
/// with what a name may not hold replaced by `_`, cut to [`MAX_NAME`] bytes.
pub fn default_name(program: &[u8]) -> String {
    let base = program
        .rsplit(|byte| *byte == b'/')
        .find(|part| !part.is_empty())
        .unwrap_or(program);
    let text = String::from_utf8_lossy(base);
    let mut name = String::new();
    for ch in text.chars() {
        let ch = if ch.is_control() || ch.is_whitespace() || ch == '/' {
            '_'
        } else {
            ch
        };
        if name.len() + ch.len_utf8() > MAX_NAME {
            break;
        }
        name.push(ch);
    }
    if name.is_empty() {
        name.push('_');
    }
    name
}

/// Applies every rule to the options; a batch job without `-output=`
/// gets [`DEFAULT_OUTPUT`].
pub fn check(options: &BatchOptions) -> Result<Batch, BatchError> {
    if let Some(name) = &options.name {
        check_name(name)?;
    }
    let array = match options.array {
        Some(spec) => {
            spec.check().map_err(|reason| BatchError {
                option: "array",
                reason: format!("{} {reason}", quote(&spec.describe())),
            })?;
            if !options.detach {
                return Err(BatchError {
                    option: "array",
                    reason: "an array's elements run without a terminal: give -batch too".into(),
                });
            }
            Some(spec)
        }
        None => None,
    };
    let is_array = array.is_some();
    let pattern = |option, text: &Option<String>| {
        text.as_deref()
            .map(|text| Pattern::parse(option, text, is_array))
            .transpose()
    };
    let mut output = OutputFiles {
        stdout: pattern("output", &options.output)?,
        stderr: pattern("error", &options.error)?,
    };
    if options.detach && output.stdout.is_none() {
        output.stdout = Some(Pattern(DEFAULT_OUTPUT.into()));
    }
    let mut after: Vec<Dependency> = Vec::new();
    for (ids, any) in [(&options.after, false), (&options.afterany, true)] {
        let option = if any { "afterany" } else { "after" };
        for &job in ids {
            if job == 0 {
                return Err(BatchError {
                    option,
                    reason: "0 is not a job id: ids start at 1".into(),
                });
            }
            if !after.iter().any(|known| known.job == job) {
                after.push(Dependency { job, any });
            }
        }
        if after.len() > MAX_DEPENDENCIES {
            return Err(BatchError {
                option,
                reason: format!(
                    "the job waits for {} jobs; at most {MAX_DEPENDENCIES} are allowed",
                    after.len()
                ),
            });
        }
    }
    Ok(Batch {
        detach: options.detach,
        name: options.name.as_deref().map(Box::from),
        output,
        after,
        array,
    })
}

/// Parses the ids of `-after=` or `-afterany=`: `ID[:ID...]`.
pub fn parse_ids(option: &'static str, text: &str) -> Result<Vec<u64>, BatchError> {
    let refuse = |reason: String| Err(BatchError { option, reason });
    let mut ids = Vec::new();
    for part in text.split(':') {
        if part.is_empty() || !part.bytes().all(|byte| byte.is_ascii_digit()) {
            return refuse(format!(
                "{} is not a job id: expected ID or ID:ID..., such as 12 or 12:15",
                quote(part)
            ));
        }
        match part.parse::<u64>() {
            Ok(0) => return refuse("0 is not a job id: ids start at 1".into()),
            Ok(id) => ids.push(id),
            Err(_) => return refuse(format!("{} is not a job id: too large", quote(part))),
        }
        if ids.len() > MAX_DEPENDENCIES {
            return refuse(format!(
                "{} names more than {MAX_DEPENDENCIES} jobs",
                quote(text)
            ));
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests;
