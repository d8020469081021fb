//! Replays the fuzz targets' seeds and saved crashing inputs
//! (`fuzz/seeds/<target>/`, `fuzz/regressions/<target>/`) through the same
//! properties the fuzzer checks, so that `cargo test` guards them without
//! nightly or libFuzzer. The properties live in `fuzz/src/` and are
//! included here by path; see `fuzz/run.sh` for the fuzzer itself.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

#[path = "../../fuzz/src/console.rs"]
mod console;
#[path = "../../fuzz/src/hosts.rs"]
mod hosts;
#[path = "../../fuzz/src/protocol.rs"]
mod protocol;
#[path = "../../fuzz/src/replay.rs"]
mod replay;
#[path = "../../fuzz/src/submit.rs"]
mod submit;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

#[test]
fn hosts_inputs_keep_their_property() {
    replay::replay(&fuzz_dir(), "hosts", hosts::check);
}

#[test]
fn console_inputs_keep_their_property() {
    replay::replay(&fuzz_dir(), "console", console::check);
}

#[test]
fn protocol_inputs_keep_their_property() {
    replay::replay(&fuzz_dir(), "protocol", protocol::check);
}

#[test]
fn submit_inputs_keep_their_property() {
    replay::replay(&fuzz_dir(), "submit", submit::check);
}
