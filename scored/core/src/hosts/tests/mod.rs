//! Tests of the hosts database: source text in, a topology dump or rendered
//! diagnostics out. Files come from memory through [`MemLoader`]; the machine
//! is a fixed four-CPU, 16 GiB [`Machine`], never the real one.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use super::*;
use scored_proto::units::CpuSet;

mod attributes;
mod clusters;
mod macros;
mod records;
mod syntax;

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

fn machine() -> Machine {
    Machine {
        online_cpus: CpuSet::from_cpus(0..4),
        total_memory: 16 << 30,
    }
}

/// Removes the indentation the expected text has in the test source.
fn dedent(text: &str) -> String {
    let text = text.strip_prefix('\n').unwrap_or(text);
    let lines: Vec<&str> = text.lines().collect();
    let indent = lines
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.len() - line.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    let lines: Vec<&str> = lines
        .iter()
        .map(|line| line.get(indent..).unwrap_or(""))
        .collect();
    lines.join("\n").trim_end().to_string()
}

/// Compares like ripgrep's `eqnice!`: both texts in labelled blocks.
fn assert_text(expected: &str, actual: &str) {
    let expected = dedent(expected);
    if expected != actual {
        panic!(
            "\n---- expected ----\n{expected}\n---- actual ----\n{actual}\n------------------\n"
        );
    }
}

fn render_diagnostics(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(|diagnostic| diagnostic.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Shows a byte count exactly: with a suffix when it divides evenly.
fn bytes(n: u64) -> String {
    for (suffix, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if n != 0 && n % (1u64 << shift) == 0 {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

fn render_topology(topology: &Topology) -> String {
    let mut out = Vec::new();
    for cluster in &topology.clusters {
        let hosts: Vec<&str> = cluster
            .hosts
            .iter()
            .map(|id| topology.host(*id).name.as_str())
            .collect();
        out.push(format!(
            "cluster {} {}: cpugen={} speed={} cores={} hosts={}",
            cluster.id,
            cluster.name,
            cluster.cpugen,
            cluster.speed,
            cluster.cores,
            hosts.join(",")
        ));
    }
    for host in &topology.hosts {
        let cluster = topology.cluster(host.cluster);
        assert!(cluster.hosts.contains(&host.id));
        assert_eq!(
            (&cluster.cpugen, cluster.speed, cluster.cores),
            (&host.cpugen, host.speed, host.cores)
        );
        let mut line = format!(
            "host {} {}: cluster={} cpus={} memory={}",
            host.id,
            host.name,
            host.cluster,
            host.cpus,
            bytes(host.memory)
        );
        if !host.groups.is_empty() {
            line.push_str(&format!(" groups={}", host.groups.join(",")));
        }
        if !host.watchfs.is_empty() {
            let paths: Vec<String> = host
                .watchfs
                .iter()
                .map(|path| path.display().to_string())
                .collect();
            line.push_str(&format!(" watchfs={}", paths.join(",")));
        }
        out.push(line);
    }
    out.join("\n")
}

fn loader(files: &[(&str, &str)]) -> MemLoader {
    MemLoader(
        files
            .iter()
            .map(|(path, text)| (PathBuf::from(path), text.to_string()))
            .collect(),
    )
}

/// Parses and resolves the first file with `group`, and renders the
/// diagnostics (parse errors win) or the topology.
fn run(files: &[(&str, &str)], group: Option<&str>) -> String {
    let mut loader = loader(files);
    let (database, diagnostics) = parse(Path::new(files[0].0), &mut loader);
    if !diagnostics.is_empty() {
        return render_diagnostics(&diagnostics);
    }
    match resolve_with_warnings(&database, group, &machine()) {
        Ok((topology, warnings)) if warnings.is_empty() => render_topology(&topology),
        Ok((topology, warnings)) => format!(
            "{}\n{}",
            render_diagnostics(&warnings),
            render_topology(&topology)
        ),
        Err(diagnostics) => render_diagnostics(&diagnostics),
    }
}

/// `hosts.db` holding `source`, resolved without a group.
fn check(source: &str, expected: &str) {
    assert_text(expected, &run(&[("hosts.db", source)], None));
}

/// Several files, the first being the main one.
fn check_files(files: &[(&str, &str)], expected: &str) {
    assert_text(expected, &run(files, None));
}

/// `hosts.db` holding `source`, resolved for `group`.
fn check_group(source: &str, group: &str, expected: &str) {
    assert_text(expected, &run(&[("hosts.db", source)], Some(group)));
}

/// The parsed records of `hosts.db`, with every attribute and its position,
/// followed by any diagnostics.
fn check_parse(source: &str, expected: &str) {
    let mut loader = loader(&[("hosts.db", source)]);
    let (database, diagnostics) = parse(Path::new("hosts.db"), &mut loader);
    let mut out: Vec<String> = database
        .records
        .iter()
        .map(|record| {
            let mut line = format!(
                "{}{}@{}:{}",
                if record.defective { "~" } else { "" },
                record.name,
                record.span.line,
                record.span.col
            );
            if record.is_network() {
                line.push_str(" (network)");
            }
            for (name, values, span) in &record.attrs {
                if values.is_empty() {
                    line.push_str(&format!(" {name}@{}:{}", span.line, span.col));
                } else {
                    line.push_str(&format!(
                        " {name}={}@{}:{}",
                        values.join(","),
                        span.line,
                        span.col
                    ));
                }
            }
            line
        })
        .collect();
    out.extend(diagnostics.iter().map(|diagnostic| diagnostic.to_string()));
    assert_text(expected, &out.join("\n"));
}
