//! Replays saved inputs through a property: the seeds a target starts from
//! (`fuzz/seeds/<target>/`) and the crashing inputs it found
//! (`fuzz/regressions/<target>/`), so that `cargo test` checks them without
//! the fuzzer.
//!
//! A missing `regressions` directory means no crash was ever found and is
//! fine; the seed directory must hold at least one input, so a renamed
//! directory cannot make the replay test pass vacuously. Files whose names
//! start with `.` are skipped.
#![forbid(unsafe_code)]

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Runs `check` on every input saved for `target` under `fuzz_dir`, and
/// panics naming each input whose check failed.
pub fn replay(fuzz_dir: &Path, target: &str, check: fn(&[u8])) {
    let seeds = inputs(&fuzz_dir.join("seeds").join(target));
    assert!(
        !seeds.is_empty(),
        "no seed inputs for fuzz target {target} in {}",
        fuzz_dir.join("seeds").join(target).display()
    );
    let regressions = inputs(&fuzz_dir.join("regressions").join(target));
    let mut failed = Vec::new();
    for path in seeds.iter().chain(&regressions) {
        let data = fs::read(path)
            .unwrap_or_else(|error| panic!("cannot read fuzz input {}: {error}", path.display()));
        if panic::catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "fuzz target {target}: the property fails on {} of {} saved inputs:\n{}",
        failed.len(),
        seeds.len() + regressions.len(),
        failed.join("\n")
    );
}

/// The files in `dir`, sorted; none if it does not exist.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .filter(|path| {
            !path
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with('.'))
        })
        .collect();
    paths.sort();
    paths
}
