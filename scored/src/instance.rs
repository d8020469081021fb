//! Which scored owns a state directory: `STATE_DIR/daemon` records the boot
//! id of the machine, the pid and the start time (in clock ticks since
//! boot, from /proc/PID/stat) of the daemon that uses it.
//!
//! A pid alone cannot tell whether that daemon still lives: a daemon
//! killed with SIGKILL may stay in /proc as a zombie until its parent
//! reaps it, and its pid may since belong to another process, or the
//! machine may have rebooted. The daemon is alive only if the machine has
//! the same boot id and a process with that pid, not a zombie, started at
//! the same tick. A new scored refuses a state directory whose daemon is
//! alive, and otherwise knows that everything an earlier daemon of this
//! directory left (job cgroups, scratch directories, unfinished jobs in
//! the journal) is abandoned.
//!
//! What it must never do: signal anything; it only reads /proc and writes
//! its one file.
#![forbid(unsafe_code)]

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The file's name in the state directory.
pub const FILE: &str = "daemon";

/// One daemon, as the machine can tell it from any other process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `/proc/sys/kernel/random/boot_id`: which boot of the machine.
    pub boot_id: String,
    /// The daemon's pid.
    pub pid: i32,
    /// Field 22 of /proc/PID/stat: when it started, in ticks since boot.
    pub start_time: u64,
}

impl Identity {
    /// This process.
    pub fn current() -> io::Result<Identity> {
        let boot_id = boot_id()?;
        let pid = std::process::id() as i32;
        let stat = fs::read_to_string("/proc/self/stat")?;
        let (_, start_time) = parse_stat(&stat).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "cannot parse /proc/self/stat")
        })?;
        Ok(Identity {
            boot_id,
            pid,
            start_time,
        })
    }

    fn to_line(&self) -> String {
        format!("{} {} {}\n", self.boot_id, self.pid, self.start_time)
    }

    fn from_line(text: &str) -> Option<Identity> {
        let mut words = text.split_whitespace();
        let identity = Identity {
            boot_id: words.next()?.to_string(),
            pid: words.next()?.parse().ok()?,
            start_time: words.next()?.parse().ok()?,
        };
        words.next().is_none().then_some(identity)
    }

    /// Whether this daemon is alive, given the machine's boot id now and
    /// the text of /proc/PID/stat for its pid (`None`: no such process).
    pub fn is_alive(&self, boot_id: &str, stat: Option<&str>) -> bool {
        if self.boot_id != boot_id {
            return false;
        }
        match stat.and_then(parse_stat) {
            Some((state, start_time)) => {
                state != 'Z' && state != 'X' && start_time == self.start_time
            }
            None => false,
        }
    }

    /// Whether this daemon is alive now.
    pub fn alive_now(&self) -> bool {
        let Ok(boot_id) = boot_id() else {
            return false;
        };
        let stat = fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok();
        self.is_alive(&boot_id, stat.as_deref())
    }
}

/// `/proc/sys/kernel/random/boot_id`: which boot of the machine this is.
pub fn boot_id() -> io::Result<String> {
    Ok(fs::read_to_string("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_string())
}

/// The state (field 3) and start time (field 22) of a /proc/PID/stat line.
/// The command name (field 2) may hold spaces and parentheses, so fields
/// are counted from the last `)`.
fn parse_stat(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 4 to 21 come before the start time.
    let start_time = fields.nth(18)?.parse().ok()?;
    Some((state, start_time))
}

/// The daemon recorded in `state_dir`, if any (and readable).
pub fn recorded(state_dir: &Path) -> Option<Identity> {
    let text = fs::read_to_string(state_dir.join(FILE)).ok()?;
    Identity::from_line(&text)
}

/// Why the state directory cannot be taken.
#[derive(Debug)]
pub enum ClaimError {
    /// This process's own identity could not be read.
    Identity(io::Error),
    /// A live daemon holds it.
    InUse {
        /// That daemon's pid.
        pid: i32,
        /// The state directory it holds.
        state_dir: PathBuf,
    },
    /// The record could not be written.
    Write {
        /// The record's path.
        path: PathBuf,
        /// What writing said.
        source: io::Error,
    },
}

impl std::fmt::Display for ClaimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClaimError::Identity(error) => {
                write!(f, "cannot tell this process from others: {error}")
            }
            ClaimError::InUse { pid, state_dir } => write!(
                f,
                "another scored (pid {pid}) uses the state directory {}",
                state_dir.display()
            ),
            ClaimError::Write { path, source } => {
                write!(f, "cannot write {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for ClaimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClaimError::Identity(error) | ClaimError::Write { source: error, .. } => Some(error),
            ClaimError::InUse { .. } => None,
        }
    }
}

/// Takes the state directory for this daemon: refuses it while the daemon
/// recorded there is alive; returns the dead one it replaces, if any.
pub fn claim(state_dir: &Path) -> Result<Option<Identity>, ClaimError> {
    let me = Identity::current().map_err(ClaimError::Identity)?;
    let previous = recorded(state_dir);
    if let Some(previous) = &previous {
        if previous.pid != me.pid && previous.alive_now() {
            return Err(ClaimError::InUse {
                pid: previous.pid,
                state_dir: state_dir.to_path_buf(),
            });
        }
    }
    write(state_dir, &me).map_err(|source| ClaimError::Write {
        path: state_dir.join(FILE),
        source,
    })?;
    Ok(previous.filter(|previous| *previous != me))
}

/// Records `identity` (a new file renamed over the old one).
fn write(state_dir: &Path, identity: &Identity) -> io::Result<()> {
    let path = state_dir.join(FILE);
    let temp = state_dir.join(format!("{FILE}.new"));
    let _ = fs::remove_file(&temp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&temp)?;
    file.write_all(identity.to_line().as_bytes())?;
    file.sync_all()?;
    fs::rename(&temp, &path)
}

/// Forgets this daemon at a clean exit.
pub fn release(state_dir: &Path) {
    if let Some(recorded) = recorded(state_dir) {
        if recorded.pid == std::process::id() as i32 {
            let _ = fs::remove_file(state_dir.join(FILE));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(state: char, start: u64) -> String {
        format!(
            "4242 (scored (x) y) {state} 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 {start} 1000 200"
        )
    }

    #[test]
    fn a_daemon_lives_only_with_its_boot_pid_and_start_time() {
        let daemon = Identity {
            boot_id: "b1".into(),
            pid: 4242,
            start_time: 777,
        };
        assert!(daemon.is_alive("b1", Some(&stat('S', 777))));
        assert!(daemon.is_alive("b1", Some(&stat('R', 777))));
        // A zombie: killed, not reaped yet.
        assert!(!daemon.is_alive("b1", Some(&stat('Z', 777))));
        // Its pid now belongs to another process.
        assert!(!daemon.is_alive("b1", Some(&stat('S', 900))));
        // No such process.
        assert!(!daemon.is_alive("b1", None));
        // The machine rebooted.
        assert!(!daemon.is_alive("b2", Some(&stat('S', 777))));
        assert!(!daemon.is_alive("b1", Some("garbage")));
    }

    #[test]
    fn identities_round_trip_and_bad_files_are_ignored() {
        let me = Identity::current().expect("this process");
        assert!(me.alive_now());
        assert_eq!(Identity::from_line(&me.to_line()), Some(me));
        assert_eq!(Identity::from_line("b 1"), None);
        assert_eq!(Identity::from_line("b x 1"), None);
        assert_eq!(Identity::from_line("b 1 2 3"), None);
    }
}
