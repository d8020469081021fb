//! Attribute errors: each names the host, the attribute and the value,
//! at the attribute's position.

use super::*;

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
        "a memory=lots\nb memory=0\nc memory=1G,2G\nd memory=99999999T\ne memory=1000K",
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
        hosts.db:5:3: host 'e', attribute memory: invalid memory '1000K': is 1000K, under the 1M that any job needs (a size without a unit is in bytes: write 512M or 2G)
        e memory=1000K
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
