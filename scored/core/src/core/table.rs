//! The table of admitted jobs by id, with the copy-on-write log that lets
//! the checkpoint roll a job's record back.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::rc::Rc;

use crate::ids::JobId;
use crate::job::Job;
use crate::jobset::JobSet;
use crate::undo::Undo;

/// Admitted jobs by id. Ids are handed out in order and only grow, so a
/// deque indexed by `id - base` finds a job in constant time and costs a
/// pointer per slot; slots of finished jobs at the front are dropped as the
/// oldest jobs end. (A `BTreeMap` of jobs, filled in increasing order,
/// leaves its nodes half empty: twice the memory, and slower lookups in the
/// scheduling decision.)
///
/// Once the core keeps a checkpoint (`Core::commit`), the table logs each
/// job's record as it was before the first change since the commit: the
/// record is shared (`Rc`) between the log and the table, and the table's
/// copy is made when it is changed (copy on write). A rollback puts the
/// logged records back; a commit drops them. So the checkpoint costs a
/// pointer and a copy of the record for each job an event changed, and
/// nothing for the others.
#[derive(Debug, Default, Clone)]
pub(super) struct JobTable {
    base: u64,
    slots: VecDeque<Option<Rc<Job>>>,
    len: usize,
    /// Records as they were at the last commit, of the jobs changed since.
    log: Vec<(JobId, Option<Rc<Job>>)>,
    /// The jobs already in `log`.
    logged: JobSet,
    recording: bool,
}

impl JobTable {
    pub(super) fn slot(&self, id: &JobId) -> Option<usize> {
        let idx = id.0.checked_sub(self.base)?;
        (idx < self.slots.len() as u64).then_some(idx as usize)
    }

    pub(super) fn get(&self, id: &JobId) -> Option<&Job> {
        self.slots.get(self.slot(id)?)?.as_deref()
    }

    /// Keeps the record `id` has now, if this is the first change to it
    /// since the commit.
    #[inline]
    pub(super) fn note(&mut self, id: JobId) {
        if self.recording {
            self.note_recorded(id);
        }
    }

    /// Out of line, so that the look-ups of a core that keeps no
    /// checkpoint (a replay) stay as small as they were.
    #[cold]
    #[inline(never)]
    pub(super) fn note_recorded(&mut self, id: JobId) {
        if self.logged.insert(id) {
            let before = self.slot(&id).and_then(|slot| self.slots[slot].clone());
            self.log.push((id, before));
        }
    }

    #[inline]
    pub(super) fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        let slot = self.slot(id)?;
        if self.recording && self.slots[slot].is_some() {
            self.note_recorded(*id);
        }
        self.slots.get_mut(slot)?.as_mut().map(Rc::make_mut)
    }

    pub(super) fn contains_key(&self, id: &JobId) -> bool {
        self.get(id).is_some()
    }

    /// Adds a job; its id must be above every id the table has seen.
    pub(super) fn insert(&mut self, id: JobId, job: Job) {
        self.note(id);
        self.put(id, Some(Rc::new(job)));
    }

    /// Sets the slot of `id`, growing the deque at either end as needed
    /// and dropping empty slots at the front.
    pub(super) fn put(&mut self, id: JobId, job: Option<Rc<Job>>) {
        if self.slots.is_empty() {
            if job.is_none() {
                return;
            }
            self.base = id.0;
        }
        while id.0 < self.base {
            self.slots.push_front(None);
            self.base -= 1;
        }
        let idx = (id.0 - self.base) as usize;
        while self.slots.len() <= idx {
            self.slots.push_back(None);
        }
        let had = self.slots[idx].is_some();
        let has = job.is_some();
        self.slots[idx] = job;
        match (had, has) {
            (false, true) => self.len += 1,
            (true, false) => self.len -= 1,
            _ => {}
        }
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        while matches!(self.slots.back(), Some(None)) {
            self.slots.pop_back();
        }
    }

    pub(super) fn remove(&mut self, id: &JobId) -> Option<Job> {
        let slot = self.slot(id)?;
        self.slots[slot].as_ref()?;
        self.note(*id);
        let job = self.slots[slot].take()?;
        self.len -= 1;
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        Some(Rc::try_unwrap(job).unwrap_or_else(|shared| Job::clone(&shared)))
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Job> {
        self.slots.iter().filter_map(|slot| slot.as_deref())
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Undo for JobTable {
    fn commit(&mut self) {
        self.recording = true;
        self.log.clear();
        self.logged.clear();
    }

    fn rollback(&mut self) {
        while let Some((id, before)) = self.log.pop() {
            self.put(id, before);
        }
        self.logged.clear();
    }
}

impl std::ops::Index<&JobId> for JobTable {
    type Output = Job;

    fn index(&self, id: &JobId) -> &Job {
        self.get(id).expect("the job is in the table")
    }
}

/// The owner and hosts of a job, for the rotation of a queue that shares
/// its contested hosts by user.
impl crate::sched::Owners for JobTable {
    fn user(&self, job: JobId) -> u32 {
        self.get(&job).map_or(0, |record| record.owner.uid)
    }

    fn hosts(&self, job: JobId) -> &[crate::ids::HostId] {
        self.get(&job).map_or(&[], |record| &record.hosts)
    }
}
