//! The actuator's part of an in-place restart: what the new image cannot
//! learn from the keepers themselves. The jobs' processes stay with their
//! keepers across the restart; the new image takes the keepers over as a
//! daemon that takes over from a dead one does (`keepers.rs`), from the
//! identities recorded here.
#![forbid(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

use serde::{Deserialize, Serialize};

use super::{ActuatorConfig, OsActuator};
use crate::keeper::zygote::Zygote;
use scored_core::cluster::Topology;

/// The actuator's state.
#[derive(Debug, Serialize, Deserialize)]
pub struct ActuatorSnapshot {
    /// The descriptor limits jobs get: those scored was first started
    /// with, which the new image cannot see (it starts with the raised ones).
    #[serde(default)]
    job_nofile: Option<(u64, u64)>,
    /// The keepers: job, pid, start time.
    #[serde(default)]
    keepers: Vec<(u64, i32, u64)>,
}

impl ActuatorSnapshot {
    /// The keepers recorded: job, pid, start time.
    pub fn keepers(&self) -> &[(u64, i32, u64)] {
        &self.keepers
    }
}

impl OsActuator {
    /// The state to hand over, and the descriptors that must survive execve
    /// (none: the keepers' links close, and the new image connects again).
    pub fn snapshot(&self) -> (ActuatorSnapshot, Vec<RawFd>) {
        (
            ActuatorSnapshot {
                job_nofile: self.config.job_nofile,
                keepers: self.keepers.identities(),
            },
            Vec::new(),
        )
    }

    /// An actuator for the new image of an in-place restart, with the
    /// descriptor limits jobs were given; its keepers are taken over next.
    pub fn resume(
        mut config: ActuatorConfig,
        topology: &Topology,
        snapshot: &ActuatorSnapshot,
        zygote: Option<Zygote>,
    ) -> io::Result<OsActuator> {
        config.job_nofile = snapshot.job_nofile.or(config.job_nofile);
        OsActuator::new(config, topology, zygote)
    }
}
