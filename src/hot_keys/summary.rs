//! The windowed space-saving summary behind one route's hot keys.
//!
//! A fixed table of `capacity` entries (allocated once, never grown). Each
//! entry counts its key's deliveries and duplicates per *sub-window*: the
//! window is cut into [`SUB_WINDOWS`] equal slices held as a ring of count
//! columns inside every entry. Time is an epoch number (milliseconds since
//! the table's origin divided by the slice length); when it advances, the
//! columns of the slices that fell out of the window are zeroed and entries
//! left with no delivery are dropped. Reading sums the live columns. So the
//! window slides in steps of one slice: a read sees the current (partial)
//! slice and the `SUB_WINDOWS - 1` before it, between 5/6 and all of the
//! configured window.
//!
//! When a key that is not tracked arrives at a full table, the entry with
//! the smallest *estimate* is replaced (the space-saving algorithm of
//! Metwally, Agrawal and El Abbadi, 2005): the newcomer inherits the
//! evicted estimate as its `error`, so a key heavier than `total /
//! capacity` in the window can not be pushed out by a stream of light
//! ones. The error only decides what stays in the table; the counts shown
//! are the deliveries actually seen since the key entered it, exact while
//! the window's distinct keys fit the table, otherwise a lower bound. The
//! inherited error is booked in the slice of the newcomer's first delivery
//! and expires with it.
//!
//! Lookup compares the first 8 bytes of each live digest (a dense `u64`
//! array, SHA-256 output is uniform) and the whole digest only on a tag
//! match; eviction scans the live entries for the minimum. Both are linear
//! in `capacity`, which is a few dozen entries per route.

/// Slices per window: a 1-minute window steps every 10 seconds.
pub const SUB_WINDOWS: usize = 6;

/// Bytes one table entry takes: the entry and its lookup tag.
pub const ENTRY_BYTES: usize = std::mem::size_of::<Entry>() + std::mem::size_of::<u64>();

/// What one delivery of a key ended as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sighting {
    /// The `outcome` word of the request (`forwarded`, `replayed`, …).
    pub outcome: &'static str,
    /// The `reason` word, when idemgate answered (or would have answered)
    /// with a rejection or a note.
    pub reason: Option<&'static str>,
    /// Whether the key was already claimed: a replay, or a 409/422 that
    /// says so.
    pub duplicate: bool,
}

/// What names a key in the table: the SHA-256 of its parts and, on an
/// entity route, the entity tag its record key carries after it (two
/// records of one key value under two entities are two keys). Shown as
/// the admin API takes it: `{hex digest}` or `{hex digest}{{hex tag}}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct KeyId {
    /// SHA-256 of the key parts.
    pub digest: [u8; 32],
    /// The entity tag's 128 bits, on an entity route.
    pub entity: Option<[u8; 16]>,
}

impl KeyId {
    /// `digest` under the entity whose tag is `entity_hex` (32 hex
    /// digits, as `pipeline::entity::entity_hash` spells it), if any.
    pub fn new(digest: [u8; 32], entity_hex: Option<&str>) -> Self {
        let entity = entity_hex.and_then(|hex_tag| {
            let mut tag = [0; 16];
            hex::decode_to_slice(hex_tag, &mut tag).ok().map(|()| tag)
        });
        Self { digest, entity }
    }
}

impl From<&[u8; 32]> for KeyId {
    fn from(digest: &[u8; 32]) -> Self {
        Self::new(*digest, None)
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.digest))?;
        if let Some(tag) = &self.entity {
            write!(f, "{{{}}}", hex::encode(tag))?;
        }
        Ok(())
    }
}

/// One tracked key, as a read reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedeliveryResult {
    /// The key (what logs print as `key=`).
    pub digest: KeyId,
    /// Deliveries seen in the window.
    pub deliveries: u64,
    /// Of those, duplicates.
    pub duplicates: u64,
    /// The latest delivery's outcome and reason.
    pub last: Sighting,
    /// When the latest delivery was seen, in milliseconds since the
    /// table's origin.
    pub last_seen_ms: u64,
}

/// One slot of the table.
#[derive(Debug, Clone, Copy)]
struct Entry {
    digest: KeyId,
    deliveries: [u32; SUB_WINDOWS],
    duplicates: [u32; SUB_WINDOWS],
    /// Estimate inherited from the entry this one replaced, per slice.
    error: [u32; SUB_WINDOWS],
    last: Sighting,
    last_seen_ms: u64,
}

impl Entry {
    const EMPTY: Self = Self {
        digest: KeyId {
            digest: [0; 32],
            entity: None,
        },
        deliveries: [0; SUB_WINDOWS],
        duplicates: [0; SUB_WINDOWS],
        error: [0; SUB_WINDOWS],
        last: Sighting {
            outcome: "",
            reason: None,
            duplicate: false,
        },
        last_seen_ms: 0,
    };

    fn deliveries(&self) -> u64 {
        self.deliveries.iter().map(|&n| u64::from(n)).sum()
    }

    fn estimate(&self) -> u64 {
        self.deliveries() + self.error.iter().map(|&n| u64::from(n)).sum::<u64>()
    }

    fn tally(&self) -> RedeliveryResult {
        RedeliveryResult {
            digest: self.digest,
            deliveries: self.deliveries(),
            duplicates: self.duplicates.iter().map(|&n| u64::from(n)).sum(),
            last: self.last,
            last_seen_ms: self.last_seen_ms,
        }
    }
}

/// The ring column of slice number `epoch`.
fn column_of(epoch: u64) -> usize {
    // The remainder is below SUB_WINDOWS, so it always fits.
    usize::try_from(epoch % SUB_WINDOWS as u64).unwrap_or(0)
}

/// The first 8 bytes of a digest, the lookup tag.
fn tag(key: &KeyId) -> u64 {
    let mut head = [0; 8];
    head.copy_from_slice(&key.digest[..8]);
    u64::from_le_bytes(head)
}

/// A windowed space-saving table (see the module docs).
///
/// Invariant: `entries[..len]` and `tags[..len]` are the live entries,
/// each with at least one delivery in the window, no two with the same
/// digest; `len <= capacity`, and neither array ever reallocates.
#[derive(Debug)]
pub struct Summary {
    tags: Box<[u64]>,
    entries: Box<[Entry]>,
    len: usize,
    /// Length of one slice in milliseconds (at least 1).
    slice_ms: u64,
    /// The slice the newest column belongs to.
    epoch: u64,
}

impl Summary {
    /// A table of `capacity` entries (at least 1) over a window of
    /// `window_ms` milliseconds.
    pub fn new(capacity: usize, window_ms: u64) -> Self {
        let capacity = capacity.max(1);
        Self {
            tags: vec![0; capacity].into_boxed_slice(),
            entries: vec![Entry::EMPTY; capacity].into_boxed_slice(),
            len: 0,
            slice_ms: (window_ms / SUB_WINDOWS as u64).max(1),
            epoch: 0,
        }
    }

    /// Entries the table can hold.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Keys tracked right now (never more than [`Self::capacity`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Counts one delivery of `digest` at `now_ms` (milliseconds since the
    /// origin; a time before the newest slice counts in the newest slice).
    pub fn observe(&mut self, digest: &KeyId, sighting: Sighting, now_ms: u64) {
        self.advance(now_ms);
        let column = self.column();
        let wanted = tag(digest);
        let found = self.tags[..self.len]
            .iter()
            .zip(&self.entries[..self.len])
            .position(|(t, e)| *t == wanted && e.digest == *digest);
        let index = match found {
            Some(index) => index,
            None if self.len < self.entries.len() => {
                self.len += 1;
                self.admit(self.len - 1, digest, wanted, 0);
                self.len - 1
            }
            None => {
                let (index, least) = self.entries[..self.len]
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (i, e.estimate()))
                    .min_by_key(|&(_, estimate)| estimate)
                    .unwrap_or((0, 0));
                self.admit(index, digest, wanted, least);
                index
            }
        };
        let entry = &mut self.entries[index];
        entry.deliveries[column] = entry.deliveries[column].saturating_add(1);
        if sighting.duplicate {
            entry.duplicates[column] = entry.duplicates[column].saturating_add(1);
        }
        entry.last = sighting;
        entry.last_seen_ms = entry.last_seen_ms.max(now_ms);
    }

    /// The `k` keys with the most deliveries in the window at `now_ms`,
    /// most first (ties: more duplicates, then the most recent, then the
    /// digest, so the order is stable).
    pub fn top(&mut self, k: usize, now_ms: u64) -> Vec<RedeliveryResult> {
        self.advance(now_ms);
        let mut tallies: Vec<RedeliveryResult> =
            self.entries[..self.len].iter().map(Entry::tally).collect();
        tallies.sort_unstable_by(|a, b| {
            b.deliveries
                .cmp(&a.deliveries)
                .then(b.duplicates.cmp(&a.duplicates))
                .then(b.last_seen_ms.cmp(&a.last_seen_ms))
                .then(a.digest.cmp(&b.digest))
        });
        tallies.truncate(k);
        tallies
    }

    /// The ring column of the current slice.
    fn column(&self) -> usize {
        column_of(self.epoch)
    }

    /// Puts `digest` in slot `index` with no delivery yet and `error`
    /// booked in the current slice.
    fn admit(&mut self, index: usize, digest: &KeyId, tag: u64, error: u64) {
        let column = self.column();
        let entry = &mut self.entries[index];
        *entry = Entry::EMPTY;
        entry.digest = *digest;
        entry.error[column] = u32::try_from(error).unwrap_or(u32::MAX);
        self.tags[index] = tag;
    }

    /// Moves the ring to the slice of `now_ms`: zeroes the columns of the
    /// slices that left the window and drops the entries left empty.
    fn advance(&mut self, now_ms: u64) {
        let epoch = now_ms / self.slice_ms;
        if epoch <= self.epoch {
            return;
        }
        let steps = (epoch - self.epoch).min(SUB_WINDOWS as u64);
        for step in 1..=steps {
            let column = column_of(self.epoch + step);
            for entry in &mut self.entries[..self.len] {
                entry.deliveries[column] = 0;
                entry.duplicates[column] = 0;
                entry.error[column] = 0;
            }
        }
        self.epoch = epoch;
        let mut index = 0;
        while index < self.len {
            if self.entries[index].deliveries() == 0 {
                self.len -= 1;
                self.entries.swap(index, self.len);
                self.tags.swap(index, self.len);
            } else {
                index += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::hot_keys::sightings::{FIRST, REPLAY};
    const MINUTE_MS: u64 = 60_000;

    fn digest(n: u32) -> KeyId {
        use sha2::{Digest, Sha256};
        KeyId::from(&Sha256::digest(n.to_le_bytes()).into())
    }

    #[test]
    fn counts_are_exact_while_the_keys_fit() {
        let mut summary = Summary::new(8, MINUTE_MS);
        for n in 0..8u32 {
            for i in 0..=n {
                let sighting = if i == 0 { FIRST } else { REPLAY };
                summary.observe(&digest(n), sighting, 10);
            }
        }
        let top = summary.top(8, 20);
        assert_eq!(top.len(), 8);
        for (tally, n) in top.iter().zip((0..8u32).rev()) {
            assert_eq!(tally.digest, digest(n));
            assert_eq!(tally.deliveries, u64::from(n) + 1);
            assert_eq!(tally.duplicates, u64::from(n));
            assert_eq!(tally.last, if n == 0 { FIRST } else { REPLAY });
        }
        assert_eq!(summary.top(3, 20).len(), 3);
    }

    #[test]
    fn a_heavy_hitter_survives_many_light_keys() {
        let mut summary = Summary::new(16, MINUTE_MS);
        // One key in every tenth delivery, interleaved with 9 000 keys seen
        // once each: far more distinct keys than the table holds, and the
        // key's share (1/10) above the guarantee's 1/capacity.
        let mut light = 1_000u32;
        for round in 0..1_000u64 {
            summary.observe(&digest(1), REPLAY, round);
            for _ in 0..9 {
                summary.observe(&digest(light), FIRST, round);
                light += 1;
                assert!(summary.len() <= summary.capacity());
            }
        }
        let top = summary.top(1, 1_000);
        assert_eq!(top[0].digest, digest(1));
        assert_eq!(top[0].deliveries, 1_000);
        assert_eq!(top[0].duplicates, 1_000);
    }

    #[test]
    fn tracked_entries_never_exceed_the_capacity() {
        let mut summary = Summary::new(4, MINUTE_MS);
        for n in 0..1_000u32 {
            summary.observe(&digest(n % 97), FIRST, u64::from(n) * 7);
            assert!(summary.len() <= 4, "{} entries", summary.len());
        }
        assert_eq!(summary.top(100, 7_000).len(), 4);
    }

    #[test]
    fn deliveries_leave_the_window_slice_by_slice() {
        let slice = MINUTE_MS / SUB_WINDOWS as u64;
        let mut summary = Summary::new(4, MINUTE_MS);
        summary.observe(&digest(1), FIRST, 0);
        summary.observe(&digest(1), REPLAY, slice);
        summary.observe(&digest(2), FIRST, slice);
        // Both slices are still in the window one slice short of a minute.
        let top = summary.top(4, MINUTE_MS - 1);
        assert_eq!(top[0].deliveries, 2);
        assert_eq!(top[0].duplicates, 1);
        // At a minute the first slice has left: one delivery remains.
        let top = summary.top(4, MINUTE_MS);
        assert_eq!((top[0].deliveries, top[0].duplicates), (1, 1));
        assert_eq!(summary.len(), 2);
        // A slice later every delivery has left and the entries are freed.
        assert!(summary.top(4, MINUTE_MS + slice).is_empty());
        assert!(summary.is_empty());
        // A long silence clears everything at once, and the table works on.
        summary.observe(&digest(3), FIRST, 10 * MINUTE_MS);
        assert!(summary.top(4, 100 * MINUTE_MS).is_empty());
    }

    #[test]
    fn an_evicted_keys_error_expires_with_its_slice() {
        let slice = MINUTE_MS / SUB_WINDOWS as u64;
        let mut summary = Summary::new(1, MINUTE_MS);
        for _ in 0..5 {
            summary.observe(&digest(1), FIRST, 0);
        }
        // The newcomer replaces the only entry; it shows what it saw.
        summary.observe(&digest(2), FIRST, slice);
        let top = summary.top(1, slice);
        assert_eq!((top[0].digest, top[0].deliveries), (digest(2), 1));
        assert_eq!(summary.entries[0].estimate(), 6);
        // Once the newcomer's slice has left, nothing is held.
        assert!(summary.top(1, slice + MINUTE_MS).is_empty());
    }
}
