//! scored-proto: what scored shares with its clients, and nothing else.
//!
//! The wire protocol ([`proto`]), the client half of it ([`client`], with
//! the `client` feature, and the clients' system-wide setting,
//! [`settings`]), where the daemon's socket is ([`paths`]), the
//! console language ([`command`]), the value syntax ([`units`]), the exit
//! statuses of the programs ([`exitcode`]) and the one validator of a job
//! submission ([`submit`], with [`inherit`]), which scrun and scored both
//! run. scrun and sc_console depend on this crate alone; the scheduling
//! core uses it without the client, so it stays free of system calls. See
//! ARCHITECTURE.md for the crate map.
#![deny(missing_docs)]

pub mod batch;
#[cfg(feature = "client")]
pub mod client;
pub mod command;
pub mod exitcode;
pub mod inherit;
pub mod paths;
pub mod proto;
#[cfg(feature = "client")]
pub mod settings;
pub mod signame;
pub mod submit;
pub mod units;
