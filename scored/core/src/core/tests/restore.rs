//! The restart snapshot: a restored core answers and decides as the
//! original, and snapshots that do not fit are refused.

use super::properties::{op, pick, Op};
use super::scenarios::submit_stages;
use super::*;

/// Builds the same scenario twice: two full-width gang jobs that alternate,
/// a held job, a job in a deactivated queue, one waiting for admission.
fn restart_scenario() -> Sim {
    let mut sim = Sim::new(2, 100);
    sim.cmd(&root(), "cluster 0 limit jobs=4");
    sim.cmd(&root(), "queue 2 deactivate");
    sim.submit(2, Some(1));
    sim.submit(2, Some(1));
    sim.submit(1, Some(1));
    sim.submit(1, Some(2));
    sim.submit_with(root(), ProcRequest::Nodes(1), Some(1), true);
    sim.advance(250);
    sim.confirm_stops();
    sim.cmd(&root(), "suspend 3");
    sim.cmd(&root(), "timeslice 150ms");
    sim.advance(320);
    sim.confirm_stops();
    sim.take_log();
    sim
}

#[test]
fn a_restored_core_answers_and_schedules_as_the_original() {
    let mut original = restart_scenario();
    let mut restarted = restart_scenario();
    let snapshot = restarted.core.snapshot();
    let text = serde_json::to_string(&snapshot).expect("serialize");
    let snapshot: CoreSnapshot = serde_json::from_str(&text).expect("deserialize");
    let config = CoreConfig {
        timeslice: Duration::from_millis(100),
        kill_grace: Duration::from_millis(1000),
        daemon_uid: 0,
        ..CoreConfig::default()
    };
    restarted.core = Core::restore(config, topology(2), snapshot).expect("restore");
    restarted.core.check_invariants();
    for line in [
        "jobs", "queues", "status", "clusters", "job 1", "job 2", "job 3", "job 4",
    ] {
        assert_eq!(
            restarted.cmd(&root(), line),
            original.cmd(&root(), line),
            "{line}"
        );
    }
    for sim in [&mut original, &mut restarted] {
        sim.advance(1000);
        sim.confirm_stops();
        sim.advance(400);
        sim.confirm_stops();
        sim.cmd(&root(), "resume 3");
        sim.cmd(&root(), "cluster 0 limit jobs=none");
        sim.advance(600);
        sim.confirm_stops();
    }
    let log = original.take_log();
    assert!(
        log.contains("stop 1") && log.contains("cont 3") && log.contains("spawn 5"),
        "{log}"
    );
    assert_eq!(restarted.take_log(), log);
    assert_eq!(
        restarted.cmd(&root(), "jobs"),
        original.cmd(&root(), "jobs")
    );
}

#[test]
fn a_snapshot_for_other_hosts_is_refused() {
    let sim = restart_scenario();
    let error = Core::restore(CoreConfig::default(), topology(3), sim.core.snapshot())
        .err()
        .expect("three hosts are not two");
    assert!(
        matches!(error, RestoreError::HostsChanged { .. }),
        "{error:?}"
    );
    let error = error.to_string();
    assert!(error.starts_with("the hosts changed"), "{error}");
}

/// Submits a job of `stages` run one after the other (`::`) on `nodes`
/// processors and returns its client.
fn submit_sequence(sim: &mut Sim, stages: &[&str], nodes: u32, queue: Option<u32>) -> u64 {
    let stages = stages
        .iter()
        .map(|prog| vec![OsString::from(prog)])
        .collect();
    submit_stages(sim, stages, Joiner::Sequence, nodes, queue)
}

/// A core with a job in every state a snapshot records: running with a
/// `-time` limit, stopped in its second `::` stage, stopped with a failed
/// rank and held by its owner, being stopped by an operator, being killed gracefully (it
/// ignores SIGTERM), never started and held by an operator in a
/// deactivated queue, and a submission waiting for admission.
fn every_state_scenario() -> Sim {
    let mut sim = Sim::new(6, 100);
    sim.cmd(&root(), "cluster 0 limit jobs=7");
    sim.cmd(&root(), "queue 2 deactivate");
    // 1: two ranks; rank 1 fails while rank 0 runs on.
    sim.submit(2, Some(1));
    // 2: `a :: b`, which will run b.
    submit_sequence(&mut sim, &["a", "b"], 1, Some(1));
    // 3: a -time limit.
    sim.submit_timed(
        root(),
        ProcRequest::Nodes(1),
        Some(1),
        false,
        Some(Duration::from_secs(60)),
    );
    // 4: never starts (queue 2 is deactivated); held by an operator.
    sim.submit(1, Some(2));
    sim.cmd(&root(), "suspend 4");
    // 5: switches with 1 and 2.
    sim.submit(3, Some(1));
    // 6: to be killed.
    sim.submit(1, Some(1));
    // 7: waits for admission (the cluster admits 6 jobs).
    sim.cmd(&root(), "cluster 0 limit jobs=6");
    sim.submit_with(root(), ProcRequest::Nodes(1), Some(1), true);
    sim.input(Input::RankExited {
        job: JobId(1),
        stage: 0,
        rank: 1,
        status: ExitStatus::Code(3),
    });
    sim.procs.get_mut(&JobId(1)).expect("job 1 runs").1 = 1;
    let (_, n) = sim.procs.remove(&JobId(2)).expect("job 2 runs");
    assert_eq!(n, 1);
    sim.input(Input::RankExited {
        job: JobId(2),
        stage: 0,
        rank: 0,
        status: ExitStatus::Code(0),
    });
    sim.input(Input::ProcessesGone(JobId(2)));
    sim.advance(130);
    sim.confirm_stops();
    // 1 is stopped now; its owner holds it.
    sim.input(Input::Hold(ClientToken(1)));
    sim.stubborn.push(JobId(6));
    sim.cmd(&root(), "kill 6");
    sim.advance(100);
    sim.confirm_stops();
    // 5 is being stopped by an operator's suspend.
    sim.hold_confirmations = true;
    sim.cmd(&root(), "suspend 5");
    sim.advance(10);
    sim.take_log();
    sim
}

/// A snapshot as the build before jobs were records of states wrote it
/// (`every_state_scenario`, serialized by that build) is read by this
/// one: restored, it writes the same record back, answers as the same
/// scenario run live, and schedules on as it does.
#[test]
fn a_snapshot_written_by_the_previous_build_is_restored() {
    let text = include_str!("../testdata/snapshot-before-job-states.json");
    let written: serde_json::Value = serde_json::from_str(text).expect("fixture is JSON");
    // The fixture holds every state a job record can be in.
    let jobs = written["jobs"].as_array().expect("jobs");
    let has = |pred: &dyn Fn(&serde_json::Value) -> bool| jobs.iter().any(pred);
    for phase in ["idle", "running", "stopping", "stopped"] {
        assert!(has(&|job| job["phase"] == phase), "{phase}");
    }
    assert!(has(
        &|job| job["graceful_kill"] == true && job["kill_deadline"].is_u64()
    ));
    assert!(has(
        &|job| job["time_deadline"].is_u64() && job["running_since"].is_u64()
    ));
    assert!(has(
        &|job| job["failed_rank"].is_array() && job["failure"].is_object()
    ));
    assert!(has(&|job| job["stage"] == 1));
    assert!(has(
        &|job| job["started"] == false && job["operator_hold"] == true
    ));
    assert!(has(&|job| job["owner_hold"] == true));

    let snapshot: CoreSnapshot = serde_json::from_str(text).expect("deserialize");
    let config = CoreConfig {
        timeslice: Duration::from_millis(100),
        kill_grace: Duration::from_millis(1000),
        daemon_uid: 0,
        ..CoreConfig::default()
    };
    let mut live = every_state_scenario();
    let mut restored = every_state_scenario();
    restored.core = Core::restore(config, topology(6), snapshot).expect("restore");
    restored.core.check_invariants();
    let rewritten = serde_json::to_value(restored.core.snapshot()).expect("serialize");
    assert_eq!(
        rewritten, written,
        "the restored core writes the same record"
    );
    for line in [
        "jobs", "queues", "status", "job 1", "job 2", "job 3", "job 4", "job 5", "job 6",
    ] {
        assert_eq!(
            restored.cmd(&root(), line),
            live.cmd(&root(), line),
            "{line}"
        );
    }
    for sim in [&mut live, &mut restored] {
        sim.hold_confirmations = false;
        sim.confirm_stops();
        sim.cmd(&root(), "resume 5");
        sim.advance(1200);
        sim.confirm_stops();
        sim.input(Input::Release(ClientToken(1)));
        sim.advance(500);
        sim.confirm_stops();
    }
    let log = live.take_log();
    assert!(
        log.contains("signal 6 9") && log.contains("cont 1") && log.contains("cont 5"),
        "{log}"
    );
    assert_eq!(restored.take_log(), log);
    assert_eq!(restored.cmd(&root(), "jobs"), live.cmd(&root(), "jobs"));
}

/// A job record whose flags and times make no state (none that any build
/// writes) is refused, naming the job and what does not fit.
#[test]
fn a_snapshot_with_a_job_in_no_state_is_refused() {
    let text = include_str!("../testdata/snapshot-before-job-states.json");
    let cases: [(u64, &str, serde_json::Value, &str); 7] = [
        (
            3,
            "running_since",
            serde_json::Value::Null,
            "job 3 runs but has no start of its stretch",
        ),
        (
            2,
            "running_since",
            serde_json::json!(5),
            "job 2 has a running stretch but does not run",
        ),
        (
            2,
            "time_deadline",
            serde_json::json!(5),
            "job 2 has a time limit deadline but does not run",
        ),
        (
            1,
            "first_run_at",
            serde_json::Value::Null,
            "job 1 started but has no first run time",
        ),
        (
            4,
            "phase",
            serde_json::json!("stopped"),
            "job 4 has processes but never started",
        ),
        (
            6,
            "graceful_kill",
            serde_json::json!(false),
            "job 6 has a graceful kill without a deadline, or a deadline without one",
        ),
        (
            6,
            "phase",
            serde_json::json!("paused"),
            "job 6 has an unknown phase 'paused'",
        ),
    ];
    for (job, field, value, message) in cases {
        let mut written: serde_json::Value = serde_json::from_str(text).expect("fixture is JSON");
        let record = written["jobs"]
            .as_array_mut()
            .expect("jobs")
            .iter_mut()
            .find(|record| record["id"] == job)
            .expect("the job is in the fixture");
        record[field] = value;
        let snapshot: CoreSnapshot = serde_json::from_value(written).expect("deserialize");
        let error = Core::restore(CoreConfig::default(), topology(6), snapshot)
            .err()
            .unwrap_or_else(|| panic!("job {job} with {field} changed is refused"));
        assert_eq!(error.to_string(), message);
    }
}

/// What a user or an operator can do to the core, beyond the events of the
/// invariants' property: submissions that wait for admission, cluster
/// limits, owners' holds and vanished clients, queue modes, a rank that
/// fails, a kill a job resists.
#[derive(Debug, Clone)]
enum StateOp {
    Base(Op),
    SubmitWaiting { nodes: u32, queue: u32, timed: bool },
    Limit { jobs: Option<u32> },
    OwnerHold { pick: usize },
    ClientGone { pick: usize },
    StubbornKill { pick: usize },
    FailRank { pick: usize },
    Mode { queue: u32, exclusive: bool },
}

fn state_op() -> impl Strategy<Value = StateOp> {
    prop_oneof![
        12 => op().prop_map(StateOp::Base),
        2 => (1u32..=4, 0u32..3, any::<bool>())
            .prop_map(|(nodes, queue, timed)| StateOp::SubmitWaiting { nodes, queue, timed }),
        1 => proptest::option::of(1u32..4).prop_map(|jobs| StateOp::Limit { jobs }),
        1 => any::<usize>().prop_map(|pick| StateOp::OwnerHold { pick }),
        1 => any::<usize>().prop_map(|pick| StateOp::ClientGone { pick }),
        1 => any::<usize>().prop_map(|pick| StateOp::StubbornKill { pick }),
        1 => any::<usize>().prop_map(|pick| StateOp::FailRank { pick }),
        1 => (0u32..3, any::<bool>()).prop_map(|(queue, exclusive)| StateOp::Mode { queue, exclusive }),
    ]
}

fn apply_state_op(sim: &mut Sim, op: StateOp) {
    match op {
        StateOp::Base(Op::Submit { nodes, queue }) => {
            sim.submit(nodes, Some(queue));
        }
        StateOp::Base(Op::Exit { pick: idx }) => {
            if let Some(job) = pick(sim, idx) {
                sim.exit_if_running(job);
            }
        }
        StateOp::Base(Op::Advance { ms }) => sim.advance(ms),
        StateOp::Base(Op::Hold { pick: idx }) => {
            if let Some(job) = pick(sim, idx) {
                sim.cmd(&root(), &format!("suspend {job}"));
            }
        }
        StateOp::Base(Op::Release { pick: idx }) => {
            if let Some(job) = pick(sim, idx) {
                sim.cmd(&root(), &format!("resume {job}"));
            }
        }
        StateOp::Base(Op::Toggle { queue }) => {
            let active = sim.core.queues()[queue as usize].activated;
            let verb = if active { "deactivate" } else { "activate" };
            sim.cmd(&root(), &format!("queue {queue} {verb}"));
        }
        StateOp::Base(Op::Kill { pick: idx }) => {
            if let Some(job) = pick(sim, idx) {
                sim.cmd(&root(), &format!("kill {job}"));
            }
        }
        StateOp::Base(Op::Confirm) => sim.confirm_stops(),
        StateOp::SubmitWaiting {
            nodes,
            queue,
            timed,
        } => {
            sim.submit_timed(
                root(),
                ProcRequest::Nodes(nodes),
                Some(queue),
                true,
                timed.then_some(Duration::from_secs(30)),
            );
        }
        StateOp::Limit { jobs } => {
            let jobs = jobs.map_or("none".to_string(), |n| n.to_string());
            sim.cmd(&root(), &format!("cluster 0 limit jobs={jobs}"));
        }
        StateOp::OwnerHold { pick: idx } => {
            let client = pick(sim, idx).and_then(|job| sim.core.job(job)?.client());
            if let Some(client) = client {
                sim.input(Input::Hold(client));
            }
        }
        StateOp::ClientGone { pick: idx } => {
            let client = pick(sim, idx).and_then(|job| sim.core.job(job)?.client());
            if let Some(client) = client {
                sim.input(Input::ClientGone(client));
            }
        }
        StateOp::StubbornKill { pick: idx } => {
            if let Some(job) = pick(sim, idx) {
                sim.stubborn.push(job);
                sim.cmd(&root(), &format!("kill {job}"));
            }
        }
        StateOp::FailRank { pick: idx } => {
            let Some(job) = pick(sim, idx) else { return };
            let Some((SimProcs::Running, n)) = sim.procs.get(&job).copied() else {
                return;
            };
            if n < 2 {
                return;
            }
            sim.input(Input::RankExited {
                job,
                stage: 0,
                rank: n - 1,
                status: ExitStatus::Code(3),
            });
            if let Some(entry) = sim.procs.get_mut(&job) {
                entry.1 = n - 1;
            }
        }
        StateOp::Mode { queue, exclusive } => {
            let mode = if exclusive { "exclusive" } else { "gang" };
            sim.cmd(&root(), &format!("queue {queue} set mode={mode}"));
        }
    }
}

/// Restores `sim`'s core from its snapshot (through its JSON text, as the
/// handover file carries it) and checks that the restored core writes the
/// same snapshot back.
fn round_trip(sim: &Sim) -> Result<Core, String> {
    let snapshot = sim.core.snapshot();
    let text = serde_json::to_string(&snapshot).expect("serialize");
    let read: CoreSnapshot = serde_json::from_str(&text).expect("deserialize");
    let config = CoreConfig {
        timeslice: Duration::from_millis(100),
        kill_grace: Duration::from_millis(1000),
        daemon_uid: 0,
        ..CoreConfig::default()
    };
    let restored = Core::restore(config, topology(4), read).map_err(|error| error.to_string())?;
    restored.check_invariants();
    let again = serde_json::to_string(&restored.snapshot()).expect("serialize");
    if again != text {
        return Err(format!(
            "the restored core writes another snapshot:\n{text}\n{again}"
        ));
    }
    Ok(restored)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Whatever users and operators did, the state after every event
    /// survives a restart: restored, it is the same state.
    #[test]
    fn every_reachable_state_survives_a_restart(
        ops in proptest::collection::vec(state_op(), 1..60),
        delayed in any::<bool>(),
    ) {
        let mut sim = Sim::new(4, 100);
        sim.hold_confirmations = delayed;
        for op in ops {
            apply_state_op(&mut sim, op);
            if let Err(error) = round_trip(&sim) {
                prop_assert!(false, "{}\n{}", error, sim.cmd(&root(), "jobs"));
            }
        }
    }
}

/// Two jobs of the exclusive queue 0 that each take every host: the second
/// is admitted and waits for hosts, and a restart keeps it so.
#[test]
fn an_exclusive_job_waiting_for_hosts_survives_a_restart() {
    let mut sim = Sim::new(2, 100);
    sim.submit(2, Some(0));
    sim.submit(2, Some(0));
    sim.advance(10);
    assert!(sim
        .core
        .job(JobId(2))
        .is_some_and(|job| job.hosts.is_empty()));
    let mut restored = Sim::new(2, 100);
    restored.now = sim.now;
    restored.core =
        Core::restore(CoreConfig::default(), topology(2), sim.core.snapshot()).expect("restore");
    assert_eq!(restored.cmd(&root(), "jobs"), sim.cmd(&root(), "jobs"));
}

/// A queue's level and backfilling are settings an operator made: a
/// restart keeps them, and the jobs waiting under them.
#[test]
fn a_queues_level_and_backfilling_survive_a_restart() {
    let mut sim = Sim::new(2, 100);
    sim.cmd(&root(), "queue 1 set mode=gang mpl=1");
    sim.cmd(&root(), "queue 0 set backfill=on");
    sim.submit(2, Some(1));
    sim.submit(2, Some(1));
    sim.advance(10);
    let before = sim.cmd(&root(), "queues");
    assert!(before.contains("on"), "{before}");
    let mut restored = Sim::new(2, 100);
    restored.now = sim.now;
    restored.core =
        Core::restore(CoreConfig::default(), topology(2), sim.core.snapshot()).expect("restore");
    restored.core.check_invariants();
    assert_eq!(restored.cmd(&root(), "queues"), before);
    assert_eq!(restored.cmd(&root(), "jobs"), sim.cmd(&root(), "jobs"));
}

/// A job placed in a gang queue's matrix that has not run yet (its hosts
/// were busy in the slice it joined) keeps its place in the rotation over
/// a restart, and runs in the next slice as it would have.
#[test]
fn a_job_placed_in_the_matrix_but_not_yet_run_survives_a_restart() {
    let scenario = || {
        let mut sim = Sim::new(2, 100);
        sim.cmd(&root(), "queue 1 set mode=gang");
        for minutes in [5, 5, 1] {
            sim.submit_timed(
                root(),
                ProcRequest::Nodes(2),
                Some(1),
                false,
                Some(Duration::from_secs(60 * minutes)),
            );
        }
        sim.advance(10);
        sim
    };
    let mut original = scenario();
    let placed = original.core.job(JobId(3)).expect("job 3");
    assert!(
        !placed.hosts.is_empty() && !placed.started(),
        "job 3 is in the matrix and has not run"
    );
    let mut restarted = scenario();
    restarted.core = Core::restore(
        CoreConfig {
            timeslice: Duration::from_millis(100),
            ..CoreConfig::default()
        },
        topology(2),
        restarted.core.snapshot(),
    )
    .expect("restore");
    restarted.core.check_invariants();
    original.take_log();
    restarted.take_log();
    for sim in [&mut original, &mut restarted] {
        sim.advance(150);
        sim.confirm_stops();
        sim.advance(100);
    }
    let log = original.take_log();
    assert!(log.contains("spawn 3"), "{log}");
    assert_eq!(restarted.take_log(), log);
}
