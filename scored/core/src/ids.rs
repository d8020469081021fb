//! Identifier newtypes and the clock of the scheduling core.
//!
//! The compiler must reject a job id used where a host index or a process
//! group is expected, so each kind of number has its own type. Process ids
//! themselves never appear here: they belong to the actuator.
#![forbid(unsafe_code)]

use std::fmt;
use std::time::Duration;

/// A job, numbered from 1 in admission order for the daemon's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A logical host: its index in the daemon's host table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostId(pub u32);

impl HostId {
    /// The index into the host table.
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A cluster: its index in the daemon's cluster table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterId(pub u32);

impl ClusterId {
    /// The index into the cluster table.
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A client connection of the daemon; tokens only go up, so one is never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientToken(pub u64);

impl fmt::Display for ClientToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Time as the scheduling core sees it: microseconds since the daemon started.
/// The core is handed a `Tick` with every input and never reads a clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Tick(pub u64);

impl Tick {
    /// The earlier of two optional instants (`None` is never).
    #[inline]
    pub fn earliest(a: Option<Tick>, b: Option<Tick>) -> Option<Tick> {
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, None) => a,
            (None, b) => b,
        }
    }

    /// The tick `duration` later than this one (saturating).
    pub fn after(self, duration: Duration) -> Tick {
        Tick(
            self.0
                .saturating_add(duration.as_micros().min(u64::MAX as u128) as u64),
        )
    }

    /// The time from `earlier` to this tick, or zero if `earlier` is later.
    pub fn since(self, earlier: Tick) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

/// Who a client is, as the kernel reported it for the socket (SO_PEERCRED
/// and SO_PEERGROUPS). Nothing on the wire is trusted for identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cred {
    /// The client's process id when it connected.
    pub pid: i32,
    /// The client's effective user id.
    pub uid: u32,
    /// The client's effective group id.
    pub gid: u32,
    /// The client's supplementary groups.
    pub groups: Vec<u32>,
}

impl Cred {
    /// Whether the client belongs to `gid`, as primary or supplementary group.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}
