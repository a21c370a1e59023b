//! The replay cache in front of the store (`crate::replay_cache`): how
//! [`AnyStore`] puts one there, answers from it, fills it after a claim
//! found a completed record, and drops a key from it after each of its own
//! writes.

use std::sync::Arc;

use super::{AnyStore, Backend, Call, Existing, StoreError, StoreKey};
use crate::metrics::StoreOp;
use crate::replay_cache::{Fill, ReplayCache};

impl AnyStore {
    /// Puts a replay cache of `bytes` in front of the store (0: none).
    /// On Redis it is filled over a tracking client, returned here for
    /// `replay_cache::tracking::keep_coherent`, which must run for the
    /// cache to fill at all; the embedded store needs no listener.
    pub fn with_replay_cache(
        &mut self,
        bytes: usize,
    ) -> Result<Option<fred::clients::Client>, StoreError> {
        if bytes == 0 {
            self.cache = None;
            return Ok(None);
        }
        let tracking = match &mut self.backend {
            Backend::Redis(store) => Some(store.enable_tracking()?),
            _ => None,
        };
        self.cache = Some(Arc::new(ReplayCache::new(bytes, tracking.is_none())));
        Ok(tracking)
    }

    /// The replay cache, if one is configured.
    pub fn replay_cache(&self) -> Option<&Arc<ReplayCache>> {
        self.cache.as_ref()
    }

    /// The cached completed record of `key`: decided from with no round
    /// trip (`crate::replay_cache`).
    pub fn cached(&self, key: &StoreKey) -> Option<Existing> {
        self.cache.as_ref()?.get(key)
    }

    /// Notes that a claim found `key` completed in the store: counts a
    /// cache miss and returns the fill to run, unless one is out already
    /// (or the cache is off or not coherent yet).
    pub fn begin_fill(&self, key: &StoreKey) -> Option<Fill> {
        let cache = self.cache.as_ref()?;
        cache.missed();
        cache.begin_fill(key)
    }

    /// Runs `fill`: reads its key (on Redis over the tracking client) and
    /// caches a completed record. A failed read caches nothing.
    pub async fn refill(&self, key: &StoreKey, mut fill: Fill) {
        fill.sending();
        let call: Call<'_, Option<Existing>> = match &self.backend {
            Backend::Redis(store) => Box::pin(store.lookup_tracked(key)),
            _ => self.backend().lookup(key),
        };
        if let Ok(found) = self.metered(StoreOp::Lookup, call).await {
            fill.land(found);
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
