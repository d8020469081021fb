//! What a keeper leaves for the next scored when it ends with none
//! connected: `STATE_DIR/keepers/ID.held`, the [`Held`] it would have told
//! a scored taking its job over (every rank's end with its status, usage
//! and time), its own pid and start time, and why it ended the job if it
//! did. A scored that takes the job over and cannot reach the keeper reads
//! the file instead, so that a job that ended while no scored ran is
//! recorded as it ended, not lost.
//!
//! The file is written as the state is: a new file (`O_EXCL`, never
//! through a link, mode 0600), synced, then renamed into place. It is
//! believed only if it is a regular file of scored's own user that no
//! one else may write, and names the keeper pid and start time scored
//! recorded for the job; anything else is refused with the reason, and
//! the job is lost as it would have been without the file. The directory
//! is scored's user's alone, so only that user could plant one; the
//! checks keep a link or a leftover of another keeper from being taken
//! for the job's.
#![forbid(unsafe_code)]

use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Held, PROTOCOL};

/// The largest file read back: far more than a job of the largest size
/// holds (a rank's end takes about 200 bytes).
const MAX_FILE: u64 = 16 << 20;

/// What a keeper that ended with no scored connected leaves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldFile {
    /// The keeper's [`PROTOCOL`].
    pub protocol: u32,
    /// The job it kept.
    pub job: u64,
    /// The keeper's pid.
    pub pid: i32,
    /// The keeper's start time (clock ticks after boot).
    pub start: u64,
    /// Its job's ends, as it would have told a scored taking over.
    pub held: Held,
    /// Why the keeper killed what was left of the job (no scored came
    /// back within its wait), if it did.
    pub killed: Option<String>,
}

/// Where the keeper of `job` leaves its file, in the keepers' directory.
pub fn path(keepers: &Path, job: u64) -> PathBuf {
    keepers.join(format!("{job}.held"))
}

/// Writes `file` into `keepers` safely: a new temporary file (created
/// exclusively, never through a symbolic link, mode 0600), synced, then
/// renamed into place, and the directory synced.
pub fn write(keepers: &Path, file: &HeldFile) -> io::Result<PathBuf> {
    let bytes = serde_json::to_vec(file).map_err(io::Error::other)?;
    let target = path(keepers, file.job);
    let temporary = keepers.join(format!("{}.held.{}.new", file.job, file.pid));
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temporary)
    };
    let mut out = match create() {
        Ok(out) => out,
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            // A leftover of a keeper of the same pid that died writing.
            std::fs::remove_file(&temporary)?;
            create()?
        }
        Err(error) => return Err(error),
    };
    let written = out
        .write_all(&bytes)
        .and_then(|()| out.sync_all())
        .and_then(|()| std::fs::rename(&temporary, &target));
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error);
    }
    if let Ok(dir) = std::fs::File::open(keepers) {
        let _ = dir.sync_all();
    }
    Ok(target)
}

/// Reads back the file at `path`, left by the keeper of `job` that
/// scored recorded as `recorded` (pid, start time), believing it only if
/// it is a regular file (not a link), of scored's user `uid`, that no
/// group or other may write, that names that job, pid and start time, and
/// holds only ended ranks. The error says why it is refused.
pub fn read(
    path: &Path,
    uid: u32,
    job: u64,
    recorded: Option<(i32, u64)>,
) -> Result<HeldFile, String> {
    // Not through a link, and without waiting on a FIFO put in its place.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => {
            return Err("it is a symbolic link".into())
        }
        Err(error) => return Err(format!("cannot open it: {error}")),
    };
    let meta = file
        .metadata()
        .map_err(|error| format!("cannot read its status: {error}"))?;
    if !meta.file_type().is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.uid() != uid {
        return Err(format!(
            "it belongs to uid {}, not scored's {uid}",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "its mode {:o} lets others write it",
            meta.mode() & 0o7777
        ));
    }
    if meta.len() > MAX_FILE {
        return Err(format!("it is larger than {MAX_FILE} bytes"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| format!("cannot read it: {error}"))?;
    let held: HeldFile =
        serde_json::from_slice(&bytes).map_err(|error| format!("it does not read: {error}"))?;
    // What a newer keeper wrote may mean what this scored cannot tell.
    if held.protocol > PROTOCOL {
        return Err(format!(
            "it is of protocol {}, newer than this scored's {PROTOCOL}",
            held.protocol
        ));
    }
    if held.job != job {
        return Err(format!("it names job {}, not {job}", held.job));
    }
    let Some((recorded_pid, recorded_start)) = recorded else {
        return Err("no keeper is recorded for the job".into());
    };
    if (held.pid, held.start) != (recorded_pid, recorded_start) {
        return Err(format!(
            "it names process {} started at {}, not the keeper recorded (process {recorded_pid} started at {recorded_start})",
            held.pid, held.start
        ));
    }
    if held.held.launching || held.held.ranks.iter().any(|rank| rank.ended.is_none()) {
        return Err("it holds a process that has not ended".into());
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::keeper::{Ended, RankHeld};

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("scored-heldfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn sample() -> HeldFile {
        HeldFile {
            protocol: PROTOCOL,
            job: 7,
            pid: 4242,
            start: 99,
            held: Held {
                ranks: vec![RankHeld {
                    pid: 4300,
                    start: 100,
                    stage: 0,
                    rank: 0,
                    slot: 0,
                    execd: true,
                    stopped: false,
                    ended: Some(Ended {
                        code: Some(0),
                        signal: None,
                        cpu_us: 1500,
                        max_rss: 4096,
                        at_us: 1_700_000_000_000_000,
                    }),
                }],
                ..Held::default()
            },
            killed: None,
        }
    }

    fn uid() -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    #[test]
    fn a_file_written_reads_back_for_its_keeper_only() {
        let dir = dir("back");
        let written = write(&dir, &sample()).unwrap();
        assert_eq!(written, dir.join("7.held"));
        let mode = std::fs::metadata(&written).unwrap().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "mode {mode:o}");
        assert_eq!(read(&written, uid(), 7, Some((4242, 99))), Ok(sample()));
        let other = read(&written, uid(), 7, Some((4242, 98))).unwrap_err();
        assert!(other.contains("not the keeper recorded"), "{other}");
        assert!(read(&written, uid(), 8, Some((4242, 99)))
            .unwrap_err()
            .contains("names job 7"));
        assert!(read(&written, uid(), 7, None)
            .unwrap_err()
            .contains("no keeper is recorded"));
        assert!(read(&written, uid() + 1, 7, Some((4242, 99)))
            .unwrap_err()
            .contains("belongs to uid"));
        // Written again (a keeper of the same pid), it replaces the first.
        write(&dir, &sample()).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn links_fifos_open_files_and_live_ranks_are_refused() {
        let dir = dir("refused");
        let real = dir.join("real");
        std::fs::write(&real, serde_json::to_vec(&sample()).unwrap()).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = path(&dir, 7);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(
            read(&link, uid(), 7, Some((4242, 99))),
            Err("it is a symbolic link".into())
        );
        std::fs::remove_file(&link).unwrap();
        nix::unistd::mkfifo(&link, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(
            read(&link, uid(), 7, Some((4242, 99))),
            Err("it is not a regular file".into())
        );
        std::fs::remove_file(&link).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o622)).unwrap();
        assert!(read(&real, uid(), 7, Some((4242, 99)))
            .unwrap_err()
            .contains("lets others write it"));
        let mut alive = sample();
        alive.held.ranks[0].ended = None;
        write(&dir, &alive).unwrap();
        assert_eq!(
            read(&link, uid(), 7, Some((4242, 99))),
            Err("it holds a process that has not ended".into())
        );
        std::fs::write(&link, b"{").unwrap();
        assert!(read(&link, uid(), 7, Some((4242, 99)))
            .unwrap_err()
            .starts_with("it does not read"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
