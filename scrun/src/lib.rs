//! scrun's library: the pure parts of the launcher that other crates test.
//!
//! The binary (`main.rs`) does the launching; this library holds only
//! [`cli`], scrun's command-line parser, so that the fuzz targets in `fuzz/`
//! and integration tests can call it without starting a process. A binary
//! target cannot be imported, so the parser lives here and `main.rs` uses it
//! as `scrun::cli`. Nothing here touches the environment, a file or the
//! daemon.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod cli;
