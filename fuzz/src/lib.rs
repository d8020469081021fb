//! The properties the fuzz targets check, one module per target.
//!
//! Each target module has a `check(data: &[u8])` that turns the fuzzer's
//! bytes into the input of one parser or decoder and panics when a property
//! fails: the code under test must never panic, and where a printer exists,
//! parse → print → parse must give the same value. The modules use only the
//! public APIs of `scored` and `scrun` and the standard library, so the
//! replay tests (`scored/tests/fuzz_regressions.rs`,
//! `scored/replay/tests/fuzz_regressions.rs` and
//! `scrun/tests/fuzz_regressions.rs`) include these very files with
//! `#[path]` and run the committed seeds and saved crashes through them
//! under plain `cargo test`, without nightly or libFuzzer.
#![forbid(unsafe_code)]

pub mod console;
pub mod hosts;
pub mod pmi;
pub mod protocol;
pub mod replay;
pub mod scrun_options;
pub mod submit;
pub mod swf;
