//! Hosts and clusters: the machine seen as a cluster of clusters
//! (scorehosts.db(5), CLUSTERS).
//!
//! A host is a logical host, a set of CPUs of this machine. Hosts with equal
//! `(cpugen, speed, cores)` form one cluster. The topology is built once at
//! start-up, from the hosts database or as the embedded default, and never
//! changes afterwards. Pure: the machine's CPUs and memory come in as a
//! [`Machine`] value read by the shell.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use crate::ids::{ClusterId, HostId};
use scored_proto::units::CpuSet;

/// What the shell read about this machine at start-up.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// The CPUs that are online.
    pub online_cpus: CpuSet,
    /// Total memory in bytes (sysinfo(2)).
    pub total_memory: u64,
}

/// A logical host.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    /// Its index in [`Topology::hosts`].
    pub id: HostId,
    /// Its name from the hosts database (or `host0`, `host1`, ... by default).
    pub name: String,
    /// The cluster it belongs to.
    pub cluster: ClusterId,
    /// The CPUs its processes are pinned to.
    pub cpus: CpuSet,
    /// How many processes a job places on it when packing (`cores=`).
    pub cores: u32,
    /// Relative speed (`speed=`, default 1).
    pub speed: f64,
    /// CPU kind (`cpugen=`).
    pub cpugen: String,
    /// Memory capacity in bytes (`memory=`, or an even share of the machine).
    pub memory: u64,
    /// Directories whose filesystems count as disk (`watchfs=`).
    pub watchfs: Vec<PathBuf>,
    /// Groups the host belongs to (`group=`).
    pub groups: Vec<String>,
}

/// A set of homogeneous hosts.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    /// Its index in [`Topology::clusters`].
    pub id: ClusterId,
    /// Its name: the `cpugen` of its hosts, made unique with `.N` when
    /// several clusters share a `cpugen`.
    pub name: String,
    /// CPU kind of its hosts.
    pub cpugen: String,
    /// Speed of its hosts.
    pub speed: f64,
    /// Processes per host when packing.
    pub cores: u32,
    /// Its hosts, in database order.
    pub hosts: Vec<HostId>,
}

/// All hosts and clusters of the daemon.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Topology {
    /// Hosts, indexed by [`HostId`].
    pub hosts: Vec<Host>,
    /// Clusters, indexed by [`ClusterId`].
    pub clusters: Vec<Cluster>,
}

impl Topology {
    /// The host with this id.
    pub fn host(&self, id: HostId) -> &Host {
        &self.hosts[id.idx()]
    }

    /// The cluster with this id.
    pub fn cluster(&self, id: ClusterId) -> &Cluster {
        &self.clusters[id.idx()]
    }

    /// Finds a cluster by index (`0`) or name.
    pub fn find_cluster(&self, reference: &scored_proto::command::ClusterRef) -> Option<ClusterId> {
        match reference {
            scored_proto::command::ClusterRef::Index(idx) => {
                self.clusters.get(*idx as usize).map(|cluster| cluster.id)
            }
            scored_proto::command::ClusterRef::Name(name) => self
                .clusters
                .iter()
                .find(|cluster| &cluster.name == name)
                .map(|cluster| cluster.id),
        }
    }
}
