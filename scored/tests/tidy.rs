//! The tidy test: rules of the project's style and of ARCHITECTURE.md that the
//! compiler does not check, enforced on the source tree.
//!
//! - every `.rs` file of the six crates starts with a `//!` paragraph;
//! - `unsafe` appears only in the daemon's `sys` module and the child's side
//!   of a rank's clone (`actuator/spawn.rs`, `actuator/spawn/`), and in scrun's `sys` (the system
//!   calls nix and rustix do not wrap, the probe of the process as it
//!   was at exec, and the entry point that replaces the Rust runtime's) and scrun's
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
//! - the daemon never starts a thread (a keeper starts its spawners, two
//!   at most, and only keepers create ranks), and its test-only fault injection
//!   stays in the one module that compiles it only for the tests;
//! - crates are named as crates: no crate re-exports another's modules or
//!   reaches them as its own (`crate::submit` for `scored_proto::submit`),
//!   so that grep and go-to-definition lead to the crate that has them;
//! - the product's rules are cited from the repository's own documents (the
//!   man pages, ARCHITECTURE.md) or stated where they apply, never from a
//!   specification the repository does not hold;
//! - a newcomer can read any part in one sitting: no source file but tests
//!   is over 1,000 lines, and no function of the core over 150;
//! - the scheduler is one object: its state is private to `sched/`, so no
//!   file of the core writes it, and `Core` keeps at most 20 fields.

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
            || path.starts_with("scored/src/sys/")
            || path == Path::new("scored/src/actuator/spawn.rs")
            || path.starts_with("scored/src/actuator/spawn/")
            || path == Path::new("scrun/src/sys.rs")
            || path == Path::new("scrun/src/pmix_sys.rs")
            || path.starts_with("scrun/src/pmix_sys");
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
    // A fork (the zygote's of a keeper, the daemon's of a remover or of
    // the closer's helper) is safe only in a single-threaded process: a
    // thread holding a lock (the allocator's, say) at the fork would leave
    // it held forever in the child. The one thread is a keeper's spawner
    // (`actuator/spawn/spawner.rs`, and a second beside it on two CPUs
    // or more), started by the keeper's first ranks,
    // in a process that forks nothing; so only a keeper creates ranks.
    // The other is the /proc reader (`actuator/procfs/reader.rs`: files
    // whose read can wait on their process), in the daemon and the
    // keepers, which create children only by `clone(CLONE_VM |
    // CLONE_VFORK)` children that make system calls alone and exec; the
    // processes that fork (the zygote, the closer) never read through it.
    let spawner = Path::new("scored/src/actuator/spawn/spawner.rs");
    let reader = Path::new("scored/src/actuator/procfs/reader.rs");
    let mut offenders = Vec::new();
    for (path, text) in daemon_sources() {
        let keeper =
            path.starts_with("scored/src/keeper/") || path.starts_with("scored/src/actuator/spawn");
        for (line_no, line) in code_lines(&text) {
            if line.contains("spawn::spawn(") && !keeper {
                offenders.push(format!(
                    "{}:{line_no}: a rank created outside a keeper",
                    path.display()
                ));
            }
        }
    }
    let forbidden = [
        "thread::spawn",
        "thread::scope",
        "thread::Builder",
        "rayon::",
        "tokio::",
        "crossbeam",
    ];
    for (path, text) in daemon_sources() {
        let forks = path != Path::new("scored/src/sys.rs")
            && code_lines(&text).any(|(_, line)| line.contains("fork_process"));
        if forks && code_lines(&text).any(|(_, line)| line.contains("procfs")) {
            offenders.push(format!(
                "{}: forks and reads /proc by threads",
                path.display()
            ));
        }
        if path == spawner || path == reader {
            continue;
        }
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

/// The six crates: their source directory and the name other crates use.
const CRATES: [(&str, &str); 6] = [
    ("scored/src", "scored"),
    ("scored/core/src", "scored_core"),
    ("scored/proto/src", "scored_proto"),
    ("scored/replay/src", "scored_replay"),
    ("scrun/src", "scrun"),
    ("console/src", "sc_console"),
];

/// The names of a crate's modules: every file and directory of its sources.
fn module_names(dir: &str) -> Vec<String> {
    let mut files = Vec::new();
    sources(&workspace().join(dir), &mut files);
    let mut names: Vec<String> = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(workspace().join(dir)).expect("in crate");
        for part in relative.iter() {
            let part = part.to_string_lossy();
            let name = part.strip_suffix(".rs").unwrap_or(&part);
            if !["lib", "main", "mod"].contains(&name) {
                names.push(name.to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

/// The names the leaves of a `use` tree import (`a::{b, c::D}` gives `b`, `D`).
fn use_leaves(tree: &str) -> Vec<String> {
    tree.split([',', '{', '}'])
        .map(|leaf| {
            let leaf = leaf.trim();
            let leaf = leaf.split(" as ").next().unwrap_or(leaf).trim();
            leaf.rsplit("::").next().unwrap_or(leaf).trim().to_string()
        })
        .filter(|leaf| !leaf.is_empty())
        .collect()
}

#[test]
fn crates_are_named_as_crates() {
    let modules: Vec<(&str, &str, Vec<String>)> = CRATES
        .iter()
        .map(|&(dir, name)| (dir, name, module_names(dir)))
        .collect();
    let mut offenders = Vec::new();
    for (path, text) in all_sources() {
        let path_text = path.display().to_string();
        let Some((_, _, own)) = modules
            .iter()
            .find(|(dir, _, _)| path_text.starts_with(&format!("{dir}/")))
        else {
            continue;
        };
        // Statements, joined over lines, so that a `use` tree written
        // over several lines is read whole.
        let code: String = code_lines(&text)
            .map(|(_, line)| line)
            .collect::<Vec<_>>()
            .join("\n");
        for statement in code.split(';') {
            let statement = statement.trim();
            let Some(tree) = statement.strip_prefix("pub use ") else {
                continue;
            };
            let Some((_, krate, theirs)) = modules
                .iter()
                .find(|(_, krate, _)| tree.starts_with(&format!("{krate}::")))
            else {
                continue;
            };
            let tree = &tree[krate.len() + 2..];
            for leaf in use_leaves(tree) {
                if leaf == "self" || theirs.contains(&leaf) {
                    offenders.push(format!(
                        "{path_text}: `pub use {krate}::{tree}` re-exports a module of {krate}"
                    ));
                }
            }
        }
        for (line_no, line) in code_lines(&text) {
            for (at, _) in line.match_indices("crate::") {
                if line[..at].chars().next_back().is_some_and(|before| {
                    before.is_alphanumeric() || before == '_' || before == ':'
                }) {
                    continue;
                }
                let name: String = line[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let foreign = modules
                    .iter()
                    .find(|(_, _, theirs)| theirs.contains(&name))
                    .map(|(_, krate, _)| *krate);
                if let (false, Some(krate)) = (own.contains(&name), foreign) {
                    offenders.push(format!(
                        "{path_text}:{line_no}: `crate::{name}` names a module of {krate} as this crate's"
                    ));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "modules of other crates re-exported or reached through `crate::`:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn use_leaves_reads_use_trees() {
    assert_eq!(use_leaves("{admission, core::Core}"), ["admission", "Core"]);
    assert_eq!(
        use_leaves("proto::{EndKind, RejectKind as Rejection}"),
        ["EndKind", "RejectKind"]
    );
    assert_eq!(use_leaves("command::{self, reply}"), ["self", "reply"]);
}

#[test]
fn comments_cite_only_the_repositorys_documents() {
    let offenders: Vec<String> = all_sources()
        .into_iter()
        .flat_map(|(path, text)| {
            text.lines()
                .enumerate()
                .filter(|(_, line)| line.contains("SPEC §"))
                .map(|(idx, _)| format!("{}:{}", path.display(), idx + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "comments citing a specification outside the repository (cite a man page or ARCHITECTURE.md, or state the rule):\n{}",
        offenders.join("\n")
    );
}

/// Whether a source file holds tests only.
fn is_test_file(path: &Path) -> bool {
    let text = path.display().to_string();
    text.ends_with("tests.rs") || text.contains("/tests/")
}

#[test]
fn no_source_file_is_over_a_thousand_lines() {
    let offenders: Vec<String> = all_sources()
        .into_iter()
        .filter(|(path, text)| !is_test_file(path) && text.lines().count() > 1000)
        .map(|(path, text)| format!("{}: {} lines", path.display(), text.lines().count()))
        .collect();
    assert!(
        offenders.is_empty(),
        "source files over 1,000 lines (split them by concept):\n{}",
        offenders.join("\n")
    );
}

/// The functions of `text` as (name, first line, length in lines): from a
/// line that starts a function to the line, as rustfmt writes it, that
/// closes it at the same indentation.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let signature = ["pub(crate) ", "pub(super) ", "pub "]
            .iter()
            .fold(trimmed, |rest, visibility| {
                rest.strip_prefix(visibility).unwrap_or(rest)
            });
        let Some(name) = signature.strip_prefix("fn ") else {
            continue;
        };
        let name: String = name
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // A declaration without a body, or a body on the same line.
        if trimmed.ends_with(';') || trimmed.ends_with('}') {
            found.push((name, at + 1, 1));
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = lines[at..].iter().position(|line| *line == close) {
            found.push((name, at + 1, end + 1));
        }
    }
    found
}

#[test]
fn no_function_of_the_core_is_over_150_lines() {
    let offenders: Vec<String> = all_sources()
        .into_iter()
        .filter(|(path, _)| path.starts_with("scored/core/src") && !is_test_file(path))
        .flat_map(|(path, text)| {
            functions(&text)
                .into_iter()
                .filter(|(_, _, length)| *length > 150)
                .map(move |(name, line, length)| {
                    format!("{}:{line}: {name} is {length} lines", path.display())
                })
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "functions of the core over 150 lines (split them into named steps):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn functions_are_measured_to_their_closing_brace() {
    let text = "fn a() {\n    x();\n}\n\nimpl T {\n    fn c(&self) {}\n    fn d(&self);\n    pub(super) fn b(\n        y: u8,\n    ) {\n        if y {\n        }\n    }\n}\n";
    let functions = functions(text);
    let found: Vec<(&str, usize, usize)> = functions
        .iter()
        .map(|(name, line, length)| (name.as_str(), *line, *length))
        .collect();
    assert_eq!(found, [("a", 1, 3), ("c", 6, 1), ("d", 7, 1), ("b", 8, 6)]);
}

/// The fields of `struct NAME` in `text` as rustfmt writes them: each
/// line of its body that starts `    [pub ]name: Type`.
fn struct_fields<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let head = format!("struct {name} {{");
    let Some(start) = text.lines().position(|line| line.contains(&head)) else {
        return Vec::new();
    };
    text.lines()
        .skip(start + 1)
        .take_while(|line| *line != "}")
        .filter(|line| {
            let field = line.strip_prefix("    ").unwrap_or("");
            let field = field.strip_prefix("pub ").unwrap_or(field);
            !field.starts_with(' ')
                && field
                    .split_once(':')
                    .is_some_and(|(name, _)| name.chars().all(|c| c.is_alphanumeric() || c == '_'))
        })
        .collect()
}

#[test]
fn the_scheduler_keeps_its_state_and_the_core_stays_small() {
    let read = |path: &str| fs::read_to_string(workspace().join(path)).expect("read source");
    let core = read("scored/core/src/core.rs");
    let fields = struct_fields(&core, "Core");
    assert!(
        (5..=20).contains(&fields.len()),
        "Core has {} fields (at most 20; a feature adds one struct of its own):\n{}",
        fields.len(),
        fields.join("\n")
    );
    let scheduler = read("scored/core/src/sched/scheduler.rs");
    let fields = struct_fields(&scheduler, "Scheduler");
    assert!(!fields.is_empty(), "the Scheduler's fields are found");
    let public: Vec<&&str> = fields
        .iter()
        .filter(|line| line.trim_start().starts_with("pub"))
        .collect();
    assert!(
        public.is_empty(),
        "the Scheduler's state is private, so that the core changes it only through its methods: {public:?}"
    );
}
