//! The scheduler as one object: every piece of state the decisions use,
//! behind a few event methods and one decision call.
//!
//! The core (admission, lifecycle, commands, snapshot) owns the jobs and
//! tells the [`Scheduler`] what happens to them: an input arrived
//! ([`Scheduler::input`]), a job's stop was confirmed
//! ([`Scheduler::stopped`]), its processes are gone ([`Scheduler::gone`]),
//! it finished ([`Scheduler::finished`]), its hosts changed
//! ([`Scheduler::hosts_changed`]), a slice boundary came
//! ([`Scheduler::slice_boundary`]). [`Scheduler::decide`] returns what to do
//! now ([`Decision`]: hosts to bind, jobs to stop, to continue and to
//! spawn), and the core carries all of it out before its next call.
//!
//! It owns the slice cadence and the rotation (which jobs took their turn
//! in the slice), the last active set and the hosts it bound, and every
//! cache the decisions read: the hosts where processes run (`busy`), how
//! many jobs are being stopped, whether the last decision still holds, and
//! the walk's scratch (host masks, the matrix, the kept waiting jobs).
//!
//! Invariant: its state is a function of the jobs and queues the core
//! holds, of the decisions it made and of the events it was told;
//! [`Scheduler::check`] recomputes what it can from the jobs, and the core
//! calls it after every step in debug builds.

use std::collections::BTreeSet;
use std::time::Duration;

use scored_proto::command::QueueMode;

use super::share::{Owners, ShareScratch};
use super::walk::{active_set, Scratch};
use super::JobView;
use crate::ids::{HostId, JobId, Tick};
use crate::job::Phase;
use crate::jobset::{JobBits, JobMap};
use crate::queue::Queue;
use crate::undo::UndoQueues;

/// What the scheduler reads of a job beyond what the walk reads.
pub trait CoreView: JobView {
    /// The phase of the job's processes and its hosts, in one look-up.
    fn state(&self, job: JobId) -> (Phase, &[HostId]);
    /// The index of the queue that holds the job.
    fn queue(&self, job: JobId) -> usize;
}

/// What a decision asks the core to do, in this order: give the jobs of
/// `bind` their hosts; stop the jobs of `stop`; continue those of `resume`;
/// then, once the switch is closed (`settled`), create the processes of
/// those of `spawn`.
#[derive(Debug, Default)]
pub struct Decision {
    /// Hosts chosen for jobs that had none.
    pub bind: Vec<(JobId, Vec<HostId>)>,
    /// Running jobs that left the active set.
    pub stop: Vec<JobId>,
    /// Stopped jobs that enter.
    pub resume: Vec<JobId>,
    /// Jobs that run for the first time (or their next stage).
    pub spawn: Vec<JobId>,
    /// No job is being stopped and no chosen job waits for hosts: the
    /// switch is complete once `resume` is carried out.
    pub settled: bool,
}

/// The scheduler's state that is not a cache: the slice cadence, the
/// rotation's turns, and whether the waiting jobs were considered since
/// the last input that could let one start ([`Scheduler::snapshot`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedulerState {
    /// The slice cadence: boundaries at whole slices from the anchor.
    pub slice_anchor: Tick,
    /// The next slice boundary.
    pub next_slice: Tick,
    /// Jobs that took their turn in the current slice, sorted.
    pub ran: Vec<JobId>,
    /// Jobs given hosts by the last decision that have not started.
    pub bound_waiting: Vec<JobId>,
    /// Jobs chosen at the slice's boundary that wait for stops to enter.
    pub turn_pending: Vec<JobId>,
    /// The next decision refills the turns taken (a boundary emptied them).
    pub ran_refill: bool,
    /// Jobs that entered in the remnant of the slice.
    pub remnant_entries: usize,
    /// The waiting jobs were considered since the last input that could
    /// let one start.
    pub waiting_current: bool,
}

/// The scheduler's state (see the module documentation).
#[derive(Debug, Clone)]
pub struct Scheduler {
    /// The slice cadence: boundaries at whole slices from the anchor.
    slice_anchor: Tick,
    next_slice: Tick,
    /// Jobs that took their turn in the current slice: the rotation at
    /// the slice boundary moves them to the back of their queues.
    ran: JobBits,
    /// Jobs chosen at the current slice's boundary that wait for stops to
    /// be confirmed before they enter: entering, they take their turn.
    turn_pending: JobBits,
    /// Jobs that entered in the remnant of a slice since the last
    /// boundary: the next boundary counts them as running, so a replay
    /// does not skip it.
    remnant_entries: usize,
    /// `ran` was emptied by a slice boundary: the next decision refills it
    /// with every job it chooses.
    ran_refill: bool,
    /// The rotation's buffers and shortcuts.
    rotation: Rotation,
    /// The last decision's active set.
    active: Vec<JobId>,
    /// Jobs whose hosts were chosen by the last decision but that have not
    /// started yet (their hosts were still being vacated); they choose
    /// again at the next decision.
    bound_waiting: BTreeSet<JobId>,
    /// The hosts the current decision chose, by job (an index into its
    /// `bind`).
    bound: JobMap<usize>,
    /// The last active set still holds: since it was computed only stops
    /// of jobs not being killed were confirmed, and the active set of gang
    /// queues depends on nothing those change. The switch's second
    /// decision, once the stops are confirmed, then costs no walk of the
    /// queues (generated gang replays, BENCHMARKS.md).
    decision_current: bool,
    /// The waiting jobs of gang queues with a level were considered by a
    /// decision since the last input that could let one start: only a
    /// slice boundary, a confirmed stop or a usage sample came since. Such
    /// jobs start when a job arrives or ends or a command changes
    /// something, not at every slice (sc_console(8), TIME-SHARING).
    waiting_current: bool,
    /// The walk's scratch: host masks, the matrix, the kept waiting jobs.
    scratch: Scratch,
    /// Hosts where a job's processes run or are being stopped, one bit a
    /// host (LCG and generated gang replays).
    busy: Vec<u64>,
    /// How many live jobs are being stopped (LCG gang replay).
    n_stopping: usize,
    /// How many hosts the machine has.
    n_hosts: usize,
}

/// Buffers the gang rotation fills and empties again at every slice
/// boundary. Empty between slices, so a copy of the scheduler copies
/// nothing of them.
#[derive(Debug, Default, Clone)]
struct Rotation {
    /// The jobs that ran in the slice, sorted.
    ran_sorted: Vec<JobId>,
    /// The jobs that ran, set aside by a queue's rotation.
    rotated: Vec<JobId>,
    /// The jobs that ran in the slice, when they are few ([`FEW_RAN`]);
    /// when they are many, the set of them is asked.
    ran: Vec<JobId>,
    /// How many of those each queue holds.
    ran_per_queue: Vec<usize>,
    /// Positions in a queue's order, for a rotation.
    positions: Vec<usize>,
    /// The regrouping of queues that share contested hosts by user.
    share: ShareScratch,
}

/// Up to this many jobs that ran in a slice, a rotation compares queued
/// jobs with a list of them rather than looking each up in their set.
const FEW_RAN: usize = 16;

impl Scheduler {
    /// A scheduler for `n_hosts` hosts, its first slice boundary one
    /// `slice` from time zero.
    pub fn new(n_hosts: usize, slice: Duration) -> Scheduler {
        Scheduler {
            slice_anchor: Tick::default(),
            next_slice: Tick::default().after(slice),
            ran: JobBits::default(),
            turn_pending: JobBits::default(),
            remnant_entries: 0,
            ran_refill: false,
            rotation: Rotation::default(),
            active: Vec::new(),
            bound_waiting: BTreeSet::new(),
            bound: JobMap::default(),
            decision_current: false,
            waiting_current: false,
            scratch: Scratch::default(),
            busy: vec![0; n_hosts.div_ceil(64)],
            n_stopping: 0,
            n_hosts,
        }
    }
}

/// The events.
impl Scheduler {
    /// An input arrived: unless it only confirmed the stop of a job not
    /// being killed, or was a usage sample that calls for nothing
    /// (`keeps_decision`), the last active set no longer holds; unless it
    /// was a tick, a confirmed stop or a usage sample (`keeps_waiting`),
    /// waiting jobs may start.
    pub fn input(&mut self, keeps_decision: bool, keeps_waiting: bool) {
        if !keeps_decision {
            self.decision_current = false;
        }
        if !keeps_waiting {
            self.waiting_current = false;
        }
    }

    /// The stop of `job`, on `hosts`, is confirmed: its hosts are free.
    pub fn stopped(&mut self, job: JobId, hosts: &[HostId]) {
        self.n_stopping -= 1;
        let mask = self.scratch.mask_of(job);
        set_busy(&mut self.busy, mask, hosts, false);
    }

    /// The processes of `job`, on `hosts`, are gone: it was being stopped
    /// (`stopping`), and its processes held its hosts (`live`).
    pub fn gone(&mut self, job: JobId, hosts: &[HostId], stopping: bool, live: bool) {
        if stopping {
            self.n_stopping -= 1;
        }
        if live {
            let mask = self.scratch.mask_of(job);
            set_busy(&mut self.busy, mask, hosts, false);
        }
    }

    /// `job`, on `hosts`, finished (see [`Scheduler::gone`]).
    pub fn finished(&mut self, job: JobId, hosts: &[HostId], stopping: bool, live: bool) {
        self.scratch.forget(job);
        self.bound_waiting.remove(&job);
        self.ran.remove(&job);
        self.turn_pending.remove(&job);
        self.gone(job, hosts, stopping, live);
    }

    /// The hosts of `job` changed (given back, or chosen by the core).
    pub fn hosts_changed(&mut self, job: JobId) {
        self.scratch.forget(job);
    }

    /// The jobs given hosts by the last decision that could not start: the
    /// core gives their hosts back before the next decision, so that none
    /// waits for particular hosts ([`Scheduler::hosts_changed`] each).
    pub fn take_unstarted(&mut self) -> BTreeSet<JobId> {
        if !self.bound_waiting.is_empty() {
            self.waiting_current = false;
        }
        std::mem::take(&mut self.bound_waiting)
    }

    /// Restarts the slice cadence at `now` (the daemon leaves idleness, or
    /// the slice changed), so that the next slice is whole.
    pub fn restart_slices(&mut self, now: Tick, slice: Duration) {
        self.slice_anchor = now;
        self.next_slice = now.after(slice);
    }

    /// A tick at `now`: at or after a slice boundary, the next one is set
    /// at the cadence (however late this tick, however long the last
    /// switch took), the gang queues rotate the jobs that took their turn
    /// to the back (and those that share by user regroup, `share.rs`), and
    /// the next decision counts the turns of the new slice; returns whether
    /// it was a boundary. `queue_of` gives a job's queue index, `jobs` its
    /// owner and hosts.
    pub fn slice_boundary(
        &mut self,
        now: Tick,
        slice: Duration,
        queues: &mut UndoQueues,
        queue_of: impl Fn(JobId) -> Option<usize>,
        jobs: &impl Owners,
    ) -> bool {
        if now < self.next_slice {
            return false;
        }
        let slice = slice.as_micros().max(1) as u64;
        let elapsed = now.0.saturating_sub(self.slice_anchor.0);
        self.next_slice = Tick(self.slice_anchor.0 + (elapsed / slice + 1) * slice);
        self.rotate(queues, queue_of, jobs);
        self.ran_refill = true;
        true
    }
}

/// The rotation.
impl Scheduler {
    /// Moves the jobs that ran in the slice to the back of their gang
    /// queues, and empties the set of them for the new slice.
    fn rotate(
        &mut self,
        queues: &mut UndoQueues,
        queue_of: impl Fn(JobId) -> Option<usize>,
        jobs: &impl Owners,
    ) {
        let mut ran = std::mem::take(&mut self.rotation.ran_sorted);
        ran.extend(&self.ran);
        // Kept through the rotation (a membership test is a bit), then
        // emptied for the new slice.
        let ran_bits = std::mem::take(&mut self.ran);
        if !ran.is_empty() {
            // A few jobs ran (gang jobs of a busy machine): comparing each
            // queued job with them costs less than hashing it.
            let mut few = std::mem::take(&mut self.rotation.ran);
            few.clear();
            if ran.len() <= FEW_RAN {
                few.extend(ran.iter().copied());
            }
            // Most queued jobs did not run: one bit per id modulo 64 tells
            // most of them apart from the few that did with one AND.
            let filter = few
                .iter()
                .fold(0u64, |bits, job| bits | (1 << (job.0 % 64)));
            // How many of the few are in each queue (a job's record names
            // its queue, which holds it once), so that a rotation stops at
            // the last of them; one whose record is gone counts for all.
            let mut per_queue = std::mem::take(&mut self.rotation.ran_per_queue);
            per_queue.clear();
            per_queue.resize(queues.len(), 0);
            for job in &few {
                match queue_of(*job) {
                    Some(queue) => {
                        if let Some(count) = per_queue.get_mut(queue) {
                            *count += 1;
                        }
                    }
                    None => per_queue.iter_mut().for_each(|count| *count += 1),
                }
            }
            let rotated = &mut self.rotation.rotated;
            let positions = &mut self.rotation.positions;
            let share = &mut self.rotation.share;
            let n_hosts = self.n_hosts;
            let scratch = &self.scratch;
            queues.modify_all(|queues| {
                for (idx, (queue, at_most)) in queues.iter_mut().zip(&per_queue).enumerate() {
                    // Debug builds check the shortcuts against a full pass.
                    let expected = cfg!(debug_assertions).then(|| {
                        let mut copy = queue.clone();
                        copy.rotate(|job| ran.contains(&job));
                        copy
                    });
                    if ran.len() <= FEW_RAN {
                        let ran =
                            |job: JobId| filter & (1 << (job.0 % 64)) != 0 && few.contains(&job);
                        // Where the last decision took them, if that still
                        // holds; else a pass up to the last of them.
                        if !queue.rotate_placed(
                            scratch.placed_in(idx),
                            *at_most,
                            ran,
                            rotated,
                            positions,
                        ) {
                            queue.rotate_at_most(ran, *at_most, rotated);
                        }
                    } else {
                        queue.rotate_with(|job| ran_bits.contains(&job), rotated);
                    }
                    if let Some(expected) = expected {
                        assert_eq!(*queue, expected, "the rotation of queue {idx}");
                    }
                    share.regroup(queue, jobs, n_hosts);
                }
            });
            self.rotation.ran_per_queue = per_queue;
            few.clear();
            self.rotation.ran = few;
        }
        // The set is refilled at once by the next decision: keep its tables.
        let mut ran_bits = ran_bits;
        ran_bits.clear();
        self.ran = ran_bits;
        ran.clear();
        self.rotation.ran_sorted = ran;
    }

    /// Counts the turns of a slice boundary's decision: the jobs it chose
    /// take their turn in the slice, whether they run at once (`running`)
    /// or once the stops they wait for are confirmed. A job that enters
    /// later in the slice (in what a job that ended left of it, or on hosts
    /// free when it starts) keeps its place in the rotation: a remnant is
    /// not a turn, so every job of a column of `level` runs a whole slice
    /// in `level`.
    fn take_turns(&mut self, running: impl Fn(usize, JobId) -> bool) {
        self.turn_pending.clear();
        self.remnant_entries = 0;
        for (at, job) in self.active.iter().enumerate() {
            if running(at, *job) {
                self.ran.insert(*job);
            } else {
                self.turn_pending.insert(*job);
            }
        }
    }

    /// A job enters at `now`: entering at the slice's start is a turn, and
    /// so is entering once the stops of the boundary's switch are
    /// confirmed; a job of a gang queue entering later, in the remnant of
    /// a slice, keeps its place in the rotation.
    fn count_entry(&mut self, job: JobId, now: Tick, slice: u64, gang: bool) {
        let at_start = now.0.saturating_sub(self.slice_anchor.0) % slice == 0;
        let chosen_at_start = self.turn_pending.remove(&job);
        if at_start || chosen_at_start {
            self.ran.insert(job);
        } else if gang {
            self.remnant_entries += 1;
        }
    }
}

/// The decision.
impl Scheduler {
    /// Decides what runs now and how to get there (see [`Decision`]).
    ///
    /// `first` lists the jobs placed before any queue (those being killed,
    /// which must keep their hosts and may need to run to handle SIGTERM);
    /// `live` is the set of jobs whose processes run or are being stopped.
    /// The core must carry the whole decision out before it tells the
    /// scheduler anything else: the jobs of `stop` are counted as being
    /// stopped, and those of `resume` and `spawn` as holding their hosts.
    ///
    /// A switch is two-phase: a chosen job enters only when no job that is
    /// running or still being stopped holds any of its hosts, so two jobs
    /// that share a host never run at once.
    pub fn decide<V: CoreView>(
        &mut self,
        queues: &[Queue],
        first: impl Fn(&mut Vec<JobId>),
        live: &JobBits,
        view: &V,
        now: Tick,
    ) -> Decision {
        let mut decision = Decision::default();
        let mut active = std::mem::take(&mut self.active);
        // Gang queues place jobs on the hosts they were given at admission,
        // so their active set is a function of the queues' order, which
        // jobs are runnable and which are placed first; a confirmed stop
        // changes none of these. Exclusive queues choose among free hosts
        // and reserve by the clock, so with any of them (or with hosts
        // chosen by the last decision) the set is computed afresh.
        let reuse = std::mem::take(&mut self.decision_current);
        if !reuse {
            self.decide_active(queues, &first, view, now, &mut active, &mut decision.bind);
        } else if cfg!(debug_assertions) {
            let mut fresh = Vec::new();
            self.decide_active(queues, &first, view, now, &mut fresh, &mut decision.bind);
            assert_eq!(fresh, active, "the kept active set is out of date");
            assert!(
                decision.bind.is_empty(),
                "the kept active set binds no host"
            );
        }
        self.decision_current = decision.bind.is_empty()
            && queues
                .iter()
                .all(|queue| !queue.activated || queue.mode == QueueMode::Gang || queue.is_empty());
        self.note_bindings(queues, view, &decision.bind);
        self.active = active;
        // Phase one: stop every running job that left the active set (the
        // walk's scratch says which job took each chosen job's first host).
        // With the last decision kept, none leaves: its stops were sent
        // when it was made, and only stops were confirmed since.
        if !reuse || cfg!(debug_assertions) {
            for job in live {
                let (phase, hosts) = view.state(job);
                let chosen = hosts
                    .first()
                    .is_some_and(|host| self.scratch.holds(job, *host));
                if phase == Phase::Running && !chosen {
                    decision.stop.push(job);
                }
            }
            assert!(
                !reuse || decision.stop.is_empty(),
                "a running job left a kept active set"
            );
        }
        self.n_stopping += decision.stop.len();
        let (entering, blocked) = self.entering(view, &decision.bind);
        for &(job, phase) in &entering {
            match phase {
                Phase::Stopped => decision.resume.push(job),
                _ => decision.spawn.push(job),
            }
        }
        // Continued jobs first, then jobs that run for the first time, so
        // that fork and exec delay no waiting job.
        let slice = view.slice().max(1);
        for job in decision.resume.iter().chain(&decision.spawn) {
            self.bound_waiting.remove(job);
            let gang = queues
                .get(view.queue(*job))
                .is_some_and(|queue| queue.mode == QueueMode::Gang);
            self.count_entry(*job, now, slice, gang);
        }
        decision.settled = self.n_stopping == 0 && !blocked;
        if std::mem::take(&mut self.ran_refill) {
            // Chosen jobs that run now: those running already, and those
            // entering (a subsequence of the active set, in its order).
            let mut next_entering = entering.iter().map(|(job, _)| *job).peekable();
            let running: Vec<bool> = self
                .active
                .iter()
                .map(|job| {
                    if next_entering.peek() == Some(job) {
                        next_entering.next();
                        true
                    } else {
                        view.state(*job).0 == Phase::Running
                    }
                })
                .collect();
            self.take_turns(|at, _| running[at]);
            debug_assert!(
                live.iter().all(|job| view.state(job).0 != Phase::Running
                    || self.ran.contains(&job)
                    || decision.stop.contains(&job)),
                "a running job is missing from the jobs that ran"
            );
        }
        decision
    }

    /// Computes the active set into `active`, and in `bind` the hosts
    /// chosen for jobs that had none.
    fn decide_active<V: JobView>(
        &mut self,
        queues: &[Queue],
        first: &impl Fn(&mut Vec<JobId>),
        view: &V,
        now: Tick,
        active: &mut Vec<JobId>,
        bind: &mut Vec<(JobId, Vec<HostId>)>,
    ) {
        let mut placed_first = Vec::new();
        first(&mut placed_first);
        active_set(
            queues,
            self.n_hosts,
            placed_first,
            view,
            now.0,
            !self.waiting_current,
            &self.busy,
            &mut self.scratch,
            active,
            bind,
        );
        self.waiting_current = true;
    }
}

/// The decision's steps.
impl Scheduler {
    /// What binding hosts to jobs changes: the walk's memory of their hosts
    /// goes, and a job of a queue without a level that has not started
    /// waits with them until it enters or the next decision (a job of a
    /// gang queue with a level joins the matrix on them for life).
    fn note_bindings<V: CoreView>(
        &mut self,
        queues: &[Queue],
        view: &V,
        bind: &[(JobId, Vec<HostId>)],
    ) {
        self.bound.clear();
        for (at, (job, _)) in bind.iter().enumerate() {
            self.scratch.forget(*job);
            let leveled = queues
                .get(view.queue(*job))
                .is_some_and(|queue| queue.level().is_some());
            if !leveled && !view.facts(*job).started {
                self.bound_waiting.insert(*job);
            }
            self.bound.insert(*job, at);
        }
    }

    /// Phase two: the chosen jobs that enter now (with their phase), those
    /// whose hosts are free of every job that is running or still being
    /// stopped, marked busy; and whether a chosen job waits for hosts.
    /// With no job being stopped, every live job is running and chosen
    /// (phase one stopped the others), and chosen jobs share no host: no
    /// chosen job can be blocked, and its hosts need no look (the second
    /// decision of a switch, once the stops are confirmed).
    fn entering<V: CoreView>(
        &mut self,
        view: &V,
        bind: &[(JobId, Vec<HostId>)],
    ) -> (Vec<(JobId, Phase)>, bool) {
        let none_stopping = self.n_stopping == 0;
        let mut blocked = false;
        let mut entering = Vec::new();
        let mut busy = std::mem::take(&mut self.busy);
        for &job in &self.active {
            let (phase, hosts) = view.state(job);
            if matches!(phase, Phase::Running | Phase::Stopping) {
                continue;
            }
            // A job given hosts now has them in the decision only.
            let hosts = match self.bound.is_empty() {
                true => hosts,
                false => self.bound.get(&job).map_or(hosts, |at| &bind[*at].1),
            };
            let mask = self.scratch.mask_of(job);
            if none_stopping {
                debug_assert!(
                    !any_busy(&busy, mask, hosts),
                    "job {job} is chosen on a host a running job holds"
                );
            } else if any_busy(&busy, mask, hosts) {
                blocked = true;
                continue;
            }
            set_busy(&mut busy, mask, hosts, true);
            entering.push((job, phase));
        }
        self.busy = busy;
        (entering, blocked)
    }
}

/// What the core asks of the scheduler's state.
impl Scheduler {
    /// The next slice boundary.
    pub fn next_boundary(&self) -> Tick {
        self.next_slice
    }

    /// The first slice boundary at or after `at`.
    pub fn boundary_at_or_after(&self, at: Tick, slice: Duration) -> Tick {
        if at <= self.next_slice {
            return self.next_slice;
        }
        let length = slice.as_micros().max(1) as u64;
        let elapsed = at.0.saturating_sub(self.slice_anchor.0);
        Tick(self.slice_anchor.0 + elapsed.div_ceil(length) * length)
    }

    /// How many jobs are being stopped.
    pub fn n_stopping(&self) -> usize {
        self.n_stopping
    }

    /// Whether a job entered in the remnant of a slice since the last
    /// boundary: counting its turn at the next one changes the rotation.
    pub fn entered_in_remnant(&self) -> bool {
        self.remnant_entries > 0
    }

    /// Whether only slice boundaries can change what the next slices
    /// decide, as far as the scheduler knows: no stop unconfirmed, no turn
    /// pending or taken in a remnant, the waiting jobs considered, no host
    /// bound to a job that waits.
    pub fn at_rest(&self) -> bool {
        self.n_stopping == 0
            && self.turn_pending.is_empty()
            && self.remnant_entries == 0
            && self.waiting_current
            && self.bound_waiting.is_empty()
    }

    /// The active set of the last decision (its chosen jobs, whether they
    /// run yet or wait for their hosts).
    pub fn active(&self) -> &[JobId] {
        &self.active
    }

    /// The active set, if the next decision keeps it: the inputs since the
    /// last one only confirmed stops of jobs not being killed (or were
    /// samples that call for nothing), and every
    /// queue that takes part places its jobs by the queues' order alone
    /// (see `decide`).
    pub fn kept_active(&self) -> Option<&[JobId]> {
        self.decision_current.then_some(&self.active[..])
    }

    /// The jobs that took their turn in the current slice.
    pub fn ran(&self) -> impl Iterator<Item = JobId> + '_ {
        self.ran.iter()
    }

    /// Moves the slice cadence `shift` later (a replay repeating whole
    /// periods of the rotation).
    pub fn shift_slices(&mut self, shift: u64) {
        self.next_slice = Tick(self.next_slice.0.saturating_add(shift));
    }
}

/// The restart snapshot's part.
impl Scheduler {
    /// What a snapshot keeps of the scheduler, so that a restored core
    /// decides from here exactly as the one it was taken from; the rest
    /// are caches, rebuilt from the jobs.
    pub fn snapshot(&self) -> SchedulerState {
        let mut ran: Vec<JobId> = self.ran.iter().collect();
        ran.sort_unstable();
        ran.dedup();
        SchedulerState {
            slice_anchor: self.slice_anchor,
            next_slice: self.next_slice,
            ran,
            bound_waiting: self.bound_waiting.iter().copied().collect(),
            turn_pending: self.turn_pending.iter().collect(),
            ran_refill: self.ran_refill,
            remnant_entries: self.remnant_entries,
            waiting_current: self.waiting_current,
        }
    }

    /// A scheduler with a snapshot's state, its caches rebuilt from the
    /// live jobs (each with its hosts, and whether it is being stopped).
    pub fn restored<'a>(
        n_hosts: usize,
        state: SchedulerState,
        live: impl Iterator<Item = (&'a [HostId], bool)>,
    ) -> Scheduler {
        let mut sched = Scheduler::new(n_hosts, Duration::ZERO);
        sched.slice_anchor = state.slice_anchor;
        sched.next_slice = state.next_slice;
        sched.ran = state.ran.into_iter().collect();
        sched.bound_waiting = state.bound_waiting.into_iter().collect();
        sched.turn_pending = state.turn_pending.into_iter().collect();
        sched.ran_refill = state.ran_refill;
        sched.remnant_entries = state.remnant_entries;
        sched.waiting_current = state.waiting_current;
        for (hosts, stopping) in live {
            set_busy(&mut sched.busy, None, hosts, true);
            if stopping {
                sched.n_stopping += 1;
            }
        }
        sched
    }

    /// Panics unless the caches are what the live jobs make them (each
    /// with its hosts and phase); debug builds call it after every step.
    pub fn check<'a>(&self, live: impl Iterator<Item = (&'a [HostId], Phase)>) {
        let mut busy = vec![0; self.busy.len()];
        let mut stopping = 0;
        for (hosts, phase) in live {
            set_busy(&mut busy, None, hosts, true);
            stopping += usize::from(phase == Phase::Stopping);
        }
        assert_eq!(busy, self.busy, "busy hosts are the live jobs' hosts");
        assert_eq!(stopping, self.n_stopping, "count of stopping jobs");
    }
}

/// Marks a job's hosts busy (`on`) or free in the busy bits: a word at a
/// time with the job's mask of hosts (from the walk's scratch), else host
/// by host.
#[inline]
fn set_busy(busy: &mut [u64], mask: Option<&[u64]>, hosts: &[HostId], on: bool) {
    match mask {
        Some(mask) => {
            debug_assert_eq!(mask, &host_bits(busy.len(), hosts)[..mask.len()]);
            for (word, bits) in busy.iter_mut().zip(mask) {
                if on {
                    *word |= bits;
                } else {
                    *word &= !bits;
                }
            }
        }
        None => {
            for host in hosts {
                if let Some(word) = busy.get_mut(host.idx() / 64) {
                    let bit = 1u64 << (host.idx() % 64);
                    if on {
                        *word |= bit;
                    } else {
                        *word &= !bit;
                    }
                }
            }
        }
    }
}

/// Whether one of a job's hosts is busy (a host beyond the machine is).
#[inline]
pub(super) fn any_busy(busy: &[u64], mask: Option<&[u64]>, hosts: &[HostId]) -> bool {
    match mask {
        Some(mask) => busy.iter().zip(mask).any(|(word, bits)| word & bits != 0),
        None => hosts.iter().any(|host| {
            busy.get(host.idx() / 64)
                .is_none_or(|word| word & (1 << (host.idx() % 64)) != 0)
        }),
    }
}

/// Hosts as bits, in `words` words (for checks).
fn host_bits(words: usize, hosts: &[HostId]) -> Vec<u64> {
    let mut bits = vec![0; words.max(1)];
    set_busy(&mut bits, None, hosts, true);
    bits
}
