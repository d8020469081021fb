//! Clusters, groups and the embedded default.

use super::*;

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
