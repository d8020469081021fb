//! scrun's library: the pure parts of the launcher that other crates test.
//!
//! The binary (`main.rs`) does the launching; this library holds
//! [`cli`], scrun's command-line parser, and [`pmi`], the protocol core of
//! its PMI server, so that the fuzz targets in `fuzz/` and integration
//! tests can call them without starting a process. A binary target cannot
//! be imported, so they live here and `main.rs` uses them as `scrun::cli`
//! and `scrun::pmi`. Nothing here touches the environment, a file or the
//! daemon.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod cli;
pub mod pmi;
