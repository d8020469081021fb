//! A set kept as a sorted vector, for the small ordered sets a gang switch
//! changes at every slice boundary: the live jobs and the `-time`
//! deadlines of the running ones. A switch inserts and removes a handful
//! of elements in sets of a few dozen, where a search of a short array
//! and a shift of a few words cost less than a B-tree's node handling;
//! iteration is in order, as a `BTreeSet`'s (the live set's order is the
//! order in which stops are sent).
//!
//! Pure: no clock, no system calls.
#![forbid(unsafe_code)]

/// A set of ordered elements in a sorted vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortedSet<T> {
    items: Vec<T>,
}

impl<T> Default for SortedSet<T> {
    fn default() -> SortedSet<T> {
        SortedSet { items: Vec::new() }
    }
}

impl<T: Ord> SortedSet<T> {
    /// Inserts `item`; true if it was absent.
    pub fn insert(&mut self, item: T) -> bool {
        match self.items.binary_search(&item) {
            Ok(_) => false,
            Err(at) => {
                self.items.insert(at, item);
                true
            }
        }
    }

    /// Removes `item`; true if it was present.
    pub fn remove(&mut self, item: &T) -> bool {
        match self.items.binary_search(item) {
            Ok(at) => {
                self.items.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    /// Whether `item` is in the set.
    pub fn contains(&self, item: &T) -> bool {
        self.items.binary_search(item).is_ok()
    }

    /// The least element.
    pub fn first(&self) -> Option<&T> {
        self.items.first()
    }

    /// Removes and returns the least element.
    pub fn pop_first(&mut self) -> Option<T> {
        (!self.items.is_empty()).then(|| self.items.remove(0))
    }
}

impl<T> SortedSet<T> {
    /// The elements in increasing order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    /// How many elements the set has.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Removes every element, returning them in order.
    pub fn take_all(&mut self) -> Vec<T> {
        std::mem::take(&mut self.items)
    }
}

impl<T: Ord> FromIterator<T> for SortedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> SortedSet<T> {
        let mut items: Vec<T> = iter.into_iter().collect();
        items.sort_unstable();
        items.dedup();
        SortedSet { items }
    }
}

impl<'a, T> IntoIterator for &'a SortedSet<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Any sequence of inserts, removals and first-pops leaves the same
        /// elements, in the same order, as a `BTreeSet` given the same.
        #[test]
        fn behaves_as_an_ordered_set(ops in proptest::collection::vec((0u8..3, 0u16..64), 0..400)) {
            let mut sorted = SortedSet::default();
            let mut model = BTreeSet::new();
            for (op, item) in ops {
                match op {
                    0 => prop_assert_eq!(sorted.insert(item), model.insert(item)),
                    1 => prop_assert_eq!(sorted.remove(&item), model.remove(&item)),
                    _ => prop_assert_eq!(sorted.pop_first(), model.pop_first()),
                }
                prop_assert_eq!(sorted.first(), model.first());
                prop_assert_eq!(sorted.contains(&item), model.contains(&item));
                prop_assert!(sorted.iter().eq(model.iter()));
                prop_assert_eq!(sorted.len(), model.len());
            }
        }
    }

    #[test]
    fn collecting_sorts_and_drops_repeats() {
        let set: SortedSet<u32> = [5, 1, 5, 3].into_iter().collect();
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), vec![1, 3, 5]);
    }
}
