//! Records, attributes and merging.

use super::*;

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
