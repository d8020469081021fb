//! The tidy test: rules of the project's style and of ARCHITECTURE.md that the
//! compiler does not check, enforced on the source tree.
//!
//! - every `.rs` file of the six crates starts with a `//!` paragraph;
//! - `unsafe` appears only in the daemon's `sys` module and the child's side
//!   of its fork (`actuator/spawn.rs`), and in scrun's `sys` (the system
//!   calls nix and rustix do not wrap, and the probe of the process as it
//!   was at exec, which must run before the Rust runtime) and scrun's
//!   `pmix_sys` (libpmix, loaded at run time, and the functions it calls);
//! - the core crate depends on nothing that calls the system: its manifest
//!   names only the protocol crate (without the client), serde (for the
//!   restart snapshot's own types) and tracing, so the
//!   compiler rejects any use of nix, libc, mio or sysinfo in it;
//! - what Cargo cannot forbid, because it is in std, the core crate and the
//!   console language never use: the clock (`Instant::now`, `SystemTime`),
//!   processes, files, sockets and threads;
//! - the replay crate depends on neither the daemon nor nix, libc, mio or
//!   sysinfo, and its library is as pure as the core;
//! - the daemon never starts a thread, and its test-only fault injection
//!   stays in the one module that compiles it only for the tests.

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
    for krate in [
        "scored/src",
        "scored/core/src",
        "scored/proto/src",
        "scored/replay/src",
        "scrun/src",
        "console/src",
    ] {
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
fn unsafe_lives_only_in_the_sys_modules_and_the_spawn_path() {
    let mut offenders = Vec::new();
    for (path, text) in all_sources() {
        let allowed = path == Path::new("scored/src/sys.rs")
            || path == Path::new("scored/src/actuator/spawn.rs")
            || path == Path::new("scrun/src/sys.rs")
            || path == Path::new("scrun/src/pmix_sys.rs");
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
        "unsafe outside the sys modules and the spawn path:\n{}",
        offenders.join("\n")
    );
}

/// The daemon's sources: its crate and the two it links.
fn daemon_sources() -> impl Iterator<Item = (PathBuf, String)> {
    all_sources().into_iter().filter(|(path, _)| {
        let text = path.display().to_string();
        let is_test = text.ends_with("tests.rs") || text.contains("/tests/");
        !is_test
            && ["scored/src/", "scored/core/src/", "scored/proto/src/"]
                .iter()
                .any(|prefix| text.starts_with(prefix))
    })
}

#[test]
fn the_daemon_never_starts_a_thread() {
    // The fork of a rank is safe only in a single-threaded process: a
    // thread holding a lock (the allocator's, say) at the fork would leave
    // it held forever in the child. The spawn path also checks, in debug
    // builds, that the process has one thread when it forks.
    let forbidden = [
        "thread::spawn",
        "thread::scope",
        "thread::Builder",
        "rayon::",
        "tokio::",
        "crossbeam",
    ];
    let mut offenders = Vec::new();
    for (path, text) in daemon_sources() {
        for (line_no, line) in code_lines(&text) {
            for word in forbidden {
                if line.contains(word) {
                    offenders.push(format!("{}:{line_no}: {word}", path.display()));
                }
            }
        }
    }
    let lock = fs::read_to_string(workspace().join("Cargo.lock")).expect("read Cargo.lock");
    for name in ["rayon", "tokio", "threadpool"] {
        if lock.contains(&format!("name = \"{name}\"")) {
            offenders.push(format!("Cargo.lock: {name}"));
        }
    }
    assert!(
        offenders.is_empty(),
        "the daemon must stay single-threaded:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn fault_injection_lives_only_in_its_module() {
    // faults.rs compiles its hooks only with the `fault-injection`
    // feature; a hook anywhere else would reach release builds.
    let mut offenders = Vec::new();
    for (path, text) in daemon_sources() {
        if path == Path::new("scored/src/evloop/faults.rs") {
            continue;
        }
        for (line_no, line) in text.lines().enumerate() {
            if line.contains("SCORED_TEST_") || line.contains("SCORED_NO_CHECKPOINT") {
                offenders.push(format!(
                    "{}:{}: {}",
                    path.display(),
                    line_no + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "test-only hooks outside evloop/faults.rs:\n{}",
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
fn the_core_crate_depends_on_nothing_that_calls_the_system() {
    let manifest = fs::read_to_string(workspace().join("scored/core/Cargo.toml"))
        .expect("read scored/core/Cargo.toml");
    let mut section = String::new();
    let mut dependencies = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_string();
        } else if section == "[dependencies]" && !line.is_empty() && !line.starts_with('#') {
            dependencies.push(line.to_string());
        }
    }
    assert_eq!(
        dependencies,
        [
            r#"scored-proto = { path = "../proto", default-features = false }"#,
            "serde.workspace = true",
            // Inline short lists of a job (job::Small); pure, no system calls.
            "smallvec.workspace = true",
            "tracing.workspace = true",
        ],
        "scored-core must stay pure: no nix, libc, mio or sysinfo, and the protocol crate without its client"
    );
}

#[test]
fn the_replay_crate_depends_on_neither_the_daemon_nor_the_system() {
    let manifest = fs::read_to_string(workspace().join("scored/replay/Cargo.toml"))
        .expect("read scored/replay/Cargo.toml");
    let mut section = String::new();
    let mut offenders = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_string();
        } else if section == "[dependencies]" && !line.is_empty() && !line.starts_with('#') {
            let name = line.split([' ', '.', '=']).next().unwrap_or_default();
            if ["scored", "nix", "libc", "mio", "sysinfo"].contains(&name) {
                offenders.push(line.to_string());
            }
            if name == "scored-proto" && !line.contains("default-features = false") {
                offenders.push(format!(
                    "{line} (the protocol crate's client calls the system)"
                ));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "the replay must run the scheduling core without the daemon or system calls: {offenders:?}"
    );
}

#[test]
fn pure_modules_make_no_system_calls_and_read_no_clock() {
    let pure = [
        "scored/core/src/",
        "scored/proto/src/command/",
        "scored/proto/src/units.rs",
        "scored/proto/src/proto.rs",
        "scored/proto/src/submit.rs",
        "scored/proto/src/exitcode.rs",
        "scored/replay/src/",
    ];
    // sc_replay's shell reads the trace and writes the outputs; the
    // replay it drives is pure.
    let shells = ["scored/replay/src/main.rs"];
    // nix, libc, mio and sysinfo are kept out of the core crate by its
    // manifest (checked above); std is always there, so its system parts
    // are searched for here.
    let forbidden = [
        "Instant::now",
        "SystemTime",
        "std::process",
        "std::fs",
        "std::net",
        "std::thread",
        "nix::",
        "libc::",
    ];
    let mut offenders = Vec::new();
    for (path, text) in all_sources() {
        let path_text = path.display().to_string();
        // Tests may touch the system (temporary files); the modules may not.
        let is_test = path_text.ends_with("tests.rs") || path_text.contains("/tests/");
        let is_pure = pure.iter().any(|prefix| path_text.starts_with(prefix))
            && !shells.contains(&path_text.as_str());
        if is_test || !is_pure {
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
