//! The validator on data: one submission in, the refusal or the request out.

use std::ffi::OsString;
use std::time::Duration;

use super::*;
use crate::proto::{JobOptions, WireRlimit};

/// A valid submission of `true` in `/`.
fn good() -> Submit {
    Submit {
        stages: vec![vec!["true".into()]],
        joiner: Joiner::Sequence,
        options: JobOptions {
            procs: ProcRequest::Nodes(1),
            priority: None,
            wait: false,
            memory: None,
            disk: None,
            pty: false,
            time_ms: None,
            batch: Default::default(),
        },
        env: Vec::new(),
        cwd: "/".into(),
        ignored_signals: Vec::new(),
        rlimits: Vec::new(),
        umask: None,
        nice: None,
        ioprio: None,
        closed_stdio: Vec::new(),
        fds: Vec::new(),
        pmi_ranks: 0,
        pmix_namespace: None,
        pmi_port: false,
    }
}

/// `good()` changed by `change` is refused with `expected`, by both
/// entries of the validator.
fn check(change: impl FnOnce(&mut Submit), expected: &str) {
    let mut submit = good();
    change(&mut submit);
    let checked = super::check(&submit).map_err(|error| error.to_string());
    let converted = JobRequest::try_from(submit)
        .map(drop)
        .map_err(|error| error.to_string());
    assert_eq!(checked, converted, "check and try_from disagree");
    assert_eq!(checked, Err(expected.to_string()));
}

fn stages(stages: &[&[&str]]) -> Vec<Vec<WireBytes>> {
    stages
        .iter()
        .map(|argv| argv.iter().map(|&arg| arg.into()).collect())
        .collect()
}

#[test]
#[rustfmt::skip]
fn each_rule_is_refused_with_its_message() {
    check(|s| s.stages = Vec::new(), "the job has no program");
    check(|s| s.stages = vec![vec!["true".into()]; 65], "the job has 65 stages; at most 64 are allowed");
    check(|s| s.stages = stages(&[&["true"], &[]]), "stage 2 has no program");
    check(|s| s.stages = stages(&[&[""]]), "stage 1 has an empty program name");
    check(|s| s.stages = stages(&[&["true"], &["", "x"]]), "stage 2 has an empty program name");
    check(|s| s.stages = vec![vec!["echo".into(), WireBytes::Raw(b"a\0b".to_vec())]], "an argument of stage 1 contains a NUL byte");
    check(|s| s.stages = vec![vec![WireBytes::Raw(b"tr\0ue".to_vec())]], "an argument of stage 1 contains a NUL byte");
    check(|s| s.options.procs = ProcRequest::Nodes(0), "nodes=0 asks for no processes: the count must be at least 1");
    check(|s| s.options.procs = ProcRequest::Nodes(65_537), "nodes=65537 asks for too many processes: at most 65536 are allowed");
    check(|s| s.options.procs = ProcRequest::Nodes(u32::MAX), "nodes=4294967295 asks for too many processes: at most 65536 are allowed");
    check(|s| s.options.procs = ProcRequest::Grid { hosts: 0, per_host: 3 }, "nodes=0x3 asks for no processes: hosts and processes per host must be at least 1");
    check(|s| s.options.procs = ProcRequest::Grid { hosts: 3, per_host: 0 }, "nodes=3x0 asks for no processes: hosts and processes per host must be at least 1");
    check(|s| s.options.procs = ProcRequest::Grid { hosts: 257, per_host: 256 }, "nodes=257x256 asks for too many processes: at most 65536 are allowed");
    check(|s| s.options.procs = ProcRequest::Grid { hosts: u32::MAX, per_host: u32::MAX }, "nodes=4294967295x4294967295 asks for too many processes: at most 65536 are allowed");
    check(|s| s.options.procs = ProcRequest::Hosts(0), "hosts=0 asks for no hosts: the count must be at least 1");
    check(|s| s.options.procs = ProcRequest::Hosts(65_537), "hosts=65537 asks for too many hosts: at most 65536 are allowed");
    check(|s| s.options.memory = Some(0), "limit memory=0 must be at least 1 byte");
    check(|s| s.options.disk = Some(0), "limit disk=0 must be at least 1 byte");
    check(|s| s.options.memory = Some((1 << 20) - 1), "limit memory=1048575 is 1024K, under the 1M that any job needs (a size without a unit is in bytes: write 512M or 2G)");
    check(|s| s.options.time_ms = Some(0), "time limit 0ms must be at least 1ms");
    check(|s| s.cwd = "".into(), "the working directory must be an absolute path");
    check(|s| s.cwd = "tmp".into(), "the working directory must be an absolute path");
    check(|s| s.cwd = WireBytes::Raw(b"/tmp\0/x".to_vec()), "the working directory contains a NUL byte");
    check(|s| s.cwd = format!("/{}", "d".repeat(4095)).as_str().into(), "the working directory is 4096 bytes long; the budget for a path is 4095 bytes (PATH_MAX)");
    check(|s| s.stages = vec![vec!["echo".into(), "x".repeat(131_073).as_str().into()]], "an argument of stage 1 is 131073 bytes long; the budget for one argument or environment entry is 131072 bytes (MAX_ARG_STRLEN)");
    check(|s| s.env = vec![("HUGE".into(), "v".repeat(131_068).as_str().into())], "environment variable HUGE is 131073 bytes long; the budget for one argument or environment entry is 131072 bytes (MAX_ARG_STRLEN)");
    check(|s| s.ignored_signals = vec![0], "ignored signal 0 is not a signal number (1-64)");
    check(|s| s.ignored_signals = vec![19], "signal 19 cannot be ignored");
    check(|s| s.rlimits = vec![WireRlimit { resource: "nofile".into(), soft: Some(10), hard: Some(5) }], "resource limit nofile: soft limit 10 is above the hard limit 5");
    check(|s| s.umask = Some(0o1000), "umask 1000 is not a file mode mask (0-777)");
}

#[test]
fn the_first_broken_rule_is_the_one_reported() {
    // Stages before processes before limits before the directory.
    check(
        |s| {
            s.stages = Vec::new();
            s.options.procs = ProcRequest::Nodes(0);
            s.cwd = "x".into();
        },
        "the job has no program",
    );
    check(
        |s| {
            s.options.procs = ProcRequest::Nodes(0);
            s.options.memory = Some(0);
            s.cwd = "x".into();
        },
        "nodes=0 asks for no processes: the count must be at least 1",
    );
    check(
        |s| {
            s.options.time_ms = Some(0);
            s.cwd = "x".into();
        },
        "time limit 0ms must be at least 1ms",
    );
}

#[test]
fn the_edges_of_each_rule_pass() {
    let mut submit = good();
    submit.stages = vec![vec!["true".into()]; MAX_STAGES];
    submit.options.procs = ProcRequest::Grid {
        hosts: 256,
        per_host: 256,
    };
    submit.options.memory = Some(1 << 20);
    submit.options.disk = Some(1 << 20);
    submit.options.time_ms = Some(1);
    submit.cwd = WireBytes::Raw(vec![b'/', 0xff]);
    assert_eq!(super::check(&submit), Ok(()));
    let mut long = good();
    long.cwd = format!("/{}", "d".repeat(MAX_PATH_BYTES - 1))
        .as_str()
        .into();
    long.stages = vec![vec![
        "echo".into(),
        "x".repeat(MAX_STRING_BYTES).as_str().into(),
    ]];
    long.env = vec![("V".into(), "v".repeat(MAX_STRING_BYTES - 2).as_str().into())];
    assert_eq!(super::check(&long), Ok(()));
    let request = JobRequest::try_from(submit).expect("valid");
    assert_eq!(request.stages.len(), MAX_STAGES);
    assert_eq!(request.procs_total(), 65_536);
    assert_eq!(request.time, Some(Duration::from_millis(1)));
    for procs in [ProcRequest::Nodes(65_536), ProcRequest::Hosts(65_536)] {
        let mut submit = good();
        submit.options.procs = procs;
        assert_eq!(super::check(&submit), Ok(()), "{}", procs.describe());
    }
}

#[test]
fn a_valid_submission_keeps_everything_but_unpassable_variables() {
    let mut submit = good();
    submit.stages = vec![
        vec!["sh".into(), "-c".into(), WireBytes::Raw(vec![0xff, b'x'])],
        vec!["cat".into()],
    ];
    submit.joiner = Joiner::Pipe;
    submit.options = JobOptions {
        procs: ProcRequest::Grid {
            hosts: 2,
            per_host: 3,
        },
        priority: Some(2),
        wait: true,
        memory: Some(1 << 20),
        disk: Some(1 << 30),
        pty: true,
        time_ms: Some(90_000),
        batch: Default::default(),
    };
    submit.env = vec![
        ("A".into(), "1".into()),
        ("NUL".into(), WireBytes::Raw(b"a\0b".to_vec())),
        (WireBytes::Raw(b"N\0UL".to_vec()), "x".into()),
        ("".into(), "empty name".into()),
        ("B=C".into(), "d".into()),
        ("EMPTY".into(), "".into()),
        (WireBytes::Raw(vec![0xfe]), WireBytes::Raw(vec![0xff])),
    ];
    submit.cwd = "/tmp".into();
    submit.ignored_signals = vec![1, 13];
    submit.rlimits = vec![WireRlimit {
        resource: "nofile".into(),
        soft: Some(64),
        hard: None,
    }];
    submit.umask = Some(0o022);
    let request = JobRequest::try_from(submit).expect("valid");
    use std::os::unix::ffi::OsStringExt;
    let os = |bytes: &[u8]| OsString::from_vec(bytes.to_vec());
    assert_eq!(
        request,
        JobRequest {
            stages: vec![
                vec![os(b"sh"), os(b"-c"), os(&[0xff, b'x'])],
                vec![os(b"cat")]
            ],
            joiner: Joiner::Pipe,
            procs: ProcRequest::Grid {
                hosts: 2,
                per_host: 3
            },
            priority: Some(2),
            wait: true,
            memory: Some(1 << 20),
            disk: Some(1 << 30),
            time: Some(Duration::from_secs(90)),
            env: vec![
                (os(b"A"), os(b"1")),
                (os(b"EMPTY"), os(b"")),
                (os(&[0xfe]), os(&[0xff])),
            ],
            cwd: os(b"/tmp"),
            inherited: Inherited {
                ignored: 1 | 1 << 12,
                rlimits: vec![(inherit::NOFILE, 64, inherit::UNLIMITED)],
                umask: Some(0o022),
                nice: None,
                ioprio: None,
            },
            batch: Default::default(),
        }
    );
}

#[test]
fn counts_as_typed_are_checked_before_narrowing() {
    assert_eq!(check_counts(ProcCounts::Nodes(1)), Ok(1));
    assert_eq!(
        check_counts(ProcCounts::Nodes(u64::MAX)),
        Err(ProcsProblem::TooManyProcesses)
    );
    assert_eq!(
        check_counts(ProcCounts::Grid {
            hosts: u64::MAX,
            per_host: 2
        }),
        Err(ProcsProblem::TooManyProcesses)
    );
    assert_eq!(
        check_counts(ProcCounts::Grid {
            hosts: 4,
            per_host: 3
        }),
        Ok(12)
    );
    assert_eq!(
        check_counts(ProcCounts::Hosts(1 << 40)),
        Err(ProcsProblem::TooManyHosts)
    );
}

#[test]
#[rustfmt::skip]
fn pmi_descriptors_match_a_known_rank_count_and_are_bounded() {
    let mut two = good();
    two.options.procs = ProcRequest::Nodes(2);
    two.pmi_ranks = 2;
    assert_eq!(super::check(&two), Ok(()));
    two.options.procs = ProcRequest::Grid { hosts: 2, per_host: 3 };
    two.pmi_ranks = 6;
    two.stages = vec![vec!["true".into()]; 2];
    assert_eq!(super::check(&two), Ok(()));
    check(|s| { s.options.procs = ProcRequest::Nodes(2); s.pmi_ranks = 3 },
        "PMI descriptors for 3 ranks do not match nodes=2: a PMI world needs the rank count of nodes=N or nodes=NxM");
    check(|s| { s.options.procs = ProcRequest::Hosts(2); s.pmi_ranks = 2 },
        "PMI descriptors for 2 ranks do not match hosts=2: a PMI world needs the rank count of nodes=N or nodes=NxM");
    check(|s| { s.options.procs = ProcRequest::Nodes(65); s.pmi_ranks = 65; s.stages = vec![vec!["true".into()]; 2] },
        "PMI for 65 ranks in each of 2 stages is over the limit of 128 ranks in all");
}

#[test]
fn a_pmix_namespace_is_plain_and_short_or_refused() {
    let mut submit = good();
    submit.pmix_namespace = Some("scrun.42.0123abcd".into());
    assert_eq!(super::check(&submit), Ok(()));
    check(
        |s| s.pmix_namespace = Some("a b".into()),
        "PMIx namespace \"a b\" is not 1 to 200 letters, digits, '.', '_' or '-'",
    );
    check(
        |s| s.pmix_namespace = Some(String::new()),
        "PMIx namespace \"\" is not 1 to 200 letters, digits, '.', '_' or '-'",
    );
    check(
        |s| s.pmix_namespace = Some("x".repeat(201)),
        "PMIx namespace \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\" is not 1 to 200 letters, digits, '.', '_' or '-'",
    );
}
