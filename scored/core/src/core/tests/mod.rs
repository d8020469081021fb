//! Scenario and property tests of the scheduling core.
//!
//! A small simulator plays the actuator: it confirms stops, kills processes
//! on SIGKILL (and on SIGTERM once they run), and reports exits. Scenarios
//! assert on the rendered timeline of actions; property tests drive random
//! event sequences and check the invariants after every step.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::OsString;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::cluster::{Cluster, Host};
use crate::ids::{ClusterId, HostId};
use crate::job::{ExitStatus, Joiner, Life, ProcRequest, Usage};
use scored_proto::command::{parse_line, QueueShare};
use scored_proto::units::CpuSet;

mod backlog;
mod budgets;
mod checkpoint;
mod exclusive;
mod fair;
mod placement;
mod properties;
mod replay;
mod restore;
mod scenarios;
mod share;
mod startup;
mod takeover;

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
enum SimProcs {
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
    procs: BTreeMap<JobId, (SimProcs, u32)>,
    /// Stop confirmations held back (to test switches in flight).
    hold_confirmations: bool,
    unconfirmed: Vec<JobId>,
    /// Jobs that ignore SIGTERM.
    stubborn: Vec<JobId>,
    /// Jobs whose processes have all ended, the end not yet fed to the
    /// core: it may still stop or continue them, as the daemon's core may
    /// before the actuator's report of their end reaches it.
    dying: BTreeSet<JobId>,
    clients: BTreeMap<u64, Vec<String>>,
    next_client: u64,
    /// Every input fed to the core, with its tick, once recording is on
    /// (as the daemon's log keeps them).
    tape: Option<Vec<(Tick, InputRecord)>>,
}

impl Sim {
    fn new(n_hosts: u32, slice_ms: u64) -> Sim {
        Sim::on(topology(n_hosts), vec![Some(1 << 30)], slice_ms)
    }

    /// A core on `topology`, with per-host memory limits by cluster.
    fn on(topology: Topology, memory_limits: Vec<Option<u64>>, slice_ms: u64) -> Sim {
        let config = CoreConfig {
            timeslice: Duration::from_millis(slice_ms),
            kill_grace: Duration::from_millis(1000),
            daemon_uid: 0,
            ..CoreConfig::default()
        };
        Sim {
            core: Core::new(config, topology, memory_limits),
            now: Tick(0),
            log: Vec::new(),
            procs: BTreeMap::new(),
            hold_confirmations: false,
            unconfirmed: Vec::new(),
            stubborn: Vec::new(),
            dying: BTreeSet::new(),
            clients: BTreeMap::new(),
            next_client: 1,
            tape: None,
        }
    }

    /// Feeds one input to the core, recording it on the tape if one runs.
    fn handle(&mut self, input: Input) -> Vec<Action> {
        if let Some(tape) = &mut self.tape {
            tape.push((self.now, InputRecord::of(&input)));
        }
        let gone = match input {
            Input::ProcessesGone(job) | Input::ProcessesLost { job, .. } => Some(job),
            _ => None,
        };
        let actions = self.core.handle(input, self.now);
        if let Some(job) = gone {
            self.dying.remove(&job);
        }
        actions
    }

    fn input(&mut self, input: Input) {
        let mut inputs = VecDeque::from([input]);
        while let Some(input) = inputs.pop_front() {
            let actions = self.handle(input);
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
                        .insert(plan.job, (SimProcs::Running, plan.procs.len() as u32));
                }
                Action::Stop(job) => {
                    self.log.push(format!("stop {job}"));
                    if self.dying.contains(&job) {
                        continue;
                    }
                    let entry = self
                        .procs
                        .get_mut(&job)
                        .expect("stopping a job with processes");
                    assert_eq!(entry.0, SimProcs::Running, "job {job} stopped twice");
                    entry.0 = SimProcs::Stopped;
                    if self.hold_confirmations {
                        self.unconfirmed.push(job);
                    } else {
                        inputs.push_back(Input::Stopped(job));
                    }
                }
                Action::Continue(job) => {
                    self.log.push(format!("cont {job}"));
                    if self.dying.contains(&job) {
                        continue;
                    }
                    let entry = self
                        .procs
                        .get_mut(&job)
                        .expect("continuing a job with processes");
                    match entry.0 {
                        SimProcs::Stopped => entry.0 = SimProcs::Running,
                        SimProcs::StoppedDoomed => self.kill_all(job, 15, inputs),
                        SimProcs::Running => panic!("job {job} continued while running"),
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
                        (15, SimProcs::Running) => self.kill_all(job, 15, inputs),
                        (15, _) => entry.0 = SimProcs::StoppedDoomed,
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
                        ClientEvent::Accepted { job, count, waits } => match waits {
                            Some(why) => format!("accepted {job} x{count} ({why})"),
                            None => format!("accepted {job} x{count}"),
                        },
                        ClientEvent::Admitted { job, .. } => format!("admitted {job}"),
                        ClientEvent::Rejected { kind, .. } => format!("rejected {kind:?}"),
                        ClientEvent::Started(job) => format!("started {job}"),
                        ClientEvent::Held(job) => format!("held {job}"),
                        ClientEvent::Reattached {
                            job,
                            started,
                            held,
                            ranks,
                        } => {
                            format!("reattached {job} started={started} held={held} ranks={ranks}")
                        }
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
            self.dying.insert(job);
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
        let (client, input) = self.submission(cred, procs, queue, wait, time);
        self.input(input);
        client
    }

    /// The input that submits a job with a `-time` estimate, from a new
    /// client (returned).
    fn submission(
        &mut self,
        cred: Cred,
        procs: ProcRequest,
        queue: Option<u32>,
        wait: bool,
        time: Option<Duration>,
    ) -> (u64, Input) {
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
            batch: Default::default(),
        };
        let input = Input::Submit {
            client: ClientToken(client),
            cred,
            user: "u".into(),
            request: Box::new(request),
        };
        (client, input)
    }

    fn submit(&mut self, nodes: u32, queue: Option<u32>) -> u64 {
        self.submit_with(root(), ProcRequest::Nodes(nodes), queue, false)
    }

    /// Every rank of the job exits with `code`.
    fn exit(&mut self, job: u64, code: i32) {
        let job = JobId(job);
        let (state, n) = self.procs.remove(&job).expect("job has processes");
        self.dying.insert(job);
        assert_eq!(state, SimProcs::Running, "a stopped job cannot exit");
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

    /// Ends job `job` with status 0 if its processes are running (a
    /// stopped job cannot exit).
    fn exit_if_running(&mut self, job: JobId) {
        if self
            .procs
            .get(&job)
            .is_some_and(|(state, _)| *state == SimProcs::Running)
        {
            self.exit(job.0, 0);
        }
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
        for action in self.handle(input) {
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
            .filter(|(_, (state, _))| *state == SimProcs::Running)
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
