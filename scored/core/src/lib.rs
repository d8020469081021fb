//! scored-core: the scheduling core of scored.
//!
//! Identifiers and the clock ([`ids`]), the hosts database behind the
//! [`hosts::Loader`] trait ([`hosts`]), clusters ([`cluster`]), jobs
//! ([`job`]), sets of job ids ([`jobset`]), queues ([`queue`]), admission ([`admission`]), the choice of
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
pub mod hosts;
pub mod ids;
pub mod job;
pub mod jobset;
pub mod queue;
pub mod sched;
pub mod sorted;
pub mod undo;

// The console language, units, exit statuses and the submission validator
// are the protocol crate's; they are named here so that the core's modules
// reach them as `crate::command`, `crate::units`, `crate::exitcode`,
// `crate::inherit`, `crate::signame`, `crate::proto`, `crate::submit` and
// `crate::batch`.
use scored_proto::{batch, command, exitcode, inherit, proto, signame, submit, units};
