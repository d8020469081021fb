//! Admission rate and memory per admitted job, and the time of one
//! scheduling decision at 10,000 jobs in the pure core.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::restart::submit_admitted;
use crate::{held, hosts_file, median, ms, online_cpus, row, rss_kib, scaled, Row};
use scored_tests::*;

pub(crate) fn submit_frame() -> Vec<u8> {
    let submit = scored_proto::proto::Submit {
        stages: vec![vec!["true".into()]],
        joiner: scored_proto::proto::Joiner::Sequence,
        options: scored_proto::proto::JobOptions {
            procs: scored_proto::proto::ProcRequest::Nodes(1),
            priority: None,
            wait: false,
            memory: None,
            disk: None,
            pty: false,
            time_ms: None,
            batch: Default::default(),
        },
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
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
    };
    scored_proto::proto::encode(&scored_proto::proto::Request::Submit {
        version: scored_proto::proto::VERSION,
        submit,
    })
}

pub(crate) fn read_frame(stream: &mut UnixStream) -> Vec<u8> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).expect("reply length");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).expect("reply body");
    body
}

pub(crate) fn scale(rows: &mut Vec<Row>) {
    // The client side needs a socket per job.
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&hosts_file(256, 1))
        .rc("queue 1 deactivate\n")
        .start();
    let pid = daemon.pid();
    let frame = submit_frame();
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    let fds = [null.as_raw_fd(); 3];
    let mut streams = Vec::new();
    let rss_before = rss_kib(pid);
    let mut mark = Instant::now();
    let target = scaled(10_000, 1_000);
    let mut checkpoints = Vec::new();
    for count in 1..=target {
        streams.push(submit_admitted(&daemon, &frame, &fds));
        if count == 1_000 || count == target {
            let elapsed = mark.elapsed().as_secs_f64();
            let batch = if count == 1_000 { 1_000 } else { count - 1_000 };
            checkpoints.push((count, batch as f64 / elapsed, rss_kib(pid)));
            mark = Instant::now();
        }
    }
    for (count, rate, rss) in &checkpoints {
        let per_job = (rss.saturating_sub(rss_before) as f64 * 1024.0) / *count as f64;
        rows.push(row(
            &format!(
                "admission into a deactivated queue, jobs {}",
                if *count == 1_000 {
                    "1-1,000".to_string()
                } else {
                    format!("1,001-{count}")
                }
            ),
            format!("{rate:.0} jobs/s"),
            "-".into(),
            "-".into(),
            "",
        ));
        rows.push(row(
            &format!("daemon memory per admitted job at {count} jobs"),
            format!("{per_job:.0} B"),
            "1 kB target".into(),
            format!("{:.2}×", per_job / 1024.0),
            "under 1 kB",
        ));
    }
    drop(streams);
    decision_time(rows);
}

/// A pure core on `n_hosts` one-core hosts of one cluster, with gang
/// slices of `slice`, for the benchmarks that drive the core alone.
pub(crate) fn pure_core(n_hosts: u32, slice: std::time::Duration) -> scored_core::core::Core {
    use scored_core::cluster::{Cluster, Host, Topology};
    use scored_core::core::{Core, CoreConfig};
    use scored_core::ids::{ClusterId, HostId};
    let mut topology = Topology::default();
    let mut cluster = Cluster {
        id: ClusterId(0),
        name: "c".into(),
        cpugen: "c".into(),
        speed: 1.0,
        cores: 1,
        hosts: Vec::new(),
    };
    for idx in 0..n_hosts {
        topology.hosts.push(Host {
            id: HostId(idx),
            name: format!("h{idx}"),
            cluster: ClusterId(0),
            cpus: scored_proto::units::CpuSet::from_cpus([0]),
            cores: 1,
            speed: 1.0,
            cpugen: "c".into(),
            memory: 1 << 30,
            watchfs: Vec::new(),
            groups: Vec::new(),
        });
        cluster.hosts.push(HostId(idx));
    }
    topology.clusters.push(cluster);
    Core::new(
        CoreConfig {
            timeslice: slice,
            ..CoreConfig::default()
        },
        topology,
        vec![None],
    )
}

/// One scheduling decision at 10,000 admitted jobs on 256 hosts, on the
/// pure core with the actuator's answers simulated.
pub(crate) fn decision_time(rows: &mut Vec<Row>) {
    use scored_core::core::{Action, Core, Input};
    use scored_core::ids::{ClientToken, Cred, Tick};
    use scored_core::job::{JobRequest, Joiner, ProcRequest};
    let n_hosts = 256u32;
    let slice = Duration::from_millis(100);
    let mut core = pure_core(n_hosts, slice);
    let cred = Cred {
        pid: 1,
        uid: 0,
        gid: 0,
        groups: Vec::new(),
    };
    let mut now = Tick(0);
    // The actuator's answer to a switch: every stop confirmed, in one batch
    // (as the event loop delivers the children reaped after one SIGCHLD).
    let feed = |core: &mut Core, actions: Vec<Action>, now: Tick| {
        let mut actions = actions;
        loop {
            let stopped: Vec<Input> = actions
                .iter()
                .filter_map(|action| {
                    if let Action::Stop(job) = action {
                        Some(Input::Stopped(*job))
                    } else {
                        None
                    }
                })
                .collect();
            if stopped.is_empty() {
                break;
            }
            actions = core.handle_all(stopped, now);
        }
    };
    // Ten thousand jobs of 1 to 8 processes into queues 1 and 2.
    let submit_jobs = |core: &mut Core, cred: &Cred, now: Tick, commit: bool| {
        let mut seed = 12345u64;
        for idx in 0..10_000u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let nodes = 1 + ((seed >> 33) % 8) as u32;
            let request = JobRequest {
                stages: vec![vec![OsString::from("prog")]],
                joiner: Joiner::Sequence,
                procs: ProcRequest::Nodes(nodes),
                priority: Some(1 + (idx % 2) as u32),
                wait: false,
                memory: None,
                disk: None,
                time: None,
                env: Vec::new(),
                cwd: OsString::from("/"),
                inherited: Default::default(),
                batch: Default::default(),
            };
            let actions = core.handle(
                Input::Submit {
                    client: ClientToken(idx + 1),
                    cred: cred.clone(),
                    user: "u".into(),
                    request: Box::new(request),
                },
                now,
            );
            feed(core, actions, now);
            if commit {
                core.commit();
            }
        }
    };
    let held_before = held();
    let start = Instant::now();
    submit_jobs(&mut core, &cred, now, false);
    let plain_time = start.elapsed().as_secs_f64();
    assert_eq!(core.n_jobs(), 10_000);
    let core_bytes = (held() - held_before) as f64 / 10_000.0;
    rows.push(row(
        "scheduling core's own memory per admitted job (heap bytes, counted)",
        format!("{core_bytes:.0} B"),
        "1 kB target".into(),
        format!("{:.2}×", core_bytes / 1024.0),
        "part of the above",
    ));
    let mut samples = Vec::new();
    for _ in 0..scaled(200, 20) {
        now = now.after(slice);
        let start = Instant::now();
        let actions = core.handle(Input::Tick, now);
        feed(&mut core, actions, now);
        samples.push(start.elapsed().as_secs_f64());
    }
    let decision = median(&mut samples);
    rows.push(row(
        "one scheduling decision (slice end: rotate, choose, stop, continue), 10,000 jobs on 256 hosts",
        ms(decision),
        "1 ms target".into(),
        format!("{:.2}×", decision / 1e-3),
        "under 1 ms",
    ));
    drop(core);
    // Measured last, so that the decision above runs on the same heap
    // as before this measure existed.
    // The same submissions into a core that commits after each one (the
    // daemon's panic checkpoint), counted apart: what the checkpoint keeps
    // (the undo log, the copy of the core's small part).
    let (committed_bytes, committed_time) = {
        let mut committed = pure_core(256, slice);
        let before = held();
        let start = Instant::now();
        committed.commit();
        submit_jobs(&mut committed, &cred, now, true);
        let elapsed = start.elapsed().as_secs_f64();
        let bytes = (held() - before) as f64 / 10_000.0;
        drop(committed);
        (bytes, elapsed)
    };
    rows.push(row(
        "admission in the pure core, 10,000 jobs on 256 hosts, committing after each submission",
        format!("{:.1} µs a job", committed_time / 10_000.0 * 1e6),
        format!(
            "{:.1} µs a job (never committing)",
            plain_time / 10_000.0 * 1e6
        ),
        format!("{:.2}×", committed_time / plain_time),
        "no measurable cost",
    ));
    rows.push(row(
        "the same, committing the panic checkpoint after each submission",
        format!("{committed_bytes:.0} B"),
        format!("{core_bytes:.0} B (never committing)"),
        format!("{:+.0} B", committed_bytes - core_bytes),
        "no per-job cost",
    ));
}

pub(crate) fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let memory = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|line| {
            line.strip_prefix("MemTotal:")
                .map(|rest| rest.trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{} CPUs ({model}), {memory} memory, Linux {}",
        online_cpus().len(),
        kernel.trim()
    )
}
