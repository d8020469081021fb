//! The fair order of waiting jobs (`queue Q set fairshare=HALFLIFE|none`):
//! behind the first waiting job, which keeps its place, the least used
//! user's jobs start first.

use super::replay::{observe, replay, restored};
use super::*;

/// Submits a one-host job to queue `queue` as user `uid`; returns its id.
fn submit_to(sim: &mut Sim, uid: u32, queue: u32) -> u64 {
    let client = sim.submit_with(user(uid), ProcRequest::Nodes(1), Some(queue), false);
    sim.core
        .jobs()
        .find(|record| record.client() == Some(ClientToken(client)))
        .map_or(0, |record| record.id.0)
}

/// On one host of exclusive queue 0: user 1001 runs a job for 100 s, then
/// has one running and two waiting, and user 1002 submits one. Returns the
/// order in which the three waiting jobs start.
fn starts(fairshare: &str) -> Vec<u64> {
    let mut sim = Sim::new(1, 100);
    sim.cmd(&root(), &format!("queue 0 set fairshare={fairshare}"));
    let first = submit_to(&mut sim, 1001, 0);
    sim.advance(100_000);
    sim.exit(first, 0);
    let running = submit_to(&mut sim, 1001, 0);
    let waiting = [
        submit_to(&mut sim, 1001, 0),
        submit_to(&mut sim, 1001, 0),
        submit_to(&mut sim, 1002, 0),
    ];
    assert_eq!(sim.running(), vec![running]);
    let mut order = Vec::new();
    let mut current = running;
    for _ in waiting {
        sim.advance(1000);
        sim.exit(current, 0);
        current = *sim.running().first().expect("the next job starts");
        order.push(current);
    }
    order
}

#[test]
fn a_less_used_users_job_starts_before_a_more_used_ones_but_not_before_the_first() {
    // Jobs 3 and 4 are user 1001's, 5 user 1002's; 3 was first.
    assert_eq!(starts("1h"), vec![3, 5, 4]);
    assert_eq!(starts("none"), vec![3, 4, 5]);
}

#[test]
fn the_setting_is_shown_kept_and_cleared() {
    let mut sim = Sim::new(1, 100);
    let reply = sim.cmd(&root(), "queue 0 set fairshare=2h");
    assert!(reply.contains("fairshare=2h"), "{reply}");
    let first = submit_to(&mut sim, 1001, 0);
    sim.advance(10_000);
    sim.exit(first, 0);
    let used = sim.core.queues()[0]
        .usage
        .of(1001, sim.now, Duration::from_secs(7200));
    assert!((used - 10.0).abs() < 0.01, "used {used}");
    let restored =
        Core::restore(CoreConfig::default(), topology(1), sim.core.snapshot()).expect("restore");
    assert_eq!(
        restored.queues()[0].fairshare,
        Some(Duration::from_secs(7200))
    );
    assert_eq!(restored.queues()[0].usage, sim.core.queues()[0].usage);
    let reply = sim.cmd(&root(), "queue 0 set fairshare=none");
    assert!(reply.contains("fairshare=none"), "{reply}");
    assert_eq!(sim.core.queues()[0].usage.entries(), &[]);
}

#[derive(Debug, Clone)]
enum Step {
    Submit { uid: u32 },
    Exit { pick: usize },
    Advance { ms: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1001u32..1005).prop_map(|uid| Step::Submit { uid }),
        2 => any::<usize>().prop_map(|pick| Step::Exit { pick }),
        2 => (1u64..20_000).prop_map(|ms| Step::Advance { ms }),
    ]
}

fn play(sim: &mut Sim, steps: &[Step]) {
    for step in steps {
        match step {
            Step::Submit { uid } => {
                submit_to(sim, *uid, 0);
            }
            Step::Exit { pick } => {
                let running = sim.running();
                if !running.is_empty() {
                    sim.exit(running[pick % running.len()], 0);
                }
            }
            Step::Advance { ms } => sim.advance(*ms),
        }
    }
}

/// The waiting jobs of queue 0 behind its first, with their users' usage
/// now, from the ended jobs' use the queue counted.
fn waiting_usage(sim: &Sim, half_life: Duration) -> Vec<(u64, f64)> {
    let queue = &sim.core.queues()[0];
    queue
        .order()
        .skip(queue.n_started() + 1)
        .map(|id| {
            let uid = sim.core.job(id).map_or(0, |job| job.owner.uid);
            (id.0, queue.usage.of(uid, sim.now, half_life))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// In an exclusive queue ordered by usage, on two hosts: a job that
    /// starts from waiting was the first waiting job (no job overtakes
    /// it), and after every step the jobs behind the first are in order of
    /// their users' usage.
    #[test]
    fn the_first_waiting_job_starts_next_and_the_rest_wait_by_usage(
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        let half_life = Duration::from_secs(600);
        let mut sim = Sim::new(2, 100);
        sim.cmd(&root(), "queue 0 set fairshare=10m");
        for step in &steps {
            let queue = &sim.core.queues()[0];
            let first = queue.order().nth(queue.n_started());
            let before: Vec<u64> = sim.running();
            play(&mut sim, std::slice::from_ref(step));
            let started: Vec<u64> = sim
                .running()
                .into_iter()
                .filter(|job| !before.contains(job))
                .collect();
            if let Some(&started) = started.first() {
                if !matches!(step, Step::Submit { .. }) || started != sim.core.jobs().map(|job| job.id.0).max().unwrap_or(0) {
                    prop_assert_eq!(Some(JobId(started)), first, "job {} overtook the first waiting job", started);
                }
            }
            let usage = waiting_usage(&sim, half_life);
            prop_assert!(
                usage.windows(2).all(|pair| pair[0].1 <= pair[1].1),
                "waiting jobs out of usage order: {:?}", usage
            );
        }
    }

    /// A snapshot restored and fed the logged inputs that followed it is
    /// the live core again with a queue ordered by usage.
    #[test]
    fn a_restored_snapshot_keeps_the_usage_and_the_order(
        before in proptest::collection::vec(step(), 1..40),
        after in proptest::collection::vec(step(), 0..40),
        half_life in prop_oneof![Just("10m"), Just("1s"), Just("none")],
    ) {
        let mut sim = Sim::new(4, 100);
        sim.cmd(&root(), "queue 0 set fairshare=10m");
        play(&mut sim, &before);
        let mut core = restored(&sim);
        sim.tape = Some(Vec::new());
        sim.cmd(&root(), &format!("queue 0 set fairshare={half_life}"));
        play(&mut sim, &after);
        let tape = sim.tape.take().unwrap_or_default();
        replay(&mut core, tape);
        sim.take_log();
        let mut twin = sim.clone();
        twin.core = core;
        prop_assert_eq!(&twin.core.queues()[0].usage, &sim.core.queues()[0].usage);
        prop_assert_eq!(observe(&mut twin), observe(&mut sim));
        play(&mut sim, &before);
        play(&mut twin, &before);
        prop_assert_eq!(twin.take_log(), sim.take_log());
        prop_assert_eq!(observe(&mut twin), observe(&mut sim));
    }
}
