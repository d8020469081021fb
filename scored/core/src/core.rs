//! The scheduling core: the daemon's whole state and the only place it changes.
//!
//! Every input (a submission, a process exit, a stop confirmation, a clock
//! tick, a console command, a line of the start-up script) goes through
//! [`Core::handle`], together with the current [`Tick`]. The core answers
//! with [`Action`]s for the actuator (spawn, stop, continue, signal, sample)
//! and for clients (notifications, and the reply to a console command), and
//! with the next deadline it needs.
//!
//! What runs is the scheduler's (`sched::Scheduler`): the core tells it
//! what happened to the jobs (an input, a stop confirmed, processes gone, a
//! job finished, its hosts changed, a slice boundary) and, after each
//! batch of inputs, asks it once what to do, then carries the whole answer
//! out (hosts bound, jobs stopped, continued, spawned). A switch is
//! two-phase: leaving jobs get `Stop`; a job enters (`Continue` or
//! `Spawn`) only once no job that is running or still stopping holds any
//! of its hosts, i.e. after the actuator has confirmed the stops. So two
//! jobs that share a host never run at once.
//!
//! Architecture invariant: no system calls, no clock reads, no I/O. Time
//! comes in as a `Tick`; names of users and groups come in through
//! [`Directory`].
//!
//! Where to look: the types the shell exchanges with the core are in
//! `input.rs` ([`Input`], [`JobEvent`]), `action.rs` ([`Action`],
//! [`Notice`]) and `config.rs` ([`CoreConfig`], [`Directory`]); this file
//! holds the state ([`Core`]) and dispatches each input. Submission and
//! admission are in `admit.rs`; a job's exits, usage, kill and end in
//! `lifecycle.rs`; deadlines, the slice boundary and the usage samples in
//! `tick.rs`; the scheduler's decision carried out in `switch.rs`; the
//! table of jobs in `table.rs`; console commands in `commands.rs`, their
//! listings in `views.rs`, the start-up script in `script.rs`; the restart
//! snapshot and the panic checkpoint in `snapshot.rs`; the invariants,
//! checked after every step in debug builds, in `invariants.rs`.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use crate::admission::{ClusterLimits, Ledger};
use crate::cluster::Topology;
use crate::ids::{ClientToken, Cred, JobId, Tick};
use crate::job::{
    EndCause, Job, JobLimits, JobRequest, JobState, LaunchPlan, Link, Phase, Submission,
};
use crate::queue::Queue;
use crate::sched::Scheduler;
use crate::undo::{UndoCell, UndoLedger, UndoQueues};
use scored_proto::command::reply::Value;

/// SIGTERM, SIGKILL: the two signals the core itself decides to send.
pub const SIGTERM: i32 = 15;
/// See [`SIGTERM`].
pub const SIGKILL: i32 = 9;
/// SIGPIPE's number: a producer's normal end in a pipeline.
pub const SIGPIPE: i32 = 13;

/// SIGSTOP, SIGTSTP, SIGCONT, SIGTTIN, SIGTTOU: only the scheduler stops and
/// continues jobs, or two jobs could run on one host.
const JOB_CONTROL_SIGNALS: [i32; 5] = [19, 20, 18, 21, 22];

/// How many finished jobs `jobs all` and `job ID` remember.
pub const HISTORY: usize = 1000;
/// How many recent switch latencies the median is taken over.
const LATENCY_WINDOW: usize = 1024;

/// A submission on its way to admission: a client waiting for it (the
/// `wait` option), or a job of the backlog (`backlog.rs`) whose turn came.
#[derive(Debug, Clone)]
struct Waiter {
    /// The client that waits, or `Link::Batch`.
    link: Link,
    cred: Cred,
    user: Rc<str>,
    request: JobRequest,
    submitted_at: Tick,
    /// Its scrun was suspended while it waited: admit it held.
    held: bool,
    /// The id it was given at submission (a job of the backlog); else it
    /// gets the next one at admission.
    id: Option<JobId>,
    /// Its batch options with its submission's first id, shared by an
    /// array's elements (a job of the backlog).
    submission: Option<Rc<Submission>>,
}

impl Waiter {
    /// The client waiting, if one is.
    fn client(&self) -> Option<ClientToken> {
        self.link.client()
    }
}

/// A finished job, remembered for `jobs all` and `job ID`.
#[derive(Debug, Clone)]
struct Finished {
    job: Job,
    /// Its command line as listings show it (the launch data is dropped).
    command: String,
    state: JobState,
    ended_at: Tick,
    ending: Ending,
}

/// Switch counting and latency statistics.
#[derive(Debug, Default, Clone)]
struct Switches {
    next_id: u64,
    open: Option<u64>,
    count: u64,
    /// Shared with the checkpoint (`Core::commit`) and copied when it
    /// changes, so that a commit does not copy the window.
    recent: Rc<VecDeque<Duration>>,
    max: Duration,
}
/// The daemon's state. A clone shares the jobs and the finished ones
/// (see `Core::commit`, which keeps such a copy of what does not log its
/// own changes).
#[derive(Clone)]
pub struct Core {
    /// The containers that grow with the jobs, which log their own
    /// changes for the checkpoint (see [`Logged`]).
    logged: Logged,
    limits: Vec<ClusterLimits>,
    /// When usage was last asked for (each slice boundary with live jobs).
    sampled_at: Tick,
    /// Unfinished jobs with a CPU time limit.
    n_cputime_limited: usize,
    /// Unfinished jobs with a CPU time, memory or disk limit (whose usage
    /// samples can change a decision).
    n_usage_limited: usize,
    /// Jobs whose processes ended while no daemon ran, and when (told at
    /// a takeover, just before their end is handled).
    ended_away: std::collections::HashMap<JobId, Tick>,
    next_job: u64,
    switches: Switches,
    shutting_down: bool,
    /// Why jobs cannot be run now, when the state directory is unusable.
    state_dir_problem: Option<String>,
    /// The scheduler: the rotation, the active set, the bindings, the
    /// matrix and every cache the decisions read (`sched::Scheduler`).
    sched: Scheduler,
    /// Job events not yet taken by the shell, when recording is on.
    journal: Option<Vec<JobEvent>>,
    /// The running binary's version and how many in-place restarts this
    /// daemon has made, for `status`.
    build: (String, u64),
    /// Names of groups for console commands (`NoDirectory` until the shell
    /// gives one).
    directory: Rc<dyn Directory>,
    /// The state of the last `commit` but for the containers that log
    /// their changes (see `Core::commit`).
    saved: Option<Box<Core>>,
}

impl Core {
    /// A core with the default queues.
    pub fn new(config: CoreConfig, topology: Topology, memory_limits: Vec<Option<u64>>) -> Core {
        let n_hosts = topology.hosts.len();
        let limits = topology
            .clusters
            .iter()
            .map(|cluster| ClusterLimits {
                memory: memory_limits.get(cluster.id.idx()).copied().flatten(),
                disk: config.disk.get(cluster.id.idx()).copied().flatten(),
                jobs: None,
            })
            .collect();
        let ledger = Ledger::new(&topology);
        let sched = Scheduler::new(n_hosts, config.timeslice);
        Core {
            logged: Logged {
                config: UndoCell::new(config),
                topology: UndoCell::new(topology),
                ledger: UndoLedger::new(ledger),
                queues: UndoQueues::new(Queue::defaults()),
                ..Logged::default()
            },
            limits,
            sampled_at: Tick::default(),
            n_cputime_limited: 0,
            n_usage_limited: 0,
            ended_away: std::collections::HashMap::new(),
            next_job: 1,
            switches: Switches::default(),
            shutting_down: false,
            state_dir_problem: None,
            sched,
            journal: None,
            build: (env!("CARGO_PKG_VERSION").to_string(), 0),
            directory: Rc::new(NoDirectory),
            saved: None,
        }
    }

    /// Sets where console commands look up names of groups.
    pub fn set_directory(&mut self, directory: Box<dyn Directory>) {
        self.directory = Rc::from(directory);
    }

    /// Sets what `status` shows as `version` and `restarts`.
    pub fn set_build(&mut self, version: String, restarts: u64) {
        self.build = (version, restarts);
    }

    /// Starts recording job events for the journal; the shell takes them
    /// with [`Core::take_journal`] after each input or command.
    pub fn record_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// The job events recorded since the last call.
    pub fn take_journal(&mut self) -> Vec<JobEvent> {
        match &mut self.journal {
            Some(events) => std::mem::take(events),
            None => Vec::new(),
        }
    }

    fn journal(&mut self, event: JobEvent) {
        if let Some(events) = &mut self.journal {
            events.push(event);
        }
    }

    /// Job ids continue after `last` (the highest id an earlier daemon of
    /// this state directory handed out), so that no id is ever reused.
    /// Only raises the next id, and only before any job is admitted.
    pub fn continue_ids_after(&mut self, last: u64) {
        if self.logged.jobs.is_empty() {
            self.next_job = self.next_job.max(last.saturating_add(1));
        }
    }

    /// The id the next admitted job gets.
    pub fn next_job_id(&self) -> u64 {
        self.next_job
    }

    /// The `job ID` facts of every unfinished job, for the head of a new
    /// journal file.
    pub fn open_records(&self, now: Tick) -> Vec<Vec<(String, Value)>> {
        let admitted = self
            .logged
            .jobs
            .values()
            .map(|job| self.job_fields(job, command_line(job), job.state(), None, now, true));
        // A submission of the backlog by its first job waiting.
        let waiting = self.logged.backlog.entries.values().filter_map(|entry| {
            let k = entry.waiting().next()?;
            Some(self.entry_fields(entry, k, None, now, true))
        });
        admitted.chain(waiting).collect()
    }

    /// The hosts and clusters, as resolved at start-up.
    pub fn topology(&self) -> &Topology {
        &self.logged.topology
    }

    /// The queues, by number (0 is the highest priority).
    pub fn queues(&self) -> &[Queue] {
        &self.logged.queues
    }

    /// An admitted, unfinished job.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.logged.jobs.get(&id)
    }

    /// Admitted, unfinished jobs.
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.logged.jobs.values()
    }

    /// The processes of `id`'s current stage (of all its stages, for a
    /// pipe), as its launch was planned when the job started: what an
    /// in-place restart needs to go on with a launch it handed over.
    pub fn launch_plan(&self, id: JobId) -> Option<LaunchPlan> {
        self.logged.jobs.get(&id).map(switch::launch_plan)
    }

    /// Number of admitted, unfinished jobs.
    pub fn n_jobs(&self) -> usize {
        self.logged.jobs.len()
    }

    /// Whether the core holds no job: none admitted and unfinished, none
    /// in the backlog.
    pub fn no_jobs(&self) -> bool {
        self.logged.jobs.is_empty() && self.logged.backlog.is_empty()
    }

    /// Whether a shutdown is under way.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// The current time slice.
    pub fn timeslice(&self) -> Duration {
        self.logged.config.timeslice
    }

    /// How many switches the core has made.
    pub fn switch_count(&self) -> u64 {
        self.switches.count
    }

    /// Whether a switch awaits the confirmation of its stops.
    pub fn stops_in_flight(&self) -> bool {
        self.sched.n_stopping() > 0
    }

    /// The jobs that feeding `inputs` continues, in order, when they only
    /// confirm the stops of the switch under way (beside samples that call
    /// for nothing): every job being stopped, none of them ending or being
    /// killed, under a decision that stands
    /// (`Scheduler::kept_active`), which then continues the stopped jobs
    /// it chose as soon as their hosts are free. `None` otherwise. The
    /// loop continues them as soon as the confirmations arrive, before the
    /// core hears of them, as a program that switches processes itself
    /// continues the next ones as soon as `waitpid` returns.
    pub fn continues_once_stopped(&self, inputs: &[Input]) -> Option<Vec<JobId>> {
        let active = self.sched.kept_active()?;
        let mut stopped = Vec::with_capacity(inputs.len());
        for input in inputs {
            let job = match input {
                Input::Stopped(job) => job,
                Input::Usage { job, usage } => match self.usage_verdict(*job, usage) {
                    UsageVerdict::Fine => continue,
                    _ => return None,
                },
                _ => return None,
            };
            let record = self.logged.jobs.get(job)?;
            if record.phase() != Phase::Stopping
                || record.is_ending()
                || record.kill_deadline().is_some()
            {
                return None;
            }
            stopped.push(*job);
        }
        stopped.sort_unstable();
        stopped.dedup();
        if stopped.is_empty() || stopped.len() != self.sched.n_stopping() {
            return None;
        }
        let phase = |job: &JobId| match stopped.binary_search(job) {
            Ok(_) => Some(Phase::Stopped),
            Err(_) => self.logged.jobs.get(job).map(Job::phase),
        };
        Some(
            active
                .iter()
                .filter(|job| phase(job) == Some(Phase::Stopped))
                .copied()
                .collect(),
        )
    }

    /// Feeds one input; returns the actions to carry out, in order.
    pub fn handle(&mut self, input: Input, now: Tick) -> Vec<Action> {
        self.handle_all([input], now)
    }

    /// Feeds inputs that arrived together (one event's worth: every child
    /// reaped after one SIGCHLD, say), then decides once: a switch of many
    /// jobs costs one scheduling decision, not one per confirmation.
    pub fn handle_all(
        &mut self,
        inputs: impl IntoIterator<Item = Input>,
        now: Tick,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        self.handle_all_into(inputs, now, &mut out);
        out
    }

    /// [`Core::handle_all`], appending the actions to `out`, so that a
    /// caller feeding many events reuses one list.
    pub fn handle_all_into(
        &mut self,
        inputs: impl IntoIterator<Item = Input>,
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        #[cfg(debug_assertions)]
        let (inputs, foreseen, first) = {
            let inputs: Vec<Input> = inputs.into_iter().collect();
            let foreseen = self.continues_once_stopped(&inputs);
            (inputs, foreseen, out.len())
        };
        for input in inputs {
            self.apply(input, now, out);
        }
        self.reschedule(now, out);
        #[cfg(debug_assertions)]
        if let Some(foreseen) = foreseen {
            let continued: Vec<JobId> = out[first..]
                .iter()
                .filter_map(|action| match action {
                    Action::Continue(job) => Some(*job),
                    _ => None,
                })
                .collect();
            assert_eq!(continued, foreseen, "the continues foreseen once stopped");
        }
    }

    fn apply(&mut self, input: Input, now: Tick, out: &mut Vec<Action>) {
        // What a sample calls for, worked out once.
        let verdict = match &input {
            Input::Usage { job, usage } => Some(self.usage_verdict(*job, usage)),
            _ => None,
        };
        // Only a confirmed stop of a job that is not being killed, or a
        // sample that calls for nothing, leaves the last active set
        // standing (a job being killed is placed first, and a move changes
        // the queues' order).
        let keeps_decision = match &input {
            Input::Stopped(job) => self
                .logged
                .jobs
                .get(job)
                .is_some_and(|record| !record.is_ending() && record.kill_deadline().is_none()),
            Input::Usage { .. } => matches!(verdict, Some(UsageVerdict::Fine)),
            _ => false,
        };
        // A tick that admits jobs of the backlog brings jobs that may start.
        let admits = matches!(input, Input::Tick)
            && (*self.logged.backlog.more || self.backlog_waits_for_starts());
        let keeps_waiting = !admits
            && matches!(
                input,
                Input::Tick
                    | Input::Stopped(_)
                    | Input::Usage { .. }
                    | Input::SwitchMeasured { .. }
            );
        self.sched.input(keeps_decision, keeps_waiting);
        match input {
            Input::Submit {
                client,
                cred,
                user,
                request,
            } => self.submit(client, cred, user, *request, now, out),
            Input::KnownEnd {
                job,
                owner,
                outcome,
            } => self.known_end(job, owner, outcome),
            Input::ClientGone(client) => self.client_gone(client, now, out),
            Input::Hold(client) => self.hold(client, now, out),
            Input::Release(client) => self.release(client, now, out),
            Input::Interrupt(client) => self.interrupt(client, now, out),
            Input::Deliver { client, signal } => self.deliver(client, signal, out),
            Input::Stopped(job) => {
                if let Some(record) = self.logged.jobs.get_mut(&job) {
                    if record.stopped() {
                        self.logged.live.remove(&job);
                        self.sched.stopped(job, &record.hosts);
                        self.refresh_crossing(job);
                    }
                }
            }
            Input::RankExited {
                job,
                stage,
                rank,
                status,
            } => self.rank_exited(job, stage, rank, status, out),
            Input::SpawnFailed {
                job,
                message,
                status,
            } => {
                if let Some(record) = self.logged.jobs.get_mut(&job) {
                    let message = cap_reason(message);
                    record.end_unless_ending(EndCause::LaunchFailed { message, status });
                }
            }
            Input::ProcessesGone(job) => self.processes_gone(job, now, out),
            Input::EndedAway { job, ago } => {
                if self.logged.jobs.contains_key(&job) {
                    let at = Tick(now.0.saturating_sub(ago.as_micros() as u64));
                    self.ended_away.insert(job, at);
                }
            }
            Input::StopFailed { job, reason } => {
                self.begin_kill(job, EndCause::Limit(cap_reason(reason)), false, now, out);
            }
            Input::Usage { job, usage } => {
                let verdict = verdict.unwrap_or(UsageVerdict::Fine);
                self.usage(job, usage, verdict, now, out);
                self.refresh_crossing(job);
            }
            Input::FinalUsage {
                job,
                cpu,
                peak_memory,
                disk,
            } => {
                if let Some(record) = self.logged.jobs.get_mut(&job) {
                    record.usage.cpu = record.usage.cpu.max(cpu);
                    record.peak_disk = record.peak_disk.max(disk);
                    for (peak, last) in record.peak_memory.iter_mut().zip(peak_memory) {
                        *peak = (*peak).max(last);
                    }
                }
                self.refresh_crossing(job);
            }
            Input::SwitchMeasured { latency, .. } => {
                let switches = &mut self.switches;
                let recent = Rc::make_mut(&mut switches.recent);
                if recent.len() == LATENCY_WINDOW {
                    recent.pop_front();
                }
                recent.push_back(latency);
                switches.max = switches.max.max(latency);
            }
            Input::Tick => self.tick(now, out),
            Input::Console {
                client,
                cred,
                command,
            } => self.console(client, &cred, *command, now, out),
            Input::StateDir(problem) => {
                if self.state_dir_problem != problem {
                    match &problem {
                        Some(message) => tracing::error!(%message, "not accepting jobs"),
                        None => tracing::info!("the state directory works again; accepting jobs"),
                    }
                }
                self.state_dir_problem = problem;
            }
            Input::Shutdown { now: kill } => {
                self.shutdown(kill, now, out);
            }
            Input::Takeover {
                reattach_until,
                gone,
            } => self.clients_lost(reattach_until, &gone, now, out),
            Input::KeeperEnded { job, reason } => self.keeper_ended(job, reason),
            Input::ProcessesLost { job, reason } => self.processes_lost(job, reason, now, out),
            Input::Reattach { client, cred, job } => self.reattach(client, &cred, job, out),
        }
    }

    /// The job's scrun was suspended (Ctrl-Z): its owner holds the job, or
    /// the submission is admitted held if it still waits.
    fn hold(&mut self, client: ClientToken, now: Tick, out: &mut Vec<Action>) {
        if self.backlog_client(client, ClientChange::Hold(true), now, out) {
        } else if let Some(&job) = self.logged.by_client.get(&client) {
            if let Some(record) = self.logged.jobs.get_mut(&job) {
                if !record.is_ending() && !record.owner_hold {
                    record.owner_hold = true;
                    self.journal(JobEvent::Held { job, by: "owner" });
                }
            }
            out.push(Action::notify(client, ClientEvent::Held(job)));
        } else if let Some(idx) = self
            .logged
            .waiting
            .iter()
            .position(|w| w.client() == Some(client))
        {
            self.logged
                .waiting
                .modify(|waiting| Rc::make_mut(&mut waiting[idx]).held = true);
        }
    }

    /// The job's scrun was resumed: its owner's hold ends.
    fn release(&mut self, client: ClientToken, now: Tick, out: &mut Vec<Action>) {
        if self.backlog_client(client, ClientChange::Hold(false), now, out) {
        } else if let Some(record) = self
            .logged
            .by_client
            .get(&client)
            .and_then(|job| self.logged.jobs.get_mut(job))
        {
            if record.owner_hold {
                record.owner_hold = false;
                let job = record.id;
                self.journal(JobEvent::Released(job));
            }
        } else if let Some(idx) = self
            .logged
            .waiting
            .iter()
            .position(|w| w.client() == Some(client))
        {
            self.logged
                .waiting
                .modify(|waiting| Rc::make_mut(&mut waiting[idx]).held = false);
        }
    }

    /// The job's scrun was interrupted: the job is killed gracefully, or
    /// the waiting submission withdrawn.
    fn interrupt(&mut self, client: ClientToken, now: Tick, out: &mut Vec<Action>) {
        if self.backlog_client(
            client,
            ClientChange::End("by its scrun (interrupted)"),
            now,
            out,
        ) {
        } else if let Some(&job) = self.logged.by_client.get(&client) {
            self.begin_kill(
                job,
                EndCause::Killed("by its scrun (interrupted)".into()),
                true,
                now,
                out,
            );
        } else if let Some(idx) = self
            .logged
            .waiting
            .iter()
            .position(|w| w.client() == Some(client))
        {
            self.logged.waiting.modify(|waiting| waiting.remove(idx));
            out.push(Action::notify(
                client,
                ClientEvent::Rejected {
                    kind: Rejection::Resources,
                    reason: "interrupted while waiting for admission".into(),
                },
            ));
        }
    }

    /// A signal scrun received, for its job: only a job with processes,
    /// and not one being killed; a stopped job gets it when continued.
    fn deliver(&mut self, client: ClientToken, signal: i32, out: &mut Vec<Action>) {
        let job = self.logged.by_client.get(&client).copied();
        if let Some(record) = job.and_then(|job| self.logged.jobs.get(&job)) {
            if record.phase() != Phase::Idle && !record.is_ending() {
                out.push(Action::Signal {
                    job: record.id,
                    signal,
                });
            }
        }
    }

    /// Whether `uid` is root, the daemon's own user or an operator: the
    /// event loop holds these to no per-user connection limit and keeps a
    /// reserve of connections for them.
    pub fn is_privileged(&self, uid: u32) -> bool {
        uid == 0
            || uid == self.logged.config.daemon_uid
            || self.logged.config.operators.contains(&uid)
    }

    /// Whether `cred` is root, the daemon's user or an operator.
    pub fn is_operator(&self, cred: &Cred) -> bool {
        cred.uid == 0
            || cred.uid == self.logged.config.daemon_uid
            || self.logged.config.operators.contains(&cred.uid)
    }
}

/// Whether a job has a limit that its usage samples are checked against.
fn usage_limited(limits: &JobLimits) -> bool {
    limits.cputime.is_some() || limits.memory.is_some() || limits.disk.is_some()
}

/// The limits a job would carry, for tests and listings.
pub fn limits_of(job: &Job) -> JobLimits {
    job.limits
}

mod action;
mod admit;
mod backlog;
mod budget;
mod checkpoint;
mod commands;
mod config;
mod fair;
mod input;
mod invariants;
mod kill;
mod lifecycle;
use lifecycle::UsageVerdict;
mod repeat;
mod script;
mod snapshot;
mod switch;
mod table;
mod takeover;
mod tick;
mod views;

pub use action::{Accounting, Action, ClientEvent, EndKind, Ending, Notice, Rejection};
pub use backlog::{Outcome, ADMIT_PER_EVENT, OUTCOMES};
pub use budget::{
    cap_reason, cap_text, request_bytes, MAX_REASON, STRING_COST, TOTAL_BYTES, TOTAL_JOBS,
    TOTAL_WAITING, USER_BYTES, USER_JOBS, USER_WAITING,
};
pub use config::{Budgets, CoreConfig, Directory, GroupError, NoDirectory};
pub use input::{Input, JobEvent};
pub use lifecycle::unlimited_disk_backstop;
pub use repeat::RotationMark;
pub use script::{ScriptError, ScriptProblem, ScriptRun};
pub use snapshot::{CoreSnapshot, InputRecord, RestoreError};

use backlog::ClientChange;
use checkpoint::Logged;
use table::JobTable;
use views::{command_line, queue_group_name, stages_line};

#[cfg(test)]
mod tests;
