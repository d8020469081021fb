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
use std::rc::Rc;

use super::{Core, CoreConfig, Finished, JobTable, Waiter};
use crate::cluster::Topology;
use crate::ids::{ClientToken, JobId, Tick};
use crate::job::Launch;
use crate::jobset::JobIdHasher;
use crate::sorted::SortedSet;
use crate::undo::{Undo, UndoCell, UndoDeque, UndoLedger, UndoMap, UndoQueues, UndoSet};
use std::hash::BuildHasherDefault;

impl Core {
    /// Makes the current state the one [`Core::rollback`] returns to: the
    /// event loop calls it after each event that changed the core, so
    /// that when handling an event panics, the daemon restarts from the
    /// state before that event, not as the bug left it.
    ///
    /// The containers that grow with the jobs (the job table, the queues'
    /// orders, clients by job, waiting and finished jobs, the live and
    /// deadline sets, the crossing index, the launch interner) and the
    /// larger fixed ones (the topology, the ledger, the configuration)
    /// log what they overwrite from now on (`crate::undo`), so a commit
    /// drops the last event's log instead of copying them; the rest of the
    /// state (counters, clocks, the last decision's scratch and active
    /// set, the busy hosts: nothing that grows with the queued jobs) is
    /// copied here. Journal events are not part of the checkpoint: the
    /// loop takes them at the end of each event, and a rollback drops the
    /// ones not taken yet.
    pub fn commit(&mut self) {
        let logged = self.take_logged();
        let journal = self.journal.take();
        self.saved = None;
        let rest = Box::new(self.clone());
        self.saved = Some(rest);
        self.journal = journal;
        self.put_logged(logged);
        self.jobs.commit();
        self.queues.commit();
        self.by_client.commit();
        self.waiting.commit();
        self.finished.commit();
        self.live.commit();
        self.kill_deadlines.commit();
        self.time_deadlines.commit();
        self.crossings.commit();
        self.crossing_of.commit();
        self.launches.commit();
        self.topology.commit();
        self.ledger.commit();
        self.config.commit();
    }

    /// Goes back to the state of the last [`Core::commit`]; false (and
    /// nothing changed) if there was none. A second rollback before the
    /// next commit returns to the same state.
    pub fn rollback(&mut self) -> bool {
        let Some(saved) = self.saved.take() else {
            return false;
        };
        self.jobs.rollback();
        self.queues.rollback();
        self.by_client.rollback();
        self.waiting.rollback();
        self.finished.rollback();
        self.live.rollback();
        self.kill_deadlines.rollback();
        self.time_deadlines.rollback();
        self.crossings.rollback();
        self.crossing_of.rollback();
        self.launches.rollback();
        self.topology.rollback();
        self.ledger.rollback();
        self.config.rollback();
        let logged = self.take_logged();
        // Journal events not taken yet were recorded by the changes
        // undone here: they go too, and recording goes on.
        let journal = self.journal.take().map(|_| Vec::new());
        *self = Core::clone(&saved);
        self.saved = Some(saved);
        self.journal = journal;
        self.put_logged(logged);
        true
    }

    /// Moves the logged containers out, leaving empty ones, so that the
    /// rest of the core is copied at the cost of the rest.
    fn take_logged(&mut self) -> Logged {
        Logged {
            config: std::mem::take(&mut self.config),
            topology: std::mem::take(&mut self.topology),
            ledger: std::mem::take(&mut self.ledger),
            queues: std::mem::take(&mut self.queues),
            jobs: std::mem::take(&mut self.jobs),
            by_client: std::mem::take(&mut self.by_client),
            waiting: std::mem::take(&mut self.waiting),
            finished: std::mem::take(&mut self.finished),
            live: std::mem::take(&mut self.live),
            kill_deadlines: std::mem::take(&mut self.kill_deadlines),
            time_deadlines: std::mem::take(&mut self.time_deadlines),
            crossings: std::mem::take(&mut self.crossings),
            crossing_of: std::mem::take(&mut self.crossing_of),
            launches: std::mem::take(&mut self.launches),
        }
    }

    /// Puts back what [`Core::take_logged`] took.
    fn put_logged(&mut self, logged: Logged) {
        let Logged {
            config,
            topology,
            ledger,
            queues,
            jobs,
            by_client,
            waiting,
            finished,
            live,
            kill_deadlines,
            time_deadlines,
            crossings,
            crossing_of,
            launches,
        } = logged;
        self.config = config;
        self.topology = topology;
        self.ledger = ledger;
        self.queues = queues;
        self.jobs = jobs;
        self.by_client = by_client;
        self.waiting = waiting;
        self.finished = finished;
        self.live = live;
        self.kill_deadlines = kill_deadlines;
        self.time_deadlines = time_deadlines;
        self.crossings = crossings;
        self.crossing_of = crossing_of;
        self.launches = launches;
    }
}

/// The parts of the core that log their own changes (see `Core::commit`).
struct Logged {
    config: UndoCell<CoreConfig>,
    topology: UndoCell<Topology>,
    ledger: UndoLedger,
    queues: UndoQueues,
    jobs: JobTable,
    by_client: UndoMap<ClientToken, JobId>,
    waiting: UndoDeque<Rc<Waiter>>,
    finished: UndoDeque<Rc<Finished>>,
    live: UndoSet<SortedSet<JobId>>,
    kill_deadlines: UndoSet<SortedSet<(Tick, JobId)>>,
    time_deadlines: UndoSet<SortedSet<(Tick, JobId)>>,
    crossings: UndoSet<BTreeSet<(u64, JobId)>>,
    crossing_of: UndoMap<JobId, u64, BuildHasherDefault<JobIdHasher>>,
    launches: UndoMap<u64, Vec<Launch>>,
}
