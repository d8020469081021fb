//! scored's settings: command-line flags (scored(8), OPTIONS) over an optional TOML
//! file (`--config`), resolved into one [`Settings`] value.
//!
//! Pure apart from reading the TOML file's text, which the caller passes in.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use serde::{Deserialize, Deserializer};

use scored_proto::command::parse::{parse_timeslice, TimesliceError};
use scored_proto::units::parse_duration;

/// The default gang time slice, as SCore-D boots (scored(8), `--timeslice`).
pub const DEFAULT_TIMESLICE: Duration = Duration::from_millis(500);
/// The default time between SIGTERM and SIGKILL when a job is killed.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);
/// The default number of connections one user (other than root and the
/// operators) may hold at once.
pub const DEFAULT_MAX_CONNECTIONS_PER_USER: usize = 1024;
/// The default of `--max-descriptors-per-user`.
pub const DEFAULT_MAX_DESCRIPTORS_PER_USER: usize = 3072;
/// The least `--max-descriptors-per-user` may be: a connection and what
/// one submission may carry.
pub const MIN_DESCRIPTORS_PER_USER: usize = 256;
/// The default time a client may take to send the rest of a request once
/// it has sent its first byte.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a private daemon (`--single-user`) stays without a job or a
/// client before it exits, unless `--idle-exit` says otherwise: long
/// enough for the scruns of a shell loop, a script or a make to share it,
/// short enough that nothing lingers once the user is done.
pub const DEFAULT_SINGLE_USER_IDLE_EXIT: Duration = Duration::from_secs(30);

/// Command-line flags of scored.
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "scored",
    version,
    about = "SCore-D: the gang-scheduling cluster operating daemon"
)]
pub struct Flags {
    /// Hosts database (scorehosts.db); without it, one host per online CPU.
    #[arg(long, value_name = "FILE")]
    pub hosts: Option<PathBuf>,
    /// Use only the hosts of this group.
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// Console commands to run at start-up (default: ./scored.rc, then the installation directory).
    #[arg(long, value_name = "FILE")]
    pub rc: Option<PathBuf>,
    /// Gang time slice, e.g. 500ms (default 500ms).
    #[arg(long, value_name = "DUR")]
    pub timeslice: Option<String>,
    /// The socket to listen on.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// The state directory (job scratch directories; its filesystem is the default disk pool).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// A user with operator rights besides root.
    #[arg(long, value_name = "USER")]
    pub operator: Option<String>,
    /// A TOML file with any of these settings; flags win over it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Time between SIGTERM and SIGKILL when a job is killed (default 5s).
    #[arg(long, value_name = "DUR")]
    pub kill_grace: Option<String>,
    /// The most client connections served at once (default: what the descriptor limit allows).
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// The most connections one user other than root and the operators may hold (default 1024).
    #[arg(long, value_name = "N")]
    pub max_connections_per_user: Option<usize>,
    /// The most descriptors scored holds for one user other than root and the operators (default 3072).
    #[arg(long, value_name = "N")]
    pub max_descriptors_per_user: Option<usize>,
    /// How long a client may take to finish sending a request it has begun (default 10s).
    #[arg(long, value_name = "DUR")]
    pub request_timeout: Option<String>,
    /// How long a job's keeper waits for a scored to take the job over once its own has died, before it ends the job (default 10m).
    #[arg(long, value_name = "DUR")]
    pub keeper_wait: Option<String>,
    /// The most unfinished jobs one user other than root and the operators may have (default 1000).
    #[arg(long, value_name = "N")]
    pub max_jobs_per_user: Option<usize>,
    /// The most unfinished jobs such users may have together (default 10000).
    #[arg(long, value_name = "N")]
    pub max_jobs: Option<usize>,
    /// The most submissions one such user may have waiting for resources (default 100).
    #[arg(long, value_name = "N")]
    pub max_waiting_per_user: Option<usize>,
    /// The most submissions such users may have waiting for resources together (default 1000).
    #[arg(long, value_name = "N")]
    pub max_waiting: Option<usize>,
    /// Run as scrun's private daemon for one user: no start-up script, and exit when idle (see --idle-exit).
    #[arg(long)]
    pub single_user: bool,
    /// Exit once no job and no client has been there for DUR (default: 30s with --single-user, else never).
    #[arg(long, value_name = "DUR")]
    pub idle_exit: Option<String>,
    /// Do not put jobs in cgroups even where the machine offers them.
    #[arg(long)]
    pub no_cgroups: bool,
    /// Size at which the job journal (STATE_DIR/journal) is rotated (default 16M).
    #[arg(long, value_name = "SIZE")]
    pub journal_size: Option<String>,
    /// Keep no job journal (for measurements): no history, ids start at 1 at each start.
    #[arg(long)]
    pub no_journal: bool,
    /// Check that this binary can take over from the handover FILE of an in-place restart, and exit.
    #[arg(long, value_name = "FILE")]
    pub check_state: Option<PathBuf>,
    /// Take over from the handover FILE of an in-place restart (given by scored itself).
    #[arg(long, value_name = "FILE")]
    pub resume: Option<PathBuf>,
    /// More logging (-v debug, -vv trace).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// The TOML file: the same settings as the flags, with `_` in names.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    hosts: Option<PathBuf>,
    group: Option<String>,
    rc: Option<PathBuf>,
    #[serde(default, deserialize_with = "text_or_number")]
    timeslice: Option<String>,
    socket: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    operator: Option<String>,
    #[serde(default, deserialize_with = "text_or_number")]
    kill_grace: Option<String>,
    cgroups: Option<bool>,
    max_connections: Option<usize>,
    max_connections_per_user: Option<usize>,
    max_descriptors_per_user: Option<usize>,
    #[serde(default, deserialize_with = "text_or_number")]
    request_timeout: Option<String>,
    #[serde(default, deserialize_with = "text_or_number")]
    keeper_wait: Option<String>,
    max_jobs_per_user: Option<usize>,
    max_jobs: Option<usize>,
    max_waiting_per_user: Option<usize>,
    max_waiting: Option<usize>,
    #[serde(default, deserialize_with = "text_or_number")]
    idle_exit: Option<String>,
    verbose: Option<u8>,
    #[serde(default, deserialize_with = "text_or_number")]
    journal_size: Option<String>,
    journal: Option<bool>,
    /// The clients' system-wide setting (see [`scored_proto::settings`]): scored
    /// does not use it, and checks it so that a mistake in it is told at
    /// the daemon's start too.
    client: Option<scored_proto::settings::ClientSection>,
}

/// A duration or size in the TOML file: a string (`"500ms"`, `"16M"`), or
/// a number alone, read as the same number on the command line is
/// (seconds, bytes), so that `timeslice = 500` gets the message
/// `--timeslice 500` gets rather than a type error.
fn text_or_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    struct Visitor;
    impl serde::de::Visitor<'_> for Visitor {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string such as \"500ms\" or \"16M\", or a number")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
            Ok(Some(text.to_string()))
        }
        fn visit_i64<E: serde::de::Error>(self, number: i64) -> Result<Self::Value, E> {
            Ok(Some(number.to_string()))
        }
        fn visit_u64<E: serde::de::Error>(self, number: u64) -> Result<Self::Value, E> {
            Ok(Some(number.to_string()))
        }
        fn visit_f64<E: serde::de::Error>(self, number: f64) -> Result<Self::Value, E> {
            Ok(Some(number.to_string()))
        }
    }
    deserializer.deserialize_any(Visitor)
}

/// The daemon's settings, the flags over the TOML file over the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Hosts database, if any.
    pub hosts: Option<PathBuf>,
    /// Host group to use.
    pub group: Option<String>,
    /// Explicit rc file.
    pub rc: Option<PathBuf>,
    /// Time slice.
    pub timeslice: Duration,
    /// Socket path, if not the default.
    pub socket: Option<PathBuf>,
    /// State directory, if not the default.
    pub state_dir: Option<PathBuf>,
    /// Operator user name or uid.
    pub operator: Option<String>,
    /// Kill grace.
    pub kill_grace: Duration,
    /// Single-user mode.
    pub single_user: bool,
    /// Exit after this long without a job or a client; `None`: never.
    pub idle_exit: Option<Duration>,
    /// Use cgroups where possible.
    pub cgroups: bool,
    /// Connection limit, if set.
    pub max_connections: Option<usize>,
    /// Connections one user other than root and the operators may hold.
    pub max_connections_per_user: usize,
    /// Descriptors scored holds at most for one user other than root and
    /// the operators.
    pub max_descriptors_per_user: usize,
    /// How long a begun request may take to arrive whole.
    pub request_timeout: Duration,
    /// How long a keeper waits for a scored once its own died.
    pub keeper_wait: Duration,
    /// The budgets of unfinished jobs and waiting submissions of users
    /// other than root and the operators.
    pub budgets: scored_core::core::Budgets,
    /// Verbosity.
    pub verbose: u8,
    /// Size at which the job journal is rotated.
    pub journal_size: u64,
    /// Keep the job journal.
    pub journal: bool,
}

/// Why the configuration (the TOML file and the flags) was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The file is not valid TOML for scored.
    File {
        /// The configuration file that failed to parse.
        path: PathBuf,
        /// The line the parser stopped at, when it says.
        line: Option<usize>,
        /// What the parser said.
        message: String,
    },
    /// A duration that does not parse.
    Value {
        /// The flag (or the file's key of the same name).
        flag: &'static str,
        /// Why.
        source: scored_proto::units::ValueError,
    },
    /// A time slice that is refused.
    Timeslice(TimesliceError),
    /// The `[client]` table is wrong.
    Client(String),
    /// A duration outside its range.
    OutOfRange {
        /// The flag (or the file's key of the same name).
        flag: &'static str,
        /// The value, as it was written.
        value: String,
        /// The range, in words: `between 1ms and 1h`.
        range: &'static str,
    },
    /// A count that must be at least 1 is 0.
    Zero {
        /// The flag (or the file's key of the same name).
        flag: &'static str,
    },
    /// A count is below its least value.
    Below {
        /// The flag (or the file's key of the same name).
        flag: &'static str,
        /// The least value it may have.
        least: usize,
    },
    /// A journal size that is refused.
    JournalSize(crate::journal::SizeError),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::File {
                path,
                line: Some(line),
                message,
            } => write!(f, "{}:{line}: {message}", path.display()),
            ConfigError::File {
                path,
                line: None,
                message,
            } => write!(f, "{}: {message}", path.display()),
            ConfigError::Value { flag, source } => write!(f, "--{flag}: {source}"),
            ConfigError::Timeslice(error) => write!(f, "--timeslice: {error}"),
            ConfigError::Client(error) => write!(f, "{error}"),
            ConfigError::OutOfRange { flag, value, range } => write!(
                f,
                "--{flag}: {} is out of range: it must be {range}",
                scored_proto::units::quote(value)
            ),
            ConfigError::Zero { flag } => write!(f, "--{flag}: must be at least 1"),
            ConfigError::Below { flag, least } => write!(f, "--{flag}: must be at least {least}"),
            ConfigError::JournalSize(error) => write!(f, "--journal-size: {error}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Value { source, .. } => Some(source),
            ConfigError::JournalSize(error) => Some(error),
            ConfigError::Timeslice(error) => Some(error),
            _ => None,
        }
    }
}

/// Parses the TOML file's text; errors name the file and the line.
pub fn parse_file(path: &Path, text: &str) -> Result<FileSettings, ConfigError> {
    toml::from_str(text).map_err(|error| ConfigError::File {
        path: path.to_path_buf(),
        line: error
            .span()
            .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1),
        message: error.message().to_string(),
    })
}

/// Merges flags over the file's settings and checks the values.
pub fn resolve(flags: Flags, file: FileSettings) -> Result<Settings, ConfigError> {
    if let Some(client) = &file.client {
        client.check().map_err(ConfigError::Client)?;
    }
    let duration =
        |flag: Option<String>, from_file: Option<String>, name: &'static str, default: Duration| {
            match flag.or(from_file) {
                Some(text) => parse_duration(&text)
                    .map_err(|source| ConfigError::Value { flag: name, source }),
                None => Ok(default),
            }
        };
    let timeslice = match flags.timeslice.or(file.timeslice) {
        Some(text) => parse_timeslice(&text).map_err(ConfigError::Timeslice)?,
        None => DEFAULT_TIMESLICE,
    };
    let kill_grace = duration(
        flags.kill_grace,
        file.kill_grace,
        "kill-grace",
        DEFAULT_KILL_GRACE,
    )?;
    let request_timeout_text = flags.request_timeout.or(file.request_timeout);
    let request_timeout = duration(
        request_timeout_text.clone(),
        None,
        "request-timeout",
        DEFAULT_REQUEST_TIMEOUT,
    )?;
    if request_timeout < Duration::from_millis(10) || request_timeout > Duration::from_secs(3600) {
        return Err(ConfigError::OutOfRange {
            flag: "request-timeout",
            value: request_timeout_text.unwrap_or_default(),
            range: "between 10ms and 1h",
        });
    }
    let keeper_wait_text = flags.keeper_wait.or(file.keeper_wait);
    let keeper_wait = duration(
        keeper_wait_text.clone(),
        None,
        "keeper-wait",
        crate::keeper::DEFAULT_WAIT,
    )?;
    if keeper_wait < Duration::from_secs(1) || keeper_wait > Duration::from_secs(7 * 86_400) {
        return Err(ConfigError::OutOfRange {
            flag: "keeper-wait",
            value: keeper_wait_text.unwrap_or_default(),
            range: "between 1s and 7d",
        });
    }
    let idle_exit = match flags.idle_exit.or(file.idle_exit) {
        Some(text) => Some(parse_duration(&text).map_err(|source| ConfigError::Value {
            flag: "idle-exit",
            source,
        })?),
        None => flags.single_user.then_some(DEFAULT_SINGLE_USER_IDLE_EXIT),
    };
    Ok(Settings {
        hosts: flags.hosts.or(file.hosts),
        group: flags.group.or(file.group),
        rc: flags.rc.or(file.rc),
        timeslice,
        socket: flags.socket.or(file.socket),
        state_dir: flags.state_dir.or(file.state_dir),
        operator: flags.operator.or(file.operator),
        kill_grace,
        single_user: flags.single_user,
        idle_exit,
        cgroups: !flags.no_cgroups && file.cgroups.unwrap_or(true),
        max_connections: match flags.max_connections.or(file.max_connections) {
            Some(0) => {
                return Err(ConfigError::Zero {
                    flag: "max-connections",
                })
            }
            other => other,
        },
        max_connections_per_user: match flags
            .max_connections_per_user
            .or(file.max_connections_per_user)
        {
            Some(0) => {
                return Err(ConfigError::Zero {
                    flag: "max-connections-per-user",
                })
            }
            Some(n) => n,
            None => DEFAULT_MAX_CONNECTIONS_PER_USER,
        },
        max_descriptors_per_user: match flags
            .max_descriptors_per_user
            .or(file.max_descriptors_per_user)
        {
            Some(n) if n < MIN_DESCRIPTORS_PER_USER => {
                return Err(ConfigError::Below {
                    flag: "max-descriptors-per-user",
                    least: MIN_DESCRIPTORS_PER_USER,
                })
            }
            Some(n) => n,
            None => DEFAULT_MAX_DESCRIPTORS_PER_USER,
        },
        request_timeout,
        keeper_wait,
        budgets: {
            let defaults = scored_core::core::Budgets::default();
            let count = |flag: Option<usize>, key: Option<usize>, name, default| match flag.or(key)
            {
                Some(0) => Err(ConfigError::Zero { flag: name }),
                Some(n) => Ok(n),
                None => Ok(default),
            };
            scored_core::core::Budgets {
                user_jobs: count(
                    flags.max_jobs_per_user,
                    file.max_jobs_per_user,
                    "max-jobs-per-user",
                    defaults.user_jobs,
                )?,
                total_jobs: count(
                    flags.max_jobs,
                    file.max_jobs,
                    "max-jobs",
                    defaults.total_jobs,
                )?,
                user_waiting: count(
                    flags.max_waiting_per_user,
                    file.max_waiting_per_user,
                    "max-waiting-per-user",
                    defaults.user_waiting,
                )?,
                total_waiting: count(
                    flags.max_waiting,
                    file.max_waiting,
                    "max-waiting",
                    defaults.total_waiting,
                )?,
            }
        },
        verbose: flags.verbose.max(file.verbose.unwrap_or(0)),
        journal_size: match flags.journal_size.or(file.journal_size) {
            Some(text) => {
                crate::journal::parse_max_size(&text).map_err(ConfigError::JournalSize)?
            }
            None => crate::journal::DEFAULT_MAX_SIZE,
        },
        journal: !flags.no_journal && file.journal.unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(args: &[&str], file: &str) -> Result<Settings, String> {
        let flags = Flags::try_parse_from(std::iter::once("scored").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        let file = parse_file(Path::new("scored.toml"), file).map_err(|e| e.to_string())?;
        resolve(flags, file).map_err(|e| e.to_string())
    }

    #[test]
    fn flags_win_over_the_file() {
        let resolved = settings(
            &["--timeslice", "100ms"],
            "timeslice = \"2s\"\ngroup = \"pcc\"\n",
        )
        .unwrap();
        assert_eq!(resolved.timeslice, Duration::from_millis(100));
        assert_eq!(resolved.group.as_deref(), Some("pcc"));
        assert_eq!(settings(&[], "").unwrap().timeslice, DEFAULT_TIMESLICE);
    }

    #[test]
    fn file_errors_name_file_and_line() {
        assert_eq!(
            settings(&[], "group = \"a\"\ncolour = \"red\"\n").unwrap_err(),
            "scored.toml:2: unknown field `colour`, expected one of `hosts`, `group`, `rc`, `timeslice`, `socket`, `state_dir`, `operator`, `kill_grace`, `cgroups`, `max_connections`, `max_connections_per_user`, `max_descriptors_per_user`, `request_timeout`, `keeper_wait`, `max_jobs_per_user`, `max_jobs`, `max_waiting_per_user`, `max_waiting`, `idle_exit`, `verbose`, `journal_size`, `journal`, `client`"
        );
        assert!(settings(&[], "timeslice = true")
            .unwrap_err()
            .starts_with("scored.toml:1:"));
    }

    #[test]
    fn connection_settings_have_defaults_and_are_checked() {
        let resolved = settings(&[], "").unwrap();
        assert_eq!(
            resolved.max_connections_per_user,
            DEFAULT_MAX_CONNECTIONS_PER_USER
        );
        assert_eq!(resolved.request_timeout, DEFAULT_REQUEST_TIMEOUT);
        let resolved = settings(
            &["--request-timeout", "2s"],
            "max_connections_per_user = 8\nrequest_timeout = \"5s\"\n",
        )
        .unwrap();
        assert_eq!(resolved.max_connections_per_user, 8);
        assert_eq!(resolved.request_timeout, Duration::from_secs(2));
        assert_eq!(
            settings(&["--max-connections-per-user", "0"], "").unwrap_err(),
            "--max-connections-per-user: must be at least 1"
        );
        assert_eq!(
            resolved.max_descriptors_per_user,
            DEFAULT_MAX_DESCRIPTORS_PER_USER
        );
        assert_eq!(
            settings(&[], "max_descriptors_per_user = 500\n")
                .unwrap()
                .max_descriptors_per_user,
            500
        );
        assert_eq!(
            settings(&["--max-descriptors-per-user", "100"], "").unwrap_err(),
            "--max-descriptors-per-user: must be at least 256"
        );
        assert!(settings(&["--request-timeout", "1ms"], "")
            .unwrap_err()
            .starts_with("--request-timeout: '1ms' is out of range"));
    }

    #[test]
    fn budgets_have_defaults_and_are_checked() {
        let resolved = settings(&[], "").unwrap();
        assert_eq!(resolved.budgets, scored_core::core::Budgets::default());
        let resolved = settings(
            &["--max-jobs", "50", "--max-waiting-per-user", "2"],
            "max_jobs = 70\nmax_jobs_per_user = 5\nmax_waiting = 9\n",
        )
        .unwrap();
        assert_eq!(
            resolved.budgets,
            scored_core::core::Budgets {
                user_jobs: 5,
                total_jobs: 50,
                user_waiting: 2,
                total_waiting: 9,
            }
        );
        assert_eq!(
            settings(&[], "max_waiting_per_user = 0\n").unwrap_err(),
            "--max-waiting-per-user: must be at least 1"
        );
    }

    #[test]
    fn a_private_daemon_exits_when_idle_and_a_shared_one_only_if_asked() {
        assert_eq!(settings(&[], "").unwrap().idle_exit, None);
        assert_eq!(
            settings(&["--single-user"], "").unwrap().idle_exit,
            Some(DEFAULT_SINGLE_USER_IDLE_EXIT)
        );
        assert_eq!(
            settings(&["--single-user", "--idle-exit", "2s"], "")
                .unwrap()
                .idle_exit,
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            settings(&[], "idle_exit = \"10m\"\n").unwrap().idle_exit,
            Some(Duration::from_secs(600))
        );
        assert!(settings(&["--idle-exit", "soon"], "")
            .unwrap_err()
            .starts_with("--idle-exit: invalid duration 'soon'"));
    }

    #[test]
    fn bad_durations_are_named() {
        assert_eq!(
            settings(&["--timeslice", "fast"], "").unwrap_err(),
            "--timeslice: invalid time slice 'fast': invalid duration 'fast': expected a number with an optional ms, s, m, h or d suffix (e.g. 500ms)"
        );
        assert_eq!(
            settings(&["--timeslice", "0"], "").unwrap_err(),
            "--timeslice: time slice '0' out of range: expected a duration from 1ms to 1h such as 500ms"
        );
    }

    #[test]
    fn numbers_in_the_file_read_as_on_the_command_line() {
        assert_eq!(
            settings(
                &[],
                "timeslice = 2\nkill_grace = 1.5\njournal_size = 8192\n"
            )
            .unwrap(),
            settings(
                &[
                    "--timeslice",
                    "2",
                    "--kill-grace",
                    "1.5",
                    "--journal-size",
                    "8192"
                ],
                ""
            )
            .unwrap()
        );
        assert_eq!(
            settings(&[], "timeslice = 500").unwrap_err(),
            "--timeslice: time slice '500' has no unit: a number alone is seconds, so it would be 8m20s: write 500ms, or 500s if seconds are meant"
        );
    }
}
