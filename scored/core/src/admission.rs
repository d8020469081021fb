//! Admission ("login", scored(8) ADMISSION AND LIMITS): which cluster a job goes
//! to, on which hosts, with which limits, or why it cannot be admitted.
//!
//! A job's memory limit is the cluster's per-host limit times its queue's
//! percentage, or the user's own value if smaller; likewise for disk. A job
//! is assumed to use its whole limit, so the limits of admitted jobs are
//! reserved: on every host of the job for memory, from the cluster's pool
//! for disk. The mechanism applies only where both the cluster limit and
//! the queue percentage are set; memory and disk are independent.
//!
//! Pure: the ledger of reservations is plain data owned by the core.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;

use crate::cluster::Topology;
use crate::ids::{ClusterId, HostId};
use crate::job::{JobLimits, ProcRequest};
use crate::queue::Queue;
use scored_proto::submit::{self, SubmitError};
use scored_proto::units::format_size;

/// A cluster's limits (`cluster C limit ...`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ClusterLimits {
    /// Memory per host, in bytes.
    pub memory: Option<u64>,
    /// Disk for the whole cluster, in bytes.
    pub disk: Option<u64>,
    /// Admitted jobs.
    pub jobs: Option<u64>,
}

/// What admitted jobs hold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ledger {
    /// Memory reserved on each host.
    pub host_memory: Vec<u64>,
    /// Admitted processes on each host (for placement and load).
    pub host_procs: Vec<u64>,
    /// Disk reserved in each cluster.
    pub cluster_disk: Vec<u64>,
    /// Admitted jobs in each cluster.
    pub cluster_jobs: Vec<u64>,
    /// Admitted processes in each cluster.
    pub cluster_procs: Vec<u64>,
    /// The hosts of each cluster in placement order: fewest admitted
    /// processes first, then the lowest number (kept so that placing a
    /// job on a machine of many hosts costs what it takes, not a sort).
    pub by_load: Vec<BTreeSet<(u64, HostId)>>,
}

impl Ledger {
    /// An empty ledger for this topology.
    pub fn new(topology: &Topology) -> Ledger {
        Ledger {
            host_memory: vec![0; topology.hosts.len()],
            host_procs: vec![0; topology.hosts.len()],
            cluster_disk: vec![0; topology.clusters.len()],
            cluster_jobs: vec![0; topology.clusters.len()],
            cluster_procs: vec![0; topology.clusters.len()],
            by_load: topology
                .clusters
                .iter()
                .map(|cluster| cluster.hosts.iter().map(|host| (0, *host)).collect())
                .collect(),
        }
    }

    /// Changes a host's admitted processes, keeping `by_load` in order.
    fn set_procs(&mut self, cluster: ClusterId, host: HostId, procs: u64) {
        let slot = &mut self.host_procs[host.idx()];
        if let Some(order) = self.by_load.get_mut(cluster.idx()) {
            order.remove(&(*slot, host));
            order.insert((procs, host));
        }
        *slot = procs;
    }

    /// Books an admitted job.
    pub fn reserve(&mut self, placement: &Placement) {
        self.apply(placement, true);
    }

    /// Returns what a finished job held.
    pub fn release(&mut self, placement: &Placement) {
        self.apply(placement, false);
    }

    /// Books the hosts chosen for a job admitted without them (an exclusive
    /// queue's job, whose hosts are chosen when it starts): its processes
    /// and its memory on each host. Cluster totals were booked at admission.
    pub fn bind(
        &mut self,
        cluster: ClusterId,
        hosts: &[HostId],
        layout: &[u32],
        memory: Option<u64>,
    ) {
        for (host, procs) in hosts.iter().zip(layout) {
            let slot = host.idx();
            let procs = self.host_procs[slot].saturating_add(u64::from(*procs));
            self.set_procs(cluster, *host, procs);
            self.host_memory[slot] = self.host_memory[slot].saturating_add(memory.unwrap_or(0));
        }
    }

    /// Moves the cluster totals an admitted job without hosts booked from
    /// the cluster admission chose to the one it is placed on (its layout
    /// on each).
    pub fn move_job(
        &mut self,
        (from, from_layout): (ClusterId, &[u32]),
        (to, to_layout): (ClusterId, &[u32]),
        disk: Option<u64>,
    ) {
        let procs = |layout: &[u32]| layout.iter().map(|&n| u64::from(n)).sum::<u64>();
        let (from, to) = (from.idx(), to.idx());
        let disk = disk.unwrap_or(0);
        self.cluster_disk[from] = self.cluster_disk[from].saturating_sub(disk);
        self.cluster_jobs[from] = self.cluster_jobs[from].saturating_sub(1);
        self.cluster_procs[from] = self.cluster_procs[from].saturating_sub(procs(from_layout));
        self.cluster_disk[to] = self.cluster_disk[to].saturating_add(disk);
        self.cluster_jobs[to] = self.cluster_jobs[to].saturating_add(1);
        self.cluster_procs[to] = self.cluster_procs[to].saturating_add(procs(to_layout));
    }

    /// Undoes [`Ledger::bind`].
    pub fn unbind(
        &mut self,
        cluster: ClusterId,
        hosts: &[HostId],
        layout: &[u32],
        memory: Option<u64>,
    ) {
        for (host, procs) in hosts.iter().zip(layout) {
            let slot = host.idx();
            let procs = self.host_procs[slot].saturating_sub(u64::from(*procs));
            self.set_procs(cluster, *host, procs);
            self.host_memory[slot] = self.host_memory[slot].saturating_sub(memory.unwrap_or(0));
        }
    }

    /// Sets a host's admitted processes and reserved memory back to what
    /// they were (a rollback of the panic checkpoint, `crate::undo`).
    pub fn restore_host(&mut self, cluster: ClusterId, host: HostId, procs: u64, memory: u64) {
        self.set_procs(cluster, host, procs);
        self.host_memory[host.idx()] = memory;
    }

    /// Whether `host` has room for `need` more bytes under the per-host `limit`.
    pub fn memory_fits(&self, host: HostId, need: Option<u64>, limit: Option<u64>) -> bool {
        match (need, limit) {
            (Some(need), Some(limit)) => self.host_memory[host.idx()].saturating_add(need) <= limit,
            _ => true,
        }
    }

    fn apply(&mut self, placement: &Placement, add: bool) {
        let change = |slot: &mut u64, amount: u64| {
            *slot = if add {
                slot.saturating_add(amount)
            } else {
                slot.saturating_sub(amount)
            };
        };
        for (host, procs) in placement.hosts.iter().zip(&placement.layout) {
            let mut host_procs = self.host_procs[host.idx()];
            change(&mut host_procs, u64::from(*procs));
            self.set_procs(placement.cluster, *host, host_procs);
            change(
                &mut self.host_memory[host.idx()],
                placement.limits.memory.unwrap_or(0),
            );
        }
        let cluster = placement.cluster.idx();
        change(
            &mut self.cluster_disk[cluster],
            placement.limits.disk.unwrap_or(0),
        );
        change(&mut self.cluster_jobs[cluster], 1);
        change(
            &mut self.cluster_procs[cluster],
            placement.layout.iter().map(|&n| u64::from(n)).sum(),
        );
    }
}

/// Where and with which limits a job is admitted.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// The cluster chosen; the hosts are all in it.
    pub cluster: ClusterId,
    /// The hosts, in slot order.
    pub hosts: Vec<HostId>,
    /// Processes per host slot.
    pub layout: Vec<u32>,
    /// The job's limits (what it reserves).
    pub limits: JobLimits,
}

/// The outcome of an admission attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Admit the job here.
    Admit(Placement),
    /// Resources are short now but could free up; the sentence says what.
    Short(String),
    /// No cluster can ever hold the job; the sentence says what was asked and what exists.
    TooBig(String),
}

/// What the job asks, for admission.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ask {
    /// Processes and placement.
    pub procs: ProcRequest,
    /// User's memory limit per host.
    pub memory: Option<u64>,
    /// User's disk limit.
    pub disk: Option<u64>,
}

/// Decides where a job goes. `queue` supplies the percentages and the CPU
/// time limit the job inherits.
///
/// In a gang queue without a multiprogramming level the job's hosts are
/// chosen now: it keeps its place in the time-sharing matrix for life. In
/// an exclusive queue, and a gang queue with a level, they are left empty,
/// and the cluster only booked: the decision places the job when it starts,
/// on the free hosts of any cluster that can take it then (so that
/// first-come-first-served and backfilling are not defeated by
/// fragmentation, nor a job kept waiting for one cluster); admission then
/// checks the cluster's job and disk limits, and the per-host memory limit
/// only against an empty host.
pub fn decide(
    ask: Ask,
    queue: &Queue,
    topology: &Topology,
    limits: &[ClusterLimits],
    ledger: &Ledger,
) -> Decision {
    let mut fits_in_principle = Vec::new();
    let mut too_big = Vec::new();
    for cluster in &topology.clusters {
        let cluster_limits = limits.get(cluster.id.idx()).copied().unwrap_or_default();
        match ideal_fit(ask, queue, topology, cluster.id, cluster_limits) {
            Ok(job_limits) => fits_in_principle.push((cluster.id, job_limits)),
            Err(why) => too_big.push(why),
        }
    }
    if fits_in_principle.is_empty() {
        return Decision::TooBig(too_big.join("; "));
    }
    let mut best: Option<(Placement, f64, f64)> = None;
    let mut shortages = Vec::new();
    for (cluster_id, job_limits) in fits_in_principle {
        let cluster_limits = limits.get(cluster_id.idx()).copied().unwrap_or_default();
        match place_now(
            ask,
            topology,
            cluster_id,
            cluster_limits,
            ledger,
            job_limits,
            !queue.starts_late(),
        ) {
            Ok(placement) => {
                let cluster = topology.cluster(cluster_id);
                let slots = cluster.hosts.len() as f64 * f64::from(cluster.cores.max(1));
                let load = ledger.cluster_procs[cluster_id.idx()] as f64 / slots / cluster.speed;
                let better = match &best {
                    None => true,
                    Some((_, best_load, best_speed)) => {
                        load < *best_load || (load == *best_load && cluster.speed > *best_speed)
                    }
                };
                if better {
                    best = Some((placement, load, cluster.speed));
                }
            }
            Err(why) => shortages.push(why),
        }
    }
    match best {
        Some((placement, _, _)) => Decision::Admit(placement),
        None => Decision::Short(shortages.join("; ")),
    }
}

/// The job's limits in this cluster, if the cluster could hold the job when empty.
fn ideal_fit(
    ask: Ask,
    queue: &Queue,
    topology: &Topology,
    cluster_id: ClusterId,
    cluster_limits: ClusterLimits,
) -> Result<JobLimits, String> {
    let cluster = topology.cluster(cluster_id);
    // Requests from clients passed the submission validator already; the
    // replay builds its own, so the validator's rule and words apply here
    // too rather than a copy of them.
    if let Err(problem) = submit::check_counts(ask.procs.into()) {
        let asked = ask.procs.describe();
        return Err(SubmitError::Procs { asked, problem }.to_string());
    }
    let layout = ask
        .procs
        .layout(cluster.cores)
        .expect("a request of at least one process has a layout");
    let n_hosts = cluster.hosts.len();
    let per_host = layout.iter().copied().max().unwrap_or(0);
    if layout.len() > n_hosts || per_host > cluster.cores {
        return Err(format!(
            "{} needs {} host{} with {} process{} each, but cluster {} has {} host{} with {} core{}",
            ask.procs.describe(),
            layout.len(),
            plural(layout.len() as u64),
            per_host,
            if per_host == 1 { "" } else { "es" },
            cluster.name,
            n_hosts,
            plural(n_hosts as u64),
            cluster.cores,
            plural(u64::from(cluster.cores)),
        ));
    }
    let job_limits = JobLimits {
        cputime: queue.cputime,
        memory: share(cluster_limits.memory, queue.memory_pct, ask.memory),
        disk: share(cluster_limits.disk, queue.disk_pct, ask.disk),
    };
    if cluster_limits.jobs == Some(0) {
        return Err(format!(
            "cluster {} admits no job (jobs limit 0)",
            cluster.name
        ));
    }
    if let (Some(need), Some(limit)) = (job_limits.memory, cluster_limits.memory) {
        if need > limit {
            return Err(format!(
                "memory: {} per host exceeds cluster {}'s limit of {}",
                format_size(need),
                cluster.name,
                format_size(limit)
            ));
        }
    }
    if let (Some(need), Some(limit)) = (job_limits.disk, cluster_limits.disk) {
        if need > limit {
            return Err(format!(
                "disk: {} exceeds cluster {}'s limit of {}",
                format_size(need),
                cluster.name,
                format_size(limit)
            ));
        }
    }
    Ok(job_limits)
}

/// A job's limit from the cluster's limit and the queue's share, or the
/// user's value if smaller; `None` unless both cluster and queue limits are set.
pub fn share(cluster_limit: Option<u64>, queue_pct: Option<f64>, user: Option<u64>) -> Option<u64> {
    let (limit, pct) = (cluster_limit?, queue_pct?);
    let from_queue = ((limit as f64) * pct / 100.0).floor() as u64;
    Some(match user {
        Some(user) => user.min(from_queue),
        None => from_queue,
    })
}

/// Places the job in the cluster with what is free now.
fn place_now(
    ask: Ask,
    topology: &Topology,
    cluster_id: ClusterId,
    cluster_limits: ClusterLimits,
    ledger: &Ledger,
    job_limits: JobLimits,
    bind: bool,
) -> Result<Placement, String> {
    let cluster = topology.cluster(cluster_id);
    let layout = ask.procs.layout(cluster.cores).unwrap_or_default();
    if let Some(max_jobs) = cluster_limits.jobs {
        let admitted = ledger.cluster_jobs[cluster_id.idx()];
        if admitted >= max_jobs {
            return Err(format!(
                "jobs: cluster {} already has {admitted} admitted job{} (limit {max_jobs})",
                cluster.name,
                plural(admitted)
            ));
        }
    }
    if let (Some(need), Some(limit)) = (job_limits.disk, cluster_limits.disk) {
        let free = limit.saturating_sub(ledger.cluster_disk[cluster_id.idx()]);
        if need > free {
            return Err(format!(
                "disk: job needs {}, cluster {} has {} free of {}",
                format_size(need),
                cluster.name,
                format_size(free),
                format_size(limit)
            ));
        }
    }
    if !bind {
        return Ok(Placement {
            cluster: cluster_id,
            hosts: Vec::new(),
            layout,
            limits: job_limits,
        });
    }
    let fits = |host: &HostId| match (job_limits.memory, cluster_limits.memory) {
        (Some(need), Some(limit)) => ledger.host_memory[host.idx()].saturating_add(need) <= limit,
        _ => true,
    };
    // The hosts with the fewest admitted processes, ties to the lowest
    // index, so that independent jobs land on disjoint hosts when they can.
    let mut candidates: Vec<HostId> = ledger
        .by_load
        .get(cluster_id.idx())
        .into_iter()
        .flatten()
        .map(|(_, host)| *host)
        .filter(fits)
        .take(layout.len())
        .collect();
    if candidates.len() < layout.len() {
        let candidates: Vec<HostId> = cluster.hosts.iter().copied().filter(fits).collect();
        let need = job_limits.memory.unwrap_or(0);
        let limit = cluster_limits.memory.unwrap_or(0);
        return Err(format!(
            "memory: job needs {} on each of {} host{}, cluster {} has that much free on {} host{} (limit {} per host)",
            format_size(need),
            layout.len(),
            plural(layout.len() as u64),
            cluster.name,
            candidates.len(),
            plural(candidates.len() as u64),
            format_size(limit)
        ));
    }
    // The job keeps this list for its lifetime: hold only its own hosts.
    candidates.shrink_to_fit();
    Ok(Placement {
        cluster: cluster_id,
        hosts: candidates,
        layout,
        limits: job_limits,
    })
}

fn plural(count: u64) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Cluster, Host};
    use scored_proto::command::QueueMode;
    use scored_proto::units::CpuSet;

    fn topology(clusters: &[(&str, f64, usize)]) -> Topology {
        let mut topo = Topology::default();
        for (idx, (name, speed, n_hosts)) in clusters.iter().enumerate() {
            let mut cluster = Cluster {
                id: ClusterId(idx as u32),
                name: name.to_string(),
                cpugen: name.to_string(),
                speed: *speed,
                cores: 1,
                hosts: Vec::new(),
            };
            for _ in 0..*n_hosts {
                let id = HostId(topo.hosts.len() as u32);
                topo.hosts.push(Host {
                    id,
                    name: format!("h{}", id.0),
                    cluster: cluster.id,
                    cpus: CpuSet::from_cpus([0]),
                    cores: 1,
                    speed: *speed,
                    cpugen: name.to_string(),
                    memory: 1 << 30,
                    watchfs: Vec::new(),
                    groups: Vec::new(),
                });
                cluster.hosts.push(id);
            }
            topo.clusters.push(cluster);
        }
        topo
    }

    fn ask(nodes: u32) -> Ask {
        Ask {
            procs: ProcRequest::Nodes(nodes),
            memory: None,
            disk: None,
        }
    }

    fn hosts(decision: &Decision) -> Vec<u32> {
        match decision {
            Decision::Admit(placement) => placement.hosts.iter().map(|h| h.0).collect(),
            other => panic!("not admitted: {other:?}"),
        }
    }

    #[test]
    fn least_loaded_hosts_first() {
        let topo = topology(&[("a", 1.0, 3)]);
        let queue = Queue::new(1, QueueMode::Gang);
        let limits = vec![ClusterLimits::default()];
        let mut ledger = Ledger::new(&topo);
        let first = decide(ask(1), &queue, &topo, &limits, &ledger);
        assert_eq!(hosts(&first), vec![0]);
        if let Decision::Admit(p) = &first {
            ledger.reserve(p);
        }
        assert_eq!(
            hosts(&decide(ask(2), &queue, &topo, &limits, &ledger)),
            vec![1, 2]
        );
    }

    #[test]
    fn equal_load_goes_to_the_faster_cluster() {
        let topo = topology(&[("slow", 1.0, 2), ("fast", 2.0, 2)]);
        let queue = Queue::new(1, QueueMode::Gang);
        let limits = vec![ClusterLimits::default(); 2];
        let ledger = Ledger::new(&topo);
        match decide(ask(1), &queue, &topo, &limits, &ledger) {
            Decision::Admit(p) => assert_eq!(p.cluster, ClusterId(1)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn too_big_names_what_was_asked_and_what_exists() {
        let topo = topology(&[("a", 1.0, 2)]);
        let queue = Queue::new(1, QueueMode::Gang);
        let decision = decide(
            ask(3),
            &queue,
            &topo,
            &[ClusterLimits::default()],
            &Ledger::new(&topo),
        );
        assert_eq!(
            decision,
            Decision::TooBig(
                "nodes=3 needs 3 hosts with 1 process each, but cluster a has 2 hosts with 1 core"
                    .into()
            )
        );
    }

    /// The replay builds requests without the submission validator; a
    /// request of no processes is still refused, in the validator's words.
    #[test]
    fn a_request_of_no_processes_is_too_big_in_the_validators_words() {
        let topo = topology(&[("a", 1.0, 2)]);
        let queue = Queue::new(1, QueueMode::Gang);
        let decision = decide(
            ask(0),
            &queue,
            &topo,
            &[ClusterLimits::default()],
            &Ledger::new(&topo),
        );
        assert_eq!(
            decision,
            Decision::TooBig("nodes=0 asks for no processes: the count must be at least 1".into())
        );
    }

    #[test]
    fn memory_share_admits_two_then_is_short() {
        let topo = topology(&[("a", 1.0, 1)]);
        let mut queue = Queue::new(1, QueueMode::Gang);
        queue.memory_pct = Some(50.0);
        let limits = vec![ClusterLimits {
            memory: Some(1 << 30),
            ..Default::default()
        }];
        let mut ledger = Ledger::new(&topo);
        for _ in 0..2 {
            match decide(ask(1), &queue, &topo, &limits, &ledger) {
                Decision::Admit(p) => {
                    assert_eq!(p.limits.memory, Some(1 << 29));
                    ledger.reserve(&p);
                }
                other => panic!("{other:?}"),
            }
        }
        match decide(ask(1), &queue, &topo, &limits, &ledger) {
            Decision::Short(why) => assert!(why.starts_with("memory: job needs 512M"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn share_needs_both_limits_and_takes_the_smaller_user_value() {
        assert_eq!(share(Some(1000), Some(50.0), None), Some(500));
        assert_eq!(share(Some(1000), Some(50.0), Some(100)), Some(100));
        assert_eq!(share(Some(1000), Some(50.0), Some(900)), Some(500));
        assert_eq!(share(None, Some(50.0), Some(100)), None);
        assert_eq!(share(Some(1000), None, Some(100)), None);
    }
}
