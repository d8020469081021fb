//! scrun's process-management interface (PMI) server: the pure part.
//!
//! Each rank of a job started with PMI (`scrun -mpi=`, scrun(1) section
//! MPI) holds one end of a socketpair whose other end scrun keeps, as
//! `PMI_FD`; the ranks of one stage form one [`World`] with its own
//! key-value space and barrier. [`wire`] reads and writes the PMI-1 and
//! PMI-2 wire formats; [`World`] answers the commands. Neither touches a
//! descriptor: scrun's binary reads the sockets and writes the replies.
//!
//! Why in scrun: the server runs as the job's owner, never as root, and
//! the key-value space is reachable only through descriptors that the
//! job's ranks hold, never through a port another user could connect to.
#![forbid(unsafe_code)]

pub mod names;
pub mod pmix;
pub mod spawn;
pub mod wire;
mod world;

pub use world::{Effect, Limits, World, LIMITS};

/// Which PMI wire protocols scrun serves (`-mpi=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// PMIx where libpmix can be loaded, and PMI-1 and PMI-2 (told apart
    /// by each rank's first bytes) beside it: every MPI finds the one it
    /// speaks (the default).
    #[default]
    Auto,
    /// PMIx only (OpenMPI and what is built on it).
    Pmix,
    /// PMI-1 only.
    Pmi1,
    /// PMI-2 only.
    Pmi2,
    /// No PMI: the ranks get no `PMI_FD` and no PMIx server.
    None,
}

impl Mode {
    /// The protocols served, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Mode::Auto => "PMIx, PMI-1 and PMI-2",
            Mode::Pmix => "PMIx only",
            Mode::Pmi1 => "PMI-1 only",
            Mode::Pmi2 => "PMI-2 only",
            Mode::None => "no PMI",
        }
    }

    /// The `-mpi=` value.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Pmix => "pmix",
            Mode::Pmi1 => "pmi1",
            Mode::Pmi2 => "pmi2",
            Mode::None => "none",
        }
    }
}
