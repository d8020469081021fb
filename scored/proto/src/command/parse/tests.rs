//! Tests of the console line parser: one line in, the canonical rendering
//! (or the error kind and message) out, plus property tests for the
//! round trip and for hostile input.

use std::time::Duration;

use proptest::prelude::*;

use super::suggest::edit_distance;
use super::*;
use crate::command::help;
use crate::command::{ClusterLimits, GroupRef, QueueMode, QueueSettings, QueueShare, Setting};
use crate::units::parse_percent;

/// Parses `line` and compares the outcome with `expected`: the canonical
/// rendering of the command, `(nothing)` for a blank or comment line, or
/// `Kind: message` for an error. A parsed command must also survive
/// render → parse unchanged.
#[track_caller]
fn check(line: &str, expected: &str) {
    let actual = match parse_line(line) {
        Ok(None) => "(nothing)".to_string(),
        Ok(Some(command)) => {
            let text = render(&command);
            assert_eq!(
                parse_line(&text),
                Ok(Some(command.clone())),
                "render of {line:?} does not read back: {text:?}"
            );
            text
        }
        Err(error) => format!("{:?}: {}", error.kind, error.message),
    };
    if actual != expected {
        // Huge inputs are shown shortened, so a failure stays readable.
        let line: String = if line.len() > 200 {
            format!(
                "{}... ({} bytes)",
                line.chars().take(100).collect::<String>(),
                line.len()
            )
        } else {
            line.to_string()
        };
        panic!(
            "\ninput:\n{line:?}\n\nexpected:\n{expected}\n\nactual:\n{actual}\n\
             (as a test line: check({line:?}, {actual:?});)\n"
        );
    }
}

// Blank lines, comments, blanks and line ends.

#[test]
fn blank_and_comment_lines() {
    check("", "(nothing)");
    check("   \t ", "(nothing)");
    check("\n", "(nothing)");
    check("# a comment", "(nothing)");
    check("  \t# an indented comment", "(nothing)");
    check("#status", "(nothing)");
}

#[test]
fn blanks_trailing_comments_and_line_ends() {
    check("status # show the daemon", "status");
    check("  status  ", "status");
    check("queue\t1 \t enable", "queue 1 enable");
    check("status\n", "status");
    check("status\r\n", "status");
    check("jobs # all", "jobs");
    check("status#x", "UnknownCommand: unknown command 'status#x' in 'status#x': did you mean 'status'? help lists the commands");
}

// Every command.

#[test]
fn help_lines() {
    check("help", "help");
    check("help queue", "help queue");
    check("help help", "help help");
    check(
        "help xyzzy",
        "UnknownCommand: unknown command 'xyzzy' in 'help xyzzy': help lists the commands",
    );
    check(
        "help frob",
        "UnknownCommand: unknown command 'frob' in 'help frob': help lists the commands",
    );
    check(
        "foo bar",
        "UnknownCommand: unknown command 'foo' in 'foo bar': help lists the commands",
    );
    check("jbo 4", "UnknownCommand: unknown command 'jbo' in 'jbo 4': did you mean 'job'? help lists the commands");
    check("help Kill", "UnknownCommand: unknown command 'Kill' in 'help Kill': did you mean 'kill'? help lists the commands");
    check(
        "help queue set",
        "ExtraArgument: extra argument 'set' in 'help queue set': usage: help [COMMAND]",
    );
}

#[test]
fn listings() {
    check("status", "status");
    check("hosts", "hosts");
    check("clusters", "clusters");
    check("queues", "queues");
    check("jobs", "jobs");
    check("jobs all", "jobs all");
    check("job 42", "job 42");
    check("job 007", "job 7");
    check(
        "status now",
        "ExtraArgument: extra argument 'now' in 'status now': usage: status",
    );
    check(
        "hosts 1",
        "ExtraArgument: extra argument '1' in 'hosts 1': usage: hosts",
    );
    check(
        "clusters x",
        "ExtraArgument: extra argument 'x' in 'clusters x': usage: clusters",
    );
    check(
        "queues 1",
        "ExtraArgument: extra argument '1' in 'queues 1': usage: queues",
    );
    check("jobs al", "UnknownKeyword: unexpected 'al' in 'jobs al': did you mean 'all'? expected all, --user, --name or --state; usage: jobs [all] [--user U] [--name N] [--state S]");
    check(
        "jobs all 3",
        "UnknownKeyword: unexpected '3' in 'jobs all 3': expected all, --user, --name or --state; usage: jobs [all] [--user U] [--name N] [--state S]",
    );
    check(
        "jobs --user alice --name sweep --state waiting",
        "jobs --user alice --name sweep --state waiting",
    );
    check(
        "jobs --state done all --user 1000",
        "jobs all --user 1000 --state done",
    );
    check("jobs --state runing", "InvalidValue: unknown state 'runing' in 'jobs --state runing': did you mean 'running'? expected waiting, queued, running, stopped, held, ending, done or killed");
    check("jobs --name", "MissingArgument: missing a job name after --name in 'jobs --name': usage: jobs [all] [--user U] [--name N] [--state S]");
    check("jobs --user a --user b", "InvalidValue: '--user' given twice in 'jobs --user a --user b': usage: jobs [all] [--user U] [--name N] [--state S]");
    check("jobs all all", "InvalidValue: 'all' given twice in 'jobs all all': usage: jobs [all] [--user U] [--name N] [--state S]");
    check(
        "job",
        "MissingArgument: missing job id in 'job': usage: job ID",
    );
    check(
        "job 1 2",
        "ExtraArgument: extra argument '2' in 'job 1 2': usage: job ID",
    );
}

#[test]
fn cluster_limit_lines() {
    check(
        "cluster 0 limit memory=4G disk=none jobs=16",
        "cluster 0 limit memory=4G disk=none jobs=16",
    );
    check(
        "cluster x86 limit jobs=none disk=1.5G memory=1048577",
        "cluster x86 limit memory=1048577 disk=1536M jobs=none",
    );
    check(
        "cluster x86.1 limit memory=1M",
        "cluster x86.1 limit memory=1M",
    );
    check("cluster 0 limit memory=10", "InvalidValue: bad setting 'memory=10' in 'cluster 0 limit memory=10': a memory limit of 10 is 10 bytes, under the 1M that any job needs (a size without a unit is in bytes: write 512M or 2G)");
    check("cluster 3 limit disk=1073741824", "cluster 3 limit disk=1G");
    check("cluster 0 limit jobs=0", "cluster 0 limit jobs=0");
    check(
        "cluster 0 limit memory=18446744073709551615",
        "cluster 0 limit memory=18446744073709551615",
    );
}

#[test]
fn cluster_limit_errors() {
    check("cluster", "MissingArgument: missing cluster index or name in 'cluster': usage: cluster C limit memory=SIZE|none disk=SIZE|none jobs=N|none");
    check("cluster 0", "MissingArgument: missing the word limit in 'cluster 0': usage: cluster C limit memory=SIZE|none disk=SIZE|none jobs=N|none");
    check("cluster 0 limits jobs=1", "UnknownKeyword: unexpected 'limits' in 'cluster 0 limits jobs=1': did you mean 'limit'? expected limit; usage: cluster C limit memory=SIZE|none disk=SIZE|none jobs=N|none");
    check("cluster 0 limit", "MissingArgument: missing cluster limits in 'cluster 0 limit': usage: cluster C limit memory=SIZE|none disk=SIZE|none jobs=N|none");
    check("cluster 0 limit memory", "MissingEquals: cluster limit 'memory' without '=' in 'cluster 0 limit memory': expected memory=SIZE|none");
    check("cluster 0 limit 4G", "MissingEquals: cluster limit '4G' without '=' in 'cluster 0 limit 4G': expected KEY=VALUE with a key from memory, disk or jobs");
    check("cluster 0 limit memory=", "EmptyValue: empty value for memory in 'cluster 0 limit memory=': expected memory=SIZE|none");
    check("cluster 0 limit =4G", "UnknownSetting: unknown cluster limit '' in 'cluster 0 limit =4G': expected memory, disk or jobs");
    check("cluster 0 limit colour=red", "UnknownSetting: unknown cluster limit 'colour' in 'cluster 0 limit colour=red': expected memory, disk or jobs");
    check("cluster 0 limit job=2", "UnknownSetting: unknown cluster limit 'job' in 'cluster 0 limit job=2': did you mean 'jobs'? expected memory, disk or jobs");
    check("cluster 0 limit memory=1G jobs=2 memory=2G", "DuplicateSetting: cluster limit memory given twice in 'cluster 0 limit memory=1G jobs=2 memory=2G': give each setting at most once");
    check("cluster 0 limit memory=12Q", "InvalidValue: bad setting 'memory=12Q' in 'cluster 0 limit memory=12Q': invalid size '12Q': expected a number with an optional K, M, G or T suffix (e.g. 512M)");
    check("cluster 0 limit disk=16777216T", "InvalidValue: bad setting 'disk=16777216T' in 'cluster 0 limit disk=16777216T': size '16777216T' is too large");
    check("cluster 0 limit jobs=-1", "InvalidValue: bad setting 'jobs=-1' in 'cluster 0 limit jobs=-1': '-1' is not a whole number; expected jobs=N|none");
    check("cluster 0 limit jobs=NONE", "InvalidValue: bad setting 'jobs=NONE' in 'cluster 0 limit jobs=NONE': 'NONE' is not a whole number; expected jobs=N|none");
    check("cluster 4294967296 limit jobs=1", "InvalidValue: invalid cluster index '4294967296' in 'cluster 4294967296 limit jobs=1': expected a cluster index as clusters lists it, or a cluster name");
}

#[test]
fn queue_states() {
    check("queue 1 enable", "queue 1 enable");
    check("queue 1 disable", "queue 1 disable");
    check("queue 0 activate", "queue 0 activate");
    check("queue 255 deactivate", "queue 255 deactivate");
    check("queue", "MissingArgument: missing queue number in 'queue': usage: queue Q enable|disable|activate|deactivate or queue Q set mode=gang|exclusive cputime=DUR|none residency=DUR|none memory=PCT%|none disk=PCT%|none group=NAME|GID|none backfill=on|off mpl=N|none share=user|job fairshare=DUR|none");
    check("queue 1", "MissingArgument: missing an action (enable, disable, activate, deactivate or set) in 'queue 1': usage: queue Q enable|disable|activate|deactivate or queue Q set mode=gang|exclusive cputime=DUR|none residency=DUR|none memory=PCT%|none disk=PCT%|none group=NAME|GID|none backfill=on|off mpl=N|none share=user|job fairshare=DUR|none");
    check("queue 256 enable", "InvalidValue: invalid queue number '256' in 'queue 256 enable': expected a number from 0 to 255");
    check("queue -1 enable", "InvalidValue: invalid queue number '-1' in 'queue -1 enable': expected a number from 0 to 255");
    check("queue one enable", "InvalidValue: invalid queue number 'one' in 'queue one enable': expected a number from 0 to 255");
    check("queue 1 enabel", "UnknownKeyword: unexpected 'enabel' in 'queue 1 enabel': did you mean 'enable'? expected enable, disable, activate, deactivate or set; usage: queue Q enable|disable|activate|deactivate or queue Q set mode=gang|exclusive cputime=DUR|none residency=DUR|none memory=PCT%|none disk=PCT%|none group=NAME|GID|none backfill=on|off mpl=N|none share=user|job fairshare=DUR|none");
    check("queue 1 enable now", "ExtraArgument: extra argument 'now' in 'queue 1 enable now': usage: queue Q enable|disable|activate|deactivate or queue Q set mode=gang|exclusive cputime=DUR|none residency=DUR|none memory=PCT%|none disk=PCT%|none group=NAME|GID|none backfill=on|off mpl=N|none share=user|job fairshare=DUR|none");
}

#[test]
fn queue_setting_lines() {
    check(
        "queue 2 set mode=gang cputime=1h residency=90s memory=50% disk=12.5% group=wheel",
        "queue 2 set mode=gang cputime=1h residency=90s memory=50% disk=12.5% group=wheel",
    );
    check(
        "queue 0 set group=100 mode=exclusive",
        "queue 0 set mode=exclusive group=100",
    );
    check(
        "queue 1 set cputime=none residency=none memory=none disk=none group=none",
        "queue 1 set cputime=none residency=none memory=none disk=none group=none",
    );
    check(
        "queue 1 set memory=50.0% disk=0.000000001%",
        "queue 1 set memory=50% disk=0.000000001%",
    );
    check(
        "queue 1 set cputime=0.5 residency=1.5ms",
        "queue 1 set cputime=500ms residency=1.500ms",
    );
    check("queue 1 set residency=120m", "queue 1 set residency=2h");
    check(
        "queue 0 set backfill=on mode=exclusive",
        "queue 0 set mode=exclusive backfill=on",
    );
    check("queue 0 set backfill=off", "queue 0 set backfill=off");
    check(
        "queue 1 set group=_build.bot-2",
        "queue 1 set group=_build.bot-2",
    );
    check(
        "queue 1 set group=4294967295",
        "queue 1 set group=4294967295",
    );
}

#[test]
fn queue_setting_errors() {
    check("queue 1 set colour=red", "UnknownSetting: unknown queue setting 'colour' in 'queue 1 set colour=red': expected mode, cputime, residency, memory, disk, group, backfill, mpl, share or fairshare");
    check("queue 1 set memroy=5%", "UnknownSetting: unknown queue setting 'memroy' in 'queue 1 set memroy=5%': did you mean 'memory'? expected mode, cputime, residency, memory, disk, group, backfill, mpl, share or fairshare");
    check("queue 1 set", "MissingArgument: missing queue settings in 'queue 1 set': usage: queue Q set mode=gang|exclusive cputime=DUR|none residency=DUR|none memory=PCT%|none disk=PCT%|none group=NAME|GID|none backfill=on|off mpl=N|none share=user|job fairshare=DUR|none");
    check("queue 1 set gang", "MissingEquals: queue setting 'gang' without '=' in 'queue 1 set gang': expected KEY=VALUE with a key from mode, cputime, residency, memory, disk, group, backfill, mpl, share or fairshare");
    check("queue 1 set cputime", "MissingEquals: queue setting 'cputime' without '=' in 'queue 1 set cputime': expected cputime=DUR|none");
    check(
        "queue 1 set group=",
        "EmptyValue: empty value for group in 'queue 1 set group=': expected group=NAME|GID|none",
    );
    check("queue 1 set mode=gang mode=exclusive", "DuplicateSetting: queue setting mode given twice in 'queue 1 set mode=gang mode=exclusive': give each setting at most once");
    check("queue 1 set mpl=0", "InvalidValue: bad setting 'mpl=0' in 'queue 1 set mpl=0': a level of 0 would let no job run; give mpl=1 or more, or mpl=none for no level");
    check("queue 1 set mpl=two", "InvalidValue: bad setting 'mpl=two' in 'queue 1 set mpl=two': 'two' is not a whole number; expected mpl=N|none");
    check("queue 1 set mpl=2", "queue 1 set mpl=2");
    check("queue 1 set mpl=none", "queue 1 set mpl=none");
    check("queue 1 set share=job", "queue 1 set share=job");
    check(
        "queue 1 set share=user mpl=2",
        "queue 1 set mpl=2 share=user",
    );
    check("queue 1 set share=users", "InvalidValue: bad setting 'share=users' in 'queue 1 set share=users': did you mean 'user'? unknown value 'users'; expected share=user|job");
    check("queue 1 set fairshare=1d", "queue 1 set fairshare=1d");
    check(
        "queue 1 set fairshare=none share=job",
        "queue 1 set share=job fairshare=none",
    );
    check("queue 1 set fairshare=0", "InvalidValue: bad setting 'fairshare=0' in 'queue 1 set fairshare=0': a half-life of 0 forgets all usage at once; give fairshare=HALFLIFE above 0, or fairshare=none");
    check("queue 1 set fairshare=soon", "InvalidValue: bad setting 'fairshare=soon' in 'queue 1 set fairshare=soon': invalid duration 'soon': expected a number with an optional ms, s, m, h or d suffix (e.g. 500ms)");
    check("queue 1 set share=none", "InvalidValue: bad setting 'share=none' in 'queue 1 set share=none': unknown value 'none'; expected share=user|job");
    check("queue 1 set backfill=yes", "InvalidValue: bad setting 'backfill=yes' in 'queue 1 set backfill=yes': unknown value 'yes'; expected backfill=on|off");
    check("queue 1 set mode=fast", "InvalidValue: bad setting 'mode=fast' in 'queue 1 set mode=fast': unknown mode 'fast'; expected mode=gang|exclusive");
    check("queue 1 set mode=Gang", "InvalidValue: bad setting 'mode=Gang' in 'queue 1 set mode=Gang': did you mean 'gang'? unknown mode 'Gang'; expected mode=gang|exclusive");
    check("queue 1 set mode=none", "InvalidValue: bad setting 'mode=none' in 'queue 1 set mode=none': unknown mode 'none'; expected mode=gang|exclusive");
    check("queue 1 set cputime=0", "InvalidValue: bad setting 'cputime=0' in 'queue 1 set cputime=0': cputime must be longer than 0; use cputime=none to remove it");
    check("queue 1 set residency=0ms", "InvalidValue: bad setting 'residency=0ms' in 'queue 1 set residency=0ms': residency must be longer than 0; use residency=none to remove it");
    check("queue 1 set cputime=5x", "InvalidValue: bad setting 'cputime=5x' in 'queue 1 set cputime=5x': invalid duration '5x': expected a number with an optional ms, s, m, h or d suffix (e.g. 500ms)");
    check("queue 1 set memory=101%", "InvalidValue: bad setting 'memory=101%' in 'queue 1 set memory=101%': percentage '101%' is out of range: it must be between 0% and 100%");
    // Values that cannot be meant.
    check("cluster 0 limit memory=0", "InvalidValue: bad setting 'memory=0' in 'cluster 0 limit memory=0': a memory limit of 0 would kill every job at its first sample; give a size above 0, or memory=none for no limit");
    check("cluster 0 limit disk=0K", "InvalidValue: bad setting 'disk=0K' in 'cluster 0 limit disk=0K': a disk limit of 0 would kill every job at its first sample; give a size above 0, or disk=none for no limit");
    check("queue 1 set memory=50", "InvalidValue: bad setting 'memory=50' in 'queue 1 set memory=50': a queue's memory limit is a share of the cluster's, written with %: memory=50%");
    check("queue 1 set disk=0%", "InvalidValue: bad setting 'disk=0%' in 'queue 1 set disk=0%': a disk share of 0% would kill every job at its first sample; give a share above 0%, or disk=none for no limit");
    check("queue 1 set disk=half", "InvalidValue: bad setting 'disk=half' in 'queue 1 set disk=half': invalid percentage 'half': expected a number from 0 to 100 followed by % (e.g. 50%)");
    check("queue 1 set group=9lives", "InvalidValue: bad setting 'group=9lives' in 'queue 1 set group=9lives': '9lives' is not a group name or number; a name starts with a letter or '_' and holds letters, digits, '_', '.' and '-'");
    check("queue 1 set group=a:b", "InvalidValue: bad setting 'group=a:b' in 'queue 1 set group=a:b': 'a:b' is not a group name or number; a name starts with a letter or '_' and holds letters, digits, '_', '.' and '-'");
    check("queue 1 set group=abcdefghijklmnopqrstuvwxyz0123456", "InvalidValue: bad setting 'group=abcdefghijklmnopqrstuvwxyz0123456' in 'queue 1 set group=abcdefghijklmnopqrstuvwxyz0123456': group name 'abcdefghijklmnopqrstuvwxyz0123456' is longer than 32 characters");
    check("queue 1 set group=4294967296", "InvalidValue: bad setting 'group=4294967296' in 'queue 1 set group=4294967296': group id '4294967296' is too large; expected a number below 4294967296");
}

#[test]
fn kill_lines() {
    check("kill 42", "kill 42");
    // Every number is a job id: two jobs, not a signal.
    check("kill 63 64", "kill 63 64");
    check("kill 42 9", "kill 42 9");
    check("kill 1 2 3 4", "kill 1 2 3 4");
    // A signal by name after the ids, as before, or with -s.
    check("kill 42 TERM", "kill -s TERM 42");
    check("kill 42 sigkill", "kill -s KILL 42");
    check("kill 42 SIGUSR1", "kill -s USR1 42");
    check("kill 42 43 Int", "kill -s INT 42 43");
    check("kill 42 iot", "kill -s ABRT 42");
    check("kill -s 9 42", "kill -s KILL 42");
    check("kill -s 64 42", "kill -s RTMAX 42");
    check("kill -s 49 42", "kill -s RTMIN+15 42");
    check("kill -s 50 42", "kill -s RTMAX-14 42");
    check("kill -s 33 42", "kill -s 33 42");
    check("kill 42 RTMIN", "kill -s RTMIN 42");
    check("kill 42 sigrtmin+3", "kill -s RTMIN+3 42");
    check("kill 42 RTMAX-2", "kill -s RTMAX-2 42");
    check("kill 42 rtmax", "kill -s RTMAX 42");
    check("kill --user alice", "kill --user alice");
    check(
        "kill -s HUP --name sweep --user 1000",
        "kill -s HUP --user 1000 --name sweep",
    );
    check(
        "kill",
        "MissingArgument: missing job id, --user or --name in 'kill': usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL",
    );
    check("kill 0", "InvalidValue: invalid job id '0' in 'kill 0': expected a job number such as 42; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill 42 65", "kill 42 65");
    check("kill -s 65 42", "InvalidValue: unknown signal '65' in 'kill -s 65 42': expected a number from 1 to 64 or a name such as TERM, KILL, INT, HUP, USR1 or RTMIN+2");
    check("kill -s 0 42", "InvalidValue: unknown signal '0' in 'kill -s 0 42': expected a number from 1 to 64 or a name such as TERM, KILL, INT, HUP, USR1 or RTMIN+2");
    check("kill 42 SIG", "InvalidValue: unknown signal 'SIG' in 'kill 42 SIG': expected a number from 1 to 64 or a name such as TERM, KILL, INT, HUP, USR1 or RTMIN+2");
    check("kill 42 RTMIN+31", "InvalidValue: unknown signal 'RTMIN+31' in 'kill 42 RTMIN+31': expected a number from 1 to 64 or a name such as TERM, KILL, INT, HUP, USR1 or RTMIN+2");
    check("kill 42 RTMAX-31", "InvalidValue: unknown signal 'RTMAX-31' in 'kill 42 RTMAX-31': expected a number from 1 to 64 or a name such as TERM, KILL, INT, HUP, USR1 or RTMIN+2");
    check("kill Σ", "InvalidValue: invalid job id 'Σ' in 'kill Σ': expected a job number such as 42; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill 42 -9", "InvalidValue: '-9' is not an option in 'kill 42 -9': give a signal with -s, as -s 9; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill -KILL 42", "InvalidValue: '-KILL' is not an option in 'kill -KILL 42': give a signal with -s, as -s KILL; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill --nmae x", "UnknownKeyword: unexpected '--nmae' in 'kill --nmae x': did you mean '--name'? expected -s, --user or --name; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill 42 TERM now", "ExtraArgument: unexpected 'now' after the signal 'TERM' in 'kill 42 TERM now': a signal's name after the job ids ends the line: give every id before it, or the signal with -s, as -s TERM; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill 42 --user alice", "InvalidValue: job ids and --user or --name together in 'kill 42 --user alice': give one or the other; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill -s TERM -s KILL 42", "InvalidValue: a signal given twice in 'kill -s TERM -s KILL 42': usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill -s", "MissingArgument: missing a signal after -s in 'kill -s': usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
}

/// A word out of place in `kill` is named with where it stands: a signal's
/// name is never reported as a bad job id.
#[test]
fn kill_names_a_word_out_of_place() {
    check("kill 12 KILL extra", "ExtraArgument: unexpected 'extra' after the signal 'KILL' in 'kill 12 KILL extra': a signal's name after the job ids ends the line: give every id before it, or the signal with -s, as -s KILL; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill 12 sigkill 13", "ExtraArgument: unexpected '13' after the signal 'sigkill' in 'kill 12 sigkill 13': a signal's name after the job ids ends the line: give every id before it, or the signal with -s, as -s KILL; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill 12 HUP TERM", "ExtraArgument: unexpected 'TERM' after the signal 'HUP' in 'kill 12 HUP TERM': a signal's name after the job ids ends the line: give every id before it, or the signal with -s, as -s HUP; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill KILL 12", "InvalidValue: 'KILL' is a signal, not a job id in 'kill KILL 12': a signal's name goes after the job ids, or anywhere with -s, as -s KILL; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill usr1", "InvalidValue: 'usr1' is a signal, not a job id in 'kill usr1': a signal's name goes after the job ids, or anywhere with -s, as -s USR1; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill -s TERM 12 KILL", "InvalidValue: a signal given twice in 'kill -s TERM 12 KILL': usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill --user alice KILL", "InvalidValue: signal 'KILL' without -s in 'kill --user alice KILL': with --user or --name the signal goes with -s, as -s KILL; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill --name sweep HUP", "InvalidValue: signal 'HUP' without -s in 'kill --name sweep HUP': with --user or --name the signal goes with -s, as -s HUP; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill --user alice bob", "ExtraArgument: unexpected 'bob' after 'alice' in 'kill --user alice bob': --user and --name take one word each; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill --user --name sweep", "MissingArgument: missing a user name or uid after --user in 'kill --user --name sweep': '--name' is an option of its own; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("kill --name -s HUP", "MissingArgument: missing a job name after --name in 'kill --name -s HUP': '-s' is an option of its own; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
    check("jobs --user --state running", "MissingArgument: missing a user name or uid after --user in 'jobs --user --state running': '--state' is an option of its own; usage: jobs [all] [--user U] [--name N] [--state S]");
    check("history --user --since 2h", "MissingArgument: missing a user name or uid after --user in 'history --user --since 2h': '--since' is an option of its own; usage: history [--user U] [--since T]");
    // Every documented form still reads as it did.
    check("kill 12 KILL", "kill -s KILL 12");
    check("kill 12 13 KILL", "kill -s KILL 12 13");
    check("kill 12 -s KILL", "kill -s KILL 12");
    check("kill -s KILL --user alice", "kill -s KILL --user alice");
    check("kill --name sweep -s 9", "kill -s KILL --name sweep");
    check("kill 12 nosuch", "InvalidValue: unknown signal 'nosuch' in 'kill 12 nosuch': expected a number from 1 to 64 or a name such as TERM, KILL, INT, HUP, USR1 or RTMIN+2");
    check("kill 12 x 13", "InvalidValue: invalid job id 'x' in 'kill 12 x 13': expected a job number such as 42; usage: kill [-s SIGNAL] ID [ID...] or kill [-s SIGNAL] [--user U] [--name N] or kill ID SIGNAL");
}

#[test]
fn job_id_errors() {
    check("job 18446744073709551615", "job 18446744073709551615");
    check("job 18446744073709551616", "InvalidValue: invalid job id '18446744073709551616' in 'job 18446744073709551616': expected a job number such as 42; usage: job ID");
    check("job +5", "InvalidValue: invalid job id '+5' in 'job +5': expected a job number such as 42; usage: job ID");
    check("job 0x10", "InvalidValue: invalid job id '0x10' in 'job 0x10': expected a job number such as 42; usage: job ID");
    check("job ４２", "InvalidValue: invalid job id '４２' in 'job ４２': expected a job number such as 42; usage: job ID");
}

#[test]
fn suspend_resume_move() {
    check("suspend 7", "suspend 7");
    check("resume 7", "resume 7");
    check("move 7 0", "move 7 0");
    check(
        "suspend",
        "MissingArgument: missing job id in 'suspend': usage: suspend ID",
    );
    check("resume x", "InvalidValue: invalid job id 'x' in 'resume x': expected a job number such as 42; usage: resume ID");
    check(
        "resume 7 8",
        "ExtraArgument: extra argument '8' in 'resume 7 8': usage: resume ID",
    );
    check(
        "move 7",
        "MissingArgument: missing queue number to move to in 'move 7': usage: move ID Q",
    );
    check(
        "move 7 300",
        "InvalidValue: invalid queue number '300' in 'move 7 300': expected a number from 0 to 255",
    );
    check(
        "move 7 1 2",
        "ExtraArgument: extra argument '2' in 'move 7 1 2': usage: move ID Q",
    );
}

#[test]
fn timeslice_lines() {
    check("timeslice", "timeslice");
    check("timeslice 100ms", "timeslice 100ms");
    check("timeslice 0.5", "timeslice 500ms");
    check("timeslice 1ms", "timeslice 1ms");
    check("timeslice 1h", "timeslice 1h");
    check("timeslice 1.5ms", "timeslice 1.500ms");
    check("timeslice 0.999ms", "InvalidValue: time slice '0.999ms' out of range in 'timeslice 0.999ms': expected a duration from 1ms to 1h such as 500ms");
    check("timeslice 3600.001", "InvalidValue: time slice '3600.001' out of range in 'timeslice 3600.001': expected a duration from 1ms to 1h such as 500ms");
    check("timeslice 0", "InvalidValue: time slice '0' out of range in 'timeslice 0': expected a duration from 1ms to 1h such as 500ms");
    check("timeslice 60", "timeslice 1m");
    check("timeslice 100", "InvalidValue: time slice '100' has no unit in 'timeslice 100': a number alone is seconds, so it would be 1m40s: write 100ms, or 100s if seconds are meant");
    check("timeslice 100s", "timeslice 100s");
    check("timeslice 10us", "InvalidValue: invalid time slice '10us' in 'timeslice 10us': invalid duration '10us': expected a number with an optional ms, s, m, h or d suffix (e.g. 500ms)");
    check(
        "timeslice 1s 2s",
        "ExtraArgument: extra argument '2s' in 'timeslice 1s 2s': usage: timeslice [DUR]",
    );
}

#[test]
fn shutdown_lines() {
    check("shutdown", "shutdown");
    check("shutdown now", "shutdown now");
    check("shutdown later", "UnknownKeyword: unexpected 'later' in 'shutdown later': expected now; usage: shutdown [now]");
    check(
        "shutdown now now",
        "ExtraArgument: extra argument 'now' in 'shutdown now now': usage: shutdown [now]",
    );
}

// Unknown commands and hostile input.

#[test]
fn unknown_commands() {
    check("stauts", "UnknownCommand: unknown command 'stauts' in 'stauts': did you mean 'status'? help lists the commands");
    check("STATUS", "UnknownCommand: unknown command 'STATUS' in 'STATUS': did you mean 'status'? help lists the commands");
    check("ståtus", "UnknownCommand: unknown command 'ståtus' in 'ståtus': did you mean 'status'? help lists the commands");
    check("kil 4", "UnknownCommand: unknown command 'kil' in 'kil 4': did you mean 'kill'? help lists the commands");
    check(
        "frobnicate 1 2",
        "UnknownCommand: unknown command 'frobnicate' in 'frobnicate 1 2': help lists the commands",
    );
    check(
        "memory=4G",
        "UnknownCommand: unknown command 'memory=4G' in 'memory=4G': help lists the commands",
    );
}

#[test]
fn control_characters() {
    check("stat\0us", "ControlCharacter: control character '\\u{0}' at column 5 of 'stat\\u{0}us': a command line is plain text");
    check("status\u{1b}[2J", "ControlCharacter: control character '\\u{1b}' at column 7 of 'status\\u{1b}[2J': a command line is plain text");
    check("status\r", "ControlCharacter: control character '\\r' at column 7 of 'status\\r': a command line is plain text");
    check("status\n\n", "ControlCharacter: control character '\\n' at column 7 of 'status\\n': a command line is plain text");
    check("status # \u{7}", "ControlCharacter: control character '\\u{7}' at column 10 of 'status # \\u{7}': a command line is plain text");
    check("job\u{85}1", "ControlCharacter: control character '\\u{85}' at column 4 of 'job\\u{85}1': a command line is plain text");
}

#[test]
fn long_lines_are_refused_before_work() {
    let at_limit = format!("status{}", " ".repeat(MAX_LINE - 6));
    check(&at_limit, "status");
    let over = format!("status{}", " ".repeat(MAX_LINE - 5));
    check(&over, "LineTooLong: line 'status                                  ...' is 65537 bytes long: the limit is 65536 bytes, one command per line");
    // Control characters past the limit are not even looked at.
    let over_with_nul = format!("{over}\0");
    assert_eq!(
        parse_line(&over_with_nul).map_err(|error| error.kind),
        Err(ParseErrorKind::LineTooLong)
    );
}

#[test]
fn huge_words_and_many_words_stay_cheap() {
    let word = "x".repeat(MAX_LINE - 40);
    check(
        &format!("cluster {word} limit jobs=1"),
        &format!("cluster {word} limit jobs=1"),
    );
    assert_eq!(
        parse_line(&word).map_err(|error| error.kind),
        Err(ParseErrorKind::UnknownCommand)
    );
    let settings = "jobs=1 ".repeat(MAX_LINE / 8);
    assert_eq!(
        parse_line(&format!("cluster 0 limit {settings}")).map_err(|error| error.kind),
        Err(ParseErrorKind::DuplicateSetting)
    );
    let signal = format!("SIG{}", "A".repeat(MAX_LINE - 20));
    assert_eq!(
        parse_line(&format!("kill -s {signal} 1")).map_err(|error| error.kind),
        Err(ParseErrorKind::InvalidValue)
    );
    let message = parse_line(&format!("{word} {word}"))
        .err()
        .map(|error| error.message)
        .unwrap_or_default();
    assert!(message.len() < 200, "{message}");
}

#[test]
fn long_lines_are_shortened_in_messages() {
    check("queue 1 set mode=gang cputime=1h residency=10m memory=50% disk=50% group=wheel mode=gang", "DuplicateSetting: queue setting mode given twice in 'queue 1 set mode=gang cputime=1h residency=10m memory=50% disk=50% group=wheel m...': give each setting at most once");
}

#[test]
fn edit_distance_counts_swaps_as_one() {
    assert_eq!(edit_distance("stauts", "status"), 1);
    assert_eq!(edit_distance("", "job"), 3);
    assert_eq!(edit_distance("queues", "queue"), 1);
    assert_eq!(closest("hots", &["hosts", "help"]), Some("hosts"));
    assert_eq!(closest("zzzzz", &["hosts", "help"]), None);
}

#[test]
fn every_command_name_parses_or_asks_for_arguments() {
    for name in help::command_names() {
        match parse_line(name) {
            Ok(Some(_)) => {}
            Err(error) => assert_eq!(error.kind, ParseErrorKind::MissingArgument, "{name}"),
            Ok(None) => panic!("{name} parsed as a blank line"),
        }
    }
}

#[test]
fn render_of_values_the_parser_cannot_produce_is_refused() {
    // Documented limits of the round trip: these print, and parsing refuses.
    let cases = [
        Command::Help(Some("frob".into())),
        Command::ClusterLimit {
            cluster: ClusterRef::Name("12".into()),
            limits: ClusterLimits::default(),
        },
        Command::QueueSet {
            queue: 1,
            settings: QueueSettings {
                memory: Some(Setting::Set(f64::NAN)),
                ..QueueSettings::default()
            },
        },
    ];
    for command in cases {
        let text = render(&command);
        assert!(parse_line(&text).is_err(), "{text}");
    }
}

// Property tests.

/// Durations `parse_duration` can give, above zero: any microsecond count
/// up to a century, and round values in each unit.
fn positive_duration() -> impl Strategy<Value = Duration> {
    const CENTURY_MICROS: u64 = 100 * 365 * 86_400 * 1_000_000;
    prop_oneof![
        (1u64..=CENTURY_MICROS).prop_map(Duration::from_micros),
        (
            1u64..=1_000,
            prop::sample::select(vec![1u64, 1_000, 60_000, 3_600_000, 86_400_000])
        )
            .prop_map(|(count, unit_ms)| Duration::from_millis(count * unit_ms)),
    ]
}

/// Percentages as `parse_percent` computes them from up to nine decimals.
fn percent() -> impl Strategy<Value = f64> {
    (0u64..=100, 0u64..1_000_000_000, 0usize..=9)
        .prop_map(|(whole, frac, digits)| {
            let text = if digits == 0 || whole == 100 {
                format!("{whole}%")
            } else {
                let frac = frac % 10u64.pow(digits as u32);
                format!("{whole}.{frac:0digits$}%")
            };
            parse_percent(&text).expect("generated percentages are valid")
        })
        .prop_filter("a share of 0% is refused", |pct| *pct > 0.0)
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (0u64..1 << 24, 0u32..=40).prop_map(|(count, shift)| count << shift),
    ]
    .prop_filter("a limit under 1M is refused", |size| {
        *size >= crate::units::MIN_LIMIT
    })
}

fn setting<T: std::fmt::Debug + Clone + 'static>(
    value: impl Strategy<Value = T> + 'static,
) -> impl Strategy<Value = Option<Setting<T>>> {
    prop_oneof![
        Just(None),
        Just(Some(Setting::Clear)),
        value.prop_map(|value| Some(Setting::Set(value))),
    ]
}

fn cluster_ref() -> impl Strategy<Value = ClusterRef> {
    prop_oneof![
        any::<u32>().prop_map(ClusterRef::Index),
        "[A-Za-z_][A-Za-z0-9_.+-]{0,15}".prop_map(ClusterRef::Name),
    ]
}

fn group_ref() -> impl Strategy<Value = GroupRef> {
    prop_oneof![
        any::<u32>().prop_map(GroupRef::Gid),
        "[A-Za-z_][A-Za-z0-9_.-]{0,31}".prop_map(GroupRef::Name),
    ]
}

fn cluster_limits() -> impl Strategy<Value = ClusterLimits> {
    (setting(size()), setting(size()), setting(any::<u64>()))
        .prop_map(|(memory, disk, jobs)| ClusterLimits { memory, disk, jobs })
        .prop_filter("at least one limit", |limits| {
            *limits != ClusterLimits::default()
        })
}

fn queue_settings() -> impl Strategy<Value = QueueSettings> {
    (
        prop::option::of(prop_oneof![
            Just(QueueMode::Gang),
            Just(QueueMode::Exclusive)
        ]),
        setting(positive_duration()),
        setting(positive_duration()),
        setting(percent()),
        setting(percent()),
        setting(group_ref()),
        prop::option::of(any::<bool>()),
        setting(1u32..=64),
        (
            prop::option::of(prop_oneof![Just(QueueShare::User), Just(QueueShare::Job)]),
            setting(positive_duration()),
        ),
    )
        .prop_map(
            |(mode, cputime, residency, memory, disk, group, backfill, mpl, (share, fairshare))| {
                QueueSettings {
                    mode,
                    cputime,
                    residency,
                    memory,
                    disk,
                    group,
                    backfill,
                    mpl,
                    share,
                    fairshare,
                }
            },
        )
        .prop_filter("at least one setting", |settings| {
            *settings != QueueSettings::default()
        })
}

fn job_id() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..=1_000, 1u64..=u64::MAX]
}

/// `--user`, `--name` and (`with_state`) `--state` filters.
fn job_filter(with_state: bool) -> impl Strategy<Value = JobFilter> {
    let word = || prop::option::of("[a-z][a-z0-9_.-]{0,8}");
    let state = prop::option::of(prop::sample::select(JOB_STATES.to_vec()));
    (word(), word(), state).prop_map(move |(user, name, state)| JobFilter {
        user,
        name,
        state: state.filter(|_| with_state).map(String::from),
    })
}

fn queue_number() -> impl Strategy<Value = u32> {
    0u32..=MAX_QUEUE
}

/// Every command `parse_line` can produce.
fn command() -> impl Strategy<Value = Command> {
    let names: Vec<String> = help::command_names().map(String::from).collect();
    let simple = prop_oneof![
        prop::option::of(prop::sample::select(names)).prop_map(Command::Help),
        Just(Command::Status),
        Just(Command::Hosts),
        Just(Command::Clusters),
        Just(Command::Queues),
        (any::<bool>(), job_filter(true)).prop_map(|(all, filter)| Command::Jobs { all, filter }),
        job_id().prop_map(Command::Job),
        any::<bool>().prop_map(|now| Command::Shutdown { now }),
        prop::option::of((1_000u64..=3_600_000_000).prop_map(Duration::from_micros))
            .prop_map(Command::Timeslice),
    ];
    let jobs = prop_oneof![
        (
            prop::collection::vec(job_id(), 1..4),
            prop::option::of(1i32..=MAX_SIGNAL)
        )
            .prop_map(|(jobs, signal)| Command::Kill {
                jobs,
                filter: JobFilter::default(),
                signal
            }),
        (
            job_filter(false).prop_filter("a filter", |filter| !filter.is_empty()),
            prop::option::of(1i32..=MAX_SIGNAL)
        )
            .prop_map(|(filter, signal)| Command::Kill {
                jobs: Vec::new(),
                filter,
                signal
            }),
        job_id().prop_map(Command::Suspend),
        job_id().prop_map(Command::Resume),
        (job_id(), queue_number()).prop_map(|(job, queue)| Command::Move { job, queue }),
    ];
    let changes = prop_oneof![
        (cluster_ref(), cluster_limits())
            .prop_map(|(cluster, limits)| Command::ClusterLimit { cluster, limits }),
        (
            queue_number(),
            prop::sample::select(vec![
                QueueAction::Enable,
                QueueAction::Disable,
                QueueAction::Activate,
                QueueAction::Deactivate,
            ])
        )
            .prop_map(|(queue, action)| Command::QueueState { queue, action }),
        (queue_number(), queue_settings())
            .prop_map(|(queue, settings)| Command::QueueSet { queue, settings }),
    ];
    prop_oneof![simple, jobs, changes]
}

/// Lines built from the language's own words, values, blanks and a few
/// hostile characters, so that random input often gets deep into a command.
fn wordy_line() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        prop::sample::select(vec![
            "help",
            "status",
            "hosts",
            "clusters",
            "cluster",
            "limit",
            "queues",
            "queue",
            "enable",
            "disable",
            "activate",
            "deactivate",
            "set",
            "jobs",
            "all",
            "job",
            "kill",
            "suspend",
            "resume",
            "move",
            "timeslice",
            "shutdown",
            "now",
            "none",
            "memory=",
            "disk=",
            "jobs=",
            "mode=",
            "cputime=",
            "residency=",
            "group=",
            "=",
            "#",
            "0",
            "1",
            "255",
            "256",
            "-1",
            "18446744073709551616",
            "4G",
            "1.5G",
            "50%",
            "100%",
            "12.5",
            "500ms",
            "0",
            "1h",
            "gang",
            "exclusive",
            "TERM",
            "SIGKILL",
            "wheel",
            "x86",
            "\t",
            "\0",
            "\r",
            "\n",
            "\u{1b}",
            "é",
            "%",
            "..",
            "ms",
        ])
        .prop_map(String::from),
        "[ -~]{0,12}",
        any::<String>(),
    ];
    prop::collection::vec(word, 0..12).prop_map(|words| {
        // Joining settings keys to the next word builds `key=value`.
        let mut line = String::new();
        for word in words {
            if !line.ends_with('=') && !line.is_empty() {
                line.push(' ');
            }
            line.push_str(&word);
        }
        line
    })
}

proptest! {
    #[test]
    fn render_then_parse_gives_the_same_command(command in command()) {
        let text = render(&command);
        prop_assert_eq!(parse_line(&text), Ok(Some(command)), "{}", text);
    }

    #[test]
    fn parse_then_render_then_parse_is_stable(line in wordy_line()) {
        if let Ok(Some(command)) = parse_line(&line) {
            let text = render(&command);
            prop_assert_eq!(parse_line(&text), Ok(Some(command)), "{} -> {}", line, text);
        }
    }

    #[test]
    fn random_strings_never_panic(line in any::<String>()) {
        let _ = parse_line(&line);
    }

    #[test]
    fn random_bytes_as_text_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_line(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn huge_random_lines_never_panic(
        unit in "[ -~\t\0\u{1b}é]{1,8}",
        count in 0usize..20_000,
    ) {
        let line = unit.repeat(count);
        if let Err(error) = parse_line(&line) {
            prop_assert!(error.message.len() < 400, "{}", error.message);
            prop_assert!(!error.message.is_empty());
        }
    }

    #[test]
    fn errors_name_the_line_and_are_lowercase(line in wordy_line()) {
        if let Err(error) = parse_line(&line) {
            let first = error.message.chars().next().unwrap_or('x');
            prop_assert!(!first.is_uppercase(), "{}", error.message);
            prop_assert!(!error.message.ends_with('.'), "{}", error.message);
        }
    }
}

#[test]
fn history_lines() {
    check("history", "history");
    check("history --user alice", "history --user alice");
    check("history --since 2h", "history --since 2h");
    check(
        "history --since 2026-11-23 --user 1000",
        "history --user 1000 --since 2026-11-23T00:00:00",
    );
    check(
        "history --since 2024-02-29T23:59:59Z",
        "history --since 2024-02-29T23:59:59",
    );
    check(
        "history --since 2025-02-29",
        "InvalidValue: invalid time '2025-02-29' in 'history --since 2025-02-29': expected a duration before now such as 2h or 1d, or a UTC time such as 2026-11-23 or 2026-11-23T08:30:00",
    );
    check(
        "history --user",
        "MissingArgument: missing a user name or uid after --user in 'history --user': usage: history [--user U] [--since T]",
    );
}

#[test]
fn utc_times_round_trip() {
    assert_eq!(parse_utc("1970-01-01"), Some(0));
    assert_eq!(parse_utc("2026-11-23T00:29:53"), Some(1_795_393_793));
    assert_eq!(format_utc(1_795_393_793), "2026-11-23T00:29:53");
    for secs in [0, 86_399, 951_782_400, 4_102_444_800] {
        assert_eq!(parse_utc(&format_utc(secs)), Some(secs));
    }
    for bad in [
        "2026-13-01",
        "2026-1-01",
        "2026-11-23T24:00",
        "26-11-23",
        "2026-11-23T08",
    ] {
        assert_eq!(parse_utc(bad), None, "{bad}");
    }
}
