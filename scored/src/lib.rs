//! scored: SCore-D, the gang-scheduling cluster operating daemon, on one machine.
//!
//! This crate is the daemon's shell around the pure core: the event loop
//! ([`evloop`]), the actuator that owns every fork, signal and wait
//! ([`actuator`]), flags and the configuration file ([`config`]) and the
//! hosts database on disk ([`hostsfile`]). The scheduling core is the
//! `scored-core` crate and what clients share with the daemon is the
//! `scored-proto` crate; the daemon names both as crates (`scored_core::core`,
//! `scored_proto::command`). See ARCHITECTURE.md for the map.
#![deny(missing_docs)]

// The daemon hands the kernel 64-bit values throughout (resource limits,
// device and inode numbers, the kernel's sigaction on the architectures it
// lays out): a 32-bit build would be wrong where it compiled at all.
#[cfg(not(target_pointer_width = "64"))]
compile_error!(
    "scored supports 64-bit Linux targets only (x86_64, aarch64, riscv64): it passes \
     resource limits, device and inode numbers and signal dispositions to the kernel as \
     64-bit values"
);

pub mod actuator;
pub mod closer;
pub mod config;
pub mod durable;
pub mod evloop;
pub mod handover;
pub mod hostsfile;
pub mod instance;
pub mod journal;
pub mod keeper;
pub mod logline;
pub mod sys;
pub mod version;
