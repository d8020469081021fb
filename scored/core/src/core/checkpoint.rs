//! The checkpoint that a panic rolls the core back to: the event loop
//! commits after each event that changed the core, and a panic while
//! handling the next one restarts the daemon from the committed state
//! rather than from what the bug left.
//!
//! A commit does not copy the core: the containers that grow with the jobs
//! log what they overwrite from then on (`crate::undo`), and the job table
//! keeps a job's record as it was before its first change, so a commit costs
//! what the last event changed (a submission: its job, its queue entry, its
//! client), not what the daemon holds. Only what does not grow with the
//! queued jobs (counters, clocks, the decision's scratch) is copied. Persistent
//! containers would share structure as well, but the decision, which reads
//! the job table and sets for every queued job, would then look them up
//! through trees; the log leaves the containers the decision reads as they
//! are.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::hash::BuildHasherDefault;
use std::rc::Rc;

use super::{Core, CoreConfig, Finished, JobTable, Waiter};
use crate::cluster::Topology;
use crate::ids::{ClientToken, JobId, Tick};
use crate::job::Launch;
use crate::jobset::{JobBits, JobIdHasher};
use crate::sorted::SortedSet;
use crate::undo::{Undo, UndoCell, UndoDeque, UndoLedger, UndoMap, UndoQueues, UndoSet};

/// Declares [`Logged`] from one list of containers, and its commit and
/// rollback from the same list, so that a container cannot be declared
/// without being committed and rolled back.
macro_rules! logged {
    ($($(#[$doc:meta])* $field:ident: $ty:ty,)*) => {
        /// The parts of the core that log their own changes (`crate::undo`):
        /// everything that grows with the jobs, and the larger fixed parts.
        /// A commit starts each one's log afresh instead of copying it; the
        /// rest of [`Core`] is copied. A container that grows with the jobs
        /// belongs here, in one line; `tests::checkpoint` fails if a
        /// container that logs its changes is a field of `Core` instead.
        #[derive(Clone, Default)]
        pub(super) struct Logged {
            $($(#[$doc])* pub(super) $field: $ty,)*
        }

        impl Undo for Logged {
            fn commit(&mut self) {
                $(self.$field.commit();)*
            }

            fn rollback(&mut self) {
                $(self.$field.rollback();)*
            }
        }
    };
}

logged! {
    /// The core's settings.
    config: UndoCell<CoreConfig>,
    /// Hosts and clusters.
    topology: UndoCell<Topology>,
    /// Reservations of hosts and cluster capacity.
    ledger: UndoLedger,
    /// The queues, with their settings and orders.
    queues: UndoQueues,
    /// Unfinished jobs.
    jobs: JobTable,
    /// The job each connected client submitted.
    by_client: UndoMap<ClientToken, JobId>,
    /// Clients waiting for admission.
    waiting: UndoDeque<Rc<Waiter>>,
    /// Finished jobs remembered for listings.
    finished: UndoDeque<Rc<Finished>>,
    /// Jobs whose processes may be running: phase Running or Stopping.
    live: UndoSet<JobBits>,
    /// Graceful kills in progress, by the time they turn into SIGKILL.
    kill_deadlines: UndoSet<SortedSet<(Tick, JobId)>>,
    /// Jobs whose scrun may reattach, by the time it may take (`takeover.rs`).
    detached: super::takeover::Detached,
    /// Running jobs with a `-time` limit, by the time it is reached.
    time_deadlines: UndoSet<SortedSet<(Tick, JobId)>>,
    /// Live jobs with a CPU time limit or a residency to cross, by how far
    /// from it their last sample left them ([`Core::crossing_key`]), so
    /// that `next_decision` finds the earliest crossing without looking at
    /// every running job (a derived cache: the LCG replay with residency
    /// takes 27 % longer without it, BENCHMARKS.md).
    crossings: UndoSet<BTreeSet<(u64, JobId)>>,
    /// Each indexed job's key in `crossings`.
    crossing_of: UndoMap<JobId, u64, BuildHasherDefault<JobIdHasher>>,
    /// Launch data of unfinished jobs by content hash, so identical
    /// submissions share one copy.
    launches: UndoMap<u64, Vec<Launch>>,
    /// The ends the backlog keeps for its dependants and listings.
    ends: super::backlog::Ends,
    /// Jobs that have their ids and are not admitted yet: batch jobs,
    /// jobs that wait for others, arrays (`backlog.rs`).
    backlog: super::backlog::Backlog,
}

impl Core {
    /// Makes the current state the one [`Core::rollback`] returns to: the
    /// event loop calls it after each event that changed the core, so
    /// that when handling an event panics, the daemon restarts from the
    /// state before that event, not as the bug left it.
    ///
    /// The containers of [`Logged`] log what they overwrite from now on,
    /// so a commit drops the last event's log instead of copying them; the
    /// rest of the state (counters, clocks, the scheduler with its last
    /// active set and busy hosts: nothing that grows with the queued jobs)
    /// is copied here. Journal events are not part of the checkpoint: the
    /// loop takes them at the end of each event, and a rollback drops the
    /// ones not taken yet.
    pub fn commit(&mut self) {
        let logged = std::mem::take(&mut self.logged);
        let journal = self.journal.take();
        self.saved = None;
        let rest = Box::new(self.clone());
        self.saved = Some(rest);
        self.journal = journal;
        self.logged = logged;
        self.logged.commit();
    }

    /// Goes back to the state of the last [`Core::commit`]; false (and
    /// nothing changed) if there was none. A second rollback before the
    /// next commit returns to the same state.
    pub fn rollback(&mut self) -> bool {
        let Some(saved) = self.saved.take() else {
            return false;
        };
        self.logged.rollback();
        let logged = std::mem::take(&mut self.logged);
        // Journal events not taken yet were recorded by the changes
        // undone here: they go too, and recording goes on.
        let journal = self.journal.take().map(|_| Vec::new());
        *self = Core::clone(&saved);
        self.saved = Some(saved);
        self.journal = journal;
        self.logged = logged;
        true
    }
}
