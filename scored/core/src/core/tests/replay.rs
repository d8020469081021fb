//! The daemon's crash recovery rests on two properties of the core: a
//! core restored from its snapshot behaves exactly as the core it was
//! taken from, and feeding it the inputs that followed (each through its
//! logged form, [`InputRecord`], and with its tick) brings it to the very
//! state the live core reached.

use super::checkpoint::apply_op;
use super::properties::op;
use super::*;

/// A core restored from `sim`'s snapshot, through the snapshot's JSON.
pub(super) fn restored(sim: &Sim) -> Core {
    let text = serde_json::to_string(&sim.core.snapshot()).expect("a snapshot serializes");
    let snapshot: CoreSnapshot = serde_json::from_str(&text).expect("and reads back");
    let config = CoreConfig {
        timeslice: Duration::from_millis(100),
        kill_grace: Duration::from_millis(1000),
        daemon_uid: 0,
        ..CoreConfig::default()
    };
    Core::restore(config, topology(4), snapshot).expect("a snapshot restores")
}

/// What a client, an operator or a later decision can see of the core,
/// but for the finished jobs it remembers for `jobs all`, which a
/// snapshot does not carry (the daemon lists them from its journal).
pub(super) fn observe(sim: &mut Sim) -> String {
    let mut seen = format!("{:?}\n", sim.core.snapshot());
    for line in ["jobs", "queues", "status", "clusters"] {
        for text in sim.cmd(&root(), line).lines() {
            if !text.starts_with("finished:") {
                seen.push_str(text);
                seen.push('\n');
            }
        }
    }
    seen
}

/// Feeds `tape` to `core`, each input through its JSON line.
pub(super) fn replay(core: &mut Core, tape: Vec<(Tick, InputRecord)>) {
    for (tick, record) in tape {
        let line = serde_json::to_string(&record).expect("an input serializes");
        let record: InputRecord = serde_json::from_str(&line).expect("and reads back");
        let input = record.into_input().expect("a logged input reads back");
        core.handle(input, tick);
        core.check_invariants();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// After any events, a snapshot restored and fed the logged inputs
    /// that followed it is the live core again, in everything a client,
    /// an operator or a later decision can see.
    #[test]
    fn a_restored_snapshot_fed_the_logged_inputs_is_the_live_core(
        before in proptest::collection::vec(op(), 0..60),
        after in proptest::collection::vec(op(), 0..60),
        delayed in any::<bool>(),
        wait_limit in any::<bool>(),
        taken_over in any::<bool>(),
    ) {
        let mut sim = Sim::new(4, 100);
        sim.hold_confirmations = delayed;
        if wait_limit {
            sim.cmd(&root(), "cluster 0 limit jobs=3");
        }
        for op in &before {
            apply_op(&mut sim, op);
        }
        // A daemon took over in between: the jobs wait for their scruns,
        // which the snapshot must carry.
        if taken_over {
            let until = Tick(sim.now.0 + 300_000);
            sim.input(Input::Takeover {
                reattach_until: until,
                gone: Vec::new(),
            });
        }
        let mut core = restored(&sim);
        sim.tape = Some(Vec::new());
        for (idx, op) in after.iter().enumerate() {
            apply_op(&mut sim, op);
            // Some scruns come back, one of them too late.
            if taken_over && idx % 5 == 4 {
                let job = JobId(idx as u64 / 5 + 1);
                sim.input(Input::Reattach { client: ClientToken(10_000 + idx as u64), cred: root(), job });
            }
        }
        let tape = sim.tape.take().unwrap_or_default();
        replay(&mut core, tape);
        // The simulated processes are those of the live core.
        sim.take_log();
        let mut twin = sim.clone();
        twin.core = core;
        prop_assert_eq!(observe(&mut twin), observe(&mut sim));
        // And both decide alike from here.
        for op in &before {
            apply_op(&mut sim, op);
            apply_op(&mut twin, op);
        }
        prop_assert_eq!(twin.take_log(), sim.take_log());
        prop_assert_eq!(observe(&mut twin), observe(&mut sim));
    }
}

/// Every input reads back from its logged form as itself.
#[test]
fn every_input_reads_back_from_its_record() {
    let mut sim = Sim::new(2, 100);
    let (_, submit) = sim.submission(
        user(1000),
        ProcRequest::Grid {
            hosts: 2,
            per_host: 3,
        },
        Some(2),
        true,
        Some(Duration::from_secs(90)),
    );
    let console = parse_line("queue 1 set cputime=1h residency=10m memory=50% group=7")
        .unwrap()
        .unwrap();
    let inputs = vec![
        Input::StateDir(Some("/var/scored: gone".into())),
        Input::StateDir(None),
        submit,
        Input::ClientGone(ClientToken(3)),
        Input::Hold(ClientToken(4)),
        Input::Release(ClientToken(5)),
        Input::Interrupt(ClientToken(6)),
        Input::Deliver {
            client: ClientToken(7),
            signal: 28,
        },
        Input::Stopped(JobId(8)),
        Input::RankExited {
            job: JobId(9),
            stage: 1,
            rank: 2,
            status: ExitStatus::Dumped(11),
        },
        Input::SpawnFailed {
            job: JobId(10),
            message: "cannot run 'x'".into(),
            status: 127,
        },
        Input::ProcessesGone(JobId(11)),
        Input::StopFailed {
            job: JobId(12),
            reason: "why".into(),
        },
        Input::Usage {
            job: JobId(13),
            usage: Usage {
                cpu: Duration::from_micros(1_234_567),
                memory: vec![1, 2].into(),
                disk: 3,
                programs: 2,
            },
        },
        Input::FinalUsage {
            job: JobId(14),
            cpu: Duration::from_micros(7),
            peak_memory: vec![5],
            disk: 6,
        },
        Input::SwitchMeasured {
            id: 15,
            latency: Duration::from_micros(170),
        },
        Input::Tick,
        Input::Console {
            client: ClientToken(16),
            cred: user(1001),
            command: Box::new(console),
        },
        Input::Shutdown { now: true },
    ];
    for input in inputs {
        let line = serde_json::to_string(&InputRecord::of(&input)).unwrap();
        let back: InputRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back.into_input().unwrap(), input, "{line}");
    }
}
