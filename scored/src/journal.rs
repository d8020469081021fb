//! The job journal: every job's life (admitted, started, moved, held,
//! released, ended with its status, reason and accounting) appended to
//! `STATE_DIR/journal` as JSON lines, so that finished jobs and the job
//! ids handed out survive restarts and crashes of scored.
//!
//! Each record is one `write(2)` on a file opened with `O_APPEND`, so a
//! crash leaves at most a torn last line, which reading skips. The file is
//! synced (`fdatasync`) after a job's end is written, after the batch of
//! events that wrote it and never between the stops and continues of a
//! switch, and at most once per [`SYNC_INTERVAL`]: a sync waits for the
//! disk for milliseconds, and many jobs ending would otherwise pay it
//! each. The closer makes it, in a child of its own, where it has one
//! that syncs (`evloop/durable.rs`, `sync_files`); the loop otherwise. At the
//! configured size the file is renamed to `journal.1` (replacing the older
//! one) and a new one starts with a checkpoint: the next job id and the
//! records of the unfinished jobs, so that recovery never needs more than
//! the two files.
//!
//! Ended records are found again through an index kept in memory (job id,
//! uid, end time, and where the line lies), so that `job ID` reads one line
//! and `history` only the lines it lists, at most [`HISTORY_LIMIT`] of them.
//!
//! What it must never do: decide anything about jobs (the core does), or
//! block the event loop for long: no request reads the files whole, except
//! the first one after an in-place restart, which builds the index.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value as Json};

use scored_core::core::{JobEvent, HISTORY};
use scored_proto::command::reply::{Table, Value};
use scored_proto::command::Since;
use scored_proto::units::parse_size;

/// The journal's file name in the state directory.
pub const FILE: &str = "journal";
/// The previous file, after a rotation.
pub const ROTATED: &str = "journal.1";
/// The default size at which the journal is rotated.
pub const DEFAULT_MAX_SIZE: u64 = 16 << 20;
/// The reason recorded for jobs a killed daemon left unfinished.
pub const LOST_REASON: &str = "lost: scored was killed";
/// The shortest time between two syncs: a job's end written within it is
/// synced at its end (the loop wakes for it, see [`Journal::sync_deadline`]).
pub const SYNC_INTERVAL: Duration = Duration::from_millis(100);
/// The most jobs one `history` lists (the last that match), so that one
/// request costs the loop a bounded time however long the journal is.
pub const HISTORY_LIMIT: usize = 1000;
/// The most bytes of the journal one `history` reads (the last records
/// that match, within [`HISTORY_LIMIT`]), so that one request costs the
/// loop a bounded time whatever the records hold.
pub const HISTORY_BYTES: u64 = 1 << 20;
/// The most bytes of one journal line: longer strings of a record are cut
/// (with a marker), then its largest fields replaced by a note.
pub const MAX_RECORD: usize = 16 * 1024;
/// The strings of a record over [`MAX_RECORD`] are cut to this many bytes.
const CUT_STRING: usize = 256;
/// The ended jobs of each user that a rotation keeps, whatever other users
/// did: those of a user's last ones that would leave with the older file are
/// carried into the new one.
pub const HISTORY_PER_USER: usize = 100;

/// Where the ended record of a job lies, and what `history` filters on.
#[derive(Debug, Clone, Copy)]
struct EndedAt {
    id: u64,
    uid: Option<u32>,
    ended: f64,
    /// In `journal.1` rather than `journal`.
    rotated: bool,
    offset: u64,
    len: u32,
}

impl EndedAt {
    /// The index entry of an `ended` line read at `offset` of a file.
    fn of(entry: &Json, rotated: bool, offset: u64, len: usize) -> Option<EndedAt> {
        if entry["event"] != "ended" {
            return None;
        }
        Some(EndedAt {
            id: entry["job"].as_u64()?,
            uid: entry["record"]["uid"]
                .as_u64()
                .and_then(|uid| u32::try_from(uid).ok()),
            ended: entry["record"]["ended"].as_f64().unwrap_or(0.0),
            rotated,
            offset,
            len: u32::try_from(len).ok()?,
        })
    }
}

/// The journal, open for appending.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    file: File,
    size: u64,
    max_size: u64,
    /// The size at which the file is rotated: the maximum size past what a
    /// rotation carried into it.
    rotate_at: u64,
    /// A job's end was written since the last sync.
    unsynced: bool,
    /// When the file was last synced.
    last_sync: Instant,
    /// The last [`HISTORY`] ended records, oldest first, for `jobs all` and `job ID`.
    recent: VecDeque<Recent>,
    /// Every ended record of both files, in file order; `None` until first
    /// needed after an in-place restart (reading the files then would
    /// lengthen the restart).
    index: Option<Vec<EndedAt>>,
}

/// An ended job's record kept in memory for `jobs all` and `job ID`: its
/// JSON text, parsed when it is shown. Parsed, the record of a 16-process
/// job held about 7 KB of small allocations (a map of keys and values),
/// so the thousand kept grew the daemon's heap by about 7 MB; every
/// process scored forks copies the page tables of that heap, its exec
/// tears them down again, and the daemon's writes after each fork fault
/// on the pages the heap spread over. As text it is one allocation the
/// size of its journal line (about 1 KB).
#[derive(Debug)]
struct Recent {
    /// The job's id, to find it without parsing.
    id: Option<u64>,
    text: Box<str>,
}

impl Recent {
    fn of(record: &Json) -> Recent {
        Recent {
            id: record["id"].as_u64(),
            text: record.to_string().into_boxed_str(),
        }
    }

    /// The record, parsed again (it is this journal's own serialization).
    fn parse(&self) -> Json {
        serde_json::from_str(&self.text).unwrap_or_else(|error| {
            tracing::error!(id = ?self.id, %error, "a kept job record does not parse");
            Json::Null
        })
    }
}

/// What the journal files say about earlier daemons.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The highest job id ever handed out (0 if none).
    pub last_id: u64,
    /// Records of jobs admitted and never ended, by id.
    pub open: BTreeMap<u64, Json>,
    /// Lines that could not be read (a torn last line after a crash).
    pub bad_lines: usize,
}

/// Why a `--journal-size` value was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeError {
    /// It is not a size.
    Invalid(scored_proto::units::ValueError),
    /// It is a size below 4K.
    TooSmall(String),
}

impl std::fmt::Display for SizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SizeError::Invalid(error) => write!(f, "{error}"),
            SizeError::TooSmall(text) => write!(
                f,
                "journal size {text} is too small: at least 4K, so that a record fits"
            ),
        }
    }
}

impl std::error::Error for SizeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SizeError::Invalid(error) => Some(error),
            SizeError::TooSmall(_) => None,
        }
    }
}

/// Parses a `--journal-size` value (a size, at least 4K).
pub fn parse_max_size(text: &str) -> Result<u64, SizeError> {
    let size = parse_size(text).map_err(SizeError::Invalid)?;
    if size < 4096 {
        return Err(SizeError::TooSmall(text.to_string()));
    }
    Ok(size)
}

/// The job a job event is about.
pub fn event_job(event: &JobEvent) -> scored_core::ids::JobId {
    match event {
        JobEvent::Admitted { job, .. }
        | JobEvent::Submitted { first: job, .. }
        | JobEvent::Started(job)
        | JobEvent::Moved { job, .. }
        | JobEvent::Held { job, .. }
        | JobEvent::Released(job)
        | JobEvent::Ended { job, .. } => *job,
    }
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

impl Journal {
    /// Reads what the journal files say, then opens the journal for
    /// appending (creating it, private to scored's user).
    pub fn open(state_dir: &Path, max_size: u64) -> io::Result<(Journal, Recovered)> {
        let mut recovered = Recovered::default();
        let mut recent = VecDeque::new();
        let mut index = Vec::new();
        for name in [ROTATED, FILE] {
            read_file(&state_dir.join(name), &mut |offset, line| {
                let Ok(record) = serde_json::from_str::<Json>(line) else {
                    recovered.bad_lines += 1;
                    return;
                };
                index.extend(EndedAt::of(&record, name == ROTATED, offset, line.len()));
                absorb(&record, &mut recovered, &mut recent);
            })?;
        }
        let path = state_dir.join(FILE);
        let (file, size) = open_for_append(&path)?;
        let mut journal = Journal {
            dir: state_dir.to_path_buf(),
            file,
            size,
            max_size,
            rotate_at: max_size,
            unsynced: false,
            last_sync: Instant::now(),
            recent,
            index: Some(sorted_by_end(index)),
        };
        if size > 0 && !ends_with_newline(&path)? {
            // A crash tore the last record: end its line, so that the next
            // record is not glued to it.
            journal.append_raw(b"\n")?;
        }
        Ok((journal, recovered))
    }

    /// Opens the journal for appending without reading it, for an in-place
    /// restart: the previous image hands over what reading would give (the
    /// recent ended records), since reading a full journal costs more than
    /// the whole restart may.
    pub fn reopen(state_dir: &Path, max_size: u64, recent: Vec<Json>) -> io::Result<Journal> {
        let path = state_dir.join(FILE);
        let (file, size) = open_for_append(&path)?;
        let mut recent: VecDeque<Recent> = recent.iter().map(Recent::of).collect();
        while recent.len() > HISTORY {
            recent.pop_front();
        }
        Ok(Journal {
            dir: state_dir.to_path_buf(),
            file,
            size,
            max_size,
            rotate_at: max_size,
            unsynced: false,
            last_sync: Instant::now(),
            recent,
            index: None,
        })
    }

    /// The recent ended records, to hand to the next image.
    pub fn recent_records(&self) -> Vec<Json> {
        self.recent.iter().map(Recent::parse).collect()
    }

    /// Appends one record with a single write, and indexes it if it is a
    /// job's end.
    fn append(&mut self, record: &Json) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        // A checkpoint holds every unfinished job: it is as long as they are.
        if line.len() > MAX_RECORD && record["event"] != "checkpoint" {
            let mut record = record.clone();
            fit_record(&mut record, line.len());
            line = serde_json::to_vec(&record).map_err(io::Error::other)?;
        }
        let offset = self.size;
        let len = line.len();
        line.push(b'\n');
        self.append_raw(&line)?;
        if let Some(index) = &mut self.index {
            index.extend(EndedAt::of(record, false, offset, len));
        }
        Ok(())
    }

    /// Appends a job's `ended` line made by `ended_line`, keeps its record
    /// for `jobs all` and indexes it, as `append` and `remember` do for the
    /// same line built as a tree.
    fn append_ended(&mut self, ended: EndedLine) -> io::Result<()> {
        let EndedLine {
            mut line,
            record,
            id,
            job,
            uid,
            ended,
        } = ended;
        // Kept even if the write fails, as `remember` keeps it.
        let text = String::from_utf8_lossy(&line[record]).into_owned();
        self.keep_recent(Recent {
            id,
            text: text.into_boxed_str(),
        });
        self.unsynced = true;
        let offset = self.size;
        let len = line.len();
        line.push(b'\n');
        self.append_raw(&line)?;
        if let Some(index) = &mut self.index {
            index.extend(u32::try_from(len).ok().map(|len| EndedAt {
                id: job,
                uid,
                ended,
                rotated: false,
                offset,
                len,
            }));
        }
        Ok(())
    }

    fn append_raw(&mut self, line: &[u8]) -> io::Result<()> {
        // A regular file takes the whole buffer in one write (or fails);
        // a short write would mean a full disk, and is reported.
        let written = self.file.write(line)?;
        self.size += written as u64;
        if written != line.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "short write to the journal ({written} of {} bytes)",
                    line.len()
                ),
            ));
        }
        Ok(())
    }

    /// Whether the next records should go to a new file.
    pub fn wants_rotation(&self) -> bool {
        self.size >= self.rotate_at
    }

    /// Starts a new file: the current one becomes `journal.1`, and the new
    /// one opens with a checkpoint (the next job id and the records of the
    /// unfinished jobs).
    pub fn rotate(&mut self, next_id: u64, open: Vec<Vec<(String, Value)>>) -> io::Result<()> {
        self.sync()?;
        let carried = self.records_to_carry();
        let path = self.dir.join(FILE);
        fs::rename(&path, self.dir.join(ROTATED))?;
        if let Some(index) = &mut self.index {
            index.retain(|entry| !entry.rotated);
            for entry in index.iter_mut() {
                entry.rotated = true;
            }
        }
        self.file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)?;
        self.size = 0;
        let open: Vec<Json> = open.iter().map(|fields| fields_json(fields)).collect();
        self.append(&json!({
            "t": unix_now(),
            "event": "checkpoint",
            "next_job": next_id,
            "open": open,
        }))?;
        let now = unix_now();
        let n_carried = carried.len();
        for record in carried {
            let id = record["id"].clone();
            self.append(&json!({
                "t": now, "event": "ended", "job": id, "record": record, "carried": true,
            }))?;
        }
        if let Some(index) = self.index.take() {
            self.index = Some(sorted_by_end(index));
        }
        self.rotate_at = self.size + self.max_size;
        self.sync()?;
        tracing::info!(path = %path.display(), carried = n_carried, "journal rotated");
        Ok(())
    }

    /// The ended records a rotation must carry into the new file: for each
    /// user, the last of their [`HISTORY_PER_USER`] jobs that are only in
    /// the older file (which the rotation replaces). Within half the
    /// maximum size, taken a job of each user in turn, most recent first,
    /// so that a user with many carries none of the others' out; returned
    /// in order of end.
    fn records_to_carry(&mut self) -> Vec<Json> {
        use std::collections::HashMap;
        let budget = self.max_size / 2;
        let index = self.index();
        let mut kept: HashMap<Option<u32>, usize> = HashMap::new();
        for entry in index.iter().filter(|entry| !entry.rotated) {
            *kept.entry(entry.uid).or_default() += 1;
        }
        // Per user, most recent first, the records to carry.
        let mut wanted: HashMap<Option<u32>, Vec<(usize, EndedAt)>> = HashMap::new();
        for (position, entry) in index.iter().enumerate().rev() {
            if !entry.rotated {
                continue;
            }
            let room = HISTORY_PER_USER.saturating_sub(kept.get(&entry.uid).copied().unwrap_or(0));
            let list = wanted.entry(entry.uid).or_default();
            if list.len() < room {
                list.push((position, *entry));
            }
        }
        let mut users: Vec<_> = wanted.into_values().collect();
        users.sort_by_key(|list| list.first().map(|(position, _)| usize::MAX - position));
        let mut chosen = Vec::new();
        let mut bytes = 0u64;
        let deepest = users.iter().map(Vec::len).max().unwrap_or(0);
        'depth: for depth in 0..deepest {
            for list in &users {
                let Some((position, entry)) = list.get(depth) else {
                    continue;
                };
                if bytes + u64::from(entry.len) > budget {
                    break 'depth;
                }
                bytes += u64::from(entry.len);
                chosen.push((*position, *entry));
            }
        }
        chosen.sort_by_key(|(position, _)| *position);
        let chosen: Vec<EndedAt> = chosen.into_iter().map(|(_, entry)| entry).collect();
        self.read_records(&chosen)
    }

    /// Appends the core's job events, stamped with the wall-clock time.
    pub fn record(&mut self, events: Vec<JobEvent>) -> io::Result<()> {
        let now = unix_now();
        for event in events {
            let record = match event {
                JobEvent::Admitted {
                    job,
                    waited,
                    record,
                } => {
                    // Written straight from the fields: building the
                    // `Json` tree first (a map whose keys are hashed, then
                    // walked and freed) cost a third of an admission. The
                    // line is the same, byte for byte.
                    let line = admitted_line(now, job.0, waited, &record)?;
                    if line.len() > MAX_RECORD {
                        let mut parsed: Json =
                            serde_json::from_slice(&line).map_err(io::Error::other)?;
                        fit_record(&mut parsed, line.len());
                        self.append(&parsed)?;
                        continue;
                    }
                    let mut line = line;
                    line.push(b'\n');
                    self.append_raw(&line)?;
                    continue;
                }
                JobEvent::Submitted {
                    first,
                    last,
                    record,
                } => json!({
                    "t": now, "event": "submitted", "job": first.0, "last": last.0,
                    "record": fields_json(&record),
                }),
                JobEvent::Started(job) => json!({"t": now, "event": "started", "job": job.0}),
                JobEvent::Moved { job, from, to, by } => json!({
                    "t": now, "event": "moved", "job": job.0, "from": from, "to": to, "by": by,
                }),
                JobEvent::Held { job, by } => {
                    json!({"t": now, "event": "held", "job": job.0, "by": by})
                }
                JobEvent::Released(job) => json!({"t": now, "event": "released", "job": job.0}),
                JobEvent::Ended { job, record, early } => {
                    let ended = now - early.as_secs_f64();
                    if let Some(line) = ended_line(now, job.0, ended, &record)? {
                        self.append_ended(line)?;
                        continue;
                    }
                    let mut record = fields_json(&record);
                    if let Json::Object(map) = &mut record {
                        map.insert("ended".into(), json!(now - early.as_secs_f64()));
                    }
                    self.remember(&record);
                    self.unsynced = true;
                    json!({"t": now, "event": "ended", "job": job.0, "record": record})
                }
            };
            self.append(&record)?;
        }
        Ok(())
    }

    /// Records every job an earlier daemon left unfinished as ended
    /// ("lost: scored was killed"), and syncs.
    pub fn record_lost(&mut self, open: &BTreeMap<u64, Json>) -> io::Result<()> {
        let now = unix_now();
        for (id, admitted) in open {
            let mut record = admitted.clone();
            if let Json::Object(map) = &mut record {
                map.insert("state".into(), json!("killed"));
                map.insert("exit".into(), Json::Null);
                map.insert("reason".into(), json!(LOST_REASON));
                map.insert("ended".into(), json!(now));
            }
            self.remember(&record);
            self.append(&json!({"t": now, "event": "ended", "job": id, "record": record}))?;
        }
        self.sync()
    }

    fn sync(&mut self) -> io::Result<()> {
        self.unsynced = false;
        self.last_sync = Instant::now();
        self.file.sync_data()
    }

    /// Syncs the file if a job's end was written since the last sync, and
    /// the last sync is at least [`SYNC_INTERVAL`] old; otherwise the sync
    /// waits for [`Journal::sync_deadline`].
    pub fn sync_if_needed(&mut self) -> io::Result<()> {
        if self
            .sync_deadline()
            .is_some_and(|due| due <= Instant::now())
        {
            self.sync()?;
        }
        Ok(())
    }

    /// When a job's end written since the last sync must be synced.
    pub fn sync_deadline(&self) -> Option<Instant> {
        self.unsynced.then(|| self.last_sync + SYNC_INTERVAL)
    }

    /// The file, when a job's end was written to it since the last sync,
    /// for a sync made elsewhere (then [`Journal::synced`]).
    pub fn unsynced_file(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.unsynced.then(|| self.file.as_fd())
    }

    /// What was written is being synced elsewhere (by the closer, see
    /// `crate::closer::sync`): the next sync is due [`SYNC_INTERVAL`]
    /// after the next end.
    pub fn synced(&mut self) {
        self.unsynced = false;
        self.last_sync = Instant::now();
    }

    fn remember(&mut self, record: &Json) {
        self.keep_recent(Recent::of(record));
    }

    fn keep_recent(&mut self, recent: Recent) {
        if self.recent.len() == HISTORY {
            self.recent.pop_front();
        }
        self.recent.push_back(recent);
    }

    /// The ended record of job `id`, if the journal still has it.
    pub fn ended(&mut self, id: u64) -> Option<Json> {
        if let Some(recent) = self.recent.iter().rev().find(|r| r.id == Some(id)) {
            return Some(recent.parse());
        }
        let entry = *self.index().iter().rev().find(|entry| entry.id == id)?;
        self.read_records(&[entry]).pop()
    }

    /// Rows of `jobs all` for the recently finished jobs that `keep`
    /// keeps, oldest first.
    pub fn recent_rows(
        &self,
        table: &mut Table,
        may_see: &dyn Fn(&Json) -> bool,
        keep: &dyn Fn(&Json) -> bool,
    ) {
        for recent in &self.recent {
            let mut record = recent.parse();
            if !keep(&record) {
                continue;
            }
            if !may_see(&record) {
                redact(&mut record);
            }
            table.push(
                table
                    .columns
                    .iter()
                    .map(|column| value_of(column, &record[column.as_str()]))
                    .collect(),
            );
        }
    }

    /// The index of ended records, built from the files if this image has
    /// none yet (after an in-place restart).
    fn index(&mut self) -> &[EndedAt] {
        let dir = &self.dir;
        self.index.get_or_insert_with(|| {
            let mut index = Vec::new();
            for name in [ROTATED, FILE] {
                let result = read_file(&dir.join(name), &mut |offset, line| {
                    if let Ok(entry) = serde_json::from_str::<Json>(line) {
                        index.extend(EndedAt::of(&entry, name == ROTATED, offset, line.len()));
                    }
                });
                if let Err(error) = result {
                    tracing::warn!(file = name, %error, "cannot read the journal");
                }
            }
            sorted_by_end(index)
        })
    }

    /// The records of the indexed lines, in the order given; a line that
    /// cannot be read back is left out with a warning.
    fn read_records(&self, entries: &[EndedAt]) -> Vec<Json> {
        let mut files: [Option<File>; 2] = [None, None];
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            let name = if entry.rotated { ROTATED } else { FILE };
            let slot = &mut files[usize::from(entry.rotated)];
            if slot.is_none() {
                match File::open(self.dir.join(name)) {
                    Ok(file) => *slot = Some(file),
                    Err(error) => {
                        tracing::warn!(file = name, %error, "cannot read the journal");
                        continue;
                    }
                }
            }
            let Some(file) = slot else { continue };
            let mut line = vec![0u8; entry.len as usize];
            let read = file
                .read_exact_at(&mut line, entry.offset)
                .and_then(|()| serde_json::from_slice::<Json>(&line).map_err(io::Error::other));
            match read {
                Ok(mut found) if found["event"] == "ended" && found["job"] == json!(entry.id) => {
                    out.push(found["record"].take());
                }
                Ok(_) => tracing::warn!(
                    file = name,
                    offset = entry.offset,
                    "the journal changed under scored"
                ),
                Err(error) => {
                    tracing::warn!(file = name, offset = entry.offset, %error, "cannot read the journal")
                }
            }
        }
        out
    }

    /// `history`: the last [`HISTORY_LIMIT`] ended jobs of `uid` (if given)
    /// that ended at or after `since`, oldest first, and how many earlier
    /// ones match but are left out.
    pub fn history(&mut self, uid: Option<u32>, since: Option<Since>) -> (Vec<Json>, usize) {
        let from = match since {
            None => f64::MIN,
            Some(Since::Unix(secs)) => secs as f64,
            Some(Since::Ago(ago)) => unix_now() - ago.as_secs_f64(),
        };
        // The index is in order of end (a rotation's carried records
        // sorted in among the older file's).
        let mut matching: Vec<EndedAt> = self
            .index()
            .iter()
            .filter(|entry| entry.ended >= from && uid.is_none_or(|uid| entry.uid == Some(uid)))
            .copied()
            .collect();
        let mut left_out = matching.len().saturating_sub(HISTORY_LIMIT);
        matching.drain(..left_out);
        // At most HISTORY_BYTES read from the files per request.
        let mut bytes = 0u64;
        let fit = matching
            .iter()
            .rev()
            .take_while(|entry| {
                bytes += u64::from(entry.len);
                bytes <= HISTORY_BYTES
            })
            .count();
        let cut = matching.len() - fit;
        matching.drain(..cut);
        left_out += cut;
        (self.read_records(&matching), left_out)
    }
}

impl Drop for Journal {
    /// A daemon that exits syncs the ends it wrote within the last interval.
    fn drop(&mut self) {
        if self.unsynced {
            if let Err(error) = self.sync() {
                tracing::error!(%error, "cannot sync the job journal");
            }
        }
    }
}

/// Folds one journal line into what recovery needs.
fn absorb(entry: &Json, recovered: &mut Recovered, recent: &mut VecDeque<Recent>) {
    let id = entry["job"].as_u64();
    if let Some(id) = id {
        recovered.last_id = recovered.last_id.max(id);
    }
    match entry["event"].as_str() {
        Some("checkpoint") => {
            if let Some(next) = entry["next_job"].as_u64() {
                recovered.last_id = recovered.last_id.max(next.saturating_sub(1));
            }
            for record in entry["open"].as_array().into_iter().flatten() {
                if let Some(id) = record["id"].as_u64() {
                    recovered.last_id = recovered.last_id.max(id);
                    recovered.open.insert(id, record.clone());
                }
            }
        }
        Some("admitted") => {
            if let Some(id) = id {
                recovered.open.insert(id, entry["record"].clone());
            }
        }
        // A submission taken into the backlog: its ids are handed out, and
        // it is unfinished until its first job ends.
        Some("submitted") => {
            if let Some(last) = entry["last"].as_u64() {
                recovered.last_id = recovered.last_id.max(last);
            }
            if let Some(id) = id {
                recovered.open.insert(id, entry["record"].clone());
            }
        }
        Some("moved") => {
            if let (Some(id), Some(to)) = (id, entry["to"].as_u64()) {
                if let Some(Json::Object(record)) = recovered.open.get_mut(&id) {
                    record.insert("queue".into(), json!(to));
                    if let Some(Json::Array(queues)) = record.get_mut("queues") {
                        queues.push(json!(to));
                    }
                }
            }
        }
        Some("ended") => {
            if let Some(id) = id {
                recovered.open.remove(&id);
            }
            if entry["carried"] == true {
                // Kept for `history` across a rotation; it ended long ago.
                return;
            }
            if recent.len() == HISTORY {
                recent.pop_front();
            }
            recent.push_back(Recent::of(&entry["record"]));
        }
        _ => {}
    }
}

/// The index ordered by end time (stable: file order among equal ones).
fn sorted_by_end(mut index: Vec<EndedAt>) -> Vec<EndedAt> {
    index.sort_by(|a, b| a.ended.total_cmp(&b.ended));
    index
}

/// Makes a journal line of `len` bytes fit in [`MAX_RECORD`]: every string
/// of the job's record is cut to [`CUT_STRING`] bytes with a marker, then,
/// while it is still too long, its largest fields are replaced by a note.
fn fit_record(line: &mut Json, len: usize) {
    fn cut_strings(value: &mut Json) {
        match value {
            Json::String(text) if text.len() > CUT_STRING => {
                *text = scored_core::core::cap_text(std::mem::take(text), CUT_STRING);
            }
            Json::Array(items) => items.iter_mut().for_each(cut_strings),
            Json::Object(map) => map.values_mut().for_each(cut_strings),
            _ => {}
        }
    }
    tracing::warn!(
        bytes = len,
        max = MAX_RECORD,
        "a journal record over the budget is cut"
    );
    cut_strings(line);
    let size = |value: &Json| serde_json::to_vec(value).map_or(0, |text| text.len());
    while size(line) > MAX_RECORD {
        let fields = match line {
            Json::Object(map) if matches!(map.get("record"), Some(Json::Object(_))) => {
                match map.get_mut("record") {
                    Some(Json::Object(fields)) => fields,
                    _ => return,
                }
            }
            Json::Object(map) => map,
            _ => return,
        };
        let Some((key, bytes)) = fields
            .iter()
            .map(|(key, value)| (key.clone(), size(value)))
            .filter(|(_, bytes)| *bytes > 64)
            .max_by_key(|(_, bytes)| *bytes)
        else {
            return;
        };
        fields.insert(
            key,
            json!(format!(
                "(cut: {bytes} bytes over the journal's record budget)"
            )),
        );
    }
}

/// Opens the journal file at `path` for appending (created 0600, never
/// through a symbolic link) and returns it with its size.
fn open_for_append(path: &Path) -> io::Result<(File, u64)> {
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|error| io::Error::new(error.kind(), format!("{}: {error}", path.display())))?;
    let size = file.metadata()?.len();
    Ok((file, size))
}

fn ends_with_newline(path: &Path) -> io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = File::open(path)?;
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

/// Calls `each` with the offset and text of every line of a file; a
/// missing file has none.
fn read_file(path: &Path, each: &mut dyn FnMut(u64, &str)) -> io::Result<()> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => {
            return Err(io::Error::new(
                error.kind(),
                format!("{}: {error}", path.display()),
            ))
        }
    };
    let mut offset = 0u64;
    for line in BufReader::new(file).split(b'\n') {
        let line = line?;
        match std::str::from_utf8(&line) {
            Ok(text) if !text.trim().is_empty() => each(offset, text),
            Ok(_) => {}
            Err(_) => each(offset, ""),
        }
        offset += line.len() as u64 + 1;
    }
    Ok(())
}

mod records;
#[cfg(test)]
mod tests;

use records::{admitted_line, ended_line, fields_json, value_of, EndedLine};
pub use records::{history_table, left_out_note, record_fields, redact};
