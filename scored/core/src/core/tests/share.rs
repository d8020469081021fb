//! Fair share by user in time-sharing (`queue Q set share=user|job`): on a
//! contested host each user's jobs together get an equal share of the
//! turns, within a user the jobs rotate, and with one user nothing changes.

use std::collections::BTreeMap;

use super::checkpoint::apply_op;
use super::properties::op;
use super::replay::{observe, replay, restored};
use super::*;

/// Submits a job of `nodes` hosts to queue 1 as user `uid`.
fn submit_as(sim: &mut Sim, uid: u32, nodes: u32) {
    sim.submit_with(user(uid), ProcRequest::Nodes(nodes), Some(1), false);
}

/// Runs `slices` slices and counts the slices each job ran in, looked at
/// just after each boundary's decision.
fn turns(sim: &mut Sim, slices: usize) -> BTreeMap<u64, usize> {
    let mut turns = BTreeMap::new();
    for _ in 0..slices {
        sim.advance(100);
        for job in sim.running() {
            *turns.entry(job).or_default() += 1;
        }
    }
    turns
}

/// The turns of each user, from the turns of each job (`owner` by job).
fn by_user(turns: &BTreeMap<u64, usize>, owner: &BTreeMap<u64, u32>) -> BTreeMap<u32, usize> {
    let mut users = BTreeMap::new();
    for (job, n) in turns {
        *users.entry(owner[job]).or_default() += n;
    }
    users
}

/// Three jobs of one user and one of another on one host.
fn three_against_one(share: &str) -> (usize, usize) {
    let mut sim = Sim::new(1, 100);
    sim.cmd(&root(), &format!("queue 1 set share={share}"));
    for _ in 0..3 {
        submit_as(&mut sim, 1001, 1);
    }
    submit_as(&mut sim, 1002, 1);
    let turns = turns(&mut sim, 40);
    let lone = turns.get(&4).copied().unwrap_or(0);
    (lone, turns.values().sum())
}

#[test]
fn a_user_with_one_job_gets_half_a_host_against_a_user_with_three() {
    let (lone, all) = three_against_one("user");
    assert_eq!(all, 40, "one job runs in every slice");
    assert!(
        (19..=21).contains(&lone),
        "the lone job ran {lone} of 40 slices"
    );
    let (lone, all) = three_against_one("job");
    assert_eq!(all, 40);
    assert!(
        (9..=11).contains(&lone),
        "with share=job, {lone} of 40 slices"
    );
}

#[test]
fn within_a_user_the_jobs_take_turns() {
    let mut sim = Sim::new(1, 100);
    for _ in 0..3 {
        submit_as(&mut sim, 1001, 1);
    }
    submit_as(&mut sim, 1002, 1);
    let turns = turns(&mut sim, 60);
    for job in 1..=3 {
        let n = turns.get(&job).copied().unwrap_or(0);
        assert!(
            (9..=11).contains(&n),
            "job {job} ran {n} of 60 slices: {turns:?}"
        );
    }
}

#[test]
fn the_setting_is_shown_and_a_bad_value_changes_nothing() {
    let mut sim = Sim::new(1, 100);
    let queues = sim.cmd(&root(), "queues");
    assert!(queues.contains("SHARE"), "{queues}");
    assert!(queues.contains("user"), "{queues}");
    let reply = sim.cmd(&root(), "queue 2 set share=job");
    assert!(reply.contains("share=job"), "{reply}");
    assert!(parse_line("queue 2 set share=jobs").is_err());
    assert_eq!(sim.cmd(&root(), "queues"), {
        let mut expected = Sim::new(1, 100);
        expected.cmd(&root(), "queue 2 set share=job");
        expected.cmd(&root(), "queues")
    });
}

/// Jobs of one user, or of users who contest no host, rotate under
/// `share=user` exactly as under `share=job`.
#[test]
fn users_who_contest_no_host_rotate_as_jobs_do() {
    let run = |share: &str| {
        let mut sim = Sim::new(2, 100);
        sim.cmd(&root(), &format!("queue 1 set share={share}"));
        // Hosts are chosen at admission, least loaded first: user 1001's
        // jobs land on host 0, user 1002's on host 1.
        submit_as(&mut sim, 1001, 1);
        submit_as(&mut sim, 1002, 1);
        submit_as(&mut sim, 1001, 1);
        submit_as(&mut sim, 1002, 1);
        submit_as(&mut sim, 1001, 1);
        turns(&mut sim, 30);
        (sim.take_log(), sim.cmd(&root(), "jobs"))
    };
    assert_eq!(run("user"), run("job"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// On one host contested by several users, however many jobs each
    /// has and in whatever order they came, the users' turns differ by at
    /// most one slice (two with a user who arrived later) , and within a
    /// user the jobs' turns by at most one turn of that user's.
    #[test]
    fn users_of_one_host_get_equal_turns(
        jobs in proptest::collection::vec(1001u32..1005, 2..12),
        slices in 20usize..120,
    ) {
        let mut sim = Sim::new(1, 100);
        let mut owner = BTreeMap::new();
        for (idx, uid) in jobs.iter().enumerate() {
            submit_as(&mut sim, *uid, 1);
            owner.insert(idx as u64 + 1, *uid);
        }
        let turns = turns(&mut sim, slices);
        let users = by_user(&turns, &owner);
        let n_users = owner.values().collect::<std::collections::BTreeSet<_>>().len();
        prop_assert_eq!(turns.values().sum::<usize>(), slices);
        let most = users.values().max().copied().unwrap_or(0);
        let least = if users.len() < n_users { 0 } else { users.values().min().copied().unwrap_or(0) };
        prop_assert!(most - least <= 1, "turns by user {:?} over {} slices", users, slices);
    }

    /// On several hosts with jobs of one or two hosts from several users,
    /// every job gets a turn in every stretch of slices a few times the
    /// number of jobs long, and two jobs that share a host never run at
    /// once (checked after every input).
    #[test]
    fn every_job_gets_its_turn(
        jobs in proptest::collection::vec((1001u32..1004, 1u32..=2), 2..14),
    ) {
        let mut sim = Sim::new(3, 100);
        for (uid, nodes) in &jobs {
            submit_as(&mut sim, *uid, *nodes);
        }
        let n = jobs.len();
        let window = 3 * n + 3;
        let mut last = vec![0usize; n];
        for slice in 1..=6 * window {
            sim.advance(100);
            for job in sim.running() {
                last[job as usize - 1] = slice;
            }
            for (idx, ran) in last.iter().enumerate() {
                prop_assert!(slice - ran <= window, "job {} waited from slice {} to {}", idx + 1, ran, slice);
            }
        }
    }

    /// With one user, `share=user` decides exactly as `share=job`.
    #[test]
    fn one_user_rotates_as_with_share_by_job(ops in proptest::collection::vec(op(), 1..80)) {
        let mut by_user = Sim::new(4, 100);
        let mut by_job = Sim::new(4, 100);
        for queue in 0..3 {
            by_job.cmd(&root(), &format!("queue {queue} set share=job"));
        }
        for op in &ops {
            apply_op(&mut by_user, op);
            apply_op(&mut by_job, op);
        }
        prop_assert_eq!(by_user.take_log(), by_job.take_log());
        prop_assert_eq!(by_user.cmd(&root(), "jobs"), by_job.cmd(&root(), "jobs"));
    }

    /// A snapshot restored and fed the logged inputs that followed it is
    /// the live core again with several users sharing hosts, whatever the
    /// queues' share settings were made in between.
    #[test]
    fn a_restored_snapshot_keeps_the_users_rotation(
        before in proptest::collection::vec((1001u32..1004, 1u32..=3, 0u64..400), 1..20),
        after in proptest::collection::vec((1001u32..1004, 1u32..=3, 0u64..400), 0..20),
        toggles in proptest::collection::vec(any::<bool>(), 0..4),
    ) {
        let mut sim = Sim::new(4, 100);
        let play = |sim: &mut Sim, steps: &[(u32, u32, u64)]| {
            for (uid, nodes, ms) in steps {
                submit_as(sim, *uid, *nodes);
                sim.advance(*ms);
                if let Some(job) = sim.running().first().copied() {
                    if ms % 3 == 0 {
                        sim.exit(job, 0);
                    }
                }
            }
        };
        play(&mut sim, &before);
        let mut core = restored(&sim);
        sim.tape = Some(Vec::new());
        for (idx, by_job) in toggles.iter().enumerate() {
            let share = if *by_job { "job" } else { "user" };
            sim.cmd(&root(), &format!("queue 1 set share={share}"));
            play(&mut sim, &after[after.len() * idx / toggles.len().max(1)..]);
        }
        play(&mut sim, &after);
        let tape = sim.tape.take().unwrap_or_default();
        replay(&mut core, tape);
        sim.take_log();
        let mut twin = sim.clone();
        twin.core = core;
        prop_assert_eq!(observe(&mut twin), observe(&mut sim));
        play(&mut sim, &before);
        play(&mut twin, &before);
        prop_assert_eq!(twin.take_log(), sim.take_log());
        prop_assert_eq!(observe(&mut twin), observe(&mut sim));
    }
}

/// A queue's share setting is an operator's: a restart keeps it.
#[test]
fn the_share_setting_survives_a_restart() {
    let mut sim = Sim::new(2, 100);
    sim.cmd(&root(), "queue 1 set share=job");
    submit_as(&mut sim, 1001, 1);
    let before = sim.cmd(&root(), "queues");
    let mut restored = Sim::new(2, 100);
    restored.now = sim.now;
    restored.core =
        Core::restore(CoreConfig::default(), topology(2), sim.core.snapshot()).expect("restore");
    assert_eq!(restored.cmd(&root(), "queues"), before);
    assert_eq!(restored.core.queues()[1].share, QueueShare::Job);
}

#[derive(Debug, Clone)]
enum Event {
    Submit { uid: u32, nodes: u32, queue: u32 },
    Exit { pick: usize },
    Advance { ms: u64 },
    Hold { pick: usize },
    Release { pick: usize },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (1001u32..1004, 1u32..=3, 0u32..3).prop_map(|(uid, nodes, queue)| Event::Submit { uid, nodes, queue }),
        2 => any::<usize>().prop_map(|pick| Event::Exit { pick }),
        4 => (1u64..400).prop_map(|ms| Event::Advance { ms }),
        1 => any::<usize>().prop_map(|pick| Event::Hold { pick }),
        1 => any::<usize>().prop_map(|pick| Event::Release { pick }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Several users' jobs in a gang queue with a level, a gang queue
    /// without one and an exclusive queue, all sharing by user and the
    /// waiting ones ordered by usage: the invariants hold after every
    /// input (checked by the simulator), and once holds are released every
    /// job runs to its end.
    #[test]
    fn users_jobs_in_every_kind_of_queue_all_end(events in proptest::collection::vec(event(), 1..80)) {
        let mut sim = Sim::new(4, 100);
        sim.cmd(&root(), "queue 1 set mode=gang fairshare=10m");
        sim.cmd(&root(), "queue 0 set fairshare=1m backfill=on");
        for event in events {
            let pick = |sim: &Sim, idx: usize| {
                let jobs: Vec<JobId> = sim.core.jobs().map(|job| job.id).collect();
                (!jobs.is_empty()).then(|| jobs[idx % jobs.len()])
            };
            match event {
                Event::Submit { uid, nodes, queue } => {
                    sim.submit_with(user(uid), ProcRequest::Nodes(nodes), Some(queue), false);
                }
                Event::Exit { pick: idx } => {
                    if let Some(job) = pick(&sim, idx) {
                        sim.exit_if_running(job);
                    }
                }
                Event::Advance { ms } => sim.advance(ms),
                Event::Hold { pick: idx } => if let Some(job) = pick(&sim, idx) { sim.cmd(&root(), &format!("suspend {job}")); },
                Event::Release { pick: idx } => if let Some(job) = pick(&sim, idx) { sim.cmd(&root(), &format!("resume {job}")); },
            }
        }
        let held: Vec<JobId> = sim.core.jobs().filter(|job| job.held()).map(|job| job.id).collect();
        for job in held { sim.cmd(&root(), &format!("resume {job}")); }
        for _ in 0..10_000 {
            if sim.core.n_jobs() == 0 { break; }
            if let Some(job) = sim.running().first().copied() {
                sim.exit(job, 0);
            } else {
                sim.advance(100);
            }
        }
        prop_assert_eq!(sim.core.n_jobs(), 0, "every job ends");
    }
}
