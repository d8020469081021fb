//! What scored asks a keeper to create ([`Order`]: the processes of a
//! stage, or of every stage of a pipe, and where each runs), and the
//! creation of each rank in the keeper: its environment, descriptors,
//! limits and credentials prepared before the fork, as
//! `actuator::spawn` takes them.
//!
//! The job's descriptors (the client's stdin, stdout, stderr and others,
//! and the ranks' PMI ends) travel with the first order and stay with the
//! keeper for the job's life: a later `::` stage uses them again, even
//! after scored was replaced.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use nix::sys::resource::Resource;
use serde::{Deserialize, Serialize};

use crate::actuator::spawn::{self, ChildSetup};
use scored_core::job::LaunchPlan;
use scored_proto::inherit::{self, Inherited};
use scored_proto::proto::WireBytes;

/// The processes a keeper is to create.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    /// The job (`SCORE_JOBID`).
    pub job: u64,
    /// The argument vectors of the stages to start.
    pub argv: Vec<Vec<WireBytes>>,
    /// Index of the first of them among the job's stages.
    pub first_stage: usize,
    /// The stages are joined with pipes.
    pub pipe: bool,
    /// Processes per stage.
    pub nprocs: u32,
    /// Each process: stage, rank, host id, host slot.
    pub procs: Vec<(usize, u32, u32, usize)>,
    /// The hosts of those processes: id, name, CPUs.
    pub hosts: Vec<(u32, String, Vec<u32>)>,
    /// The caller's environment.
    pub env: Vec<(WireBytes, WireBytes)>,
    /// The caller's working directory.
    pub cwd: WireBytes,
    /// The user: uid, gid, groups.
    pub user: (u32, u32, Vec<u32>),
    /// Change to the user's credentials (scored runs as root and the user
    /// is another).
    pub become_user: bool,
    /// Signal dispositions of the caller: the ignored ones.
    pub ignored: u64,
    /// The caller's limits (index, soft, hard).
    pub rlimits: Vec<(u8, u64, u64)>,
    /// The caller's umask, nice value and I/O priority.
    pub umask: Option<u32>,
    /// See `umask`.
    pub nice: Option<i32>,
    /// See `umask`.
    pub ioprio: Option<u32>,
    /// The descriptor limits jobs get when the caller sent none.
    pub job_nofile: Option<(u64, u64)>,
    /// The signals scored ignores (the ranks are forked by the keeper,
    /// which ignores the same ones).
    pub daemon_ignored: Option<u64>,
    /// The job's scratch directory (`SCORE_TMPDIR`).
    pub scratch: WireBytes,
    /// The job's `cgroup.procs`, when it has a cgroup.
    pub cgroup_procs: Option<WireBytes>,
    /// The `cgroup.procs` of the job's v1 pids cgroup, when it has one.
    #[serde(default)]
    pub pids_procs: Option<WireBytes>,
    /// The job's array index and array job (`SCORE_ARRAY_INDEX`,
    /// `SCORE_ARRAY_JOBID`), for an element of an array.
    #[serde(default)]
    pub array: Option<(u32, u64)>,
    /// Per process, the files its stdout and stderr go to (`scrun
    /// -output=`, `-error=`), expanded; empty when the job has none.
    #[serde(default)]
    pub files: Vec<[Option<WireBytes>; 2]>,
    /// The descriptors the message carries after the order, if this is
    /// the first order of the job (later ones carry none).
    pub stdio: Option<StdioLayout>,
}

/// Which of the client's descriptors travel with an order, in this order:
/// stdin, stdout, stderr (those present), the others at their numbers,
/// then the PMI ones present.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StdioLayout {
    /// The job has a client; without one (a batch job) its ranks' stdin,
    /// stdout and stderr are /dev/null (under their output files).
    #[serde(default = "yes")]
    pub client: bool,
    /// stdin, stdout, stderr present (the client had them open).
    pub standard: [bool; 3],
    /// stdin is a terminal rank 0 takes as its controlling terminal.
    pub controlling_terminal: bool,
    /// The numbers the others get, increasing.
    pub inherited: Vec<RawFd>,
    /// PMI descriptors per stage (0 without PMI).
    pub pmi_per_stage: usize,
    /// The ranks without a PMI descriptor reach scrun's PMI server at the
    /// environment's `PMI_PORT`, each naming itself by `PMI_ID`.
    #[serde(default)]
    pub pmi_port: bool,
    /// Which PMI descriptors, stage by stage in rank order, are present.
    pub pmi: Vec<bool>,
    /// The PMIx namespace of the job's ranks (`scrun -mpi=pmix`), if any:
    /// stage `s` is `NAME.s`.
    #[serde(default)]
    pub pmix: Option<String>,
}

impl Order {
    /// The order for `plan`, with what the actuator adds.
    #[allow(clippy::too_many_arguments)]
    pub fn of(
        plan: &LaunchPlan,
        hosts: Vec<(u32, String, Vec<u32>)>,
        become_user: bool,
        job_nofile: Option<(u64, u64)>,
        daemon_ignored: Option<u64>,
        scratch: &OsStr,
        cgroups: (Option<&[u8]>, Option<&[u8]>),
        files: Vec<[Option<WireBytes>; 2]>,
        stdio: Option<StdioLayout>,
    ) -> Order {
        let inherited = &plan.inherited;
        Order {
            job: plan.job.0,
            argv: plan
                .argv
                .iter()
                .map(|argv| argv.iter().map(|arg| WireBytes::from_os(arg)).collect())
                .collect(),
            first_stage: plan.first_stage,
            pipe: plan.pipe,
            nprocs: plan.nprocs,
            procs: plan
                .procs
                .iter()
                .map(|proc_plan| {
                    (
                        proc_plan.stage,
                        proc_plan.rank,
                        proc_plan.host.0,
                        proc_plan.host_slot,
                    )
                })
                .collect(),
            hosts,
            env: plan
                .env
                .iter()
                .map(|(key, value)| (WireBytes::from_os(key), WireBytes::from_os(value)))
                .collect(),
            cwd: WireBytes::from_os(&plan.cwd),
            user: (plan.user.uid, plan.user.gid, plan.user.groups.clone()),
            become_user,
            ignored: inherited.ignored,
            rlimits: inherited.rlimits.clone(),
            umask: inherited.umask,
            nice: inherited.nice,
            ioprio: inherited.ioprio,
            job_nofile,
            daemon_ignored,
            scratch: WireBytes::from_os(scratch),
            cgroup_procs: cgroups
                .0
                .map(|bytes| WireBytes::from_os(OsStr::from_bytes(bytes))),
            pids_procs: cgroups
                .1
                .map(|bytes| WireBytes::from_os(OsStr::from_bytes(bytes))),
            array: plan.array.map(|(index, array)| (index, array.0)),
            files,
            stdio,
        }
    }

    /// Processes of the order.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// Whether the order creates nothing.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }
}

fn yes() -> bool {
    true
}

/// The descriptors of a job, held by its keeper.
#[derive(Debug, Default)]
pub struct JobFds {
    /// The job has a client (see `StdioLayout::client`).
    pub client: bool,
    /// stdin, stdout, stderr, when the client had them.
    pub standard: [Option<OwnedFd>; 3],
    /// rank 0 takes stdin as its controlling terminal.
    pub controlling_terminal: bool,
    /// The others, at their numbers.
    pub inherited: Vec<(RawFd, OwnedFd)>,
    /// PMI descriptors per stage.
    pub pmi_per_stage: usize,
    /// See `StdioLayout::pmi_port`.
    pub pmi_port: bool,
    /// The PMI descriptors not yet given to a rank.
    pub pmi: Vec<Option<OwnedFd>>,
    /// The PMIx namespace of the job's ranks, if any.
    pub pmix: Option<String>,
    /// Descriptors kept until the job's descriptors go: a PMI end whose
    /// rank could not be created, or those of an order that could not be
    /// carried out. The daemon closes its copy of a PMI end as soon as it
    /// has sent it (`actuator::keepers`), so no copy it sent may be
    /// closed here before a later word of the daemon's (see `Rank::pmi`).
    pub kept: Vec<OwnedFd>,
}

impl JobFds {
    /// The descriptors `layout` lists, taken from `fds` in order; if
    /// there are too few, all of them back.
    pub fn from_layout(layout: &StdioLayout, fds: Vec<OwnedFd>) -> Result<JobFds, Vec<OwnedFd>> {
        let listed = layout.standard.iter().filter(|present| **present).count()
            + layout.inherited.len()
            + layout.pmi.iter().filter(|present| **present).count();
        if fds.len() < listed {
            return Err(fds);
        }
        let mut fds = fds.into_iter();
        let mut next = || fds.next().expect("the descriptors were counted");
        let standard = layout.standard.map(|present| present.then(&mut next));
        let inherited = layout
            .inherited
            .iter()
            .map(|number| (*number, next()))
            .collect();
        let pmi = layout
            .pmi
            .iter()
            .map(|present| present.then(&mut next))
            .collect();
        Ok(JobFds {
            client: layout.client,
            standard,
            controlling_terminal: layout.controlling_terminal,
            inherited,
            pmi_per_stage: layout.pmi_per_stage,
            pmi_port: layout.pmi_port,
            pmi,
            pmix: layout.pmix.clone(),
            kept: Vec::new(),
        })
    }

    /// Whether closing every descriptor held returns at once
    /// (`sys::closes_at_once`), so that a keeper may let go of them
    /// itself and keep another job.
    pub fn close_at_once(&self) -> bool {
        use std::os::fd::AsFd;
        self.standard
            .iter()
            .flatten()
            .chain(self.inherited.iter().map(|(_, fd)| fd))
            .chain(self.pmi.iter().flatten())
            .chain(&self.kept)
            .all(|fd| crate::sys::closes_at_once(fd.as_fd()))
    }

    /// Takes the PMI descriptor of `rank` of `stage`, if it has one: the
    /// caller keeps it until that rank is reaped, or in `kept`.
    pub fn take_pmi(&mut self, stage: usize, rank: usize) -> Option<OwnedFd> {
        if rank >= self.pmi_per_stage {
            return None;
        }
        let idx = stage.checked_mul(self.pmi_per_stage)?.checked_add(rank)?;
        self.pmi.get_mut(idx).and_then(Option::take)
    }
}

/// Why a launch failed before a rank existed.
#[derive(Debug)]
pub struct LaunchFailure {
    /// The sentence.
    pub message: String,
    /// The status scrun reports.
    pub status: i32,
}

/// The environment variables scored sets for each rank, over the caller's.
const SCORE_KEYS: [&str; 9] = [
    "SCORE_JOBID",
    "SCORE_RANK",
    "SCORE_NPROCS",
    "SCORE_HOST",
    "SCORE_HOSTID",
    "SCORE_TMPDIR",
    "SCORE_STAGE",
    "SCORE_ARRAY_INDEX",
    "SCORE_ARRAY_JOBID",
];

/// The variables of a rank with PMI, over the caller's.
const PMI_KEYS: [&str; 4] = ["PMI_FD", "PMI_ID", "PMI_RANK", "PMI_SIZE"];

/// The variables of a rank with PMIx (`scrun -mpi=pmix`), over the
/// caller's: its namespace and rank.
const PMIX_KEYS: [&str; 2] = ["PMIX_NAMESPACE", "PMIX_RANK"];

/// `KEY=value`; values here hold no NUL byte, and one that did would give
/// an empty entry rather than a failed launch.
fn entry(key: &str, value: &[u8]) -> CString {
    let mut bytes = Vec::with_capacity(key.len() + value.len() + 1);
    bytes.extend_from_slice(key.as_bytes());
    bytes.push(b'=');
    bytes.extend_from_slice(value);
    CString::new(bytes).unwrap_or_default()
}

/// /dev/null for reading or writing.
fn open_null(write: bool) -> io::Result<OwnedFd> {
    let file = if write {
        std::fs::OpenOptions::new().write(true).open("/dev/null")?
    } else {
        std::fs::File::open("/dev/null")?
    };
    Ok(OwnedFd::from(file))
}

/// What the ranks of one order share, prepared once.
pub struct Prepared {
    base: Vec<(Vec<u8>, CString)>,
    cwd: CString,
    args: Vec<Vec<CString>>,
    programs: Vec<String>,
    masks: BTreeMap<u32, (String, nix::sched::CpuSet)>,
    rlimits: Vec<(Resource, u64, u64)>,
    cgroup_procs: Option<CString>,
    pids_procs: Option<CString>,
    /// Per process, its output files (see `Order::files`).
    files: Vec<[Option<CString>; 2]>,
    scratch: Vec<u8>,
    signals_to_change: u64,
    /// Pipes between `==` stages: [stage][rank] = (read, write).
    pipes: Vec<Vec<(Option<OwnedFd>, Option<OwnedFd>)>>,
}

impl Prepared {
    /// The output files of process `idx` of the order (see `Order::files`).
    pub fn files(&self, idx: usize) -> [Option<&[u8]>; 2] {
        self.files.get(idx).map_or([None, None], |pair| {
            [0, 1].map(|slot| pair[slot].as_ref().map(|path| path.as_bytes()))
        })
    }

    /// The program of each stage of the order, for messages.
    pub fn programs(&self) -> Vec<String> {
        self.programs.clone()
    }

    /// The program of stage `idx` of the order, for messages.
    pub fn program(&self, idx: usize) -> &str {
        self.programs.get(idx).map_or("?", String::as_str)
    }

    /// The working directory, for messages.
    pub fn cwd(&self) -> String {
        std::path::Path::new(OsStr::from_bytes(self.cwd.as_bytes()))
            .display()
            .to_string()
    }
}

/// Prepares what every rank of `order` shares: the environment, the
/// arguments, the CPU masks, the limits and the pipes between stages.
pub fn prepare(order: &Order, fds: &JobFds) -> Result<Prepared, LaunchFailure> {
    let fail = |message: String| LaunchFailure {
        message,
        status: scored_proto::exitcode::NOT_EXECUTABLE,
    };
    let cwd = CString::new(order.cwd.as_bytes())
        .map_err(|_| fail("internal error: the job's working directory holds a NUL byte".into()))?;
    let mut base: BTreeMap<Vec<u8>, Vec<u8>> = order
        .env
        .iter()
        .map(|(key, value)| (key.as_bytes().to_vec(), value.as_bytes().to_vec()))
        .collect();
    for key in SCORE_KEYS {
        base.remove(key.as_bytes());
    }
    if fds.pmi_per_stage > 0 || fds.pmi_port {
        for key in PMI_KEYS {
            base.remove(key.as_bytes());
        }
    }
    if fds.pmix.is_some() {
        for key in PMIX_KEYS {
            base.remove(key.as_bytes());
        }
    }
    let base = base
        .into_iter()
        .filter_map(|(key, value)| {
            let mut bytes = key.clone();
            bytes.push(b'=');
            bytes.extend_from_slice(&value);
            CString::new(bytes).ok().map(|entry| (key, entry))
        })
        .collect();
    let mut args = Vec::new();
    let mut programs = Vec::new();
    for argv in &order.argv {
        let stage: Vec<CString> = argv
            .iter()
            .map(|arg| CString::new(arg.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| fail("internal error: an argument holds a NUL byte".into()))?;
        programs.push(
            argv.first()
                .map(|program| std::path::Path::new(&program.to_os()).display().to_string())
                .unwrap_or_default(),
        );
        args.push(stage);
    }
    let mut masks = BTreeMap::new();
    for (id, name, cpus) in &order.hosts {
        let mut mask = nix::sched::CpuSet::new();
        for cpu in cpus {
            let _ = mask.set(*cpu as usize);
        }
        masks.insert(*id, (name.clone(), mask));
    }
    let mut rlimits: Vec<(Resource, u64, u64)> = order
        .rlimits
        .iter()
        .filter(|(index, _, _)| *index != inherit::NOFILE)
        .filter_map(|&(index, soft, hard)| {
            inherit::RESOURCES
                .get(usize::from(index))
                .map(|&resource| (resource, soft, hard))
        })
        .collect();
    let inherited = Inherited {
        ignored: order.ignored,
        rlimits: order.rlimits.clone(),
        umask: order.umask,
        nice: order.nice,
        ioprio: order.ioprio,
    };
    if let Some((soft, hard)) = inherited.rlimit(inherit::NOFILE).or(order.job_nofile) {
        rlimits.push((Resource::RLIMIT_NOFILE, soft, hard));
    }
    let mut pipes = Vec::new();
    if order.pipe {
        for _ in 1..order.argv.len() {
            let mut stage = Vec::new();
            for _ in 0..order.nprocs {
                let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                    .map_err(|error| fail(format!("cannot create a pipe: {error}")))?;
                stage.push((Some(read), Some(write)));
            }
            pipes.push(stage);
        }
    }
    Ok(Prepared {
        base,
        cwd,
        args,
        programs,
        masks,
        rlimits,
        cgroup_procs: order
            .cgroup_procs
            .as_ref()
            .and_then(|path| CString::new(path.as_bytes()).ok()),
        pids_procs: order
            .pids_procs
            .as_ref()
            .and_then(|path| CString::new(path.as_bytes()).ok()),
        // A path with a NUL byte (which the validator keeps out) is left
        // out, as scored would.
        files: order
            .files
            .iter()
            .map(|pair| {
                pair.clone()
                    .map(|path| path.and_then(|path| CString::new(path.as_bytes()).ok()))
            })
            .collect(),
        scratch: order.scratch.as_bytes().to_vec(),
        signals_to_change: order
            .daemon_ignored
            .map_or(u64::MAX, |daemon| daemon ^ order.ignored),
        pipes,
    })
}

/// Creates process `idx` of `order`: forks it, as its keeper's child, to
/// run its pre-exec steps and exec, emptying the output files `truncate`
/// says, with its PMI descriptor `pmi` (taken by the caller,
/// [`JobFds::take_pmi`]). Returns its pid and its word on its exec (see
/// `actuator::spawn`).
pub fn spawn_rank(
    order: &Order,
    prepared: &mut Prepared,
    fds: &mut JobFds,
    (idx, pmi): (usize, Option<BorrowedFd<'_>>),
    truncate: [bool; 2],
    keeper_pid: i32,
) -> io::Result<(i32, std::sync::Arc<spawn::ExecWord>)> {
    let (stage, rank, host_id, _slot) = order.procs[idx];
    let stage_idx = stage - order.first_stage;
    let last_stage = order.first_stage + order.argv.len() - 1;
    let host = prepared
        .masks
        .get(&host_id)
        .cloned()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a host of no order"))?;
    let mut own: Vec<(&[u8], CString)> = vec![
        (
            b"SCORE_JOBID",
            entry("SCORE_JOBID", order.job.to_string().as_bytes()),
        ),
        (
            b"SCORE_RANK",
            entry("SCORE_RANK", rank.to_string().as_bytes()),
        ),
        (
            b"SCORE_NPROCS",
            entry("SCORE_NPROCS", order.nprocs.to_string().as_bytes()),
        ),
        (b"SCORE_HOST", entry("SCORE_HOST", host.0.as_bytes())),
        (
            b"SCORE_HOSTID",
            entry("SCORE_HOSTID", host_id.to_string().as_bytes()),
        ),
        (b"SCORE_TMPDIR", entry("SCORE_TMPDIR", &prepared.scratch)),
    ];
    let pmi_number = fds.inherited.last().map_or(3, |(last, _)| last + 1).max(3);
    if pmi.is_some() {
        own.push((
            b"PMI_FD",
            entry("PMI_FD", pmi_number.to_string().as_bytes()),
        ));
        own.push((b"PMI_RANK", entry("PMI_RANK", rank.to_string().as_bytes())));
        own.push((
            b"PMI_SIZE",
            entry("PMI_SIZE", fds.pmi_per_stage.to_string().as_bytes()),
        ));
    }
    // Without a descriptor, the rank's place among the ranks that reach
    // scrun's PMI server at the environment's PMI_PORT: its number across
    // the stages, its rank and its stage's size.
    if pmi.is_none() && fds.pmi_port {
        let id = stage * order.nprocs as usize + rank as usize;
        own.push((b"PMI_ID", entry("PMI_ID", id.to_string().as_bytes())));
        own.push((b"PMI_RANK", entry("PMI_RANK", rank.to_string().as_bytes())));
        own.push((
            b"PMI_SIZE",
            entry("PMI_SIZE", order.nprocs.to_string().as_bytes()),
        ));
    }
    // The rank's place in its stage's PMIx namespace, beside the server's
    // variables that the caller's environment carries.
    if let Some(name) = &fds.pmix {
        own.push((
            b"PMIX_NAMESPACE",
            entry("PMIX_NAMESPACE", format!("{name}.{stage}").as_bytes()),
        ));
        own.push((
            b"PMIX_RANK",
            entry("PMIX_RANK", rank.to_string().as_bytes()),
        ));
    }
    if order.pipe {
        own.push((
            b"SCORE_STAGE",
            entry("SCORE_STAGE", stage.to_string().as_bytes()),
        ));
    }
    if let Some((index, array)) = order.array {
        own.push((
            b"SCORE_ARRAY_INDEX",
            entry("SCORE_ARRAY_INDEX", index.to_string().as_bytes()),
        ));
        own.push((
            b"SCORE_ARRAY_JOBID",
            entry("SCORE_ARRAY_JOBID", array.to_string().as_bytes()),
        ));
    }
    let mut env: Vec<(&[u8], &std::ffi::CStr)> = prepared
        .base
        .iter()
        .map(|(key, entry)| (key.as_slice(), entry.as_c_str()))
        .chain(own.iter().map(|(key, entry)| (*key, entry.as_c_str())))
        .collect();
    env.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut owned: Vec<OwnedFd> = Vec::new();
    let hold = |owned: &mut Vec<OwnedFd>, fd: OwnedFd| {
        let raw = fd.as_raw_fd();
        owned.push(fd);
        raw
    };
    let rank_idx = rank as usize;
    let stdin_pipe = if order.pipe && stage_idx > 0 {
        prepared.pipes[stage_idx - 1][rank_idx].0.take()
    } else {
        None
    };
    // The process that reads the client's stdin (rank 0 of the first
    // stage, or of each stage with `::`) also gets the client's other
    // descriptors; a standard descriptor the client had closed stays
    // closed (`spawn::CLOSED`). Without a client, /dev/null.
    let reads_client = fds.client && rank == 0 && !(order.pipe && stage_idx > 0);
    let client = fds.client;
    let standard = |which: usize| {
        fds.standard[which]
            .as_ref()
            .map_or(spawn::CLOSED, |fd| fd.as_raw_fd())
    };
    let stdin_fd = match stdin_pipe {
        Some(pipe) => hold(&mut owned, pipe),
        None if reads_client => standard(0),
        None => hold(&mut owned, open_null(false)?),
    };
    let stdout_pipe = if order.pipe && stage < last_stage {
        prepared.pipes[stage_idx][rank_idx].1.take()
    } else {
        None
    };
    let stdout_fd = match stdout_pipe {
        Some(pipe) => hold(&mut owned, pipe),
        None if client => standard(1),
        None => hold(&mut owned, open_null(true)?),
    };
    let stderr_fd = if client {
        standard(2)
    } else {
        hold(&mut owned, open_null(true)?)
    };
    let mut stdio_fds = [stdin_fd, stdout_fd, stderr_fd];
    for fd in &mut stdio_fds {
        if let Some(copy) = ChildSetup::stdio_fd(*fd)? {
            *fd = hold(&mut owned, copy);
        }
    }
    let mut passed: Vec<(RawFd, RawFd)> = if reads_client {
        fds.inherited
            .iter()
            .map(|(target, fd)| (*target, fd.as_raw_fd()))
            .collect()
    } else {
        Vec::new()
    };
    if let Some(fd) = pmi {
        passed.push((pmi_number, fd.as_raw_fd()));
    }
    let groups: Vec<libc::gid_t> = order.user.2.clone();
    let args = &prepared.args[stage_idx];
    let setup = ChildSetup {
        program: &args[0],
        args: args.iter().map(CString::as_c_str).collect(),
        env: env.iter().map(|(_, entry)| *entry).collect(),
        stdio: stdio_fds,
        inherited: &passed,
        cpus: host.1,
        cgroup_procs: prepared.cgroup_procs.as_deref(),
        pids_procs: prepared.pids_procs.as_deref(),
        credentials: order
            .become_user
            .then_some((order.user.0, order.user.1, groups.as_slice())),
        takes_terminal: fds.controlling_terminal && reads_client,
        cwd: &prepared.cwd,
        daemon_pid: keeper_pid,
        umask: order.umask,
        nice: order.nice,
        ioprio: order.ioprio,
        ignored: order.ignored,
        signals_to_change: prepared.signals_to_change,
        rlimits: &prepared.rlimits,
        output: [0, 1].map(|slot| {
            prepared
                .files
                .get(idx)
                .and_then(|pair| pair[slot].as_deref())
                .map(|path| spawn::OutputFile {
                    path,
                    truncate: truncate[slot],
                })
        }),
    };
    let spawned = spawn::spawn(&setup);
    drop(owned);
    spawned
}
