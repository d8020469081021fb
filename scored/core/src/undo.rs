//! Containers that remember what changed since the last commit, so that the
//! core can go back to the state of its last commit (the panic checkpoint,
//! `Core::commit` and `Core::rollback`) at a cost in proportion to what
//! changed, not to what the containers hold.
//!
//! Each wrapper lets its content be read freely (`Deref`) but changed only
//! through its own methods, each of which notes what it overwrites: the
//! compiler, not a convention, keeps a change from going unrecorded.
//! Nothing is noted until the first `commit`, so a core that never asks
//! for a checkpoint (a replay, a test) pays nothing and keeps no log.
//!
//! Undoing goes backwards through the log, so each entry is undone on the
//! very state its change left; that is what makes the simple inverses
//! below (pop what was pushed, put back what was removed) exact.
//!
//! Pure: no clock, no system calls.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::ops::Deref;

use crate::admission::{Ledger, Placement};
use crate::ids::{ClusterId, HostId, JobId};
use crate::jobset::{JobBits, JobBitsIter};
use crate::queue::Queue;
use crate::sorted::SortedSet;

/// What every wrapper does at a commit and a rollback.
pub trait Undo {
    /// The current content is the one to come back to; start recording.
    fn commit(&mut self);
    /// Goes back to the content of the last commit (nothing happens
    /// before the first commit).
    fn rollback(&mut self);
}

/// A value copied whole the first time it changes after a commit: for
/// values whose size does not grow with the jobs (the hosts, the ledger of
/// reservations, switch statistics). The copy reuses the previous one's
/// allocations (`clone_from`), and an event that does not change the value
/// copies nothing.
#[derive(Debug, Default)]
pub struct UndoCell<T> {
    value: T,
    saved: Option<T>,
    saved_valid: bool,
    recording: bool,
}

impl<T: Clone> UndoCell<T> {
    /// Wraps a value.
    pub fn new(value: T) -> UndoCell<T> {
        UndoCell {
            value,
            saved: None,
            saved_valid: false,
            recording: false,
        }
    }

    /// The value, to change; the first call after a commit keeps a copy.
    pub fn get_mut(&mut self) -> &mut T {
        if self.recording && !self.saved_valid {
            match &mut self.saved {
                Some(saved) => saved.clone_from(&self.value),
                None => self.saved = Some(self.value.clone()),
            }
            self.saved_valid = true;
        }
        &mut self.value
    }
}

impl<T: Clone> Clone for UndoCell<T> {
    fn clone(&self) -> UndoCell<T> {
        UndoCell {
            value: self.value.clone(),
            saved: None,
            saved_valid: false,
            recording: self.recording,
        }
    }
}

impl<T> Deref for UndoCell<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Clone> Undo for UndoCell<T> {
    fn commit(&mut self) {
        self.recording = true;
        self.saved_valid = false;
    }

    fn rollback(&mut self) {
        if self.saved_valid {
            if let Some(saved) = &mut self.saved {
                std::mem::swap(&mut self.value, saved);
            }
        }
        self.saved_valid = false;
    }
}

/// The set operations the undo log needs.
pub trait SetLike: Default {
    /// What the set holds.
    type Item: Clone;
    /// Inserts; true if it was absent.
    fn insert_item(&mut self, item: Self::Item) -> bool;
    /// Removes; true if it was present.
    fn remove_item(&mut self, item: &Self::Item) -> bool;
    /// Every element, for `clear`.
    fn drain_items(&mut self) -> Vec<Self::Item>;
}

impl<T: Ord + Clone> SetLike for BTreeSet<T> {
    type Item = T;
    fn insert_item(&mut self, item: T) -> bool {
        self.insert(item)
    }
    fn remove_item(&mut self, item: &T) -> bool {
        self.remove(item)
    }
    fn drain_items(&mut self) -> Vec<T> {
        std::mem::take(self).into_iter().collect()
    }
}

impl<T: Ord + Clone> SetLike for SortedSet<T> {
    type Item = T;
    fn insert_item(&mut self, item: T) -> bool {
        self.insert(item)
    }
    fn remove_item(&mut self, item: &T) -> bool {
        self.remove(item)
    }
    fn drain_items(&mut self) -> Vec<T> {
        self.take_all()
    }
}

impl SetLike for JobBits {
    type Item = JobId;
    fn insert_item(&mut self, item: JobId) -> bool {
        self.insert(item)
    }
    fn remove_item(&mut self, item: &JobId) -> bool {
        self.remove(item)
    }
    fn drain_items(&mut self) -> Vec<JobId> {
        self.take_all()
    }
}

impl<T: Eq + Hash + Clone, S: BuildHasher + Default> SetLike for HashSet<T, S> {
    type Item = T;
    fn insert_item(&mut self, item: T) -> bool {
        self.insert(item)
    }
    fn remove_item(&mut self, item: &T) -> bool {
        self.remove(item)
    }
    fn drain_items(&mut self) -> Vec<T> {
        self.drain().collect()
    }
}

/// A set whose inserts and removals are logged: each entry is an element
/// and whether it was in the set before the change.
#[derive(Debug)]
pub struct UndoSet<S: SetLike> {
    set: S,
    log: Vec<(S::Item, bool)>,
    recording: bool,
}

impl<S: SetLike> Default for UndoSet<S> {
    fn default() -> UndoSet<S> {
        UndoSet {
            set: S::default(),
            log: Vec::new(),
            recording: false,
        }
    }
}

impl<'a, T: Ord + Clone> IntoIterator for &'a UndoSet<BTreeSet<T>> {
    type Item = &'a T;
    type IntoIter = std::collections::btree_set::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.set.iter()
    }
}

impl<'a, T: Ord + Clone> IntoIterator for &'a UndoSet<SortedSet<T>> {
    type Item = &'a T;
    type IntoIter = crate::sorted::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.set.iter()
    }
}

impl<'a> IntoIterator for &'a UndoSet<JobBits> {
    type Item = JobId;
    type IntoIter = JobBitsIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.set.iter()
    }
}

impl<S: SetLike> UndoSet<S> {
    /// Inserts `item`; true if it was absent.
    pub fn insert(&mut self, item: S::Item) -> bool {
        let added = self.set.insert_item(item.clone());
        if self.recording && added {
            self.log.push((item, false));
        }
        added
    }

    /// Removes `item`; true if it was present.
    pub fn remove(&mut self, item: &S::Item) -> bool {
        let removed = self.set.remove_item(item);
        if self.recording && removed {
            self.log.push((item.clone(), true));
        }
        removed
    }

    /// Removes every element.
    pub fn clear(&mut self) {
        let items = self.set.drain_items();
        if self.recording {
            self.log.extend(items.into_iter().map(|item| (item, true)));
        }
    }
}

impl<T: Ord + Clone> UndoSet<BTreeSet<T>> {
    /// Removes and returns the first element.
    pub fn pop_first(&mut self) -> Option<T> {
        let item = self.set.pop_first()?;
        if self.recording {
            self.log.push((item.clone(), true));
        }
        Some(item)
    }
}

impl<T: Ord + Clone> UndoSet<SortedSet<T>> {
    /// Removes and returns the first element.
    pub fn pop_first(&mut self) -> Option<T> {
        let item = self.set.pop_first()?;
        if self.recording {
            self.log.push((item.clone(), true));
        }
        Some(item)
    }
}

impl<S: SetLike + Clone> Clone for UndoSet<S> {
    fn clone(&self) -> UndoSet<S> {
        UndoSet {
            set: self.set.clone(),
            log: Vec::new(),
            recording: self.recording,
        }
    }
}

impl<S: SetLike> Deref for UndoSet<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.set
    }
}

impl<S: SetLike> Undo for UndoSet<S> {
    fn commit(&mut self) {
        self.recording = true;
        self.log.clear();
    }

    fn rollback(&mut self) {
        while let Some((item, was_present)) = self.log.pop() {
            if was_present {
                self.set.insert_item(item);
            } else {
                self.set.remove_item(&item);
            }
        }
    }
}

/// The map operations the undo log needs.
pub trait MapLike: Default {
    /// The keys.
    type Key: Clone;
    /// The values.
    type Value: Clone;
    /// Inserts; returns the value it replaced.
    fn insert_entry(&mut self, key: Self::Key, value: Self::Value) -> Option<Self::Value>;
    /// Removes; returns the value it had.
    fn remove_entry(&mut self, key: &Self::Key) -> Option<Self::Value>;
    /// A value, to read.
    fn entry(&self, key: &Self::Key) -> Option<&Self::Value>;
    /// A value, to change.
    fn entry_mut(&mut self, key: &Self::Key) -> Option<&mut Self::Value>;
}

impl<K: Eq + Hash + Clone, V: Clone, S: BuildHasher + Default> MapLike for HashMap<K, V, S> {
    type Key = K;
    type Value = V;
    fn insert_entry(&mut self, key: K, value: V) -> Option<V> {
        self.insert(key, value)
    }
    fn remove_entry(&mut self, key: &K) -> Option<V> {
        self.remove(key)
    }
    fn entry(&self, key: &K) -> Option<&V> {
        self.get(key)
    }
    fn entry_mut(&mut self, key: &K) -> Option<&mut V> {
        self.get_mut(key)
    }
}

impl<K: Ord + Clone, V: Clone> MapLike for BTreeMap<K, V> {
    type Key = K;
    type Value = V;
    fn insert_entry(&mut self, key: K, value: V) -> Option<V> {
        self.insert(key, value)
    }
    fn remove_entry(&mut self, key: &K) -> Option<V> {
        self.remove(key)
    }
    fn entry(&self, key: &K) -> Option<&V> {
        self.get(key)
    }
    fn entry_mut(&mut self, key: &K) -> Option<&mut V> {
        self.get_mut(key)
    }
}

/// A map whose changes are logged: each entry is a key and the value it
/// had before the change (`None`: absent).
#[derive(Debug)]
pub struct UndoMapOf<M: MapLike> {
    map: M,
    log: Vec<(M::Key, Option<M::Value>)>,
    recording: bool,
}

/// A hash map whose changes are logged.
pub type UndoMap<K, V, S = std::collections::hash_map::RandomState> = UndoMapOf<HashMap<K, V, S>>;

/// An ordered map whose changes are logged: for maps read by ranges (the
/// backlog's submissions, found by the job ids they cover).
pub type UndoTree<K, V> = UndoMapOf<BTreeMap<K, V>>;

impl<M: MapLike> Default for UndoMapOf<M> {
    fn default() -> UndoMapOf<M> {
        UndoMapOf::new(M::default())
    }
}

impl<M: MapLike> UndoMapOf<M> {
    /// Wraps a map (nothing is logged until the first commit).
    pub fn new(map: M) -> UndoMapOf<M> {
        UndoMapOf {
            map,
            log: Vec::new(),
            recording: false,
        }
    }

    /// Inserts; returns the value it replaced.
    pub fn insert(&mut self, key: M::Key, value: M::Value) -> Option<M::Value> {
        if self.recording {
            let old = self.map.insert_entry(key.clone(), value);
            self.log.push((key, old.clone()));
            old
        } else {
            self.map.insert_entry(key, value)
        }
    }

    /// Removes; returns the value it had.
    pub fn remove(&mut self, key: &M::Key) -> Option<M::Value> {
        let old = self.map.remove_entry(key)?;
        if self.recording {
            self.log.push((key.clone(), Some(old.clone())));
        }
        Some(old)
    }

    /// A value, to change: its present value is logged first.
    pub fn get_mut(&mut self, key: &M::Key) -> Option<&mut M::Value> {
        if self.recording {
            let old = self.map.entry(key)?.clone();
            self.log.push((key.clone(), Some(old)));
        }
        self.map.entry_mut(key)
    }
}

impl<K: Eq + Hash + Clone, V: Clone, S: BuildHasher + Default> UndoMap<K, V, S> {
    /// Removes every entry.
    pub fn clear(&mut self) {
        if self.recording {
            self.log
                .extend(self.map.drain().map(|(key, value)| (key, Some(value))));
        } else {
            self.map.clear();
        }
    }
}

impl<M: MapLike + Clone> Clone for UndoMapOf<M> {
    fn clone(&self) -> UndoMapOf<M> {
        UndoMapOf {
            map: self.map.clone(),
            log: Vec::new(),
            recording: self.recording,
        }
    }
}

impl<M: MapLike> Deref for UndoMapOf<M> {
    type Target = M;
    fn deref(&self) -> &M {
        &self.map
    }
}

impl<M: MapLike> Undo for UndoMapOf<M> {
    fn commit(&mut self) {
        self.recording = true;
        self.log.clear();
    }

    fn rollback(&mut self) {
        while let Some((key, old)) = self.log.pop() {
            match old {
                Some(value) => {
                    self.map.insert_entry(key, value);
                }
                None => {
                    self.map.remove_entry(&key);
                }
            }
        }
    }
}

/// A change to an [`UndoDeque`].
#[derive(Debug)]
enum DequeChange<T> {
    PushedBack,
    PoppedFront(T),
    /// The whole deque before a change of any kind (`modify`).
    Whole(VecDeque<T>),
}

/// A deque whose pushes at the back and pops at the front (the common
/// changes) are logged as such; any other change logs a copy of the whole
/// deque, which suits changes that cost a walk of it anyway.
#[derive(Debug)]
pub struct UndoDeque<T> {
    deque: VecDeque<T>,
    log: Vec<DequeChange<T>>,
    recording: bool,
}

impl<'a, T> IntoIterator for &'a UndoDeque<T> {
    type Item = &'a T;
    type IntoIter = std::collections::vec_deque::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.deque.iter()
    }
}

impl<T> Default for UndoDeque<T> {
    fn default() -> UndoDeque<T> {
        UndoDeque {
            deque: VecDeque::new(),
            log: Vec::new(),
            recording: false,
        }
    }
}

impl<T: Clone> UndoDeque<T> {
    /// Appends.
    pub fn push_back(&mut self, item: T) {
        self.deque.push_back(item);
        if self.recording {
            self.log.push(DequeChange::PushedBack);
        }
    }

    /// Removes the first element.
    pub fn pop_front(&mut self) -> Option<T> {
        let item = self.deque.pop_front()?;
        if self.recording {
            self.log.push(DequeChange::PoppedFront(item.clone()));
        }
        Some(item)
    }

    /// Any other change, with the deque copied first.
    pub fn modify<R>(&mut self, change: impl FnOnce(&mut VecDeque<T>) -> R) -> R {
        if self.recording {
            self.log.push(DequeChange::Whole(self.deque.clone()));
        }
        change(&mut self.deque)
    }
}

impl<T: Clone> Clone for UndoDeque<T> {
    fn clone(&self) -> UndoDeque<T> {
        UndoDeque {
            deque: self.deque.clone(),
            log: Vec::new(),
            recording: self.recording,
        }
    }
}

impl<T> Deref for UndoDeque<T> {
    type Target = VecDeque<T>;
    fn deref(&self) -> &VecDeque<T> {
        &self.deque
    }
}

impl<T> Undo for UndoDeque<T> {
    fn commit(&mut self) {
        self.recording = true;
        self.log.clear();
    }

    fn rollback(&mut self) {
        while let Some(change) = self.log.pop() {
            match change {
                DequeChange::PushedBack => {
                    self.deque.pop_back();
                }
                DequeChange::PoppedFront(item) => self.deque.push_front(item),
                DequeChange::Whole(deque) => self.deque = deque,
            }
        }
    }
}

/// A change to [`UndoQueues`].
#[derive(Debug)]
enum QueuesChange {
    /// A job of a user was pushed on this queue (`started` as given).
    Pushed(usize, bool, u32),
    /// This queue before any other change.
    One(usize, Box<Queue>),
    /// Every queue before a change of their number.
    All(Vec<Queue>),
}

/// The queues, whose job orders grow with the jobs: a submission's push is
/// logged as such, any other change to a queue logs a copy of that queue
/// (such changes walk its order anyway).
#[derive(Debug, Default)]
pub struct UndoQueues {
    queues: Vec<Queue>,
    log: Vec<QueuesChange>,
    /// The queues already copied whole since the commit.
    copied: Vec<usize>,
    recording: bool,
}

impl UndoQueues {
    /// Wraps the queues.
    pub fn new(queues: Vec<Queue>) -> UndoQueues {
        UndoQueues {
            queues,
            log: Vec::new(),
            copied: Vec::new(),
            recording: false,
        }
    }

    /// Adds a job of `user` to queue `idx` (see [`Queue::push_by`]).
    pub fn push_job(&mut self, idx: usize, job: JobId, started: bool, user: u32) {
        self.queues[idx].push_by(job, started, user);
        if self.recording {
            self.log.push(QueuesChange::Pushed(idx, started, user));
        }
    }

    /// Queue `idx`, to change.
    pub fn get_mut(&mut self, idx: usize) -> Option<&mut Queue> {
        if self.recording && idx < self.queues.len() && !self.copied.contains(&idx) {
            self.copied.push(idx);
            self.log
                .push(QueuesChange::One(idx, Box::new(self.queues[idx].clone())));
        }
        self.queues.get_mut(idx)
    }

    /// Changes every queue, or their number.
    pub fn modify_all<R>(&mut self, change: impl FnOnce(&mut Vec<Queue>) -> R) -> R {
        if self.recording {
            self.log.push(QueuesChange::All(self.queues.clone()));
        }
        change(&mut self.queues)
    }
}

impl<'a> IntoIterator for &'a UndoQueues {
    type Item = &'a Queue;
    type IntoIter = std::slice::Iter<'a, Queue>;
    fn into_iter(self) -> Self::IntoIter {
        self.queues.iter()
    }
}

impl std::ops::Index<usize> for UndoQueues {
    type Output = Queue;
    fn index(&self, idx: usize) -> &Queue {
        &self.queues[idx]
    }
}

/// Changing a queue through an index copies it first, as `get_mut` does.
impl std::ops::IndexMut<usize> for UndoQueues {
    fn index_mut(&mut self, idx: usize) -> &mut Queue {
        self.get_mut(idx).expect("the queue exists")
    }
}

impl Clone for UndoQueues {
    fn clone(&self) -> UndoQueues {
        UndoQueues {
            queues: self.queues.clone(),
            log: Vec::new(),
            copied: Vec::new(),
            recording: self.recording,
        }
    }
}

impl Deref for UndoQueues {
    type Target = Vec<Queue>;
    fn deref(&self) -> &Vec<Queue> {
        &self.queues
    }
}

impl Undo for UndoQueues {
    fn commit(&mut self) {
        self.recording = true;
        self.log.clear();
        self.copied.clear();
    }

    fn rollback(&mut self) {
        while let Some(change) = self.log.pop() {
            match change {
                QueuesChange::Pushed(idx, started, user) => {
                    if let Some(queue) = self.queues.get_mut(idx) {
                        queue.unpush(started, user);
                    }
                }
                QueuesChange::One(idx, queue) => {
                    if let Some(slot) = self.queues.get_mut(idx) {
                        *slot = *queue;
                    }
                }
                QueuesChange::All(queues) => self.queues = queues,
            }
        }
        self.copied.clear();
    }
}

/// A value [`UndoLedger`] overwrote.
#[derive(Debug)]
enum LedgerEntry {
    /// A host's admitted processes and reserved memory.
    Host {
        cluster: ClusterId,
        host: HostId,
        procs: u64,
        memory: u64,
    },
    /// A cluster's reserved disk, admitted jobs and processes.
    Cluster {
        cluster: usize,
        disk: u64,
        jobs: u64,
        procs: u64,
    },
}

/// The ledger of reservations. Each change books or returns one job's
/// hosts and cluster, so what it overwrites is logged host by host (a
/// copy of the whole ledger would cost the machine's size at every
/// admission, allocated before the previous copy is freed).
#[derive(Debug, Default)]
pub struct UndoLedger {
    ledger: Ledger,
    log: Vec<LedgerEntry>,
    recording: bool,
}

impl UndoLedger {
    /// Wraps a ledger.
    pub fn new(ledger: Ledger) -> UndoLedger {
        UndoLedger {
            ledger,
            log: Vec::new(),
            recording: false,
        }
    }

    fn note(&mut self, cluster: ClusterId, hosts: &[HostId], whole_cluster: bool) {
        if !self.recording {
            return;
        }
        for &host in hosts {
            let idx = host.idx();
            if let (Some(&procs), Some(&memory)) = (
                self.ledger.host_procs.get(idx),
                self.ledger.host_memory.get(idx),
            ) {
                self.log.push(LedgerEntry::Host {
                    cluster,
                    host,
                    procs,
                    memory,
                });
            }
        }
        let idx = cluster.idx();
        if whole_cluster {
            if let (Some(&disk), Some(&jobs), Some(&procs)) = (
                self.ledger.cluster_disk.get(idx),
                self.ledger.cluster_jobs.get(idx),
                self.ledger.cluster_procs.get(idx),
            ) {
                self.log.push(LedgerEntry::Cluster {
                    cluster: idx,
                    disk,
                    jobs,
                    procs,
                });
            }
        }
    }

    /// See [`Ledger::reserve`].
    pub fn reserve(&mut self, placement: &Placement) {
        self.note(placement.cluster, &placement.hosts, true);
        self.ledger.reserve(placement);
    }

    /// See [`Ledger::release`].
    pub fn release(&mut self, placement: &Placement) {
        self.note(placement.cluster, &placement.hosts, true);
        self.ledger.release(placement);
    }

    /// See [`Ledger::bind`].
    pub fn bind(
        &mut self,
        cluster: ClusterId,
        hosts: &[HostId],
        layout: &[u32],
        memory: Option<u64>,
    ) {
        self.note(cluster, hosts, false);
        self.ledger.bind(cluster, hosts, layout, memory);
    }

    /// See [`Ledger::move_job`].
    pub fn move_job(
        &mut self,
        from: (ClusterId, &[u32]),
        to: (ClusterId, &[u32]),
        disk: Option<u64>,
    ) {
        self.note(from.0, &[], true);
        self.note(to.0, &[], true);
        self.ledger.move_job(from, to, disk);
    }

    /// See [`Ledger::unbind`].
    pub fn unbind(
        &mut self,
        cluster: ClusterId,
        hosts: &[HostId],
        layout: &[u32],
        memory: Option<u64>,
    ) {
        self.note(cluster, hosts, false);
        self.ledger.unbind(cluster, hosts, layout, memory);
    }
}

impl Clone for UndoLedger {
    fn clone(&self) -> UndoLedger {
        UndoLedger {
            ledger: self.ledger.clone(),
            log: Vec::new(),
            recording: self.recording,
        }
    }
}

impl Deref for UndoLedger {
    type Target = Ledger;
    fn deref(&self) -> &Ledger {
        &self.ledger
    }
}

impl Undo for UndoLedger {
    fn commit(&mut self) {
        self.recording = true;
        self.log.clear();
    }

    fn rollback(&mut self) {
        while let Some(entry) = self.log.pop() {
            match entry {
                LedgerEntry::Host {
                    cluster,
                    host,
                    procs,
                    memory,
                } => self.ledger.restore_host(cluster, host, procs, memory),
                LedgerEntry::Cluster {
                    cluster,
                    disk,
                    jobs,
                    procs,
                } => {
                    self.ledger.cluster_disk[cluster] = disk;
                    self.ledger.cluster_jobs[cluster] = jobs;
                    self.ledger.cluster_procs[cluster] = procs;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
