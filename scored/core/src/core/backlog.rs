//! The backlog: jobs that have their ids and are not admitted yet. A batch
//! submission (`scrun -batch`), one that waits for other jobs (`-after=`,
//! `-afterany=`) and an array (`-array=`) get all their ids when they are
//! submitted, and wait here, one [`Entry`] per submission, until each of
//! their jobs is admitted or ends without running.
//!
//! An entry's jobs (an array's elements) are admitted one at a time, in
//! index order, once every job it depends on has ended (with status 0,
//! for `-after`), with at most MAX admitted and unfinished (`%MAX`), in
//! the order entries became ready, among the clients that wait for
//! admission, and at most [`ADMIT_PER_EVENT`] in one event. An element is
//! a job record only from its admission: an array costs the core one entry
//! and its admitted elements, whatever its length. A job that depends on
//! one that failed never runs: it ends with a reason naming that job, and
//! so do the jobs that depend on it in turn. An entry stays until its last
//! job ended, so that `-after=` on an array's id waits for all of it.
//!
//! How jobs ended is kept ([`OUTCOMES`] of them) for those that are still
//! to be depended on; the event loop reads older ones from the journal and
//! hands them in ([`Input::KnownEnd`](super::Input::KnownEnd)).
//!
//! The backlog and the ends it keeps ([`Ends`]) are among the containers
//! that log their changes for the checkpoint (`Core::commit`), so that an
//! event costs the checkpoint what it changed of them: an admission or an
//! end logs one entry, however many submissions wait.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use super::{
    cap_reason, stages_line, Accounting, Action, ClientEvent, Core, EndKind, Ending, JobEvent,
    Rejection, Waiter, SIGTERM,
};
use crate::admission::Decision;
use crate::ids::{ClientToken, Cred, JobId, Tick};
use crate::job::{JobRequest, JobState, Link, Submission};
use crate::undo::{Undo, UndoCell, UndoDeque, UndoTree};
use scored_proto::batch::Dependency;
use scored_proto::command::reply::Value;

mod ends;
mod fields;
pub(super) use ends::Ends;
pub(super) use fields::batch_fields;
use fields::entry_name;

/// The most jobs of the backlog admitted in one event; the rest are
/// admitted at the next tick, which comes at once, so that a long array
/// never holds the loop.
pub const ADMIT_PER_EVENT: usize = 256;
/// How many ends the backlog keeps for jobs that may still be depended on.
pub const OUTCOMES: usize = 4096;
/// How many jobs that ended without being admitted the backlog keeps for
/// `job ID` and `jobs all` (the journal keeps them all).
const ENDED_KEPT: usize = super::HISTORY;

/// How a job ended, as a job that depends on it sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ended with status 0 (every element did, for an array).
    Success,
    /// It did not: a sentence that says how, naming the job (`job 12 ended
    /// with status 1`).
    Failure(String),
}

impl Outcome {
    /// A job's outcome from how it ended: a success only when it ran to
    /// its end with status 0.
    pub fn of(job: JobId, state: JobState, status: i32, reason: &str) -> Outcome {
        if state == JobState::Done && status == 0 {
            return Outcome::Success;
        }
        let mut how = format!("job {job} ended with status {status} ({reason})");
        if how.len() > 200 {
            how = super::cap_text(how, 200);
        }
        Outcome::Failure(how)
    }
}

/// One submission in the backlog: its request, shared by its jobs, and
/// where each of them stands (job `first + k` is element `k`).
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) cred: Cred,
    pub(super) user: Rc<str>,
    /// `Link::Batch`, or the client of an interactive job that waits for
    /// other jobs.
    pub(super) link: Link,
    /// What each job runs; dropped once every job is admitted or ended.
    pub(super) request: Option<Rc<JobRequest>>,
    /// Its batch options and first id, which its jobs share.
    pub(super) submission: Rc<Submission>,
    /// Its command line as listings show it.
    pub(super) command: Rc<str>,
    /// Its jobs' name: the one given, else the program's base name.
    pub(super) name: Rc<str>,
    /// How many jobs: an array's elements, else 1.
    pub(super) count: u32,
    pub(super) submitted_at: Tick,
    /// The jobs it still waits for.
    pub(super) waits_for: Vec<Dependency>,
    /// The next element to admit.
    pub(super) next: u32,
    /// Elements from `next` on that ended without being admitted (killed).
    pub(super) skipped: BTreeSet<u32>,
    /// Elements admitted and not ended.
    pub(super) admitted: u32,
    /// Elements ended, admitted or not.
    pub(super) ended: u32,
    /// How the first element that did not succeed ended.
    pub(super) failure: Option<String>,
    /// Why its next element waits for admission, when resources are short.
    pub(super) short: Option<String>,
    /// Since when it is ready to admit its next element (its place among
    /// the submissions that wait for admission).
    pub(super) since: Tick,
    /// Its scrun was suspended while it waited: admit it held.
    pub(super) held: bool,
}

impl Entry {
    fn first(&self) -> JobId {
        self.submission.first
    }

    fn id(&self, k: u32) -> JobId {
        JobId(self.first().0 + u64::from(k))
    }

    fn is_array(&self) -> bool {
        self.submission.batch.array.is_some()
    }

    /// The elements that wait here: from `next` on, less the skipped.
    pub(super) fn waiting(&self) -> impl Iterator<Item = u32> + '_ {
        (self.next..self.count).filter(|k| !self.skipped.contains(k))
    }

    /// How many elements wait here.
    pub(super) fn n_waiting(&self) -> u32 {
        self.count - self.next - self.skipped.len() as u32
    }

    /// Whether its next element may be admitted now.
    fn may_admit(&self) -> bool {
        self.waits_for.is_empty()
            && self.n_waiting() > 0
            && self
                .submission
                .batch
                .array
                .and_then(|spec| spec.max)
                .is_none_or(|max| self.admitted < max)
    }

    /// Why its elements are not admitted yet, as `jobs` and `job ID` show it.
    pub(super) fn why(&self) -> String {
        if !self.waits_for.is_empty() {
            let ids: Vec<String> = self
                .waits_for
                .iter()
                .map(|dep| format!("{}={}", dep.option(), dep.job))
                .collect();
            return format!("waits for {}", ids.join(","));
        }
        if let Some(max) = self.submission.batch.array.and_then(|spec| spec.max) {
            if self.admitted >= max {
                return format!("waits for its array: {} of %{max} running", self.admitted);
            }
        }
        if self.short.is_none() && self.is_array() && self.admitted > 0 {
            return "waits for its array's admitted elements to start".to_string();
        }
        match &self.short {
            Some(reason) => format!("waits for resources: {reason}"),
            None => "waits for admission".to_string(),
        }
    }
}

/// A job that ended without being admitted, kept for `job ID` and `jobs all`.
#[derive(Debug, Clone)]
pub(super) struct EndedEarly {
    pub(super) id: JobId,
    pub(super) uid: u32,
    /// Its `job ID` facts, with its command, exit and reason.
    pub(super) fields: Vec<(String, Value)>,
}

/// The jobs that have their ids and are not admitted yet (see the module
/// documentation).
#[derive(Debug, Clone, Default)]
pub(super) struct Backlog {
    /// The submissions, by their first job's id.
    pub(super) entries: UndoTree<JobId, Entry>,
    /// Entries that may admit their next element, in the order they became
    /// ready (an entry no longer ready is dropped when met).
    ready: UndoDeque<JobId>,
    /// Entries by the jobs they wait for.
    dependants: UndoTree<JobId, Vec<JobId>>,
    /// Admissions were left for the next event ([`ADMIT_PER_EVENT`]).
    pub(super) more: UndoCell<bool>,
}

impl Undo for Backlog {
    fn commit(&mut self) {
        self.entries.commit();
        self.ready.commit();
        self.dependants.commit();
        self.more.commit();
    }

    fn rollback(&mut self) {
        self.entries.rollback();
        self.ready.rollback();
        self.dependants.rollback();
        self.more.rollback();
    }
}

impl Backlog {
    /// The entry job `id` belongs to, with the element it is.
    pub(super) fn entry_of(&self, id: JobId) -> Option<(&Entry, u32)> {
        let (_, entry) = self.entries.range(..=id).next_back()?;
        let k = u32::try_from(id.0 - entry.first().0).ok()?;
        (k < entry.count).then_some((entry, k))
    }

    /// Whether job `id` waits here (not admitted, not ended).
    pub(super) fn holds(&self, id: JobId) -> bool {
        self.entry_of(id)
            .is_some_and(|(entry, k)| k >= entry.next && !entry.skipped.contains(&k))
    }

    /// Whether nothing is in the backlog.
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Puts back what the snapshot kept: the entries, and what is derived
    /// from them (the ready entries in order, the dependants).
    pub(super) fn restored(entries: BTreeMap<JobId, Entry>) -> Backlog {
        let mut dependants: BTreeMap<JobId, Vec<JobId>> = BTreeMap::new();
        let mut ready: Vec<(Tick, JobId)> = Vec::new();
        for (first, entry) in &entries {
            for dep in &entry.waits_for {
                dependants.entry(JobId(dep.job)).or_default().push(*first);
            }
            if entry.may_admit() {
                ready.push((entry.since, *first));
            }
        }
        ready.sort();
        let mut backlog = Backlog {
            entries: UndoTree::new(entries),
            dependants: UndoTree::new(dependants),
            more: UndoCell::new(!ready.is_empty()),
            ..Backlog::default()
        };
        for (_, first) in ready {
            backlog.ready.push_back(first);
        }
        backlog
    }

    /// Notes that entry `first` waits for job `target`.
    fn add_dependant(&mut self, target: JobId, first: JobId) {
        match self.dependants.get_mut(&target) {
            Some(list) => list.push(first),
            None => {
                self.dependants.insert(target, vec![first]);
            }
        }
    }
}

/// What ending a job of the backlog says: its state, kind, status and reason.
struct EarlyEnd {
    kind: EndKind,
    status: i32,
    reason: String,
}

impl EarlyEnd {
    fn killed(who: &str) -> EarlyEnd {
        EarlyEnd {
            kind: EndKind::Killed,
            status: scored_proto::exitcode::from_signal(SIGTERM),
            reason: format!("killed {who} before it started"),
        }
    }
}

impl Core {
    fn backlog_mut(&mut self) -> &mut Backlog {
        &mut self.logged.backlog
    }

    /// Takes a submission that needs its ids now (`-batch`, `-after=`,
    /// `-afterany=`, `-array=`) into the backlog, and tells the client
    /// its id and, if it is not admitted at once, why.
    pub(super) fn submit_to_backlog(
        &mut self,
        client: ClientToken,
        waiter: Waiter,
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        let reject = |kind, reason: String, out: &mut Vec<Action>| {
            out.push(Action::notify(
                client,
                ClientEvent::Rejected { kind, reason },
            ));
        };
        if let Decision::TooBig(reason) = self.decide(&waiter) {
            return reject(Rejection::TooBig, reason, out);
        }
        let batch = &waiter.request.batch;
        let count = batch.array.map_or(1, |spec| spec.len());
        if let Err(reason) = self.check_budgets_for(&waiter, false, count as usize) {
            tracing::info!(uid = waiter.cred.uid, %reason, "submission over a budget");
            return reject(Rejection::Resources, reason, out);
        }
        let (waits_for, failed) = match self.dependencies(batch.after.iter(), &waiter.cred) {
            Ok(found) => found,
            Err(reason) => return reject(Rejection::Invalid, reason, out),
        };
        let first = JobId(self.next_job);
        self.next_job += u64::from(count);
        let link = if batch.detach {
            Link::Batch
        } else {
            Link::Client(client)
        };
        let submission = Rc::new(Submission {
            batch: batch.clone(),
            first,
        });
        let command: Rc<str> = stages_line(&waiter.request.stages, waiter.request.joiner).into();
        let name = entry_name(&waiter.request);
        let entry = Entry {
            cred: waiter.cred,
            user: waiter.user,
            link,
            request: Some(Rc::new(waiter.request)),
            submission,
            command,
            name,
            count,
            submitted_at: now,
            waits_for: if failed.is_some() {
                Vec::new()
            } else {
                waits_for
            },
            next: 0,
            skipped: BTreeSet::new(),
            admitted: 0,
            ended: 0,
            failure: None,
            short: None,
            since: now,
            held: false,
        };
        tracing::info!(job = %first, count, user = %entry.user, "submission taken into the backlog");
        if self.journal.is_some() {
            let record = self.entry_fields(&entry, 0, None, now, true);
            self.journal(JobEvent::Submitted {
                first,
                last: entry.id(count - 1),
                record,
            });
        }
        let mark = out.len();
        let backlog = self.backlog_mut();
        for dep in &entry.waits_for {
            backlog.add_dependant(JobId(dep.job), first);
        }
        let ready = entry.may_admit();
        backlog.entries.insert(first, entry);
        if ready {
            backlog.ready.push_back(first);
        }
        if let Some(why) = failed {
            self.end_waiting(
                first,
                &EarlyEnd {
                    kind: EndKind::Killed,
                    status: scored_proto::exitcode::REJECTED,
                    reason: format!("never ran: {why}"),
                },
                now,
                out,
            );
        }
        self.admit_waiters(now, out);
        let waits = self.logged.backlog.entry_of(first).and_then(|(entry, k)| {
            (k >= entry.next && !entry.skipped.contains(&k)).then(|| entry.why())
        });
        let told = link.is_batch() || waits.is_some() || !self.logged.jobs.contains_key(&first);
        if told {
            let waits = waits.or_else(|| {
                // Ended at once: say how.
                self.logged
                    .ends
                    .ended
                    .iter()
                    .rev()
                    .find(|ended| ended.id == first)
                    .and_then(|ended| {
                        ended
                            .fields
                            .iter()
                            .find_map(|(key, value)| (key == "reason").then(|| value.to_text()))
                    })
            });
            out.insert(
                mark,
                Action::notify(
                    client,
                    ClientEvent::Accepted {
                        job: first,
                        count,
                        waits,
                    },
                ),
            );
        }
    }

    /// The jobs a submission waits for (`after`) that are still to end,
    /// and the first failure of one it needs to succeed; an error names
    /// an option whose job cannot be waited for.
    fn dependencies<'a>(
        &self,
        after: impl Iterator<Item = &'a Dependency>,
        cred: &Cred,
    ) -> Result<(Vec<Dependency>, Option<String>), String> {
        let mut waits_for = Vec::new();
        let mut failed = None;
        for dep in after {
            match self.dependency_state(JobId(dep.job), cred) {
                Err(reason) => return Err(format!("option '{}': {reason}", dep.option())),
                Ok(None) => waits_for.push(*dep),
                Ok(Some(Outcome::Success)) => {}
                Ok(Some(Outcome::Failure(how))) => {
                    if !dep.any && failed.is_none() {
                        failed = Some(format!("{how}; -{}={}", dep.option(), dep.job));
                    }
                }
            }
        }
        Ok((waits_for, failed))
    }

    /// Where job `id` stands for a job that would depend on it: still to
    /// end (`None`), ended and how, or an error naming why it cannot be
    /// depended on.
    /// A job may wait only for its owner's jobs (root and operators for
    /// anyone's): how another user's job ended is theirs to know.
    fn dependency_state(&self, id: JobId, cred: &Cred) -> Result<Option<Outcome>, String> {
        let (owner, state) = self.dependency_owner_state(id)?;
        if owner != cred.uid && !self.is_operator(cred) {
            return Err(format!(
                "job {id} belongs to another user: a job may wait only for its owner's jobs"
            ));
        }
        Ok(state)
    }

    /// The owner of job `id` and where it stands: still to end (`None`),
    /// or ended and how; an error naming why it is not known.
    fn dependency_owner_state(&self, id: JobId) -> Result<(u32, Option<Outcome>), String> {
        if id.0 >= self.next_job {
            return Err(format!(
                "there is no job {id} (the last job so far is {})",
                self.next_job.saturating_sub(1)
            ));
        }
        if let Some(job) = self.logged.jobs.get(&id) {
            return Ok((job.owner.uid, None));
        }
        if let Some((entry, k)) = self.logged.backlog.entry_of(id) {
            // An array's id stands for all of it, which has not ended
            // while its entry is here.
            if (entry.is_array() && k == 0) || self.logged.backlog.holds(id) {
                return Ok((entry.cred.uid, None));
            }
        }
        if let Some((owner, outcome)) = self.logged.ends.outcome(id) {
            return Ok((owner, Some(outcome.clone())));
        }
        if let Some(done) = self.logged.finished.iter().find(|done| done.job.id == id) {
            let outcome = Outcome::of(id, done.state, done.ending.status, &done.ending.reason);
            return Ok((done.job.owner.uid, Some(outcome)));
        }
        Err(format!(
            "job {id} ended too long ago for scored to know how (it is not in the journal)"
        ))
    }

    /// A job ended (`admitted`: it was admitted, else it ended from the
    /// backlog): its entry learns it, and the jobs that depend on it (or on
    /// its array, once all of it ended) go on or end in turn.
    pub(super) fn backlog_job_ended(
        &mut self,
        id: JobId,
        admitted: bool,
        owner: u32,
        outcome: Outcome,
        now: Tick,
        out: &mut Vec<Action>,
    ) {
        let mut work = vec![(id, admitted, owner, outcome)];
        while let Some((id, admitted, owner, outcome)) = work.pop() {
            for (target, outcome) in self.note_end(id, admitted, owner, outcome, now) {
                let dependants = self
                    .backlog_mut()
                    .dependants
                    .remove(&target)
                    .unwrap_or_default();
                for first in dependants {
                    work.extend(self.dependency_ended(first, target, &outcome, now, out));
                }
            }
        }
    }

    /// Counts an end in the job's entry; returns the ends that jobs may
    /// depend on: the job's own, and its array's once all of it ended.
    fn note_end(
        &mut self,
        id: JobId,
        admitted: bool,
        owner: u32,
        outcome: Outcome,
        now: Tick,
    ) -> Vec<(JobId, Outcome)> {
        let Some(first) = self
            .logged
            .backlog
            .entry_of(id)
            .map(|(entry, _)| entry.first())
        else {
            self.logged.ends.remember(id, owner, outcome.clone());
            return vec![(id, outcome)];
        };
        let backlog = &mut self.logged.backlog;
        let entry = backlog.entries.get_mut(&first).expect("found above");
        if admitted {
            entry.admitted = entry.admitted.saturating_sub(1);
        }
        entry.ended += 1;
        if let Outcome::Failure(how) = &outcome {
            entry.failure.get_or_insert_with(|| how.clone());
        }
        let is_array = entry.is_array();
        let mut ends = Vec::new();
        if is_array && id != first {
            ends.push((id, outcome.clone()));
        }
        if entry.ended >= entry.count {
            let entry = backlog.entries.remove(&first).expect("found above");
            let whole = match (&entry.failure, is_array) {
                (None, _) => Outcome::Success,
                (Some(how), false) => Outcome::Failure(how.clone()),
                (Some(how), true) => Outcome::Failure(format!("array {first}: {how}")),
            };
            ends.push((first, whole));
        } else if entry.may_admit() && !backlog.ready.contains(&first) {
            entry.since = now;
            backlog.ready.push_back(first);
        }
        for (job, outcome) in &ends {
            self.logged.ends.remember(*job, owner, outcome.clone());
        }
        ends
    }

    /// Entry `first` learns that `target`, which it waits for, ended;
    /// returns the ends this causes (its jobs, when a failure means they
    /// never run).
    fn dependency_ended(
        &mut self,
        first: JobId,
        target: JobId,
        outcome: &Outcome,
        now: Tick,
        out: &mut Vec<Action>,
    ) -> Vec<(JobId, bool, u32, Outcome)> {
        let backlog = self.backlog_mut();
        let Some(entry) = backlog.entries.get_mut(&first) else {
            return Vec::new();
        };
        let Some(pos) = entry.waits_for.iter().position(|dep| dep.job == target.0) else {
            return Vec::new();
        };
        let dep = entry.waits_for.remove(pos);
        match outcome {
            Outcome::Failure(how) if !dep.any => {
                // The others it waited for need it no more.
                for other in std::mem::take(&mut entry.waits_for) {
                    if let Some(list) = backlog.dependants.get_mut(&JobId(other.job)) {
                        list.retain(|known| *known != first);
                    }
                }
                let end = EarlyEnd {
                    kind: EndKind::Killed,
                    status: scored_proto::exitcode::REJECTED,
                    reason: format!("never ran: {how}; -{}={}", dep.option(), dep.job),
                };
                self.end_entry_waiting(first, &end, now, out)
            }
            _ => {
                if entry.may_admit() {
                    entry.since = now;
                    backlog.ready.push_back(first);
                }
                Vec::new()
            }
        }
    }

    /// Ends every job of entry `first` that waits here, and what depends on
    /// them in turn.
    fn end_waiting(&mut self, first: JobId, end: &EarlyEnd, now: Tick, out: &mut Vec<Action>) {
        let ends = self.end_entry_waiting(first, end, now, out);
        for (id, admitted, owner, outcome) in ends {
            self.backlog_job_ended(id, admitted, owner, outcome, now, out);
        }
    }

    /// Ends the jobs of entry `first` that wait here (they never run):
    /// journalled, kept, told to the client; returns their ends for the
    /// caller to pass on.
    fn end_entry_waiting(
        &mut self,
        first: JobId,
        end: &EarlyEnd,
        now: Tick,
        out: &mut Vec<Action>,
    ) -> Vec<(JobId, bool, u32, Outcome)> {
        let Some(entry) = self.logged.backlog.entries.get(&first) else {
            return Vec::new();
        };
        let ks: Vec<u32> = entry.waiting().collect();
        let mut ends = Vec::with_capacity(ks.len());
        for k in ks {
            if let Some(end) = self.end_one_waiting(first, k, end, now, out) {
                ends.push(end);
            }
        }
        ends
    }

    /// Ends element `k` of entry `first`, which waits here; returns its end
    /// for the caller to pass on (through [`Core::backlog_job_ended`]).
    fn end_one_waiting(
        &mut self,
        first: JobId,
        k: u32,
        end: &EarlyEnd,
        now: Tick,
        out: &mut Vec<Action>,
    ) -> Option<(JobId, bool, u32, Outcome)> {
        let entry = self.logged.backlog.entries.get(&first)?;
        let id = entry.id(k);
        let reason = cap_reason(end.reason.clone());
        let ending = Ending {
            job: id,
            kind: end.kind,
            status: end.status,
            reason: reason.clone(),
            signal: None,
            accounting: Accounting {
                queues: vec![self.queue_of(entry.request.as_deref()?)],
                wait: now.since(entry.submitted_at),
                ..Accounting::default()
            },
        };
        let fields = self.entry_fields(entry, k, Some(&ending), now, true);
        let uid = entry.cred.uid;
        let client = entry.link.client();
        tracing::info!(job = %id, status = end.status, %reason, "job ended without running");
        if self.journal.is_some() {
            self.journal(JobEvent::Ended {
                job: id,
                record: fields.clone(),
                early: std::time::Duration::ZERO,
            });
        }
        if let Some(client) = client {
            out.push(Action::notify(client, ClientEvent::Ended(Box::new(ending))));
        }
        let backlog = self.backlog_mut();
        let entry = backlog.entries.get_mut(&first)?;
        entry.skipped.insert(k);
        while entry.skipped.remove(&entry.next) {
            entry.next += 1;
        }
        if entry.n_waiting() == 0 {
            entry.request = None;
        }
        self.logged.ends.end_early(EndedEarly { id, uid, fields });
        let outcome = Outcome::Failure(format!("job {id} {reason}"));
        Some((id, false, uid, outcome))
    }

    /// Admits the next element of the oldest ready entry, if it is older
    /// than `before` (the oldest client waiting for admission). Returns
    /// false when nothing more can be admitted now: resources are short
    /// for it, no entry is ready, or this event admitted its share.
    pub(super) fn admit_from_backlog(
        &mut self,
        before: Option<Tick>,
        admitted: &mut usize,
        now: Tick,
        out: &mut Vec<Action>,
    ) -> bool {
        loop {
            // Entries that may admit no element any more leave the
            // queue; one whose array has its share admitted and not
            // started yet keeps its place.
            let mut found = None;
            let mut gone = Vec::new();
            for &first in &self.logged.backlog.ready {
                match self.logged.backlog.entries.get(&first) {
                    Some(entry) if entry.may_admit() => {
                        if self.within_window(entry) {
                            found = Some(first);
                            break;
                        }
                    }
                    _ => gone.push(first),
                }
            }
            self.drop_from_ready(&gone);
            let Some(first) = found else {
                return false;
            };
            let entry = &self.logged.backlog.entries[&first];
            if before.is_some_and(|before| before < entry.since) {
                return false;
            }
            if *admitted >= ADMIT_PER_EVENT {
                *self.backlog_mut().more.get_mut() = true;
                return false;
            }
            let Some(request) = entry.request.as_deref() else {
                self.drop_from_ready(&[first]);
                continue;
            };
            let k = entry.next;
            let waiter = Waiter {
                link: entry.link,
                cred: entry.cred.clone(),
                user: Rc::clone(&entry.user),
                request: request.clone(),
                submitted_at: entry.submitted_at,
                held: entry.held,
                id: Some(entry.id(k)),
                submission: Some(Rc::clone(&entry.submission)),
            };
            if let Err((_, reason)) = self.check_queue(&waiter) {
                let end = EarlyEnd {
                    kind: EndKind::Killed,
                    status: scored_proto::exitcode::REJECTED,
                    reason: format!("never ran: {reason}"),
                };
                if let Some((id, _, owner, outcome)) =
                    self.end_one_waiting(first, k, &end, now, out)
                {
                    self.backlog_job_ended(id, false, owner, outcome, now, out);
                }
                continue;
            }
            match self.decide(&waiter) {
                Decision::Admit(placement) => {
                    let backlog = self.backlog_mut();
                    let entry = backlog.entries.get_mut(&first).expect("found above");
                    entry.next += 1;
                    while entry.skipped.remove(&entry.next) {
                        entry.next += 1;
                    }
                    entry.admitted += 1;
                    entry.short = None;
                    if entry.n_waiting() == 0 {
                        entry.request = None;
                    }
                    *admitted += 1;
                    self.admit(waiter, placement, now, out);
                }
                Decision::TooBig(reason) => {
                    let end = EarlyEnd {
                        kind: EndKind::Killed,
                        status: scored_proto::exitcode::REJECTED,
                        reason: format!("never ran: {reason}"),
                    };
                    // Its elements are alike: none of them fits.
                    self.end_waiting(first, &end, now, out);
                }
                Decision::Short(reason) => {
                    let backlog = self.backlog_mut();
                    if let Some(entry) = backlog.entries.get_mut(&first) {
                        entry.short = Some(reason);
                    }
                    return false;
                }
            }
        }
    }

    /// Drops entries from the queue of ready ones: those at its front one
    /// at a time (each logged as such, which the usual case is), any
    /// others with one copy of the queue.
    fn drop_from_ready(&mut self, gone: &[JobId]) {
        let ready = &mut self.backlog_mut().ready;
        while ready.front().is_some_and(|first| gone.contains(first)) {
            ready.pop_front();
        }
        if ready.iter().any(|first| gone.contains(first)) {
            ready.modify(|ready| ready.retain(|first| !gone.contains(first)));
        }
    }

    /// The oldest entry ready to admit now, if any: since when it is ready.
    pub(super) fn backlog_ready_since(&self) -> Option<Tick> {
        self.logged
            .backlog
            .ready
            .iter()
            .filter_map(|first| self.logged.backlog.entries.get(first))
            .find(|entry| entry.may_admit() && self.within_window(entry))
            .map(|entry| entry.since)
    }

    /// Whether an array has fewer of its elements admitted and not started
    /// than [`Core::admit_window`]: an element is a job record from its
    /// admission, and one that cannot start yet costs memory (which every
    /// fork of the daemon copies) and nothing else. A job that is not an
    /// array has no such window.
    fn within_window(&self, entry: &Entry) -> bool {
        if !entry.is_array() {
            return true;
        }
        let window = self.admit_window();
        // Elements are admitted in order: the unstarted ones are among
        // the last admitted.
        let unstarted = (entry.next.saturating_sub(window)..entry.next)
            .filter(|k| {
                self.logged
                    .jobs
                    .get(&entry.id(*k))
                    .is_some_and(|job| !job.started())
            })
            .count() as u32;
        unstarted < window
    }

    /// How many elements of an array may be admitted and not started yet:
    /// one for each host, enough to keep every host of the machine busy.
    pub(super) fn admit_window(&self) -> u32 {
        u32::try_from(self.logged.topology.hosts.len())
            .unwrap_or(u32::MAX)
            .max(1)
    }

    /// Whether an entry waits only for an element of its array to start.
    pub(super) fn backlog_waits_for_starts(&self) -> bool {
        self.logged.backlog.ready.iter().any(|first| {
            self.logged
                .backlog
                .entries
                .get(first)
                .is_some_and(|entry| entry.may_admit() && !self.within_window(entry))
        })
    }

    /// How many jobs of the backlog wait for resources.
    pub(super) fn backlog_short(&self) -> usize {
        self.logged
            .backlog
            .entries
            .values()
            .filter(|entry| entry.short.is_some() && entry.may_admit())
            .count()
    }

    /// Ends job `id` if it waits in the backlog (`kill`); false if it does not.
    pub(super) fn kill_waiting(
        &mut self,
        id: JobId,
        who: &str,
        now: Tick,
        out: &mut Vec<Action>,
    ) -> bool {
        let Some((entry, k)) = self.logged.backlog.entry_of(id) else {
            return false;
        };
        if !self.logged.backlog.holds(id) {
            return false;
        }
        let first = entry.first();
        if let Some((id, _, owner, outcome)) =
            self.end_one_waiting(first, k, &EarlyEnd::killed(who), now, out)
        {
            self.backlog_job_ended(id, false, owner, outcome, now, out);
        }
        true
    }

    /// The client of an interactive job that waits in the backlog went
    /// away, was interrupted (`who` says which), or was suspended or
    /// continued (`hold`): true if it has such a job.
    pub(super) fn backlog_client(
        &mut self,
        client: ClientToken,
        event: ClientChange,
        now: Tick,
        out: &mut Vec<Action>,
    ) -> bool {
        let Some(first) = self
            .logged
            .backlog
            .entries
            .values()
            .find(|entry| entry.link == Link::Client(client) && entry.n_waiting() > 0)
            .map(Entry::first)
        else {
            return false;
        };
        match event {
            ClientChange::Hold(held) => {
                if let Some(entry) = self.backlog_mut().entries.get_mut(&first) {
                    entry.held = held;
                }
                if held {
                    out.push(Action::notify(client, ClientEvent::Held(first)));
                }
            }
            ClientChange::End(who) => {
                self.end_waiting(first, &EarlyEnd::killed(who), now, out);
            }
        }
        true
    }

    /// Ends every job of the backlog (a shutdown).
    pub(super) fn end_backlog(&mut self, now: Tick, out: &mut Vec<Action>) {
        let firsts: Vec<JobId> = self.logged.backlog.entries.keys().copied().collect();
        let end = EarlyEnd {
            kind: EndKind::Shutdown,
            status: scored_proto::exitcode::from_signal(SIGTERM),
            reason: "killed because scored is shutting down, before it started".into(),
        };
        for first in firsts {
            self.end_waiting(first, &end, now, out);
        }
    }

    /// A job's end from the journal, for a submission that depends on it.
    pub(super) fn known_end(&mut self, job: JobId, owner: u32, outcome: Outcome) {
        if self.logged.ends.outcome(job).is_none() {
            self.logged.ends.remember(job, owner, outcome);
        }
    }

    /// Whether job `id` is one the core knows: admitted and unfinished, or
    /// waiting in the backlog, or ended from it recently.
    pub fn knows(&self, id: JobId) -> bool {
        self.logged.jobs.contains_key(&id)
            || self.logged.backlog.holds(id)
            || self.logged.ends.ended.iter().any(|ended| ended.id == id)
    }

    /// The jobs a submission depends on that the core cannot say how they
    /// ended: for the event loop to look up in the journal.
    pub fn unknown_ends(&self, request: &JobRequest) -> Vec<JobId> {
        request
            .batch
            .after
            .iter()
            .map(|dep| JobId(dep.job))
            .filter(|id| self.dependency_owner_state(*id).is_err() && id.0 < self.next_job)
            .collect()
    }
}

/// What happened to the client of an interactive job of the backlog.
#[derive(Debug, Clone, Copy)]
pub(super) enum ClientChange {
    /// Suspended (true) or continued (false).
    Hold(bool),
    /// Gone or interrupted: the job ends, for the reason given (`by its
    /// scrun (interrupted)`).
    End(&'static str),
}
