//! The panic checkpoint: a rollback gives back the core of the last
//! commit in every respect.

use super::properties::{op, pick, Op};
use super::*;

/// The loop's checkpoint of the core (`Core::commit`) is the
/// state before an event; what the event changes afterwards, in the jobs
/// or elsewhere, is undone by `Core::rollback`.
#[test]
fn a_rollback_undoes_the_changes_made_after_the_commit() {
    let mut sim = Sim::new(1, 100);
    sim.submit(1, Some(1));
    sim.submit(1, Some(1));
    let (first, second) = (1, 2);
    sim.advance(10);
    sim.core.commit();
    let phases = |core: &Core| {
        core.jobs()
            .map(|job| (job.id.0, job.phase(), job.held()))
            .collect::<Vec<_>>()
    };
    let before = phases(&sim.core);
    sim.cmd(&root(), "timeslice 300ms");
    sim.cmd(&root(), "queue 1 set cputime=1h");
    sim.cmd(&root(), &format!("suspend {first}"));
    sim.advance(500);
    sim.exit(second, 3);
    assert_ne!(phases(&sim.core), before);
    assert!(sim.core.rollback());
    assert_eq!(phases(&sim.core), before);
    assert_eq!(sim.core.timeslice(), Duration::from_millis(100));
    assert_eq!(sim.core.queues()[1].cputime, None);
    assert_eq!(sim.core.n_jobs(), 2);
    sim.core.check_invariants();
}

/// The journal records of undone changes are not written: a job admitted
/// after the commit and rolled back was never admitted.
#[test]
fn a_rollback_drops_the_journal_records_of_what_it_undoes() {
    let mut sim = Sim::new(1, 100);
    sim.core.record_journal();
    sim.submit(1, Some(1));
    assert_eq!(sim.core.take_journal().len(), 2, "admitted and started");
    sim.core.commit();
    sim.submit(1, Some(1));
    assert!(sim.core.rollback());
    assert!(sim.core.take_journal().is_empty());
    sim.submit(1, Some(1));
    assert!(
        matches!(sim.core.take_journal().first(), Some(JobEvent::Admitted { job, .. }) if job.0 == 2),
        "recording goes on, and the id of the undone job is given again"
    );
}

/// A rollback without a commit changes nothing and says so.
#[test]
fn a_rollback_without_a_commit_changes_nothing() {
    let mut sim = Sim::new(1, 100);
    sim.submit(1, Some(1));
    assert!(!sim.core.rollback());
    assert_eq!(sim.core.n_jobs(), 1);
}

/// A hold given to a waiting job after the commit is undone.
#[test]
fn a_rollback_returns_a_waiting_job_as_it_was() {
    let mut sim = Sim::new(1, 100);
    sim.cmd(&root(), "cluster 0 limit jobs=1");
    sim.submit(1, None);
    let waiting = sim.submit_with(root(), ProcRequest::Nodes(1), None, true);
    sim.core.commit();
    sim.input(Input::Hold(ClientToken(waiting)));
    assert!(sim.core.rollback());
    sim.exit(1, 0);
    check(&sim.client(waiting), "waiting, admitted 2, started 2");
}

/// Everything a client, an operator or a later decision can see of the
/// core: its listings and its restart snapshot.
pub(super) fn observe(sim: &mut Sim) -> String {
    let mut seen = format!("{:?}\n", sim.core.snapshot());
    for line in ["jobs all", "queues", "status", "clusters"] {
        seen.push_str(&sim.cmd(&root(), line));
        seen.push('\n');
    }
    seen
}

#[derive(Debug, Clone)]
enum Step {
    Op(Op),
    Commit,
    Rollback,
}

pub(super) fn apply_op(sim: &mut Sim, op: &Op) {
    match *op {
        Op::Submit { nodes, queue } => {
            sim.submit(nodes, Some(queue));
        }
        Op::Exit { pick: idx } => {
            if let Some(job) = pick(sim, idx) {
                sim.exit_if_running(job);
            }
        }
        Op::Advance { ms } => sim.advance(ms),
        Op::Hold { pick: idx } => {
            if let Some(job) = pick(sim, idx) {
                sim.cmd(&root(), &format!("suspend {job}"));
            }
        }
        Op::Release { pick: idx } => {
            if let Some(job) = pick(sim, idx) {
                sim.cmd(&root(), &format!("resume {job}"));
            }
        }
        Op::Toggle { queue } => {
            let active = sim.core.queues()[queue as usize].activated;
            let word = if active { "deactivate" } else { "activate" };
            sim.cmd(&root(), &format!("queue {queue} {word}"));
        }
        Op::Kill { pick: idx } => {
            if let Some(job) = pick(sim, idx) {
                sim.cmd(&root(), &format!("kill {job}"));
            }
        }
        Op::Confirm => sim.confirm_stops(),
    }
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => op().prop_map(Step::Op),
        2 => Just(Step::Commit),
        1 => Just(Step::Rollback),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// After any sequence of events, a rollback gives the core of the last
    /// commit in every respect a client or a decision can see (its
    /// listings, its restart snapshot, its invariants), and from there it
    /// decides exactly as a copy of that core does.
    #[test]
    fn a_rollback_returns_to_the_commit_in_every_respect(
        steps in proptest::collection::vec(step(), 1..120),
        delayed in any::<bool>(),
        wait_limit in any::<bool>(),
    ) {
        let mut sim = Sim::new(4, 100);
        sim.hold_confirmations = delayed;
        if wait_limit {
            sim.cmd(&root(), "cluster 0 limit jobs=3");
        }
        sim.core.commit();
        let mut committed = sim.clone();
        // A copy of the commit that lives through the same steps as the
        // rolled-back core, since the last rollback.
        let mut twin: Option<Sim> = None;
        for step in steps {
            match step {
                Step::Op(op) => {
                    apply_op(&mut sim, &op);
                    if let Some(twin) = &mut twin {
                        apply_op(twin, &op);
                    }
                }
                Step::Commit => {
                    sim.core.commit();
                    committed = sim.clone();
                    twin = None;
                }
                Step::Rollback => {
                    prop_assert!(sim.core.rollback());
                    let core = std::mem::replace(&mut sim.core, committed.core.clone());
                    sim = committed.clone();
                    sim.core = core;
                    sim.core.check_invariants();
                    let mut reference = committed.clone();
                    prop_assert_eq!(observe(&mut sim), observe(&mut reference));
                    twin = Some(reference);
                }
            }
        }
        if let Some(mut twin) = twin {
            prop_assert_eq!(sim.take_log(), twin.take_log());
            prop_assert_eq!(observe(&mut sim), observe(&mut twin));
        }
    }
}

/// The types whose values log their own changes: those that implement
/// `Undo`, found in the crate's sources.
fn logging_types() -> Vec<String> {
    let mut types = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("the crate's sources are readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                for (at, found) in text.match_indices(" Undo for ") {
                    let name: String = text[at + found.len()..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() && name != "Logged" {
                        types.push(name);
                    }
                }
            }
        }
    }
    types.sort();
    types.dedup();
    types
}

/// The fields of `Core` whose type logs its own changes. Such a field
/// outside `Logged` would be copied whole at each commit and never start
/// its log: every logged container is declared in `Logged`'s one list.
fn logged_fields_outside_the_checkpoint(core_source: &str, types: &[String]) -> Vec<String> {
    let start = core_source
        .find("pub struct Core {")
        .expect("core.rs declares Core");
    let body = &core_source[start..];
    let body = &body[..body.find("\n}\n").expect("Core's declaration ends")];
    body.lines()
        .map(str::trim)
        .filter(|line| !line.starts_with("//"))
        .filter_map(|line| line.split_once(':'))
        .filter(|(_, ty)| {
            ty.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|word| types.iter().any(|t| t == word))
        })
        .map(|(field, _)| field.trim_start_matches("pub ").to_string())
        .collect()
}

/// Every container that logs its own changes is one of the checkpoint's
/// (`Logged`), so a commit starts its log and a rollback undoes it.
#[test]
fn every_logged_container_is_in_the_checkpoint_block() {
    let types = logging_types();
    assert!(
        types.iter().any(|t| t == "JobTable") && types.iter().any(|t| t == "UndoSet"),
        "the types that implement Undo were not found: {types:?}"
    );
    let core_source = include_str!("../../core.rs");
    let misplaced = logged_fields_outside_the_checkpoint(core_source, &types);
    assert!(
        misplaced.is_empty(),
        "fields of Core that log their changes but are not in Logged \
         (core/checkpoint.rs), so no commit starts their log: {misplaced:?}"
    );
    // The check sees such a field where one is declared.
    let with_one = core_source.replace(
        "    limits: Vec<ClusterLimits>,\n",
        "    limits: Vec<ClusterLimits>,\n    extra: UndoSet<BTreeSet<JobId>>,\n",
    );
    assert_eq!(
        logged_fields_outside_the_checkpoint(&with_one, &types),
        ["extra"]
    );
}
