//! Replays the `scrun_options` fuzz target's seeds and saved crashing
//! inputs (`fuzz/seeds/scrun_options/`, `fuzz/regressions/scrun_options/`)
//! through the property the fuzzer checks, so that `cargo test` guards them
//! without nightly or libFuzzer. The property lives in
//! `fuzz/src/scrun_options.rs` and is included here by path.
#![forbid(unsafe_code)]

use std::path::Path;

#[path = "../../fuzz/src/replay.rs"]
mod replay;
#[path = "../../fuzz/src/scrun_options.rs"]
mod scrun_options;

#[test]
fn scrun_options_inputs_keep_their_property() {
    let fuzz_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    replay::replay(&fuzz_dir, "scrun_options", scrun_options::check);
}

#[path = "../../fuzz/src/pmi.rs"]
mod pmi;

#[test]
fn pmi_inputs_keep_their_property() {
    let fuzz_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    replay::replay(&fuzz_dir, "pmi", pmi::check);
}
