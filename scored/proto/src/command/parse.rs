//! The console line parser and its inverse, the canonical printer.
//!
//! [`parse_line`] turns one line of sc_console or `scored.rc` input into a
//! [`Command`] (SPEC §6), and [`render`] prints a command back so that
//! parsing the text gives the same value. Errors are typed
//! ([`ParseErrorKind`]) and their messages are lowercase, name the offending
//! word and the line, and end with a hint (usually the command's usage from
//! the help table, [`super::help`]).
//!
//! Pure: this module never touches the system. It must never panic on any
//! input, because a client's line reaches it straight from a socket.
#![forbid(unsafe_code)]

use std::fmt;
use std::time::Duration;

use super::help;
use super::{
    ClusterLimits, ClusterRef, Command, GroupRef, QueueAction, QueueMode, QueueSettings, Setting,
    Since,
};
use crate::units::{format_duration_exact, parse_duration, parse_percent, parse_size, quote};

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
];
const QUEUE_ACTIONS: &[&str] = &["enable", "disable", "activate", "deactivate", "set"];

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
            "jobs" => match self.next() {
                None => Command::Jobs { all: false },
                Some("all") => Command::Jobs { all: true },
                Some(word) => return Err(self.unknown_keyword(word, &["all"])),
            },
            "job" => Command::Job(self.job_id()?),
            "kill" => {
                let job = self.job_id()?;
                let signal = match self.next() {
                    None => None,
                    Some(word) => Some(self.signal(word)?),
                };
                Command::Kill { job, signal }
            }
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
                                self.required("a user name or uid after --user")?
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
            "expected a number from 1 to 64 or a name such as TERM, KILL, INT, HUP or USR1"
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
        let range_hint = || {
            format!(
                "expected a duration from {} to {} such as 500ms",
                format_duration_exact(MIN_TIMESLICE),
                format_duration_exact(MAX_TIMESLICE)
            )
        };
        let duration = parse_duration(word).map_err(|error| {
            self.invalid(format!("invalid time slice {}", quote(word)), error.0)
        })?;
        if !(MIN_TIMESLICE..=MAX_TIMESLICE).contains(&duration) {
            return Err(self.invalid(
                format!("time slice {} out of range", quote(word)),
                range_hint(),
            ));
        }
        Ok(duration)
    }

    // Settings.

    /// The settings after `limit` or `set`: at least one, each `key=value`
    /// with a known key given once.
    fn settings(
        &mut self,
        keys: &'static [&'static str],
        what: &str,
    ) -> Result<Vec<(&'static str, &'a str, &'a str)>, ParseError> {
        let mut settings: Vec<(&'static str, &'a str, &'a str)> = Vec::new();
        while let Some(word) = self.next() {
            let Some((key, value)) = word.split_once('=') else {
                let hint = match keys.iter().find(|key| **key == word) {
                    Some(key) => format!("expected {}", self.setting_syntax(key)),
                    None => format!("expected KEY=VALUE with a key from {}", one_of(keys)),
                };
                return Err(self.error(
                    ParseErrorKind::MissingEquals,
                    format!("{what} {} without '='", quote(word)),
                    hint,
                ));
            };
            let Some(&key) = keys.iter().find(|known| **known == key) else {
                return Err(self.error(
                    ParseErrorKind::UnknownSetting,
                    format!("unknown {what} {}", quote(key)),
                    format!("{}expected {}", did_you_mean(key, keys), one_of(keys)),
                ));
            };
            if value.is_empty() {
                return Err(self.error(
                    ParseErrorKind::EmptyValue,
                    format!("empty value for {key}"),
                    format!("expected {}", self.setting_syntax(key)),
                ));
            }
            if settings.iter().any(|(seen, _, _)| *seen == key) {
                return Err(self.error(
                    ParseErrorKind::DuplicateSetting,
                    format!("{what} {key} given twice"),
                    "give each setting at most once".to_string(),
                ));
            }
            settings.push((key, value, word));
        }
        if settings.is_empty() {
            return Err(self.error(
                ParseErrorKind::MissingArgument,
                format!("missing {what}s"),
                self.usage_hint(),
            ));
        }
        Ok(settings)
    }

    /// The syntax of one setting as the usage shows it, e.g. `memory=SIZE|none`.
    fn setting_syntax(&self, key: &str) -> String {
        let usage = self.form.unwrap_or_else(|| self.usage());
        usage
            .split(' ')
            .find(|word| word.split_once('=').is_some_and(|(known, _)| known == key))
            .unwrap_or(key)
            .to_string()
    }

    fn bad_setting(&self, word: &str, problem: String) -> ParseError {
        self.invalid(format!("bad setting {}", quote(word)), problem)
    }

    fn cluster_limits(&mut self) -> Result<ClusterLimits, ParseError> {
        let mut limits = ClusterLimits::default();
        for (key, value, word) in self.settings(CLUSTER_LIMITS, "cluster limit")? {
            let setting = if value == "none" {
                Setting::Clear
            } else if key == "jobs" {
                match parse_digits(value) {
                    Some(jobs) => Setting::Set(jobs),
                    None => {
                        return Err(self.bad_setting(
                            word,
                            format!(
                                "{} is not a whole number; expected {}",
                                quote(value),
                                self.setting_syntax(key)
                            ),
                        ))
                    }
                }
            } else {
                let size = parse_size(value).map_err(|error| self.bad_setting(word, error.0))?;
                if size == 0 {
                    // Every job is assumed to use some memory and counts its
                    // executables as disk: a limit of 0 kills each one at
                    // its first sample.
                    return Err(self.bad_setting(
                        word,
                        format!(
                            "a {key} limit of 0 would kill every job at its first sample; give a size above 0, or {key}=none for no limit"
                        ),
                    ));
                }
                Setting::Set(size)
            };
            match key {
                "memory" => limits.memory = Some(setting),
                "disk" => limits.disk = Some(setting),
                _ => limits.jobs = Some(setting),
            }
        }
        Ok(limits)
    }

    fn queue_settings(&mut self) -> Result<QueueSettings, ParseError> {
        let mut settings = QueueSettings::default();
        for (key, value, word) in self.settings(QUEUE_SETTINGS, "queue setting")? {
            match key {
                "mode" => {
                    settings.mode = Some(match value {
                        "gang" => QueueMode::Gang,
                        "exclusive" => QueueMode::Exclusive,
                        _ => {
                            return Err(self.bad_setting(
                                word,
                                format!(
                                    "{}unknown mode {}; expected mode=gang|exclusive",
                                    did_you_mean(value, &["gang", "exclusive"]),
                                    quote(value)
                                ),
                            ))
                        }
                    })
                }
                "backfill" => {
                    settings.backfill = Some(match value {
                        "on" => true,
                        "off" => false,
                        _ => {
                            return Err(self.bad_setting(
                                word,
                                format!(
                                    "{}unknown value {}; expected backfill=on|off",
                                    did_you_mean(value, &["on", "off"]),
                                    quote(value)
                                ),
                            ))
                        }
                    })
                }
                "cputime" | "residency" => {
                    let setting = if value == "none" {
                        Setting::Clear
                    } else {
                        let duration = parse_duration(value)
                            .map_err(|error| self.bad_setting(word, error.0))?;
                        if duration.is_zero() {
                            return Err(self.bad_setting(
                                word,
                                format!("{key} must be longer than 0; use {key}=none to remove it"),
                            ));
                        }
                        Setting::Set(duration)
                    };
                    if key == "cputime" {
                        settings.cputime = Some(setting);
                    } else {
                        settings.residency = Some(setting);
                    }
                }
                "memory" | "disk" => {
                    let setting = if value == "none" {
                        Setting::Clear
                    } else if !value.ends_with('%') && parse_percent(value).is_ok() {
                        // A bare number could be meant as a size: the
                        // queue's share is a percentage of the cluster's.
                        return Err(self.bad_setting(
                            word,
                            format!(
                                "a queue's {key} limit is a share of the cluster's, written with %: {key}={value}%"
                            ),
                        ));
                    } else {
                        let pct = parse_percent(value)
                            .map_err(|error| self.bad_setting(word, error.0))?;
                        if pct <= 0.0 {
                            return Err(self.bad_setting(
                                word,
                                format!(
                                    "a {key} share of 0% would kill every job at its first sample; give a share above 0%, or {key}=none for no limit"
                                ),
                            ));
                        }
                        Setting::Set(pct)
                    };
                    if key == "memory" {
                        settings.memory = Some(setting);
                    } else {
                        settings.disk = Some(setting);
                    }
                }
                _ => {
                    settings.group = Some(if value == "none" {
                        Setting::Clear
                    } else {
                        Setting::Set(self.group(value, word)?)
                    })
                }
            }
        }
        Ok(settings)
    }

    fn group(&self, value: &str, word: &str) -> Result<GroupRef, ParseError> {
        if value.bytes().all(|byte| byte.is_ascii_digit()) {
            return match parse_digits(value).and_then(|gid| u32::try_from(gid).ok()) {
                Some(gid) => Ok(GroupRef::Gid(gid)),
                None => Err(self.bad_setting(
                    word,
                    format!(
                        "group id {} is too large; expected a number below 4294967296",
                        quote(value)
                    ),
                )),
            };
        }
        if value.len() > MAX_GROUP_NAME {
            return Err(self.bad_setting(
                word,
                format!(
                    "group name {} is longer than {MAX_GROUP_NAME} characters",
                    quote(value)
                ),
            ));
        }
        if !is_group_name(value) {
            return Err(self.bad_setting(
                word,
                format!(
                    "{} is not a group name or number; a name starts with a letter or '_' \
                     and holds letters, digits, '_', '.' and '-'",
                    quote(value)
                ),
            ));
        }
        Ok(GroupRef::Name(value.to_string()))
    }
}

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

/// A signal number `1..=64`, or a name with or without `SIG`, in any case.
fn parse_signal(word: &str) -> Option<i32> {
    if word.bytes().all(|byte| byte.is_ascii_digit()) {
        return parse_digits(word)
            .filter(|number| (1..=MAX_SIGNAL as u64).contains(number))
            .map(|number| number as i32);
    }
    let upper = word.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, number)| *number)
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

/// `a, b or c`.
fn one_of(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [only] => (*only).to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// `did you mean 'x'? ` when a candidate is close, else nothing.
fn did_you_mean(word: &str, candidates: &[&str]) -> String {
    match closest(word, candidates) {
        Some(candidate) => format!("did you mean '{candidate}'? "),
        None => String::new(),
    }
}

/// The candidate nearest to `word` (ignoring case) within an edit distance
/// of 2, the first one on ties.
pub fn closest<'c>(word: &str, candidates: &[&'c str]) -> Option<&'c str> {
    // Words far longer than every candidate cannot be within 2 edits;
    // skipping them keeps a 64 KiB word from costing a quadratic table.
    if word.chars().count() > 16 {
        return None;
    }
    let word = word.to_lowercase();
    candidates
        .iter()
        .map(|candidate| (edit_distance(&word, candidate), *candidate))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Optimal string alignment distance: insertions, deletions, substitutions
/// and swaps of neighbours each cost 1, so `stauts` is 1 from `status`.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (idx, row) in rows.iter_mut().enumerate() {
        row[0] = idx;
    }
    if let Some(first_row) = rows.first_mut() {
        for (col, cell) in first_row.iter_mut().enumerate() {
            *cell = col;
        }
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// Prints a command in canonical console syntax: single spaces, settings in
/// the order of the usage, sizes with the largest exact unit, durations with
/// [`format_duration_exact`], percentages with the fewest decimals that read
/// back to the same value, signals by name.
///
/// `parse_line(&render(c)) == Ok(Some(c.clone()))` holds for every command
/// `parse_line` can produce. Values it cannot produce (a `help` topic that is
/// not a command, a cluster name with blanks or of digits only, a percentage
/// outside 0–100 or with more than nine decimals, an empty settings list)
/// are printed as faithfully as the syntax allows, and the text is refused
/// when parsed.
pub fn render(command: &Command) -> String {
    match command {
        Command::Help(None) => "help".to_string(),
        Command::Help(Some(topic)) => format!("help {topic}"),
        Command::Status => "status".to_string(),
        Command::Hosts => "hosts".to_string(),
        Command::Clusters => "clusters".to_string(),
        Command::ClusterLimit { cluster, limits } => {
            let mut text = match cluster {
                ClusterRef::Index(idx) => format!("cluster {idx} limit"),
                ClusterRef::Name(name) => format!("cluster {name} limit"),
            };
            push_setting(&mut text, "memory", limits.memory, size_text);
            push_setting(&mut text, "disk", limits.disk, size_text);
            push_setting(&mut text, "jobs", limits.jobs, |jobs| jobs.to_string());
            text
        }
        Command::Queues => "queues".to_string(),
        Command::QueueState { queue, action } => {
            let action = match action {
                QueueAction::Enable => "enable",
                QueueAction::Disable => "disable",
                QueueAction::Activate => "activate",
                QueueAction::Deactivate => "deactivate",
            };
            format!("queue {queue} {action}")
        }
        Command::QueueSet { queue, settings } => {
            let mut text = format!("queue {queue} set");
            if let Some(mode) = settings.mode {
                text.push_str(" mode=");
                text.push_str(mode.as_str());
            }
            push_setting(
                &mut text,
                "cputime",
                settings.cputime,
                format_duration_exact,
            );
            push_setting(
                &mut text,
                "residency",
                settings.residency,
                format_duration_exact,
            );
            push_setting(&mut text, "memory", settings.memory, percent_text);
            push_setting(&mut text, "disk", settings.disk, percent_text);
            push_setting(
                &mut text,
                "group",
                settings.group.clone(),
                |group| match group {
                    GroupRef::Name(name) => name,
                    GroupRef::Gid(gid) => gid.to_string(),
                },
            );
            if let Some(backfill) = settings.backfill {
                text.push_str(if backfill {
                    " backfill=on"
                } else {
                    " backfill=off"
                });
            }
            text
        }
        Command::Jobs { all: false } => "jobs".to_string(),
        Command::Jobs { all: true } => "jobs all".to_string(),
        Command::Job(job) => format!("job {job}"),
        Command::Kill { job, signal: None } => format!("kill {job}"),
        Command::Kill {
            job,
            signal: Some(signal),
        } => match SIGNALS.iter().find(|(_, number)| number == signal) {
            Some((name, _)) => format!("kill {job} {name}"),
            None => format!("kill {job} {signal}"),
        },
        Command::Suspend(job) => format!("suspend {job}"),
        Command::Resume(job) => format!("resume {job}"),
        Command::Move { job, queue } => format!("move {job} {queue}"),
        Command::Timeslice(None) => "timeslice".to_string(),
        Command::Timeslice(Some(duration)) => {
            format!("timeslice {}", format_duration_exact(*duration))
        }
        Command::History { user, since } => {
            let mut text = "history".to_string();
            if let Some(user) = user {
                text.push_str(" --user ");
                text.push_str(user);
            }
            match since {
                Some(Since::Ago(duration)) => {
                    text.push_str(" --since ");
                    text.push_str(&format_duration_exact(*duration));
                }
                Some(Since::Unix(secs)) => {
                    text.push_str(" --since ");
                    text.push_str(&format_utc(*secs));
                }
                None => {}
            }
            text
        }
        Command::Restart => "restart".to_string(),
        Command::Shutdown { now: false } => "shutdown".to_string(),
        Command::Shutdown { now: true } => "shutdown now".to_string(),
    }
}

/// Seconds since the Unix epoch of a UTC date (`2026-11-23`) or date and
/// time (`2026-11-23T08:30` or `2026-11-23T08:30:00`, with an optional `Z`).
pub fn parse_utc(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z').unwrap_or(text);
    let (date, time) = match text.split_once('T') {
        Some((date, time)) => (date, Some(time)),
        None => (text, None),
    };
    let number = |part: &str, width: usize| -> Option<u64> {
        (part.len() == width && part.bytes().all(|b| b.is_ascii_digit()))
            .then(|| part.parse().ok())
            .flatten()
    };
    let mut parts = date.split('-');
    let year = number(parts.next()?, 4)?;
    let month = number(parts.next()?, 2)?;
    let day = number(parts.next()?, 2)?;
    if parts.next().is_some() || !(1970..=9999).contains(&year) || !(1..=12).contains(&month) {
        return None;
    }
    if day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let (hour, minute, second) = match time {
        None => (0, 0, 0),
        Some(time) => {
            let mut parts = time.split(':');
            let hour = number(parts.next()?, 2)?;
            let minute = number(parts.next()?, 2)?;
            let second = match parts.next() {
                Some(part) => number(part, 2)?,
                None => 0,
            };
            if parts.next().is_some() || hour > 23 || minute > 59 || second > 59 {
                return None;
            }
            (hour, minute, second)
        }
    };
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

/// `YYYY-MM-DDTHH:MM:SS` (UTC) of seconds since the Unix epoch.
pub fn format_utc(secs: u64) -> String {
    let days = secs / 86_400;
    let rest = secs % 86_400;
    // Civil date from days (Howard Hinnant's algorithm), for days >= 0.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let yoe = year - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Appends ` key=value` or ` key=none`, or nothing when the setting is absent.
fn push_setting<T>(
    text: &mut String,
    key: &str,
    setting: Option<Setting<T>>,
    show: impl FnOnce(T) -> String,
) {
    let value = match setting {
        None => return,
        Some(Setting::Clear) => "none".to_string(),
        Some(Setting::Set(value)) => show(value),
    };
    text.push(' ');
    text.push_str(key);
    text.push('=');
    text.push_str(&value);
}

/// A byte count with the largest unit that divides it exactly (`4G`,
/// `1536K`, `4097`), so the text reads back to the same number.
fn size_text(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("T", 40), ("G", 30), ("M", 20), ("K", 10)];
    for (suffix, shift) in UNITS {
        if bytes != 0 && bytes % (1u64 << shift) == 0 {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// A percentage with the fewest decimals (at most nine, the most
/// `parse_percent` reads) that `parse_percent` turns back into the same
/// `f64`. `parse_percent` computes `whole + frac / 10^digits`, which is not
/// always the correctly rounded value of the text, so the shortest
/// round-tripping float text (`{}`) could read back one bit off; trying it
/// through the parser itself is the only reliable test.
fn percent_text(pct: f64) -> String {
    for digits in 0..=9 {
        let text = format!("{pct:.digits$}%");
        if parse_percent(&text) == Ok(pct) {
            return text;
        }
    }
    format!("{pct}%")
}

#[cfg(test)]
mod tests;
