//! A new daemon taking the core over from a killed one: the killed
//! daemon's clients are gone, their jobs wait for their scruns to
//! reattach, and jobs whose processes were lost end so.

use super::*;

/// The inputs a new daemon feeds once it has the killed one's state.
fn take_over(sim: &mut Sim, grace_ms: u64) {
    let until = Tick(sim.now.0 + grace_ms * 1000);
    sim.input(Input::Takeover {
        reattach_until: until,
        gone: Vec::new(),
    });
}

fn reattach(sim: &mut Sim, cred: Cred, job: u64) -> u64 {
    let client = sim.next_client;
    sim.next_client += 1;
    sim.input(Input::Reattach {
        client: ClientToken(client),
        cred,
        job: JobId(job),
    });
    client
}

/// A job whose scrun comes back is its client's again: it runs on, and
/// its end goes to the new connection.
#[test]
fn a_scrun_that_reattaches_gets_its_jobs_end() {
    let mut sim = Sim::new(2, 100);
    let first = sim.submit_with(user(1000), ProcRequest::Nodes(1), Some(1), false);
    sim.advance(10);
    take_over(&mut sim, 5_000);
    assert_eq!(sim.core.job(JobId(1)).unwrap().client(), None);
    let again = reattach(&mut sim, user(1000), 1);
    check(
        &sim.client(again),
        "reattached 1 started=true held=false ranks=1",
    );
    sim.exit(1, 3);
    check(
        &sim.client(again),
        "reattached 1 started=true held=false ranks=1, ended 1 Exited 3",
    );
    check(&sim.client(first), "admitted 1, started 1");
}

/// A reattached scrun is told the job's placed rank count, as `Admitted`
/// told it (a `-hosts=` job's PMI waits for it), which the killed daemon
/// may never have sent.
#[test]
fn a_reattached_scrun_is_told_the_rank_count_of_its_placed_job() {
    let mut sim = Sim::new(3, 100);
    sim.submit_with(user(1000), ProcRequest::Hosts(3), Some(1), false);
    sim.advance(10);
    take_over(&mut sim, 5_000);
    let again = reattach(&mut sim, user(1000), 1);
    check(
        &sim.client(again),
        "reattached 1 started=true held=false ranks=3",
    );
}

/// Only the job's owner may reattach; anyone else is refused and changes
/// nothing.
#[test]
fn only_the_owner_reattaches() {
    let mut sim = Sim::new(2, 100);
    sim.submit_with(user(1000), ProcRequest::Nodes(1), Some(1), false);
    take_over(&mut sim, 5_000);
    let stranger = reattach(&mut sim, user(1001), 1);
    check(&sim.client(stranger), "rejected Invalid");
    let owner = reattach(&mut sim, user(1000), 1);
    check(
        &sim.client(owner),
        "reattached 1 started=true held=false ranks=1",
    );
    // Once reattached, a second scrun cannot take the job.
    let second = reattach(&mut sim, user(1000), 1);
    check(&sim.client(second), "rejected Invalid");
}

/// A job whose scrun does not come back in time is killed, as one whose
/// scrun went away.
#[test]
fn a_job_whose_scrun_does_not_come_back_is_killed() {
    let mut sim = Sim::new(2, 100);
    sim.core.record_journal();
    sim.submit_with(user(1000), ProcRequest::Nodes(1), Some(1), false);
    take_over(&mut sim, 2_000);
    sim.take_log();
    sim.advance(1_999);
    assert!(sim.core.job(JobId(1)).is_some());
    sim.advance(2);
    assert!(sim.core.job(JobId(1)).is_none(), "{}", sim.take_log());
    let ended = sim
        .core
        .take_journal()
        .into_iter()
        .find_map(|event| match event {
            JobEvent::Ended { record, .. } => Some(record),
            _ => None,
        })
        .expect("the job ended");
    let reason = ended
        .iter()
        .find(|(key, _)| key == "reason")
        .map(|(_, value)| format!("{value:?}"))
        .unwrap_or_default();
    assert!(reason.contains("scrun went away"), "{reason}");
}

/// A scrun that asks after its job ended while it was away is told how
/// the job ended.
#[test]
fn a_scrun_that_comes_back_after_its_job_ended_is_told_how() {
    let mut sim = Sim::new(2, 100);
    sim.submit_with(user(1000), ProcRequest::Nodes(1), Some(1), false);
    take_over(&mut sim, 5_000);
    sim.exit(1, 7);
    let again = reattach(&mut sim, user(1000), 1);
    check(&sim.client(again), "ended 1 Exited 7");
    let stranger = reattach(&mut sim, user(1001), 1);
    check(&sim.client(stranger), "rejected Invalid");
    let unknown = reattach(&mut sim, user(1000), 99);
    check(&sim.client(unknown), "rejected Invalid");
}

/// Submissions waiting for admission are dropped (their scruns submit
/// again), and queued and held jobs keep their state.
#[test]
fn waiting_submissions_go_and_queued_jobs_stay() {
    let mut sim = Sim::new(1, 100);
    sim.cmd(&root(), "cluster 0 limit jobs=2");
    sim.submit_with(user(1000), ProcRequest::Nodes(1), Some(1), false);
    sim.submit_with(user(1000), ProcRequest::Nodes(1), Some(1), false);
    sim.cmd(&root(), "suspend 2");
    sim.submit_with(user(1000), ProcRequest::Nodes(1), Some(1), true);
    assert!(sim.cmd(&root(), "status").contains("waiting: 1"));
    take_over(&mut sim, 5_000);
    assert!(sim.cmd(&root(), "status").contains("waiting: 0"));
    assert!(sim.core.job(JobId(2)).unwrap().held());
    assert_eq!(sim.core.n_jobs(), 2);
}

/// A job whose processes were lost ends so, with the reason given, and
/// its hosts go to the next job.
#[test]
fn a_job_whose_processes_were_lost_ends_lost() {
    let mut sim = Sim::new(1, 100);
    let client = sim.submit_with(user(1000), ProcRequest::Nodes(1), Some(1), false);
    sim.submit_with(user(1000), ProcRequest::Nodes(1), Some(1), false);
    sim.procs.remove(&JobId(1));
    sim.input(Input::ProcessesLost {
        job: JobId(1),
        reason: "its keeper was killed".into(),
    });
    assert!(sim.core.job(JobId(1)).is_none());
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Killed 137",
    );
    assert!(sim.take_log().contains("spawn 2"));
    let listing = sim.cmd(&root(), "jobs all");
    assert!(listing.contains("killed"), "{listing}");
}

/// A job whose keeper killed it at the end of its wait (no daemon took
/// it over in time) ends killed for that reason with its processes'
/// status, not lost, and its hosts go to the next job.
#[test]
fn a_job_its_keeper_ended_at_its_wait_ends_killed_for_that_reason() {
    let mut sim = Sim::new(1, 100);
    let client = sim.submit_with(user(1000), ProcRequest::Nodes(1), Some(1), false);
    sim.submit_with(user(1000), ProcRequest::Nodes(1), Some(1), false);
    sim.procs.remove(&JobId(1));
    sim.dying.insert(JobId(1));
    sim.input(Input::KeeperEnded {
        job: JobId(1),
        reason: "because no scored took it over within 3s (--keeper-wait)".into(),
    });
    sim.input(Input::RankExited {
        job: JobId(1),
        stage: 0,
        rank: 0,
        status: ExitStatus::Signal(9),
    });
    sim.input(Input::ProcessesGone(JobId(1)));
    assert!(sim.core.job(JobId(1)).is_none());
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Killed 137",
    );
    let record = sim.cmd(&root(), "job 1");
    assert!(
        record.contains(
            "reason: killed because no scored took it over within 3s (--keeper-wait): rank 0 ended by"
        ),
        "{record}"
    );
    assert!(!record.contains("lost"), "{record}");
    assert!(sim.take_log().contains("spawn 2"));
}
