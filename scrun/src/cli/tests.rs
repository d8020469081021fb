//! Tests of scrun's command line: words in, a one-line rendering of the
//! invocation or the error text out.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use proptest::prelude::*;

use super::*;

/// Shows one word: printable ASCII as is, other bytes escaped, the empty
/// word as `''`.
fn show(word: &OsStr) -> String {
    if word.is_empty() {
        return "''".to_string();
    }
    word.as_bytes().escape_ascii().to_string()
}

/// Renders a parse result compactly: options that differ from the default
/// (placement always), then `|`, then the stages with their separators.
fn render(result: Result<Parsed, UsageError>) -> String {
    let invocation = match result {
        Err(error) => return format!("error: {error}"),
        Ok(Parsed::Help) => return "help".to_string(),
        Ok(Parsed::Version) => return "version".to_string(),
        Ok(Parsed::Run(invocation)) => invocation,
    };
    let options = &invocation.options;
    let mut parts = vec![match options.procs {
        ProcRequest::Nodes(count) => format!("nodes={count}"),
        ProcRequest::Grid { hosts, per_host } => format!("nodes={hosts}x{per_host}"),
        ProcRequest::Hosts(count) => format!("hosts={count}"),
    }];
    if let Some(priority) = options.priority {
        parts.push(format!("priority={priority}"));
    }
    if options.wait {
        parts.push("wait".to_string());
    }
    if options.stat {
        parts.push("stat".to_string());
    }
    if options.pty {
        parts.push("pty".to_string());
    }
    if options.mpi != crate::pmi::Mode::Auto {
        parts.push(format!("mpi={}", options.mpi.name()));
    }
    if options.verbose {
        parts.push("verbose".to_string());
    }
    if let Some(memory) = options.memory {
        parts.push(format!("memory={memory}"));
    }
    if let Some(disk) = options.disk {
        parts.push(format!("disk={disk}"));
    }
    if let Some(time_ms) = options.time_ms {
        parts.push(format!("time={time_ms}ms"));
    }
    if let Some(scored) = &options.scored {
        parts.push(format!("scored={}", show(scored.as_os_str())));
    }
    let batch = &options.batch;
    if batch.detach {
        parts.push("batch".to_string());
    }
    for (key, value) in [("name", &batch.name), ("output", &batch.output), ("error", &batch.error)] {
        if let Some(value) = value {
            parts.push(format!("{key}={value}"));
        }
    }
    for (key, ids) in [("after", &batch.after), ("afterany", &batch.afterany)] {
        if !ids.is_empty() {
            parts.push(format!("{key}={ids:?}"));
        }
    }
    if let Some(spec) = batch.array {
        parts.push(format!("array={}", spec.describe()));
    }
    parts.push("|".to_string());
    let joiner = format!(" {} ", separator(invocation.joiner));
    let stages: Vec<String> = invocation
        .stages
        .iter()
        .map(|stage| {
            let words: Vec<String> = stage.iter().map(|word| show(word)).collect();
            words.join(" ")
        })
        .collect();
    parts.push(stages.join(&joiner));
    if invocation.stages.len() == 1 && invocation.joiner != Joiner::Sequence {
        parts.push("(single stage joined by pipes)".to_string());
    }
    parts.join(" ")
}

/// Compares in labelled blocks, so that a failure shows both in full.
#[track_caller]
fn check_args(args: Vec<OsString>, score_options: Option<&OsStr>, expected: &str) {
    let actual = render(parse(args, score_options));
    if actual != expected {
        panic!("\n--- expected ---\n{expected}\n--- actual ---\n{actual}\n");
    }
}

/// Splits a command line on spaces; no word is empty or has a space.
fn words(command_line: &str) -> Vec<OsString> {
    command_line
        .split_whitespace()
        .map(OsString::from)
        .collect()
}

/// Checks a command line with no `SCORE_OPTIONS`.
#[track_caller]
fn check(command_line: &str, expected: &str) {
    check_args(words(command_line), None, expected);
}

/// Checks a command line with `SCORE_OPTIONS` set.
#[track_caller]
fn check_env(command_line: &str, score_options: &str, expected: &str) {
    check_args(words(command_line), Some(OsStr::new(score_options)), expected);
}

/// Builds a word from raw bytes.
fn raw(bytes: &[u8]) -> OsString {
    OsString::from_vec(bytes.to_vec())
}

const HINT: &str = "valid options are nodes, hosts, priority, wait, stat, pty, memory, disk, time, mpi, batch, name, output, error, after, afterany, array, scored, reattach, verbose";

#[test]
fn program_only() {
    check("a.out", "nodes=1 | a.out");
    check("sh -c true", "nodes=1 | sh -c true");
    check("prog -nodes=3 -x", "nodes=1 | prog -nodes=3 -x");
}

#[test]
fn nodes() {
    check("-nodes=4 a", "nodes=4 | a");
    check("--nodes=4 a", "nodes=4 | a");
    check("-nodes=2x3 a", "nodes=2x3 | a");
    check("-nodes=2X3 a", "nodes=2x3 | a");
    check("-nodes=007 a", "nodes=7 | a");
    check("-nodes=65536 a", "nodes=65536 | a");
    check("-nodes=256x256 a", "nodes=256x256 | a");
    check("-nodes=1x65536 a", "nodes=1x65536 | a");
}

#[test]
fn nodes_errors() {
    check("-nodes a", "error: option 'nodes' on the command line needs a value, such as -nodes=4");
    check("-nodes= a", "error: option 'nodes' on the command line needs a value, such as -nodes=4");
    check("-nodes=0 a", "error: option 'nodes' on the command line: '0' asks for no processes: the count must be at least 1");
    check("-nodes=0x3 a", "error: option 'nodes' on the command line: '0x3' asks for no processes: hosts and processes per host must be at least 1");
    check("-nodes=3x0 a", "error: option 'nodes' on the command line: '3x0' asks for no processes: hosts and processes per host must be at least 1");
    check("-nodes=65537 a", "error: option 'nodes' on the command line: '65537' asks for too many processes: at most 65536 are allowed");
    check("-nodes=257x256 a", "error: option 'nodes' on the command line: '257x256' asks for too many processes: at most 65536 are allowed");
    check("-nodes=99999999999999999999999 a", "error: option 'nodes' on the command line: '99999999999999999999999' asks for too many processes: at most 65536 are allowed");
    check("-nodes=4294967296x4294967296 a", "error: option 'nodes' on the command line: '4294967296x4294967296' asks for too many processes: at most 65536 are allowed");
    check("-nodes=four a", "error: option 'nodes' on the command line: 'four' is not a process count: expected N or NxM, such as 4 or 2x3");
    check("-nodes=-1 a", "error: option 'nodes' on the command line: '-1' is not a process count: expected N or NxM, such as 4 or 2x3");
    check("-nodes=+1 a", "error: option 'nodes' on the command line: '+1' is not a process count: expected N or NxM, such as 4 or 2x3");
    check("-nodes=2x a", "error: option 'nodes' on the command line: '2x' is not a process count: expected N or NxM, such as 4 or 2x3");
    check("-nodes=x2 a", "error: option 'nodes' on the command line: 'x2' is not a process count: expected N or NxM, such as 4 or 2x3");
    check("-nodes=2x3x4 a", "error: option 'nodes' on the command line: '2x3x4' is not a process count: expected N or NxM, such as 4 or 2x3");
    check("-nodes=2*3 a", "error: option 'nodes' on the command line: '2*3' is not a process count: expected N or NxM, such as 4 or 2x3");
}

#[test]
fn hosts() {
    check("-hosts=3 a", "hosts=3 | a");
    check("-hosts=65536 a", "hosts=65536 | a");
    check("-hosts a", "error: option 'hosts' on the command line needs a value, such as -hosts=2");
    check("-hosts=0 a", "error: option 'hosts' on the command line: '0' asks for no hosts: the count must be at least 1");
    check("-hosts=65537 a", "error: option 'hosts' on the command line: '65537' asks for too many hosts: at most 65536 are allowed");
    check("-hosts=2x2 a", "error: option 'hosts' on the command line: '2x2' is not a host count: expected a number such as 2");
}

#[test]
fn priority() {
    check("-priority=0 a", "nodes=1 priority=0 | a");
    check("-priority=255 a", "nodes=1 priority=255 | a");
    check("-priority=256 a", "error: option 'priority' on the command line: '256' is not a queue number: expected 0 to 255");
    check("-priority=high a", "error: option 'priority' on the command line: 'high' is not a queue number: expected 0 to 255");
    check("-priority=-1 a", "error: option 'priority' on the command line: '-1' is not a queue number: expected 0 to 255");
    check("-priority a", "error: option 'priority' on the command line needs a value, such as -priority=0");
}

#[test]
fn flags() {
    check("-wait a", "nodes=1 wait | a");
    check("-stat a", "nodes=1 stat | a");
    check("-wait=yes,stat=TRUE a", "nodes=1 wait stat | a");
    check("-wait=1,stat=1 a", "nodes=1 wait stat | a");
    check("-wait=no,stat=false a", "nodes=1 | a");
    check("-wait=0,stat=No a", "nodes=1 | a");
    check("-pty a", "nodes=1 pty | a");
    check("-pty,stat a", "nodes=1 stat pty | a");
    check("-v a", "nodes=1 verbose | a");
    check("-verbose=no,v a", "nodes=1 | a");
    check("-v=maybe a", "error: option 'verbose' on the command line: 'maybe' is not a yes or no: expected yes, no, true, false, 1 or 0, or no value");
    check("-pty=maybe a", "error: option 'pty' on the command line: 'maybe' is not a yes or no: expected yes, no, true, false, 1 or 0, or no value");
    check("-wait=maybe a", "error: option 'wait' on the command line: 'maybe' is not a yes or no: expected yes, no, true, false, 1 or 0, or no value");
    check("-stat= a", "error: option 'stat' on the command line: '' is not a yes or no: expected yes, no, true, false, 1 or 0, or no value");
}

#[test]
fn time_estimate() {
    check("-time=90s a", "nodes=1 time=90000ms | a");
    check("-time=1.5s a", "nodes=1 time=1500ms | a");
    check("-time=5 a", "error: option 'time' on the command line: '5' has no unit: write 5m for minutes or 5s for seconds (Slurm and LSF read a number alone as minutes)");
    check_env("a", "-time=1.5", "error: option 'time' in SCORE_OPTIONS: '1.5' has no unit: write 1.5m for minutes or 1.5s for seconds (Slurm and LSF read a number alone as minutes)");
    check("-time=2h,nodes=2 a", "nodes=2 time=7200000ms | a");
    check("-time=1m,time=2m a", "nodes=1 time=60000ms | a");
    check("-time a", "error: option 'time' on the command line needs a value, such as -time=90s");
    check("-time=0 a", "error: option 'time' on the command line: time limit '0' must be at least 1ms");
}

#[test]
fn limits() {
    check("-memory=512M a", "nodes=1 memory=536870912 | a");
    check("-memory=1.5G,disk=1048576 a", "nodes=1 memory=1610612736 disk=1048576 | a");
    check("-memory=10 a", "error: option 'memory' on the command line: limit '10' is 10 bytes, under the 1M that any job needs (a size without a unit is in bytes: write 512M or 2G)");
    check("-disk=512K a", "error: option 'disk' on the command line: limit '512K' is 512K, under the 1M that any job needs (a size without a unit is in bytes: write 512M or 2G)");
    check("-memory=1M a", "nodes=1 memory=1048576 | a");
    check("-disk=1t a", "nodes=1 disk=1099511627776 | a");
    check("-memory a", "error: option 'memory' on the command line needs a value, such as -memory=512M");
    check("-disk= a", "error: option 'disk' on the command line needs a value, such as -disk=4G");
    check("-memory=0 a", "error: option 'memory' on the command line: limit '0' must be at least 1 byte");
    check("-disk=0G a", "error: option 'disk' on the command line: limit '0G' must be at least 1 byte");
    check("-memory=lots a", "error: option 'memory' on the command line: invalid size 'lots': expected a number with an optional K, M, G or T suffix (e.g. 512M)");
    check("-disk=99999999T a", "error: option 'disk' on the command line: size '99999999T' is too large");
}

#[test]
fn scored_socket() {
    check("-scored=/tmp/s.sock a", "nodes=1 scored=/tmp/s.sock | a");
    check("-scored=rel/a=b a", "nodes=1 scored=rel/a=b | a");
    check("-scored a", "error: option 'scored' on the command line needs a value, such as -scored=/run/scored.sock");
    check("-scored= a", "error: option 'scored' on the command line needs a value, such as -scored=/run/scored.sock");
}

#[test]
fn lists_equal_separate_words() {
    check("-nodes=2x3,wait,priority=0,stat a", "nodes=2x3 priority=0 wait stat | a");
    check("-nodes=2x3 -wait -priority=0 -stat a", "nodes=2x3 priority=0 wait stat | a");
    check("--wait,--stat a", "error: unknown option '--stat' on the command line; valid options are nodes, hosts, priority, wait, stat, pty, memory, disk, time, mpi, batch, name, output, error, after, afterany, array, scored, reattach, verbose");
}

#[test]
fn leftmost_duplicate_wins() {
    check("-nodes=2 -nodes=3 a", "nodes=2 | a");
    check("-nodes=2,nodes=3 a", "nodes=2 | a");
    check("-priority=2 -priority=0 a", "nodes=1 priority=2 | a");
    check("-wait=no -wait a", "nodes=1 | a");
    check("-memory=1M,memory=2M a", "nodes=1 memory=1048576 | a");
    check("-scored=/a -scored=/b a", "nodes=1 scored=/a | a");
    check("-hosts=2 -hosts=5 a", "hosts=2 | a");
}

#[test]
fn ignored_duplicates_are_still_validated() {
    check("-nodes=2 -nodes=x a", "error: option 'nodes' on the command line: 'x' is not a process count: expected N or NxM, such as 4 or 2x3");
    check_env("-nodes=2 a", "nodes=0", "error: option 'nodes' in SCORE_OPTIONS: '0' asks for no processes: the count must be at least 1");
}

#[test]
fn score_options_supply_defaults() {
    check_env("a", "-nodes=4 -wait", "nodes=4 wait | a");
    check_env("a", "nodes=4,wait priority=2", "nodes=4 priority=2 wait | a");
    check_env("a", "  \t-stat\n  --memory=1M  ", "nodes=1 stat memory=1048576 | a");
    check_env("a", "-pty", "nodes=1 pty | a");
    check_env("-pty=no a", "-pty", "nodes=1 | a");
    check_env("a", "", "nodes=1 | a");
    check_env("a", "   ", "nodes=1 | a");
}

#[test]
fn command_line_wins_over_score_options() {
    check_env("-nodes=2 a", "nodes=8", "nodes=2 | a");
    check_env("-priority=0 a", "priority=2,wait", "nodes=1 priority=0 wait | a");
    check_env("-wait=no a", "wait", "nodes=1 | a");
    check_env("-scored=/cli a", "scored=/env", "nodes=1 scored=/cli | a");
    check_env("-memory=1M a", "memory=2M disk=1M", "nodes=1 memory=1048576 disk=1048576 | a");
}

#[test]
fn placement() {
    check_env("-hosts=2 a", "nodes=8", "hosts=2 | a");
    check_env("-nodes=2 a", "hosts=8", "nodes=2 | a");
    check_env("a", "hosts=8", "hosts=8 | a");
    check("-nodes=2,hosts=3 a", "error: options 'nodes' and 'hosts' both given on the command line; give only one placement");
    check("-hosts=3 -nodes=2 a", "error: options 'nodes' and 'hosts' both given on the command line; give only one placement");
    check_env("a", "nodes=2 hosts=3", "error: options 'nodes' and 'hosts' both given in SCORE_OPTIONS; give only one placement");
    check_env("-nodes=2 a", "nodes=2 hosts=3", "error: options 'nodes' and 'hosts' both given in SCORE_OPTIONS; give only one placement");
}

#[test]
fn unknown_options() {
    check("-foo a", &format!("error: unknown option 'foo' on the command line; {HINT}"));
    check("-nodes=2,foo=1 a", &format!("error: unknown option 'foo' on the command line; {HINT}"));
    check("-Nodes=2 a", &format!("error: unknown option 'Nodes' on the command line; {HINT}"));
    check_env("a", "foo", &format!("error: unknown option 'foo' in SCORE_OPTIONS; {HINT}"));
    check_env("a", "help", &format!("error: unknown option 'help' in SCORE_OPTIONS; {HINT}"));
    check_env("a", "::", &format!("error: unknown option '::' in SCORE_OPTIONS; {HINT}"));
    check_env("-foo a", "bar", &format!("error: unknown option 'foo' on the command line; {HINT}"));
}

#[test]
fn malformed_option_words() {
    check("- a", "error: missing option name in '-' on the command line");
    check("-= a", "error: missing option name in '-=' on the command line");
    check("-=b a", "error: missing option name in '-=b' on the command line");
    check("-,,, a", "error: missing option name in '-,,,' on the command line");
    check("-wait, a", "error: missing option name in '-wait,' on the command line");
    check("-a= a", &format!("error: unknown option 'a' on the command line; {HINT}"));
    check("--- a", &format!("error: unknown option '-' on the command line; {HINT}"));
    check_env("a", "wait --", "error: missing option name in '--' in SCORE_OPTIONS");
    check_env("a", "=1", "error: missing option name in '=1' in SCORE_OPTIONS");
}

#[test]
fn help_and_version() {
    check("-help", "help");
    check("--help", "help");
    check("-h", "help");
    check("-version", "version");
    check("--version", "version");
    check("-nodes=2,help a", "help");
    check("-bogus -help", "help");
    check("-version -help", "version");
    check("-help -version", "help");
    check_env("-help", "bogus", "help");
    check("a -help", "nodes=1 | a -help");
    check("-- -help", "nodes=1 | -help");
    check("-help=1 a", "error: option 'help' takes no value, got '1'");
    check("-version= a", "error: option 'version' takes no value, got ''");
}

#[test]
fn double_dash_ends_options() {
    check("-- -prog x", "nodes=1 | -prog x");
    check("-nodes=2 -- -prog -nodes=3", "nodes=2 | -prog -nodes=3");
    check("-- -- x", "nodes=1 | -- x");
    check("a -- b", "nodes=1 | a -- b");
    check("--", "error: no program given");
    check("-nodes=2 --", "error: no program given");
}

#[test]
fn no_program() {
    check("", "error: no program given");
    check("-nodes=2 -wait", "error: no program given");
    check_env("", "nodes=2", "error: no program given");
    check_args(vec![OsString::new()], None, "error: stage 1 has an empty program name");
}

#[test]
fn option_errors_come_before_program_errors() {
    check("-nodes=0", "error: option 'nodes' on the command line: '0' asks for no processes: the count must be at least 1");
}

#[test]
fn sequence_stages() {
    check("a :: b", "nodes=1 | a :: b");
    check("-nodes=4 a 1 :: b 2 :: c", "nodes=4 | a 1 :: b 2 :: c");
    check("a ::b", "nodes=1 | a ::b");
    check("a -- :: b", "nodes=1 | a -- :: b");
}

#[test]
fn pipe_stages() {
    check("a == b", "nodes=1 | a == b");
    check("-nodes=2 gen 10 == filter == sink -v", "nodes=2 | gen 10 == filter == sink -v");
}

#[test]
fn separator_errors() {
    check("a :: b == c", "error: cannot mix '::' and '==' in one command ('==' after stage 2)");
    check("a == b :: c", "error: cannot mix '==' and '::' in one command ('::' after stage 2)");
    check("a ::", "error: stage 2 is empty: '::' must stand between two programs");
    check(":: b", "error: stage 1 is empty: '::' must stand between two programs");
    check("a :: :: b", "error: stage 2 is empty: '::' must stand between two programs");
    check("a == b ==", "error: stage 3 is empty: '==' must stand between two programs");
    check("==", "error: stage 1 is empty: '==' must stand between two programs");
    check("-nodes=2 :: a", "error: stage 1 is empty: '::' must stand between two programs");
    check_args(words("a ::").into_iter().chain([OsString::new()]).collect(), None, "error: stage 2 has an empty program name");
}

#[test]
fn single_stage_is_a_sequence() {
    let Ok(Parsed::Run(invocation)) = parse(words("a b"), None) else {
        panic!("a plain command line must parse");
    };
    assert_eq!(invocation.joiner, Joiner::Sequence);
    assert_eq!(invocation.stages, vec![words("a b")]);
}

#[test]
fn job_options_carry_what_the_daemon_needs() {
    let Ok(Parsed::Run(invocation)) = parse(
        words("-nodes=2x3,priority=0,wait,memory=1M,disk=2M,stat,pty,scored=/s a"),
        None,
    ) else {
        panic!("a valid command line must parse");
    };
    let expected = JobOptions {
        procs: ProcRequest::Grid {
            hosts: 2,
            per_host: 3,
        },
        priority: Some(0),
        wait: true,
        memory: Some(1 << 20),
        disk: Some(2 << 20),
        pty: true,
        time_ms: None,
        batch: Default::default(),
    };
    assert_eq!(invocation.options.job_options(), expected);
    assert_eq!(
        Options::default().job_options().procs,
        ProcRequest::Nodes(1)
    );
}

#[test]
fn program_arguments_pass_through_unchanged() {
    check_args(vec![raw(b"prog"), raw(b"\xff\xfe"), raw(b""), raw(b"a b")], None, "nodes=1 | prog \\xff\\xfe '' a b");
    check_args(vec![raw(b"\xc3\x28"), raw(b"-\x80")], None, "nodes=1 | \\xc3( -\\x80");
    check_args(vec![raw(b"--"), raw(b"-\xff")], None, "nodes=1 | -\\xff");
    // No argv can hold a NUL byte, but a caller of `parse` can: it is
    // refused as scored would refuse it.
    check_args(vec![raw(b"a"), raw(b"::"), raw(b"\x00")], None, "error: an argument of stage 2 contains a NUL byte");
}

#[test]
fn non_utf8_option_words_are_refused() {
    check_args(vec![raw(b"-nodes=\xff"), raw(b"a")], None, "error: option word '-nodes=\u{fffd}' on the command line is not valid UTF-8");
    check_args(vec![raw(b"a")], Some(OsStr::from_bytes(b"wait \xfe\xff")), "error: option word '\u{fffd}\u{fffd}' in SCORE_OPTIONS is not valid UTF-8");
    check_args(vec![raw(b"-\xff"), raw(b"-help")], None, "help");
}

#[test]
fn control_characters_are_escaped_in_messages() {
    check_args(vec![raw(b"-a\x1b[31m"), raw(b"x")], None, &format!("error: unknown option 'a\\u{{1b}}[31m' on the command line; {HINT}"));
}

#[test]
fn huge_words_are_shortened_in_messages() {
    let huge = "n".repeat(1 << 20);
    let key_error = render(parse(
        [OsString::from(format!("-{huge}")), "a".into()],
        None,
    ));
    assert!(key_error.len() < 300, "{}", &key_error[..300]);
    check_args(vec![format!("-nodes={huge}").into(), "a".into()], None, "error: option 'nodes' on the command line: 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...' is not a process count: expected N or NxM, such as 4 or 2x3");
    let digits = "9".repeat(1 << 20);
    check_args(vec![format!("-priority={digits}").into(), "a".into()], None, "error: option 'priority' on the command line: '9999999999999999999999999999999999999999...' is not a queue number: expected 0 to 255");
    let result = parse([OsString::from("a"), OsString::from(huge.clone())], None);
    assert!(
        matches!(result, Ok(Parsed::Run(ref invocation)) if invocation.stages[0][1].len() == 1 << 20)
    );
    let env_error = render(parse(words("a"), Some(OsStr::new(&huge))));
    assert!(env_error.len() < 300, "{}", &env_error[..300]);
}

#[test]
fn thousands_of_words() {
    let mut args: Vec<OsString> = (0..5_000).map(|_| OsString::from("-wait,stat")).collect();
    args.push("a".into());
    args.extend((0..63).flat_map(|_| ["::".into(), OsString::from("b")]));
    let Ok(Parsed::Run(invocation)) = parse(args.clone(), None) else {
        panic!("many valid words must parse");
    };
    assert_eq!(invocation.stages.len(), 64);
    args.extend((0..5_000).flat_map(|_| ["::".into(), OsString::from("b")]));
    assert_eq!(render(parse(args, None)), "error: the job has 5064 stages; at most 64 are allowed");
    assert!(invocation.options.wait && invocation.options.stat);
    let env = "nodes=3 ".repeat(10_000);
    check_env("a", &env, "nodes=3 | a");
}

#[test]
fn binary_garbage() {
    let mut state: u32 = 0x9e37_79b9;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    for _ in 0..200 {
        let args: Vec<OsString> = (0..next() % 12)
            .map(|_| {
                let len = next() % 16;
                raw(&(0..len).map(|_| next() as u8).collect::<Vec<u8>>())
            })
            .collect();
        let env: Vec<u8> = (0..next() % 32).map(|_| next() as u8).collect();
        assert_no_panic_and_sane(args, Some(OsStr::from_bytes(&env)));
    }
}

/// Parses and checks what every successful parse promises.
fn assert_no_panic_and_sane(args: Vec<OsString>, score_options: Option<&OsStr>) {
    if let Ok(Parsed::Run(invocation)) = parse(args, score_options) {
        assert!(!invocation.stages.is_empty());
        for stage in &invocation.stages {
            assert!(stage.first().is_some_and(|program| !program.is_empty()));
        }
        assert!(invocation.stages.len() > 1 || invocation.joiner == Joiner::Sequence);
    }
}

#[test]
fn usage_names_every_option() {
    for key in HINT.trim_start_matches("valid options are ").split(", ") {
        assert!(USAGE.contains(&format!("-{key}")), "USAGE lacks {key}");
    }
    assert!(USAGE.contains("--help") || USAGE.contains("-help"));
}

/// Words biased towards the syntax the parser cares about.
fn word() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..12),
        proptest::sample::select(vec![
            "::",
            "==",
            "--",
            "-",
            "",
            "a",
            "-nodes=2",
            "-nodes=2x3,wait",
            "-hosts=3",
            "-wait",
            "-help",
            "-h",
            "-version",
            "-=",
            "-,,",
            "-priority=1",
            "-memory=1G",
            "-stat=no",
            "-scored=/s",
        ])
        .prop_map(|word| word.as_bytes().to_vec()),
        "-{0,2}[a-z=,0-9xX:]{0,12}".prop_map(String::into_bytes),
    ]
}

proptest! {
    #[test]
    fn random_arguments_never_panic(
        args in proptest::collection::vec(word(), 0..16),
        env in proptest::option::of(proptest::collection::vec(word(), 0..6)),
    ) {
        let args: Vec<OsString> = args.into_iter().map(OsString::from_vec).collect();
        let env = env.map(|env_words| env_words.join(&b' '));
        assert_no_panic_and_sane(args, env.as_deref().map(OsStr::from_bytes));
    }
}

#[test]
fn mpi() {
    check("a", "nodes=1 | a");
    check("-mpi=pmi2,nodes=2 a", "nodes=2 mpi=pmi2 | a");
    check("-mpi=pmi1 a", "nodes=1 mpi=pmi1 | a");
    check("-mpi=none a", "nodes=1 mpi=none | a");
    check("-mpi=auto a", "nodes=1 | a");
    check("-mpi=pmix a", "nodes=1 mpi=pmix | a");
    check("-mpi=pmi3 a", "error: option 'mpi' on the command line: 'pmi3' is not auto, pmix, pmi1, pmi2 or none");
    check("-mpi a", "error: option 'mpi' on the command line needs a value, such as -mpi=pmi2");
}

#[test]
fn batch_options() {
    check("-batch prog", "nodes=1 batch | prog");
    check("-batch,name=sweep,output=run.%j.out,error=e.%x prog", "nodes=1 batch name=sweep output=run.%j.out error=e.%x | prog");
    check("-after=12:15,afterany=3 prog", "nodes=1 after=[12, 15] afterany=[3] | prog");
    check("-batch,array=1-10:2%3,output=o.%a prog", "nodes=1 batch output=o.%a array=1-10:2%3 | prog");
    check("-batch,array=3 prog", "nodes=1 batch array=3-3 | prog");
    check("-batch -array=3%1,output=o.%a prog", "nodes=1 batch output=o.%a array=3-3%1 | prog");
    check_env("-name=cli prog", "-name=env -batch", "nodes=1 batch name=cli | prog");
}

#[test]
fn bad_batch_options_name_the_option() {
    check("-batch,array=5-1 p", "error: option 'array' on the command line: '5-1' ends before it starts: 5 is above 1");
    check("-batch,array=0-99999 p", "error: option 'array' on the command line: '0-99999' has 100000 elements; an array may have at most 10000");
    check("-array=1-4 p", "error: option 'array' on the command line: an array's elements run without a terminal: give -batch too");
    check("-array=3 p", "error: option 'array' on the command line: an array's elements run without a terminal: give -batch too");
    check("-batch,array=3:2 p", "error: option 'array' on the command line: '3:2' has a step but one index: a step needs a range A-B:STEP");
    check("-batch,array=first p", "error: option 'array' on the command line: 'first' is not a range or an index: expected A-B, A-B:STEP or A-B:STEP%MAX, such as 1-100%4, or one index N");
    check("-batch,array=1,3,5 p", "error: option 'array' on the command line: '1,3,5' holds a comma, which separates options (-a=1,b=2 is -a=1 -b=2): an array is one range A-B[:STEP][%MAX] or one index N");
    check("-array=1-3,7-9,batch p", "error: option 'array' on the command line: '1-3,7-9' holds a comma, which separates options (-a=1,b=2 is -a=1 -b=2): an array is one range A-B[:STEP][%MAX] or one index N");
    check_env("-batch p", "-array=1,3", "error: option 'array' in SCORE_OPTIONS: '1,3' holds a comma, which separates options (-a=1,b=2 is -a=1 -b=2): an array is one range A-B[:STEP][%MAX] or one index N");
    check("-after=12,15 p", "error: option 'after' on the command line: '12,15' holds a comma, which separates options (-a=1,b=2 is -a=1 -b=2): join job ids with ':', as 12:15");
    check("-nodes=4,8 p", "error: option 'nodes' on the command line: '4,8' holds a comma, which separates options (-a=1,b=2 is -a=1 -b=2): give one value");
    check("-after=abc p", "error: option 'after' on the command line: 'abc' is not a job id: expected ID or ID:ID..., such as 12 or 12:15");
    check("-afterany=0 p", "error: option 'afterany' on the command line: 0 is not a job id: ids start at 1");
    check("-output=%q p", "error: option 'output' on the command line: '%q' has an unknown escape '%q': the escapes are %j (job id), %r (rank), %a (array index), %x (job name) and %% (a percent sign)");
    check("-error=x.%a p", "error: option 'error' on the command line: 'x.%a' has %a, the array index, but the job is not an array (-array=)");
    check_env("p", "-output=%z", "error: option 'output' in SCORE_OPTIONS: '%z' has an unknown escape '%z': the escapes are %j (job id), %r (rank), %a (array index), %x (job name) and %% (a percent sign)");
    check("-name=a/b p", "error: option 'name' on the command line: 'a/b' holds '/': a name is one word without blanks, control characters or '/'");
    check("-name= p", "error: option 'name' on the command line needs a value, such as -name=sweep");
    check("-batch=maybe p", "error: option 'batch' on the command line: 'maybe' is not a yes or no: expected yes, no, true, false, 1 or 0, or no value");
}

#[test]
fn a_batch_job_refuses_what_needs_a_scrun_or_a_terminal() {
    check("-batch,stat p", "error: option 'stat' on the command line: a batch job has no scrun at its end to print its accounting on: leave out -stat or -batch (sc_console's 'job ID' and 'history' show a batch job's accounting)");
    check("-stat -batch p", "error: option 'stat' on the command line: a batch job has no scrun at its end to print its accounting on: leave out -stat or -batch (sc_console's 'job ID' and 'history' show a batch job's accounting)");
    check("-batch -pty p", "error: option 'pty' on the command line: a batch job runs without a terminal (its input is /dev/null, its output goes to its files): leave out -pty or -batch");
    check_env("-batch p", "-stat", "error: option 'stat' in SCORE_OPTIONS: a batch job has no scrun at its end to print its accounting on: leave out -stat or -batch (sc_console's 'job ID' and 'history' show a batch job's accounting)");
    // A flag turned off, or one of an interactive job, stands.
    check_env("-batch,stat=no p", "-stat", "nodes=1 batch | p");
    check("-stat,pty p", "nodes=1 stat pty | p");
}
