//! scrun's command line: SCore option words, `SCORE_OPTIONS`, and the
//! program stages joined by `::` or `==`.
//!
//! Parsing happens in layers, as ripgrep does with its low and high flags.
//! [`parse`] first splits the words into option words and stage words, then
//! lexes every option word into settings (`key` or `key=value`), then
//! resolves the settings of both sources into typed [`Options`], and last
//! cuts the stage words into stages. The module is pure: it never reads the
//! environment (the caller passes `SCORE_OPTIONS` in), never touches a file
//! or the daemon, and never panics on any input. Every error names the
//! offending text, shortened with [`quote`] so that hostile input cannot
//! flood the terminal.
#![forbid(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

use scored_proto::batch::{self, ArraySpec, BatchError, BatchOptions};
use scored_proto::proto::{JobOptions, Joiner, ProcRequest};
use scored_proto::submit::{self, ProcCounts, SubmitError};
use scored_proto::units::{is_bare_number, parse_duration, parse_size, quote};

use crate::pmi::Mode;

// The tests are one `check(...)` call per line, a table to read down;
// rustfmt would fold the long ones and not the short ones.
#[cfg(test)]
#[rustfmt::skip]
mod tests;

/// The short usage text: the synopsis and one line per option. `--help`
/// prints it, and `main` prints it after a usage error.
pub const USAGE: &str = "\
usage: scrun [-OPTIONS ...] PROGRAM [ARGS ...] [:: PROGRAM [ARGS ...] ...]
       scrun [-OPTIONS ...] PROGRAM [ARGS ...] == PROGRAM [ARGS ...] [== ...]

'::' runs the stages one after another; '==' runs them together, rank i's
stdout feeding rank i's stdin in the next stage. An option word is a
comma-separated list such as -nodes=4,wait; the leftmost of duplicates wins,
and SCORE_OPTIONS supplies defaults that the command line overrides.

options:
  -nodes=N         run N processes, packed `cores` to a host (default 1)
  -nodes=NxM       run M processes on each of N hosts
  -hosts=H         run on H hosts, `cores` processes on each
  -priority=Q      submit to queue Q, 0 being the most favoured (0-255)
  -wait            wait for admission instead of being rejected
  -memory=SIZE     memory limit per host, such as 512M or 2G
  -disk=SIZE       disk limit of the job, such as 4G
  -time=DUR        run-time estimate and limit, such as 90s or 2h (ended at DUR, exit 76)
  -stat            print the job's accounting to stderr at exit
  -pty             give rank 0 a pseudo-terminal as its controlling terminal
  -mpi=MODE        the ranks' PMI for MPI: auto (default), pmix, pmi1, pmi2 or none
  -batch           submit and return at once, printing the job id (no terminal)
  -name=NAME       the job's name in listings (default: the program's name)
  -output=PATTERN  stdout (and stderr) to a file: %j id, %r rank, %a index,
                   %x name, %% percent (-batch default: scored-%j.out)
  -error=PATTERN   stderr to a file of its own
  -after=ID[:ID]   start once those jobs ended with status 0 (else never)
  -afterany=ID     start once those jobs ended, however they ended
  -array=A-B[:STEP][%MAX]  one job per index, at most MAX at once (-batch);
                   -array=N[%MAX] is the one index N
  -scored=PATH     the daemon's socket (default: SCORED_SOCKET, then the standard path)
  -reattach=DUR    if scored dies, wait this long for it to come back (default 60s; 0: do not)
  -verbose, -v     say when a private scored is started
  -help, -h        print this text
  -version         print the version
  --               end the options; the next word is the program
";

/// The most processes one job may ask for, in total (as scored allows).
pub const MAX_PROCS: u64 = scored_proto::proto::MAX_PROCS;
/// The most hosts one job may ask for with `hosts=H`.
pub const MAX_HOSTS: u64 = scored_proto::proto::MAX_PROCS;
/// The most stages one job may have (as scored allows).
pub const MAX_STAGES: usize = scored_proto::proto::MAX_STAGES;
/// The highest queue number `priority=Q` accepts.
pub const MAX_PRIORITY: u64 = 255;

/// The keys an option word may hold, listed in the hint of an unknown-option error.
const VALID_KEYS: &str = "nodes, hosts, priority, wait, stat, pty, memory, disk, time, mpi, \
     batch, name, output, error, after, afterany, array, scored, reattach, verbose";

/// What the command line asks scrun to do.
// Made once per run and taken apart at once: boxing the invocation would
// save nothing worth its indirection.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Run a job.
    Run(Invocation),
    /// Print [`USAGE`] and exit successfully (`-help`, `--help`, `-h`).
    Help,
    /// Print the version and exit successfully (`-version`, `--version`).
    Version,
}

/// A job to run: its options and its programs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The resolved options, command line first, then `SCORE_OPTIONS`.
    pub options: Options,
    /// One argument vector per stage, program first; never empty, and no
    /// stage is empty or has an empty program name.
    pub stages: Vec<Vec<OsString>>,
    /// How the stages follow each other; [`Joiner::Sequence`] for a single stage.
    pub joiner: Joiner,
}

/// scrun's options after resolving duplicates and both sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Processes and their placement (`nodes=` or `hosts=`); default `nodes=1`.
    pub procs: ProcRequest,
    /// The queue asked for (`priority=`); `None` leaves the choice to the daemon.
    pub priority: Option<u32>,
    /// Wait for admission instead of being rejected (`wait`).
    pub wait: bool,
    /// The user's memory limit per host in bytes (`memory=`).
    pub memory: Option<u64>,
    /// The user's disk limit in bytes (`disk=`).
    pub disk: Option<u64>,
    /// The job's run-time estimate and limit in milliseconds (`time=`).
    pub time_ms: Option<u64>,
    /// Print the job's accounting at exit (`stat`).
    pub stat: bool,
    /// Run rank 0 on a pseudo-terminal that scrun allocates and relays (`pty`).
    pub pty: bool,
    /// The PMI wire protocols scrun serves the ranks (`mpi=`).
    pub mpi: Mode,
    /// The daemon's socket (`scored=`); `None` leaves the choice to the caller.
    pub scored: Option<PathBuf>,
    /// How long scrun waits for a daemon that died to come back, and
    /// reattaches to its job if one does (`reattach=`); zero: it does not.
    pub reattach: Duration,
    /// Say what scrun does on its own account, such as starting a
    /// private daemon (`verbose`, `v`); quiet by default, so that a job's
    /// captured output is the job's alone.
    pub verbose: bool,
    /// `-batch`, `-name=`, `-output=`, `-error=`, `-after=`, `-afterany=`,
    /// `-array=`, checked by the submission validator's rules.
    pub batch: BatchOptions,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            procs: ProcRequest::Nodes(1),
            priority: None,
            wait: false,
            memory: None,
            disk: None,
            time_ms: None,
            stat: false,
            pty: false,
            mpi: Mode::Auto,
            scored: None,
            reattach: DEFAULT_REATTACH,
            verbose: false,
            batch: BatchOptions::default(),
        }
    }
}

/// How long scrun waits for its daemon to come back by default (`reattach=`).
pub const DEFAULT_REATTACH: Duration = Duration::from_secs(60);

impl Options {
    /// The part of the options the daemon needs, as the protocol carries it.
    pub fn job_options(&self) -> JobOptions {
        JobOptions {
            procs: self.procs,
            priority: self.priority,
            wait: self.wait,
            memory: self.memory,
            disk: self.disk,
            pty: self.pty,
            time_ms: self.time_ms,
            batch: self.batch.clone(),
        }
    }
}

/// A wrong command line or `SCORE_OPTIONS`. Its `Display` is the whole
/// message (lowercase, no trailing period, naming the offending text); it
/// has no source chain, so printing it once is enough.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError {
    kind: ErrorKind,
}

/// Where a setting came from; errors say so, because a bad `SCORE_OPTIONS`
/// is invisible on the command line the user is looking at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    CommandLine,
    Environment,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::CommandLine => f.write_str("on the command line"),
            Origin::Environment => f.write_str("in SCORE_OPTIONS"),
        }
    }
}

/// The private detail of a [`UsageError`]. User text is stored already
/// quoted, so that an error never holds on to a megabyte of hostile input.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ErrorKind {
    NotUtf8 {
        word: String,
        origin: Origin,
    },
    MissingName {
        word: String,
        origin: Origin,
    },
    Unknown {
        key: String,
        origin: Origin,
    },
    /// A value that goes on past a comma, such as `-array=1,3,5`.
    CommaInValue {
        key: String,
        value: String,
        origin: Origin,
        /// What the option takes instead.
        what: &'static str,
    },
    TakesNoValue {
        key: String,
        value: String,
    },
    MissingValue {
        key: &'static str,
        example: &'static str,
        origin: Origin,
    },
    InvalidValue {
        key: &'static str,
        origin: Origin,
        reason: String,
    },
    PlacementConflict {
        origin: Origin,
    },
    NoProgram,
    MixedSeparators {
        first: &'static str,
        second: &'static str,
        stage: usize,
    },
    EmptyStage {
        stage: usize,
        separator: &'static str,
    },
    /// A rule of the submission validator, which scored applies too.
    Submit(SubmitError),
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::NotUtf8 { word, origin } => {
                write!(f, "option word {word} {origin} is not valid UTF-8")
            }
            ErrorKind::MissingName { word, origin } => {
                write!(f, "missing option name in {word} {origin}")
            }
            ErrorKind::Unknown { key, origin } => write!(
                f,
                "unknown option {key} {origin}; valid options are {VALID_KEYS}"
            ),
            ErrorKind::CommaInValue {
                key,
                value,
                origin,
                what,
            } => write!(
                f,
                "option {key} {origin}: {value} holds a comma, which separates options \
                 (-a=1,b=2 is -a=1 -b=2): {what}"
            ),
            ErrorKind::TakesNoValue { key, value } => {
                write!(f, "option {key} takes no value, got {value}")
            }
            ErrorKind::MissingValue {
                key,
                example,
                origin,
            } => write!(
                f,
                "option '{key}' {origin} needs a value, such as -{key}={example}"
            ),
            ErrorKind::InvalidValue {
                key,
                origin,
                reason,
            } => write!(f, "option '{key}' {origin}: {reason}"),
            ErrorKind::PlacementConflict { origin } => write!(
                f,
                "options 'nodes' and 'hosts' both given {origin}; give only one placement"
            ),
            ErrorKind::NoProgram => f.write_str("no program given"),
            ErrorKind::MixedSeparators {
                first,
                second,
                stage,
            } => write!(
                f,
                "cannot mix '{first}' and '{second}' in one command ('{second}' after stage {stage})"
            ),
            ErrorKind::EmptyStage { stage, separator } => write!(
                f,
                "stage {stage} is empty: '{separator}' must stand between two programs"
            ),
            ErrorKind::Submit(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for UsageError {}

impl From<ErrorKind> for UsageError {
    fn from(kind: ErrorKind) -> UsageError {
        UsageError { kind }
    }
}

/// Parses scrun's arguments (without argv\[0\]) and the value of the
/// `SCORE_OPTIONS` environment variable, which the caller reads.
///
/// Options on the command line win over those in `SCORE_OPTIONS`, and
/// within one source the leftmost of duplicates wins. `-help` or
/// `-version` among the option words wins over every error, so a user who
/// asks for help gets it even with a broken `SCORE_OPTIONS`.
pub fn parse(
    args: impl IntoIterator<Item = OsString>,
    score_options: Option<&OsStr>,
) -> Result<Parsed, UsageError> {
    let words = split_words(args);
    if let Some(info) = requested_info(&words.options) {
        return Ok(info);
    }
    let mut settings = Vec::new();
    for word in &words.options {
        lex_word(word, Origin::CommandLine, &mut settings)?;
    }
    for word in score_options.into_iter().flat_map(environment_words) {
        lex_word(word, Origin::Environment, &mut settings)?;
    }
    let options = resolve(&settings)?;
    let (stages, joiner) = split_stages(words.stages)?;
    Ok(Parsed::Run(Invocation {
        options,
        stages,
        joiner,
    }))
}

/// The command line cut in two: option words, and everything from the
/// program on.
struct Words {
    options: Vec<OsString>,
    stages: Vec<OsString>,
}

/// Takes option words (those starting with `-`) up to the first word that
/// does not, or up to a bare `--`, which is dropped.
fn split_words(args: impl IntoIterator<Item = OsString>) -> Words {
    let mut args = args.into_iter();
    let mut options = Vec::new();
    let mut stages = Vec::new();
    for word in args.by_ref() {
        if word.as_bytes() == b"--" {
            break;
        }
        if word.as_bytes().starts_with(b"-") {
            options.push(word);
        } else {
            stages.push(word);
            break;
        }
    }
    stages.extend(args);
    Words { options, stages }
}

/// Splits `SCORE_OPTIONS` on ASCII whitespace. The split works on bytes so
/// that one non-UTF-8 word is reported by itself.
fn environment_words(value: &OsStr) -> impl Iterator<Item = &OsStr> {
    value
        .as_bytes()
        .split(u8::is_ascii_whitespace)
        .filter(|word| !word.is_empty())
        .map(OsStr::from_bytes)
}

/// Removes the `--` or `-` in front of an option list.
fn strip_dashes(word: &str) -> &str {
    word.strip_prefix("--")
        .or_else(|| word.strip_prefix('-'))
        .unwrap_or(word)
}

/// Finds the leftmost bare `help`, `h` or `version` among the command-line
/// option words. Words that are not UTF-8 are skipped here and reported by
/// the lexer.
fn requested_info(option_words: &[OsString]) -> Option<Parsed> {
    option_words
        .iter()
        .filter_map(|word| word.to_str())
        .flat_map(|word| strip_dashes(word).split(','))
        .find_map(|item| match item {
            "help" | "h" => Some(Parsed::Help),
            "version" => Some(Parsed::Version),
            _ => None,
        })
}

/// One `key` or `key=value` item of an option word.
struct Setting {
    key: String,
    /// `None` for a bare key, `Some("")` for `key=`.
    value: Option<String>,
    origin: Origin,
}

/// Lexes one option word into settings: strips the dashes, splits on
/// commas, and splits each item at its first `=`.
fn lex_word(word: &OsStr, origin: Origin, out: &mut Vec<Setting>) -> Result<(), UsageError> {
    let Some(text) = word.to_str() else {
        return Err(ErrorKind::NotUtf8 {
            word: quote(&word.to_string_lossy()),
            origin,
        }
        .into());
    };
    let items: Vec<&str> = strip_dashes(text).split(',').collect();
    for (k, item) in items.iter().enumerate() {
        let (key, value) = match item.split_once('=') {
            Some((key, value)) => (key, Some(value)),
            None => (*item, None),
        };
        // No option's name starts with a digit: after `key=value`, such a
        // word is more of that value (`-array=1,3,5`), which a comma ends.
        if let (Some(previous), None) = (items[..k].last(), value) {
            if key.starts_with(|ch: char| ch.is_ascii_digit()) && previous.contains('=') {
                let (name, first) = previous.split_once('=').unwrap_or_default();
                let rest = items[k..].iter().take_while(|item| {
                    item.starts_with(|ch: char| ch.is_ascii_digit()) && !item.contains('=')
                });
                let list: Vec<&str> = std::iter::once(first).chain(rest.copied()).collect();
                return Err(ErrorKind::CommaInValue {
                    key: quote(name),
                    value: quote(&list.join(",")),
                    origin,
                    what: match name {
                        "array" => "an array is one range A-B[:STEP][%MAX] or one index N",
                        "after" | "afterany" => "join job ids with ':', as 12:15",
                        _ => "give one value",
                    },
                }
                .into());
            }
        }
        if key.is_empty() {
            return Err(ErrorKind::MissingName {
                word: quote(text),
                origin,
            }
            .into());
        }
        out.push(Setting {
            key: key.to_string(),
            value: value.map(str::to_string),
            origin,
        });
    }
    Ok(())
}

/// Resolves settings, command line first, into options. Every setting is
/// validated, even a duplicate that will be ignored, because a bad value is
/// a mistake wherever it stands.
fn resolve(settings: &[Setting]) -> Result<Options, UsageError> {
    let mut procs = None;
    let mut priority = None;
    let mut wait = None;
    let mut stat = None;
    let mut pty = None;
    let mut mpi = None;
    let mut memory = None;
    let mut disk = None;
    let mut time_ms = None;
    let mut scored = None;
    let mut reattach = None;
    let mut verbose = None;
    let mut detach = None;
    let mut name = None;
    let mut output = None;
    let mut error = None;
    let mut after = None;
    let mut afterany = None;
    let mut array = None;
    // Where each batch option came from, for the rules that are checked
    // once all are known.
    let mut origins: Vec<(&'static str, Origin)> = Vec::new();
    // The placement key each source named first, to refuse `nodes` and
    // `hosts` together in one source; across sources the leftmost wins.
    let mut placement_keys: [Option<&'static str>; 2] = [None, None];
    for setting in settings {
        match setting.key.as_str() {
            "nodes" => {
                let request = parse_nodes(setting)?;
                note_placement(&mut placement_keys, "nodes", setting.origin)?;
                procs.get_or_insert(request);
            }
            "hosts" => {
                let request = parse_hosts(setting)?;
                note_placement(&mut placement_keys, "hosts", setting.origin)?;
                procs.get_or_insert(request);
            }
            "priority" => {
                let value = parse_priority(setting)?;
                priority.get_or_insert(value);
            }
            "wait" => {
                let value = parse_flag("wait", setting)?;
                wait.get_or_insert(value);
            }
            "stat" => {
                let value = parse_flag("stat", setting)?;
                note_origin(&mut origins, "stat", setting.origin);
                stat.get_or_insert(value);
            }
            "pty" => {
                let value = parse_flag("pty", setting)?;
                note_origin(&mut origins, "pty", setting.origin);
                pty.get_or_insert(value);
            }
            "mpi" => {
                let value = parse_mpi(setting)?;
                mpi.get_or_insert(value);
            }
            "verbose" | "v" => {
                let value = parse_flag("verbose", setting)?;
                verbose.get_or_insert(value);
            }
            "memory" => {
                let value = parse_limit("memory", "512M", setting)?;
                memory.get_or_insert(value);
            }
            "disk" => {
                let value = parse_limit("disk", "4G", setting)?;
                disk.get_or_insert(value);
            }
            "time" => {
                let value = parse_time(setting)?;
                time_ms.get_or_insert(value);
            }
            "scored" => {
                let value = required("scored", "/run/scored.sock", setting)?;
                scored.get_or_insert_with(|| PathBuf::from(value));
            }
            "batch" => {
                let value = parse_flag("batch", setting)?;
                detach.get_or_insert(value);
            }
            "name" => {
                let value = required("name", "sweep", setting)?;
                batch::check_name(value).map_err(|error| refused(setting, error))?;
                note_origin(&mut origins, "name", setting.origin);
                name.get_or_insert_with(|| value.to_string());
            }
            "output" | "error" => {
                let key = if setting.key == "output" {
                    "output"
                } else {
                    "error"
                };
                let value = required(key, "run.%j.out", setting)?;
                // Checked once all options are known (`%a` needs -array).
                note_origin(&mut origins, key, setting.origin);
                let slot = if key == "output" {
                    &mut output
                } else {
                    &mut error
                };
                slot.get_or_insert_with(|| value.to_string());
            }
            "after" | "afterany" => {
                let key = if setting.key == "after" {
                    "after"
                } else {
                    "afterany"
                };
                let value = required(key, "12:15", setting)?;
                let ids = batch::parse_ids(key, value).map_err(|error| refused(setting, error))?;
                note_origin(&mut origins, key, setting.origin);
                let slot = if key == "after" {
                    &mut after
                } else {
                    &mut afterany
                };
                slot.get_or_insert(ids);
            }
            "array" => {
                let value = required("array", "1-100%4", setting)?;
                let spec =
                    ArraySpec::parse(value).map_err(|reason| invalid("array", setting, reason))?;
                note_origin(&mut origins, "array", setting.origin);
                array.get_or_insert(spec);
            }
            "reattach" => {
                let value = required("reattach", "60s", setting)?;
                let duration = parse_duration(value)
                    .map_err(|error| invalid("reattach", setting, error.to_string()))?;
                reattach.get_or_insert(duration);
            }
            // A bare help or version word never gets here: `parse` answers
            // it first. With a value, it is a mistake worth naming.
            "help" | "h" | "version" if setting.origin == Origin::CommandLine => {
                return Err(ErrorKind::TakesNoValue {
                    key: quote(&setting.key),
                    value: quote(setting.value.as_deref().unwrap_or_default()),
                }
                .into());
            }
            other => {
                return Err(ErrorKind::Unknown {
                    key: quote(other),
                    origin: setting.origin,
                }
                .into())
            }
        }
    }
    let batch = BatchOptions {
        detach: detach.unwrap_or(false),
        name,
        output,
        error,
        after: after.unwrap_or_default(),
        afterany: afterany.unwrap_or_default(),
        array,
    };
    // The rules that tie options together (`%a` and -array, -array and
    // -batch), on the options as resolved.
    batch::check(&batch).map_err(|error| {
        let origin = origins
            .iter()
            .find(|(key, _)| *key == error.option)
            .map_or(Origin::CommandLine, |(_, origin)| *origin);
        UsageError::from(ErrorKind::InvalidValue {
            key: error.option,
            origin,
            reason: error.reason,
        })
    })?;
    // What scrun does at a job's end and for its terminal needs a scrun
    // that stays: a batch job has none, nor a terminal.
    if batch.detach {
        let refusals = [
            (
                "stat",
                stat,
                "a batch job has no scrun at its end to print its accounting on: \
                 leave out -stat or -batch (sc_console's 'job ID' and 'history' show \
                 a batch job's accounting)",
            ),
            (
                "pty",
                pty,
                "a batch job runs without a terminal (its input is /dev/null, its \
                 output goes to its files): leave out -pty or -batch",
            ),
        ];
        for (key, given, reason) in refusals {
            if given == Some(true) {
                let origin = origins
                    .iter()
                    .find(|(known, _)| *known == key)
                    .map_or(Origin::CommandLine, |(_, origin)| *origin);
                return Err(ErrorKind::InvalidValue {
                    key,
                    origin,
                    reason: reason.to_string(),
                }
                .into());
            }
        }
    }
    Ok(Options {
        procs: procs.unwrap_or(ProcRequest::Nodes(1)),
        priority,
        wait: wait.unwrap_or(false),
        memory,
        disk,
        time_ms,
        stat: stat.unwrap_or(false),
        pty: pty.unwrap_or(false),
        mpi: mpi.unwrap_or_default(),
        scored,
        reattach: reattach.unwrap_or(DEFAULT_REATTACH),
        verbose: verbose.unwrap_or(false),
        batch,
    })
}

/// Notes where a batch option came from, the first time it is seen (the
/// leftmost wins, as its value does).
fn note_origin(origins: &mut Vec<(&'static str, Origin)>, key: &'static str, origin: Origin) {
    if !origins.iter().any(|(known, _)| *known == key) {
        origins.push((key, origin));
    }
}

/// A batch option's rule broken by one setting, as an invalid value of it.
fn refused(setting: &Setting, error: BatchError) -> UsageError {
    invalid(error.option, setting, error.reason)
}

/// Records that `origin` named the placement `key`, refusing a second,
/// different placement key from the same origin.
fn note_placement(
    placement_keys: &mut [Option<&'static str>; 2],
    key: &'static str,
    origin: Origin,
) -> Result<(), UsageError> {
    let seen = &mut placement_keys[origin as usize];
    match *seen {
        Some(other) if other != key => Err(ErrorKind::PlacementConflict { origin }.into()),
        _ => {
            *seen = Some(key);
            Ok(())
        }
    }
}

/// The value of a key that needs one; `key=` counts as missing.
fn required<'a>(
    key: &'static str,
    example: &'static str,
    setting: &'a Setting,
) -> Result<&'a str, UsageError> {
    match setting.value.as_deref() {
        Some(value) if !value.is_empty() => Ok(value),
        _ => Err(ErrorKind::MissingValue {
            key,
            example,
            origin: setting.origin,
        }
        .into()),
    }
}

/// An invalid-value error for `key`; `reason` names the value.
fn invalid(key: &'static str, setting: &Setting, reason: String) -> UsageError {
    ErrorKind::InvalidValue {
        key,
        origin: setting.origin,
        reason,
    }
    .into()
}

/// A decimal count: digits only (no sign, no space). Counts too large for
/// a `u64` come back as `u64::MAX`, which every caller refuses as too large.
fn parse_count(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    // Only overflow can fail once every byte is a digit.
    Some(text.parse().unwrap_or(u64::MAX))
}

/// `nodes=N` or `nodes=NxM` (also `NXM`).
fn parse_nodes(setting: &Setting) -> Result<ProcRequest, UsageError> {
    let value = required("nodes", "4", setting)?;
    let counts = match value.split_once(['x', 'X']) {
        Some((hosts, per_host)) => parse_count(hosts)
            .zip(parse_count(per_host))
            .map(|(hosts, per_host)| ProcCounts::Grid { hosts, per_host }),
        None => parse_count(value).map(ProcCounts::Nodes),
    };
    let counts = counts.ok_or_else(|| not_a_count("nodes", setting, value))?;
    checked_procs("nodes", setting, value, counts)
}

/// `hosts=H`.
fn parse_hosts(setting: &Setting) -> Result<ProcRequest, UsageError> {
    let value = required("hosts", "2", setting)?;
    let count = parse_count(value).ok_or_else(|| not_a_count("hosts", setting, value))?;
    checked_procs("hosts", setting, value, ProcCounts::Hosts(count))
}

/// The error for a `nodes=` or `hosts=` value that is not a count.
fn not_a_count(key: &'static str, setting: &Setting, value: &str) -> UsageError {
    let expected = match key {
        "nodes" => "is not a process count: expected N or NxM, such as 4 or 2x3",
        _ => "is not a host count: expected a number such as 2",
    };
    invalid(key, setting, format!("{} {expected}", quote(value)))
}

/// Applies the submission validator's rule on process counts to the
/// numbers as typed, then narrows them to the wire's `u32`.
fn checked_procs(
    key: &'static str,
    setting: &Setting,
    value: &str,
    counts: ProcCounts,
) -> Result<ProcRequest, UsageError> {
    let refused = |problem| {
        let error = SubmitError::Procs {
            asked: quote(value),
            problem,
        };
        invalid(key, setting, error.to_string())
    };
    submit::check_counts(counts).map_err(refused)?;
    // The rule allows at most MAX_PROCS, which fits in a u32.
    let narrow = |count: u64| u32::try_from(count).expect("at most MAX_PROCS");
    Ok(match counts {
        ProcCounts::Nodes(n) => ProcRequest::Nodes(narrow(n)),
        ProcCounts::Grid { hosts, per_host } => ProcRequest::Grid {
            hosts: narrow(hosts),
            per_host: narrow(per_host),
        },
        ProcCounts::Hosts(h) => ProcRequest::Hosts(narrow(h)),
    })
}

/// `priority=Q`, a queue number.
fn parse_priority(setting: &Setting) -> Result<u32, UsageError> {
    let value = required("priority", "0", setting)?;
    let out_of_range = || {
        invalid(
            "priority",
            setting,
            format!(
                "{} is not a queue number: expected 0 to {MAX_PRIORITY}",
                quote(value)
            ),
        )
    };
    match parse_count(value) {
        Some(queue) if queue <= MAX_PRIORITY => u32::try_from(queue).map_err(|_| out_of_range()),
        _ => Err(out_of_range()),
    }
}

/// A flag: bare, or `yes`, `no`, `true`, `false`, `1`, `0` in any case.
fn parse_flag(key: &'static str, setting: &Setting) -> Result<bool, UsageError> {
    let Some(value) = setting.value.as_deref() else {
        return Ok(true);
    };
    match value.to_ascii_lowercase().as_str() {
        "yes" | "true" | "1" => Ok(true),
        "no" | "false" | "0" => Ok(false),
        _ => Err(invalid(
            key,
            setting,
            format!(
                "{} is not a yes or no: expected yes, no, true, false, 1 or 0, or no value",
                quote(value)
            ),
        )),
    }
}

/// `memory=SIZE` or `disk=SIZE`: a limit of at least one byte, since a
/// limit of nothing could only kill the job at once.
fn parse_limit(
    key: &'static str,
    example: &'static str,
    setting: &Setting,
) -> Result<u64, UsageError> {
    let value = required(key, example, setting)?;
    let bytes = parse_size(value).map_err(|error| invalid(key, setting, error.to_string()))?;
    submit::check_limit(bytes, || quote(value))
        .map_err(|error| invalid(key, setting, error.to_string()))
}

/// `time=DUR`: the run-time estimate and limit, at least one millisecond,
/// with its unit: a number alone is refused, since Slurm (`--time=5`) and
/// LSF (`-W 5`) read it as minutes and PBS and SGE as seconds.
fn parse_time(setting: &Setting) -> Result<u64, UsageError> {
    let value = required("time", "90s", setting)?;
    let duration =
        parse_duration(value).map_err(|error| invalid("time", setting, error.to_string()))?;
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    let ms = submit::check_time(ms, || quote(value))
        .map_err(|error| invalid("time", setting, error.to_string()))?;
    if is_bare_number(value) {
        return Err(invalid(
            "time",
            setting,
            format!(
                "{} has no unit: write {value}m for minutes or {value}s for seconds (Slurm \
                 and LSF read a number alone as minutes)",
                quote(value)
            ),
        ));
    }
    Ok(ms)
}

/// `mpi=auto|pmix|pmi1|pmi2|none`.
fn parse_mpi(setting: &Setting) -> Result<Mode, UsageError> {
    let value = required("mpi", "pmi2", setting)?;
    [Mode::Auto, Mode::Pmix, Mode::Pmi1, Mode::Pmi2, Mode::None]
        .into_iter()
        .find(|mode| mode.name() == value)
        .ok_or_else(|| {
            invalid(
                "mpi",
                setting,
                format!("{} is not auto, pmix, pmi1, pmi2 or none", quote(value)),
            )
        })
}

/// The spelling of a joiner's separator word.
fn separator(joiner: Joiner) -> &'static str {
    match joiner {
        Joiner::Sequence => "::",
        Joiner::Pipe => "==",
    }
}

/// Cuts the words from the program on into stages at standalone `::` or
/// `==` words. There is no escape for a literal `::` argument; a program
/// that needs one can be wrapped in `sh -c`.
fn split_stages(words: Vec<OsString>) -> Result<(Vec<Vec<OsString>>, Joiner), UsageError> {
    if words.is_empty() {
        return Err(ErrorKind::NoProgram.into());
    }
    let mut joiner = None;
    let mut stages = Vec::new();
    let mut current = Vec::new();
    for word in words {
        let this_joiner = match word.as_bytes() {
            b"::" => Joiner::Sequence,
            b"==" => Joiner::Pipe,
            _ => {
                current.push(word);
                continue;
            }
        };
        let stage = stages.len() + 1;
        match joiner {
            Some(first) if first != this_joiner => {
                return Err(ErrorKind::MixedSeparators {
                    first: separator(first),
                    second: separator(this_joiner),
                    stage,
                }
                .into())
            }
            _ => joiner = Some(this_joiner),
        }
        if current.is_empty() {
            return Err(ErrorKind::EmptyStage {
                stage,
                separator: separator(this_joiner),
            }
            .into());
        }
        stages.push(std::mem::take(&mut current));
    }
    let joiner = joiner.unwrap_or(Joiner::Sequence);
    if current.is_empty() {
        return Err(ErrorKind::EmptyStage {
            stage: stages.len() + 1,
            separator: separator(joiner),
        }
        .into());
    }
    stages.push(current);
    let words: Vec<Vec<&[u8]>> = stages
        .iter()
        .map(|stage| stage.iter().map(|word| word.as_bytes()).collect())
        .collect();
    submit::check_stages(&words).map_err(ErrorKind::Submit)?;
    Ok((stages, joiner))
}
