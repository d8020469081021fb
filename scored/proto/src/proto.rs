//! The wire protocol between scored and its clients (scrun, sc_console).
//!
//! **API boundary.** A frame is a 4-byte big-endian length followed by that
//! many bytes of JSON. Requests (client to daemon) are at most
//! [`MAX_REQUEST`] bytes and replies at most [`MAX_REPLY`]; a longer length
//! is a protocol error, not an allocation. scrun attaches its standard
//! input, output and error to the frame carrying its `Submit` with
//! SCM_RIGHTS. Identity never travels here: the daemon takes it from the
//! socket's peer credentials.
//!
//! This module only encodes and decodes bytes; it performs no I/O.
#![forbid(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use serde::{Deserialize, Serialize};

use crate::batch::BatchOptions;

mod decode;

/// The protocol revision; a client and daemon of different revisions refuse each other.
pub const VERSION: u32 = 1;
/// The largest request frame a client may send (environment and arguments included).
pub const MAX_REQUEST: usize = 1 << 20;
/// The largest reply frame the daemon sends.
pub const MAX_REPLY: usize = 64 << 20;
/// The most processes one job may have in a stage, in total over its hosts.
pub const MAX_PROCS: u64 = 65_536;
/// The most stages (`::` or `==`) one job may have.
pub const MAX_STAGES: usize = 64;
/// How many standard descriptors a `Submit` carries at most: stdin, stdout
/// and stderr, less those the caller had closed ([`Submit::closed_stdio`]).
pub const SUBMIT_FDS: usize = 3;
/// The most descriptors above 2 one submission may pass on to the job
/// ([`Submit::fds`]): far more than process substitutions, redirections
/// and a make jobserver need, and few enough that a client cannot make the
/// daemon hold many descriptors per connection.
pub const MAX_INHERITED_FDS: usize = 64;
/// The most PMI descriptors one submission may carry ([`Submit::pmi_ranks`]
/// times its stages): one per rank of each stage that scrun serves with
/// its process-management interface. With the standard and inherited
/// descriptors, one message still holds them all (the kernel passes at
/// most 253).
pub const MAX_PMI_FDS: usize = 128;
/// The highest descriptor number a submission may name (the largest
/// `/proc/sys/fs/nr_open` a kernel accepts by default).
pub const MAX_FD_NUMBER: i32 = 1 << 20;
/// The signals a client may have delivered to its job ([`Request::Signal`]):
/// those a terminal or a shell sends to a foreground program (SIGHUP,
/// SIGINT, SIGQUIT, SIGTERM, SIGWINCH) and SIGPIPE, which scrun passes on
/// when the reader of its output went away.
pub const PASSED_SIGNALS: [i32; 6] = [1, 2, 3, 13, 15, 28];
/// What a refused reattach says when its job ended before it started
/// (an interactive job that waited for others when its daemon was
/// killed): scrun reports it as a rejected job, not as a daemon that
/// did not come back.
pub const ENDED_BEFORE_START: &str = "it ended before it started";

/// Bytes that travel as a JSON string when they are UTF-8, and as an array
/// of numbers otherwise, so that arguments and environment reach the job
/// unchanged. Decoded by hand (`decode.rs`): the derived untagged
/// decoder copies each value aside before trying its forms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum WireBytes {
    /// UTF-8 text.
    Text(String),
    /// Anything else.
    Raw(Vec<u8>),
}

impl WireBytes {
    /// Wraps an OS string.
    pub fn from_os(value: &OsStr) -> WireBytes {
        match value.to_str() {
            Some(text) => WireBytes::Text(text.to_string()),
            None => WireBytes::Raw(value.as_bytes().to_vec()),
        }
    }

    /// The bytes, whichever form they travelled in.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            WireBytes::Text(text) => text.as_bytes(),
            WireBytes::Raw(bytes) => bytes,
        }
    }

    /// Converts to an OS string.
    pub fn to_os(&self) -> OsString {
        OsString::from_vec(self.as_bytes().to_vec())
    }

    /// Converts to an OS string, reusing the bytes.
    pub fn into_os(self) -> OsString {
        match self {
            WireBytes::Text(text) => OsString::from(text),
            WireBytes::Raw(bytes) => OsString::from_vec(bytes),
        }
    }

    /// A lossy text form for messages and listings.
    pub fn lossy(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

impl AsRef<[u8]> for WireBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl From<&str> for WireBytes {
    fn from(value: &str) -> WireBytes {
        WireBytes::Text(value.to_string())
    }
}

/// How many processes a job asks for, and how they map onto hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcRequest {
    /// `nodes=N`: N processes packed `cores` to a host.
    Nodes(u32),
    /// `nodes=NxM`: N hosts with M processes each.
    Grid {
        /// Number of hosts.
        hosts: u32,
        /// Processes on each host.
        per_host: u32,
    },
    /// `hosts=H`: H hosts with `cores` processes each.
    Hosts(u32),
}

impl ProcRequest {
    /// Processes on each host for a cluster whose hosts take `cores`
    /// processes, or `None` when the request cannot be laid out there
    /// (it asks for none, which the submission validator refuses).
    pub fn layout(self, cores: u32) -> Option<Vec<u32>> {
        let cores = cores.max(1);
        match self {
            ProcRequest::Nodes(0) | ProcRequest::Hosts(0) => None,
            ProcRequest::Grid { hosts, per_host } if hosts == 0 || per_host == 0 => None,
            ProcRequest::Nodes(n) => {
                let full = n / cores;
                let rest = n % cores;
                let mut layout = vec![cores; full as usize];
                if rest > 0 {
                    layout.push(rest);
                }
                Some(layout)
            }
            ProcRequest::Grid { hosts, per_host } => Some(vec![per_host; hosts as usize]),
            ProcRequest::Hosts(hosts) => Some(vec![cores; hosts as usize]),
        }
    }

    /// The request as scrun spells it, for messages.
    pub fn describe(self) -> String {
        match self {
            ProcRequest::Nodes(n) => format!("nodes={n}"),
            ProcRequest::Grid { hosts, per_host } => format!("nodes={hosts}x{per_host}"),
            ProcRequest::Hosts(h) => format!("hosts={h}"),
        }
    }
}

/// How the stages of a job follow each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Joiner {
    /// `::`: stages run one after another.
    Sequence,
    /// `==`: stages run together, joined rank by rank with pipes.
    Pipe,
}

/// The scrun options the daemon needs to know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobOptions {
    /// Processes and their placement.
    pub procs: ProcRequest,
    /// Queue number asked for; `None` means the default queue.
    pub priority: Option<u32>,
    /// Wait for admission instead of being rejected when resources are short.
    pub wait: bool,
    /// The user's explicit memory limit per host, in bytes.
    pub memory: Option<u64>,
    /// The user's explicit disk limit, in bytes.
    pub disk: Option<u64>,
    /// The submitted stdin is a pseudo-terminal that scrun allocated
    /// (`-pty`): the rank reading it takes it as its controlling terminal.
    #[serde(default)]
    pub pty: bool,
    /// The job's run-time estimate and limit (`-time=`), in milliseconds.
    /// Absent from older clients.
    #[serde(default)]
    pub time_ms: Option<u64>,
    /// Batch submission, name, output files, dependencies and arrays
    /// (`crate::batch`). Absent from older clients.
    #[serde(default)]
    pub batch: BatchOptions,
}

/// A job submission from scrun.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submit {
    /// The programs: one argument vector per stage.
    pub stages: Vec<Vec<WireBytes>>,
    /// How stages follow each other.
    pub joiner: Joiner,
    /// Options that shape admission and placement.
    pub options: JobOptions,
    /// The caller's environment, in order.
    pub env: Vec<(WireBytes, WireBytes)>,
    /// The caller's working directory.
    pub cwd: WireBytes,
    /// Signals the caller had ignored at its start (as a shell passes them
    /// on to a program); they stay ignored in the job, every other signal
    /// is at its default disposition.
    #[serde(default)]
    pub ignored_signals: Vec<i32>,
    /// The caller's resource limits, applied in the job after the change
    /// of credentials. Limits not sent keep the daemon's start-up values.
    #[serde(default)]
    pub rlimits: Vec<WireRlimit>,
    /// The caller's file mode creation mask; none leaves the daemon's.
    #[serde(default)]
    pub umask: Option<u32>,
    /// The caller's nice value (-20 to 19), applied after the change of
    /// credentials as far as the kernel lets the user; none leaves 0.
    #[serde(default)]
    pub nice: Option<i32>,
    /// The caller's I/O priority as ioprio_get(2) gives it (class in bits
    /// 13 to 15, level below), applied as the nice value is; none leaves
    /// the default.
    #[serde(default)]
    pub ioprio: Option<u32>,
    /// Which of the standard descriptors (0, 1, 2) the caller had closed:
    /// the frame carries none for them, and the job's processes get them
    /// closed. Empty with `pty`.
    #[serde(default)]
    pub closed_stdio: Vec<i32>,
    /// The numbers of the descriptors above 2 that the caller had open and
    /// not close-on-exec, in increasing order; rank 0 gets each at its
    /// number (see [`Submit::descriptor_count`] for where they travel).
    #[serde(default)]
    pub fds: Vec<i32>,
    /// How many ranks of each stage get a descriptor connected to scrun's
    /// PMI server (`scrun -mpi=`): 0, or the stage's process count. Those
    /// descriptors travel last, stage by stage in rank order; rank `r` of
    /// stage `s` gets the one at `s * pmi_ranks + r`.
    #[serde(default)]
    pub pmi_ranks: u32,
    /// The PMIx namespace of the job's ranks (`scrun -mpi=pmix`), none
    /// without PMIx: each rank of stage `s` (from 0) gets
    /// `PMIX_NAMESPACE=NAME.s` and `PMIX_RANK` its rank, beside the
    /// variables of scrun's PMIx server that the environment carries.
    /// A daemon that does not know the field leaves them out, and the
    /// ranks then find no PMIx server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmix_namespace: Option<String>,
    /// The ranks reach scrun's PMI-1 server at the loopback port the
    /// environment names (`PMI_PORT`), not through descriptors: for jobs
    /// whose rank count is known only once placed (`-hosts=`) or is over
    /// [`MAX_PMI_FDS`]. Rank `r` of stage `s` of a stage size `n` gets
    /// `PMI_ID=s*n+r` (the number it gives the server), `PMI_RANK=r` and
    /// `PMI_SIZE=n`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pmi_port: bool,
}

impl Submit {
    /// How many descriptors the frame carrying this submission holds, in
    /// this order: the standard descriptors that are not closed (stdin,
    /// stdout, stderr; with `pty`, the terminal three times), then the
    /// descriptors of [`Submit::fds`], in their order, then the PMI
    /// descriptors ([`Submit::pmi_fd_count`]).
    pub fn descriptor_count(&self) -> usize {
        if self.options.batch.detach {
            // A batch job has no client: stdin is /dev/null, stdout and
            // stderr its files, and nothing is inherited.
            return 0;
        }
        let closed = [0, 1, 2]
            .iter()
            .filter(|fd| self.closed_stdio.contains(fd))
            .count();
        SUBMIT_FDS - closed + self.fds.len() + self.pmi_fd_count()
    }

    /// How many PMI descriptors the frame carries: [`Submit::pmi_ranks`]
    /// for each stage (saturating: the validator refuses more than
    /// [`MAX_PMI_FDS`]).
    pub fn pmi_fd_count(&self) -> usize {
        (self.pmi_ranks as usize).saturating_mul(self.stages.len())
    }
}

/// One resource limit of the caller (getrlimit(2)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRlimit {
    /// The resource, by its prlimit(1) name: `nofile`, `stack`, `as`, ...
    /// (see `inherit::RLIMIT_NAMES`).
    pub resource: String,
    /// The soft limit; `null` is unlimited.
    pub soft: Option<u64>,
    /// The hard limit; `null` is unlimited.
    pub hard: Option<u64>,
}

/// A request from a client to the daemon.
// A connection holds one request at a time, decoded and taken apart at
// once; boxing the submission would save nothing worth its indirection.
#[allow(clippy::large_enum_variant)]
// Decoded by hand (`decode.rs`): the derived decoder of an internally
// tagged enum copies the whole message aside before it reads the tag.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Submit a job; the frame carries the descriptors that
    /// [`Submit::descriptor_count`] lays out.
    Submit {
        /// Protocol revision of the client.
        version: u32,
        /// What to run, and how (checked again by the daemon).
        submit: Submit,
    },
    /// Run one console command line.
    Console {
        /// Protocol revision of the client.
        version: u32,
        /// The command line, in the console language.
        line: String,
        /// Ask for the JSON form of the reply as well.
        json: bool,
    },
    /// scrun was suspended (SIGTSTP): hold its job.
    Hold,
    /// scrun was continued: release its job.
    Release,
    /// scrun was interrupted: kill its job (SIGTERM, then SIGKILL after a grace).
    Kill,
    /// scrun's terminal changed size: send SIGWINCH to its job. Only the
    /// connection that submitted the job may ask, so only its owner can.
    Winch,
    /// scrun received a signal that a terminal or a shell sends to a
    /// foreground program (one of [`PASSED_SIGNALS`]): deliver it to every
    /// process of its job. Only the connection that submitted the job may
    /// ask; the daemon takes it once its `Started` says so.
    Signal {
        /// The signal's number.
        signal: i32,
    },
    /// scrun lost its daemon and asks the one that took over for its job
    /// back, on a new connection: only the job's owner can have it. A job
    /// that has not started needs its descriptors again (the killed daemon
    /// held them), which the frame carries as a submission's
    /// ([`Reattach::descriptor_count`]); a started job's processes have
    /// theirs.
    Reattach {
        /// Protocol revision of the client.
        version: u32,
        /// What scrun asks for.
        reattach: Reattach,
    },
}

/// A [`Request::Reattach`]: the job, and the layout of the descriptors
/// the frame carries (none for a job that has started).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reattach {
    /// The job scrun submitted.
    pub job: u64,
    /// The frame carries the job's descriptors, laid out as its
    /// submission's were (`Submit::descriptor_count`).
    pub descriptors: bool,
    /// The standard descriptors its scrun has closed.
    #[serde(default)]
    pub closed_stdio: Vec<i32>,
    /// The numbers of the other descriptors it passes, as `Submit::fds`.
    #[serde(default)]
    pub fds: Vec<i32>,
    /// PMI descriptors per stage, as `Submit::pmi_ranks`.
    #[serde(default)]
    pub pmi_ranks: u32,
    /// The job's stages (for the PMI descriptors' count).
    #[serde(default)]
    pub stages: u32,
    /// The job's stdin is a terminal its first rank takes (`-pty`).
    #[serde(default)]
    pub pty: bool,
    /// The PMIx namespace of its ranks, as `Submit::pmix_namespace`.
    #[serde(default)]
    pub pmix_namespace: Option<String>,
    /// Its ranks reach scrun's PMI server by port, as `Submit::pmi_port`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pmi_port: bool,
}

impl Reattach {
    /// Checks the layout as a submission's is checked: the standard
    /// descriptors named closed, the numbers passed, and the PMI ones in
    /// bounds; the text says what is wrong.
    pub fn check(&self) -> Result<(), String> {
        crate::inherit::check_descriptors(&self.closed_stdio, &self.fds, self.pty)
            .map_err(|error| error.to_string())?;
        if self.stages as usize > MAX_STAGES {
            return Err(format!(
                "{} stages, over the limit of {MAX_STAGES}",
                self.stages
            ));
        }
        let pmi = (self.pmi_ranks as usize).saturating_mul(self.stages as usize);
        if pmi > MAX_PMI_FDS {
            return Err(format!(
                "{pmi} PMI descriptors, over the limit of {MAX_PMI_FDS}"
            ));
        }
        crate::submit::check_pmix_namespace(self.pmix_namespace.as_deref())
            .map_err(|error| error.to_string())?;
        Ok(())
    }

    /// How many descriptors the frame carries, in a submission's order.
    pub fn descriptor_count(&self) -> usize {
        if !self.descriptors {
            return 0;
        }
        let closed = [0, 1, 2]
            .iter()
            .filter(|fd| self.closed_stdio.contains(fd))
            .count();
        SUBMIT_FDS - closed
            + self.fds.len()
            + (self.pmi_ranks as usize).saturating_mul(self.stages as usize)
    }
}

/// Why a submission was refused; scrun maps this to its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectKind {
    /// The request itself is wrong (bad queue number, empty program, ...).
    Invalid,
    /// No cluster could ever hold the job.
    TooBig,
    /// The queue is disabled.
    QueueDisabled,
    /// The user may not submit to the queue.
    Permission,
    /// Resources are short now; `wait` would have waited.
    Resources,
    /// The daemon is shutting down.
    ShuttingDown,
}

/// How a job ended, as scrun needs to report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndKind {
    /// Every process ran to its end; the status is that of the first failing rank.
    Exited,
    /// Killed by a limit (CPU time, memory, disk).
    Limit,
    /// Killed by an operator, its owner, or scrun's own interrupt.
    Killed,
    /// Killed because the daemon shut down.
    Shutdown,
    /// A process could not be started.
    LaunchFailed,
}

/// The accounting summary of a job (`scrun -stat`, `job ID`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Accounting {
    /// Queues the job passed through, in order.
    pub queues: Vec<u32>,
    /// Seconds from submission to admission plus admission to first run.
    pub wait_secs: f64,
    /// Seconds from first run to end.
    pub wall_secs: f64,
    /// CPU seconds (user + system) of all processes, finished descendants included.
    pub cpu_secs: f64,
    /// Seconds spent stopped by the scheduler or held.
    pub stopped_secs: f64,
    /// Times the job was switched out and in.
    pub switches: u64,
    /// Peak memory in bytes per host, by host name.
    pub peak_memory: Vec<(String, u64)>,
    /// Peak disk use in bytes.
    pub peak_disk: u64,
}

/// A message from the daemon to a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// Resources are short; the job waits for admission (the `wait` option).
    Waiting {
        /// What is short.
        reason: String,
    },
    /// The submission has its job id(s) but the job is not admitted yet
    /// (it waits for the jobs it depends on), or it runs without a client
    /// (`-batch`): then this is the last message, whatever became of it.
    Accepted {
        /// The job's id; an array's first element's.
        job: u64,
        /// How many jobs the submission made (the elements of an array).
        count: u32,
        /// Why it is not admitted yet, if it is not.
        #[serde(default)]
        waits: Option<String>,
    },
    /// The job was admitted.
    Admitted {
        /// The id the job was given.
        job: u64,
        /// The queue it went to (its priority).
        queue: u32,
        /// The cluster it runs on.
        cluster: String,
        /// Its hosts, in rank order.
        hosts: Vec<String>,
        /// The processes of each of its stages, as placed: the size of its
        /// MPI worlds, which scrun does not know before for `hosts=H`. An
        /// older daemon leaves it out (0).
        #[serde(default)]
        ranks: u32,
    },
    /// The submission was refused.
    Rejected {
        /// What was asked and what exists.
        reason: String,
        /// Why, for scrun's exit status.
        kind: RejectKind,
    },
    /// The job's processes are created (its first scheduling). Sent
    /// before they exist, so that nothing they do (their output, a signal
    /// sent to scrun in answer to it) reaches the client before it.
    Started {
        /// The job whose processes now exist.
        job: u64,
        /// The daemon takes [`Request::Winch`] for this job. An older
        /// daemon leaves it out (false), and scrun then never sends a
        /// request that daemon could not read.
        #[serde(default)]
        winch: bool,
        /// The daemon takes [`Request::Signal`] for this job; an older
        /// daemon leaves it out (false), and scrun then asks it to kill
        /// the job instead.
        #[serde(default)]
        signals: bool,
    },
    /// scrun has its job again (answers `Reattach`); what follows is as
    /// for a submission's connection (`Started`, `Held`, `Ended`).
    Reattached {
        /// The job.
        job: u64,
        /// Its processes exist, or did: it has started.
        started: bool,
        /// Its owner holds it (scrun was suspended).
        held: bool,
        /// The processes of each of its stages, as placed (as `Admitted`
        /// says, which a scrun whose daemon died may not have had): what
        /// scrun's PMI of a `-hosts=H` job waits for. 0 from a daemon
        /// that does not say.
        #[serde(default)]
        ranks: u32,
    },
    /// The job is held (acknowledges `Hold`).
    Held {
        /// The job now held.
        job: u64,
    },
    /// The job ended; this is the last message for a scrun connection.
    Ended {
        /// The job that ended.
        job: u64,
        /// How it ended.
        kind: EndKind,
        /// The exit status scrun should pass on (0-255).
        status: i32,
        /// A sentence for the user, such as `killed: memory 80M over the limit of 64M on host0`.
        reason: String,
        /// The signal that ended the process whose status is the job's,
        /// if a signal did (scrun names it).
        #[serde(default)]
        signal: Option<i32>,
        /// What it waited, ran and used.
        accounting: Accounting,
    },
    /// The reply to a console line.
    Console {
        /// Whether the command succeeded.
        ok: bool,
        /// The text form (tables, `key: value` lines, or `error: ...`).
        text: String,
        /// The JSON form, when asked for.
        json: Option<serde_json::Value>,
    },
    /// The request could not be understood; the daemon closes the connection.
    Error {
        /// What was wrong.
        message: String,
    },
}

/// A framing or decoding error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The length prefix announces more than the limit.
    TooLarge {
        /// Announced length.
        len: usize,
        /// The most this side accepts.
        max: usize,
    },
    /// The payload is not a valid message.
    Malformed(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge { len, max } => {
                write!(f, "message of {len} bytes exceeds the limit of {max} bytes")
            }
            FrameError::Malformed(why) => write!(f, "malformed message: {why}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Encodes a message as one frame.
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    // Serializing these plain types to a Vec cannot fail: every map key is a
    // string and no type has a fallible Serialize impl.
    let body = serde_json::to_vec(message).expect("protocol types always serialize");
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// Takes one complete frame off the front of `buffer`, if there is one.
///
/// Returns `Ok(None)` when more bytes are needed. An oversized length is an
/// error as soon as the prefix has arrived, before anything is buffered.
/// Each call moves the rest of the buffer to the front: a reader that may
/// hold many frames at once keeps them in a [`FrameBuffer`] instead.
pub fn decode<T: for<'de> Deserialize<'de>>(
    buffer: &mut Vec<u8>,
    max: usize,
) -> Result<Option<T>, FrameError> {
    let Some((message, used)) = decode_front(buffer, max)? else {
        return Ok(None);
    };
    buffer.drain(..used);
    message.map(Some)
}

/// Decodes the frame at the front of `bytes`; returns it, or why it is
/// malformed, with the number of bytes it took (a malformed frame is taken
/// whole), or `None` when more bytes are needed.
#[allow(clippy::type_complexity)]
fn decode_front<T: for<'de> Deserialize<'de>>(
    bytes: &[u8],
    max: usize,
) -> Result<Option<(Result<T, FrameError>, usize)>, FrameError> {
    let Some(len) = frame_len(bytes, max)? else {
        return Ok(None);
    };
    if bytes.len() < 4 + len {
        return Ok(None);
    }
    let message = serde_json::from_slice(&bytes[4..4 + len])
        .map_err(|error| FrameError::Malformed(error.to_string()));
    Ok(Some((message, 4 + len)))
}

/// Received bytes not yet decoded, read from the front without moving the
/// rest: decoding the frames of one large read costs time linear in its
/// size, however many small frames it holds. The consumed front is given
/// back only when the buffer empties or when it is the larger part, so
/// each byte is moved at most once on average.
#[derive(Debug, Default)]
pub struct FrameBuffer {
    bytes: Vec<u8>,
    start: usize,
}

impl FrameBuffer {
    /// An empty buffer.
    pub fn new() -> FrameBuffer {
        FrameBuffer::default()
    }

    /// The bytes received and not yet decoded.
    pub fn pending(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    /// How many bytes are pending.
    pub fn len(&self) -> usize {
        self.bytes.len() - self.start
    }

    /// Whether no byte is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends received bytes.
    pub fn extend(&mut self, chunk: &[u8]) {
        if self.start > 0 && self.start >= self.bytes.len() / 2 {
            self.bytes.drain(..self.start);
            self.start = 0;
        }
        self.bytes.extend_from_slice(chunk);
    }

    /// Takes the next complete frame, if there is one (see [`decode`]).
    pub fn decode<T: for<'de> Deserialize<'de>>(
        &mut self,
        max: usize,
    ) -> Result<Option<T>, FrameError> {
        let Some((message, used)) = decode_front(self.pending(), max)? else {
            return Ok(None);
        };
        self.start += used;
        if self.start == self.bytes.len() {
            self.bytes.clear();
            self.start = 0;
        }
        message.map(Some)
    }

    /// Gives the memory back once nothing is pending.
    pub fn shrink_if_empty(&mut self) {
        if self.is_empty() {
            *self = FrameBuffer::default();
        }
    }
}

/// The payload length announced at the front of `buffer`, once four bytes are there.
pub fn frame_len(buffer: &[u8], max: usize) -> Result<Option<usize>, FrameError> {
    if buffer.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buffer[0], buffer[1], buffer[2], buffer[3]]) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    Ok(Some(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn submit() -> Request {
        Request::Submit {
            version: VERSION,
            submit: Submit {
                stages: vec![vec!["sh".into(), WireBytes::Raw(vec![0xff, b'x'])]],
                joiner: Joiner::Sequence,
                options: JobOptions {
                    procs: ProcRequest::Grid {
                        hosts: 2,
                        per_host: 3,
                    },
                    priority: Some(1),
                    wait: true,
                    memory: Some(1 << 20),
                    disk: None,
                    pty: false,
                    time_ms: None,
                    batch: Default::default(),
                },
                env: vec![("A".into(), "1".into())],
                cwd: "/tmp".into(),
                ignored_signals: vec![1],
                rlimits: vec![WireRlimit {
                    resource: "nofile".into(),
                    soft: Some(64),
                    hard: None,
                }],
                umask: Some(0o22),
                nice: Some(5),
                ioprio: Some(0x6007),
                closed_stdio: vec![1],
                fds: vec![3, 63],
                pmi_ranks: 0,
                pmix_namespace: None,
                pmi_port: false,
            },
        }
    }

    #[test]
    fn round_trip_keeps_non_utf8_bytes() {
        let mut buffer = encode(&submit());
        let decoded: Request = decode(&mut buffer, MAX_REQUEST).unwrap().unwrap();
        assert_eq!(decoded, submit());
        assert!(buffer.is_empty());
    }

    #[test]
    fn a_frame_buffer_decodes_every_frame_of_one_read_in_order() {
        let mut bytes = Vec::new();
        for n in 0..1000u32 {
            bytes.extend(encode(&Request::Console {
                version: VERSION,
                line: format!("job {n}"),
                json: false,
            }));
        }
        let mut frames = FrameBuffer::new();
        // Received in uneven pieces, as a socket delivers them.
        for piece in bytes.chunks(777) {
            frames.extend(piece);
        }
        let mut n = 0u32;
        while let Some(request) = frames.decode::<Request>(MAX_REQUEST).unwrap() {
            let Request::Console { line, .. } = request else {
                panic!("not a console request: {request:?}");
            };
            assert_eq!(line, format!("job {n}"));
            n += 1;
        }
        assert_eq!(n, 1000);
        assert!(frames.is_empty());
    }

    #[test]
    fn a_frame_buffer_keeps_a_partial_frame_across_reads() {
        let frame = encode(&submit());
        let mut frames = FrameBuffer::new();
        let mut first = encode(&Request::Hold);
        first.extend_from_slice(&frame[..10]);
        frames.extend(&first);
        assert_eq!(
            frames.decode::<Request>(MAX_REQUEST),
            Ok(Some(Request::Hold))
        );
        assert_eq!(frames.decode::<Request>(MAX_REQUEST), Ok(None));
        assert_eq!(frames.pending(), &frame[..10]);
        frames.extend(&frame[10..]);
        assert_eq!(frames.decode::<Request>(MAX_REQUEST), Ok(Some(submit())));
        assert!(frames.is_empty());
    }

    #[test]
    fn a_malformed_frame_is_taken_whole_and_what_follows_still_decodes() {
        let mut bytes = 3u32.to_be_bytes().to_vec();
        bytes.extend_from_slice(b"[1,");
        bytes.extend(encode(&Request::Hold));
        let mut frames = FrameBuffer::new();
        frames.extend(&bytes);
        assert!(matches!(
            frames.decode::<Request>(MAX_REQUEST),
            Err(FrameError::Malformed(_))
        ));
        assert_eq!(
            frames.decode::<Request>(MAX_REQUEST),
            Ok(Some(Request::Hold))
        );
        let mut buffer = bytes;
        assert!(decode::<Request>(&mut buffer, MAX_REQUEST).is_err());
        assert_eq!(
            decode::<Request>(&mut buffer, MAX_REQUEST),
            Ok(Some(Request::Hold))
        );
    }

    #[test]
    fn a_submit_without_the_inherited_fields_still_decodes() {
        // An older scrun sends no ignored_signals, rlimits or umask.
        let body = br#"{"type":"submit","version":1,"submit":{"stages":[["true"]],"joiner":"sequence","options":{"procs":{"nodes":1},"priority":null,"wait":false,"memory":null,"disk":null},"env":[],"cwd":"/"}}"#;
        let mut buffer = (body.len() as u32).to_be_bytes().to_vec();
        buffer.extend_from_slice(body);
        let Some(Request::Submit { submit, .. }) = decode(&mut buffer, MAX_REQUEST).unwrap() else {
            panic!("not a submit");
        };
        assert!(submit.ignored_signals.is_empty() && submit.rlimits.is_empty());
        assert_eq!(submit.umask, None);
        assert_eq!((submit.nice, submit.ioprio), (None, None));
        assert!(submit.closed_stdio.is_empty() && submit.fds.is_empty());
        assert_eq!(submit.descriptor_count(), SUBMIT_FDS);
    }

    #[test]
    fn a_submission_counts_its_descriptors() {
        let Request::Submit { mut submit, .. } = submit() else {
            unreachable!()
        };
        // stdin and stderr, then descriptors 3 and 63.
        assert_eq!(submit.descriptor_count(), 4);
        // Then two PMI descriptors for each of the one stage.
        submit.pmi_ranks = 2;
        assert_eq!(submit.descriptor_count(), 6);
        submit.pmi_ranks = 0;
        submit.closed_stdio = vec![0, 1, 2];
        submit.fds.clear();
        assert_eq!(submit.descriptor_count(), 0);
    }

    #[test]
    fn partial_frames_wait_for_more() {
        let frame = encode(&Request::Hold);
        for cut in 0..frame.len() {
            let mut buffer = frame[..cut].to_vec();
            assert_eq!(decode::<Request>(&mut buffer, MAX_REQUEST), Ok(None));
        }
    }

    #[test]
    fn oversized_length_is_refused_before_buffering() {
        let mut buffer = vec![0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            decode::<Request>(&mut buffer, MAX_REQUEST),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for payload in [
            &b"\x00\x01\x02"[..],
            b"{}",
            b"{\"type\":\"submit\"}",
            b"[1,2",
            b"null",
        ] {
            let mut buffer = (payload.len() as u32).to_be_bytes().to_vec();
            buffer.extend_from_slice(payload);
            assert!(matches!(
                decode::<Request>(&mut buffer, MAX_REQUEST),
                Err(FrameError::Malformed(_))
            ));
        }
    }

    /// Frames as a peer of the revision before `pty` and `winch` sends
    /// them still decode, with both false.
    #[test]
    fn fields_added_later_default_for_older_peers() {
        let frame = |json: &str| {
            let mut buffer = (json.len() as u32).to_be_bytes().to_vec();
            buffer.extend_from_slice(json.as_bytes());
            buffer
        };
        let reply: Reply = decode(&mut frame(r#"{"type":"started","job":4}"#), MAX_REPLY)
            .unwrap()
            .unwrap();
        assert_eq!(
            reply,
            Reply::Started {
                job: 4,
                winch: false,
                signals: false
            }
        );
        let options =
            r#"{"procs":{"nodes":1},"priority":null,"wait":false,"memory":null,"disk":null}"#;
        let request = format!(
            r#"{{"type":"submit","version":1,"submit":{{"stages":[["true"]],"joiner":"sequence","options":{options},"env":[],"cwd":"/"}}}}"#
        );
        let Request::Submit { submit, .. } =
            decode(&mut frame(&request), MAX_REQUEST).unwrap().unwrap()
        else {
            panic!("not a submission");
        };
        assert!(!submit.options.pty);
    }
}
