//! Admission to a full replay cache: a key is cached on its second miss
//! within a short memory, not its first.
//!
//! A fill costs a second store read and, once the cache is full, evicts an
//! entry. When replays spread over far more keys than the cache holds (a
//! sender re-sending hours of backlog, each delivery once; or replays
//! drawn from millions of stored records), almost every fill is evicted
//! before its key comes again: measured on Redis with 10^6 records and
//! the default 32 MiB, replays ran at 0.63x the throughput of no cache at
//! all (`bench/scale`'s spread rounds, docs/performance.md). Keys that
//! *do* come again (a storm of copies, a sender retrying one delivery)
//! are missed twice within moments and get in on the second miss.
//!
//! The memory is a direct-mapped table of 32-bit tags, one slot per
//! entry the cache could hold: a key's first miss writes its tag into its
//! slot, its second finds it there (and clears it) and is admitted. Any
//! other key landing on the slot overwrites it, which is how old misses
//! are forgotten. A tag shared by two keys admits one early; nothing
//! worse can happen, the cache's coherence does not depend on admission.

use std::hash::{BuildHasher, RandomState};

/// The fewest slots a table has.
const MIN_SLOTS: usize = 64;

/// The table (module docs).
#[derive(Debug)]
pub(super) struct Doorkeeper {
    slots: Box<[u32]>,
    /// Per-process keys: which slot a key lands on can not be chosen by a
    /// sender.
    hasher: RandomState,
}

impl Doorkeeper {
    /// A table for a cache of about `entries` entries.
    pub(super) fn new(entries: usize) -> Self {
        let len = entries.max(MIN_SLOTS).next_power_of_two();
        Self {
            slots: vec![0; len].into_boxed_slice(),
            hasher: RandomState::new(),
        }
    }

    /// Whether `key` missed recently already: then it is admitted (and
    /// forgotten); else its miss is remembered.
    pub(super) fn admits(&mut self, key: &str) -> bool {
        let hash = self.hasher.hash_one(key);
        let bytes = hash.to_le_bytes();
        let [low, high] = [&bytes[..4], &bytes[4..]]
            .map(|half| u32::from_le_bytes(half.try_into().expect("4 bytes")));
        // The table has at most as many slots as the cache has bytes, far
        // fewer than 2^32: the low half indexes it.
        let slot = low as usize & (self.slots.len() - 1);
        // Never 0, the empty slot.
        let tag = high | 1;
        if self.slots[slot] == tag {
            self.slots[slot] = 0;
            true
        } else {
            self.slots[slot] = tag;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_admitted_on_its_second_miss_then_forgotten() {
        let mut door = Doorkeeper::new(1024);
        assert!(!door.admits("a"));
        assert!(door.admits("a"));
        assert!(!door.admits("a"), "an admission clears the slot");
    }

    #[test]
    fn the_table_has_a_power_of_two_slots_and_never_fewer_than_the_minimum() {
        assert_eq!(Doorkeeper::new(0).slots.len(), MIN_SLOTS);
        assert_eq!(Doorkeeper::new(1000).slots.len(), 1024);
    }
}
