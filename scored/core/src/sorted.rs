//! A set kept as a sorted vector cut into chunks, for the ordered sets a
//! gang switch changes at every slice boundary: the live jobs and the
//! `-time` deadlines of the running ones. A switch stops and continues
//! every live job, so on a machine of many hosts it inserts and removes
//! thousands of elements in sets of thousands: an insertion or removal
//! shifts the elements of one chunk (at most `MAX_CHUNK`) and the chunk
//! list, never the whole set, while a set of a few dozen is one chunk,
//! searched and shifted as a plain sorted array (cheaper than a B-tree's
//! node handling). Iteration is in order, as a `BTreeSet`'s (the live
//! set's order is the order in which stops are sent).
//!
//! Pure: no clock, no system calls.
#![forbid(unsafe_code)]

/// Elements a chunk holds at most; a fuller one is cut in two. Two
/// neighbouring chunks hold more than half of this together (they are
/// merged otherwise), so a set of n elements has fewer than
/// 4n / `MAX_CHUNK` + 1 chunks.
const MAX_CHUNK: usize = 128;

/// A set of ordered elements in sorted chunks.
#[derive(Clone)]
pub struct SortedSet<T> {
    /// Non-empty sorted chunks, each chunk's elements below the next's.
    chunks: Vec<Vec<T>>,
    /// Elements in all chunks.
    len: usize,
}

/// The elements of a [`SortedSet`] in increasing order.
pub type Iter<'a, T> = std::iter::Flatten<std::slice::Iter<'a, Vec<T>>>;

impl<T> Default for SortedSet<T> {
    fn default() -> SortedSet<T> {
        SortedSet {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: PartialEq> PartialEq for SortedSet<T> {
    /// Equal elements, however they are cut into chunks.
    fn eq(&self, other: &SortedSet<T>) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<T: Eq> Eq for SortedSet<T> {}

impl<T: std::fmt::Debug> std::fmt::Debug for SortedSet<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl<T: Ord> SortedSet<T> {
    /// The chunk that holds `item` if any does, or where it belongs: the
    /// first whose last element is not below it (else the last chunk).
    fn chunk_of(&self, item: &T) -> usize {
        let at = self
            .chunks
            .partition_point(|chunk| chunk.last().is_some_and(|last| last < item));
        at.min(self.chunks.len().saturating_sub(1))
    }

    /// Inserts `item`; true if it was absent.
    pub fn insert(&mut self, item: T) -> bool {
        if self.chunks.is_empty() {
            self.chunks.push(vec![item]);
            self.len = 1;
            return true;
        }
        let idx = self.chunk_of(&item);
        let chunk = &mut self.chunks[idx];
        match chunk.binary_search(&item) {
            Ok(_) => false,
            Err(at) => {
                chunk.insert(at, item);
                self.len += 1;
                if chunk.len() > MAX_CHUNK {
                    let upper = chunk.split_off(chunk.len() / 2);
                    self.chunks.insert(idx + 1, upper);
                }
                true
            }
        }
    }

    /// Removes `item`; true if it was present.
    pub fn remove(&mut self, item: &T) -> bool {
        if self.chunks.is_empty() {
            return false;
        }
        let idx = self.chunk_of(item);
        match self.chunks[idx].binary_search(item) {
            Ok(at) => {
                self.chunks[idx].remove(at);
                self.len -= 1;
                self.shrunk(idx);
                true
            }
            Err(_) => false,
        }
    }

    /// Whether `item` is in the set.
    pub fn contains(&self, item: &T) -> bool {
        !self.chunks.is_empty() && self.chunks[self.chunk_of(item)].binary_search(item).is_ok()
    }

    /// Removes and returns the least element.
    pub fn pop_first(&mut self) -> Option<T> {
        let first = self.chunks.first_mut()?.remove(0);
        self.len -= 1;
        self.shrunk(0);
        Some(first)
    }
}

impl<T> SortedSet<T> {
    /// Chunk `idx` lost an element: drop it if empty, else merge it with a
    /// neighbour while the two hold no more than half a chunk.
    fn shrunk(&mut self, mut idx: usize) {
        if self.chunks[idx].is_empty() {
            self.chunks.remove(idx);
            return;
        }
        loop {
            let small = |chunks: &[Vec<T>], at: usize| {
                chunks
                    .get(at + 1)
                    .is_some_and(|next| chunks[at].len() + next.len() <= MAX_CHUNK / 2)
            };
            if small(&self.chunks, idx) {
                let next = self.chunks.remove(idx + 1);
                self.chunks[idx].extend(next);
            } else if idx > 0 && small(&self.chunks, idx - 1) {
                let this = self.chunks.remove(idx);
                idx -= 1;
                self.chunks[idx].extend(this);
            } else {
                return;
            }
        }
    }

    /// The least element.
    pub fn first(&self) -> Option<&T> {
        self.chunks.first().and_then(|chunk| chunk.first())
    }

    /// The elements in increasing order.
    pub fn iter(&self) -> Iter<'_, T> {
        self.chunks.iter().flatten()
    }

    /// How many elements the set has.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every element, returning them in order.
    pub fn take_all(&mut self) -> Vec<T> {
        self.len = 0;
        let mut chunks = std::mem::take(&mut self.chunks).into_iter();
        let mut all = chunks.next().unwrap_or_default();
        for chunk in chunks {
            all.extend(chunk);
        }
        all
    }
}

impl<T: Ord> FromIterator<T> for SortedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> SortedSet<T> {
        let mut items: Vec<T> = iter.into_iter().collect();
        items.sort_unstable();
        items.dedup();
        let len = items.len();
        let mut chunks = Vec::new();
        let mut rest = items.into_iter().peekable();
        while rest.peek().is_some() {
            chunks.push(rest.by_ref().take(MAX_CHUNK).collect());
        }
        SortedSet { chunks, len }
    }
}

impl<'a, T> IntoIterator for &'a SortedSet<T> {
    type Item = &'a T;
    type IntoIter = Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// The chunks are non-empty, sorted, within `MAX_CHUNK`, neighbours
    /// too full to be merged, and counted right.
    fn assert_well_formed(set: &SortedSet<u16>) {
        assert!(set
            .chunks
            .iter()
            .all(|chunk| !chunk.is_empty() && chunk.len() <= MAX_CHUNK));
        assert!(set.iter().zip(set.iter().skip(1)).all(|(a, b)| a < b));
        assert!(set
            .chunks
            .windows(2)
            .all(|pair| pair[0].len() + pair[1].len() > MAX_CHUNK / 2));
        assert_eq!(set.len(), set.chunks.iter().map(Vec::len).sum::<usize>());
    }

    fn op() -> impl Strategy<Value = (u8, u16)> {
        // Mostly inserts at first, so that sets grow past a chunk.
        (0u8..7, 0u16..1200)
    }

    proptest! {
        /// Any sequence of inserts, removals and first-pops leaves the same
        /// elements, in the same order, as a `BTreeSet` given the same.
        #[test]
        fn behaves_as_an_ordered_set(ops in proptest::collection::vec(op(), 0..2500)) {
            let mut sorted = SortedSet::default();
            let mut model = BTreeSet::new();
            for (op, item) in ops {
                match op {
                    0..=2 => prop_assert_eq!(sorted.insert(item), model.insert(item)),
                    3..=5 => prop_assert_eq!(sorted.remove(&item), model.remove(&item)),
                    _ => prop_assert_eq!(sorted.pop_first(), model.pop_first()),
                }
                prop_assert_eq!(sorted.first(), model.first());
                prop_assert_eq!(sorted.contains(&item), model.contains(&item));
                prop_assert_eq!(sorted.len(), model.len());
            }
            prop_assert!(sorted.iter().eq(model.iter()));
            assert_well_formed(&sorted);
            let collected: SortedSet<u16> = model.iter().copied().collect();
            prop_assert_eq!(&collected, &sorted);
            prop_assert_eq!(sorted.take_all(), model.into_iter().collect::<Vec<_>>());
            prop_assert!(sorted.is_empty());
        }
    }

    #[test]
    fn collecting_sorts_and_drops_repeats() {
        let set: SortedSet<u32> = [5, 1, 5, 3].into_iter().collect();
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), vec![1, 3, 5]);
    }

    #[test]
    fn a_large_set_is_cut_into_chunks_and_merged_as_it_empties() {
        // The live jobs of a gang switch: ids in ascending order, half of
        // them leaving and coming back.
        let mut set = SortedSet::default();
        for item in 0..10_000u16 {
            set.insert(item);
        }
        assert_well_formed(&set);
        assert!(
            set.chunks.len() >= 10_000 / MAX_CHUNK,
            "{} chunks",
            set.chunks.len()
        );
        for item in (0..10_000u16).step_by(2) {
            assert!(set.remove(&item));
        }
        assert_well_formed(&set);
        assert!(set.chunks.len() < 4 * 5_000 / MAX_CHUNK + 1);
        for item in (1..10_000u16).step_by(2).take(4_990) {
            assert!(set.remove(&item));
        }
        assert_well_formed(&set);
        assert_eq!(set.chunks.len(), 1, "ten elements left");
        assert_eq!(
            set.iter().copied().collect::<Vec<_>>(),
            (9_981..10_000).step_by(2).collect::<Vec<_>>()
        );
    }
}
