//! The state one image of scored hands to the next in an in-place restart
//! (`restart`, SIGUSR2, a caught panic): the core's state, the actuator's,
//! and the event loop's connections with the numbers of the descriptors
//! left open across execve. It is written to `STATE_DIR/handover` (mode
//! 0600), checked by the new binary in a separate process
//! (`scored --check-state FILE`) before the old image is replaced, and
//! read and removed by the new image (`scored --resume FILE`).
//!
//! [`FORMAT`] changes whenever the layout does; a binary that does not
//! know the format refuses it, and the old image carries on.
#![forbid(unsafe_code)]

use std::fs;
use std::io::{self, Write};
use std::os::fd::RawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::actuator::ActuatorSnapshot;
use scored_core::core::CoreSnapshot;

/// The layout version of the handover file.
pub const FORMAT: u32 = 1;
/// The file's name in the state directory.
pub const FILE: &str = "handover";

/// Everything the next image needs.
#[derive(Debug, Serialize, Deserialize)]
pub struct Handover {
    /// [`FORMAT`].
    pub format: u32,
    /// The version of the image that wrote it.
    pub version: String,
    /// In-place restarts so far, this one included.
    pub restarts: u64,
    /// The core's clock when it was written (µs since the daemon started).
    pub tick_us: u64,
    /// The core's state.
    pub core: CoreSnapshot,
    /// The actuator's state.
    pub actuator: ActuatorSnapshot,
    /// The event loop's state.
    pub connections: ConnectionsSnapshot,
    /// The journal's recent ended records (`jobs all`), if it keeps one.
    #[serde(default)]
    pub journal_recent: Option<Vec<serde_json::Value>>,
    /// The closer of users' descriptors: its socket, kept open across the
    /// execve, and what it had not yet been sent (see `crate::closer`).
    #[serde(default)]
    pub closer: Option<crate::closer::CloserSnapshot>,
}

/// The event loop's part.
#[derive(Debug, Serialize, Deserialize)]
pub struct ConnectionsSnapshot {
    /// The listening socket, kept open across the execve.
    pub listener: RawFd,
    /// The next connection token.
    pub next_token: usize,
    /// Whether a job was ever submitted (single-user mode).
    pub served_a_job: bool,
    /// SIGTERMs received so far.
    pub terminations: u32,
    /// The connection that asked for the restart, and whether it wants JSON.
    pub reply_to: Option<(usize, bool)>,
    /// Every client connection, with what it had buffered.
    pub connections: Vec<ConnectionSnapshot>,
}

/// One client connection.
#[derive(Debug, Serialize, Deserialize)]
pub struct ConnectionSnapshot {
    /// Its token (the core's `ClientToken`).
    pub token: usize,
    /// Its socket, kept open across the execve.
    pub fd: RawFd,
    /// Peer credentials: pid, uid, gid, groups.
    pub cred: (i32, u32, u32, Vec<u32>),
    /// The user's name.
    pub user: String,
    /// Bytes read and not yet parsed.
    pub input: Vec<u8>,
    /// Bytes not yet written.
    pub output: Vec<u8>,
    /// Descriptors received and not yet used.
    pub fds: Vec<RawFd>,
    /// The job's stdin, stdout and stderr, once submitted (-1 for one its
    /// client had closed).
    pub stdio: Option<[RawFd; 3]>,
    /// The client's other descriptors: the number the job gets each at,
    /// and the descriptor here.
    #[serde(default)]
    pub inherited: Vec<(RawFd, RawFd)>,
    /// The job's stdin is a terminal its first rank takes as its
    /// controlling terminal (`scrun -pty`).
    #[serde(default)]
    pub controlling_terminal: bool,
    /// The job's PMI descriptors: ranks per stage, and the descriptors
    /// not yet taken by a rank (-1 for a taken one).
    #[serde(default)]
    pub pmi: (usize, Vec<RawFd>),
    /// The PMIx namespace of the job's ranks, if any.
    #[serde(default)]
    pub pmix: Option<String>,
    /// The ranks reach scrun's PMI server by port (`Submit::pmi_port`).
    #[serde(default)]
    pub pmi_port: bool,
    /// A job was submitted on it.
    pub submitted: bool,
    /// Close once the output is written.
    pub closing: bool,
    /// Reading is paused until the output drains.
    pub paused: bool,
}

/// Writes the handover file (replacing an old one), private to scored.
pub fn write(state_dir: &Path, handover: &Handover) -> io::Result<PathBuf> {
    let path = state_dir.join(FILE);
    match fs::remove_file(&path) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)?;
    // Written as it is serialized: the core's launches, as text twice
    // their bytes, are not gathered into one buffer first.
    let mut writer = io::BufWriter::with_capacity(64 << 10, file);
    serde_json::to_writer(&mut writer, handover)?;
    writer.flush()?;
    Ok(path)
}

/// Why a handover file was refused.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be read.
    Read {
        /// The handover file.
        path: PathBuf,
        /// What reading it said.
        source: io::Error,
    },
    /// The file is not JSON with a format field.
    NotHandover {
        /// The file that is not a handover.
        path: PathBuf,
        /// What parsing it said.
        source: serde_json::Error,
    },
    /// The file is of another format than this binary's.
    OtherFormat {
        /// The handover file.
        path: PathBuf,
        /// The format it declares.
        format: u64,
    },
    /// The file names no format.
    NoFormat {
        /// The file without a format.
        path: PathBuf,
    },
    /// The file is of this format but its contents do not parse.
    Contents {
        /// The handover file.
        path: PathBuf,
        /// What parsing it said.
        source: serde_json::Error,
    },
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Read { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            ReadError::NotHandover { path, source } => {
                write!(f, "{} is not a handover file: {source}", path.display())
            }
            ReadError::OtherFormat { path, format } => write!(
                f,
                "{} has handover format {format}; this scored ({}) reads format {FORMAT}",
                path.display(),
                crate::version::version()
            ),
            ReadError::NoFormat { path } => {
                write!(f, "{} has no handover format", path.display())
            }
            ReadError::Contents { path, source } => {
                write!(f, "{} cannot be read: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Read { source, .. } => Some(source),
            ReadError::NotHandover { source, .. } | ReadError::Contents { source, .. } => {
                Some(source)
            }
            ReadError::OtherFormat { .. } | ReadError::NoFormat { .. } => None,
        }
    }
}

/// Reads a handover file; refuses one of another format, naming both.
pub fn read(path: &Path) -> Result<Handover, ReadError> {
    let path_buf = || path.to_path_buf();
    let bytes = fs::read(path).map_err(|source| ReadError::Read {
        path: path_buf(),
        source,
    })?;
    // The format alone first (the rest is skipped, not built), so that a
    // file of another layout is refused by its format, not by a field.
    #[derive(Deserialize)]
    struct Format {
        format: Option<u64>,
    }
    let Format { format } =
        serde_json::from_slice(&bytes).map_err(|source| ReadError::NotHandover {
            path: path_buf(),
            source,
        })?;
    match format {
        Some(format) if format == u64::from(FORMAT) => {}
        Some(format) => {
            return Err(ReadError::OtherFormat {
                path: path_buf(),
                format,
            })
        }
        None => return Err(ReadError::NoFormat { path: path_buf() }),
    }
    serde_json::from_slice(&bytes).map_err(|source| ReadError::Contents {
        path: path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_another_format_or_none_are_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("scored-handover-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE);
        fs::write(&path, r#"{"format": 99, "version": "9.9.9"}"#).unwrap();
        let error = read(&path).unwrap_err().to_string();
        assert!(error.contains("has handover format 99"), "{error}");
        assert!(error.contains(&format!("reads format {FORMAT}")), "{error}");
        fs::write(&path, r#"{"version": "9.9.9"}"#).unwrap();
        assert!(read(&path)
            .unwrap_err()
            .to_string()
            .contains("has no handover format"));
        fs::write(&path, "not json").unwrap();
        assert!(read(&path)
            .unwrap_err()
            .to_string()
            .contains("is not a handover file"));
        fs::write(&path, format!(r#"{{"format": {FORMAT}}}"#)).unwrap();
        assert!(read(&path)
            .unwrap_err()
            .to_string()
            .contains("cannot be read"));
        assert!(read(&dir.join("missing"))
            .unwrap_err()
            .to_string()
            .starts_with("cannot read"));
        let _ = fs::remove_dir_all(&dir);
    }
}
