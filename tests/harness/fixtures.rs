//! Set-ups several tests share: a hosts file of two hosts, a gang pair
//! beside a held job, and a journal filled to its rotation size.

use std::path::Path;
use std::time::Duration;

use crate::{stopped, testprog, wait_until, Daemon, Job};

/// A hosts database of two hosts, on two CPUs when the machine has them,
/// so that tests do not depend on how many CPUs CI offers.
pub fn two_hosts() -> String {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let cpus = scored_proto::units::CpuSet::parse(online.trim())
        .map(|set| set.cpus().to_vec())
        .unwrap_or_default();
    match cpus.as_slice() {
        [first, second, ..] => format!("host0 cpus={first}\nhost1 cpus={second}\n"),
        [only] => format!("host0 cpus={only}\nhost1 cpus={only}\n"),
        [] => "host0\nhost1\n".to_string(),
    }
}

/// Two 2-process spinning gang jobs (jobs 1 and 2) and a 1-process one
/// held by the operator (job 3), once some of their processes have been
/// seen stopped by the gang switch or the hold: the scrun of each and
/// every rank's pid.
pub fn gang_pair_and_held_job(daemon: &Daemon) -> (Vec<Job>, Vec<i32>) {
    let mut jobs = Vec::new();
    let mut pids = Vec::new();
    for _ in 0..2 {
        let mut job = daemon.spawn(&["-nodes=2", &testprog(), "spin", "0"]);
        pids.extend(job.wait_pids(2));
        jobs.push(job);
    }
    let mut held = daemon.spawn(&["-nodes=1", &testprog(), "spin", "0"]);
    pids.extend(held.wait_pids(1));
    daemon.ok("suspend 3");
    assert!(wait_until(Duration::from_secs(10), || pids
        .iter()
        .any(|pid| stopped(*pid))));
    jobs.push(held);
    (jobs, pids)
}

/// Fills the job journal of a stopped daemon's state directory with ended
/// jobs, as a long-lived daemon leaves it: `journal.1` and `journal` of
/// about `bytes_per_file` each, every job admitted, started and ended by
/// uid 0 with records of the size scored writes. Returns the number of jobs.
pub fn write_full_journal(state_dir: &Path, bytes_per_file: u64) -> u64 {
    use std::io::Write as _;
    // The keys of scored's `job ID` record, as the journal stores them.
    fn record(id: u64, state: &str, end: Option<f64>) -> String {
        let mut text = format!(
            r#"{{"id":{id},"user":"root","uid":0,"state":"{state}","queue":1,"queues":[1],"cluster":"default","hosts":["host0","host1"],"procs":2,"command":"sh -c exit 0","held":"no","cpu":0.003,"wall":0.019,"run":0.019,"stopped":0.0,"wait":0.0,"switches":0,"memory":{{"host0":0,"host1":0}},"peak memory":{{"host0":2199552,"host1":2207744}},"disk":0,"peak disk":125640,"cputime limit":null,"memory limit":null,"disk limit":null,"residency":0.003"#
        );
        if let Some(end) = end {
            text.push_str(&format!(
                r#","exit":0,"reason":"all processes exited with status 0","ended":{end}"#
            ));
        }
        text.push('}');
        text
    }
    let mut id = 0u64;
    for name in ["journal.1", "journal"] {
        let file = std::fs::File::create(state_dir.join(name)).expect("create the journal");
        let mut out = std::io::BufWriter::new(file);
        let mut written = 0u64;
        while written < bytes_per_file {
            id += 1;
            let t = 1_795_000_000.0 + id as f64;
            let lines = format!(
                "{{\"t\":{t},\"event\":\"admitted\",\"job\":{id},\"submitted\":{t},\"record\":{}}}\n\
                 {{\"t\":{t},\"event\":\"started\",\"job\":{id}}}\n\
                 {{\"t\":{end},\"event\":\"ended\",\"job\":{id},\"record\":{}}}\n",
                record(id, "queued", None),
                record(id, "done", Some(t + 0.02)),
                end = t + 0.02,
            );
            out.write_all(lines.as_bytes()).expect("write the journal");
            written += lines.len() as u64;
        }
        out.flush().expect("write the journal");
    }
    id
}
