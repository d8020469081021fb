//! Batch jobs, dependencies and arrays in the core: the backlog's entries,
//! the order in which their jobs are admitted, their ends, and the restart.

use super::*;
use scored_proto::batch::{self, ArraySpec, BatchOptions};

/// Submits `options` for `prog` as `cred`; returns the client.
fn submit_batch(sim: &mut Sim, cred: Cred, options: BatchOptions) -> u64 {
    let client = sim.next_client;
    sim.next_client += 1;
    let request = JobRequest {
        stages: vec![vec![OsString::from("prog")]],
        joiner: Joiner::Sequence,
        procs: ProcRequest::Nodes(1),
        priority: None,
        wait: false,
        memory: None,
        disk: None,
        time: None,
        env: vec![],
        cwd: OsString::from("/"),
        inherited: Default::default(),
        batch: batch::check(&options).expect("valid options"),
    };
    sim.input(Input::Submit {
        client: ClientToken(client),
        cred,
        user: "u".into(),
        request: Box::new(request),
    });
    client
}

fn detached() -> BatchOptions {
    BatchOptions {
        detach: true,
        ..BatchOptions::default()
    }
}

fn after(ids: &[u64]) -> BatchOptions {
    BatchOptions {
        after: ids.to_vec(),
        ..detached()
    }
}

fn array(text: &str) -> BatchOptions {
    BatchOptions {
        array: Some(ArraySpec::parse(text).unwrap()),
        ..detached()
    }
}

fn field(sim: &mut Sim, id: u64, key: &str) -> String {
    let text = sim.cmd(&root(), &format!("job {id}"));
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} in:\n{text}"))
        .to_string()
}

#[test]
fn a_batch_job_is_told_its_id_runs_without_a_client_and_outlives_it() {
    let mut sim = Sim::new(2, 100);
    let client = submit_batch(&mut sim, root(), detached());
    check(&sim.client(client), "accepted 1 x1");
    check(&sim.take_log(), "spawn 1 stage 0 x1");
    let job = sim.core.job(JobId(1)).expect("admitted");
    assert_eq!(job.link(), Link::Batch);
    assert_eq!(field(&mut sim, 1, "batch"), "yes");
    assert_eq!(field(&mut sim, 1, "output"), "scored-1.out");
    // Its scrun goes away: the job runs on.
    sim.input(Input::ClientGone(ClientToken(client)));
    assert_eq!(sim.running(), [1]);
    sim.exit(1, 0);
    // Nobody is told of its end.
    check(&sim.client(client), "accepted 1 x1");
    assert!(sim.core.no_jobs());
}

#[test]
fn a_dependant_waits_and_runs_after_a_success() {
    let mut sim = Sim::new(2, 100);
    submit_batch(&mut sim, root(), detached());
    let second = submit_batch(&mut sim, root(), after(&[1]));
    check(&sim.client(second), "accepted 2 x1 (waits for after=1)");
    assert_eq!(field(&mut sim, 2, "state"), "waiting");
    assert_eq!(field(&mut sim, 2, "reason"), "waits for after=1");
    let jobs = sim.cmd(&root(), "jobs");
    assert!(jobs.contains("waits for after=1"), "{jobs}");
    check(&sim.take_log(), "spawn 1 stage 0 x1");
    sim.exit(1, 0);
    check(&sim.take_log(), "release 1, spawn 2 stage 0 x1");
    sim.exit(2, 0);
    assert!(sim.core.no_jobs());
}

#[test]
fn dependants_of_a_failure_never_run_and_name_the_job() {
    let mut sim = Sim::new(2, 100);
    submit_batch(&mut sim, root(), detached());
    submit_batch(&mut sim, root(), after(&[1]));
    submit_batch(&mut sim, root(), after(&[2]));
    let any = submit_batch(
        &mut sim,
        root(),
        BatchOptions {
            afterany: vec![2],
            ..detached()
        },
    );
    sim.take_log();
    sim.exit(1, 3);
    // 2 never runs, nor 3 after it; 4 runs after 2 however it ended.
    check(&sim.take_log(), "release 1, spawn 4 stage 0 x1");
    let reason = field(&mut sim, 2, "reason");
    assert!(
        reason.starts_with("never ran: job 1 ended with status 3") && reason.ends_with("-after=1"),
        "{reason}"
    );
    assert_eq!(field(&mut sim, 2, "exit"), "75");
    assert_eq!(field(&mut sim, 2, "state"), "killed");
    let reason = field(&mut sim, 3, "reason");
    assert!(reason.contains("job 2 never ran"), "{reason}");
    check(&sim.client(any), "accepted 4 x1 (waits for afterany=2)");
    // A new job after one that failed is taken, and ends at once.
    let late = submit_batch(&mut sim, root(), after(&[1]));
    assert!(sim
        .client(late)
        .starts_with("accepted 5 x1 (never ran: job 1 ended with status 3"));
}

#[test]
fn an_unknown_dependency_is_refused_and_changes_nothing() {
    let mut sim = Sim::new(2, 100);
    let client = submit_batch(&mut sim, root(), after(&[7]));
    check(&sim.client(client), "rejected Invalid");
    assert_eq!(sim.core.next_job_id(), 1);
    assert!(sim.core.no_jobs());
}

#[test]
fn an_interactive_dependant_is_told_it_waits_then_runs_with_its_client() {
    let mut sim = Sim::new(2, 100);
    submit_batch(&mut sim, root(), detached());
    let client = submit_batch(
        &mut sim,
        root(),
        BatchOptions {
            after: vec![1],
            ..BatchOptions::default()
        },
    );
    sim.exit(1, 0);
    sim.exit(2, 0);
    check(
        &sim.client(client),
        "accepted 2 x1 (waits for after=1), admitted 2, started 2, ended 2 Exited 0",
    );
    // Its client going away while it waits ends it.
    submit_batch(&mut sim, root(), detached());
    let client = submit_batch(
        &mut sim,
        root(),
        BatchOptions {
            after: vec![3],
            ..BatchOptions::default()
        },
    );
    sim.input(Input::ClientGone(ClientToken(client)));
    assert!(field(&mut sim, 4, "reason").contains("its scrun went away"));
}

#[test]
fn an_array_runs_at_most_max_at_once_and_its_id_waits_for_all_of_it() {
    let mut sim = Sim::new(4, 100);
    let client = submit_batch(&mut sim, root(), array("10-18:2%2"));
    check(&sim.client(client), "accepted 1 x5");
    let waiting_for_all = submit_batch(&mut sim, root(), after(&[1]));
    check(&sim.take_log(), "spawn 1 stage 0 x1, spawn 2 stage 0 x1");
    let jobs = sim.cmd(&root(), "jobs");
    assert!(
        jobs.contains("waits for its array: 2 of %2 running"),
        "{jobs}"
    );
    assert_eq!(field(&mut sim, 2, "array index"), "12");
    assert_eq!(field(&mut sim, 2, "array"), "1");
    let plan_index = sim.core.job(JobId(2)).and_then(Job::array);
    assert_eq!(plan_index, Some((12, JobId(1))));
    sim.exit(1, 0);
    check(&sim.take_log(), "release 1, spawn 3 stage 0 x1");
    sim.exit(3, 0);
    sim.exit(2, 0);
    check(
        &sim.take_log(),
        "release 3, spawn 4 stage 0 x1, release 2, spawn 5 stage 0 x1",
    );
    // Element 1's own end does not release the job after the array.
    assert_eq!(field(&mut sim, 6, "state"), "waiting");
    sim.exit(4, 0);
    sim.exit(5, 0);
    check(&sim.take_log(), "release 4, release 5, spawn 6 stage 0 x1");
    check(
        &sim.client(waiting_for_all),
        "accepted 6 x1 (waits for after=1)",
    );
}

#[test]
fn a_failed_element_fails_the_array_for_its_dependants() {
    let mut sim = Sim::new(4, 100);
    submit_batch(&mut sim, root(), array("1-2"));
    submit_batch(&mut sim, root(), after(&[1]));
    sim.exit(2, 1);
    sim.exit(1, 0);
    let reason = field(&mut sim, 3, "reason");
    assert!(
        reason.starts_with("never ran: array 1: job 2 ended with status 1"),
        "{reason}"
    );
}

#[test]
fn killing_a_waiting_element_ends_it_and_the_array_goes_on() {
    let mut sim = Sim::new(4, 100);
    submit_batch(&mut sim, root(), array("0-3%1"));
    sim.take_log();
    let other = user(1000);
    assert!(sim.cmd(&other, "kill 2").contains("permission denied"));
    assert_eq!(
        sim.cmd(&root(), "kill 2"),
        "job 2: killed before it started\n"
    );
    assert_eq!(field(&mut sim, 2, "state"), "killed");
    assert!(sim.cmd(&root(), "suspend 3").contains("not admitted yet"));
    sim.exit(1, 0);
    check(&sim.take_log(), "release 1, spawn 3 stage 0 x1");
    sim.exit(3, 0);
    check(&sim.take_log(), "release 3, spawn 4 stage 0 x1");
    sim.exit(4, 0);
    assert!(sim.core.no_jobs());
}

#[test]
fn a_long_array_is_admitted_a_share_per_event() {
    let mut sim = Sim::new(600, 100);
    submit_batch(&mut sim, root(), array("1-1000"));
    assert_eq!(sim.core.n_jobs(), ADMIT_PER_EVENT);
    assert_eq!(sim.core.next_deadline(), Some(Tick(0)));
    sim.input(Input::Tick);
    assert_eq!(sim.core.n_jobs(), 2 * ADMIT_PER_EVENT);
    sim.advance(1);
    assert_eq!(sim.core.n_jobs(), 1000);
}

#[test]
fn an_array_is_admitted_as_its_elements_start() {
    let mut sim = Sim::new(2, 100);
    submit_batch(&mut sim, root(), array("1-50"));
    // One element for each host, started at once.
    check(&sim.take_log(), "spawn 1 stage 0 x1, spawn 2 stage 0 x1");
    assert_eq!(sim.core.n_jobs(), 2);
    let jobs = sim.cmd(&root(), "jobs --state waiting");
    assert!(
        jobs.contains("waits for its array's admitted elements to start"),
        "{jobs}"
    );
    // The next ones as the first end: never more than one waiting to
    // start for each host besides those that run.
    for id in 1..=50 {
        sim.exit(id, 0);
        assert!(
            sim.core.n_jobs() <= 4,
            "{} jobs admitted",
            sim.core.n_jobs()
        );
    }
    assert!(sim.core.no_jobs());
}

#[test]
fn an_array_counts_against_the_users_budget() {
    let mut sim = Sim::new(2, 100);
    let client = submit_batch(&mut sim, user(1000), array("1-1001"));
    check(&sim.client(client), "rejected Resources");
    assert!(sim.core.no_jobs());
    assert_eq!(sim.core.next_job_id(), 1);
    let client = submit_batch(&mut sim, user(1000), array("1-1000%4"));
    check(&sim.client(client), "accepted 1 x1000");
    // Its waiting elements count: no job more for this user.
    let client = submit_batch(&mut sim, user(1000), detached());
    check(&sim.client(client), "rejected Resources");
}

#[test]
fn a_shutdown_ends_the_backlog() {
    let mut sim = Sim::new(2, 100);
    submit_batch(&mut sim, root(), array("1-3%1"));
    sim.cmd(&root(), "shutdown now");
    assert!(field(&mut sim, 3, "reason").contains("shutting down"));
    sim.advance(2000);
    assert!(sim.core.no_jobs());
}

#[test]
fn the_backlog_survives_a_restart() {
    let mut sim = Sim::new(4, 100);
    submit_batch(&mut sim, root(), array("1-4%1"));
    submit_batch(&mut sim, root(), after(&[1]));
    submit_batch(
        &mut sim,
        root(),
        BatchOptions {
            name: Some("keep".into()),
            output: Some("o.%j.%a".into()),
            ..array("7-8")
        },
    );
    sim.cmd(&root(), "kill 3");
    sim.take_log();
    let snapshot = sim.core.snapshot();
    let text = serde_json::to_string(&snapshot).expect("serialize");
    let snapshot: CoreSnapshot = serde_json::from_str(&text).expect("deserialize");
    let config = CoreConfig {
        timeslice: Duration::from_millis(100),
        kill_grace: Duration::from_millis(1000),
        daemon_uid: 0,
        ..CoreConfig::default()
    };
    let mut restored = sim.clone();
    restored.core = Core::restore(config, topology(4), snapshot).expect("restore");
    restored.core.check_invariants();
    for line in [
        "jobs", "job 2", "job 4", "job 5", "job 6", "job 7", "status",
    ] {
        assert_eq!(
            restored.cmd(&root(), line),
            sim.cmd(&root(), line),
            "{line}"
        );
    }
    for run in [&mut sim, &mut restored] {
        run.exit(1, 0);
        run.exit(2, 0);
        run.exit(4, 0);
    }
    assert_eq!(restored.take_log(), sim.take_log());
    assert_eq!(
        restored.core.job(JobId(6)).map(|job| job.output_paths()),
        Some((Some("o.6.7".into()), Some("o.6.7".into())))
    );
}

#[test]
fn a_job_may_wait_only_for_its_owners_jobs() {
    let mut sim = Sim::new(2, 100);
    submit_batch(&mut sim, user(1000), detached());
    // Another user would learn how it ends: refused, nothing taken.
    let other = submit_batch(&mut sim, user(1001), after(&[1]));
    check(&sim.client(other), "rejected Invalid");
    assert_eq!(sim.core.next_job_id(), 2);
    // Its owner may, and so may root.
    let own = submit_batch(&mut sim, user(1000), after(&[1]));
    check(&sim.client(own), "accepted 2 x1 (waits for after=1)");
    let root_client = submit_batch(&mut sim, root(), after(&[1]));
    check(
        &sim.client(root_client),
        "accepted 3 x1 (waits for after=1)",
    );
    // Once it ended, the same.
    sim.exit(1, 0);
    let late = submit_batch(&mut sim, user(1001), after(&[1]));
    check(&sim.client(late), "rejected Invalid");
}

/// The backlog is among what a rollback gives back: submissions that wait
/// (an array under its throttle, a dependant, batch jobs), changed after
/// the commit by admissions, ends and a kill, come back as they were, and
/// from there the core decides as a copy of the commit does.
#[test]
fn a_rollback_returns_the_backlog_as_it_was() {
    let mut sim = Sim::new(1, 100);
    submit_batch(&mut sim, root(), array("1-6%2"));
    submit_batch(&mut sim, root(), after(&[1]));
    for _ in 0..3 {
        submit_batch(&mut sim, root(), detached());
    }
    sim.core.commit();
    let committed = sim.clone();
    let events = |sim: &mut Sim| {
        for job in [1, 2, 3, 8] {
            sim.exit_if_running(JobId(job));
            sim.advance(150);
        }
        sim.cmd(&root(), "kill 9");
        sim.advance(150);
    };
    events(&mut sim);
    let changed = super::checkpoint::observe(&mut sim);
    assert!(sim.core.rollback());
    let core = std::mem::replace(&mut sim.core, committed.core.clone());
    let mut sim = committed.clone();
    sim.core = core;
    sim.core.check_invariants();
    let mut reference = committed.clone();
    let back = super::checkpoint::observe(&mut sim);
    assert_ne!(back, changed, "the events changed what the core shows");
    assert_eq!(back, super::checkpoint::observe(&mut reference));
    events(&mut sim);
    events(&mut reference);
    assert_eq!(sim.take_log(), reference.take_log());
    assert_eq!(
        super::checkpoint::observe(&mut sim),
        super::checkpoint::observe(&mut reference)
    );
}
