//! The replay cache in front of the store (`crate::replay_cache`): how
//! [`AnyStore`] puts one there, answers from it, fills it after a claim
//! found a completed record, and drops a key from it after each of its own
//! writes.

use std::sync::Arc;

use super::metrics::StoreOp;
use super::{AnyStore, Call, Existing, StoreError, StoreKey};
use crate::replay_cache::{Fill, Found, ReplayCache};

impl AnyStore {
    /// Puts a replay cache of `bytes` in front of the store (0: none).
    /// On Redis it is filled over a tracking client whose listener
    /// ([`AnyStore::spawn_upkeep`]) must run for the cache to fill at all;
    /// the embedded store needs no listener.
    pub fn with_replay_cache(&mut self, bytes: usize) -> Result<(), StoreError> {
        if bytes == 0 {
            self.cache = None;
            return Ok(());
        }
        let tracked = match self.backend.redis_mut() {
            Some(redis) => {
                redis.enable_tracking()?;
                true
            }
            None => false,
        };
        self.cache = Some(Arc::new(ReplayCache::new(bytes, !tracked)));
        Ok(())
    }

    /// The cached completed record of `key`: decided from with no round
    /// trip (`crate::replay_cache`).
    pub fn cached(&self, key: &StoreKey) -> Option<Existing> {
        self.cache.as_ref()?.get(key.as_str()).map(Existing::from)
    }

    /// Notes that a claim found `key` completed in the store: counts a
    /// cache miss and returns the fill to run, unless one is out already
    /// (or the cache is off or not coherent yet).
    pub fn begin_fill(&self, key: &StoreKey) -> Option<Fill> {
        let cache = self.cache.as_ref()?;
        cache.missed();
        cache.begin_fill(key.as_str())
    }

    /// Runs `fill`: reads its key (on Redis over the tracking client) and
    /// caches a completed record. A failed read caches nothing.
    pub async fn refill(&self, key: &StoreKey, mut fill: Fill) {
        fill.sending();
        let call: Call<'_, Option<Existing>> = match self.backend.redis() {
            Some(redis) => Box::pin(redis.lookup_tracked(key)),
            None => self.backend().lookup(key),
        };
        if let Ok(found) = self.metered(StoreOp::Lookup, call).await {
            fill.land(found.map(Found::from));
        }
    }

    /// Drops `key` from the replay cache and withdraws its fill: this
    /// instance just wrote it. Called *after* the write, so a fill that
    /// read the old record can not land later (on the embedded store no
    /// tracking would catch it).
    pub(crate) fn forget(&self, key: &StoreKey) {
        if let Some(cache) = &self.cache {
            cache.invalidate(key.as_str());
        }
    }
}

/// The cache's view of a record read from the store: the same two fields.
impl From<Existing> for Found {
    fn from(existing: Existing) -> Self {
        Self {
            record: existing.record,
            ttl: existing.ttl,
        }
    }
}

/// A cache hit as the claim stage reads a store read.
impl From<Found> for Existing {
    fn from(found: Found) -> Self {
        Self {
            record: found.record,
            ttl: found.ttl,
        }
    }
}
