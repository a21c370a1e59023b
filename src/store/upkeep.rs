//! The store's own background work, and the readiness it reports.
//!
//! Whoever owns a resource starts and stops its background work: the app
//! hands [`AnyStore::spawn_upkeep`] its `TaskTracker` and shutdown token,
//! and the store starts what its backend needs, all under that tracker so
//! shutdown waits for it:
//!
//! * **embedded** — the sweeper, deleting expired records every
//!   [`SWEEP_EVERY`] and raising the store's generation with each sweep
//!   (so an older copy of the file is refused at start-up);
//! * **Redis** — one reading of every primary's settings on the eviction
//!   watcher's schedule, handed to the eviction watcher (`store::eviction`)
//!   and the durability watcher (`store::durability`), then a look at the
//!   generation markers (`store::generation`), and with a replay
//!   cache the listener that keeps it coherent with Redis
//!   (`store/redis/tracking.rs`).
//!
//! `/readyz` asks the store, not the watchers: [`AnyStore::probe_settings`]
//! re-reads the settings, [`AnyStore::settings_problem`] says whether they
//! keep the store from being ready. So no backend type, and no fred type,
//! is seen outside `store/`.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::durability::{Confirmation, DurabilityWatch, Findings};
use super::eviction::{EvictionWatch, Trigger, read_primaries, schedule};
use super::generation::GenerationWatch;
use super::redis::RedisStore;
use super::{AnyStore, StoreError};
use crate::config::{Durability, StoreConfig};

/// How often the embedded store deletes expired records.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// What the store's background work keeps between runs, and what it needs
/// of the configuration.
#[derive(Debug)]
pub(super) struct Upkeep {
    /// Whether Redis may evict keys: the watcher's last findings, which
    /// `/readyz` reads (on the embedded store its gauges just stay 0).
    eviction: EvictionWatch,
    /// Whether Redis keeps writes at the declared durability; `None` on
    /// the embedded store, which always commits with fsync.
    durability: Option<DurabilityWatch>,
    /// Whether Redis lost data since this process first looked, and the
    /// name of its markers (`{key_prefix}:generation`,
    /// `store::generation`); `None` on the embedded store.
    generation: Option<(GenerationWatch, String)>,
    /// The replay cache's epoch marker on Redis,
    /// `{key_prefix}:replay-cache-epoch` (on a Cluster the name every
    /// primary's marker starts with; `store/redis/tracking.rs`).
    epoch_marker: String,
}

impl Upkeep {
    /// The upkeep state of a store configured by `config`; sets the
    /// eviction gauges to 0 until the first check. `confirmation` is the
    /// Redis store's (`None`: the embedded store, `fsync` and met).
    pub(super) fn new(config: &StoreConfig, confirmation: Option<Arc<Confirmation>>) -> Self {
        let redis = confirmation.is_some();
        let durability = confirmation.map(DurabilityWatch::new);
        let generation = redis.then(|| {
            let fail_readiness = config.durability > Durability::Memory;
            (
                GenerationWatch::new(fail_readiness),
                format!("{}:generation", config.key_prefix),
            )
        });
        if durability.is_none() {
            super::metrics::durability_level(crate::config::Choice::name(Durability::Fsync));
            super::metrics::durability_met(true);
            // Generations are a Redis matter: the series exists, at 0.
            metrics::counter!(super::metrics::STORE_DATA_LOST_TOTAL.name).absolute(0);
        }
        Self {
            eviction: EvictionWatch::new(config.allow_eviction),
            durability,
            generation,
            epoch_marker: format!("{}:replay-cache-epoch", config.key_prefix),
        }
    }

    /// The primaries the last check found running a server idemgate does
    /// not support (`node: why`); none on the embedded store.
    pub(super) fn unsupported_servers(&self) -> Vec<String> {
        self.durability
            .as_ref()
            .map_or_else(Vec::new, DurabilityWatch::unsupported)
    }

    /// The upkeep state of a scripted test store: eviction not allowed,
    /// no marker (a test backend has no tracking).
    #[cfg(test)]
    pub(super) fn for_tests() -> Self {
        Self {
            eviction: EvictionWatch::new(false),
            durability: None,
            generation: None,
            epoch_marker: String::new(),
        }
    }
}

impl AnyStore {
    /// Starts the background work the backend needs (module docs) under
    /// `tracker`, each task ending when `shutdown` is cancelled.
    pub fn spawn_upkeep(self: &Arc<Self>, tracker: &TaskTracker, shutdown: &CancellationToken) {
        if let Some(embedded) = self.backend.embedded() {
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
                        // A copy of the file older than this is refused
                        // at start-up (`store/embedded/generation.rs`).
                        if let Err(error) = embedded.raise_generation().await {
                            tracing::warn!(%error, "embedded store generation not raised");
                        }
                    }
                },
            ));
        }
        if let Some(redis) = self.backend.redis() {
            let store = Arc::clone(self);
            let stop = shutdown.clone();
            tracker.spawn(async move { store.watch_settings(stop).await });
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
    }

    /// Checks Redis's settings on the eviction watcher's schedule
    /// (`store::eviction`) until `shutdown`.
    async fn watch_settings(&self, shutdown: CancellationToken) {
        let Some(redis) = self.redis() else { return };
        schedule(
            || async move {
                match self.check_settings(redis, Trigger::Scheduled).await {
                    Ok(()) => true,
                    Err(error) => {
                        tracing::warn!(%error, "could not check the redis settings; retrying");
                        false
                    }
                }
            },
            redis.reconnects(),
            shutdown,
        )
        .await;
    }

    /// Reads every primary once and hands the reading to both watchers.
    async fn check_settings(&self, redis: &RedisStore, trigger: Trigger) -> Result<(), StoreError> {
        let reports = read_primaries(redis).await?;
        self.upkeep.eviction.record(&reports, trigger);
        if let Some(durability) = &self.upkeep.durability {
            let nodes: Vec<_> = reports.into_iter().map(|r| r.persistence).collect();
            durability.record(&nodes, trigger == Trigger::Scheduled);
        }
        if let Some((watch, marker)) = &self.upkeep.generation {
            redis.check_generation(marker, watch).await?;
        }
        Ok(())
    }

    /// Re-reads every Redis primary's settings now, as a `/readyz` probe
    /// does (logging only what changed since the last check). `Err` when
    /// Redis could not be reached: the previous findings stand. Nothing to
    /// read on the embedded store.
    pub async fn probe_settings(&self) -> Result<(), StoreError> {
        match self.redis() {
            Some(redis) => self.check_settings(redis, Trigger::Probe).await,
            None => Ok(()),
        }
    }

    /// Why the store's settings keep it from being ready, from the last
    /// check: a primary that may evict keys (contract §4 rule 10; unless
    /// `[store] allow_eviction = true`), or one that can not keep writes
    /// at the declared `[store] durability`. `None` on the embedded store.
    pub fn settings_problem(&self) -> Option<String> {
        let problems: Vec<String> = [
            self.upkeep.eviction.not_ready(),
            self.upkeep
                .durability
                .as_ref()
                .and_then(DurabilityWatch::not_ready),
            self.upkeep
                .generation
                .as_ref()
                .and_then(|(watch, _)| watch.not_ready()),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!problems.is_empty()).then(|| problems.join("; "))
    }

    /// Where the embedded store's check of its whole file stands (for
    /// `/admin/info`); `None` on Redis.
    pub(crate) fn integrity(&self) -> Option<String> {
        self.backend
            .embedded()
            .and_then(super::embedded::EmbeddedStore::integrity)
    }

    /// The declared durability and, on Redis, the last check's findings
    /// (for `/admin/info`).
    pub(crate) fn durability(&self) -> (Durability, Option<Findings>) {
        match &self.upkeep.durability {
            Some(watch) => (watch.level(), watch.findings()),
            None => (Durability::Fsync, None),
        }
    }
}
