//! Placement across clusters: a job that waits for hosts is placed on any
//! cluster that can take it now under its queue's level, whatever cluster
//! admission booked it on.

use super::properties::{op, pick, Op};
use super::*;

/// Clusters of `(hosts, speed)`, one core a host, in order.
fn clusters(shape: &[(u32, u32)]) -> Topology {
    let mut topo = Topology::default();
    for (idx, &(n_hosts, speed)) in shape.iter().enumerate() {
        let id = ClusterId(idx as u32);
        let mut cluster = Cluster {
            id,
            name: format!("c{idx}"),
            cpugen: format!("c{idx}"),
            speed: f64::from(speed),
            cores: 1,
            hosts: Vec::new(),
        };
        for _ in 0..n_hosts {
            let host = HostId(topo.hosts.len() as u32);
            topo.hosts.push(Host {
                id: host,
                name: format!("h{}", host.0),
                cluster: id,
                cpus: CpuSet::from_cpus([host.0 % 2]),
                cores: 1,
                speed: f64::from(speed),
                cpugen: format!("c{idx}"),
                memory: 1 << 30,
                watchfs: Vec::new(),
                groups: Vec::new(),
            });
            cluster.hosts.push(host);
        }
        topo.clusters.push(cluster);
    }
    topo
}

fn sim_on(topology: Topology) -> Sim {
    let n_clusters = topology.clusters.len();
    Sim::on(topology, vec![None; n_clusters], 100)
}

/// Jobs of each host (by index), and the queue's first runnable job that
/// has no hosts, if any.
fn residents_and_first_waiting(core: &Core, queue: u32) -> (Vec<u32>, Option<JobId>) {
    let mut residents = vec![0u32; core.topology().hosts.len()];
    for job in core.jobs() {
        for host in &job.hosts {
            residents[host.idx()] += 1;
        }
    }
    let first = core.queues()[queue as usize]
        .order()
        .filter_map(|id| core.jobs().find(|job| job.id == id))
        .find(|job| job.hosts.is_empty() && !job.held() && !job.is_ending())
        .map(|job| job.id);
    (residents, first)
}

/// The clusters with at least `n` hosts holding fewer than `level` jobs.
fn clusters_with_room(core: &Core, residents: &[u32], n: usize, level: u32) -> Vec<String> {
    core.topology()
        .clusters
        .iter()
        .filter(|cluster| {
            cluster
                .hosts
                .iter()
                .filter(|host| residents[host.idx()] < level)
                .count()
                >= n
        })
        .map(|cluster| cluster.name.clone())
        .collect()
}

#[test]
fn one_rank_jobs_fill_every_cluster_up_to_the_level() {
    // A fast cluster and a slow one of one host each, level 2: four
    // one-rank jobs run (two on each host), the fifth waits.
    let mut sim = sim_on(clusters(&[(1, 2), (1, 1)]));
    sim.cmd(&root(), "queue 1 set mpl=2");
    for _ in 0..5 {
        sim.submit_with(root(), ProcRequest::Nodes(1), Some(1), true);
    }
    let (residents, first) = residents_and_first_waiting(&sim.core, 1);
    assert_eq!(residents, vec![2, 2]);
    assert_eq!(first, Some(JobId(5)));
    // One ends on the slow cluster: the waiting job takes its place,
    // wherever admission booked it.
    let on_slow = sim
        .core
        .jobs()
        .find(|job| job.hosts == [HostId(1)])
        .map(|job| job.id)
        .expect("a job on the slow host");
    sim.advance(300);
    sim.exit_if_running(on_slow);
    if sim.core.jobs().any(|job| job.id == on_slow) {
        sim.advance(100);
        sim.exit_if_running(on_slow);
    }
    let (residents, first) = residents_and_first_waiting(&sim.core, 1);
    assert_eq!(residents, vec![2, 2]);
    assert_eq!(first, None);
    let moved = sim
        .core
        .jobs()
        .find(|job| job.id == JobId(5))
        .expect("job 5 runs");
    assert_eq!(moved.hosts, [HostId(1)]);
    assert_eq!(moved.cluster, ClusterId(1), "its record follows its hosts");
}

#[test]
fn an_exclusive_job_takes_a_free_host_of_another_cluster() {
    let mut sim = sim_on(clusters(&[(1, 2), (1, 1)]));
    for _ in 0..3 {
        sim.submit_with(root(), ProcRequest::Nodes(1), Some(0), true);
    }
    let (residents, first) = residents_and_first_waiting(&sim.core, 0);
    assert_eq!(residents, vec![1, 1]);
    assert_eq!(first, Some(JobId(3)));
}

#[test]
fn a_job_goes_only_where_its_limits_hold_without_counting_others() {
    // Cluster c1 counts its jobs: a job booked on the full c0 does not
    // move there, and waits for its own cluster.
    let mut sim = sim_on(clusters(&[(1, 2), (1, 1)]));
    sim.cmd(&root(), "cluster 1 limit jobs=5");
    sim.cmd(&root(), "queue 1 set mpl=1");
    for _ in 0..3 {
        sim.submit_with(root(), ProcRequest::Nodes(1), Some(1), true);
    }
    let booked: Vec<(u64, u32)> = sim
        .core
        .jobs()
        .map(|job| (job.id.0, job.cluster.0))
        .collect();
    let (residents, first) = residents_and_first_waiting(&sim.core, 1);
    assert_eq!(residents, vec![1, 1], "booked {booked:?}");
    let waiting = first.expect("a job waits");
    let record = sim
        .core
        .jobs()
        .find(|job| job.id == waiting)
        .expect("listed");
    assert_eq!(record.cluster, ClusterId(0), "booked {booked:?}");
    // Its host idle, c1 still does not take it.
    let on_c1 = sim
        .core
        .jobs()
        .find(|job| job.hosts == [HostId(1)])
        .map(|job| job.id)
        .expect("a job on c1");
    sim.advance(100);
    sim.exit_if_running(on_c1);
    let (residents, first) = residents_and_first_waiting(&sim.core, 1);
    assert_eq!((residents, first), (vec![1, 0], Some(waiting)));
    // Without the limit it moves there, its booking with it.
    sim.cmd(&root(), "cluster 1 limit jobs=none");
    sim.advance(100);
    let (residents, first) = residents_and_first_waiting(&sim.core, 1);
    assert_eq!((residents, first), (vec![1, 1], None));
    let record = sim.core.jobs().find(|job| job.id == waiting).expect("runs");
    assert_eq!(record.cluster, ClusterId(1));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// After every event, the first runnable job of a gang queue with a
    /// level (jobs without estimates) or of an exclusive queue that has no
    /// hosts waits only while no cluster has enough hosts under the level
    /// for it; and every job ends.
    #[test]
    fn no_job_waits_while_a_cluster_has_room_for_it(
        shape in proptest::collection::vec((1u32..=3, 1u32..=2), 2..=3),
        level in 1u32..=3,
        exclusive in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let mut sim = sim_on(clusters(&shape));
        let (queue, level) = if exclusive { (0, 1) } else { (1, level) };
        if !exclusive {
            sim.cmd(&root(), &format!("queue 1 set mpl={level}"));
        }
        for op in ops {
            match op {
                Op::Submit { nodes, .. } => {
                    sim.submit_with(root(), ProcRequest::Nodes(nodes.min(2)), Some(queue), true);
                }
                Op::Exit { pick: idx } => {
                    if let Some(job) = pick(&sim, idx) {
                        sim.exit_if_running(job);
                    }
                }
                Op::Advance { ms } => sim.advance(ms),
                Op::Hold { pick: idx } => {
                    if let Some(job) = pick(&sim, idx) {
                        sim.cmd(&root(), &format!("suspend {job}"));
                    }
                }
                Op::Release { pick: idx } => {
                    if let Some(job) = pick(&sim, idx) {
                        sim.cmd(&root(), &format!("resume {job}"));
                    }
                }
                Op::Toggle { .. } | Op::Kill { .. } => {}
                Op::Confirm => sim.confirm_stops(),
            }
            let (residents, first) = residents_and_first_waiting(&sim.core, queue);
            if let Some(job) = first {
                let record = sim.core.jobs().find(|record| record.id == job).expect("listed");
                let room = clusters_with_room(&sim.core, &residents, record.layout.len(), level);
                prop_assert!(room.is_empty(), "job {} waits while {:?} have room (residents {:?})", job, room, residents);
            }
        }
        super::properties::finish_all(&mut sim);
        prop_assert_eq!(sim.core.n_jobs(), 0, "every job ends");
    }
}
