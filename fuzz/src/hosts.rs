//! Property of the hosts database parser (`scored_core::hosts`).
//!
//! The input is split at its first two NUL bytes into up to three files,
//! held in memory: the main file `/etc/score/scorehosts.db`, then
//! `/etc/score/b.db` and `/etc/score/racks/c.db`, which the main file can
//! reach with `#include "b.db"` and `#include "racks/c.db"` (and which can
//! include each other). Bytes that are not UTF-8 are replaced, since the
//! real loader refuses such files before the parser sees them.
//!
//! Properties:
//! - `parse` and `resolve` never panic, and parsing twice gives the same
//!   database and diagnostics;
//! - every diagnostic renders, and no diagnostic message is empty;
//! - a resolved topology is consistent: ids are indices, every host is in
//!   exactly its own cluster, cluster names are unique (the console finds
//!   clusters by name);
//! - when the parse has no diagnostics, printing the records back as a
//!   hosts file (see [`print`]) and parsing that gives the same records
//!   and the same resolution.
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

use scored_core::cluster::{Machine, Topology};
use scored_core::hosts::{self, Database, Diagnostic, Loader, MAX_LINE_LEN, MAX_TOTAL_SIZE};
use scored_proto::units::CpuSet;

/// The main file; the other two sit beside it and below it.
const MAIN: &str = "/etc/score/scorehosts.db";
const INCLUDED: [&str; 2] = ["/etc/score/b.db", "/etc/score/racks/c.db"];

/// A [`Loader`] over files held in memory.
struct MemLoader(HashMap<PathBuf, String>);

impl Loader for MemLoader {
    fn load(&mut self, path: &Path) -> io::Result<String> {
        self.0
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))
    }
}

/// A fixed machine, never the real one: CPUs 0-3 and 16 GiB.
fn machine() -> Machine {
    Machine {
        online_cpus: CpuSet::parse("0-3").expect("a valid CPU list"),
        total_memory: 16 << 30,
    }
}

/// Checks the properties on one input; panics when one fails.
pub fn check(data: &[u8]) {
    let mut files = HashMap::new();
    let mut parts = data.splitn(3, |&byte| byte == 0);
    for path in std::iter::once(MAIN).chain(INCLUDED) {
        if let Some(part) = parts.next() {
            files.insert(
                PathBuf::from(path),
                String::from_utf8_lossy(part).into_owned(),
            );
        }
    }
    let parsed = hosts::parse(Path::new(MAIN), &mut MemLoader(files.clone()));
    let again = hosts::parse(Path::new(MAIN), &mut MemLoader(files));
    assert!(parsed == again, "parsing the same files twice differs");
    let (database, diagnostics) = parsed;
    check_diagnostics(&diagnostics);

    let machine = machine();
    let group = database
        .records
        .iter()
        .flat_map(|record| record.values("group"))
        .find(|group| !group.is_empty())
        .map(str::to_string);
    let resolved = hosts::resolve(&database, None, &machine);
    check_resolution(&resolved);
    for group in [group.as_deref(), Some("no-such-group")]
        .into_iter()
        .flatten()
    {
        check_resolution(&hosts::resolve(&database, Some(group), &machine));
    }

    if !diagnostics.is_empty() {
        return;
    }
    let Some(printed) = print(&database) else {
        return;
    };
    let files = HashMap::from([(PathBuf::from(MAIN), printed.clone())]);
    let (reparsed, rediagnostics) = hosts::parse(Path::new(MAIN), &mut MemLoader(files));
    assert!(
        rediagnostics.is_empty(),
        "the printed database does not parse:\n{printed}\n---- diagnostics ----\n{}",
        render(&rediagnostics)
    );
    assert_eq!(
        records(&database),
        records(&reparsed),
        "the printed database parses to other records:\n{printed}"
    );
    let reresolved = hosts::resolve(&reparsed, None, &machine);
    match (&resolved, &reresolved) {
        (Ok(topology), Ok(retopology)) => assert_eq!(
            topology, retopology,
            "the printed database resolves to another topology:\n{printed}"
        ),
        (Err(errors), Err(reerrors)) => assert_eq!(
            messages(errors),
            messages(reerrors),
            "the printed database resolves with other errors:\n{printed}"
        ),
        _ => panic!(
            "the printed database resolves differently ({} then {}):\n{printed}",
            if resolved.is_ok() { "ok" } else { "errors" },
            if reresolved.is_ok() { "ok" } else { "errors" },
        ),
    }
}

/// Renders every diagnostic, as scored prints them.
fn render(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

fn check_diagnostics(diagnostics: &[Diagnostic]) {
    for diagnostic in diagnostics {
        assert!(!diagnostic.message.is_empty(), "empty diagnostic message");
        let _ = diagnostic.to_string();
    }
}

fn check_resolution(resolved: &Result<Topology, Vec<Diagnostic>>) {
    let topology = match resolved {
        Ok(topology) => topology,
        Err(diagnostics) => {
            assert!(
                !diagnostics.is_empty(),
                "resolution failed without a diagnostic"
            );
            check_diagnostics(diagnostics);
            return;
        }
    };
    assert!(!topology.hosts.is_empty(), "a topology without hosts");
    for (idx, host) in topology.hosts.iter().enumerate() {
        assert_eq!(host.id.0 as usize, idx, "host id is not its index");
        let cluster = topology
            .clusters
            .get(host.cluster.0 as usize)
            .unwrap_or_else(|| panic!("host {} is in a missing cluster", host.name));
        assert!(
            cluster.hosts.contains(&host.id),
            "host {} is missing from its cluster {}",
            host.name,
            cluster.name
        );
        assert!(host.cores >= 1, "host {} has no cores", host.name);
        assert!(
            host.speed.is_finite() && host.speed > 0.0,
            "host {} has speed {}",
            host.name,
            host.speed
        );
    }
    let mut names = HashSet::new();
    let mut n_members = 0;
    for (idx, cluster) in topology.clusters.iter().enumerate() {
        assert_eq!(cluster.id.0 as usize, idx, "cluster id is not its index");
        assert!(
            !cluster.hosts.is_empty(),
            "cluster {} has no hosts",
            cluster.name
        );
        assert!(
            names.insert(cluster.name.as_str()),
            "two clusters are named {:?}: {:#?}",
            cluster.name,
            topology.clusters
        );
        for id in &cluster.hosts {
            let host = topology
                .hosts
                .get(id.0 as usize)
                .unwrap_or_else(|| panic!("cluster {} names a missing host", cluster.name));
            assert_eq!(
                host.cluster, cluster.id,
                "host {} is in two clusters",
                host.name
            );
            assert!(
                host.cpugen == cluster.cpugen
                    && host.speed == cluster.speed
                    && host.cores == cluster.cores,
                "host {} differs from its cluster {}",
                host.name,
                cluster.name
            );
        }
        n_members += cluster.hosts.len();
    }
    assert_eq!(
        n_members,
        topology.hosts.len(),
        "hosts and cluster members differ"
    );
}

/// A record without its positions, which printing changes: the name,
/// whether it is defective, and each attribute with its values.
type Bare = (String, bool, Vec<(String, Vec<String>)>);

/// The records without their positions.
fn records(database: &Database) -> Vec<Bare> {
    database
        .records
        .iter()
        .map(|record| {
            let attrs = record
                .attrs
                .iter()
                .map(|(name, values, _)| (name.clone(), values.clone()))
                .collect();
            (record.name.clone(), record.defective, attrs)
        })
        .collect()
}

fn messages(diagnostics: &[Diagnostic]) -> Vec<&str> {
    diagnostics
        .iter()
        .map(|diagnostic| diagnostic.message.as_str())
        .collect()
}

/// Prints the records as a hosts file with no macros or includes: the name
/// on a line of its own, then one line per attribute, `NAME attr` or
/// `NAME attr=v1,v2`, which the parser merges into one record again; every
/// line of a defective record writes the name as `~NAME`. Returns `None` when the text would break a size
/// limit that the original, spread over macros and lines, did not.
///
/// Three spellings need care. A name that starts with `#` can only come
/// from a macro (a line starting with `#` is a comment), so unless `~`
/// precedes it, it is printed through a `#define` of a fresh macro name. A word ending in `\` at the
/// end of a line would join the next line, so such lines end with ` //`.
/// The text starts with a comment line so that a name beginning with a
/// byte order mark is not taken for one.
fn print(database: &Database) -> Option<String> {
    let mut taken: HashSet<&str> = HashSet::new();
    for record in &database.records {
        taken.insert(&record.name);
        for (attr, _, _) in &record.attrs {
            taken.insert(attr);
        }
    }
    let mut out = String::from("# printed by the hosts fuzz target\n");
    let mut n_macros = 0usize;
    for record in &database.records {
        let name = if record.name.starts_with('#') && !record.defective {
            let mut macro_name = format!("FUZZ_NAME_{n_macros}");
            while taken.contains(macro_name.as_str()) {
                macro_name.push('_');
            }
            n_macros += 1;
            out.push_str(&format!("#define {macro_name} {}\n", record.name));
            macro_name
        } else {
            record.name.clone()
        };
        // Every line of a defective record carries the `~`, which also keeps
        // a name starting with `#` from reading as a comment.
        let name = if record.defective {
            format!("~{name}")
        } else {
            name
        };
        push_line(&mut out, &[&name]);
        for (attr, values, _) in &record.attrs {
            let word = if values.is_empty() {
                attr.clone()
            } else {
                format!("{attr}={}", values.join(","))
            };
            if name.len() + word.len() + 8 > MAX_LINE_LEN {
                return None;
            }
            push_line(&mut out, &[&name, &word]);
        }
    }
    (out.len() <= MAX_TOTAL_SIZE).then_some(out)
}

fn push_line(out: &mut String, words: &[&str]) {
    out.push_str(&words.join(" "));
    if words.last().is_some_and(|word| word.ends_with('\\')) {
        out.push_str(" //");
    }
    out.push('\n');
}
