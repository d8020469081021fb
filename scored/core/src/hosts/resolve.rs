//! Resolution: from database records to hosts and clusters (scorehosts.db(5),
//! HOST ATTRIBUTES and CLUSTERS).
//!
//! [`resolve`] reads the host attributes scored uses, checks every value, fills
//! in defaults from the [`Machine`], selects a group and forms clusters of
//! hosts with equal `(cpugen, speed, cores)`. [`embedded_default`] is the
//! topology without a database. Pure: the machine comes in as a value and no
//! file is read here.
//!
//! Syntax errors in values are reported for every host that is neither
//! defective nor outside the database's hosts (network definitions), whether
//! or not `--group` selects it, since they are errors in the file. Checks that
//! depend on the machine (are the CPUs online?) apply only to the selected
//! hosts, so one database can describe groups meant for different machines.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use super::{Database, Diagnostic, Record, Span, MAX_CORES, MAX_DIAGNOSTICS};
use crate::cluster::{Cluster, Host, Machine, Topology};
use crate::ids::{ClusterId, HostId};
use scored_proto::units::{parse_size, quote, CpuSet};

/// The `cpugen` of hosts that do not set one.
pub const DEFAULT_CPUGEN: &str = "default";

/// The attributes scored reads; any other is kept and ignored (scorehosts.db(5)),
/// with a warning, since it is most often a typo.
pub const KNOWN_ATTRIBUTES: &[&str] = &[
    "group", "cpugen", "speed", "cores", "cpus", "memory", "watchfs",
];

/// SCore's own host attributes, which scored ignores silently so that
/// SCore files can be used as they are.
pub const SCORE_ATTRIBUTES: &[&str] = &["network", "smp", "msgbserv"];

/// Builds the topology from the database: the hosts that are not defective,
/// not network definitions and, with `group`, belong to that group.
pub fn resolve(
    database: &Database,
    group: Option<&str>,
    machine: &Machine,
) -> Result<Topology, Vec<Diagnostic>> {
    resolve_with_warnings(database, group, machine).map(|(topology, _)| topology)
}

/// Like [`resolve`], and also returns warnings (`FILE:LINE:COL: warning:
/// ...`) about values that are accepted but may not be meant: an unknown
/// attribute (once per name, at its first use), and a host's `memory=`
/// above the machine's memory.
pub fn resolve_with_warnings(
    database: &Database,
    group: Option<&str>,
    machine: &Machine,
) -> Result<(Topology, Vec<Diagnostic>), Vec<Diagnostic>> {
    let mut diagnostics = Diagnostics::default();
    let mut warnings = Diagnostics::default();
    let hosts: Vec<&Record> = database
        .records
        .iter()
        .filter(|record| !record.defective && !record.is_network())
        .collect();
    if hosts.is_empty() {
        let n_defective = database
            .records
            .iter()
            .filter(|record| record.defective && !record.is_network())
            .count();
        let detail = match n_defective {
            0 => String::new(),
            1 => " (1 defective host is excluded)".to_string(),
            n => format!(" ({n} defective hosts are excluded)"),
        };
        return Err(vec![whole_file(
            database,
            format!("the hosts database defines no host{detail}"),
        )]);
    }
    let specs: Vec<HostSpec> = hosts
        .iter()
        .map(|record| HostSpec::read(database, record, &mut diagnostics))
        .collect();
    let mut unknown_seen: Vec<&str> = Vec::new();
    for record in &hosts {
        for (attr, values, span) in &record.attrs {
            if values.is_empty()
                || KNOWN_ATTRIBUTES.contains(&attr.as_str())
                || SCORE_ATTRIBUTES.contains(&attr.as_str())
                || unknown_seen.contains(&attr.as_str())
            {
                continue;
            }
            unknown_seen.push(attr);
            let hint = match scored_proto::command::parse::closest(attr, KNOWN_ATTRIBUTES) {
                Some(known) => format!(" (did you mean {known}?)"),
                None => String::new(),
            };
            warnings.push(database.diagnostic(
                *span,
                format!(
                    "warning: host {}, attribute {attr}: unknown attribute{hint}; kept and ignored (scored reads {})",
                    quote(&record.name),
                    KNOWN_ATTRIBUTES.join(", ")
                ),
            ));
        }
    }
    let selected: Vec<&HostSpec> = match group {
        None => specs.iter().collect(),
        Some(group) => specs
            .iter()
            .filter(|spec| spec.groups.iter().any(|name| name == group))
            .collect(),
    };
    if let (Some(group), true) = (group, selected.is_empty()) {
        diagnostics.push(whole_file(database, no_such_group(group, &specs)));
        return Err(diagnostics.0);
    }
    for spec in &selected {
        if let (Some(memory), Some(span)) = (spec.memory, spec.memory_span) {
            if memory > machine.total_memory {
                warnings.push(database.diagnostic(
                    span,
                    format!(
                        "warning: host {}, attribute memory: {} is more than this machine's memory ({}); accepted as given",
                        quote(&spec.name),
                        scored_proto::units::format_size(memory),
                        scored_proto::units::format_size(machine.total_memory)
                    ),
                ));
            }
        }
        if let Some((cpus, span)) = &spec.cpus {
            let offline: Vec<u32> = cpus
                .cpus()
                .iter()
                .copied()
                .filter(|cpu| !machine.online_cpus.cpus().contains(cpu))
                .collect();
            if !offline.is_empty() && offline.len() < cpus.len() {
                // A host on CPUs that do not exist would pin its processes
                // to fewer CPUs than its cores suggest.
                diagnostics.push(database.diagnostic(
                    *span,
                    format!(
                        "host {}, attribute cpus: CPU{} {} {} not online (online CPUs: {})",
                        quote(&spec.name),
                        if offline.len() == 1 { "" } else { "s" },
                        CpuSet::from_cpus(offline.iter().copied()),
                        if offline.len() == 1 { "is" } else { "are" },
                        machine.online_cpus
                    ),
                ));
            } else if !cpus
                .cpus()
                .iter()
                .any(|cpu| machine.online_cpus.cpus().contains(cpu))
            {
                diagnostics.push(database.diagnostic(
                    *span,
                    format!(
                        "host {}, attribute cpus: none of CPUs {cpus} is online (online CPUs: {})",
                        quote(&spec.name),
                        if machine.online_cpus.is_empty() {
                            "none".to_string()
                        } else {
                            machine.online_cpus.to_string()
                        }
                    ),
                ));
            }
        }
    }
    if !diagnostics.0.is_empty() {
        return Err(diagnostics.0);
    }
    Ok((build(&selected, machine), warnings.0))
}

/// Why `--group` selected nothing, naming the groups that exist.
fn no_such_group(group: &str, specs: &[HostSpec]) -> String {
    const MAX_LISTED: usize = 20;
    let mut groups: Vec<&str> = specs
        .iter()
        .flat_map(|spec| spec.groups.iter().map(String::as_str))
        .collect();
    groups.sort_unstable();
    groups.dedup();
    if groups.is_empty() {
        return format!(
            "no host belongs to group {}: no host has a group= attribute",
            quote(group)
        );
    }
    let mut listed: Vec<String> = groups.iter().take(MAX_LISTED).map(|g| quote(g)).collect();
    if groups.len() > MAX_LISTED {
        listed.push(format!("and {} more", groups.len() - MAX_LISTED));
    }
    format!(
        "no host belongs to group {}; the groups are {}",
        quote(group),
        listed.join(", ")
    )
}

/// A diagnostic about the database as a whole, at the first line of the main
/// file so that it still reads `FILE:LINE: message`.
fn whole_file(database: &Database, message: String) -> Diagnostic {
    Diagnostic::new(database.main_path(), 1, None, message, None)
}

/// Diagnostics of one resolution, bounded by [`MAX_DIAGNOSTICS`].
#[derive(Default)]
struct Diagnostics(Vec<Diagnostic>);

impl Diagnostics {
    fn push(&mut self, diagnostic: Diagnostic) {
        match self.0.len() {
            n if n < MAX_DIAGNOSTICS => self.0.push(diagnostic),
            n if n == MAX_DIAGNOSTICS => self.0.push(Diagnostic {
                message: format!("too many errors; stopped after {MAX_DIAGNOSTICS}"),
                source_line: None,
                ..diagnostic
            }),
            _ => {}
        }
    }
}

/// What one host record asks for, checked but before defaults.
struct HostSpec {
    name: String,
    groups: Vec<String>,
    cpugen: Option<String>,
    speed: Option<f64>,
    cores: Option<u32>,
    /// The CPUs, and where the first `cpus=` was written.
    cpus: Option<(CpuSet, Span)>,
    memory: Option<u64>,
    /// Where `memory=` was written.
    memory_span: Option<Span>,
    watchfs: Vec<PathBuf>,
}

impl HostSpec {
    /// Reads the attributes scored uses from `record`, reporting every bad
    /// value at its attribute. Bad values are left unset.
    fn read(database: &Database, record: &Record, diagnostics: &mut Diagnostics) -> HostSpec {
        let mut spec = HostSpec {
            name: record.name.clone(),
            groups: Vec::new(),
            cpugen: None,
            speed: None,
            cores: None,
            cpus: None,
            memory: None,
            memory_span: None,
            watchfs: Vec::new(),
        };
        let mut report = |span: Span, attr: &str, reason: String| {
            diagnostics.push(database.diagnostic(
                span,
                format!("host {}, attribute {attr}: {reason}", quote(&record.name)),
            ));
        };
        let mut cpu_list: Vec<u32> = Vec::new();
        // Each one-value attribute given several values is reported once.
        let mut reported: Vec<&str> = Vec::new();
        for (attr, values, span) in &record.attrs {
            // A word without `=` (an SCore flag or network reference) is kept
            // by the parser but means nothing to scored.
            if values.is_empty() {
                continue;
            }
            match attr.as_str() {
                "group" => {
                    for value in values {
                        if value.is_empty() {
                            report(*span, attr, "empty group name".into());
                        } else if !spec.groups.contains(value) {
                            spec.groups.push(value.clone());
                        }
                    }
                }
                "cpus" => match CpuSet::parse(&values.join(",")) {
                    Ok(cpus) => {
                        cpu_list.extend(cpus.cpus());
                        if spec.cpus.is_none() {
                            spec.cpus = Some((CpuSet::default(), *span));
                        }
                    }
                    Err(error) => report(*span, attr, error.to_string()),
                },
                "watchfs" => {
                    for value in values {
                        if value.starts_with('/') {
                            spec.watchfs.push(PathBuf::from(value));
                        } else {
                            report(
                                *span,
                                attr,
                                format!("{} is not an absolute directory path", quote(value)),
                            );
                        }
                    }
                }
                "cpugen" | "speed" | "cores" | "memory" => {
                    let already = match attr.as_str() {
                        "cpugen" => spec.cpugen.is_some(),
                        "speed" => spec.speed.is_some(),
                        "cores" => spec.cores.is_some(),
                        _ => spec.memory.is_some(),
                    };
                    if already || values.len() > 1 {
                        if reported.contains(&attr.as_str()) {
                            continue;
                        }
                        reported.push(attr);
                        let quoted: Vec<String> = record.values(attr).map(quote).collect();
                        report(
                            *span,
                            attr,
                            format!(
                                "several values ({}); {attr} takes one value",
                                quoted.join(", ")
                            ),
                        );
                        continue;
                    }
                    let value = &values[0];
                    match single(attr, value) {
                        Ok(Single::Cpugen(cpugen)) => spec.cpugen = Some(cpugen),
                        Ok(Single::Speed(speed)) => spec.speed = Some(speed),
                        Ok(Single::Cores(cores)) => spec.cores = Some(cores),
                        Ok(Single::Memory(memory)) => {
                            spec.memory = Some(memory);
                            spec.memory_span = Some(*span);
                        }
                        Err(reason) => report(*span, attr, reason),
                    }
                }
                _ => {}
            }
        }
        if let Some((cpus, _)) = &mut spec.cpus {
            *cpus = CpuSet::from_cpus(cpu_list);
        }
        spec
    }
}

/// A checked value of a one-value attribute.
enum Single {
    Cpugen(String),
    Speed(f64),
    Cores(u32),
    Memory(u64),
}

/// Checks the value of `cpugen=`, `speed=`, `cores=` or `memory=`; the error
/// names the value.
fn single(attr: &str, value: &str) -> Result<Single, String> {
    match attr {
        "cpugen" if value.is_empty() => {
            Err("empty cpugen: expected a CPU kind such as x86_64".into())
        }
        "cpugen" => Ok(Single::Cpugen(value.to_string())),
        "speed" => match value.parse::<f64>() {
            Ok(speed) if speed.is_finite() && speed > 0.0 => Ok(Single::Speed(speed)),
            _ => Err(format!(
                "invalid speed {}: expected a positive number such as 1 or 2.5",
                quote(value)
            )),
        },
        "cores" => match value.parse::<u32>() {
            Ok(cores)
                if (1..=MAX_CORES).contains(&cores)
                    && value.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Ok(Single::Cores(cores))
            }
            _ => Err(format!(
                "invalid cores {}: expected a whole number from 1 to {MAX_CORES}",
                quote(value)
            )),
        },
        _ => match parse_size(value) {
            Ok(0) => Err(format!(
                "invalid memory {}: a host needs more than 0 bytes",
                quote(value)
            )),
            Ok(memory) => match scored_proto::units::tiny_limit(memory) {
                Some(tiny) => Err(format!("invalid memory {}: {tiny}", quote(value))),
                None => Ok(Single::Memory(memory)),
            },
            Err(error) => Err(error.to_string()),
        },
    }
}

/// Fills in defaults and forms clusters, in database order.
fn build(selected: &[&HostSpec], machine: &Machine) -> Topology {
    let n_hosts = selected.len().max(1) as u64;
    let default_memory = machine.total_memory / n_hosts;
    let mut topology = Topology::default();
    for (idx, spec) in selected.iter().enumerate() {
        let id = HostId(idx as u32);
        let cpus = spec
            .cpus
            .as_ref()
            .map_or_else(|| machine.online_cpus.clone(), |(cpus, _)| cpus.clone());
        let cpugen = spec
            .cpugen
            .clone()
            .unwrap_or_else(|| DEFAULT_CPUGEN.to_string());
        let speed = spec.speed.unwrap_or(1.0);
        // A host always runs at least one process, even on a machine that
        // reported no online CPU.
        let cores = spec
            .cores
            .unwrap_or_else(|| (cpus.len() as u32).clamp(1, MAX_CORES));
        let cluster = match topology.clusters.iter().find(|cluster| {
            cluster.cpugen == cpugen && cluster.speed == speed && cluster.cores == cores
        }) {
            Some(cluster) => cluster.id,
            None => {
                let cluster_id = ClusterId(topology.clusters.len() as u32);
                topology.clusters.push(Cluster {
                    id: cluster_id,
                    name: String::new(),
                    cpugen: cpugen.clone(),
                    speed,
                    cores,
                    hosts: Vec::new(),
                });
                cluster_id
            }
        };
        topology.clusters[cluster.idx()].hosts.push(id);
        topology.hosts.push(Host {
            id,
            name: spec.name.clone(),
            cluster,
            cpus,
            cores,
            speed,
            cpugen,
            memory: spec.memory.unwrap_or(default_memory),
            watchfs: spec.watchfs.clone(),
            groups: spec.groups.clone(),
        });
    }
    name_clusters(&mut topology.clusters);
    topology
}

/// Names each cluster after its `cpugen`, adding `.N` (its index) when other
/// clusters share that `cpugen`, or when the plain `cpugen` would read like
/// such a name (a `cpugen` of `x86.1` beside two `x86` clusters), so that names
/// stay unique for the console's cluster references.
///
/// The second rule repeats until no plain name is taken, because a renamed
/// cluster can take the plain name of another one (`a.0` becomes `a.0.2`
/// beside a `cpugen` of `a.0.2`). It ends: each round makes at least one
/// plain name suffixed, and suffixed names never meet, since the index
/// after the last `.` tells their clusters apart.
fn name_clusters(clusters: &mut [Cluster]) {
    let shared = |cpugen: &str| clusters.iter().filter(|c| c.cpugen == cpugen).count() > 1;
    let mut names: Vec<String> = clusters
        .iter()
        .map(|cluster| {
            if shared(&cluster.cpugen) {
                format!("{}.{}", cluster.cpugen, cluster.id.0)
            } else {
                cluster.cpugen.clone()
            }
        })
        .collect();
    loop {
        let renamed: Vec<String> = names
            .iter()
            .zip(clusters.iter())
            .map(|(name, cluster)| {
                let taken = names.iter().filter(|other| *other == name).count() > 1;
                if taken && *name == cluster.cpugen {
                    format!("{}.{}", cluster.cpugen, cluster.id.0)
                } else {
                    name.clone()
                }
            })
            .collect();
        if renamed == names {
            break;
        }
        names = renamed;
    }
    for (cluster, name) in clusters.iter_mut().zip(names) {
        cluster.name = name;
    }
}

/// The topology without a hosts database: one cluster named `default`, one
/// host per online CPU (`host0`, `host1`, ...) with that CPU alone and an even
/// share of the memory. A machine that reports no online CPU gets one host on
/// CPU 0, so that scored still starts.
pub fn embedded_default(machine: &Machine) -> Topology {
    let cpus: Vec<u32> = if machine.online_cpus.is_empty() {
        vec![0]
    } else {
        machine.online_cpus.cpus().to_vec()
    };
    let memory = machine.total_memory / cpus.len() as u64;
    let cluster_id = ClusterId(0);
    let hosts: Vec<Host> = cpus
        .iter()
        .enumerate()
        .map(|(idx, &cpu)| Host {
            id: HostId(idx as u32),
            name: format!("host{idx}"),
            cluster: cluster_id,
            cpus: CpuSet::from_cpus([cpu]),
            cores: 1,
            speed: 1.0,
            cpugen: DEFAULT_CPUGEN.to_string(),
            memory,
            watchfs: Vec::new(),
            groups: Vec::new(),
        })
        .collect();
    let cluster = Cluster {
        id: cluster_id,
        name: DEFAULT_CPUGEN.to_string(),
        cpugen: DEFAULT_CPUGEN.to_string(),
        speed: 1.0,
        cores: 1,
        hosts: hosts.iter().map(|host| host.id).collect(),
    };
    Topology {
        hosts,
        clusters: vec![cluster],
    }
}
