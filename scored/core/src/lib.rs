//! scored-core: the scheduling core of scored.
//!
//! Identifiers and the clock ([`ids`]), the hosts database behind the
//! [`hosts::Loader`] trait ([`hosts`]), clusters ([`cluster`]), jobs
//! ([`job`]), sets of job ids ([`jobset`]), queues ([`queue`]) and their
//! users' decayed usage ([`fairshare`]), admission ([`admission`]), the choice of
//! the active set ([`sched`]) and the state machine with its console
//! commands and views ([`core`]).
//!
//! **Architecture Invariant:** this crate depends on neither nix, libc, mio
//! nor sysinfo, so the compiler keeps it from calling the system; it reads
//! no clock (time is an input) and touches no file (the hosts database
//! comes through a `Loader`). The daemon and `sc_replay` drive the same code.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod admission;
pub mod cluster;
pub mod core;
pub mod fairshare;
pub mod hosts;
pub mod ids;
pub mod job;
pub mod jobset;
pub mod queue;
pub mod sched;
pub mod sorted;
pub mod undo;
