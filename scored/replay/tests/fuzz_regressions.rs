//! Replays the `swf` fuzz target's seeds and saved crashing inputs
//! (`fuzz/seeds/swf/`, `fuzz/regressions/swf/`) through the property the
//! fuzzer checks, so that `cargo test` guards it without nightly or
//! libFuzzer. The property lives in `fuzz/src/swf.rs`, included here by
//! path; see `fuzz/run.sh` for the fuzzer itself.
#![forbid(unsafe_code)]

use std::path::Path;

#[path = "../../../fuzz/src/replay.rs"]
mod replay;
#[path = "../../../fuzz/src/swf.rs"]
mod swf;

#[test]
fn swf_inputs_keep_their_property() {
    let fuzz_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    replay::replay(&fuzz_dir, "swf", swf::check);
}
