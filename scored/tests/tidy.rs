//! The tidy test: rules of STYLE.md and ARCHITECTURE.md that the compiler
//! does not check, enforced on the source tree.
//!
//! - every `.rs` file of the three crates starts with a `//!` paragraph;
//! - `unsafe` appears only in `actuator` and `evloop`;
//! - the pure modules never read a clock or call the system
//!   (`Instant::now`, `SystemTime`, `nix::`, `libc::`, `mio::`, `std::process`).

use std::fs;
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn all_sources() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for krate in ["scored/src", "scrun/src", "console/src"] {
        sources(&workspace().join(krate), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = fs::read_to_string(&path).expect("read source");
            (
                path.strip_prefix(workspace())
                    .expect("in workspace")
                    .to_path_buf(),
                text,
            )
        })
        .collect()
}

/// Lines of code, without comments and string contents that merely mention a word.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(idx, line)| (idx + 1, line))
        .filter(|(_, line)| {
            let trimmed = line.trim_start();
            !trimmed.starts_with("//")
        })
}

/// Whether `line` names `path` as a path of its own (`nix::`, not `unix::`).
fn mentions(line: &str, path: &str) -> bool {
    line.match_indices(path).any(|(at, _)| {
        !line[..at]
            .chars()
            .next_back()
            .is_some_and(|before| before.is_alphanumeric() || before == '_' || before == ':')
    })
}

#[test]
fn every_file_opens_with_a_module_doc() {
    let missing: Vec<String> = all_sources()
        .into_iter()
        .filter(|(_, text)| !text.trim_start().starts_with("//!"))
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a //! doc paragraph: {missing:?}"
    );
}

#[test]
fn unsafe_lives_only_in_the_actuator_and_the_event_loop() {
    let mut offenders = Vec::new();
    for (path, text) in all_sources() {
        let allowed =
            path.starts_with("scored/src/actuator") || path == Path::new("scored/src/evloop.rs");
        if allowed {
            continue;
        }
        for (line_no, line) in code_lines(&text) {
            if line.contains("unsafe ") || line.contains("unsafe{") {
                offenders.push(format!("{}:{line_no}: {}", path.display(), line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "unsafe outside actuator and evloop:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn mentions_matches_whole_paths_only() {
    assert!(mentions("use nix::unistd;", "nix::"));
    assert!(mentions("let x = libc::getpid();", "libc::"));
    assert!(!mentions("use std::os::unix::ffi::OsStrExt;", "nix::"));
}

#[test]
fn pure_modules_make_no_system_calls_and_read_no_clock() {
    let pure = [
        "scored/src/core.rs",
        "scored/src/core/",
        "scored/src/sched.rs",
        "scored/src/queue.rs",
        "scored/src/admission.rs",
        "scored/src/job.rs",
        "scored/src/cluster.rs",
        "scored/src/hosts/",
        "scored/src/command/",
        "scored/src/units.rs",
        "scored/src/replay/",
    ];
    let forbidden = [
        "Instant::now",
        "SystemTime",
        "nix::",
        "libc::",
        "mio::",
        "std::process",
        "sysinfo::",
    ];
    let mut offenders = Vec::new();
    for (path, text) in all_sources() {
        let path_text = path.display().to_string();
        // Tests may touch the system (temporary files); the modules may not.
        let is_test = path_text.ends_with("tests.rs") || path_text.contains("/tests/");
        if is_test || !pure.iter().any(|prefix| path_text.starts_with(prefix)) {
            continue;
        }
        for (line_no, line) in code_lines(&text) {
            for word in forbidden {
                if mentions(line, word) {
                    offenders.push(format!("{path_text}:{line_no}: {word}"));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "system access in pure modules:\n{}",
        offenders.join("\n")
    );
}
