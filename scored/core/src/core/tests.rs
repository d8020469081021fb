//! Scenario and property tests of the scheduling core.
//!
//! A small simulator plays the actuator: it confirms stops, kills processes
//! on SIGKILL (and on SIGTERM once they run), and reports exits. Scenarios
//! assert on the rendered timeline of actions; property tests drive random
//! event sequences and check the invariants after every step.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::cluster::{Cluster, Host};
use crate::command::parse_line;
use crate::ids::ClusterId;
use crate::job::{ExitStatus, Joiner, Life, ProcRequest, Usage};
use crate::units::CpuSet;

fn topology(n_hosts: u32) -> Topology {
    let mut topo = Topology::default();
    let mut cluster = Cluster {
        id: ClusterId(0),
        name: "c".into(),
        cpugen: "c".into(),
        speed: 1.0,
        cores: 1,
        hosts: Vec::new(),
    };
    for idx in 0..n_hosts {
        topo.hosts.push(Host {
            id: HostId(idx),
            name: format!("h{idx}"),
            cluster: ClusterId(0),
            cpus: CpuSet::from_cpus([idx % 2]),
            cores: 1,
            speed: 1.0,
            cpugen: "c".into(),
            memory: 1 << 30,
            watchfs: Vec::new(),
            groups: Vec::new(),
        });
        cluster.hosts.push(HostId(idx));
    }
    topo.clusters.push(cluster);
    topo
}

fn root() -> Cred {
    Cred {
        pid: 1,
        uid: 0,
        gid: 0,
        groups: vec![],
    }
}

fn user(uid: u32) -> Cred {
    Cred {
        pid: 1,
        uid,
        gid: uid,
        groups: vec![],
    }
}

/// What the simulated processes of a job are doing.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Procs {
    Running,
    Stopped,
    /// Stopped with a SIGTERM pending: it dies as soon as it is continued.
    StoppedDoomed,
}

#[derive(Clone)]
struct Sim {
    core: Core,
    now: Tick,
    log: Vec<String>,
    procs: BTreeMap<JobId, (Procs, u32)>,
    /// Stop confirmations held back (to test switches in flight).
    hold_confirmations: bool,
    unconfirmed: Vec<JobId>,
    /// Jobs that ignore SIGTERM.
    stubborn: Vec<JobId>,
    clients: BTreeMap<u64, Vec<String>>,
    next_client: u64,
}

impl Sim {
    fn new(n_hosts: u32, slice_ms: u64) -> Sim {
        let config = CoreConfig {
            timeslice: Duration::from_millis(slice_ms),
            kill_grace: Duration::from_millis(1000),
            daemon_uid: 0,
            ..CoreConfig::default()
        };
        Sim {
            core: Core::new(config, topology(n_hosts), vec![Some(1 << 30)]),
            now: Tick(0),
            log: Vec::new(),
            procs: BTreeMap::new(),
            hold_confirmations: false,
            unconfirmed: Vec::new(),
            stubborn: Vec::new(),
            clients: BTreeMap::new(),
            next_client: 1,
        }
    }

    fn input(&mut self, input: Input) {
        let mut inputs = VecDeque::from([input]);
        while let Some(input) = inputs.pop_front() {
            let actions = self.core.handle(input, self.now);
            self.core.check_invariants();
            self.apply(actions, &mut inputs);
        }
    }

    fn apply(&mut self, actions: Vec<Action>, inputs: &mut VecDeque<Input>) {
        for action in actions {
            match action {
                Action::Spawn(plan) => {
                    self.log.push(format!(
                        "spawn {} stage {} x{}",
                        plan.job,
                        plan.first_stage,
                        plan.procs.len()
                    ));
                    self.procs
                        .insert(plan.job, (Procs::Running, plan.procs.len() as u32));
                }
                Action::Stop(job) => {
                    self.log.push(format!("stop {job}"));
                    let entry = self
                        .procs
                        .get_mut(&job)
                        .expect("stopping a job with processes");
                    assert_eq!(entry.0, Procs::Running, "job {job} stopped twice");
                    entry.0 = Procs::Stopped;
                    if self.hold_confirmations {
                        self.unconfirmed.push(job);
                    } else {
                        inputs.push_back(Input::Stopped(job));
                    }
                }
                Action::Continue(job) => {
                    self.log.push(format!("cont {job}"));
                    let entry = self
                        .procs
                        .get_mut(&job)
                        .expect("continuing a job with processes");
                    match entry.0 {
                        Procs::Stopped => entry.0 = Procs::Running,
                        Procs::StoppedDoomed => self.kill_all(job, 15, inputs),
                        Procs::Running => panic!("job {job} continued while running"),
                    }
                }
                Action::Signal { job, signal } => {
                    self.log.push(format!("signal {job} {signal}"));
                    let Some(entry) = self.procs.get_mut(&job) else {
                        continue;
                    };
                    match (signal, entry.0) {
                        (9, _) => self.kill_all(job, 9, inputs),
                        (15, _) if self.stubborn.contains(&job) => {}
                        (15, Procs::Running) => self.kill_all(job, 15, inputs),
                        (15, _) => entry.0 = Procs::StoppedDoomed,
                        _ => {}
                    }
                }
                Action::Sample(_) => {}
                Action::Release(job) => self.log.push(format!("release {job}")),
                Action::SwitchBegin(_) | Action::SwitchEnd(_) => {}
                Action::Notify(notice) => {
                    let Notice { client, event } = *notice;
                    let text = match &event {
                        ClientEvent::Waiting(_) => "waiting".to_string(),
                        ClientEvent::Admitted { job, .. } => format!("admitted {job}"),
                        ClientEvent::Rejected { kind, .. } => format!("rejected {kind:?}"),
                        ClientEvent::Started(job) => format!("started {job}"),
                        ClientEvent::Held(job) => format!("held {job}"),
                        ClientEvent::Answer(reply) => format!("answer {}", reply.to_text()),
                        ClientEvent::Ended(ending) => {
                            format!("ended {} {:?} {}", ending.job, ending.kind, ending.status)
                        }
                    };
                    self.clients.entry(client.0).or_default().push(text);
                }
                Action::Exit => self.log.push("exit".into()),
            }
        }
    }

    fn kill_all(&mut self, job: JobId, signal: i32, inputs: &mut VecDeque<Input>) {
        if let Some((_, n)) = self.procs.remove(&job) {
            for rank in 0..n {
                inputs.push_back(Input::RankExited {
                    job,
                    stage: 0,
                    rank,
                    status: ExitStatus::Signal(signal),
                });
            }
            inputs.push_back(Input::ProcessesGone(job));
        }
    }

    fn confirm_stops(&mut self) {
        for job in std::mem::take(&mut self.unconfirmed) {
            self.input(Input::Stopped(job));
        }
    }

    fn submit_with(
        &mut self,
        cred: Cred,
        procs: ProcRequest,
        queue: Option<u32>,
        wait: bool,
    ) -> u64 {
        self.submit_timed(cred, procs, queue, wait, None)
    }

    /// Submits a job with a `-time` estimate.
    fn submit_timed(
        &mut self,
        cred: Cred,
        procs: ProcRequest,
        queue: Option<u32>,
        wait: bool,
        time: Option<Duration>,
    ) -> u64 {
        let client = self.next_client;
        self.next_client += 1;
        let request = JobRequest {
            stages: vec![vec![OsString::from("prog")]],
            joiner: Joiner::Sequence,
            procs,
            priority: queue,
            wait,
            memory: None,
            disk: None,
            time,
            env: vec![],
            cwd: OsString::from("/"),
            inherited: Default::default(),
        };
        self.input(Input::Submit {
            client: ClientToken(client),
            cred,
            user: "u".into(),
            request: Box::new(request),
        });
        client
    }

    fn submit(&mut self, nodes: u32, queue: Option<u32>) -> u64 {
        self.submit_with(root(), ProcRequest::Nodes(nodes), queue, false)
    }

    /// Every rank of the job exits with `code`.
    fn exit(&mut self, job: u64, code: i32) {
        let job = JobId(job);
        let (state, n) = self.procs.remove(&job).expect("job has processes");
        assert_eq!(state, Procs::Running, "a stopped job cannot exit");
        for rank in 0..n {
            self.input(Input::RankExited {
                job,
                stage: 0,
                rank,
                status: ExitStatus::Code(code),
            });
        }
        self.input(Input::ProcessesGone(job));
    }

    fn advance(&mut self, ms: u64) {
        let end = Tick(self.now.0 + ms * 1000);
        while let Some(deadline) = self.core.next_deadline() {
            if deadline > end {
                break;
            }
            self.now = deadline.max(self.now);
            self.input(Input::Tick);
        }
        self.now = end;
    }

    fn cmd(&mut self, cred: &Cred, line: &str) -> String {
        let command = parse_line(line).expect("valid command").expect("a command");
        let console = ClientToken(u64::MAX);
        let input = Input::Console {
            client: console,
            cred: cred.clone(),
            command: Box::new(command),
        };
        let mut reply = None;
        let mut actions = Vec::new();
        for action in self.core.handle(input, self.now) {
            match action {
                Action::Notify(notice)
                    if notice.client == console
                        && matches!(notice.event, ClientEvent::Answer(_)) =>
                {
                    if let ClientEvent::Answer(answer) = notice.event {
                        reply = Some(answer);
                    }
                }
                action => actions.push(action),
            }
        }
        let reply = reply.expect("a console command is answered");
        self.core.check_invariants();
        let mut inputs = VecDeque::new();
        self.apply(actions, &mut inputs);
        while let Some(input) = inputs.pop_front() {
            self.input(input);
        }
        reply.to_text()
    }

    fn take_log(&mut self) -> String {
        std::mem::take(&mut self.log).join(", ")
    }

    fn running(&self) -> Vec<u64> {
        self.procs
            .iter()
            .filter(|(_, (state, _))| *state == Procs::Running)
            .map(|(job, _)| job.0)
            .collect()
    }

    fn client(&self, client: u64) -> String {
        self.clients
            .get(&client)
            .map(|events| events.join(", "))
            .unwrap_or_default()
    }
}

fn check(actual: &str, expected: &str) {
    assert_eq!(
        actual, expected,
        "\n--- expected ---\n{expected}\n--- actual ---\n{actual}\n"
    );
}

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
fn many_jobs_that_ran_all_move_to_the_back() {
    // 20 hosts, 40 one-host jobs: more jobs run in a slice than a rotation
    // compares one by one (FEW_RAN), so it looks them up; either way the
    // two halves alternate.
    const { assert!(20 > FEW_RAN) };
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
fn submit_stages(
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
        memory: vec![1 << 20],
        disk: 0,
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
            memory: vec![80 << 20],
            disk: 0,
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

// ----- properties -----

#[derive(Debug, Clone)]
enum Op {
    Submit { nodes: u32, queue: u32 },
    Exit { pick: usize },
    Advance { ms: u64 },
    Hold { pick: usize },
    Release { pick: usize },
    Toggle { queue: u32 },
    Kill { pick: usize },
    Confirm,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u32..=4, 0u32..3).prop_map(|(nodes, queue)| Op::Submit { nodes, queue }),
        2 => any::<usize>().prop_map(|pick| Op::Exit { pick }),
        4 => (1u64..400).prop_map(|ms| Op::Advance { ms }),
        1 => any::<usize>().prop_map(|pick| Op::Hold { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        1 => (0u32..3).prop_map(|queue| Op::Toggle { queue }),
        1 => any::<usize>().prop_map(|pick| Op::Kill { pick }),
        2 => Just(Op::Confirm),
    ]
}

fn pick(sim: &Sim, idx: usize) -> Option<JobId> {
    let jobs: Vec<JobId> = sim.core.jobs().map(|job| job.id).collect();
    (!jobs.is_empty()).then(|| jobs[idx % jobs.len()])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Never two jobs on one host (checked by `check_invariants` after every
    /// input), stopped jobs are only continued, and everything ends.
    #[test]
    fn random_events_keep_the_invariants(ops in proptest::collection::vec(op(), 1..80), delayed in any::<bool>()) {
        let mut sim = Sim::new(4, 100);
        sim.hold_confirmations = delayed;
        for op in ops {
            match op {
                Op::Submit { nodes, queue } => { sim.submit(nodes, Some(queue)); }
                Op::Exit { pick: idx } => {
                    if let Some(job) = pick(&sim, idx) {
                        if sim.procs.get(&job).is_some_and(|(state, _)| *state == Procs::Running) {
                            sim.exit(job.0, 0);
                        }
                    }
                }
                Op::Advance { ms } => sim.advance(ms),
                Op::Hold { pick: idx } => if let Some(job) = pick(&sim, idx) { sim.cmd(&root(), &format!("suspend {job}")); },
                Op::Release { pick: idx } => if let Some(job) = pick(&sim, idx) { sim.cmd(&root(), &format!("resume {job}")); },
                Op::Toggle { queue } => {
                    let active = sim.core.queues()[queue as usize].activated;
                    sim.cmd(&root(), &format!("queue {queue} {}", if active { "deactivate" } else { "activate" }));
                }
                Op::Kill { pick: idx } => if let Some(job) = pick(&sim, idx) { sim.cmd(&root(), &format!("kill {job}")); },
                Op::Confirm => sim.confirm_stops(),
            }
        }
        // Drain: confirm, release every hold, activate every queue, and let
        // every job run to its end; nothing may be left stopped forever.
        sim.hold_confirmations = false;
        sim.confirm_stops();
        for queue in 0..3 { sim.cmd(&root(), &format!("queue {queue} activate")); }
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
        prop_assert!(sim.procs.is_empty(), "no process is left: {:?}", sim.procs);
    }

    /// In gang queues with no holds, every job runs within (number of jobs) slices.
    #[test]
    fn every_gang_job_runs_within_n_slices(sizes in proptest::collection::vec(1u32..=4, 1..12)) {
        let mut sim = Sim::new(4, 100);
        for nodes in &sizes { sim.submit(*nodes, Some(1)); }
        let n = sizes.len() as u64;
        let mut last_ran: BTreeMap<u64, u64> = BTreeMap::new();
        for slice in 0..(4 * n) {
            for job in sim.running() { last_ran.insert(job, slice); }
            for job in sim.core.jobs() {
                let since = slice - last_ran.get(&job.id.0).copied().map_or(0, |s| s.min(slice));
                prop_assert!(last_ran.contains_key(&job.id.0) || slice < n, "job {} never ran in {} slices", job.id, slice);
                prop_assert!(since <= n, "job {} waited {} slices with {} jobs", job.id, since, n);
            }
            sim.advance(100);
        }
    }

    /// A waiting job is always kept out by a running job of its own or a
    /// higher queue: lower queues only use hosts that higher ones cannot.
    #[test]
    fn priorities_are_respected(jobs in proptest::collection::vec((1u32..=2, 0u32..3), 1..10)) {
        let mut sim = Sim::new(2, 100);
        for (nodes, queue) in &jobs { sim.submit(*nodes, Some(*queue)); }
        for _ in 0..20 {
            sim.advance(100);
            let running: Vec<&Job> = sim.core.jobs().filter(|job| job.phase() == Phase::Running).collect();
            for waiting in sim.core.jobs().filter(|job| job.phase() != Phase::Running) {
                let blocker = running.iter().find(|runner| {
                    runner.queue <= waiting.queue && runner.hosts.iter().any(|host| waiting.hosts.contains(host))
                });
                // A job of an exclusive queue that has not started has no
                // hosts yet: it is kept out by an earlier job of its queue
                // (first come, first served) or by too few hosts free of
                // its own and higher queues.
                let unbound_blocked = waiting.hosts.is_empty() && {
                    let held: usize = running.iter().filter(|runner| runner.queue <= waiting.queue).map(|runner| runner.hosts.len()).sum();
                    let earlier = sim.core.jobs().any(|other| other.queue == waiting.queue && other.id < waiting.id && !other.started());
                    earlier || 2 - held < waiting.layout.len()
                };
                prop_assert!(blocker.is_some() || unbound_blocked,
                    "job {} (queue {}) waits though no job of its queue or a higher one holds its hosts",
                    waiting.id, waiting.queue);
            }
        }
    }
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
    check(&sim.cmd(&root(), "kill 1 USR1"), "job 1: sent signal 10\n");
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

// ----- exclusive queues: hosts chosen at start, -time, backfill, no starvation -----

fn timed(sim: &mut Sim, nodes: u32, queue: u32, ms: u64) -> u64 {
    sim.submit_timed(
        root(),
        ProcRequest::Nodes(nodes),
        Some(queue),
        false,
        Some(Duration::from_millis(ms)),
    )
}

fn hosts_of(sim: &Sim, job: u64) -> Vec<u32> {
    sim.core
        .job(JobId(job))
        .map(|job| job.hosts.iter().map(|host| host.0).collect())
        .unwrap_or_default()
}

#[test]
fn exclusive_jobs_get_their_hosts_when_they_start() {
    let mut sim = Sim::new(4, 100);
    sim.submit(2, Some(0));
    sim.submit(1, Some(0));
    sim.submit(1, Some(0));
    check(
        &sim.take_log(),
        "spawn 1 stage 0 x2, spawn 2 stage 0 x1, spawn 3 stage 0 x1",
    );
    assert_eq!(hosts_of(&sim, 1), vec![0, 1]);
    sim.exit(2, 0);
    sim.exit(1, 0);
    check(&sim.take_log(), "release 2, release 1");
    // Hosts 0, 1 and 2 are free, 3 is busy: a job admitted now waits for
    // no particular host; a 3-host job takes the three free ones.
    sim.submit(3, Some(0));
    check(&sim.take_log(), "spawn 4 stage 0 x3");
    assert_eq!(hosts_of(&sim, 4), vec![0, 1, 2]);
    // A gang job still has its hosts from admission.
    sim.submit(1, Some(1));
    assert_eq!(hosts_of(&sim, 5).len(), 1);
}

#[test]
fn exclusive_queue_without_backfill_is_first_come_first_served() {
    let mut sim = Sim::new(2, 100);
    sim.submit(1, Some(0));
    sim.submit(2, Some(0));
    sim.submit(1, Some(0));
    // Job 3 would fit on the free host, but job 2 came first.
    check(&sim.take_log(), "spawn 1 stage 0 x1");
    assert!(hosts_of(&sim, 2).is_empty() && hosts_of(&sim, 3).is_empty());
    // A lower gang queue still uses the idle host (space partitioning)...
    sim.submit(1, Some(1));
    check(&sim.take_log(), "spawn 4 stage 0 x1");
    // ...and gives it up at once when the exclusive job can start.
    sim.exit(1, 0);
    check(&sim.take_log(), "release 1, stop 4, spawn 2 stage 0 x2");
    sim.exit(2, 0);
    check(&sim.take_log(), "release 2, cont 4, spawn 3 stage 0 x1");
}

#[test]
fn time_limit_ends_the_job_with_status_76_and_the_reason() {
    let mut sim = Sim::new(1, 100);
    let client = timed(&mut sim, 1, 0, 250);
    sim.advance(249);
    check(&sim.take_log(), "spawn 1 stage 0 x1");
    sim.advance(1);
    check(&sim.take_log(), "signal 1 9, release 1");
    check(
        &sim.client(client),
        "admitted 1, started 1, ended 1 Limit 76",
    );
    assert!(sim
        .cmd(&root(), "job 1")
        .contains("reason: killed: run time reached the time limit of 250ms (-time)\n"));
}

#[test]
fn time_limit_counts_only_the_time_a_job_runs() {
    // Two full-width gang jobs share the host: each runs half the time.
    let mut sim = Sim::new(1, 100);
    let first = timed(&mut sim, 1, 1, 250);
    sim.submit(1, Some(1));
    sim.advance(400);
    assert_eq!(
        sim.core.n_jobs(),
        2,
        "200ms of running each: no limit reached"
    );
    sim.advance(100);
    // Job 1 ran 0-100, 200-300, 400-450: its 250ms are up at 450.
    check(
        &sim.client(first),
        "admitted 1, started 1, ended 1 Limit 76",
    );
    assert_eq!(sim.now, Tick(500_000));
}

#[test]
fn backfill_starts_a_short_job_in_the_hole_without_delaying_the_wide_one() {
    let mut sim = Sim::new(4, 100);
    check(
        &sim.cmd(&root(), "queue 0 set backfill=on"),
        "queue 0: mode=exclusive cputime=none residency=none memory=none disk=none group=none backfill=on\n",
    );
    timed(&mut sim, 2, 0, 1050); // job 1: hosts 0-1, at most until 1050
    timed(&mut sim, 4, 0, 1000); // job 2: reserved at 1050
    timed(&mut sim, 1, 0, 2000); // job 3: would delay job 2
    timed(&mut sim, 2, 0, 950); // job 4: ends by 1050, backfills
    check(&sim.take_log(), "spawn 1 stage 0 x2, spawn 4 stage 0 x2");
    sim.advance(900);
    sim.exit(4, 0);
    check(&sim.take_log(), "release 4");
    sim.advance(100);
    sim.exit(1, 0);
    check(&sim.take_log(), "release 1, spawn 2 stage 0 x4");
    assert_eq!(
        sim.now,
        Tick(1_000_000),
        "the wide job starts when job 1 ends"
    );
    // Without backfill, job 4 would have waited behind job 2.
    let mut fcfs = Sim::new(4, 100);
    timed(&mut fcfs, 2, 0, 1000);
    timed(&mut fcfs, 4, 0, 1000);
    timed(&mut fcfs, 2, 0, 900);
    check(&fcfs.take_log(), "spawn 1 stage 0 x2");
}

#[test]
fn queues_listing_shows_backfill() {
    let mut sim = Sim::new(1, 100);
    sim.cmd(&root(), "queue 0 set backfill=on");
    let listing = sim.cmd(&root(), "queues");
    let header = listing.lines().next().unwrap_or_default().to_string();
    assert!(header.contains("BACKFILL"), "{listing}");
    let column = header.find("BACKFILL").unwrap_or(0);
    let cell = |row: usize| -> String {
        let line = listing.lines().nth(row).unwrap_or_default();
        line.get(column..)
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(
        (cell(1), cell(2)),
        ("on".to_string(), "off".to_string()),
        "{listing}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// No starvation in an exclusive queue: with jobs arriving all the time
    /// and running at most their estimate, every job starts within a bound.
    /// Without backfill the queue is exactly first come, first served, and
    /// job i starts by the time every earlier job could have run one after
    /// another; with backfill, job i starts at most one longest estimate
    /// after it reaches the head of the queue.
    #[test]
    fn exclusive_jobs_never_starve(
        jobs in proptest::collection::vec((1u32..=4, 1u64..=5, 0u64..=3, 0u64..=3), 1..25),
        backfill in any::<bool>(),
    ) {
        const UNIT: u64 = 100; // ms
        let mut sim = Sim::new(4, 100);
        if backfill { sim.cmd(&root(), "queue 0 set backfill=on"); }
        // (id, submit, run, estimate, start)
        let mut table: Vec<(u64, u64, u64, u64, Option<u64>)> = Vec::new();
        let mut next_submit = 0u64;
        let mut pending = jobs.iter().copied().collect::<VecDeque<_>>();
        let max_est = jobs.iter().map(|(_, run, slack, _)| (run + slack) * UNIT + 10).max().unwrap_or(0);
        let now_ms = |sim: &Sim| sim.now.0 / 1000;
        for _ in 0..100_000 {
            while let Some(&(nodes, run, slack, gap)) = pending.front() {
                if now_ms(&sim) < next_submit { break; }
                pending.pop_front();
                let estimate = (run + slack) * UNIT + 10;
                timed(&mut sim, nodes, 0, estimate);
                table.push((table.len() as u64 + 1, now_ms(&sim), run * UNIT, estimate, None));
                next_submit = now_ms(&sim) + gap * UNIT;
            }
            for row in table.iter_mut() {
                if row.4.is_none() && sim.procs.contains_key(&JobId(row.0)) {
                    row.4 = Some(now_ms(&sim));
                }
            }
            let due: Vec<u64> = table.iter()
                .filter(|row| row.4.is_some_and(|start| now_ms(&sim) >= start + row.2))
                .filter(|row| sim.procs.contains_key(&JobId(row.0)))
                .map(|row| row.0).collect();
            for job in due { sim.exit(job, 0); }
            if pending.is_empty() && sim.core.n_jobs() == 0 { break; }
            sim.advance(10);
        }
        prop_assert_eq!(sim.core.n_jobs(), 0, "every job ends");
        let mut previous_start = 0;
        let mut earlier_estimates = 0;
        for &(id, submit, _, estimate, start) in &table {
            let start = start.expect("every job starts");
            if backfill {
                let head_at = submit.max(previous_start);
                prop_assert!(start <= head_at + max_est + 10,
                    "job {} reached the head at {} but started at {}", id, head_at, start);
            } else {
                prop_assert!(start >= previous_start, "job {} started before an earlier job", id);
                prop_assert!(start <= submit + earlier_estimates + 10,
                    "job {} submitted at {} started at {}", id, submit, start);
            }
            previous_start = previous_start.max(start);
            earlier_estimates += estimate;
        }
    }
}

/// The workload built to starve: a full-width job behind a running one,
/// then a stream of one-host jobs. Space partitioning alone would start
/// the small jobs on the free hosts forever; first come, first served
/// starts the wide job as soon as the running job ends.
#[test]
fn a_stream_of_small_jobs_cannot_starve_a_wide_one() {
    for backfill in [false, true] {
        let mut sim = Sim::new(4, 100);
        if backfill {
            sim.cmd(&root(), "queue 0 set backfill=on");
        }
        timed(&mut sim, 1, 0, 1000);
        timed(&mut sim, 4, 0, 1000);
        for _ in 0..50 {
            // Short jobs that could always fit on the 3 free hosts, each
            // longer than what is left of job 1.
            let client = timed(&mut sim, 1, 0, 5000);
            let _ = client;
            sim.advance(100);
            let running = sim.running();
            for job in running {
                if job > 2 {
                    sim.exit(job, 0);
                }
            }
            if sim.core.job(JobId(2)).is_some_and(|job| job.started()) {
                break;
            }
            if sim.now >= Tick(1_000_000) {
                sim.exit(1, 0);
            }
        }
        assert!(
            sim.core.job(JobId(2)).is_some_and(|job| job.started()),
            "the wide job started (backfill {backfill})"
        );
        assert!(sim.now <= Tick(1_100_000), "at {:?}", sim.now);
    }
}

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
fn observe(sim: &mut Sim) -> String {
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

fn apply_op(sim: &mut Sim, op: &Op) {
    match *op {
        Op::Submit { nodes, queue } => {
            sim.submit(nodes, Some(queue));
        }
        Op::Exit { pick: idx } => {
            if let Some(job) = pick(sim, idx) {
                if sim
                    .procs
                    .get(&job)
                    .is_some_and(|(state, _)| *state == Procs::Running)
                {
                    sim.exit(job.0, 0);
                }
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

/// A daemon that is not root cannot change credentials, so it runs only
/// its own user's jobs (root's too are refused, as they would run as the
/// daemon's user); the refusal names that user.
#[test]
fn a_daemon_that_is_not_root_runs_only_its_own_users_jobs() {
    let config = CoreConfig {
        daemon_uid: 1000,
        daemon_user: "alice".into(),
        ..CoreConfig::default()
    };
    let mut core = Core::new(config, topology(1), vec![Some(1 << 30)]);
    let mut submit = |client: u64, cred: Cred| {
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
        };
        let actions = core.handle(
            Input::Submit {
                client: ClientToken(client),
                cred,
                user: "u".into(),
                request: Box::new(request),
            },
            Tick(0),
        );
        core.check_invariants();
        actions
            .into_iter()
            .find_map(|action| match action {
                Action::Notify(notice) if notice.client == ClientToken(client) => {
                    Some(notice.event)
                }
                _ => None,
            })
            .expect("the client is told")
    };
    let refused = ClientEvent::Rejected {
        kind: Rejection::Permission,
        reason: "this scored runs as alice and can only run that user's jobs".into(),
    };
    assert_eq!(submit(1, user(1001)), refused);
    assert_eq!(submit(2, root()), refused);
    assert!(matches!(
        submit(3, user(1000)),
        ClientEvent::Admitted { job: JobId(1), .. }
    ));
}

/// The start-up script's lines are console inputs; every line is
/// tried, each refusal names the script and line and changes nothing, and
/// what accepted lines ask of the shell is returned, not dropped.
#[test]
fn a_start_up_script_runs_as_console_inputs_and_keeps_its_actions() {
    let mut sim = Sim::new(1, 100);
    let script = "# policy\n\
                  queue 9 deactivate\n\
                  shutdown\n\
                  restart\n\
                  frobnicate\n\
                  queue 1 deactivate\n";
    let run = sim.core.run_script(&root(), "rc", script, sim.now);
    let errors: Vec<String> = run.errors.iter().map(ToString::to_string).collect();
    check(
        &errors.join("\n"),
        "rc:2: no queue 9: queues are 0 to 2\n\
         rc:3: shutdown cannot be used in a start-up script\n\
         rc:4: restart cannot be used in a start-up script\n\
         rc:5: unknown command 'frobnicate' in 'frobnicate': help lists the commands",
    );
    assert!(matches!(run.errors[0].problem, ScriptProblem::Refused(_)));
    assert!(matches!(run.errors[3].problem, ScriptProblem::Syntax(_)));
    assert_eq!(run.actions, Vec::new(), "no job, nothing to do");
    let client = sim.submit(1, Some(1));
    sim.advance(1000);
    check(&sim.take_log(), "");
    check(&sim.client(client), "admitted 1");
    // A script run while a job runs: its stop comes back as an action.
    let run = sim
        .core
        .run_script(&root(), "rc", "queue 1 activate\n", sim.now);
    assert!(run.errors.is_empty());
    let mut inputs = VecDeque::new();
    sim.apply(run.actions, &mut inputs);
    check(&sim.take_log(), "spawn 1 stage 0 x1");
    let run = sim
        .core
        .run_script(&root(), "rc", "queue 1 deactivate\n", sim.now);
    sim.apply(run.actions, &mut inputs);
    check(&sim.take_log(), "stop 1");
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
    let text = include_str!("testdata/snapshot-before-job-states.json");
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
    let text = include_str!("testdata/snapshot-before-job-states.json");
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
