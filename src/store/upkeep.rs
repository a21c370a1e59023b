//! The store's own background work, and the readiness it reports.
//!
//! Whoever owns a resource starts and stops its background work: the app
//! hands [`AnyStore::spawn_upkeep`] its `TaskTracker` and shutdown token,
//! and the store starts what its backend needs, all under that tracker so
//! shutdown waits for it:
//!
//! * **embedded** — the sweeper, deleting expired records every
//!   [`SWEEP_EVERY`];
//! * **Redis** — the eviction watcher (`store::eviction`), and with a
//!   replay cache the listener that keeps it coherent with Redis
//!   (`store/redis/tracking.rs`).
//!
//! `/readyz` asks the store, not the watcher: [`AnyStore::probe_eviction`]
//! re-reads the eviction settings, [`AnyStore::eviction_problem`] says
//! whether they keep the store from being ready. So no backend type, and no
//! fred type, is seen outside `store/`.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::eviction::{EvictionWatch, Trigger};
use super::{AnyStore, Backend, StoreError};
use crate::config::StoreConfig;

/// How often the embedded store deletes expired records.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// What the store's background work keeps between runs, and what it needs
/// of the configuration.
#[derive(Debug)]
pub(super) struct Upkeep {
    /// Whether Redis may evict keys: the watcher's last findings, which
    /// `/readyz` reads (on the embedded store its gauges just stay 0).
    eviction: EvictionWatch,
    /// The replay cache's epoch marker on Redis,
    /// `{key_prefix}:replay-cache-epoch` (on a Cluster the name every
    /// primary's marker starts with; `store/redis/tracking.rs`).
    epoch_marker: String,
}

impl Upkeep {
    /// The upkeep state of a store configured by `config`; sets the
    /// eviction gauges to 0 until the first check.
    pub(super) fn new(config: &StoreConfig) -> Self {
        Self {
            eviction: EvictionWatch::new(config.allow_eviction),
            epoch_marker: format!("{}:replay-cache-epoch", config.key_prefix),
        }
    }

    /// The upkeep state of a scripted test store: eviction not allowed,
    /// no marker (a test backend has no tracking).
    #[cfg(test)]
    pub(super) fn for_tests() -> Self {
        Self {
            eviction: EvictionWatch::new(false),
            epoch_marker: String::new(),
        }
    }
}

impl AnyStore {
    /// Starts the background work the backend needs (module docs) under
    /// `tracker`, each task ending when `shutdown` is cancelled.
    pub fn spawn_upkeep(self: &Arc<Self>, tracker: &TaskTracker, shutdown: &CancellationToken) {
        match &self.backend {
            Backend::Embedded(embedded) => {
                let embedded = embedded.clone();
                tracker.spawn(crate::time::every(
                    SWEEP_EVERY,
                    shutdown.clone(),
                    move || {
                        let embedded = embedded.clone();
                        async move {
                            if let Err(error) = embedded.sweep().await {
                                tracing::warn!(%error, "embedded store sweep failed");
                            }
                        }
                    },
                ));
            }
            Backend::Redis(redis) => {
                let store = Arc::clone(self);
                let stop = shutdown.clone();
                tracker.spawn(async move { store.watch_eviction(stop).await });
                if let Some(cache) = &self.cache {
                    let coherent = redis.keep_coherent(
                        Arc::clone(cache),
                        self.upkeep.epoch_marker.clone(),
                        shutdown.clone(),
                    );
                    if let Some(coherent) = coherent {
                        tracker.spawn(coherent);
                    }
                }
            }
            #[cfg(test)]
            Backend::Test(_) => {}
        }
    }

    /// Runs the eviction watcher over the Redis backend until `shutdown`.
    async fn watch_eviction(&self, shutdown: CancellationToken) {
        if let Some(redis) = self.redis() {
            self.upkeep.eviction.run(redis, shutdown).await;
        }
    }

    /// Re-reads every Redis primary's eviction settings now, as a
    /// `/readyz` probe does (logging only what changed since the last
    /// check). `Err` when Redis could not be reached: the previous
    /// findings stand. Nothing to read on the embedded store.
    pub async fn probe_eviction(&self) -> Result<(), StoreError> {
        match self.redis() {
            Some(redis) => self.upkeep.eviction.check(redis, Trigger::Probe).await,
            None => Ok(()),
        }
    }

    /// Why the store is not ready because Redis may evict keys (contract §4
    /// rule 10), from the last eviction check: `None` when no primary
    /// may evict, when `[store] allow_eviction = true` accepts that, or
    /// on the embedded store.
    pub fn eviction_problem(&self) -> Option<String> {
        self.upkeep.eviction.not_ready()
    }
}
