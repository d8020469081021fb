//! The batch options' rules: patterns and their escapes, arrays, names
//! and dependencies, each with the message a user gets.

use super::*;

fn expand(pattern: &str, rank: Option<u32>, index: Option<u32>) -> String {
    Pattern::parse("output", pattern, index.is_some())
        .unwrap()
        .expand(&Expansion {
            job: 42,
            rank,
            index,
            name: "sim",
        })
}

#[test]
fn escapes_expand_to_the_job_rank_index_and_name() {
    assert_eq!(expand("run.%j.out", Some(0), None), "run.42.out");
    assert_eq!(expand("%x-%j.%r.log", Some(3), None), "sim-42.3.log");
    assert_eq!(expand("a%a/%%%j", Some(0), Some(7)), "a7/%42");
    assert_eq!(expand("out.%r", None, None), "out.%r");
    assert_eq!(expand("/tmp/plain", Some(9), None), "/tmp/plain");
}

#[test]
fn a_pattern_knows_whether_it_gives_a_file_per_rank() {
    let per_rank = |text| Pattern::parse("output", text, false).unwrap().per_rank();
    assert!(per_rank("x.%r"));
    assert!(!per_rank("x.%%r"));
    assert!(!per_rank("x.%j"));
}

#[test]
fn bad_patterns_are_refused_naming_the_option_and_the_escape() {
    let error = |text: &str, array| {
        Pattern::parse("error", text, array)
            .unwrap_err()
            .to_string()
    };
    let unknown = error("out.%q", false);
    assert!(
        unknown.starts_with("option 'error': 'out.%q' has an unknown escape '%q'"),
        "{unknown}"
    );
    assert!(error("out%", false).contains("lone '%'"));
    assert!(error("", false).contains("empty"));
    assert!(error("a\0b", false).contains("NUL"));
    assert!(error("x.%a", false).contains("not an array"));
    assert!(Pattern::parse("output", "x.%a", true).is_ok());
    let long = format!("{}%j", "a".repeat(MAX_PATTERN - 10));
    assert!(error(&long, false).contains("expand past"));
}

#[test]
fn arrays_parse_with_step_and_throttle() {
    let spec = ArraySpec::parse("1-10:3%2").unwrap();
    assert_eq!(
        spec,
        ArraySpec {
            first: 1,
            last: 10,
            step: 3,
            max: Some(2)
        }
    );
    assert_eq!(spec.len(), 4);
    assert_eq!(
        (0..spec.len()).map(|k| spec.index(k)).collect::<Vec<_>>(),
        [1, 4, 7, 10]
    );
    assert_eq!(spec.describe(), "1-10:3%2");
    assert_eq!(ArraySpec::parse("0-0").unwrap().len(), 1);
    assert_eq!(ArraySpec::parse("5-9%1").unwrap().describe(), "5-9%1");
    assert_eq!(ArraySpec::parse("0-9999").unwrap().len(), MAX_ARRAY);
}

#[test]
fn one_index_is_an_array_of_one() {
    let spec = ArraySpec::parse("7").unwrap();
    assert_eq!(
        spec,
        ArraySpec {
            first: 7,
            last: 7,
            step: 1,
            max: None
        }
    );
    assert_eq!((spec.len(), spec.index(0)), (1, 7));
    assert_eq!(ArraySpec::parse("7%1").unwrap().max, Some(1));
    let top = ArraySpec::parse(&u32::MAX.to_string()).unwrap();
    assert_eq!((top.len(), top.index(0)), (1, u32::MAX));
    assert!(ArraySpec::parse("4294967296")
        .unwrap_err()
        .contains("not a range of indices from 0 to 4294967295"));
}

#[test]
fn bad_arrays_say_what_is_wrong() {
    let error = |text| ArraySpec::parse(text).unwrap_err();
    assert!(error("5-1").contains("5 is above 1"), "{}", error("5-1"));
    assert!(error("1-5:0").contains("step of 0"));
    assert!(error("1-5%0").contains("%0"));
    assert!(
        error("x").contains("'x' is not a range or an index"),
        "{}",
        error("x")
    );
    assert!(
        error("7:2").contains("a step needs a range"),
        "{}",
        error("7:2")
    );
    assert!(error("7%0").contains("%0"));
    assert!(error("1,3").contains("not a range or an index"));
    assert!(error("a-b").contains("not a range of indices"));
    assert!(error("1-5:").contains("no step"));
    assert!(error("1-5%").contains("no count"));
    assert!(error("-1-5").contains("not a range of indices"));
    assert!(error("0-99999").contains("has 100000 elements; an array may have at most 10000"));
    assert!(error("0-4294967295").contains("elements"));
}

#[test]
fn names_are_one_word() {
    assert!(check_name("sweep-1.a_b").is_ok());
    assert!(check_name(&"n".repeat(MAX_NAME)).is_ok());
    for (name, why) in [
        ("", "empty"),
        ("a b", "a blank"),
        ("a/b", "'/'"),
        ("a\tb", "control character"),
    ] {
        let error = check_name(name).unwrap_err();
        assert_eq!(error.option, "name");
        assert!(error.reason.contains(why), "{name:?}: {error}");
    }
    assert!(check_name(&"n".repeat(MAX_NAME + 1))
        .unwrap_err()
        .reason
        .contains("at most 64"));
}

#[test]
fn a_default_name_is_the_programs_base_name_made_a_word() {
    assert_eq!(default_name(b"/usr/bin/python3"), "python3");
    assert_eq!(default_name(b"./run me"), "run_me");
    assert_eq!(default_name(b"dir/"), "dir");
    assert_eq!(default_name(b"\xff"), "\u{fffd}");
    assert_eq!(default_name(b"/"), "_");
    assert_eq!(default_name(&[b'x'; 100]).len(), MAX_NAME);
}

#[test]
fn dependencies_parse_and_are_kept_once() {
    assert_eq!(parse_ids("after", "12:15").unwrap(), [12, 15]);
    assert!(parse_ids("after", "abc")
        .unwrap_err()
        .to_string()
        .starts_with("option 'after': 'abc' is not a job id"));
    assert!(parse_ids("afterany", "1::2").is_err());
    assert!(parse_ids("after", "0")
        .unwrap_err()
        .reason
        .contains("ids start at 1"));
    let batch = check(&BatchOptions {
        after: vec![3, 3, 4],
        afterany: vec![4, 5],
        ..BatchOptions::default()
    })
    .unwrap();
    assert_eq!(
        batch.after,
        [
            Dependency { job: 3, any: false },
            Dependency { job: 4, any: false },
            Dependency { job: 5, any: true }
        ]
    );
    let many = BatchOptions {
        after: (1..=65).collect(),
        ..BatchOptions::default()
    };
    assert!(check(&many).unwrap_err().reason.contains("at most 64"));
}

#[test]
fn a_batch_job_writes_to_scored_jobid_out_unless_told() {
    let batch = check(&BatchOptions {
        detach: true,
        ..BatchOptions::default()
    })
    .unwrap();
    assert_eq!(
        batch.output.stdout.as_ref().map(Pattern::as_str),
        Some(DEFAULT_OUTPUT)
    );
    assert_eq!(batch.output.stderr_file(), batch.output.stdout.as_ref());
    let interactive = check(&BatchOptions {
        error: Some("e.%j".into()),
        ..BatchOptions::default()
    })
    .unwrap();
    assert!(interactive.output.stdout.is_none());
    assert_eq!(interactive.output.stderr_file().unwrap().as_str(), "e.%j");
    assert!(check(&BatchOptions::default()).unwrap().is_plain());
}

#[test]
fn an_array_needs_batch() {
    let spec = ArraySpec::parse("1-3").unwrap();
    let error = check(&BatchOptions {
        array: Some(spec),
        ..BatchOptions::default()
    })
    .unwrap_err();
    assert_eq!(error.option, "array");
    assert!(error.reason.contains("-batch"));
    let hostile = BatchOptions {
        detach: true,
        array: Some(ArraySpec {
            first: 9,
            last: 1,
            step: 1,
            max: None,
        }),
        ..BatchOptions::default()
    };
    assert!(check(&hostile).unwrap_err().reason.contains("9 is above 1"));
}
