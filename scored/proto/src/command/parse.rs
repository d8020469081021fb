//! The console line parser and its inverse, the canonical printer.
//!
//! [`parse_line`] turns one line of sc_console or `scored.rc` input into a
//! [`Command`] (sc_console(8), COMMANDS), and [`render`] prints a command back so that
//! parsing the text gives the same value. Errors are typed
//! ([`ParseErrorKind`]) and their messages are lowercase, name the offending
//! word and the line, and end with a hint (usually the command's usage from
//! the help table, [`super::help`]).
//!
//! Pure: this module never touches the system. It must never panic on any
//! input, because a client's line reaches it straight from a socket.
//!
//! The commands' words are parsed here; their `key=value` settings in
//! `settings.rs`, the printer in `render.rs`, UTC instants in `utc.rs` and
//! the "did you mean" suggestions in `suggest.rs`.
#![forbid(unsafe_code)]

use std::fmt;
use std::time::Duration;

use super::help;
use super::{ClusterRef, Command, JobFilter, QueueAction, Since, JOB_STATES};
use crate::units::{format_duration_exact, is_bare_number, parse_duration, quote};

mod render;
mod settings;
mod suggest;
mod utc;

pub use render::render;
pub use suggest::closest;
use suggest::{did_you_mean, one_of};
pub use utc::{format_utc, parse_utc};

/// The longest line accepted, in bytes. Longer lines are refused before any
/// other work, so a hostile client cannot make the parser do much.
pub const MAX_LINE: usize = 64 * 1024;

/// The highest queue number.
pub const MAX_QUEUE: u32 = 255;

/// The shortest time slice `timeslice` accepts.
pub const MIN_TIMESLICE: Duration = Duration::from_millis(1);

/// The longest time slice `timeslice` accepts.
pub const MAX_TIMESLICE: Duration = Duration::from_secs(3600);

/// The longest group name `group=` accepts (the usual Linux limit).
pub const MAX_GROUP_NAME: usize = 32;

/// The highest signal number `kill` accepts (`SIGRTMAX` on Linux).
pub const MAX_SIGNAL: i32 = 64;

/// What kind of mistake a line has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// The line is longer than [`MAX_LINE`].
    LineTooLong,
    /// The line holds a control character (other than a tab or a final newline).
    ControlCharacter,
    /// The first word is not a command (also an unknown `help` topic).
    UnknownCommand,
    /// A fixed word such as `limit`, `enable` or `all` is wrong.
    UnknownKeyword,
    /// A required argument is missing.
    MissingArgument,
    /// The command has more arguments than it takes.
    ExtraArgument,
    /// A number, size, duration, percentage, signal or name is malformed or out of range.
    InvalidValue,
    /// A `key=value` setting has a key the command does not know.
    UnknownSetting,
    /// A setting is given twice in one command.
    DuplicateSetting,
    /// A word where a setting belongs has no `=`.
    MissingEquals,
    /// A setting has nothing after `=`.
    EmptyValue,
}

/// Why a console line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The kind of mistake, for callers and tests that match on it.
    pub kind: ParseErrorKind,
    /// The message shown to the user: lowercase, naming the word and the
    /// line, ending with a hint.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ParseError {}

/// Linux signal names and numbers, without the `SIG` prefix. The numbers are
/// the generic Linux ones (x86, ARM, RISC-V, PowerPC, s390); Alpha, MIPS and
/// SPARC number some signals differently and are not supported by scored.
/// The first name of a number is the one [`render`] prints; `IOT`, `CLD` and
/// `POLL` are accepted aliases.
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("IOT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("POLL", 29),
    ("PWR", 30),
    ("SYS", 31),
];

const CLUSTER_LIMITS: &[&str] = &["memory", "disk", "jobs"];
const QUEUE_SETTINGS: &[&str] = &[
    "mode",
    "cputime",
    "residency",
    "memory",
    "disk",
    "group",
    "backfill",
    "mpl",
    "share",
    "fairshare",
];
const QUEUE_ACTIONS: &[&str] = &["enable", "disable", "activate", "deactivate", "set"];
/// The options of `jobs`, `kill` and `history`: none of them is the value
/// of another (`kill --user --name x` lacks its user, it is not user
/// `--name`).
const OPTION_WORDS: &[&str] = &["-s", "--signal", "--user", "--name", "--state", "--since"];

/// Parses one console line. Blank lines and comments (a word starting with
/// `#` ends the line) give `Ok(None)`. A final `\n` or `\r\n`, as read from a
/// file, is allowed.
pub fn parse_line(line: &str) -> Result<Option<Command>, ParseError> {
    if line.len() > MAX_LINE {
        return Err(ParseError {
            kind: ParseErrorKind::LineTooLong,
            message: format!(
                "line {} is {} bytes long: the limit is {MAX_LINE} bytes, one command per line",
                quote(line),
                line.len()
            ),
        });
    }
    let body = match line.strip_suffix('\n') {
        Some(rest) => rest.strip_suffix('\r').unwrap_or(rest),
        None => line,
    };
    if let Some((column, ch)) = body
        .chars()
        .enumerate()
        .find(|(_, ch)| ch.is_control() && *ch != '\t')
    {
        return Err(ParseError {
            kind: ParseErrorKind::ControlCharacter,
            message: format!(
                "control character '{}' at column {} of {}: a command line is plain text",
                ch.escape_default(),
                column + 1,
                quote(body)
            ),
        });
    }
    let words: Vec<&str> = body
        .split([' ', '\t'])
        .filter(|word| !word.is_empty())
        .take_while(|word| !word.starts_with('#'))
        .collect();
    let Some(&first) = words.first() else {
        return Ok(None);
    };
    let mut parser = Parser {
        context: quote_line(&words.join(" ")),
        words,
        pos: 1,
        name: "",
        form: None,
    };
    let Some(entry) = help::entry(first) else {
        return Err(parser.unknown_command(first));
    };
    parser.name = entry.name;
    parser.command().map(Some)
}

/// Walks the words of one line and builds the command, keeping what error
/// messages need: the line (quoted) and the usage of the command.
struct Parser<'a> {
    words: Vec<&'a str>,
    pos: usize,
    /// The line, normalised to single spaces and quoted for messages.
    context: String,
    /// The command word, from the help table.
    name: &'static str,
    /// The usage line of the form being parsed, when the command has several.
    form: Option<&'static str>,
}

impl<'a> Parser<'a> {
    fn command(&mut self) -> Result<Command, ParseError> {
        let command = match self.name {
            "help" => match self.next() {
                None => Command::Help(None),
                Some(topic) => match help::entry(topic) {
                    Some(entry) => Command::Help(Some(entry.name.to_string())),
                    None => return Err(self.unknown_command(topic)),
                },
            },
            "status" => Command::Status,
            "hosts" => Command::Hosts,
            "clusters" => Command::Clusters,
            "queues" => Command::Queues,
            "cluster" => {
                let cluster = self.cluster()?;
                let word = self.required("the word limit")?;
                if word != "limit" {
                    return Err(self.unknown_keyword(word, &["limit"]));
                }
                Command::ClusterLimit {
                    cluster,
                    limits: self.cluster_limits()?,
                }
            }
            "queue" => {
                let queue = self.queue("queue number")?;
                let word =
                    self.required("an action (enable, disable, activate, deactivate or set)")?;
                let action = match word {
                    "enable" => QueueAction::Enable,
                    "disable" => QueueAction::Disable,
                    "activate" => QueueAction::Activate,
                    "deactivate" => QueueAction::Deactivate,
                    "set" => {
                        self.form = self.usage().lines().find(|line| line.contains(" set "));
                        return Ok(Command::QueueSet {
                            queue,
                            settings: self.queue_settings()?,
                        });
                    }
                    _ => return Err(self.unknown_keyword(word, QUEUE_ACTIONS)),
                };
                Command::QueueState { queue, action }
            }
            "jobs" => {
                let mut all = false;
                let mut filter = JobFilter::default();
                while let Some(word) = self.next() {
                    match word {
                        "all" if !all => all = true,
                        "--user" | "--name" | "--state" => self.filter_option(word, &mut filter)?,
                        "all" => {
                            return Err(self.invalid(
                                format!("{} given twice", quote(word)),
                                self.usage_hint(),
                            ))
                        }
                        _ => {
                            return Err(
                                self.unknown_keyword(word, &["all", "--user", "--name", "--state"])
                            )
                        }
                    }
                }
                Command::Jobs { all, filter }
            }
            "job" => Command::Job(self.job_id()?),
            "kill" => self.kill()?,
            "suspend" => Command::Suspend(self.job_id()?),
            "resume" => Command::Resume(self.job_id()?),
            "move" => {
                let job = self.job_id()?;
                let queue = self.queue("queue number to move to")?;
                Command::Move { job, queue }
            }
            "timeslice" => match self.next() {
                None => Command::Timeslice(None),
                Some(word) => Command::Timeslice(Some(self.timeslice(word)?)),
            },
            "history" => {
                let mut user = None;
                let mut since = None;
                while let Some(word) = self.next() {
                    match word {
                        "--user" if user.is_none() => {
                            user = Some(
                                self.option_value("a user name or uid after --user")?
                                    .to_string(),
                            );
                        }
                        "--since" if since.is_none() => {
                            let value = self.required("a time after --since")?;
                            since = Some(self.since(value)?);
                        }
                        "--user" | "--since" => {
                            return Err(self.invalid(
                                format!("{} given twice", quote(word)),
                                self.usage_hint(),
                            ))
                        }
                        _ => return Err(self.unknown_keyword(word, &["--user", "--since"])),
                    }
                }
                Command::History { user, since }
            }
            "restart" => Command::Restart,
            "shutdown" => match self.next() {
                None => Command::Shutdown { now: false },
                Some("now") => Command::Shutdown { now: true },
                Some(word) => return Err(self.unknown_keyword(word, &["now"])),
            },
            // The help table and this match list the same words; a test
            // checks that every table entry parses, so this is unreachable
            // unless someone adds a command to the table only.
            _ => return Err(self.unknown_command(self.name)),
        };
        self.end()?;
        Ok(command)
    }

    // Words.

    fn next(&mut self) -> Option<&'a str> {
        let word = self.words.get(self.pos).copied();
        if word.is_some() {
            self.pos += 1;
        }
        word
    }

    fn required(&mut self, what: &str) -> Result<&'a str, ParseError> {
        match self.next() {
            Some(word) => Ok(word),
            None => Err(self.error(
                ParseErrorKind::MissingArgument,
                format!("missing {what}"),
                self.usage_hint(),
            )),
        }
    }

    /// The value of an option, which is no option word itself.
    fn option_value(&mut self, what: &str) -> Result<&'a str, ParseError> {
        match self.words.get(self.pos) {
            Some(word) if OPTION_WORDS.contains(word) => Err(self.error(
                ParseErrorKind::MissingArgument,
                format!("missing {what}"),
                format!(
                    "{} is an option of its own; {}",
                    quote(word),
                    self.usage_hint()
                ),
            )),
            _ => self.required(what),
        }
    }

    fn end(&mut self) -> Result<(), ParseError> {
        match self.next() {
            None => Ok(()),
            Some(word) => Err(self.error(
                ParseErrorKind::ExtraArgument,
                format!("extra argument {}", quote(word)),
                self.usage_hint(),
            )),
        }
    }

    // Messages.

    fn error(&self, kind: ParseErrorKind, what: String, hint: String) -> ParseError {
        ParseError {
            kind,
            message: format!("{what} in {}: {hint}", self.context),
        }
    }

    fn usage(&self) -> &'static str {
        help::usage(self.name).unwrap_or("")
    }

    fn usage_hint(&self) -> String {
        let usage = match self.form {
            Some(form) => form.to_string(),
            None => self.usage().lines().collect::<Vec<_>>().join(" or "),
        };
        format!("usage: {usage}")
    }

    fn unknown_command(&self, word: &str) -> ParseError {
        let names: Vec<&str> = help::command_names().collect();
        let hint = match closest(word, &names) {
            Some(name) => format!("did you mean '{name}'? help lists the commands"),
            None => "help lists the commands".to_string(),
        };
        self.error(
            ParseErrorKind::UnknownCommand,
            format!("unknown command {}", quote(word)),
            hint,
        )
    }

    fn unknown_keyword(&self, word: &str, expected: &[&str]) -> ParseError {
        self.error(
            ParseErrorKind::UnknownKeyword,
            format!("unexpected {}", quote(word)),
            format!(
                "{}expected {}; {}",
                did_you_mean(word, expected),
                one_of(expected),
                self.usage_hint()
            ),
        )
    }

    fn invalid(&self, what: String, hint: String) -> ParseError {
        self.error(ParseErrorKind::InvalidValue, what, hint)
    }

    /// `--user U`, `--name N` or `--state S` (`option`), each at most once.
    fn filter_option(&mut self, option: &str, filter: &mut JobFilter) -> Result<(), ParseError> {
        let (given, what) = match option {
            "--user" => (filter.user.is_some(), "a user name or uid after --user"),
            "--name" => (filter.name.is_some(), "a job name after --name"),
            _ => (filter.state.is_some(), "a state after --state"),
        };
        if given {
            return Err(self.invalid(format!("{} given twice", quote(option)), self.usage_hint()));
        }
        let value = self.option_value(what)?;
        if option == "--state" && !JOB_STATES.contains(&value) {
            return Err(self.invalid(
                format!("unknown state {}", quote(value)),
                format!(
                    "{}expected {}",
                    did_you_mean(value, &JOB_STATES),
                    one_of(&JOB_STATES)
                ),
            ));
        }
        let slot = match option {
            "--user" => &mut filter.user,
            "--name" => &mut filter.name,
            _ => &mut filter.state,
        };
        *slot = Some(value.to_string());
        Ok(())
    }

    /// `kill [-s SIGNAL] ID [ID...]`, `kill [-s SIGNAL] [--user U] [--name
    /// N]`, or `kill ID [ID...] SIGNAL` with a signal's name: a number is
    /// always a job id, so `kill 63 64` ends jobs 63 and 64. A word out of
    /// place is named with where it stands, never taken for a job id it
    /// cannot be.
    fn kill(&mut self) -> Result<Command, ParseError> {
        let mut jobs = Vec::new();
        let mut filter = JobFilter::default();
        let mut signal = None;
        while let Some(word) = self.next() {
            match word {
                "-s" | "--signal" => {
                    if signal.is_some() {
                        return Err(
                            self.invalid("a signal given twice".to_string(), self.usage_hint())
                        );
                    }
                    let value = self.required("a signal after -s")?;
                    signal = Some(self.signal(value)?);
                }
                "--user" | "--name" => self.filter_option(word, &mut filter)?,
                _ if word.bytes().all(|byte| byte.is_ascii_digit()) => {
                    self.pos -= 1;
                    jobs.push(self.job_id()?);
                }
                // `kill -9 42`, as the shell's kill: the signal goes with -s.
                _ if word
                    .strip_prefix('-')
                    .is_some_and(|name| parse_signal(name).is_some()) =>
                {
                    return Err(self.invalid(
                        format!("{} is not an option", quote(word)),
                        format!(
                            "give a signal with -s, as -s {}; {}",
                            word.trim_start_matches('-'),
                            self.usage_hint()
                        ),
                    ))
                }
                _ if word.starts_with('-') => {
                    return Err(self.unknown_keyword(word, &["-s", "--user", "--name"]))
                }
                _ if parse_signal(word).is_some() => {
                    signal = Some(self.signal_after_ids(word, &jobs, &filter, signal)?);
                }
                // Where a signal's name may stand, a word that is none.
                _ if signal.is_none() && !jobs.is_empty() && self.pos == self.words.len() => {
                    signal = Some(self.signal(word)?);
                }
                _ if jobs.is_empty() && !filter.is_empty() => {
                    return Err(self.error(
                        ParseErrorKind::ExtraArgument,
                        format!(
                            "unexpected {} after {}",
                            quote(word),
                            quote(self.words[self.pos - 2])
                        ),
                        format!(
                            "--user and --name take one word each; {}",
                            self.usage_hint()
                        ),
                    ))
                }
                _ => {
                    return Err(self.invalid(
                        format!("invalid job id {}", quote(word)),
                        format!("expected a job number such as 42; {}", self.usage_hint()),
                    ))
                }
            }
        }
        if jobs.is_empty() && filter.is_empty() {
            return Err(self.error(
                ParseErrorKind::MissingArgument,
                "missing job id, --user or --name".to_string(),
                self.usage_hint(),
            ));
        }
        if !jobs.is_empty() && !filter.is_empty() {
            return Err(self.invalid(
                "job ids and --user or --name together".to_string(),
                format!("give one or the other; {}", self.usage_hint()),
            ));
        }
        Ok(Command::Kill {
            jobs,
            filter,
            signal,
        })
    }

    /// A signal's name without -s (`word`, which names one), taken only in
    /// the one place it may stand: last, after the job ids, with no other
    /// signal given.
    fn signal_after_ids(
        &self,
        word: &str,
        jobs: &[u64],
        filter: &JobFilter,
        signal: Option<i32>,
    ) -> Result<i32, ParseError> {
        let number = self.signal(word)?;
        let hint = |why: &str| format!("{why} -s {}; {}", signal_name(number), self.usage_hint());
        if signal.is_some() {
            return Err(self.invalid("a signal given twice".to_string(), self.usage_hint()));
        }
        if jobs.is_empty() && filter.is_empty() {
            return Err(self.invalid(
                format!("{} is a signal, not a job id", quote(word)),
                hint("a signal's name goes after the job ids, or anywhere with -s, as"),
            ));
        }
        if jobs.is_empty() {
            return Err(self.invalid(
                format!("signal {} without -s", quote(word)),
                hint("with --user or --name the signal goes with -s, as"),
            ));
        }
        match self.words.get(self.pos) {
            None => Ok(number),
            Some(next) => Err(self.error(
                ParseErrorKind::ExtraArgument,
                format!(
                    "unexpected {} after the signal {}",
                    quote(next),
                    quote(word)
                ),
                hint(
                    "a signal's name after the job ids ends the line: give every id \
                     before it, or the signal with -s, as",
                ),
            )),
        }
    }

    // Arguments.

    fn job_id(&mut self) -> Result<u64, ParseError> {
        let word = self.required("job id")?;
        match parse_digits(word) {
            Some(id) if id >= 1 => Ok(id),
            _ => Err(self.invalid(
                format!("invalid job id {}", quote(word)),
                format!("expected a job number such as 42; {}", self.usage_hint()),
            )),
        }
    }

    fn queue(&mut self, what: &str) -> Result<u32, ParseError> {
        let word = self.required(what)?;
        match parse_digits(word) {
            Some(queue) if queue <= u64::from(MAX_QUEUE) => Ok(queue as u32),
            _ => Err(self.invalid(
                format!("invalid queue number {}", quote(word)),
                format!("expected a number from 0 to {MAX_QUEUE}"),
            )),
        }
    }

    fn cluster(&mut self) -> Result<ClusterRef, ParseError> {
        let word = self.required("cluster index or name")?;
        if !word.bytes().all(|byte| byte.is_ascii_digit()) {
            return Ok(ClusterRef::Name(word.to_string()));
        }
        match parse_digits(word).and_then(|idx| u32::try_from(idx).ok()) {
            Some(idx) => Ok(ClusterRef::Index(idx)),
            None => Err(self.invalid(
                format!("invalid cluster index {}", quote(word)),
                "expected a cluster index as clusters lists it, or a cluster name".to_string(),
            )),
        }
    }

    fn signal(&self, word: &str) -> Result<i32, ParseError> {
        if let Some(signal) = parse_signal(word) {
            return Ok(signal);
        }
        let hint = if word.starts_with('-') {
            "write the signal without '-', as a number from 1 to 64 or a name such as TERM"
        } else {
            "expected a number from 1 to 64 or a name such as TERM, KILL, INT, HUP, USR1 \
             or RTMIN+2"
        };
        Err(self.invalid(format!("unknown signal {}", quote(word)), hint.to_string()))
    }

    fn since(&self, word: &str) -> Result<Since, ParseError> {
        if let Ok(duration) = parse_duration(word) {
            return Ok(Since::Ago(duration));
        }
        match parse_utc(word) {
            Some(secs) => Ok(Since::Unix(secs)),
            None => Err(self.invalid(
                format!("invalid time {}", quote(word)),
                "expected a duration before now such as 2h or 1d, or a UTC time such as \
                 2026-11-23 or 2026-11-23T08:30:00"
                    .to_string(),
            )),
        }
    }

    fn timeslice(&self, word: &str) -> Result<Duration, ParseError> {
        parse_timeslice(word).map_err(|TimesliceError { what, hint }| self.invalid(what, hint))
    }

    // Settings.
}

/// A time slice that is refused: what is wrong, and what would be right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimesliceError {
    /// What is wrong, naming the value (`time slice '0' out of range`).
    pub what: String,
    /// What to write instead.
    pub hint: String,
}

impl std::fmt::Display for TimesliceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.hint)
    }
}

impl std::error::Error for TimesliceError {}

/// Parses a time slice, for `timeslice DUR` and `scored --timeslice`: a
/// duration from [`MIN_TIMESLICE`] to [`MAX_TIMESLICE`]. A number without
/// a unit is seconds, as every duration; one over a minute is refused,
/// since `timeslice 100` is surely not meant as 1m40s.
pub fn parse_timeslice(word: &str) -> Result<Duration, TimesliceError> {
    let duration = parse_duration(word).map_err(|error| TimesliceError {
        what: format!("invalid time slice {}", quote(word)),
        hint: error.0,
    })?;
    if !(MIN_TIMESLICE..=MAX_TIMESLICE).contains(&duration) {
        return Err(TimesliceError {
            what: format!("time slice {} out of range", quote(word)),
            hint: format!(
                "expected a duration from {} to {} such as 500ms",
                format_duration_exact(MIN_TIMESLICE),
                format_duration_exact(MAX_TIMESLICE)
            ),
        });
    }
    if is_bare_number(word) && duration > BARE_TIMESLICE {
        return Err(TimesliceError {
            what: format!("time slice {} has no unit", quote(word)),
            hint: format!(
                "a number alone is seconds, so it would be {}: write {word}ms, or {word}s if \
                 seconds are meant",
                crate::units::format_duration(duration)
            ),
        });
    }
    Ok(duration)
}

/// The longest time slice given as a number alone (seconds) that is taken.
const BARE_TIMESLICE: Duration = Duration::from_secs(60);

/// Quotes the line for the context of a message. It keeps more than
/// [`quote`] does (80 characters rather than 40), because a line is the
/// whole context and a shorter cut would often hide the offending word; it
/// is still bounded so a 64 KiB line cannot flood a log.
fn quote_line(line: &str) -> String {
    const MAX: usize = 80;
    let mut out = String::from("'");
    for (count, ch) in line.chars().enumerate() {
        if count == MAX {
            out.push_str("...");
            break;
        }
        out.push(ch);
    }
    out.push('\'');
    out
}

/// A whole number written with ASCII digits only (no sign, no blanks).
fn parse_digits(word: &str) -> Option<u64> {
    if word.is_empty() || !word.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    word.parse().ok()
}

/// A signal number `1..=64`, or a name with or without `SIG`, in any case:
/// the standard ones, and the real-time ones as the shell names them
/// (`RTMIN`, `RTMIN+N`, `RTMAX-N`, `RTMAX`; glibc keeps 32 and 33 for
/// itself, so `RTMIN` is 34).
fn parse_signal(word: &str) -> Option<i32> {
    if word.bytes().all(|byte| byte.is_ascii_digit()) {
        return parse_digits(word)
            .filter(|number| (1..=MAX_SIGNAL as u64).contains(number))
            .map(|number| number as i32);
    }
    let upper = word.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some(signal) = realtime_signal(name) {
        return Some(signal);
    }
    SIGNALS
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, number)| *number)
}

/// The lowest real-time signal a program may use (glibc's `SIGRTMIN`).
pub const RTMIN: i32 = 34;

/// `RTMIN`, `RTMIN+N`, `RTMAX-N` or `RTMAX` (in capitals, without `SIG`),
/// within `RTMIN..=64`.
fn realtime_signal(name: &str) -> Option<i32> {
    let offset = |text: &str| -> Option<i32> {
        if text.is_empty() {
            return Some(0);
        }
        let digits = text.get(1..)?;
        if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    };
    let signal = if let Some(rest) = name.strip_prefix("RTMIN") {
        if !(rest.is_empty() || rest.starts_with('+')) {
            return None;
        }
        RTMIN.checked_add(offset(rest)?)?
    } else if let Some(rest) = name.strip_prefix("RTMAX") {
        if !(rest.is_empty() || rest.starts_with('-')) {
            return None;
        }
        MAX_SIGNAL.checked_sub(offset(rest)?)?
    } else {
        return None;
    };
    (RTMIN..=MAX_SIGNAL).contains(&signal).then_some(signal)
}

/// The name a signal number is printed by: its standard name, `RTMIN+N`
/// for a real-time one, else the number.
pub fn signal_name(signal: i32) -> String {
    if let Some((name, _)) = SIGNALS.iter().find(|(_, number)| *number == signal) {
        return (*name).to_string();
    }
    // As bash's `kill -l`: the lower half from RTMIN, the upper from RTMAX.
    let half = RTMIN + (MAX_SIGNAL - RTMIN) / 2;
    match signal {
        RTMIN => "RTMIN".to_string(),
        MAX_SIGNAL => "RTMAX".to_string(),
        _ if (RTMIN..=half).contains(&signal) => format!("RTMIN+{}", signal - RTMIN),
        _ if (half..MAX_SIGNAL).contains(&signal) => format!("RTMAX-{}", MAX_SIGNAL - signal),
        _ => signal.to_string(),
    }
}

/// `[A-Za-z_][A-Za-z0-9_.-]*`, the portable group names of `groupadd`.
fn is_group_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(first) if first.is_ascii_alphabetic() || first == b'_' => {}
        _ => return false,
    }
    bytes.all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests;
