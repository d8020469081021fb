//! Tests of the hosts database: source text in, a topology dump or rendered
//! diagnostics out. Files come from memory through [`MemLoader`]; the machine
//! is a fixed four-CPU, 16 GiB [`Machine`], never the real one.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;
use crate::units::CpuSet;

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

// Records, attributes and merging.

#[test]
fn one_host_takes_every_default() {
    check(
        "node0",
        "
        cluster 0 default: cpugen=default speed=1 cores=4 hosts=node0
        host 0 node0: cluster=0 cpus=0-3 memory=16G
        ",
    );
}

#[test]
fn attributes_are_read() {
    check(
        "node0 cpugen=x86 speed=2.5 cores=2 cpus=0-1 memory=4G watchfs=/scratch,/tmp group=a",
        "
        cluster 0 x86: cpugen=x86 speed=2.5 cores=2 hosts=node0
        host 0 node0: cluster=0 cpus=0-1 memory=4G groups=a watchfs=/scratch,/tmp
        ",
    );
}

#[test]
fn records_keep_every_word_and_position() {
    check_parse(
        "a x=1,2 -ethernet y=\n  b\tz=3",
        "
        a@1:1 x=1,2@1:3 -ethernet@1:9 y=@1:19
        b@2:3 z=3@2:5
        ",
    );
}

#[test]
fn repeated_attributes_concatenate() {
    check(
        "n group=a group=b,c cpus=0 cpus=2",
        "
        cluster 0 default: cpugen=default speed=1 cores=2 hosts=n
        host 0 n: cluster=0 cpus=0,2 memory=16G groups=a,b,c
        ",
    );
}

#[test]
fn lines_with_one_name_merge() {
    check_parse(
        "a x=1\nb\na y=2 x=3",
        "
        a@1:1 x=1@1:3 y=2@3:3 x=3@3:7
        b@2:1
        ",
    );
    check(
        "n group=a\nm\nn cpus=1 group=b",
        "
        cluster 0 default.0: cpugen=default speed=1 cores=1 hosts=n
        cluster 1 default.1: cpugen=default speed=1 cores=4 hosts=m
        host 0 n: cluster=0 cpus=1 memory=8G groups=a,b
        host 1 m: cluster=1 cpus=0-3 memory=8G
        ",
    );
}

#[test]
fn continuation_joins_lines() {
    check_parse("a x=1 \\\n  y=2\nb", "a@1:1 x=1@1:3 y=2@2:3\nb@3:1");
    check_parse("a cpus=0-1,\\\n2", "a@1:1 cpus=0-1,2@1:3");
}

#[test]
fn comments_of_three_kinds() {
    check_parse(
        "# a comment\na x=1 // trailing\n/* block\n   over lines */ b y=2 /* inline */ z=3\n  # indented",
        "
        a@2:1 x=1@2:3
        b@4:18 y=2@4:20 z=3@4:37
        ",
    );
}

/// Values that may not be meant are accepted with a
/// warning naming FILE:LINE; CPUs that are not online are refused.
#[test]
fn typos_and_memory_beyond_the_machine_are_warned_about() {
    check(
        "a memroy=1G cpus=0\nb memory=99T cpus=1 colour=red memroy=2G\nc cpus=0-99",
        "
        hosts.db:3:3: host 'c', attribute cpus: CPUs 4-99 are not online (online CPUs: 0-3)
        c cpus=0-99
          ^
        ",
    );
    check(
        "a memroy=1G cpus=0\nb memory=99T cpus=1 colour=red memroy=2G",
        "
        hosts.db:1:3: warning: host 'a', attribute memroy: unknown attribute (did you mean memory?); kept and ignored (scored reads group, cpugen, speed, cores, cpus, memory, watchfs)
        a memroy=1G cpus=0
          ^
        hosts.db:2:21: warning: host 'b', attribute colour: unknown attribute; kept and ignored (scored reads group, cpugen, speed, cores, cpus, memory, watchfs)
        b memory=99T cpus=1 colour=red memroy=2G
                            ^
        hosts.db:2:3: warning: host 'b', attribute memory: 99T is more than this machine's memory (16G); accepted as given
        b memory=99T cpus=1 colour=red memroy=2G
          ^
        cluster 0 default: cpugen=default speed=1 cores=1 hosts=a,b
        host 0 a: cluster=0 cpus=0 memory=8G
        host 1 b: cluster=0 cpus=1 memory=99T
        ",
    );
}

#[test]
fn unknown_attributes_and_flags_are_ignored() {
    check(
        "n network=myrinet2k,ethernet smp=2 -ethernet msgbserv=(comp3:8764) cpus=3",
        "
        cluster 0 default: cpugen=default speed=1 cores=1 hosts=n
        host 0 n: cluster=0 cpus=3 memory=16G
        ",
    );
}

#[test]
fn network_records_are_not_hosts() {
    check_parse(
        "myrinet2k type=myrinet2k -config:file=/opt/score/etc/myri.conf\nn",
        "
        myrinet2k@1:1 (network) type=myrinet2k@1:11 -config:file=/opt/score/etc/myri.conf@1:26
        n@2:1
        ",
    );
    check(
        "ethernet type=ethernet\nn cpus=0",
        "
        cluster 0 default: cpugen=default speed=1 cores=1 hosts=n
        host 0 n: cluster=0 cpus=0 memory=16G
        ",
    );
}

#[test]
fn defective_hosts_are_excluded() {
    check_parse("~a x=1\na y=2\n~b", "~a@1:1 x=1@1:4 y=2@2:3\n~b@3:1");
    check(
        "~a cpus=0\nb cpus=1\na cpus=2",
        "
        cluster 0 default: cpugen=default speed=1 cores=1 hosts=b
        host 0 b: cluster=0 cpus=1 memory=16G
        ",
    );
}

// Macros.

#[test]
fn macros_expand_whole_words() {
    check(
        "#define FAST cpugen=x86 speed=2\nn0 FAST cpus=0\nn1 cpus=FAST",
        "
        hosts.db:3:4: host 'n1', attribute cpus: invalid CPU list 'FAST': 'FAST' is not a CPU number or a range A-B
        n1 cpus=FAST
           ^
        ",
    );
    check(
        "#define FAST cpugen=x86 speed=2\nn0 FAST cpus=0\nn1 FAST cpus=1",
        "
        cluster 0 x86: cpugen=x86 speed=2 cores=1 hosts=n0,n1
        host 0 n0: cluster=0 cpus=0 memory=8G
        host 1 n1: cluster=0 cpus=1 memory=8G
        ",
    );
}

#[test]
fn macros_nest_and_name_records() {
    check_parse(
        "#define NODE n0 GEN\n#define GEN cpugen=x86 SPEED\n#define SPEED speed=2\nNODE cores=1",
        "n0@4:1 cpugen=x86@4:1 speed=2@4:1 cores=1@4:6",
    );
}

#[test]
fn macros_expand_after_their_definition_only() {
    check_parse("n A\n#define A x=1\nm A", "n@1:1 A@1:3\nm@3:1 x=1@3:3");
}

#[test]
fn macro_loops_end() {
    check_parse(
        "#define A B x=1\n#define B A y=2\nn A\nm B",
        "
        n@3:1 A@3:3 y=2@3:3 x=1@3:3
        m@4:1 B@4:3 x=1@4:3 y=2@4:3
        ",
    );
    check_parse("#define SELF SELF z=1\nn SELF", "n@2:1 SELF@2:3 z=1@2:3");
}

#[test]
fn macros_can_be_redefined_and_undefined() {
    check_parse(
        "#define A x=1\n#define A x=2\nn A\n#undef A\nm A",
        "n@3:1 x=2@3:3\nm@5:1 A@5:3",
    );
}

#[test]
fn macro_expanding_to_nothing_leaves_no_record() {
    check_parse("#define EMPTY\nEMPTY\nn EMPTY x=1", "n@3:1 x=1@3:9");
}

#[test]
fn bad_macro_definitions() {
    check_parse(
        "#define\n#define 1A x\n#define F(a) a\n#undef A B",
        "
        hosts.db:1:1: #define needs a macro name
        #define
        ^
        hosts.db:2:9: invalid macro name '1A': expected a letter or '_' followed by letters, digits or '_'
        #define 1A x
                ^
        hosts.db:3:9: function-like macro 'F(a)' is not supported: a macro is a name for words
        #define F(a) a
                ^
        hosts.db:4:10: unexpected 'B' after #undef A
        #undef A B
                 ^
        ",
    );
}

#[test]
fn conditionals_are_errors() {
    check_parse(
        "#ifdef X\nn\n#endif",
        "
        n@2:1
        hosts.db:1:1: #ifdef is not supported: the hosts database has no conditionals
        #ifdef X
        ^
        hosts.db:3:1: #endif is not supported: the hosts database has no conditionals
        #endif
        ^
        ",
    );
}

#[test]
fn macro_expansion_is_bounded() {
    // Each level doubles the work while producing nothing.
    let mut source = String::from("#define E0\n");
    for level in 1..40 {
        source.push_str(&format!("#define E{level} E{} E{}\n", level - 1, level - 1));
    }
    source.push_str("n E39");
    check_parse(
        &source,
        "
        hosts.db:41:3: expanding macro 'E39' takes more than 1000000 steps
        n E39
          ^
        ",
    );
    let mut source = String::from("#define W0 www\n");
    for level in 1..20 {
        source.push_str(&format!("#define W{level} W{} W{}\n", level - 1, level - 1));
    }
    source.push_str("n W19\nm x=1");
    check_parse(
        &source,
        "
        m@22:1 x=1@22:3
        hosts.db:21:3: macro 'W19' expands to more than 64 KiB on one line
        n W19
          ^
        ",
    );
}

// Includes.

#[test]
fn includes_are_relative_to_the_including_file() {
    check_files(
        &[
            ("etc/hosts.db", "#include \"racks/a.db\"\nn2 cpus=2 X"),
            (
                "etc/racks/a.db",
                "#define X cpugen=x86\n#include \"../b.db\"\nn0 cpus=0 X",
            ),
            ("etc/b.db", "n1 cpus=1"),
        ],
        "
        cluster 0 default: cpugen=default speed=1 cores=1 hosts=n1
        cluster 1 x86: cpugen=x86 speed=1 cores=1 hosts=n0,n2
        host 0 n1: cluster=0 cpus=1 memory=5726623061
        host 1 n0: cluster=1 cpus=0 memory=5726623061
        host 2 n2: cluster=1 cpus=2 memory=5726623061
        ",
    );
}

#[test]
fn a_file_may_be_included_twice() {
    check_files(
        &[
            ("hosts.db", "#include \"a.db\"\n#include \"./a.db\""),
            ("a.db", "n group=g"),
        ],
        "
        cluster 0 default: cpugen=default speed=1 cores=4 hosts=n
        host 0 n: cluster=0 cpus=0-3 memory=16G groups=g
        ",
    );
}

#[test]
fn missing_include_points_at_the_include_line() {
    check_files(
        &[("conf/hosts.db", "n\n  #include \"nope.db\"")],
        "
        conf/hosts.db:2:12: cannot read included file 'nope.db' (conf/nope.db): no such file
          #include \"nope.db\"
                   ^
        ",
    );
}

#[test]
fn recursive_includes_name_the_cycle() {
    check_files(
        &[("hosts.db", "n\n#include \"hosts.db\"")],
        "
        hosts.db:2:10: recursive #include: hosts.db -> hosts.db
        #include \"hosts.db\"
                 ^
        ",
    );
    check_files(
        &[
            ("hosts.db", "#include \"a.db\"\nn"),
            ("a.db", "#include \"sub/b.db\""),
            ("sub/b.db", "#include \"../a.db\""),
        ],
        "
        sub/b.db:1:10: recursive #include: a.db -> sub/b.db -> a.db
        #include \"../a.db\"
                 ^
        ",
    );
}

#[test]
fn deep_include_chains_stop() {
    let names: Vec<String> = (0..20).map(|idx| format!("f{idx}.db")).collect();
    let texts: Vec<String> = (0..20)
        .map(|idx| format!("h{idx}\n#include \"f{}.db\"", idx + 1))
        .collect();
    let files: Vec<(&str, &str)> = names
        .iter()
        .zip(&texts)
        .map(|(name, text)| (name.as_str(), text.as_str()))
        .collect();
    check_files(
        &files,
        "
        f16.db:2:10: #include of 'f17.db' is nested more than 16 levels deep
        #include \"f17.db\"
                 ^
        ",
    );
}

#[test]
fn bad_include_lines() {
    check_parse(
        "#include\n#include <a.db>\n#include \"\"\n#include \"a.db\" x\n#include \"a.db",
        "
        hosts.db:1:1: #include needs a file name in double quotes, as in #include \"racks.db\"
        #include
        ^
        hosts.db:2:10: invalid #include '<a.db>': expected a file name in double quotes, as in #include \"racks.db\"
        #include <a.db>
                 ^
        hosts.db:3:10: invalid #include '\"\"': expected a file name in double quotes, as in #include \"racks.db\"
        #include \"\"
                 ^
        hosts.db:4:17: unexpected 'x' after the #include file name
        #include \"a.db\" x
                        ^
        hosts.db:5:10: unterminated quoted file name: expected a closing '\"'
        #include \"a.db
                 ^
        ",
    );
}

#[test]
fn unreadable_main_file() {
    let mut loader = loader(&[]);
    let (_, diagnostics) = parse(Path::new("/etc/scorehosts.db"), &mut loader);
    assert_text(
        "/etc/scorehosts.db: cannot read the hosts database: no such file",
        &render_diagnostics(&diagnostics),
    );
}

// Attribute errors: each names the host, the attribute and the value, at the
// attribute's position.

#[test]
fn speed_errors() {
    check(
        "a speed=fast\nb speed=0\nc speed=-1\nd speed=inf\ne speed=1,2\nf speed=1 speed=2 speed=3",
        "
        hosts.db:1:3: host 'a', attribute speed: invalid speed 'fast': expected a positive number such as 1 or 2.5
        a speed=fast
          ^
        hosts.db:2:3: host 'b', attribute speed: invalid speed '0': expected a positive number such as 1 or 2.5
        b speed=0
          ^
        hosts.db:3:3: host 'c', attribute speed: invalid speed '-1': expected a positive number such as 1 or 2.5
        c speed=-1
          ^
        hosts.db:4:3: host 'd', attribute speed: invalid speed 'inf': expected a positive number such as 1 or 2.5
        d speed=inf
          ^
        hosts.db:5:3: host 'e', attribute speed: several values ('1', '2'); speed takes one value
        e speed=1,2
          ^
        hosts.db:6:11: host 'f', attribute speed: several values ('1', '2', '3'); speed takes one value
        f speed=1 speed=2 speed=3
                  ^
        ",
    );
}

#[test]
fn cores_errors() {
    check(
        "a cores=0\nb cores=4097\nc cores=two\nd cores=+2\ne cores=",
        "
        hosts.db:1:3: host 'a', attribute cores: invalid cores '0': expected a whole number from 1 to 4096
        a cores=0
          ^
        hosts.db:2:3: host 'b', attribute cores: invalid cores '4097': expected a whole number from 1 to 4096
        b cores=4097
          ^
        hosts.db:3:3: host 'c', attribute cores: invalid cores 'two': expected a whole number from 1 to 4096
        c cores=two
          ^
        hosts.db:4:3: host 'd', attribute cores: invalid cores '+2': expected a whole number from 1 to 4096
        d cores=+2
          ^
        hosts.db:5:3: host 'e', attribute cores: invalid cores '': expected a whole number from 1 to 4096
        e cores=
          ^
        ",
    );
}

#[test]
fn cores_may_exceed_cpus() {
    check(
        "n cpus=0 cores=4096",
        "
        cluster 0 default: cpugen=default speed=1 cores=4096 hosts=n
        host 0 n: cluster=0 cpus=0 memory=16G
        ",
    );
}

#[test]
fn cpus_errors() {
    check(
        "a cpus=x\nb cpus=3-1\nc cpus=8-15\nd cpus=\ne cpus=2048\nf cpus=2,9",
        "
        hosts.db:1:3: host 'a', attribute cpus: invalid CPU list 'x': 'x' is not a CPU number or a range A-B
        a cpus=x
          ^
        hosts.db:2:3: host 'b', attribute cpus: invalid CPU range '3-1' in '3-1': the first CPU is above the last
        b cpus=3-1
          ^
        hosts.db:4:3: host 'd', attribute cpus: empty CPU list: expected numbers and ranges such as 0-3,8
        d cpus=
          ^
        hosts.db:5:3: host 'e', attribute cpus: CPU 2048 in '2048' is above the limit of 1023
        e cpus=2048
          ^
        hosts.db:3:3: host 'c', attribute cpus: none of CPUs 8-15 is online (online CPUs: 0-3)
        c cpus=8-15
          ^
        hosts.db:6:3: host 'f', attribute cpus: CPU 9 is not online (online CPUs: 0-3)
        f cpus=2,9
          ^
        ",
    );
}

#[test]
fn memory_errors() {
    check(
        "a memory=lots\nb memory=0\nc memory=1G,2G\nd memory=99999999T",
        "
        hosts.db:1:3: host 'a', attribute memory: invalid size 'lots': expected a number with an optional K, M, G or T suffix (e.g. 512M)
        a memory=lots
          ^
        hosts.db:2:3: host 'b', attribute memory: invalid memory '0': a host needs more than 0 bytes
        b memory=0
          ^
        hosts.db:3:3: host 'c', attribute memory: several values ('1G', '2G'); memory takes one value
        c memory=1G,2G
          ^
        hosts.db:4:3: host 'd', attribute memory: size '99999999T' is too large
        d memory=99999999T
          ^
        ",
    );
}

#[test]
fn cpugen_group_and_watchfs_errors() {
    check(
        "a cpugen=\nb cpugen=x cpugen=y\nc group=a,,b\nd watchfs=scratch\ne watchfs=",
        "
        hosts.db:1:3: host 'a', attribute cpugen: empty cpugen: expected a CPU kind such as x86_64
        a cpugen=
          ^
        hosts.db:2:12: host 'b', attribute cpugen: several values ('x', 'y'); cpugen takes one value
        b cpugen=x cpugen=y
                   ^
        hosts.db:3:3: host 'c', attribute group: empty group name
        c group=a,,b
          ^
        hosts.db:4:3: host 'd', attribute watchfs: 'scratch' is not an absolute directory path
        d watchfs=scratch
          ^
        hosts.db:5:3: host 'e', attribute watchfs: '' is not an absolute directory path
        e watchfs=
          ^
        ",
    );
}

#[test]
fn errors_in_included_files_point_into_them() {
    check_files(
        &[
            ("hosts.db", "#include \"r/a.db\""),
            ("r/a.db", "\n\tn speed=x"),
        ],
        "
        r/a.db:2:4: host 'n', attribute speed: invalid speed 'x': expected a positive number such as 1 or 2.5
        \tn speed=x
        \t  ^
        ",
    );
}

#[test]
fn errors_from_macros_point_at_the_use() {
    check(
        "#define BAD speed=x\nn  BAD",
        "
        hosts.db:2:4: host 'n', attribute speed: invalid speed 'x': expected a positive number such as 1 or 2.5
        n  BAD
           ^
        ",
    );
}

#[test]
fn defective_and_network_records_are_not_checked() {
    check(
        "~a speed=x\nnet type=x speed=y\nb cpus=0",
        "
        cluster 0 default: cpugen=default speed=1 cores=1 hosts=b
        host 0 b: cluster=0 cpus=0 memory=16G
        ",
    );
}

#[test]
fn no_hosts_is_an_error() {
    check("", "hosts.db:1: the hosts database defines no host");
    check(
        "# only comments\n",
        "hosts.db:1: the hosts database defines no host",
    );
    check(
        "~a\n~b\nnet type=ethernet",
        "hosts.db:1: the hosts database defines no host (2 defective hosts are excluded)",
    );
}

// Clusters.

#[test]
fn clusters_form_by_cpugen_speed_and_cores() {
    check(
        "a cpugen=x86 cpus=0\nb cpugen=arm cpus=1\nc cpugen=x86 speed=1.0 cpus=2\nd cpugen=x86 speed=2 cpus=3\ne cpugen=x86 cpus=0-1",
        "
        cluster 0 x86.0: cpugen=x86 speed=1 cores=1 hosts=a,c
        cluster 1 arm: cpugen=arm speed=1 cores=1 hosts=b
        cluster 2 x86.2: cpugen=x86 speed=2 cores=1 hosts=d
        cluster 3 x86.3: cpugen=x86 speed=1 cores=2 hosts=e
        host 0 a: cluster=0 cpus=0 memory=3435973836
        host 1 b: cluster=1 cpus=1 memory=3435973836
        host 2 c: cluster=0 cpus=2 memory=3435973836
        host 3 d: cluster=2 cpus=3 memory=3435973836
        host 4 e: cluster=3 cpus=0-1 memory=3435973836
        ",
    );
}

#[test]
fn cluster_names_stay_unique() {
    check(
        "a cpugen=x86 cpus=0\nb cpugen=x86 cpus=0-1\nc cpugen=x86.1 cpus=2",
        "
        cluster 0 x86.0: cpugen=x86 speed=1 cores=1 hosts=a
        cluster 1 x86.1: cpugen=x86 speed=1 cores=2 hosts=b
        cluster 2 x86.1.2: cpugen=x86.1 speed=1 cores=1 hosts=c
        host 0 a: cluster=0 cpus=0 memory=5726623061
        host 1 b: cluster=1 cpus=0-1 memory=5726623061
        host 2 c: cluster=2 cpus=2 memory=5726623061
        ",
    );
}

/// A renamed plain `cpugen` can meet another plain `cpugen`: `a.0` becomes
/// `a.0.2`, which cluster 3 holds as its `cpugen`; that one must yield too.
/// Found by the uniqueness property of the hosts fuzz target
/// (`fuzz/regressions/hosts/cluster-names-collide.db`).
#[test]
fn renamed_cluster_names_stay_unique() {
    check(
        "h0 cpugen=a cpus=0\nh1 cpugen=a speed=2 cpus=1\nh2 cpugen=a.0 cpus=2\nh3 cpugen=a.0.2 cpus=3",
        "
        cluster 0 a.0: cpugen=a speed=1 cores=1 hosts=h0
        cluster 1 a.1: cpugen=a speed=2 cores=1 hosts=h1
        cluster 2 a.0.2: cpugen=a.0 speed=1 cores=1 hosts=h2
        cluster 3 a.0.2.3: cpugen=a.0.2 speed=1 cores=1 hosts=h3
        host 0 h0: cluster=0 cpus=0 memory=4G
        host 1 h1: cluster=1 cpus=1 memory=4G
        host 2 h2: cluster=2 cpus=2 memory=4G
        host 3 h3: cluster=3 cpus=3 memory=4G
        ",
    );
}

#[test]
fn explicit_cores_join_hosts_of_different_sizes() {
    check(
        "a cpus=0 cores=2\nb cpus=1-2",
        "
        cluster 0 default: cpugen=default speed=1 cores=2 hosts=a,b
        host 0 a: cluster=0 cpus=0 memory=8G
        host 1 b: cluster=0 cpus=1-2 memory=8G
        ",
    );
}

#[test]
fn memory_defaults_to_an_even_share() {
    check(
        "a memory=1G\nb\nc",
        "
        cluster 0 default: cpugen=default speed=1 cores=4 hosts=a,b,c
        host 0 a: cluster=0 cpus=0-3 memory=1G
        host 1 b: cluster=0 cpus=0-3 memory=5726623061
        host 2 c: cluster=0 cpus=0-3 memory=5726623061
        ",
    );
}

#[test]
fn many_hosts_share_few_cpus() {
    let source: String = (0..64)
        .map(|idx| format!("h{idx} cpus={}\n", idx % 4))
        .collect();
    let topology = {
        let mut loader = loader(&[("hosts.db", &source)]);
        let (database, diagnostics) = parse(Path::new("hosts.db"), &mut loader);
        assert!(diagnostics.is_empty());
        resolve(&database, None, &machine()).map_err(|d| render_diagnostics(&d))
    };
    let topology = topology.unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(topology.hosts.len(), 64);
    assert_eq!(topology.clusters.len(), 1);
    assert_eq!(topology.hosts[63].memory, (16 << 30) / 64);
    assert_eq!(topology.hosts[63].id, crate::ids::HostId(63));
}

// Groups.

#[test]
fn group_selects_hosts() {
    check_group(
        "a group=big,all cpus=0\nb group=small cpus=1\nc group=all cpus=2",
        "all",
        "
        cluster 0 default: cpugen=default speed=1 cores=1 hosts=a,c
        host 0 a: cluster=0 cpus=0 memory=8G groups=big,all
        host 1 c: cluster=0 cpus=2 memory=8G groups=all
        ",
    );
}

#[test]
fn unknown_group_lists_the_groups() {
    check_group(
        "a group=big,all\nb group=small",
        "gpu",
        "hosts.db:1: no host belongs to group 'gpu'; the groups are 'all', 'big', 'small'",
    );
    check_group(
        "a\nb",
        "gpu",
        "hosts.db:1: no host belongs to group 'gpu': no host has a group= attribute",
    );
}

#[test]
fn machine_checks_apply_to_the_selected_group_only() {
    check_group(
        "a group=here cpus=0\nb group=elsewhere cpus=64-127",
        "here",
        "
        cluster 0 default: cpugen=default speed=1 cores=1 hosts=a
        host 0 a: cluster=0 cpus=0 memory=16G groups=here
        ",
    );
    check_group(
        "a group=here cpus=0\nb group=elsewhere speed=x",
        "here",
        "
        hosts.db:2:19: host 'b', attribute speed: invalid speed 'x': expected a positive number such as 1 or 2.5
        b group=elsewhere speed=x
                          ^
        ",
    );
}

// The embedded default.

#[test]
fn embedded_default_has_one_host_per_cpu() {
    assert_text(
        "
        cluster 0 default: cpugen=default speed=1 cores=1 hosts=host0,host1,host2,host3
        host 0 host0: cluster=0 cpus=0 memory=4G
        host 1 host1: cluster=0 cpus=1 memory=4G
        host 2 host2: cluster=0 cpus=2 memory=4G
        host 3 host3: cluster=0 cpus=3 memory=4G
        ",
        &render_topology(&embedded_default(&machine())),
    );
    let odd = Machine {
        online_cpus: CpuSet::from_cpus([2, 5]),
        total_memory: 3 << 30,
    };
    assert_text(
        "
        cluster 0 default: cpugen=default speed=1 cores=1 hosts=host0,host1
        host 0 host0: cluster=0 cpus=2 memory=1536M
        host 1 host1: cluster=0 cpus=5 memory=1536M
        ",
        &render_topology(&embedded_default(&odd)),
    );
}

// Syntax errors and hostile input.

#[test]
fn bad_record_names() {
    check_parse(
        "a=b x=1\n~\n~ x=1\nn =1 y=2",
        "
        n@4:1 y=2@4:6
        hosts.db:1:1: record name 'a=b' contains '=': a line starts with the host name (did the previous line miss a '\\'?)
        a=b x=1
        ^
        hosts.db:2:1: '~' must be followed by the name of the defective host
        ~
        ^
        hosts.db:3:1: '~' must be followed by the name of the defective host
        ~ x=1
        ^
        hosts.db:4:3: attribute '=1' has no name before '='
        n =1 y=2
          ^
        ",
    );
}

#[test]
fn unterminated_comment_points_at_its_start() {
    check_parse(
        "a\nb /* not closed\nc",
        "
        a@1:1
        b@2:1
        hosts.db:2:3: unterminated /* comment
        b /* not closed
          ^
        ",
    );
}

#[test]
fn binary_garbage_is_refused() {
    check_parse(
        "good\n\u{0}\u{1}\u{7f}bin\nx y\u{1b}[31m\nok",
        "
        good@1:1
        ok@4:1
        hosts.db:2:1: control character U+0000 is not allowed in a hosts database
        ???bin
        ^
        hosts.db:3:4: control character U+001B is not allowed in a hosts database
        x y?[31m
           ^
        ",
    );
}

#[test]
fn byte_order_mark_is_skipped() {
    check_parse("\u{feff}n x=1", "n@1:1 x=1@1:3");
}

#[test]
fn huge_lines_are_refused_and_parsing_goes_on() {
    let source = format!("a {}\nb x=1", "y".repeat(MAX_LINE_LEN + 10));
    let mut loader = loader(&[("hosts.db", &source)]);
    let (database, diagnostics) = parse(Path::new("hosts.db"), &mut loader);
    assert_eq!(database.records.len(), 1);
    let rendered = render_diagnostics(&diagnostics);
    assert!(
        rendered.starts_with("hosts.db:1: line is longer than 1 MiB\na yyyy"),
        "{}",
        &rendered[..200]
    );
    // The excerpt is bounded whatever the line's length.
    assert!(rendered.len() < 200, "{}", rendered.len());
}

#[test]
fn too_many_records() {
    let source: String = (0..=MAX_RECORDS).map(|idx| format!("h{idx}\n")).collect();
    let mut loader = loader(&[("hosts.db", &source)]);
    let (database, diagnostics) = parse(Path::new("hosts.db"), &mut loader);
    assert_eq!(database.records.len(), MAX_RECORDS);
    assert_text(
        "
        hosts.db:100001:1: the hosts database holds more than 100000 records; record 'h100000' and later new ones are ignored
        h100000
        ^
        ",
        &render_diagnostics(&diagnostics),
    );
}

#[test]
fn too_many_attributes() {
    let line = format!("n x={}\n", ",".repeat(100_000));
    let source = line.repeat(11);
    let mut loader = loader(&[("hosts.db", &source)]);
    let (_, diagnostics) = parse(Path::new("hosts.db"), &mut loader);
    assert_eq!(diagnostics.len(), 1);
    assert!(diagnostics[0]
        .to_string()
        .starts_with("hosts.db:10:1: the hosts database holds more than 1000000 attributes"));
}

#[test]
fn errors_stop_after_a_hundred() {
    let source = "a=b\n".repeat(150);
    let mut loader = loader(&[("hosts.db", &source)]);
    let (_, diagnostics) = parse(Path::new("hosts.db"), &mut loader);
    assert_eq!(diagnostics.len(), MAX_DIAGNOSTICS + 1);
    assert_eq!(
        diagnostics[MAX_DIAGNOSTICS].to_string(),
        "hosts.db:101:1: too many errors; stopped after 100"
    );
}

#[test]
fn many_includes_of_one_file_are_bounded() {
    // Each file includes the next one twice: without a bound the parse would
    // follow 2^13 - 2 includes.
    let names: Vec<String> = (0..13).map(|idx| format!("f{idx}.db")).collect();
    let texts: Vec<String> = (0..13)
        .map(|idx| match idx {
            12 => "h12".to_string(),
            _ => format!(
                "h{idx}\n#include \"f{next}.db\"\n#include \"f{next}.db\"",
                next = idx + 1
            ),
        })
        .collect();
    let files: Vec<(&str, &str)> = names
        .iter()
        .zip(&texts)
        .map(|(name, text)| (name.as_str(), text.as_str()))
        .collect();
    let rendered = run(&files, None);
    assert!(
        rendered.contains("more than 1024 #include directives; stopped reading"),
        "{rendered}"
    );
}

// Rendering of diagnostics.

fn render(line: usize, col: Option<usize>, source_line: Option<&str>) -> String {
    Diagnostic::new(Path::new("h.db"), line, col, "bad", source_line).to_string()
}

#[test]
fn diagnostics_render_with_a_caret() {
    assert_text(
        "h.db:3:5: bad\nab\tcd\n  \t ^",
        &render(3, Some(5), Some("ab\tcd")),
    );
    assert_text("h.db:3: bad\nabc", &render(3, None, Some("abc")));
    assert_text("h.db:3:4: bad\nabc\n   ^", &render(3, Some(4), Some("abc")));
    assert_text("h.db: bad", &render(0, None, None));
}

#[test]
fn diagnostics_show_a_window_of_long_lines() {
    let line: String = (0..1000)
        .map(|idx| char::from(b'a' + (idx % 26) as u8))
        .collect();
    let rendered = render(1, Some(500), Some(&line));
    let lines: Vec<&str> = rendered.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[1].starts_with("...") && lines[1].ends_with("..."));
    assert_eq!(lines[1].chars().count(), 126);
    let caret = lines[2].len() - 1;
    assert_eq!(lines[1].as_bytes()[caret], line.as_bytes()[499]);
    let rendered = render(1, Some(3), Some(&line));
    assert_eq!(rendered.lines().nth(1).map(str::len), Some(123));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any text, including garbage, yields a result and never a panic.
    #[test]
    fn parse_and_resolve_never_panic(
        text in "([a-z~#=,/*\\\\\"\\- \t\n0-9]|#define |#include \"b.db\"|cpus=|speed=|/\\*|\\*/){0,80}",
        other in any::<Vec<u8>>(),
    ) {
        let other = String::from_utf8_lossy(&other).into_owned();
        let mut loader = loader(&[("hosts.db", &text), ("b.db", &other)]);
        let (database, diagnostics) = parse(Path::new("hosts.db"), &mut loader);
        for diagnostic in &diagnostics {
            prop_assert!(diagnostic.to_string().starts_with("hosts.db") || diagnostic.to_string().starts_with("b.db"));
        }
        let _ = resolve(&database, None, &machine());
        let _ = resolve(&database, Some("g"), &machine());
    }

    /// Random bytes, read as lossy text, never panic either.
    #[test]
    fn random_bytes_never_panic(bytes in any::<Vec<u8>>()) {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let mut loader = loader(&[("hosts.db", &text)]);
        let (database, _) = parse(Path::new("hosts.db"), &mut loader);
        let _ = resolve(&database, None, &machine());
    }
}
