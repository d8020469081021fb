//! The undo containers against plain ones: every random sequence of
//! changes, rolled back, leaves what was committed.

use super::*;

/// A small deterministic generator, so that a failing sequence is
/// reproduced by its seed.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

#[test]
fn a_rollback_restores_each_container_as_it_was_at_the_commit() {
    for seed in 0..200 {
        let mut random = Lcg(seed);
        let mut set: UndoSet<BTreeSet<u64>> = UndoSet::default();
        let mut sorted: UndoSet<SortedSet<u64>> = UndoSet::default();
        let mut hashed: UndoSet<HashSet<u64>> = UndoSet::default();
        let mut map: UndoMap<u64, Vec<u64>> = UndoMap::default();
        let mut tree: UndoTree<u64, Vec<u64>> = UndoTree::default();
        let mut deque: UndoDeque<u64> = UndoDeque::default();
        let mut cell = UndoCell::new(vec![0u64; 4]);
        let mut committed = None;
        for step in 0..300 {
            if step % 37 == 0 {
                set.commit();
                sorted.commit();
                hashed.commit();
                map.commit();
                tree.commit();
                deque.commit();
                cell.commit();
                committed = Some((
                    (*set).clone(),
                    (*hashed).clone(),
                    (*map).clone(),
                    (*deque).clone(),
                    (*cell).clone(),
                    (*sorted).clone(),
                    (*tree).clone(),
                ));
            }
            let key = random.next(20);
            match random.next(12) {
                0 => {
                    set.insert(key);
                    sorted.insert(key);
                    hashed.insert(key);
                }
                1 => {
                    set.remove(&key);
                    sorted.remove(&key);
                    hashed.remove(&key);
                }
                2 => {
                    set.pop_first();
                    sorted.pop_first();
                }
                3 if random.next(10) == 0 => {
                    set.clear();
                    sorted.clear();
                    hashed.clear();
                    map.clear();
                }
                4 => {
                    map.insert(key, vec![step]);
                    tree.insert(key, vec![step]);
                }
                5 => {
                    map.remove(&key);
                    tree.remove(&key);
                }
                6 => {
                    if let Some(value) = map.get_mut(&key) {
                        value.push(step);
                    }
                    if let Some(value) = tree.get_mut(&key) {
                        value.push(step);
                    }
                }
                7 => deque.push_back(step),
                8 => {
                    deque.pop_front();
                }
                9 => deque.modify(|deque| deque.retain(|item| item % 3 != key % 3)),
                _ => cell.get_mut()[key as usize % 4] = step,
            }
            if random.next(50) == 0 {
                let Some(committed) = &committed else {
                    continue;
                };
                set.rollback();
                sorted.rollback();
                hashed.rollback();
                map.rollback();
                tree.rollback();
                deque.rollback();
                cell.rollback();
                assert_eq!(*tree, committed.6, "seed {seed} step {step}");
                assert_eq!(*set, committed.0, "seed {seed} step {step}");
                assert_eq!(*sorted, committed.5, "seed {seed} step {step}");
                assert_eq!(*hashed, committed.1, "seed {seed} step {step}");
                assert_eq!(*map, committed.2, "seed {seed} step {step}");
                assert_eq!(*deque, committed.3, "seed {seed} step {step}");
                assert_eq!(*cell, committed.4, "seed {seed} step {step}");
            }
        }
    }
}

#[test]
fn nothing_is_logged_before_the_first_commit() {
    let mut set: UndoSet<BTreeSet<u64>> = UndoSet::default();
    let mut map: UndoMap<u64, u64> = UndoMap::default();
    let mut deque: UndoDeque<u64> = UndoDeque::default();
    for item in 0..100 {
        set.insert(item);
        map.insert(item, item);
        deque.push_back(item);
    }
    assert!(set.log.is_empty() && map.log.is_empty() && deque.log.is_empty());
    // A rollback without a commit changes nothing.
    set.rollback();
    map.rollback();
    deque.rollback();
    assert_eq!((set.len(), map.len(), deque.len()), (100, 100, 100));
}

#[test]
fn a_commit_forgets_the_log() {
    let mut set: UndoSet<BTreeSet<u64>> = UndoSet::default();
    set.commit();
    set.insert(1);
    set.commit();
    assert!(set.log.is_empty());
    set.insert(2);
    set.rollback();
    assert_eq!(set.iter().copied().collect::<Vec<_>>(), vec![1]);
}
