//! scored: SCore-D, the gang-scheduling cluster operating daemon, on one machine.
//!
//! This library holds the daemon and what its clients share with it: the
//! wire protocol ([`proto`]), the console language ([`command`]) and the
//! value syntax ([`units`]). See ARCHITECTURE.md for the module map.
#![deny(missing_docs)]

pub mod actuator;
pub mod admission;
pub mod client;
pub mod cluster;
pub mod command;
pub mod config;
pub mod core;
pub mod evloop;
pub mod exitcode;
pub mod hosts;
pub mod ids;
pub mod job;
pub mod paths;
pub mod proto;
pub mod queue;
pub mod replay;
pub mod sched;
pub mod units;
