//! Start-up — the embedded default, hosts database errors with
//! FILE:LINE, and the rc file applied or refused.

use scored_tests::*;

fn start_fails(hosts: &str, extra: &[(&str, &str)], expected: &[&str]) {
    let sandbox = Sandbox::new();
    for (name, text) in extra {
        sandbox.write(name, text);
    }
    let path = sandbox.write("scorehosts.db", hosts);
    let output = sandbox
        .scored()
        .arg("--hosts")
        .arg(&path)
        .output()
        .expect("scored");
    assert_eq!(
        code(&output),
        Some(1),
        "scored must refuse to start on {hosts:?}"
    );
    let message = stderr(&output);
    for part in expected {
        assert!(message.contains(part), "expected {part:?} in:\n{message}");
    }
    assert!(
        !sandbox.path.join("s.sock").exists(),
        "a refused start must not listen"
    );
}

#[test]
fn bad_attribute_values_give_file_and_line() {
    start_fails(
        "h0 cpus=0\nh1 speed=fast\n",
        &[],
        &["scorehosts.db:2:", "speed"],
    );
    start_fails(
        "h0 cpus=0\n\nh1 cpus=5-2\n",
        &[],
        &["scorehosts.db:3:", "cpus"],
    );
    start_fails("h0 cores=0\n", &[], &["scorehosts.db:1:", "cores"]);
    start_fails("h0 memory=lots\n", &[], &["scorehosts.db:1:", "memory"]);
    start_fails(
        "h0 watchfs=relative/dir\n",
        &[],
        &["scorehosts.db:1:", "watchfs"],
    );
}

#[test]
fn syntax_errors_give_file_and_line() {
    start_fails(
        "h0 cpus=0\n/* never closed\nh1\n",
        &[],
        &["scorehosts.db:2:", "comment"],
    );
    start_fails(
        "h0\n#include \"missing.db\"\n",
        &[],
        &["scorehosts.db:2:", "missing.db"],
    );
    start_fails(
        "#include \"a.db\"\n",
        &[("a.db", "#include \"scorehosts.db\"\n")],
        &["a.db:1:", "scorehosts.db"],
    );
    start_fails("h0 cpus=0\nh\u{1}1 cpus=0\n", &[], &["scorehosts.db:2:"]);
    start_fails("# nothing but a comment\n", &[], &["scorehosts.db:"]);
}

#[test]
fn an_unknown_group_is_refused() {
    let sandbox = Sandbox::new();
    let path = sandbox.write("scorehosts.db", "h0 group=a\nh1 group=b\n");
    let output = sandbox
        .scored()
        .args(["--group", "c", "--hosts"])
        .arg(&path)
        .output()
        .expect("scored");
    assert_eq!(code(&output), Some(1));
    assert!(
        stderr(&output).contains("scorehosts.db:"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn groups_select_hosts_and_homogeneous_hosts_form_clusters() {
    let daemon = Daemon::builder()
        .hosts("a0 group=x cpugen=amd speed=2\na1 group=x cpugen=amd speed=2\nb0 group=x cpugen=intel\nc0 group=y\n")
        .arg("--group")
        .arg("x")
        .start();
    let hosts = daemon.json("hosts");
    let names: Vec<&str> = hosts
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|h| h["name"].as_str())
        .collect();
    assert_eq!(names, vec!["a0", "a1", "b0"]);
    let clusters = daemon.json("clusters");
    let clusters: Vec<(String, u64)> = clusters
        .as_array()
        .expect("array")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("").to_string(),
                c["hosts"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        clusters,
        vec![("amd".to_string(), 2), ("intel".to_string(), 1)]
    );
}

#[test]
fn the_embedded_default_has_one_host_per_online_cpu() {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online cpus");
    let cpus = scored_proto::units::CpuSet::parse(online.trim()).expect("cpu list");
    let daemon = Daemon::start();
    let hosts = daemon.json("hosts");
    let hosts = hosts.as_array().expect("array");
    assert_eq!(hosts.len(), cpus.len());
    for (host, cpu) in hosts.iter().zip(cpus.cpus()) {
        assert_eq!(host["cpus"], cpu.to_string());
        assert_eq!(host["cluster"], "default");
    }
    let queues = daemon.json("queues");
    let modes: Vec<&str> = queues
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|q| q["mode"].as_str())
        .collect();
    assert_eq!(modes, vec!["exclusive", "gang", "gang"]);
}

#[test]
fn an_rc_file_is_applied_at_start_up() {
    let daemon = Daemon::builder()
        .rc("# policy\nqueue 2 deactivate\n\ntimeslice 250ms\nqueue 1 set mode=exclusive\n")
        .start();
    let queues = daemon.json("queues");
    assert_eq!(queues[2]["state"], "deactivated");
    assert_eq!(queues[1]["mode"], "exclusive");
    assert!(daemon.ok("timeslice").contains("250ms"));
}

#[test]
fn a_broken_rc_file_is_refused_with_its_line() {
    let sandbox = Sandbox::new();
    let rc = sandbox.write(
        "scored.rc",
        "queue 1 deactivate\nqueue 9 activate\nfrobnicate\nshutdown now\n",
    );
    let output = sandbox
        .scored()
        .arg("--rc")
        .arg(&rc)
        .output()
        .expect("scored");
    assert_eq!(code(&output), Some(1));
    let message = stderr(&output);
    assert!(message.contains("scored.rc:2: no queue 9"), "{message}");
    assert!(
        message.contains("scored.rc:3: unknown command 'frobnicate'"),
        "{message}"
    );
    assert!(
        message.contains("scored.rc:4: shutdown cannot be used in a start-up script"),
        "{message}"
    );
    assert!(!sandbox.path.join("s.sock").exists());
}

/// A cluster that does not exist is named with the line that named it
/// and the clusters there are, in a start-up script as on the console,
/// where it changes nothing.
#[test]
fn a_cluster_that_does_not_exist_is_refused_quoting_its_line() {
    let sandbox = Sandbox::new();
    let hosts = sandbox.write("scorehosts.db", "h0 cpus=0\n");
    let rc = sandbox.write(
        "scored.rc",
        "cluster 0 limit jobs=4\ncluster 3 limit jobs=2\n",
    );
    let output = sandbox
        .scored()
        .arg("--hosts")
        .arg(&hosts)
        .arg("--rc")
        .arg(&rc)
        .output()
        .expect("scored");
    assert_eq!(code(&output), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains(
            "scored.rc:2: no cluster 3 in 'cluster 3 limit jobs=2': the only cluster is 0 (default)"
        ),
        "{message}"
    );
    assert!(!sandbox.path.join("s.sock").exists());
    let daemon = Daemon::builder().hosts("h0 cpus=0\nh1 cpus=1\n").start();
    let before = daemon.ok("clusters");
    let output = daemon.console("cluster x86 limit memory=1G");
    assert_ne!(code(&output), Some(0));
    let said = format!("{}{}", stdout(&output), stderr(&output));
    assert!(
        said.contains("error: no cluster 'x86' in 'cluster x86 limit memory=1G': the only cluster is 0 (default)"),
        "{said}"
    );
    assert_eq!(daemon.ok("clusters"), before);
}
