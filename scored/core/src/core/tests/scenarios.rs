//! Scenarios of the gang scheduler and of a job's life: switches,
//! queues, holds, kills, exit statuses, pipelines, limits, shutdown.

use super::*;

#[test]
fn two_full_width_gang_jobs_alternate_each_slice() {
    let mut sim = Sim::new(2, 100);
    sim.submit(2, Some(1));
    sim.submit(2, Some(1));
    check(&sim.take_log(), "spawn 1 stage 0 x2");
    sim.advance(100);
    check(&sim.take_log(), "stop 1, spawn 2 stage 0 x2");
    sim.advance(100);
    check(&sim.take_log(), "stop 2, cont 1");
    sim.advance(100);
    check(&sim.take_log(), "stop 1, cont 2");
}

#[test]
fn a_job_entering_in_the_remnant_of_a_slice_keeps_its_turn() {
    // Three jobs on one host take turns. Job 2 ends halfway through its
    // slice and job 3 runs the rest of it: that remnant is not its turn,
    // so it runs the next whole slice too, before job 1's turn comes.
    let mut sim = Sim::new(1, 100);
    for _ in 0..3 {
        sim.submit(1, Some(1));
    }
    assert_eq!(sim.running(), vec![1]);
    sim.advance(100);
    assert_eq!(sim.running(), vec![2]);
    sim.advance(50);
    sim.exit(2, 0);
    assert_eq!(sim.running(), vec![3]);
    sim.advance(50);
    assert_eq!(sim.running(), vec![3]);
    sim.advance(100);
    assert_eq!(sim.running(), vec![1]);
    sim.advance(100);
    assert_eq!(sim.running(), vec![3]);
}

#[test]
fn many_jobs_that_ran_all_move_to_the_back() {
    // 20 hosts, 40 one-host jobs: the two halves alternate.
    let mut sim = Sim::new(20, 100);
    for _ in 0..40 {
        sim.submit(1, Some(1));
    }
    let first: Vec<u64> = (1..=20).collect();
    let second: Vec<u64> = (21..=40).collect();
    assert_eq!(sim.running(), first);
    for _ in 0..3 {
        sim.advance(100);
        assert_eq!(sim.running(), second);
        sim.advance(100);
        assert_eq!(sim.running(), first);
    }
}

#[test]
fn entering_job_waits_for_the_stop_confirmation() {
    let mut sim = Sim::new(1, 100);
    sim.submit(1, Some(1));
    sim.submit(1, Some(1));
    sim.take_log();
    sim.hold_confirmations = true;
    sim.advance(100);
    check(&sim.take_log(), "stop 1");
    sim.confirm_stops();
    check(&sim.take_log(), "spawn 2 stage 0 x1");
}

#[test]
fn the_continues_of_a_switch_are_known_before_its_stops_are_confirmed() {
    let mut sim = Sim::new(2, 100);
    sim.submit(1, Some(1));
    sim.submit(1, Some(1));
    sim.submit(2, Some(1));
    sim.advance(100);
    sim.advance(100);
    check(
        &sim.take_log(),
        "spawn 1 stage 0 x1, spawn 2 stage 0 x1, stop 1, stop 2, spawn 3 stage 0 x2, \
         stop 3, cont 1, cont 2",
    );
    sim.hold_confirmations = true;
    sim.advance(100);
    check(&sim.take_log(), "stop 1, stop 2");
    let stopped = |jobs: &[u64]| -> Vec<Input> {
        jobs.iter().map(|job| Input::Stopped(JobId(*job))).collect()
    };
    assert_eq!(
        sim.core.continues_once_stopped(&stopped(&[2, 1])),
        Some(vec![JobId(3)])
    );
    // Beside a sample that calls for nothing, too.
    let mut sampled = stopped(&[1, 2]);
    sampled.insert(
        0,
        Input::Usage {
            job: JobId(2),
            usage: Usage::default(),
        },
    );
    assert_eq!(
        sim.core.continues_once_stopped(&sampled),
        Some(vec![JobId(3)])
    );
    // Part of the stops, or anything else beside them: not foreseen.
    assert_eq!(sim.core.continues_once_stopped(&stopped(&[1])), None);
    let mut more = stopped(&[1, 2]);
    more.push(Input::Tick);
    assert_eq!(sim.core.continues_once_stopped(&more), None);
    assert_eq!(sim.core.continues_once_stopped(&[]), None);
    let confirmations = stopped(&[1, 2]);
    sim.unconfirmed.clear();
    let actions = sim.core.handle_all(confirmations, sim.now);
    assert_eq!(
        actions
            .iter()
            .filter(|action| matches!(action, Action::Continue(_)))
            .count(),
        1
    );
    let mut inputs = VecDeque::new();
    sim.apply(actions, &mut inputs);
    check(&sim.take_log(), "cont 3");
    // A job killed while it stops takes its hosts first: the stop of the
    // other no longer says what runs next.
    sim.advance(100);
    check(&sim.take_log(), "stop 3");
    sim.advance(100);
    sim.cmd(&root(), "kill 3");
    assert_eq!(sim.core.continues_once_stopped(&stopped(&[3])), None);
}

#[test]
fn a_sample_over_a_limit_during_a_switch_leaves_its_continues_to_the_core() {
    let mut sim = Sim::new(1, 100);
    sim.cmd(&root(), "cluster 0 limit memory=128M");
    sim.cmd(&root(), "queue 1 set memory=50%");
    sim.submit(1, Some(1));
    sim.submit(1, Some(1));
    sim.advance(100);
    sim.take_log();
    sim.hold_confirmations = true;
    sim.advance(100);
    check(&sim.take_log(), "stop 2");
    let sample = |mib: u64| Input::Usage {
        job: JobId(2),
        usage: Usage {
            cpu: Duration::ZERO,
            memory: vec![mib << 20].into(),
            disk: 0,
            programs: 0,
        },
    };
    let within = [sample(60), Input::Stopped(JobId(2))];
    assert_eq!(
        sim.core.continues_once_stopped(&within),
        Some(vec![JobId(1)])
    );
    let over = [sample(80), Input::Stopped(JobId(2))];
    assert_eq!(sim.core.continues_once_stopped(&over), None);
}

#[test]
fn space_partitioning_and_time_sharing_together() {
    let mut sim = Sim::new(2, 100);
    sim.submit(1, Some(1));
    sim.submit(1, Some(1));
    check(&sim.take_log(), "spawn 1 stage 0 x1, spawn 2 stage 0 x1");
    sim.submit(1, Some(1));
    check(&sim.take_log(), "");
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..4 {
        sim.advance(100);
        assert_eq!(sim.running().len(), 2, "both hosts stay busy");
        seen.extend(sim.running());
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![1, 2, 3]);
}

#[test]
fn higher_queue_preempts_at_once_and_lower_continues_after() {
    let mut sim = Sim::new(1, 500);
    sim.submit(1, Some(2));
    check(&sim.take_log(), "spawn 1 stage 0 x1");
    sim.advance(10);
    sim.submit(1, Some(0));
    check(&sim.take_log(), "stop 1, spawn 2 stage 0 x1");
    sim.advance(5000);
    check(&sim.take_log(), "");
    sim.exit(2, 0);
    check(&sim.take_log(), "release 2, cont 1");
}

#[test]
fn exclusive_job_is_not_stopped_by_same_or_lower_priority() {
    let mut sim = Sim::new(1, 100);
    sim.submit(1, Some(0));
    sim.submit(1, Some(0));
    sim.submit(1, Some(1));
    check(&sim.take_log(), "spawn 1 stage 0 x1");
    sim.advance(1000);
    check(&sim.take_log(), "");
    sim.exit(1, 0);
    check(&sim.take_log(), "release 1, spawn 2 stage 0 x1");
}

#[test]
fn deactivated_queue_creates_no_process_until_activated() {
    let mut sim = Sim::new(1, 100);
    check(
        &sim.cmd(&root(), "queue 1 deactivate"),
        "queue 1: deactivated (jobs not scheduled)\n",
    );
    let client = sim.submit(1, Some(1));
    sim.advance(1000);
    check(&sim.take_log(), "");
    check(&sim.client(client), "admitted 1");
    sim.cmd(&root(), "queue 1 activate");
    check(&sim.take_log(), "spawn 1 stage 0 x1");
    sim.cmd(&root(), "queue 1 deactivate");
    check(&sim.take_log(), "stop 1");
}

#[test]
fn disabled_queue_rejects_and_keeps_running_its_jobs() {
    let mut sim = Sim::new(1, 100);
    sim.submit(1, Some(1));
    sim.cmd(&root(), "queue 1 disable");
    let client = sim.submit(1, Some(1));
    check(&sim.client(client), "rejected QueueDisabled");
    check(&sim.take_log(), "spawn 1 stage 0 x1");
}

#[test]
fn held_job_stays_stopped_through_slices_and_queue_changes() {
    let mut sim = Sim::new(1, 100);
    sim.submit(1, Some(1));
    sim.submit(1, Some(1));
    sim.take_log();
    check(&sim.cmd(&root(), "suspend 1"), "job 1: held\n");
    check(&sim.take_log(), "stop 1, spawn 2 stage 0 x1");
    sim.cmd(&root(), "queue 1 deactivate");
    sim.cmd(&root(), "queue 1 activate");
    sim.cmd(&root(), "move 1 2");
    sim.advance(2000);
    assert_eq!(sim.running(), vec![2]);
    sim.exit(2, 0);
    sim.advance(1000);
    assert_eq!(
        sim.running(),
        Vec::<u64>::new(),
        "a held job is never resumed by the scheduler"
    );
    check(&sim.cmd(&root(), "resume 1"), "job 1: released\n");
    assert_eq!(sim.running(), vec![1]);
}

#[test]
fn owner_cannot_release_an_operator_hold_nor_touch_other_jobs() {
    let mut sim = Sim::new(1, 100);
    sim.submit_with(user(1000), ProcRequest::Nodes(1), None, false);
    check(
        &sim.cmd(&user(1001), "kill 1"),
        "error: permission denied: job 1 belongs to another user\n",
    );
    check(&sim.cmd(&user(1001), "queue 1 deactivate"), "error: permission denied: 'queue 1 deactivate' changes the daemon and needs root or the operator\n");
    sim.cmd(&root(), "suspend 1");
    check(
        &sim.cmd(&user(1000), "resume 1"),
        "error: job 1 is held by an operator; only an operator can resume it\n",
    );
    check(&sim.cmd(&user(1000), "suspend 1"), "job 1: held\n");
}

#[test]
fn kill_is_graceful_then_forced() {
    let mut sim = Sim::new(1, 100);
    let client = sim.submit(1, Some(1));
    sim.stubborn.push(JobId(1));
    sim.take_log();
    sim.cmd(&root(), "kill 1");
    check(&sim.take_log(), "signal 1 15");
    sim.advance(999);
    check(&sim.take_log(), "");
    sim.advance(1);
    check(&sim.take_log(), "signal 1 9, release 1");
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Killed 137",
    );
}

#[test]
fn a_job_that_handles_sigterm_and_exits_has_its_own_status() {
    let mut sim = Sim::new(1, 100);
    let client = sim.submit(1, Some(1));
    // It catches SIGTERM (the simulator leaves it running) and exits 0.
    sim.stubborn.push(JobId(1));
    sim.cmd(&user(0), "kill 1");
    sim.exit(1, 0);
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Killed 0",
    );
    let reason = sim.cmd(&root(), "job 1");
    assert!(
        reason.contains("reason: asked to end by its owner; it exited with status 0\n"),
        "{reason}"
    );
    // One that SIGTERM ends has its status, and the line names the signal.
    let client = sim.submit(1, Some(1));
    sim.cmd(&root(), "kill 2");
    check(
        &sim.client(client),
        "admitted 2, started 2, ended 2 Killed 143",
    );
    let reason = sim.cmd(&root(), "job 2");
    assert!(
        reason.contains("reason: killed by its owner: rank 0 ended by SIGTERM (terminated)\n"),
        "{reason}"
    );
}

/// A kill that comes while a job's keeper is still creating its
/// processes leaves ranks that never existed and so never report an end:
/// the job failed by the kill's signal, not "exited with status 0".
#[test]
fn a_job_killed_while_its_processes_are_created_ends_by_the_kill() {
    let mut sim = Sim::new(2, 100);
    let client = sim.submit(2, Some(1));
    sim.stubborn.push(JobId(1));
    sim.cmd(&user(0), "kill 1");
    // Rank 0 existed and ended by the SIGTERM; rank 1 was never created.
    sim.procs.remove(&JobId(1)).expect("job 1 runs");
    sim.input(Input::RankExited {
        job: JobId(1),
        stage: 0,
        rank: 0,
        status: ExitStatus::Signal(15),
    });
    sim.input(Input::ProcessesGone(JobId(1)));
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Killed 143",
    );
    // Not one of them existed: no rank reported anything.
    let client = sim.submit(2, Some(1));
    sim.stubborn.push(JobId(2));
    sim.cmd(&user(0), "kill 2");
    sim.procs.remove(&JobId(2)).expect("job 2 runs");
    sim.input(Input::ProcessesGone(JobId(2)));
    check(
        &sim.client(client),
        "admitted 2, started 2, ended 2 Killed 143",
    );
    let reason = sim.cmd(&root(), "job 2");
    assert!(
        reason.contains("reason: killed by its owner while its processes were being created\n"),
        "{reason}"
    );
    // A job whose scrun went away has SIGKILL's status.
    let client = sim.submit(1, Some(1));
    sim.procs.remove(&JobId(3)).expect("job 3 runs");
    sim.input(Input::ClientGone(ClientToken(client)));
    sim.input(Input::ProcessesGone(JobId(3)));
    let reason = sim.cmd(&root(), "job 3");
    assert!(
        reason.contains(
            "reason: killed because its scrun went away while its processes were being created\n"
        ),
        "{reason}"
    );
}

#[test]
fn killed_stopped_job_runs_to_handle_sigterm_before_others() {
    let mut sim = Sim::new(1, 100);
    sim.submit(1, Some(1));
    sim.submit(1, Some(1));
    sim.advance(100);
    assert_eq!(sim.running(), vec![2]);
    sim.take_log();
    sim.cmd(&root(), "kill 1");
    check(
        &sim.take_log(),
        "signal 1 15, stop 2, cont 1, release 1, cont 2",
    );
}

#[test]
fn client_gone_kills_its_job_at_once() {
    let mut sim = Sim::new(1, 100);
    let client = sim.submit(1, Some(1));
    sim.take_log();
    sim.input(Input::ClientGone(ClientToken(client)));
    check(&sim.take_log(), "signal 1 9, release 1");
    assert_eq!(sim.core.n_jobs(), 0);
}

#[test]
fn rank_killed_by_signal_ends_the_job_with_128_plus_n() {
    let mut sim = Sim::new(2, 100);
    let client = sim.submit(2, Some(1));
    sim.input(Input::RankExited {
        job: JobId(1),
        stage: 0,
        rank: 1,
        status: ExitStatus::Signal(11),
    });
    check(&sim.take_log(), "spawn 1 stage 0 x2, signal 1 9, release 1");
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Exited 139",
    );
}

#[test]
fn first_failing_rank_gives_the_status() {
    let mut sim = Sim::new(2, 100);
    let client = sim.submit(2, Some(1));
    let job = JobId(1);
    sim.procs.remove(&job);
    sim.input(Input::RankExited {
        job,
        stage: 0,
        rank: 1,
        status: ExitStatus::Code(3),
    });
    sim.input(Input::RankExited {
        job,
        stage: 0,
        rank: 0,
        status: ExitStatus::Code(4),
    });
    sim.input(Input::ProcessesGone(job));
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Exited 3",
    );
}

#[test]
fn sequence_stages_run_one_after_another_and_stop_at_a_failure() {
    let mut sim = Sim::new(1, 100);
    let client = sim.next_client;
    sim.next_client += 1;
    let mut request = JobRequest {
        stages: vec![vec!["a".into()], vec!["b".into()], vec!["c".into()]],
        joiner: Joiner::Sequence,
        procs: ProcRequest::Nodes(1),
        priority: None,
        wait: false,
        memory: None,
        disk: None,
        time: None,
        env: vec![],
        cwd: "/".into(),
        inherited: Default::default(),
        batch: Default::default(),
    };
    sim.input(Input::Submit {
        client: ClientToken(client),
        cred: root(),
        user: "u".into(),
        request: Box::new(request.clone()),
    });
    sim.exit(1, 0);
    sim.exit(1, 2);
    check(
        &sim.take_log(),
        "spawn 1 stage 0 x1, spawn 1 stage 1 x1, release 1",
    );
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Exited 2",
    );
    request.joiner = Joiner::Pipe;
    sim.input(Input::Submit {
        client: ClientToken(99),
        cred: root(),
        user: "u".into(),
        request: Box::new(request),
    });
    check(&sim.take_log(), "spawn 2 stage 0 x3");
}

/// Submits `a == b == c` on one host and returns its client.
fn submit_pipeline(sim: &mut Sim) -> u64 {
    submit_stages(
        sim,
        vec![vec!["a".into()], vec!["b".into()], vec!["c".into()]],
        Joiner::Pipe,
        1,
        None,
    )
}

/// Submits `stages` joined by `joiner` on `nodes` processors as root and
/// returns its client.
pub(super) fn submit_stages(
    sim: &mut Sim,
    stages: Vec<Vec<OsString>>,
    joiner: Joiner,
    nodes: u32,
    priority: Option<u32>,
) -> u64 {
    let client = sim.next_client;
    sim.next_client += 1;
    let request = JobRequest {
        stages,
        joiner,
        procs: ProcRequest::Nodes(nodes),
        priority,
        wait: false,
        memory: None,
        disk: None,
        time: None,
        env: vec![],
        cwd: "/".into(),
        inherited: Default::default(),
        batch: Default::default(),
    };
    sim.input(Input::Submit {
        client: ClientToken(client),
        cred: root(),
        user: "u".into(),
        request: Box::new(request),
    });
    client
}

fn stage_exits(sim: &mut Sim, stage: usize, status: ExitStatus) {
    sim.input(Input::RankExited {
        job: JobId(1),
        stage,
        rank: 0,
        status,
    });
}

#[test]
fn a_pipeline_producer_ended_by_sigpipe_is_a_normal_end() {
    let mut sim = Sim::new(1, 100);
    let client = submit_pipeline(&mut sim);
    sim.procs.remove(&JobId(1));
    stage_exits(&mut sim, 0, ExitStatus::Signal(13));
    stage_exits(&mut sim, 1, ExitStatus::Signal(13));
    // Nothing is killed: the last stage goes on reading what it has.
    check(&sim.take_log(), "spawn 1 stage 0 x3");
    stage_exits(&mut sim, 2, ExitStatus::Code(0));
    sim.input(Input::ProcessesGone(JobId(1)));
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Exited 0",
    );
}

#[test]
fn a_pipeline_has_the_status_of_its_last_stage() {
    let mut sim = Sim::new(1, 100);
    let client = submit_pipeline(&mut sim);
    sim.procs.remove(&JobId(1));
    stage_exits(&mut sim, 0, ExitStatus::Code(3));
    stage_exits(&mut sim, 1, ExitStatus::Code(0));
    stage_exits(&mut sim, 2, ExitStatus::Code(0));
    sim.input(Input::ProcessesGone(JobId(1)));
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Exited 0",
    );

    let mut sim = Sim::new(1, 100);
    let client = submit_pipeline(&mut sim);
    sim.procs.remove(&JobId(1));
    stage_exits(&mut sim, 0, ExitStatus::Code(0));
    stage_exits(&mut sim, 2, ExitStatus::Signal(13));
    stage_exits(&mut sim, 1, ExitStatus::Code(1));
    sim.input(Input::ProcessesGone(JobId(1)));
    // The last stage's SIGPIPE is its status, as in a shell.
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Exited 141",
    );
}

#[test]
fn a_killed_pipeline_has_the_status_of_its_last_stage() {
    let mut sim = Sim::new(1, 100);
    let client = submit_pipeline(&mut sim);
    sim.procs.remove(&JobId(1));
    sim.cmd(&root(), "kill 1");
    // The producers die of the SIGTERM; the last stage handles it and exits.
    stage_exits(&mut sim, 0, ExitStatus::Signal(15));
    stage_exits(&mut sim, 1, ExitStatus::Signal(15));
    stage_exits(&mut sim, 2, ExitStatus::Code(0));
    sim.input(Input::ProcessesGone(JobId(1)));
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Killed 0",
    );
}

#[test]
fn a_pipeline_stage_that_crashes_still_ends_the_job() {
    let mut sim = Sim::new(1, 100);
    let client = submit_pipeline(&mut sim);
    stage_exits(&mut sim, 0, ExitStatus::Signal(11));
    check(&sim.take_log(), "spawn 1 stage 0 x3, signal 1 9, release 1");
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Exited 139",
    );
}

#[test]
fn too_big_is_rejected_and_wait_waits_for_resources() {
    let mut sim = Sim::new(2, 100);
    let client = sim.submit(3, None);
    check(&sim.client(client), "rejected TooBig");
    sim.cmd(&root(), "cluster 0 limit jobs=1");
    let first = sim.submit(1, None);
    let second = sim.submit_with(root(), ProcRequest::Nodes(1), None, true);
    let third = sim.submit(1, None);
    check(&sim.client(first), "admitted 1, started 1");
    check(&sim.client(second), "waiting");
    check(&sim.client(third), "rejected Resources");
    sim.exit(1, 0);
    check(&sim.client(second), "waiting, admitted 2, started 2");
}

#[test]
fn memory_share_admits_two_and_rejects_a_third() {
    let mut sim = Sim::new(1, 100);
    sim.cmd(&root(), "queue 1 set memory=50%");
    let clients: Vec<u64> = (0..3).map(|_| sim.submit(1, Some(1))).collect();
    check(&sim.client(clients[0]), "admitted 1, started 1");
    check(&sim.client(clients[1]), "admitted 2");
    check(&sim.client(clients[2]), "rejected Resources");
}

#[test]
fn limits_kill_and_residency_demotes() {
    let mut sim = Sim::new(1, 100);
    sim.cmd(&root(), "queue 1 set cputime=2s residency=1s");
    let client = sim.submit(1, Some(1));
    let usage = |cpu_ms| Usage {
        cpu: Duration::from_millis(cpu_ms),
        memory: vec![1 << 20].into(),
        disk: 0,
        programs: 0,
    };
    sim.input(Input::Usage {
        job: JobId(1),
        usage: usage(1500),
    });
    assert_eq!(sim.core.job(JobId(1)).map(|job| job.queue), Some(2));
    sim.input(Input::Usage {
        job: JobId(1),
        usage: usage(2100),
    });
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Limit 76",
    );
    assert!(sim
        .cmd(&root(), "job 1")
        .contains("reason: killed: CPU time 2.10s over the limit of 2.00s\n"));
    assert!(sim.cmd(&root(), "job 1").contains("queues: 1,2\n"));
}

#[test]
fn memory_over_the_limit_is_killed_with_the_reason() {
    let mut sim = Sim::new(1, 100);
    sim.cmd(&root(), "cluster 0 limit memory=64M");
    sim.cmd(&root(), "queue 1 set memory=100%");
    let client = sim.submit(1, Some(1));
    sim.input(Input::Usage {
        job: JobId(1),
        usage: Usage {
            cpu: Duration::ZERO,
            memory: vec![80 << 20].into(),
            disk: 0,
            programs: 0,
        },
    });
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Limit 76",
    );
    assert!(sim
        .cmd(&root(), "job 1")
        .contains("reason: killed: memory 80M over the limit of 64M on h0\n"));
}

#[test]
fn shutdown_waits_for_running_jobs_and_kills_held_ones() {
    let mut sim = Sim::new(2, 100);
    sim.submit(1, Some(1));
    sim.submit(1, Some(1));
    sim.cmd(&root(), "suspend 2");
    sim.take_log();
    check(
        &sim.cmd(&root(), "shutdown"),
        "shutting down: waiting for 1 job to finish, killing 1 held or unscheduled job\n",
    );
    let late = sim.submit(1, Some(1));
    check(&sim.client(late), "rejected ShuttingDown");
    sim.exit(1, 0);
    check(
        &sim.take_log(),
        "signal 2 15, cont 2, release 2, release 1, exit",
    );
}

#[test]
fn sample_is_asked_each_slice_for_running_jobs() {
    let mut sim = Sim::new(1, 100);
    sim.submit(1, Some(1));
    let actions = sim.core.handle(Input::Tick, Tick(100_000));
    assert!(actions.contains(&Action::Sample(JobId(1))), "{actions:?}");
}

#[test]
fn slices_keep_a_fixed_cadence() {
    let mut sim = Sim::new(1, 100);
    sim.submit(1, Some(1));
    assert_eq!(sim.core.next_deadline(), Some(Tick(100_000)));
    sim.now = Tick(130_000);
    sim.input(Input::Tick);
    assert_eq!(sim.core.next_deadline(), Some(Tick(200_000)));
    sim.now = Tick(450_000);
    sim.input(Input::Tick);
    assert_eq!(sim.core.next_deadline(), Some(Tick(500_000)));
}

#[test]
fn status_reports_switches_and_latency() {
    let mut sim = Sim::new(1, 100);
    sim.submit(1, Some(1));
    sim.submit(1, Some(1));
    let actions = sim.core.handle(Input::Tick, Tick(100_000));
    let id = actions
        .iter()
        .find_map(|action| {
            if let Action::SwitchBegin(id) = action {
                Some(*id)
            } else {
                None
            }
        })
        .expect("a switch begins");
    sim.input(Input::SwitchMeasured {
        id,
        latency: Duration::from_micros(420),
    });
    let status = sim.cmd(&root(), "status");
    assert!(status.contains("switches: 1\n"), "{status}");
    assert!(
        status.contains("switch latency: median 0.42ms, max 0.42ms\n"),
        "{status}"
    );
}

#[test]
fn job_control_signals_are_refused_and_others_sent_alone() {
    let mut sim = Sim::new(1, 100);
    sim.submit(1, Some(1));
    sim.take_log();
    for signal in ["STOP", "CONT", "TSTP"] {
        let reply = sim.cmd(&root(), &format!("kill 1 {signal}"));
        assert!(
            reply.starts_with("error: signal") && reply.contains("use suspend 1 or resume 1"),
            "{reply}"
        );
    }
    check(&sim.cmd(&root(), "kill 1 USR1"), "job 1: sent SIGUSR1\n");
    check(&sim.take_log(), "signal 1 10");
    assert_eq!(sim.core.n_jobs(), 1, "a plain signal does not end the job");
}

#[test]
fn ctrl_z_while_waiting_holds_the_job_once_admitted() {
    let mut sim = Sim::new(1, 100);
    sim.cmd(&root(), "cluster 0 limit jobs=1");
    sim.submit(1, None);
    let waiting = sim.submit_with(root(), ProcRequest::Nodes(1), None, true);
    sim.input(Input::Hold(ClientToken(waiting)));
    sim.exit(1, 0);
    check(&sim.client(waiting), "waiting, admitted 2");
    assert_eq!(
        sim.core.job(JobId(2)).map(|job| job.state()),
        Some(JobState::Held)
    );
    sim.input(Input::Release(ClientToken(waiting)));
    check(&sim.client(waiting), "waiting, admitted 2, started 2");
}

#[test]
fn jobs_that_reserve_nothing_are_not_kept_waiting_behind_others() {
    let mut sim = Sim::new(1, 100);
    sim.cmd(&root(), "cluster 0 limit memory=1G");
    sim.cmd(&root(), "queue 2 set memory=100%");
    sim.submit(1, Some(2));
    let waiting = sim.submit_with(root(), ProcRequest::Nodes(1), Some(2), true);
    check(&sim.client(waiting), "waiting");
    // Queue 1 has no limits: its job reserves nothing a waiting job needs.
    let free = sim.submit(1, Some(1));
    check(&sim.client(free), "admitted 2, started 2");
    // Another job of queue 2 would compete with the waiting one: it waits its turn.
    let competing = sim.submit(1, Some(2));
    check(&sim.client(competing), "rejected Resources");
}

/// A stop the actuator cannot complete (or a job it
/// cannot keep stopped) kills the job with the reason, and the job that
/// waits for its host then runs.
#[test]
fn a_job_that_cannot_be_kept_stopped_is_killed_and_its_host_freed() {
    let mut sim = Sim::new(1, 100);
    let first = sim.submit(1, Some(1));
    sim.submit(1, Some(1));
    sim.take_log();
    sim.hold_confirmations = true;
    sim.advance(100);
    check(&sim.take_log(), "stop 1");
    sim.hold_confirmations = false;
    sim.unconfirmed.clear();
    sim.input(Input::StopFailed {
        job: JobId(1),
        reason: "its processes were continued from outside".into(),
    });
    check(&sim.take_log(), "signal 1 9, release 1, spawn 2 stage 0 x1");
    check(
        &sim.client(first),
        "admitted 1, started 1, ended 1 Limit 76",
    );
}

/// The job record is allocated once per admitted job, in an `Rc` (two
/// counters more), so its size is the daemon's memory per job: 472 bytes
/// make a 488-byte allocation, which glibc serves from its 496-byte class.
/// Before a job's state was a record of states (flags and options side by
/// side) it took 528 bytes, and the 560-byte class.
#[test]
#[cfg(target_pointer_width = "64")]
fn the_job_record_stays_small() {
    let size = std::mem::size_of::<Job>();
    assert!(size <= 472, "a job record takes {size} bytes");
    // What a started job carries is one allocation with the record.
    assert!(std::mem::size_of::<Life>() <= 64);
}
