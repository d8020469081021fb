//! The actuator's state as data, for an in-place restart: which processes
//! are whose (ranks by pid, process groups per host slot, descendants held
//! through pidfds), stops still awaited, jobs draining, what their reaped
//! processes cost, their scratch directories and cgroups, and launches in
//! progress (how far each went, and the pipes between `==` stages not yet
//! handed out).
//!
//! Job processes stay children of the daemon across the restart, since
//! execve keeps the pid; the pidfds of descendants are handed over as
//! descriptors without close-on-exec, listed here by number.
#![forbid(unsafe_code)]

use std::collections::{BTreeSet, HashMap};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::cgroup::Cgroups;
use super::{
    sys, ActuatorConfig, Child, Descendant, Drain, JobProcs, OsActuator, StopWait, SwitchedOutHold,
};
use scored_core::cluster::Topology;
use scored_core::ids::JobId;

/// The actuator's state.
#[derive(Debug, Serialize, Deserialize)]
pub struct ActuatorSnapshot {
    cgroup_base: Option<PathBuf>,
    /// The hierarchy is the v1 freezer's (else v2).
    #[serde(default)]
    cgroup_v1_freezer: bool,
    /// The descriptor limits jobs get: those scored was first started
    /// with, which the new image cannot see (it starts with the raised ones).
    #[serde(default)]
    job_nofile: Option<(u64, u64)>,
    jobs: Vec<JobProcsSnapshot>,
    children: Vec<ChildSnapshot>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ChildSnapshot {
    pid: i32,
    job: u64,
    stage: usize,
    rank: u32,
    slot: usize,
    stopped: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct ExtraSnapshot {
    pid: i32,
    pidfd: RawFd,
    start: u64,
    slot: usize,
    pgrp: i32,
    stopped_by_job: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct JobProcsSnapshot {
    job: u64,
    /// Each unreaped rank's group (its pid) and host slot.
    groups: Vec<(i32, usize)>,
    children: Vec<i32>,
    extras: Vec<ExtraSnapshot>,
    /// Ranks and descendants whose stop is awaited, and for how long (µs).
    stop_wait: Option<(Vec<i32>, Vec<i32>, u64)>,
    /// That stop is being completed by freezing the job's cgroup.
    #[serde(default)]
    stop_freezing: bool,
    /// How the job is held against SIGCONT from outside: switched out,
    /// frozen, frozen at every stop, continues from outside seen.
    #[serde(default)]
    hold: (bool, bool, bool, u32),
    /// Leftovers being killed, and for how long (µs).
    drain: Option<(Vec<(i32, u64)>, u64)>,
    reaped_cpu_us: u64,
    reaped_peak: Vec<u64>,
    exe_bytes: u64,
    scratch: PathBuf,
    cgroup_procs: Option<Vec<u8>>,
    uid: u32,
    /// Its launch, if it is still in progress.
    #[serde(default)]
    launch: Option<LaunchSnapshot>,
}

/// A launch in progress (`LaunchInProgress`): its plan and the client's
/// descriptors are the next image's to give again (the core's plan of the
/// job, the connection's descriptors).
#[derive(Debug, Serialize, Deserialize)]
struct LaunchSnapshot {
    /// Index in the plan of the next process to create.
    next: usize,
    prepared: bool,
    paused: bool,
    aborted: bool,
    /// The pipes between `==` stages, read and write ends, not yet handed
    /// to a process (-1: handed).
    pipes: Vec<Vec<(RawFd, RawFd)>>,
    /// The output files its processes opened, each with the first process
    /// that named it (which emptied it): no later process empties it again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    opened: Vec<(Vec<u8>, i32)>,
}

fn age_us(since: Instant, now: Instant) -> u64 {
    now.saturating_duration_since(since)
        .as_micros()
        .min(u128::from(u64::MAX)) as u64
}

fn since_age(age: u64, now: Instant) -> Instant {
    now.checked_sub(Duration::from_micros(age)).unwrap_or(now)
}

impl OsActuator {
    /// The state to hand over, and the descriptors that must survive execve.
    pub fn snapshot(&self) -> (ActuatorSnapshot, Vec<RawFd>) {
        let mut fds = Vec::new();
        let now = self.clock.now();
        let jobs = self
            .jobs
            .iter()
            .map(|(job, procs)| JobProcsSnapshot {
                job: job.0,
                groups: procs
                    .groups
                    .iter()
                    .map(|(pgid, slot)| (*pgid, *slot))
                    .collect(),
                children: procs.children.iter().copied().collect(),
                extras: procs
                    .extras
                    .iter()
                    .map(|(pid, extra)| {
                        fds.push(extra.pidfd.as_raw_fd());
                        ExtraSnapshot {
                            pid: *pid,
                            pidfd: extra.pidfd.as_raw_fd(),
                            start: extra.start,
                            slot: extra.slot,
                            pgrp: extra.pgrp,
                            stopped_by_job: extra.stopped_by_job,
                        }
                    })
                    .collect(),
                stop_wait: procs.stop_wait.as_ref().map(|wait| {
                    (
                        wait.children.iter().copied().collect(),
                        wait.extras.iter().copied().collect(),
                        age_us(wait.since, now),
                    )
                }),
                stop_freezing: procs.stop_wait.as_ref().is_some_and(|wait| wait.freezing),
                hold: (
                    procs.hold.switched_out,
                    procs.hold.frozen,
                    procs.hold.freeze_on_stop,
                    procs.hold.rogue_continues,
                ),
                drain: procs
                    .drain
                    .as_ref()
                    .map(|drain| (drain.pids.clone(), age_us(drain.since, now))),
                reaped_cpu_us: procs.reaped_cpu.as_micros() as u64,
                reaped_peak: procs.reaped_peak.clone(),
                exe_bytes: procs.exe_bytes,
                scratch: procs.scratch.clone(),
                cgroup_procs: procs
                    .cgroup_procs
                    .as_ref()
                    .map(|path| path.as_bytes().to_vec()),
                uid: procs.uid,
                launch: procs.launch.as_ref().map(|launch| {
                    let raw = |fd: &Option<std::os::fd::OwnedFd>| {
                        fd.as_ref().map_or(-1, |fd| fd.as_raw_fd())
                    };
                    let pipes: Vec<Vec<(RawFd, RawFd)>> = launch
                        .progress
                        .pipes
                        .iter()
                        .map(|stage| stage.iter().map(|(r, w)| (raw(r), raw(w))).collect())
                        .collect();
                    fds.extend(
                        pipes
                            .iter()
                            .flatten()
                            .flat_map(|(r, w)| [*r, *w])
                            .filter(|fd| *fd >= 0),
                    );
                    LaunchSnapshot {
                        next: launch.progress.next,
                        prepared: launch.progress.prepared,
                        paused: launch.paused,
                        aborted: launch.aborted,
                        pipes,
                        opened: launch
                            .progress
                            .opened
                            .iter()
                            .map(|(path, pid)| (path.clone(), *pid))
                            .collect(),
                    }
                }),
            })
            .collect();
        let children = self
            .children
            .iter()
            .map(|(pid, child)| ChildSnapshot {
                pid: *pid,
                job: child.job.0,
                stage: child.stage,
                rank: child.rank,
                slot: child.slot,
                stopped: child.stopped,
            })
            .collect();
        let snapshot = ActuatorSnapshot {
            cgroup_base: self.cgroups.as_ref().map(|c| c.base().to_path_buf()),
            cgroup_v1_freezer: self.cgroups.as_ref().is_some_and(Cgroups::v1_freezer),
            job_nofile: self.config.job_nofile,
            jobs,
            children,
        };
        (snapshot, fds)
    }

    /// An actuator that carries on with `snapshot`'s processes, in a new
    /// image of the same process: it adopts the cgroup hierarchy in use
    /// (without the clean-up of a fresh start, which would kill its jobs)
    /// and the handed-over pidfds.
    pub fn resume(
        mut config: ActuatorConfig,
        topology: &Topology,
        snapshot: ActuatorSnapshot,
    ) -> io::Result<OsActuator> {
        config.job_nofile = snapshot.job_nofile;
        let mut actuator =
            OsActuator::prepare(config, topology, false, Box::new(super::SystemClock))?;
        let now = actuator.clock.now();
        actuator.cgroups = snapshot
            .cgroup_base
            .map(|base| Cgroups::adopt(base, snapshot.cgroup_v1_freezer));
        for record in snapshot.jobs {
            let mut extras = HashMap::new();
            for extra in record.extras {
                let pidfd = sys::adopt_descriptor(extra.pidfd)?;
                extras.insert(
                    extra.pid,
                    Descendant {
                        pidfd,
                        start: extra.start,
                        slot: extra.slot,
                        pgrp: extra.pgrp,
                        stopped_by_job: extra.stopped_by_job,
                    },
                );
            }
            if let Some(launch) = record.launch {
                let adopt = |fd: RawFd| -> io::Result<Option<std::os::fd::OwnedFd>> {
                    (fd >= 0).then(|| sys::adopt_descriptor(fd)).transpose()
                };
                let mut pipes = Vec::new();
                for stage in launch.pipes {
                    let mut ends = Vec::new();
                    for (read, write) in stage {
                        ends.push((adopt(read)?, adopt(write)?));
                    }
                    pipes.push(ends);
                }
                actuator.handed_over.insert(
                    JobId(record.job),
                    super::launch::HandedOver {
                        progress: super::launch::LaunchProgress {
                            next: launch.next,
                            pipes,
                            prepared: launch.prepared,
                            opened: launch.opened.into_iter().collect(),
                            waits_for: None,
                        },
                        paused: launch.paused,
                        aborted: launch.aborted,
                    },
                );
            }
            let cgroup_procs = match record.cgroup_procs {
                Some(bytes) => Some(CString::new(bytes).map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, "cgroup path contains NUL")
                })?),
                None => None,
            };
            actuator.jobs.insert(
                JobId(record.job),
                JobProcs {
                    groups: record.groups.into_iter().collect(),
                    children: record.children.into_iter().collect(),
                    extras,
                    stop_wait: record.stop_wait.map(|(children, extras, age)| StopWait {
                        children: children.into_iter().collect::<BTreeSet<_>>(),
                        extras: extras.into_iter().collect::<BTreeSet<_>>(),
                        since: since_age(age, now),
                        freezing: record.stop_freezing,
                    }),
                    drain: record.drain.map(|(pids, age)| Drain {
                        pids,
                        since: since_age(age, now),
                        in_cgroup: cgroup_procs.is_some() && actuator.cgroups.is_some(),
                        killed: now,
                    }),
                    reaped_cpu: Duration::from_micros(record.reaped_cpu_us),
                    discovered_at: None,
                    reaped_peak: record.reaped_peak,
                    exe_bytes: record.exe_bytes,
                    scratch: record.scratch,
                    // The walk of the scratch directory starts again.
                    disk_walk: super::statedir::DiskWalk::default(),
                    hold: SwitchedOutHold {
                        switched_out: record.hold.0,
                        frozen: record.hold.1,
                        freeze_on_stop: record.hold.2,
                        rogue_continues: record.hold.3,
                        // Counted again by this image.
                        escapes: 0,
                        stopped_cpu: None,
                        serial: 0,
                    },
                    // A launch handed over waits for its plan and
                    // descriptors (`resume_launch`).
                    launch: None,
                    launch_failed: false,
                    over_limit: false,
                    execs_in_flight: 0,
                    seen_exes: BTreeSet::new(),
                    // Read again by the next sample.
                    members: HashMap::new(),
                    member_cursor: 0,
                    pids_procs: cgroup_procs.as_ref().and_then(|_| {
                        actuator
                            .cgroups
                            .as_ref()
                            .and_then(|cgroups| cgroups.pids_procs(JobId(record.job)))
                    }),
                    cgroup_procs,
                    uid: record.uid,
                },
            );
        }
        for child in snapshot.children {
            actuator.children.insert(
                child.pid,
                Child {
                    job: JobId(child.job),
                    stage: child.stage,
                    rank: child.rank,
                    slot: child.slot,
                    stopped: child.stopped,
                },
            );
        }
        Ok(actuator)
    }
}
