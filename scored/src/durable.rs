//! The core's state on disk, so that a new scored on the same state
//! directory takes over where a killed one stopped: `STATE_DIR/state`, a
//! snapshot of the core (with the settings it ran with and the origin of
//! its clock), and `STATE_DIR/state.log`, every input fed to the core
//! since, as JSON lines (`{"seq":N,"tick":T,"inputs":[...]}`).
//!
//! The core is a function of its inputs: restoring the snapshot and
//! feeding it the logged inputs again, each at its tick, gives back the
//! state the killed daemon had after its last logged record
//! (`core::tests::replay` holds the core to that). So the cost of being
//! durable is one `write(2)` of the inputs of the batches handled since
//! the last one, never a write of every job: the loop writes what it
//! logged before anything of those batches leaves the daemon (a reply to a
//! client, a process created; see [`Durable::write_pending`]), so no
//! client is told of a job that a crash could lose. A crash may lose what
//! was logged and not written yet; only the processes (which the next
//! daemon asks about) and nobody else heard of it.
//!
//! The log is folded into a new snapshot when it grows past its size
//! ([`MAX_LOG`]) and at each start: the snapshot is written to
//! `state.new`, synced and renamed over `state`, then the log is emptied;
//! a crash between the two leaves records the snapshot already holds,
//! which their sequence numbers skip. A torn last record (a crash in the
//! middle of a write) is dropped when the log is read.
//!
//! Where to look: the loop's side (when it logs, writes and folds) is in
//! `evloop.rs` (`feed`); reading the state back and replaying it is
//! `main.rs` (`recover_core`); the inputs' logged form is the core's
//! ([`InputRecord`]).
#![forbid(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use scored_core::core::{Budgets, CoreConfig, CoreSnapshot, Input, InputRecord};
use scored_core::ids::Tick;

/// The snapshot's file name in the state directory.
pub const SNAPSHOT: &str = "state";
/// The log's file name in the state directory.
pub const LOG: &str = "state.log";
/// The layout version of the snapshot and the log.
pub const FORMAT: u32 = 1;
/// The log's size past which it is folded into a new snapshot.
pub const MAX_LOG: u64 = 16 << 20;
/// How long, after a new daemon took over, the scrun of an interactive job
/// has to reattach before the job is killed as one whose scrun went away
/// (scored(8), CRASHES).
pub const REATTACH_WAIT: Duration = Duration::from_secs(60);
/// The buffer a snapshot is written through.
const WRITE_BUFFER: usize = 64 << 10;
/// The shortest time between two syncs of the log.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(100);

/// The settings of the core that decide how it answers an input (who may
/// do what, how long a kill's grace is, what users may hold), which the
/// core's own snapshot leaves to the daemon's flags: the log is replayed
/// with the settings it was written under.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    operators: Vec<u32>,
    daemon_uid: u32,
    kill_grace_us: u64,
    disk: Vec<Option<u64>>,
    machine_memory: Option<u64>,
    budgets: (usize, usize, usize, usize),
}

impl Settings {
    /// The settings of `config`.
    pub fn of(config: &CoreConfig) -> Settings {
        let budgets = config.budgets;
        Settings {
            operators: config.operators.clone(),
            daemon_uid: config.daemon_uid,
            kill_grace_us: config.kill_grace.as_micros() as u64,
            disk: config.disk.clone(),
            machine_memory: config.machine_memory,
            budgets: (
                budgets.user_jobs,
                budgets.total_jobs,
                budgets.user_waiting,
                budgets.total_waiting,
            ),
        }
    }

    /// Whether these settings are not `other`.
    pub fn differs(&self, other: &Settings) -> bool {
        serde_json::to_value(self).ok() != serde_json::to_value(other).ok()
    }

    /// `config` with these settings (its time slice and the rest kept).
    pub fn apply(&self, config: &CoreConfig) -> CoreConfig {
        let (user_jobs, total_jobs, user_waiting, total_waiting) = self.budgets;
        CoreConfig {
            operators: self.operators.clone(),
            daemon_uid: self.daemon_uid,
            kill_grace: Duration::from_micros(self.kill_grace_us),
            disk: self.disk.clone(),
            machine_memory: self.machine_memory,
            budgets: Budgets {
                user_jobs,
                total_jobs,
                user_waiting,
                total_waiting,
            },
            ..config.clone()
        }
    }
}

/// The snapshot file.
#[derive(Debug, Serialize, Deserialize)]
pub struct StateFile {
    /// [`FORMAT`].
    pub format: u32,
    /// The machine's boot when it was written: the processes of another
    /// boot are gone, and its clock is another.
    pub boot_id: String,
    /// The monotonic clock (ns) at the core's tick 0, so that the next
    /// daemon's ticks carry on from the killed one's.
    pub origin_ns: u64,
    /// The last log record the snapshot holds.
    pub seq: u64,
    /// The settings the core ran with.
    pub settings: Settings,
    /// The core.
    pub core: CoreSnapshot,
    /// The jobs' keepers: job, pid, start time.
    #[serde(default)]
    pub keepers: Vec<(u64, i32, u64)>,
}

/// One logged batch of inputs.
#[derive(Debug, Serialize, Deserialize)]
pub struct Record {
    /// Its number, one more than the record before.
    pub seq: u64,
    /// The tick it was fed at (µs).
    pub tick: u64,
    /// The inputs, in order.
    pub inputs: Vec<InputRecord>,
    /// Keepers that said who they are: job, pid, start time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keepers: Vec<(u64, i32, u64)>,
}

/// What a killed daemon left: its last snapshot and the records after it.
#[derive(Debug)]
pub struct Left {
    /// The snapshot.
    pub state: StateFile,
    /// The records after it, in order.
    pub records: Vec<Record>,
    /// Records that could not be read (a torn last one), dropped.
    pub dropped: usize,
}

impl Left {
    /// The keepers recorded, by job: pid and start time.
    pub fn keepers(&self) -> std::collections::HashMap<u64, (i32, u64)> {
        self.state
            .keepers
            .iter()
            .chain(self.records.iter().flat_map(|record| &record.keepers))
            .map(|&(job, pid, start)| (job, (pid, start)))
            .collect()
    }
}

/// Why the state a daemon left cannot be read.
#[derive(Debug)]
pub enum LoadError {
    /// A file could not be read.
    Read(PathBuf, io::Error),
    /// The snapshot is not one this scored reads.
    Snapshot(PathBuf, String),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Read(path, error) => write!(f, "cannot read {}: {error}", path.display()),
            LoadError::Snapshot(path, why) => write!(f, "{}: {why}", path.display()),
        }
    }
}

impl std::error::Error for LoadError {}

/// Reads what the daemon of `state_dir` left, if it left anything.
pub fn load(state_dir: &Path) -> Result<Option<Left>, LoadError> {
    let path = state_dir.join(SNAPSHOT);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(LoadError::Read(path, error)),
    };
    #[derive(Deserialize)]
    struct Format {
        format: Option<u32>,
    }
    let format: Format = serde_json::from_slice(&bytes)
        .map_err(|error| LoadError::Snapshot(path.clone(), error.to_string()))?;
    if format.format != Some(FORMAT) {
        return Err(LoadError::Snapshot(
            path,
            format!(
                "format {}; this scored ({}) reads format {FORMAT}",
                format
                    .format
                    .map_or_else(|| "none".to_string(), |format| format.to_string()),
                crate::version::version()
            ),
        ));
    }
    let state: StateFile = serde_json::from_slice(&bytes)
        .map_err(|error| LoadError::Snapshot(path.clone(), error.to_string()))?;
    let log = state_dir.join(LOG);
    let mut records = Vec::new();
    let mut dropped = 0;
    match File::open(&log) {
        Ok(file) => {
            let mut next = state.seq + 1;
            for line in BufReader::new(file).split(b'\n') {
                let line = line.map_err(|error| LoadError::Read(log.clone(), error))?;
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let record: Record = match serde_json::from_slice(&line) {
                    Ok(record) => record,
                    Err(_) => {
                        dropped += 1;
                        continue;
                    }
                };
                if record.seq < next {
                    // Already in the snapshot (a crash between the
                    // snapshot's rename and the log's emptying).
                    continue;
                }
                if record.seq != next || dropped > 0 {
                    // A gap: nothing after it can be applied in order.
                    dropped += 1;
                    continue;
                }
                next += 1;
                records.push(record);
            }
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(LoadError::Read(log, error)),
    }
    Ok(Some(Left {
        state,
        records,
        dropped,
    }))
}

/// Removes the state of `state_dir` (a daemon that exits with no job left).
pub fn remove(state_dir: &Path) {
    for name in [LOG, SNAPSHOT] {
        match fs::remove_file(state_dir.join(name)) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(file = name, %error, "cannot remove the daemon's state"),
        }
    }
}

/// The daemon's state on disk, open for logging.
#[derive(Debug)]
pub struct Durable {
    dir: PathBuf,
    log: File,
    /// Bytes in the log.
    log_size: u64,
    /// The last record's number (in the log or waiting to be written).
    seq: u64,
    /// Records logged and not yet written.
    pending: Vec<u8>,
    boot_id: String,
    origin_ns: u64,
    settings: Settings,
    /// Something was written since the last sync.
    unsynced: bool,
    last_sync: Instant,
}

impl Durable {
    /// Starts the state of `state_dir` afresh from `core` (at start-up,
    /// after any recovery): a snapshot, and an empty log.
    pub fn start(
        state_dir: &Path,
        origin_ns: u64,
        seq: u64,
        settings: Settings,
        core: CoreSnapshot,
        keepers: Vec<(u64, i32, u64)>,
    ) -> io::Result<Durable> {
        let boot_id = crate::instance::boot_id()?;
        let path = state_dir.join(LOG);
        let log = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|error| {
                io::Error::new(error.kind(), format!("{}: {error}", path.display()))
            })?;
        let mut durable = Durable {
            dir: state_dir.to_path_buf(),
            log,
            log_size: 0,
            seq,
            pending: Vec::new(),
            boot_id,
            origin_ns,
            settings,
            unsynced: false,
            last_sync: Instant::now(),
        };
        durable.fold(core, keepers)?;
        Ok(durable)
    }

    /// Logs one batch of inputs fed to the core at `tick`; it is written
    /// with the next [`Durable::write_pending`].
    pub fn note(&mut self, tick: Tick, inputs: &[Input]) {
        let record = Record {
            seq: self.seq + 1,
            tick: tick.0,
            inputs: inputs.iter().map(InputRecord::of).collect(),
            keepers: Vec::new(),
        };
        self.push(&record);
    }

    /// Logs the identities of keepers that said who they are (a record
    /// with no input, which the replay passes over).
    pub fn note_keepers(&mut self, keepers: Vec<(u64, i32, u64)>) {
        if keepers.is_empty() {
            return;
        }
        let record = Record {
            seq: self.seq + 1,
            tick: 0,
            inputs: Vec::new(),
            keepers,
        };
        self.push(&record);
    }

    fn push(&mut self, record: &Record) {
        match serde_json::to_writer(&mut self.pending, record) {
            Ok(()) => {
                self.pending.push(b'\n');
                self.seq += 1;
            }
            // Serializing plain data to memory cannot fail.
            Err(error) => tracing::error!(%error, "cannot log the core's inputs"),
        }
    }

    /// How much is logged and not yet written: what [`Durable::forget`]
    /// goes back to.
    pub fn mark(&self) -> (usize, u64) {
        (self.pending.len(), self.seq)
    }

    /// Drops what was logged after `mark` and not yet written (the core
    /// went back to the state before it after a panic).
    pub fn forget(&mut self, mark: (usize, u64)) {
        if mark.0 <= self.pending.len() {
            self.pending.truncate(mark.0);
            self.seq = mark.1;
        }
    }

    /// Writes what was logged, in one `write(2)`: before any reply to a
    /// client or process of those inputs leaves the daemon.
    pub fn write_pending(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let result = self.log.write_all(&self.pending);
        self.log_size += self.pending.len() as u64;
        self.pending.clear();
        self.unsynced = true;
        result
    }

    /// Whether the log should be folded into a new snapshot.
    pub fn wants_fold(&self) -> bool {
        self.log_size >= MAX_LOG
    }

    /// Writes `core` (the core after every logged record) and the keepers
    /// as the new snapshot, and empties the log.
    pub fn fold(&mut self, core: CoreSnapshot, keepers: Vec<(u64, i32, u64)>) -> io::Result<()> {
        self.write_pending()?;
        let state = StateFile {
            format: FORMAT,
            boot_id: self.boot_id.clone(),
            origin_ns: self.origin_ns,
            seq: self.seq,
            settings: self.settings.clone(),
            core,
            keepers,
        };
        let fresh = self.dir.join(format!("{SNAPSHOT}.new"));
        match fs::remove_file(&fresh) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&fresh)?;
        // Written as it is serialized, not made into one buffer first: the
        // text of the queued jobs' environments is twice their bytes, and
        // a buffer grown to hold it would hold it twice over while it grows.
        let mut writer = BufWriter::with_capacity(WRITE_BUFFER, &mut file);
        serde_json::to_writer(&mut writer, &state)?;
        writer.flush()?;
        drop(writer);
        file.sync_data()?;
        fs::rename(&fresh, self.dir.join(SNAPSHOT))?;
        self.log.set_len(0)?;
        self.log_size = 0;
        self.unsynced = false;
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Syncs the log if something was written since the last sync and the
    /// last sync is at least [`SYNC_INTERVAL`] old (a crash of the daemon
    /// loses nothing written; this is for the machine's).
    pub fn sync_if_needed(&mut self) -> io::Result<()> {
        if self.unsynced && self.last_sync.elapsed() >= SYNC_INTERVAL {
            self.unsynced = false;
            self.last_sync = Instant::now();
            self.log.sync_data()?;
        }
        Ok(())
    }

    /// When the log must be synced, if it has something unsynced.
    pub fn sync_deadline(&self) -> Option<Instant> {
        self.unsynced.then(|| self.last_sync + SYNC_INTERVAL)
    }

    /// The log, when something was written to it since the last sync, for
    /// a sync made elsewhere (then [`Durable::synced`]).
    pub fn unsynced_log(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.unsynced.then(|| self.log.as_fd())
    }

    /// What was written is being synced elsewhere (by the closer, see
    /// `crate::closer::sync`).
    pub fn synced(&mut self) {
        self.unsynced = false;
        self.last_sync = Instant::now();
    }

    /// The last record's number.
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

/// The monotonic clock now, in nanoseconds (the clock `Instant` reads,
/// which the whole machine shares).
pub fn monotonic_ns() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(now) => (now.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(now.tv_nsec() as u64),
        Err(_) => 0,
    }
}

/// The `Instant` at which the monotonic clock read `origin_ns`.
pub fn instant_at(origin_ns: u64) -> Instant {
    let now = Instant::now();
    let ago = monotonic_ns().saturating_sub(origin_ns);
    now.checked_sub(Duration::from_nanos(ago)).unwrap_or(now)
}

#[cfg(test)]
mod tests;
