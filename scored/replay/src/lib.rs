//! Replays a workload trace through the real scheduling core with a virtual
//! clock (sc_replay(1)).
//!
//! The jobs of a Standard Workload Format trace ([`swf`]) are submitted to a
//! [`Core`] — the very code scored runs — at their submit times; the core's
//! actions go to a simulated actuator ([`actuator`]) in which a job's work
//! progresses only while it runs, and what the actuator reports goes back
//! to the core, as in the daemon's event loop. The clock jumps from one
//! event to the next: an arrival, a job finishing its work, a stop taking
//! effect, or the next time the core says a tick could change what runs
//! ([`Core::next_decision`]); a slice boundary at which nothing needs
//! deciding costs nothing.
//!
//! How a trace becomes jobs: processors (allocated, else requested) become
//! `nodes=N`; the run time is the work; the requested time becomes the
//! `-time` estimate, raised to the run time where the job ran longer than
//! it asked (so that no job is killed by a limit it did not have); the
//! requested memory (else the used memory) per processor becomes
//! `memory=`; the SWF queue goes to a scored queue through the queue map
//! (by default every job to queue 1). Jobs with an unknown run time or
//! processor count, and jobs the core rejects (too big for every cluster),
//! are skipped with the reason.
//!
//! Pure: no clock, no file, no process; [`metrics`] turns the outcome
//! into figures.
#![forbid(unsafe_code)]

pub mod actuator;
pub mod generate;
pub mod metrics;
pub mod plot;
pub mod swf;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::rc::Rc;
use std::time::Duration;

use scored_core::cluster::{Cluster, Host, Topology};
use scored_core::core::{
    Action, ClientEvent, Core, CoreConfig, EndKind, Input, Notice, RotationMark, ScriptError,
};
use scored_core::ids::{ClientToken, ClusterId, Cred, HostId, JobId, Tick};
use scored_core::job::{ExitStatus, JobRequest, Joiner, ProcRequest, Usage};
use scored_proto::units::CpuSet;

use actuator::{Happening, SimActuator, SimMark};
use swf::Trace;

/// How a replay is set up.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The machine the trace is replayed on: its hosts and clusters.
    pub topology: Topology,
    /// The gang time slice.
    pub timeslice: Duration,
    /// How long a stop takes to be confirmed (a switch's cost).
    pub switch_cost: Duration,
    /// Factor applied to the time between the first submission and each
    /// job's (below 1 the jobs come faster).
    pub arrival_scale: f64,
    /// SWF queue number to scored queue.
    pub queue_map: BTreeMap<i64, u32>,
    /// The scored queue of jobs the map does not name.
    pub default_queue: u32,
    /// A start-up script, as scored.rc: its name (for messages) and text.
    pub rc: Option<(String, String)>,
    /// Each job is submitted as its trace user (field 12), so that the
    /// queues' `share=user` and `fairshare` tell users apart; otherwise
    /// (and for a job whose user the trace does not name) as root.
    pub as_users: bool,
}

impl Setup {
    /// A setup on `topology` with scored's defaults.
    pub fn new(topology: Topology) -> Setup {
        Setup {
            topology,
            timeslice: Duration::from_millis(500),
            switch_cost: Duration::ZERO,
            arrival_scale: 1.0,
            queue_map: BTreeMap::new(),
            default_queue: 1,
            rc: None,
            as_users: false,
        }
    }
}

/// `n` hosts of one CPU each in one cluster, each with `memory` bytes.
pub fn uniform_machine(n_hosts: u32, memory: u64) -> Topology {
    let cluster_id = ClusterId(0);
    let hosts: Vec<Host> = (0..n_hosts)
        .map(|idx| Host {
            id: HostId(idx),
            name: format!("host{idx}"),
            cluster: cluster_id,
            cpus: CpuSet::from_cpus([0]),
            cores: 1,
            speed: 1.0,
            cpugen: "replay".to_string(),
            memory,
            watchfs: Vec::new(),
            groups: Vec::new(),
        })
        .collect();
    Topology {
        clusters: vec![Cluster {
            id: cluster_id,
            name: "replay".to_string(),
            cpugen: "replay".to_string(),
            speed: 1.0,
            cores: 1,
            hosts: hosts.iter().map(|host| host.id).collect(),
        }],
        hosts,
    }
}

/// What happened to one replayed job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobOutcome {
    /// Its number in the trace.
    pub number: i64,
    /// Processes.
    pub procs: u32,
    /// The queue it was submitted to.
    pub queue: u32,
    /// Its user in the trace (field 12), if known.
    pub user: Option<i64>,
    /// The queues it visited.
    pub queues: Vec<u32>,
    /// Submitted, seconds from the first submission (after scaling).
    pub submit: f64,
    /// Started.
    pub start: f64,
    /// Ended.
    pub end: f64,
    /// Work done (its run time), seconds.
    pub run: f64,
    /// How it ended: `done`, or why it was killed.
    pub ending: String,
}

impl JobOutcome {
    /// Time from submission to start.
    pub fn wait(&self) -> f64 {
        self.start - self.submit
    }

    /// Bounded slowdown with τ = 10 s: (end - submit) / max(run, 10).
    pub fn bounded_slowdown(&self) -> f64 {
        (self.end - self.submit) / self.run.max(10.0)
    }
}

/// A job of the trace that was not replayed.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    /// Its number in the trace.
    pub number: i64,
    /// Its line in the trace.
    pub line: usize,
    /// Why.
    pub reason: String,
}

/// The outcome of a replay.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// Replayed jobs, in the order they ended.
    pub jobs: Vec<JobOutcome>,
    /// Jobs not replayed.
    pub skipped: Vec<Skipped>,
    /// Switches the core made.
    pub switches: u64,
    /// Processor slots of the machine (hosts × cores).
    pub slots: u64,
    /// Hosts of the machine.
    pub hosts: usize,
    /// Times the core was fed inputs.
    pub decisions: u64,
    /// Slice boundaries passed over by repeating whole periods of the gang
    /// rotation at once rather than stepping through them.
    pub repeated: u64,
    /// Busy processors and waiting jobs over time, at most a few thousand
    /// points.
    pub timeline: Vec<Point>,
}

/// The machine at one instant of a replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Seconds from the first submission.
    pub time: f64,
    /// Processes running.
    pub busy: u64,
    /// Jobs submitted and not started.
    pub waiting: u64,
}

/// How many points the timeline keeps over the trace's span.
const TIMELINE_POINTS: f64 = 4000.0;

const MICROS: f64 = 1_000_000.0;

fn seconds(tick: Tick) -> f64 {
    tick.0 as f64 / MICROS
}

/// A job waiting for its submit time.
struct Arrival {
    at: Tick,
    trace_idx: usize,
    queue: u32,
    request: JobRequest,
    work: Duration,
}

/// What the replay knows of a submitted job.
struct Record {
    trace_idx: usize,
    procs: u32,
    queue: u32,
    submit: Tick,
    start: Option<Tick>,
    work: Duration,
}

/// Why a replay could not be made.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayError {
    /// Lines of the rc file that the core refused (each changed nothing);
    /// shown as `NAME:LINE: message`, one a line.
    Rc(Vec<ScriptError>),
    /// Jobs were left that can never run (a queue deactivated by the rc
    /// file, say): how many, and the trace numbers of up to five of them.
    Stuck {
        /// How many jobs were left.
        jobs: usize,
        /// Their numbers in the trace (at most five).
        examples: Vec<i64>,
    },
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::Rc(errors) => {
                for (idx, error) in errors.iter().enumerate() {
                    if idx > 0 {
                        writeln!(f)?;
                    }
                    write!(f, "{error}")?;
                }
                Ok(())
            }
            ReplayError::Stuck { jobs, examples } => {
                let examples: Vec<String> = examples.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "{jobs} job{} can never run (for example trace job{} {}): is a queue deactivated by the rc file?",
                    if *jobs == 1 { "" } else { "s" },
                    if examples.len() == 1 { "" } else { "s" },
                    examples.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for ReplayError {}

/// Replays `trace` under `setup`. `progress(done, total)` is called now
/// and then with the number of jobs finished.
pub fn run(
    trace: &Trace,
    setup: &Setup,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Outcome, ReplayError> {
    replay(trace, setup, progress, true)
}

/// The uid a trace's user 0 replays as, with `Setup::as_users`: user N
/// is this plus N.
pub const TRACE_UIDS: u32 = 100_000;

/// [`run`], repeating whole periods of the gang rotation at once when
/// `repeat` says so, else stepping through every slice.
fn replay(
    trace: &Trace,
    setup: &Setup,
    progress: &mut dyn FnMut(usize, usize),
    repeat: bool,
) -> Result<Outcome, ReplayError> {
    let memory_limits = setup
        .topology
        .clusters
        .iter()
        .map(|cluster| {
            cluster
                .hosts
                .iter()
                .map(|host| setup.topology.host(*host).memory)
                .min()
        })
        .collect();
    // A trace user replays as a uid of its own, an operator so that no
    // budget of a shared daemon's users refuses its jobs.
    let uid_of = |user: Option<i64>| {
        user.filter(|_| setup.as_users)
            .and_then(|user| u32::try_from(user).ok())
            .and_then(|user| user.checked_add(TRACE_UIDS))
            .filter(|uid| *uid < u32::MAX)
            .unwrap_or(0)
    };
    let mut operators: Vec<u32> = trace.jobs.iter().map(|job| uid_of(job.user)).collect();
    operators.sort_unstable();
    operators.dedup();
    let config = CoreConfig {
        operators,
        timeslice: setup.timeslice,
        // Only samples that can change a decision are answered here.
        sample_every_slice: false,
        ..CoreConfig::default()
    };
    let mut core = Core::new(config, setup.topology.clone(), memory_limits);
    let root = Cred {
        pid: 1,
        uid: 0,
        gid: 0,
        groups: Vec::new(),
    };
    if let Some((name, text)) = &setup.rc {
        run_rc(&mut core, &root, name, text)?;
    }
    let mut outcome = Outcome {
        slots: setup
            .topology
            .hosts
            .iter()
            .map(|host| u64::from(host.cores.max(1)))
            .sum(),
        hosts: setup.topology.hosts.len(),
        ..Outcome::default()
    };
    let arrivals = arrivals(trace, setup, &mut outcome.skipped);
    let total = arrivals.len();
    let user: Rc<str> = Rc::from("replay");
    let mut sim = SimActuator::new(setup.switch_cost);
    let mut records: HashMap<ClientToken, Record> = HashMap::new();
    let mut by_job: HashMap<JobId, ClientToken> = HashMap::new();
    let mut next_arrival = 0usize;
    let mut now = Tick(0);
    let mut inputs: Vec<Input> = Vec::new();
    let mut actions: Vec<Action> = Vec::new();
    let mut happenings = Vec::new();
    let mut finished = 0usize;
    let mut waiting = 0u64;
    let resolution = arrivals
        .last()
        .map_or(0.0, |last| seconds(last.at) / TIMELINE_POINTS);
    let mut cycle = Cycle {
        on: repeat,
        ..Cycle::default()
    };
    // Whether the instant being handled brought a slice boundary, and
    // nothing but the stops and continues of a switch.
    let mut ticked = false;
    let mut quiet = true;
    let mut handled = false;
    loop {
        let arrival_at = arrivals.get(next_arrival).map(|arrival| arrival.at);
        let decision_at = core.next_decision(now);
        let Some(next) = Tick::earliest(Tick::earliest(arrival_at, sim.next()), decision_at) else {
            break;
        };
        if next > now && handled && cycle.on {
            // The instant `now` is over.
            let found = if ticked && quiet {
                cycle.boundary(&core, &sim, now, arrival_at, outcome.decisions)
            } else {
                cycle.reset();
                None
            };
            (ticked, quiet, handled) = (false, true, false);
            if let Some(found) = found {
                now = found.repeat(&mut core, &mut sim, &mut outcome, now, resolution, waiting);
                continue;
            }
        }
        now = now.max(next);
        handled = true;
        while let Some(arrival) = arrivals.get(next_arrival).filter(|a| a.at <= now) {
            let client = ClientToken(next_arrival as u64 + 1);
            records.insert(
                client,
                Record {
                    trace_idx: arrival.trace_idx,
                    procs: arrival.request.procs_total(),
                    queue: arrival.queue,
                    submit: arrival.at,
                    start: None,
                    work: arrival.work,
                },
            );
            waiting += 1;
            quiet = false;
            let cred = Cred {
                uid: uid_of(trace.jobs[arrival.trace_idx].user),
                ..root.clone()
            };
            inputs.push(Input::Submit {
                client,
                cred,
                user: user.clone(),
                request: Box::new(arrival.request.clone()),
            });
            next_arrival += 1;
        }
        sim.take_due(now, &mut happenings);
        for happening in happenings.drain(..) {
            match happening {
                Happening::Stopped(job) => inputs.push(Input::Stopped(job)),
                Happening::Finished(job) => {
                    quiet = false;
                    exited(
                        job,
                        sim_ranks_of(&records, &by_job, job),
                        ExitStatus::Code(0),
                        &mut inputs,
                    )
                }
            }
        }
        if decision_at.is_some_and(|at| at <= now) {
            ticked = true;
            inputs.push(Input::Tick);
        }
        // Feed the core until it has nothing more to say at this instant.
        while !inputs.is_empty() {
            outcome.decisions += 1;
            core.handle_all_into(inputs.drain(..), now, &mut actions);
            for action in actions.drain(..) {
                quiet &= matches!(
                    action,
                    Action::Stop(_)
                        | Action::Continue(_)
                        | Action::SwitchBegin(_)
                        | Action::SwitchEnd(_)
                );
                match action {
                    Action::Spawn(plan) => {
                        let work = by_job
                            .get(&plan.job)
                            .and_then(|client| records.get(client))
                            .map_or(Duration::ZERO, |record| record.work);
                        sim.spawn(plan.job, plan.procs.len() as u32, work, now);
                    }
                    Action::Stop(job) => sim.stop(job, now),
                    Action::Continue(job) => sim.resume(job, now),
                    Action::Signal { job, signal } => {
                        if signal == scored_core::core::SIGKILL
                            || signal == scored_core::core::SIGTERM
                        {
                            if let Some(ranks) = sim.kill(job, now) {
                                exited(job, ranks, ExitStatus::Signal(signal), &mut inputs);
                            }
                        }
                    }
                    Action::Sample(job) if core.usage_matters(job) => {
                        let ranks = sim.ranks(job).unwrap_or(1);
                        let cpu = sim.done(job, now) * ranks;
                        inputs.push(Input::Usage {
                            job,
                            usage: Usage {
                                cpu,
                                memory: Box::default(),
                                disk: 0,
                                programs: 0,
                            },
                        });
                    }
                    Action::Notify(notice) => {
                        let Notice { client, event } = *notice;
                        match event {
                            ClientEvent::Admitted { job, .. } => {
                                by_job.insert(job, client);
                            }
                            ClientEvent::Started(_) => {
                                if let Some(record) = records.get_mut(&client) {
                                    record.start = Some(now);
                                    waiting = waiting.saturating_sub(1);
                                }
                            }
                            ClientEvent::Rejected { reason, .. } => {
                                if let Some(record) = records.remove(&client) {
                                    waiting = waiting.saturating_sub(1);
                                    let job = &trace.jobs[record.trace_idx];
                                    outcome.skipped.push(Skipped {
                                        number: job.number,
                                        line: job.line,
                                        reason: format!("rejected: {reason}"),
                                    });
                                    finished += 1;
                                }
                            }
                            ClientEvent::Ended(ending) => {
                                by_job.remove(&ending.job);
                                let Some(record) = records.remove(&client) else {
                                    continue;
                                };
                                if record.start.is_none() {
                                    waiting = waiting.saturating_sub(1);
                                }
                                finished += 1;
                                let start = record.start.unwrap_or(now);
                                let run = match ending.kind {
                                    EndKind::Exited => record.work,
                                    _ => ending
                                        .accounting
                                        .wall
                                        .saturating_sub(ending.accounting.stopped),
                                };
                                outcome.jobs.push(JobOutcome {
                                    number: trace.jobs[record.trace_idx].number,
                                    procs: record.procs,
                                    queue: record.queue,
                                    user: trace.jobs[record.trace_idx].user,
                                    queues: ending.accounting.queues.clone(),
                                    submit: seconds(record.submit),
                                    start: seconds(start),
                                    end: seconds(now),
                                    run: run.as_secs_f64(),
                                    ending: match ending.kind {
                                        EndKind::Exited => "done".to_string(),
                                        _ => ending.reason.clone(),
                                    },
                                });
                                if finished % 1024 == 0 {
                                    progress(finished, total);
                                }
                            }
                            // The replay submits no batch job.
                            ClientEvent::Waiting(_)
                            | ClientEvent::Accepted { .. }
                            | ClientEvent::Held(_)
                            | ClientEvent::Reattached { .. }
                            | ClientEvent::Answer(_) => {}
                        }
                    }
                    Action::Sample(_)
                    | Action::Release(_)
                    | Action::SwitchBegin(_)
                    | Action::SwitchEnd(_)
                    | Action::Exit => {}
                }
            }
        }
        let time = seconds(now);
        if outcome
            .timeline
            .last()
            .is_none_or(|point| time - point.time >= resolution)
        {
            outcome.timeline.push(Point {
                time,
                busy: sim.busy(),
                waiting,
            });
        }
        cycle.step(now, sim.busy());
    }
    progress(finished, total);
    outcome.switches = core.switch_count();
    if core.n_jobs() > 0 {
        let examples: Vec<i64> = core
            .jobs()
            .take(5)
            .filter_map(|job| by_job.get(&job.id).and_then(|client| records.get(client)))
            .map(|record| trace.jobs[record.trace_idx].number)
            .collect();
        return Err(ReplayError::Stuck {
            jobs: core.n_jobs(),
            examples,
        });
    }
    Ok(outcome)
}

/// The longest stretch of slice boundaries since the last event that a
/// replay looks through for a repeated rotation state: a rotation that has
/// not repeated by then is stepped through to the next event.
const CYCLE_LOOK: usize = 256;

/// Finds repeating periods of the gang rotation between events (see
/// [`Core::rotation_state`]): once the rotation state at a slice boundary
/// is one met before, the period between them is marked, stepped through
/// once more to see it repeat, and then repeated at once as many times as
/// end before the next arrival, job end or `-time` limit.
#[derive(Default)]
struct Cycle {
    on: bool,
    /// The rotation states of the boundaries since the last event, with
    /// their instants.
    seen: HashMap<Vec<u64>, Tick>,
    state: Vec<u64>,
    /// A period being stepped through once more.
    marked: Option<Marked>,
    /// Nothing more to look for until the next event.
    done: bool,
}

/// A period being stepped through from its mark.
struct Marked {
    length: u64,
    state: Vec<u64>,
    core: RotationMark,
    sim: SimMark,
    decisions: u64,
    /// Slice boundaries in the period.
    boundaries: u64,
    /// Each step of the loop since the mark: its instant (from the mark)
    /// and the processes running after it.
    steps: Vec<(u64, u64)>,
}

/// A period to repeat, and how many times.
struct Repeat {
    marked: Marked,
    periods: u64,
}

impl Cycle {
    /// Something other than slice boundaries happened.
    fn reset(&mut self) {
        if !self.seen.is_empty() {
            self.seen.clear();
        }
        self.marked = None;
        self.done = false;
    }

    /// A step of the loop ended at `now` with `busy` processes running.
    fn step(&mut self, now: Tick, busy: u64) {
        if let Some(marked) = &mut self.marked {
            marked
                .steps
                .push((now.0.saturating_sub(marked.core_at()), busy));
        }
    }

    /// The slice boundary `now` is over and nothing else happened at it:
    /// the period to repeat, if one is found.
    fn boundary(
        &mut self,
        core: &Core,
        sim: &SimActuator,
        now: Tick,
        arrival: Option<Tick>,
        decisions: u64,
    ) -> Option<Repeat> {
        if self.done {
            return None;
        }
        if !core.rotation_state(&mut self.state) {
            self.reset();
            return None;
        }
        if let Some(marked) = self.marked.take() {
            let end = marked.core_at().saturating_add(marked.length);
            let mut marked = marked;
            marked.boundaries += 1;
            if now.0 < end {
                self.marked = Some(marked);
                return None;
            }
            self.done = true;
            if now.0 > end || self.state != marked.state {
                return None;
            }
            let before_arrival = arrival.map_or(u64::MAX, |at| {
                at.0.saturating_sub(now.0).saturating_sub(1) / marked.length
            });
            let periods = core
                .rotation_repeats(&marked.core, now)
                .min(sim.repeats(&marked.sim, now))
                .min(before_arrival);
            if periods == 0 {
                return None;
            }
            marked.decisions = decisions.saturating_sub(marked.decisions);
            return Some(Repeat { marked, periods });
        }
        if let Some(&earlier) = self.seen.get(&self.state) {
            let core_mark = core.mark_rotation(now);
            let sim_mark = sim.mark(now, core_mark.jobs());
            self.marked = Some(Marked {
                length: now.0.saturating_sub(earlier.0),
                state: self.state.clone(),
                core: core_mark,
                sim: sim_mark,
                decisions,
                boundaries: 0,
                steps: Vec::new(),
            });
            self.seen.clear();
        } else if self.seen.len() < CYCLE_LOOK {
            self.seen.insert(self.state.clone(), now);
        } else {
            self.done = true;
        }
        None
    }
}

impl Marked {
    fn core_at(&self) -> u64 {
        self.core.at().0
    }
}

impl Repeat {
    /// Moves the core, the processes and the figures on by the periods
    /// from the boundary `now`, which ends the marked period; returns the
    /// boundary they end at.
    fn repeat(
        self,
        core: &mut Core,
        sim: &mut SimActuator,
        outcome: &mut Outcome,
        now: Tick,
        resolution: f64,
        waiting: u64,
    ) -> Tick {
        let Repeat { marked, periods } = self;
        core.repeat_rotation(&marked.core, now, periods);
        sim.repeat(&marked.sim, now, periods);
        outcome.decisions = outcome
            .decisions
            .saturating_add(marked.decisions.saturating_mul(periods));
        outcome.repeated = outcome
            .repeated
            .saturating_add(marked.boundaries.saturating_mul(periods));
        // The timeline's points as the steps of the repeated periods would
        // have added them: the first step at least `resolution` after the
        // last point, again and again.
        let steps = &marked.steps;
        let total = (steps.len() as u64).saturating_mul(periods);
        let at = |idx: u64| {
            let (offset, busy) = steps[(idx % steps.len() as u64) as usize];
            let period = idx / steps.len() as u64;
            (Tick(now.0 + period * marked.length + offset), busy)
        };
        let mut idx = 0;
        while idx < total {
            let Some(last) = outcome.timeline.last().map(|point| point.time) else {
                break;
            };
            // Steps of periods that end a millisecond before the next
            // point is due cannot add it.
            let due = ((last + resolution) * MICROS - 1000.0).max(0.0) as u64;
            let before = due.saturating_sub(now.0) / marked.length;
            idx = idx.max(before.saturating_sub(1).saturating_mul(steps.len() as u64));
            while idx < total {
                let (instant, busy) = at(idx);
                idx += 1;
                let time = seconds(instant);
                if time - last >= resolution {
                    outcome.timeline.push(Point {
                        time,
                        busy,
                        waiting,
                    });
                    break;
                }
            }
        }
        Tick(now.0 + marked.length * periods)
    }
}

fn sim_ranks_of(
    records: &HashMap<ClientToken, Record>,
    by_job: &HashMap<JobId, ClientToken>,
    job: JobId,
) -> u32 {
    by_job
        .get(&job)
        .and_then(|client| records.get(client))
        .map_or(1, |record| record.procs)
}

/// The inputs for the end of a job's processes: every rank, then gone.
fn exited(job: JobId, ranks: u32, status: ExitStatus, inputs: &mut Vec<Input>) {
    for rank in 0..ranks {
        inputs.push(Input::RankExited {
            job,
            stage: 0,
            rank,
            status,
        });
    }
    inputs.push(Input::ProcessesGone(job));
}

/// Runs a start-up script as scored does (as root); every error is
/// reported as `NAME:LINE: message`.
fn run_rc(core: &mut Core, root: &Cred, name: &str, text: &str) -> Result<(), ReplayError> {
    let run = core.run_script(root, name, text, Tick(0));
    // The script runs before the first arrival: with no job in the core,
    // its commands have no process to act on.
    debug_assert!(run.actions.is_empty(), "{:?}", run.actions);
    if run.errors.is_empty() {
        Ok(())
    } else {
        Err(ReplayError::Rc(run.errors))
    }
}

/// The trace's jobs as submissions, in submit order; jobs that cannot be
/// replayed go to `skipped`.
fn arrivals(trace: &Trace, setup: &Setup, skipped: &mut Vec<Skipped>) -> Vec<Arrival> {
    let first = trace
        .jobs
        .iter()
        .filter_map(|job| job.submit)
        .fold(f64::INFINITY, f64::min);
    let mut out = Vec::with_capacity(trace.jobs.len());
    for (trace_idx, job) in trace.jobs.iter().enumerate() {
        let skip = |reason: &str| Skipped {
            number: job.number,
            line: job.line,
            reason: reason.to_string(),
        };
        let Some(submit) = job.submit else {
            skipped.push(skip("unknown submit time"));
            continue;
        };
        let Some(run) = job.run else {
            skipped.push(skip("unknown run time"));
            continue;
        };
        let Some(procs) = job.procs.and_then(|n| u32::try_from(n).ok()) else {
            skipped.push(skip("unknown processor count"));
            continue;
        };
        let offset = (submit - first) * setup.arrival_scale;
        let at = Tick((offset * MICROS).round().max(0.0) as u64);
        let work = Duration::from_secs_f64(run);
        // A job never exceeds its estimate in a replay: traces record jobs
        // that ran past their request (limits enforced with grace).
        let estimate = job
            .requested_time
            .map(|requested| Duration::from_secs_f64(requested.max(run)))
            .map(|estimate| estimate.max(Duration::from_millis(1)));
        let queue = job
            .queue
            .and_then(|queue| setup.queue_map.get(&queue).copied())
            .unwrap_or(setup.default_queue);
        let memory = job
            .memory_kb
            .map(|kb| (kb * 1024.0).round() as u64)
            .filter(|bytes| *bytes > 0);
        out.push(Arrival {
            at,
            trace_idx,
            queue,
            work,
            request: JobRequest {
                stages: vec![vec![OsString::from("swf-job")]],
                joiner: Joiner::Sequence,
                procs: ProcRequest::Nodes(procs),
                priority: Some(queue),
                wait: true,
                memory,
                disk: None,
                time: estimate,
                env: Vec::new(),
                cwd: OsString::from("/"),
                inherited: Default::default(),
                batch: Default::default(),
            },
        });
    }
    // Stable: jobs submitted at the same second keep the trace's order.
    out.sort_by_key(|arrival| arrival.at);
    out
}

#[cfg(test)]
mod tests;
