//! The replay cache's metrics (`crate::replay_cache`): whether replays are
//! served from memory, and why entries leave it.
//!
//! Kept beside the cache, the only thing that records them, so the cache
//! needs nothing from the crate's `metrics` module (and that module
//! nothing from the cache).
//!
//! Hits and misses count replays only (a first delivery never looks like
//! either), so `hits / (hits + misses)` is the share of replays that cost
//! no store round trip.

use metrics::{Counter, Gauge, Unit, counter, gauge};

use crate::metrics::{Description, at_zero};

use super::FlushReason;

/// `idemgate_replay_cache_hits_total`: deliveries decided from a cached
/// record, with no store round trip.
pub(crate) const HITS_TOTAL: Description = Description::counter(
    "idemgate_replay_cache_hits_total",
    "Deliveries decided from the replay cache, with no store round trip",
);
/// `idemgate_replay_cache_misses_total`: replays that read their record
/// from the store although the cache is on.
pub(crate) const MISSES_TOTAL: Description = Description::counter(
    "idemgate_replay_cache_misses_total",
    "Replays that read their record from the store although the replay cache is on",
);
/// `idemgate_replay_cache_evictions_total{reason}`: entries dropped to make
/// room (`capacity`) or because their retention ended (`expired`).
pub(crate) const EVICTIONS_TOTAL: Description = Description::counter(
    "idemgate_replay_cache_evictions_total",
    "Replay cache entries dropped for room or at the end of their retention",
);
/// `idemgate_replay_cache_invalidations_total`: entries dropped because
/// their key changed (a purge, here or on another instance).
pub(crate) const INVALIDATIONS_TOTAL: Description = Description::counter(
    "idemgate_replay_cache_invalidations_total",
    "Replay cache entries dropped because their key changed",
);
/// `idemgate_replay_cache_flushes_total{reason}`: times the whole cache
/// was emptied because invalidations may have been lost.
pub(crate) const FLUSHES_TOTAL: Description = Description::counter(
    "idemgate_replay_cache_flushes_total",
    "Times the whole replay cache was emptied because invalidations may have been lost",
);
/// `idemgate_replay_cache_bytes`: bytes the cached entries hold (at most
/// `[limits] replay_cache_bytes`).
pub(crate) const BYTES: Description = Description::gauge(
    "idemgate_replay_cache_bytes",
    "Bytes held by the replay cache",
)
.in_unit(Unit::Bytes);

/// Why an entry left the cache on its own (`reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Eviction {
    /// Least recently replayed, dropped to make room.
    Capacity,
    /// Its record's retention ended.
    Expired,
}

impl Eviction {
    const ALL: [Self; 2] = [Self::Capacity, Self::Expired];

    fn as_str(self) -> &'static str {
        match self {
            Self::Capacity => "capacity",
            Self::Expired => "expired",
        }
    }
}

/// The replay cache's metrics, described at start-up
/// (`app::install_metrics`).
pub(crate) const DESCRIPTIONS: &[Description] = &[
    HITS_TOTAL,
    MISSES_TOTAL,
    EVICTIONS_TOTAL,
    INVALIDATIONS_TOTAL,
    FLUSHES_TOTAL,
    BYTES,
];

/// The cache's handles, every series created at zero.
#[derive(Debug)]
pub(crate) struct CacheMetrics {
    hits: Counter,
    misses: Counter,
    evictions: [Counter; 2],
    invalidations: Counter,
    flushes: [Counter; 3],
    bytes: Gauge,
}

impl CacheMetrics {
    /// Handles on the installed recorder.
    pub(crate) fn new() -> Self {
        let this = Self {
            hits: at_zero(counter!(HITS_TOTAL.name)),
            misses: at_zero(counter!(MISSES_TOTAL.name)),
            evictions: Eviction::ALL
                .map(|reason| at_zero(counter!(EVICTIONS_TOTAL.name, "reason" => reason.as_str()))),
            invalidations: at_zero(counter!(INVALIDATIONS_TOTAL.name)),
            flushes: FlushReason::ALL
                .map(|reason| at_zero(counter!(FLUSHES_TOTAL.name, "reason" => reason.as_str()))),
            bytes: gauge!(BYTES.name),
        };
        this.bytes.set(0.0);
        this
    }

    /// One delivery decided from the cache.
    pub(crate) fn hit(&self) {
        self.hits.increment(1);
    }

    /// One replay read from the store.
    pub(crate) fn miss(&self) {
        self.misses.increment(1);
    }

    /// One entry dropped on its own; `bytes` are left.
    pub(crate) fn evicted(&self, reason: Eviction, bytes: usize) {
        self.evictions[reason as usize].increment(1);
        self.bytes.set(bytes as f64);
    }

    /// One entry stored after `evicted` others made room; `bytes` held now.
    pub(crate) fn stored(&self, evicted: u64, bytes: usize) {
        self.evictions[Eviction::Capacity as usize].increment(evicted);
        self.bytes.set(bytes as f64);
    }

    /// One entry invalidated; `bytes` are left.
    pub(crate) fn invalidated(&self, bytes: usize) {
        self.invalidations.increment(1);
        self.bytes.set(bytes as f64);
    }

    /// The whole cache emptied.
    pub(crate) fn flushed(&self, reason: FlushReason) {
        self.flushes[reason as usize].increment(1);
        self.bytes.set(0.0);
    }
}
