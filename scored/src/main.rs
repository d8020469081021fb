//! The scored daemon's entry point: read the settings, build the topology
//! and the core, run the start-up script, then hand over to the event loop.
//!
//! Every start-up error is printed once, prefixed `scored:`, and scored
//! exits with status 1 without listening.

use std::ffi::OsStr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use clap::Parser;
use tracing_subscriber::EnvFilter;

use scored::actuator::{self, ActuatorConfig, OsActuator};
use scored::cluster::{Machine, Topology};
use scored::config::{self, Flags, Settings};
use scored::core::{Core, CoreConfig};
use scored::evloop::{self, Daemon, LoopConfig};
use scored::ids::{Cred, Tick};
use scored::units::CpuSet;
use scored::{exitcode, hosts, paths};

fn main() {
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
    let file = match &flags.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
            config::parse_file(path, &text)?
        }
        None => Default::default(),
    };
    let settings = config::resolve(flags, file)?;
    init_logging(settings.verbose);
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
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(if uid == 0 { 0o755 } else { 0o700 })
        .create(&state_dir)
        .map_err(|error| {
            format!(
                "cannot create the state directory {}: {error}",
                state_dir.display()
            )
        })?;
    actuator::check_private_dir(&state_dir, uid, true)
        .map_err(|message| format!("state directory: {message}"))?;

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
        kill_grace: settings.kill_grace,
        disk,
    };
    let mut core = Core::new(core_config, topology.clone(), memory_limits);
    run_rc(&mut core, &settings, uid)?;

    let fd_limits = evloop::raise_fd_limit();
    // Everything that can fail comes before the socket exists, so that a
    // failed start leaves no socket behind.
    let actuator = OsActuator::new(
        ActuatorConfig {
            state_dir: state_dir.clone(),
            use_cgroups: settings.cgroups,
            job_nofile: (fd_limits.current != fd_limits.original.0).then_some(fd_limits.original),
        },
        &topology,
    )
    .map_err(|error| format!("cannot prepare to run jobs: {error}"))?;
    let listener = evloop::bind(&socket, uid)?;
    if let Err(error) = actuator::become_subreaper() {
        tracing::warn!(%error, "cannot become the subreaper of job descendants");
    }
    let priority = actuator::elevate_priority();
    tracing::info!(
        socket = %socket.display(),
        state_dir = %state_dir.display(),
        hosts = topology.hosts.len(),
        clusters = topology.clusters.len(),
        timeslice = %scored::units::format_duration(core.timeslice()),
        %priority,
        max_connections = loop_config_max(&settings, fd_limits.current),
        single_user = settings.single_user,
        "scored is listening"
    );
    let loop_config = LoopConfig {
        socket: socket.clone(),
        single_user: settings.single_user,
        daemon_uid: uid,
        max_connections: loop_config_max(&settings, fd_limits.current),
        max_connections_per_user: settings.max_connections_per_user,
        request_timeout: settings.request_timeout,
    };
    let daemon = Daemon::new(core, actuator, listener, loop_config, signals)
        .map_err(|error| format!("cannot start the event loop: {error}"))?;
    daemon
        .run()
        .map_err(|error| format!("event loop failed: {error}"))
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
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty()),
        )
        .with_writer(std::io::stderr)
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
        Some(path) => {
            hosts::load_topology(path, settings.group.as_deref(), machine).map_err(|diagnostics| {
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
            })
        }
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

/// Runs the start-up script: `--rc FILE`, else `scored.rc` in the current
/// directory, else in the installation directory (next to the binary, or
/// `../etc` from it). Single-user mode reads none unless one is given.
fn run_rc(core: &mut Core, settings: &Settings, uid: u32) -> Result<(), String> {
    let path = match &settings.rc {
        Some(path) => Some(path.clone()),
        None if settings.single_user => None,
        None => rc_candidates().into_iter().find(|path| path.is_file()),
    };
    let Some(path) = path else { return Ok(()) };
    let text = std::fs::read_to_string(&path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let cred = Cred {
        pid: std::process::id() as i32,
        uid,
        gid: nix::unistd::getegid().as_raw(),
        groups: Vec::new(),
    };
    let mut errors = Vec::new();
    for (idx, line) in text.lines().enumerate() {
        if let Ok(Some(scored::command::Command::Shutdown { .. })) =
            scored::command::parse_line(line)
        {
            errors.push(format!(
                "{}:{}: shutdown cannot be used in a start-up script",
                path.display(),
                idx + 1
            ));
            continue;
        }
        if let Err(message) = evloop::run_line(core, &cred, line, Tick::default()) {
            errors.push(format!("{}:{}: {message}", path.display(), idx + 1));
        }
    }
    if errors.is_empty() {
        tracing::info!(path = %path.display(), "ran the start-up script");
        Ok(())
    } else {
        Err(format!(
            "{}\n{} error{} in the start-up script; not starting",
            errors.join("\n"),
            errors.len(),
            if errors.len() == 1 { "" } else { "s" }
        ))
    }
}

fn rc_candidates() -> Vec<PathBuf> {
    let mut candidates = vec![PathBuf::from("scored.rc")];
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
