//! The replay shield: completed records kept in memory, so a duplicate of
//! an answered delivery is replayed without a store round trip (contract §9,
//! "Replay cache"; `[limits] replay_cache_bytes`).
//!
//! # What may be cached
//!
//! Only a **completed** record: one that never changes again until it
//! expires or an operator purges it. In-flight, unknown and inbox records
//! change under their owners' hands and are always read from the store.
//! An entry expires locally when its record's retention ends (the store's
//! remaining TTL, counted from *before* the read was sent, so the local
//! copy always dies first), and the cache is bounded by bytes, least
//! recently replayed first out. So the cache can only ever answer with
//! what the store would have answered.
//!
//! Once the cache has had to evict (and until a flush empties it), a fill
//! must pass the doorkeeper: a key is taken on its second miss within
//! moments, not its first ([`doorkeeper`]), so replays spread over far
//! more keys than it holds do not churn it. Admission decides only what
//! is worth a slot; coherence never rests on it.
//!
//! # Staying coherent
//!
//! An entry is only ever added by a *fill*: a store read made after a
//! claim found a completed record ([`ReplayCache::begin_fill`], then
//! [`Fill::land`]). Every event that may change a cached key drops it:
//!
//! * this instance's own writes to the key ([`ReplayCache::invalidate`],
//!   called by `store::AnyStore` for complete, release, purge and inbox
//!   swaps);
//! * on Redis, writes by anyone else: the fill reads over a connection
//!   with `CLIENT TRACKING` on, so Redis pushes an invalidation for every
//!   key it read the moment that key changes (the store's listener,
//!   `store/redis/tracking.rs`).
//!
//! A fill that an invalidation overtakes must not land, or it would put a
//! record back that the store no longer holds: each fill holds a ticket
//! registered under its key, an invalidation or flush withdraws the ticket,
//! and [`Fill::land`] stores nothing without its ticket. The same ticket
//! makes fills single flight: while one is out for a key, no other starts.
//!
//! When invalidations may have been lost — the tracking connection dropped
//! or reconnected, Redis said it forgot what it tracked, our listener fell
//! behind — the whole cache is flushed and fills stay refused until
//! tracking is armed again ([`ReplayCache::suspend`], [`ReplayCache::resume`]).
//! The embedded store has one process and no tracking: its cache is
//! coherent from the start.
//!
//! The cache is a plain in-memory structure: it knows nothing of the store
//! or of Redis. The store owns it, fills it and invalidates it, and runs
//! the listener above as part of its own upkeep. Its metrics live beside
//! it (`metrics.rs`).

mod doorkeeper;
pub(crate) mod metrics;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lru::LruCache;
use tokio::time::Instant;

use self::doorkeeper::Doorkeeper;
use self::metrics::{CacheMetrics, Eviction};
use crate::record::{Record, RecordState, StoredBody};

/// Bytes an entry costs beyond its key, headers and body: the map node,
/// the recency links, the record and the header vector. An estimate on the
/// high side, so the bound holds for many small entries too.
const ENTRY_OVERHEAD: usize = 256;

/// An answer larger than this share of the cache is never cached: one
/// huge answer would otherwise push out hundreds of small ones.
const LARGEST_ENTRY_SHARE: usize = 4;

/// Why the whole cache was emptied (`reason` label of
/// `idemgate_replay_cache_flushes_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushReason {
    /// The tracking connection dropped, reconnected or stopped answering:
    /// invalidations sent meanwhile are lost.
    Disconnected,
    /// The invalidation listener fell behind and messages were dropped.
    Lagged,
    /// Redis invalidated everything (`FLUSHALL`, or its tracking table
    /// overflowed).
    Server,
}

impl FlushReason {
    /// Every reason, for pre-registering label sets.
    pub const ALL: [Self; 3] = [Self::Disconnected, Self::Lagged, Self::Server];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disconnected => "disconnected",
            Self::Lagged => "lagged",
            Self::Server => "server",
        }
    }
}

/// The cache (module docs). Shared by the store, which fills and
/// invalidates it, and on Redis by the tracking listener.
#[derive(Debug)]
pub struct ReplayCache {
    state: Mutex<State>,
    capacity: usize,
    metrics: CacheMetrics,
}

#[derive(Debug)]
struct State {
    entries: LruCache<String, Entry>,
    /// Sum of the entries' weights; at most `capacity`.
    bytes: usize,
    /// The ticket of the fill out for each key.
    fills: HashMap<String, u64>,
    next_ticket: u64,
    /// Whether invalidations reach us, so fills may land.
    coherent: bool,
    /// Whether a fill has had to evict since the cache was last emptied:
    /// from then on a fill must pass the doorkeeper.
    full: bool,
    /// Admission to a full cache ([`doorkeeper`]).
    doorkeeper: Doorkeeper,
}

#[derive(Debug)]
struct Entry {
    record: Record,
    expires_at: Instant,
    weight: usize,
}

/// A record and its remaining TTL (`None`: no expiry): what a fill read
/// from the store, and what the cache answers for a key. The store's
/// `Existing` has the same two fields and converts to and from it, so the
/// claim stage decides from a hit exactly as from a store read; the cache
/// keeps its own type so that it needs nothing from the store.
#[derive(Debug, Clone)]
pub struct Found {
    /// The record.
    pub record: Record,
    /// Remaining TTL; a hit always has one.
    pub ttl: Option<Duration>,
}

impl ReplayCache {
    /// A cache of at most `capacity` bytes. `coherent`: whether it may be
    /// filled at once (the embedded store), or only after
    /// [`ReplayCache::resume`] (Redis, once tracking is armed).
    pub fn new(capacity: usize, coherent: bool) -> Self {
        Self {
            state: Mutex::new(State {
                entries: LruCache::unbounded(),
                bytes: 0,
                fills: HashMap::new(),
                next_ticket: 0,
                coherent,
                full: false,
                doorkeeper: Doorkeeper::new(capacity / ENTRY_OVERHEAD),
            }),
            capacity,
            metrics: CacheMetrics::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock can only leave a half-updated
        // recency list; dropping everything is always safe for a cache.
        self.state.lock().unwrap_or_else(|poisoned| {
            let mut state = poisoned.into_inner();
            Self::clear(&mut state);
            state
        })
    }

    /// The cached completed record of `key`, if any and still within its
    /// retention; counts a hit. An expired entry is dropped.
    pub fn get(&self, key: &str) -> Option<Found> {
        let now = Instant::now();
        let mut state = self.state();
        let entry = state.entries.get(key)?;
        if entry.expires_at <= now {
            let entry = state.entries.pop(key)?;
            state.bytes -= entry.weight;
            self.metrics.evicted(Eviction::Expired, state.bytes);
            return None;
        }
        let hit = Found {
            record: entry.record.clone(),
            ttl: Some(entry.expires_at - now),
        };
        drop(state);
        self.metrics.hit();
        Some(hit)
    }

    /// Counts a replay that had to read the store although the cache is
    /// on: the record was not cached yet, or no longer.
    pub fn missed(&self) {
        self.metrics.miss();
    }

    /// Starts a fill of `key`: `None` while the cache is not coherent,
    /// while another fill of `key` is out, if `key` is cached already, or
    /// when the cache is full and `key` has not missed recently
    /// ([`doorkeeper`]).
    pub fn begin_fill(self: &Arc<Self>, key: &str) -> Option<Fill> {
        let mut state = self.state();
        if !state.coherent || state.fills.contains_key(key) || state.entries.contains(key) {
            return None;
        }
        if state.full && !state.doorkeeper.admits(key) {
            return None;
        }
        state.next_ticket += 1;
        let ticket = state.next_ticket;
        state.fills.insert(key.to_owned(), ticket);
        Some(Fill {
            cache: Arc::clone(self),
            key: key.to_owned(),
            ticket,
            sent_at: Instant::now(),
        })
    }

    /// Drops `key`'s entry and withdraws its fill: the key changed.
    pub fn invalidate(&self, key: &str) {
        let mut state = self.state();
        state.fills.remove(key);
        if let Some(entry) = state.entries.pop(key) {
            state.bytes -= entry.weight;
            let bytes = state.bytes;
            drop(state);
            self.metrics.invalidated(bytes);
        }
    }

    /// Drops every entry and withdraws every fill.
    pub fn flush(&self, reason: FlushReason) {
        let mut state = self.state();
        Self::clear(&mut state);
        drop(state);
        self.metrics.flushed(reason);
    }

    /// [`ReplayCache::flush`], and refuses fills until
    /// [`ReplayCache::resume`]: invalidations no longer reach us.
    pub fn suspend(&self, reason: FlushReason) {
        let mut state = self.state();
        state.coherent = false;
        Self::clear(&mut state);
        drop(state);
        self.metrics.flushed(reason);
    }

    /// Accepts fills again: invalidations reach us from now on.
    pub fn resume(&self) {
        self.state().coherent = true;
    }

    fn clear(state: &mut State) {
        state.entries.clear();
        state.bytes = 0;
        state.fills.clear();
        state.full = false;
    }

    /// Bytes the entries hold now (for tests and the bytes gauge).
    pub fn bytes(&self) -> usize {
        self.state().bytes
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.state().entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores what fill `ticket` of `key` read, if the ticket still stands
    /// and the record may be cached.
    fn land(&self, key: &str, ticket: u64, sent_at: Instant, found: Option<Found>) {
        let mut state = self.state();
        if state.fills.get(key) != Some(&ticket) {
            return;
        }
        state.fills.remove(key);
        let Some((record, expires_at)) = found.and_then(|found| cacheable(found, sent_at)) else {
            return;
        };
        let weight = weight(key, &record);
        if weight > self.capacity / LARGEST_ENTRY_SHARE {
            return;
        }
        let record = detached(record);
        let mut evicted = 0;
        while state.bytes + weight > self.capacity {
            let Some((_, old)) = state.entries.pop_lru() else {
                break;
            };
            state.bytes -= old.weight;
            evicted += 1;
            state.full = true;
        }
        state.bytes += weight;
        let bytes = state.bytes;
        state.entries.push(
            key.to_owned(),
            Entry {
                record,
                expires_at,
                weight,
            },
        );
        drop(state);
        self.metrics.stored(evicted, bytes);
    }

    fn withdraw(&self, key: &str, ticket: u64) {
        let mut state = self.state();
        if state.fills.get(key) == Some(&ticket) {
            state.fills.remove(key);
        }
    }
}

/// A completed record and when its retention ends, if it may be cached:
/// completed, with a known, positive remaining TTL counted from `sent_at`.
fn cacheable(found: Found, sent_at: Instant) -> Option<(Record, Instant)> {
    let ttl = found.ttl.filter(|ttl| !ttl.is_zero())?;
    matches!(
        found.record.state,
        RecordState::Completed(_) | RecordState::Acknowledged(_)
    )
    .then(|| (found.record, sent_at + ttl))
}

/// `record` with its own copies of the answer's bytes. A decoded record's
/// body and headers are slices of the store reply, which may share its
/// allocation with other replies read in the same batch: kept as they are,
/// a small entry could pin a large buffer and the byte bound would not
/// hold. One copy per fill (once per key and instance) keeps it honest.
fn detached(mut record: Record) -> Record {
    if let RecordState::Completed(answer) = &mut record.state {
        for (name, value) in &mut answer.headers {
            *name = bytes::Bytes::copy_from_slice(name);
            *value = bytes::Bytes::copy_from_slice(value);
        }
        if let StoredBody::Kept(body) = &mut answer.body {
            *body = bytes::Bytes::copy_from_slice(body);
        }
    }
    record
}

/// What an entry counts against the capacity.
fn weight(key: &str, record: &Record) -> usize {
    let RecordState::Completed(answer) = &record.state else {
        return ENTRY_OVERHEAD + key.len();
    };
    let headers: usize = answer
        .headers
        .iter()
        .map(|(name, value)| name.len() + value.len() + 2 * std::mem::size_of::<bytes::Bytes>())
        .sum();
    let body = match &answer.body {
        StoredBody::Kept(body) => body.len(),
        StoredBody::TooLarge => 0,
    };
    ENTRY_OVERHEAD + key.len() + headers + body
}

/// A fill in progress: read the key's record (on a tracked connection),
/// then [`Fill::land`] it. Dropped unlanded, it withdraws its ticket so the
/// next replay may try again.
#[derive(Debug)]
pub struct Fill {
    cache: Arc<ReplayCache>,
    key: String,
    ticket: u64,
    sent_at: Instant,
}

impl Fill {
    /// Marks when the store read is sent: the entry's retention counts
    /// from here, so it ends no later than the store's.
    pub fn sending(&mut self) {
        self.sent_at = Instant::now();
    }

    /// Caches what the read found, unless the key changed meanwhile.
    /// (Its `Drop` then finds the ticket gone and does nothing.)
    pub fn land(self, found: Option<Found>) {
        self.cache.land(&self.key, self.ticket, self.sent_at, found);
    }
}

impl Drop for Fill {
    fn drop(&mut self) {
        self.cache.withdraw(&self.key, self.ticket);
    }
}

#[cfg(test)]
mod tests;
