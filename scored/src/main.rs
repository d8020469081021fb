//! The scored daemon's entry point: read the settings, build the topology
//! and the core, run the start-up script, then hand over to the event loop.
//!
//! Every start-up error is printed once, prefixed `scored:`, and scored
//! exits with status 1 without listening.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use clap::Parser;
use tracing_subscriber::EnvFilter;

use scored::actuator::{self, ActuatorConfig, OsActuator};
use scored::closer;
use scored::config::{self, Flags, Settings};
use scored::evloop::{self, Daemon, LoopConfig, RestartSetup};
use scored::journal::Journal;
use scored::{handover, instance};
use scored_core::cluster::{Machine, Topology};
use scored_core::core::{Action, Core, CoreConfig};
use scored_core::hosts;
use scored_core::ids::{Cred, Tick};
use scored_proto::units::CpuSet;
use scored_proto::{exitcode, paths};

fn main() {
    actuator::fill_standard_descriptors();
    if closer::invoked_as_closer() {
        std::process::exit(closer::serve_inherited());
    }
    if actuator::invoked_as_remover() {
        std::process::exit(actuator::remove_inherited());
    }
    let code = match run() {
        Ok(()) => exitcode::OK,
        Err(message) => {
            eprintln!("scored: {message}");
            exitcode::FAILURE
        }
    };
    std::process::exit(code);
}

fn run() -> Result<(), String> {
    let flags = Flags::parse();
    let check_state = flags.check_state.clone();
    let resume = flags.resume.clone();
    let restart_exe = start_path();
    let restart_args = restart_args(std::env::args_os().skip(1));
    let file = match &flags.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
            config::parse_file(path, &text).map_err(|error| error.to_string())?
        }
        None => Default::default(),
    };
    let settings = config::resolve(flags, file).map_err(|error| error.to_string())?;
    init_logging(settings.verbose);
    // The modes of what scored creates (its socket's directory, the state
    // directory, the journal) are its own, whatever umask it was started
    // with: a private daemon inherits its scrun's, which may be 0777.
    // Jobs get their caller's umask (see `actuator::spawn`).
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    // The zygote that makes the jobs' keepers, forked while scored's heap
    // holds nothing of its jobs (`keeper/zygote.rs`); not for a binary
    // that only checks a handover.
    let zygote = match &check_state {
        Some(_) => None,
        None => Some(
            scored::keeper::zygote::Zygote::start()
                .map_err(|error| format!("cannot start the zygote of keepers: {error}"))?,
        ),
    };
    // Before anything could start a thread: the loop reads these signals.
    let signals =
        evloop::block_signals().map_err(|error| format!("cannot block signals: {error}"))?;
    // Before opening anything of our own: what we inherited must not reach jobs.
    let sealed = actuator::seal_inherited_descriptors();
    if sealed > 0 {
        tracing::debug!(n = sealed, "inherited descriptors marked close-on-exec");
    }

    let uid = nix::unistd::geteuid().as_raw();
    let env = |name: &str| std::env::var(name).ok();
    let socket = settings
        .socket
        .clone()
        .unwrap_or_else(|| paths::default_socket(uid, env("XDG_RUNTIME_DIR").as_deref()));
    let state_dir = settings.state_dir.clone().unwrap_or_else(|| {
        paths::default_state_dir(
            uid,
            env("XDG_STATE_HOME").as_deref(),
            env("HOME").as_deref(),
        )
    });
    // Checked here for a clear message before anything else starts; the
    // actuator holds it open later.
    actuator::statedir::StateDir::open(&state_dir, uid)
        .map_err(|error| format!("state directory: {error}"))?;
    let machine = read_machine();
    let topology = build_topology(&settings, &machine)?;
    let operators = match &settings.operator {
        Some(name) => vec![resolve_user(name)?],
        None => Vec::new(),
    };
    let memory_limits = topology
        .clusters
        .iter()
        .map(|cluster| {
            cluster
                .hosts
                .iter()
                .map(|host| topology.host(*host).memory)
                .min()
        })
        .collect();
    let disk = disk_limits(&topology, &state_dir);
    let core_config = CoreConfig {
        timeslice: settings.timeslice,
        operators,
        daemon_uid: uid,
        daemon_user: evloop::user_name(uid),
        kill_grace: settings.kill_grace,
        disk,
        machine_memory: Some(machine.total_memory),
        sample_every_slice: true,
        budgets: settings.budgets,
    };
    if let Some(path) = check_state {
        // A new binary checks, in a process of its own, that it can take
        // over from the one that runs; nothing is touched here.
        let handover = handover::read(&path).map_err(|error| error.to_string())?;
        Core::restore(core_config, topology, handover.core).map_err(|error| error.to_string())?;
        println!("{}", scored::version::version());
        return Ok(());
    }
    let mut closer_handed_over = None;
    let resumed = match &resume {
        Some(path) => {
            let mut handover =
                handover::read(path).map_err(|error| format!("cannot take over: {error}"))?;
            let _ = std::fs::remove_file(path);
            closer_handed_over = Some(handover.closer.take().unwrap_or_default());
            Some(handover)
        }
        None => None,
    };
    if let Some(previous) = instance::claim(&state_dir).map_err(|error| error.to_string())? {
        tracing::warn!(
            pid = previous.pid,
            "the previous scored of this state directory did not exit cleanly; \
             taking over its jobs"
        );
    }
    // What a killed daemon of this state directory left, unless this is an
    // in-place restart (which hands the state over itself).
    let left = match resumed {
        Some(_) => None,
        None => left_state(&state_dir),
    };
    let mut origin_ns = scored::durable::monotonic_ns();
    let mut replayed = Vec::new();
    let mut taken_over = false;
    // The jobs' keepers as recorded: job, pid and start time.
    let mut keepers: std::collections::HashMap<u64, (i32, u64)> = Default::default();
    let settings_now = scored::durable::Settings::of(&core_config);
    let (mut core, mut resumed, start_actions) = match (resumed, left) {
        (Some(handover), _) => {
            origin_ns = origin_ns.saturating_sub(handover.tick_us.saturating_mul(1000));
            let mut core = Core::restore(core_config.clone(), topology.clone(), handover.core)
                .map_err(|error| format!("cannot take over: {error}"))?;
            core.set_directory(Box::new(evloop::SystemDirectory));
            (
                core,
                Some((
                    handover.actuator,
                    handover.connections,
                    handover.tick_us,
                    handover.restarts,
                    handover.journal_recent,
                )),
                Vec::new(),
            )
        }
        (None, Some(left)) => {
            origin_ns = left.state.origin_ns;
            keepers = left.keepers();
            let (mut core, events) = recover_core(&core_config, &topology, left)?;
            core.set_directory(Box::new(evloop::SystemDirectory));
            replayed = events;
            taken_over = true;
            (core, None, Vec::new())
        }
        (None, None) => {
            remove_scratch_leftovers(&state_dir);
            let mut core = Core::new(core_config.clone(), topology.clone(), memory_limits);
            core.set_directory(Box::new(evloop::SystemDirectory));
            let start_actions =
                run_rc(&mut core, &settings, uid).map_err(given_back(&state_dir))?;
            (core, None, start_actions)
        }
    };
    let restarts = resumed.as_ref().map_or(0, |resumed| resumed.3);
    core.set_build(scored::version::version(), restarts);
    let journal = match (settings.journal, resumed.as_mut()) {
        (false, _) => None,
        // After an in-place restart the journal needs no reading: the
        // previous image handed over what reading would give.
        (true, Some(resumed)) => Some(
            Journal::reopen(
                &state_dir,
                settings.journal_size,
                resumed.4.take().unwrap_or_default(),
            )
            .map_err(|error| format!("cannot open the job journal: {error}"))?,
        ),
        (true, None) => Some(
            open_journal(&mut core, &state_dir, settings.journal_size, replayed)
                .map_err(given_back(&state_dir))?,
        ),
    };

    let fd_limits = evloop::raise_fd_limit();
    // Before anything a user hands over can arrive: the loop lets go of
    // users' descriptors only through the closer (with the daemon's
    // raised descriptor limit, and before its real-time priority).
    match closer_handed_over {
        Some(snapshot) => closer::resume(snapshot),
        None => closer::start(),
    }
    .map_err(|error| format!("cannot start the closer of users' descriptors: {error}"))?;
    // Everything that can fail comes before the socket exists, so that a
    // failed start leaves no socket behind.
    let actuator_config = ActuatorConfig {
        state_dir: state_dir.clone(),
        use_cgroups: settings.cgroups,
        job_nofile: (fd_limits.current != fd_limits.original.0).then_some(fd_limits.original),
        keeper_wait: settings.keeper_wait,
    };
    let (actuator, listener, resumed) = match resumed {
        Some((actuator, connections, tick_us, _, _)) => {
            keepers = actuator
                .keepers()
                .iter()
                .map(|&(job, pid, start)| (job, (pid, start)))
                .collect();
            let actuator = OsActuator::resume(actuator_config, &topology, &actuator, zygote)
                .map_err(|error| format!("cannot take over the jobs: {error}"))?;
            let listener = evloop::adopt_listener(connections.listener)
                .map_err(|error| format!("cannot take over the socket: {error}"))?;
            (actuator, listener, Some((connections, tick_us)))
        }
        None => {
            let actuator = OsActuator::new(actuator_config, &topology, zygote)
                .map_err(|error| format!("cannot prepare to run jobs: {error}"))
                .map_err(given_back(&state_dir))?;
            (
                actuator,
                evloop::bind(&socket, uid)
                    .map_err(|error| error.to_string())
                    .map_err(given_back(&state_dir))?,
                None,
            )
        }
    };
    if let Err(error) = actuator::become_subreaper() {
        tracing::warn!(%error, "cannot become the subreaper of job descendants");
    }
    let priority = actuator::elevate_priority();
    tracing::info!(
        socket = %socket.display(),
        state_dir = %state_dir.display(),
        hosts = topology.hosts.len(),
        clusters = topology.clusters.len(),
        timeslice = %scored_proto::units::format_duration(core.timeslice()),
        %priority,
        max_connections = loop_config_max(&settings, fd_limits.current),
        single_user = settings.single_user,
        idle_exit = %settings.idle_exit.map_or("never".to_string(), scored_proto::units::format_duration),
        "scored is listening"
    );
    let loop_config = LoopConfig {
        socket: socket.clone(),
        idle_exit: settings.idle_exit,
        max_connections: loop_config_max(&settings, fd_limits.current),
        max_connections_per_user: settings.max_connections_per_user,
        max_descriptors_per_user: settings.max_descriptors_per_user,
        max_plain_descriptors: evloop::plain_descriptor_limit(fd_limits.current),
        request_timeout: settings.request_timeout,
    };
    let mut daemon = Daemon::new(core, actuator, listener, loop_config, signals)
        .map_err(|error| format!("cannot start the event loop: {error}"))?
        .with_restart(RestartSetup {
            exe: restart_exe,
            args: restart_args,
            state_dir: state_dir.clone(),
            restarts,
        });
    if let Some(journal) = journal {
        daemon = daemon.with_journal(journal);
    }
    // From here on, what the core is fed is on disk before any of it
    // leaves the daemon.
    let durable = scored::durable::Durable::start(
        &state_dir,
        origin_ns,
        0,
        settings_now,
        daemon.core().snapshot(),
        keepers
            .iter()
            .map(|(job, (pid, start))| (*job, *pid, *start))
            .collect(),
    )
    .map_err(|error| format!("cannot write the daemon's state: {error}"))?;
    daemon = daemon.with_clock_origin(origin_ns).with_durable(durable);
    daemon = daemon.start_with(start_actions);
    if let Some((connections, tick_us)) = resumed {
        daemon = daemon
            .resume(connections, tick_us)
            .map_err(|error| format!("cannot take over the connections: {error}"))?;
        // The processes stayed with their keepers: the same takeover as
        // after a crash, the clients kept.
        daemon = daemon.take_over(&keepers, None);
    } else if taken_over {
        daemon = daemon.take_over(&keepers, Some(scored::durable::REATTACH_WAIT));
    }
    let result = daemon
        .run()
        .map_err(|error| format!("event loop failed: {error}"));
    if result.is_ok() {
        // Every job is gone: nothing is left to take over.
        scored::durable::remove(&state_dir);
    }
    instance::release(&state_dir);
    closer::finish();
    result
}

/// What a killed daemon of `state_dir` left for this one to take over:
/// nothing if it left no state, or the state of another boot of the
/// machine (whose processes are gone; its unfinished jobs are recorded
/// as lost from the journal). A state that cannot be read is moved
/// aside, said so, and left out.
fn left_state(state_dir: &Path) -> Option<scored::durable::Left> {
    let left = match scored::durable::load(state_dir) {
        Ok(left) => left?,
        Err(error) => {
            let aside = state_dir.join(format!("{}.unreadable", scored::durable::SNAPSHOT));
            let _ = std::fs::rename(state_dir.join(scored::durable::SNAPSHOT), &aside);
            tracing::error!(%error, kept = %aside.display(), "cannot read the state a killed scored left; its unfinished jobs are recorded as lost");
            return None;
        }
    };
    match instance::boot_id() {
        Ok(boot) if boot == left.state.boot_id => {}
        _ => {
            tracing::warn!("the state directory holds jobs of an earlier boot of the machine; they are recorded as lost");
            return None;
        }
    }
    if left.dropped > 0 {
        tracing::warn!(
            records = left.dropped,
            "dropped unreadable records of the killed scored's log (a record torn by the crash)"
        );
    }
    Some(left)
}

/// The core of a killed daemon: its snapshot restored with the settings
/// it ran with and fed the inputs logged since, each at its tick; then,
/// if this daemon's settings differ, restored again with them. Returns
/// the job events the replay recorded, for the journal. A logged input
/// that makes the core panic (the bug that killed the daemon) ends the
/// replay at the state before it.
fn recover_core(
    config: &CoreConfig,
    topology: &Topology,
    left: scored::durable::Left,
) -> Result<(Core, Vec<scored_core::core::JobEvent>), String> {
    let scored::durable::Left { state, records, .. } = left;
    let recorded = state.settings.apply(config);
    let mut core = Core::restore(recorded.clone(), topology.clone(), state.core)
        .map_err(|error| format!("cannot take over the killed scored's state: {error}"))?;
    core.record_journal();
    let n_records = records.len();
    let mut applied = 0;
    for record in records {
        if record.inputs.is_empty() {
            // Only keepers' identities: no input was handled.
            continue;
        }
        let inputs = match record
            .inputs
            .into_iter()
            .map(scored_core::core::InputRecord::into_input)
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(inputs) => inputs,
            Err(error) => {
                tracing::error!(seq = record.seq, %error, "a logged input cannot be read; the state is taken as it was before it");
                break;
            }
        };
        core.commit();
        let tick = scored_core::ids::Tick(record.tick);
        // What the core logs while it handles the inputs again was logged
        // when they were first handled.
        let quiet = tracing::subscriber::NoSubscriber::default();
        let outcome = tracing::subscriber::with_default(quiet, || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                core.handle_all(inputs, tick);
            }))
        });
        if outcome.is_err() {
            core.rollback();
            tracing::error!(
                seq = record.seq,
                "a logged input made the core panic again; the state is taken as it was before it"
            );
            break;
        }
        applied += 1;
    }
    let events = core.take_journal();
    tracing::info!(
        jobs = core.n_jobs(),
        records = applied,
        of = n_records,
        "took over the state of the killed scored"
    );
    if scored::durable::Settings::of(config).differs(&state.settings) {
        core = Core::restore(config.clone(), topology.clone(), core.snapshot())
            .map_err(|error| format!("cannot take over the killed scored's state: {error}"))?;
    }
    Ok((core, events))
}

/// For a fresh start that fails after it claimed the state directory: the
/// claim is given back, so that the next start does not take a start that
/// was refused (an rc typo, a socket in use) for a daemon that died.
fn given_back(state_dir: &Path) -> impl Fn(String) -> String + '_ {
    move |error| {
        instance::release(state_dir);
        error
    }
}

/// The binary an in-place restart executes: the path scored was started
/// from (made absolute), so that a binary installed over it takes over;
/// /proc/self/exe would name the old, replaced file.
fn start_path() -> PathBuf {
    let argv0 = std::env::args_os().next().map(PathBuf::from);
    match argv0 {
        Some(path) if path.as_os_str().as_encoded_bytes().contains(&b'/') => {
            if path.is_absolute() {
                path
            } else {
                std::env::current_dir()
                    .map(|cwd| cwd.join(&path))
                    .unwrap_or(path)
            }
        }
        _ => std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe")),
    }
}

/// The arguments scored was started with, without those of a restart.
fn restart_args(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut kept = Vec::new();
    let mut skip_value = false;
    for arg in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let text = arg.to_string_lossy();
        if text == "--resume" || text == "--check-state" {
            skip_value = true;
        } else if !text.starts_with("--resume=") && !text.starts_with("--check-state=") {
            kept.push(arg);
        }
    }
    kept
}

/// Removes the scratch directories (`STATE_DIR/jobs/ID`) a daemon that
/// died left: no daemon of this state directory is alive, and job ids
/// never repeat, so none of them will be used again.
fn remove_scratch_leftovers(state_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(state_dir.join("jobs")) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "removed a scratch directory left by a dead scored")
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot remove a scratch directory left by a dead scored")
            }
        }
    }
}

/// Opens the job journal; jobs an earlier daemon left unfinished (it was
/// killed, or the machine went down) are recorded as lost, and job ids
/// continue after the highest one it handed out.
fn open_journal(
    core: &mut Core,
    state_dir: &Path,
    max_size: u64,
    replayed: Vec<scored_core::core::JobEvent>,
) -> Result<Journal, String> {
    let (mut journal, recovered) = Journal::open(state_dir, max_size)
        .map_err(|error| format!("cannot open the job journal: {error}"))?;
    if recovered.bad_lines > 0 {
        tracing::warn!(
            lines = recovered.bad_lines,
            "skipped unreadable journal lines (a record torn by a crash)"
        );
    }
    // What the replay of a killed daemon's log did that its journal had
    // not recorded yet (the journal is written after the log): the whole
    // story of jobs it never heard of, and the ends of jobs it has open.
    let mut open = recovered.open;
    let mut missing = Vec::new();
    for event in replayed {
        let job = scored::journal::event_job(&event);
        let unheard = job.0 > recovered.last_id;
        let ends_open =
            matches!(event, scored_core::core::JobEvent::Ended { .. }) && open.contains_key(&job.0);
        if matches!(event, scored_core::core::JobEvent::Ended { .. }) {
            open.remove(&job.0);
        }
        if unheard || ends_open {
            missing.push(event);
        }
    }
    if !missing.is_empty() {
        journal
            .record(missing)
            .map_err(|error| format!("cannot write to the job journal: {error}"))?;
    }
    // The jobs this daemon holds are not lost, admitted or waiting in the
    // backlog (batch jobs, dependants, an array's elements).
    open.retain(|id, _| !core.knows(scored_core::ids::JobId(*id)));
    if !open.is_empty() {
        tracing::warn!(
            jobs = ?open.keys().collect::<Vec<_>>(),
            "jobs of an earlier scored never ended: recording them as lost"
        );
        journal
            .record_lost(&open)
            .map_err(|error| format!("cannot write to the job journal: {error}"))?;
    }
    core.continue_ids_after(recovered.last_id);
    Ok(journal)
}

fn loop_config_max(settings: &Settings, fd_limit: u64) -> usize {
    settings
        .max_connections
        .unwrap_or_else(|| evloop::connection_limit(fd_limit))
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "scored=info",
        1 => "scored=debug",
        _ => "scored=trace",
    };
    let filter = EnvFilter::try_from_env("SCORED_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    // Each record escaped into one line: users' strings cannot forge one.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(move || scored::logline::OneLine { ansi })
        .with_target(false)
        .init();
}

/// What this machine offers: its online CPUs and total memory.
fn read_machine() -> Machine {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|text| CpuSet::parse(text.trim()).ok())
        .unwrap_or_else(|| {
            let count = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
            CpuSet::from_cpus(0..count)
        });
    let total_memory = match sysinfo::System::new() {
        Ok(mut system) => {
            system.refresh_memory();
            system.total_memory()
        }
        Err(error) => {
            tracing::warn!(%error, "cannot read the machine's memory; assuming 1G");
            1 << 30
        }
    };
    Machine {
        online_cpus: online,
        total_memory,
    }
}

fn build_topology(settings: &Settings, machine: &Machine) -> Result<Topology, String> {
    match &settings.hosts {
        Some(path) => hosts::load_topology_with_warnings(
            path,
            &mut scored::hostsfile::FsLoader,
            settings.group.as_deref(),
            machine,
        )
        .map(|(topology, warnings)| {
            // Accepted, but perhaps not meant: the operator reads them
            // in the log at start.
            for warning in &warnings {
                tracing::warn!("{}", warning.one_line());
            }
            topology
        })
        .map_err(|diagnostics| {
            let mut text = diagnostics
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n");
            text.push_str(&format!(
                "\n{} error{} in the hosts database; not starting",
                diagnostics.len(),
                if diagnostics.len() == 1 { "" } else { "s" }
            ));
            text
        }),
        None if settings.group.is_some() => {
            Err("--group needs a hosts database (--hosts FILE)".into())
        }
        None => Ok(hosts::embedded_default(machine)),
    }
}

fn resolve_user(name: &str) -> Result<u32, String> {
    if let Ok(uid) = name.parse::<u32>() {
        return Ok(uid);
    }
    match nix::unistd::User::from_name(name) {
        Ok(Some(user)) => Ok(user.uid.as_raw()),
        Ok(None) => Err(format!("--operator: no user named '{name}'")),
        Err(error) => Err(format!("--operator: cannot look up '{name}': {error}")),
    }
}

/// The disk pool of each cluster: free space of the state directory's
/// filesystem plus each other filesystem named by its hosts' `watchfs`.
fn disk_limits(topology: &Topology, state_dir: &Path) -> Vec<Option<u64>> {
    let free = |path: &Path| -> Option<(u64, u64)> {
        let device = std::fs::metadata(path).ok()?.dev();
        let stat = nix::sys::statvfs::statvfs(path).ok()?;
        Some((
            device,
            stat.blocks_available() as u64 * stat.fragment_size() as u64,
        ))
    };
    let base = free(state_dir);
    topology
        .clusters
        .iter()
        .map(|cluster| {
            let mut seen = Vec::new();
            let mut total = 0u64;
            let dirs = std::iter::once(state_dir.to_path_buf()).chain(
                cluster
                    .hosts
                    .iter()
                    .flat_map(|host| topology.host(*host).watchfs.clone()),
            );
            for dir in dirs {
                match free(&dir) {
                    Some((device, bytes)) if !seen.contains(&device) => {
                        seen.push(device);
                        total = total.saturating_add(bytes);
                    }
                    Some(_) => {}
                    None => {
                        tracing::warn!(path = %dir.display(), "cannot measure a watched filesystem")
                    }
                }
            }
            base.map(|_| total)
        })
        .collect()
}

/// Runs the start-up script (its lines are console inputs to the core;
/// the actions they give are returned for the event loop to carry out):
/// `--rc FILE`, else `scored.rc` in the current
/// directory (only for a daemon that is not root), else in the installation
/// directory (next to the binary, or `../etc` from it). Single-user mode
/// reads none unless one is given.
///
/// A root daemon never looks in its working directory, where anyone who can
/// write there could plant a script for root to run, and takes `--rc` only
/// as an absolute path. Whoever runs the daemon, the script must belong to
/// the daemon's user or root and be writable by nobody else.
fn run_rc(core: &mut Core, settings: &Settings, uid: u32) -> Result<Vec<Action>, String> {
    let path = match &settings.rc {
        Some(path) if uid == 0 && !path.is_absolute() => {
            return Err(format!(
                "--rc {}: a root daemon takes the start-up script only as an absolute path",
                path.display()
            ))
        }
        Some(path) => Some(path.clone()),
        None if settings.single_user => None,
        None => rc_candidates(uid).into_iter().find(|path| path.is_file()),
    };
    let Some(path) = path else {
        return Ok(Vec::new());
    };
    let text = read_rc(&path, uid)?;
    let cred = Cred {
        pid: std::process::id() as i32,
        uid,
        gid: nix::unistd::getegid().as_raw(),
        groups: Vec::new(),
    };
    let run = core.run_script(&cred, &path.display().to_string(), &text, Tick::default());
    for warning in &run.warnings {
        tracing::warn!("{warning}");
    }
    if run.errors.is_empty() {
        tracing::info!(path = %path.display(), "ran the start-up script");
        Ok(run.actions)
    } else {
        let errors: Vec<String> = run.errors.iter().map(ToString::to_string).collect();
        Err(format!(
            "{}\n{} error{} in the start-up script; not starting",
            errors.join("\n"),
            errors.len(),
            if errors.len() == 1 { "" } else { "s" }
        ))
    }
}

fn rc_candidates(uid: u32) -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if uid != 0 {
        candidates.push(PathBuf::from("scored.rc"));
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join("scored.rc"));
        if dir.file_name() == Some(OsStr::new("bin")) {
            if let Some(prefix) = dir.parent() {
                candidates.push(prefix.join("etc/scored.rc"));
            }
        }
    }
    candidates
}

/// Reads the start-up script, refusing one that someone other than the
/// daemon's user or root could have written: its commands run with the
/// daemon's rights. The checks and the read use one open file.
fn read_rc(path: &Path, uid: u32) -> Result<String, String> {
    use std::io::Read;
    let cannot = |error: std::io::Error| format!("cannot read {}: {error}", path.display());
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(format!(
            "refusing the start-up script {}: it belongs to uid {}, not to uid {uid} or root",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "refusing the start-up script {}: it is writable by other users (mode {:o})",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(cannot)?;
    Ok(text)
}
