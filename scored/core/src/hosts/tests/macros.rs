//! Macros, and includes.

use super::*;

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
