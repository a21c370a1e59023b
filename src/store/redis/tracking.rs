//! Keeps a Redis-backed replay cache (`crate::replay_cache`) coherent with
//! Redis (server-assisted client-side caching, `CLIENT TRACKING` over
//! RESP3).
//!
//! Part of the Redis store because it is the store's connection: the
//! cache itself is a plain in-memory structure the store fills and
//! invalidates, and knows nothing of Redis. The task is started with the
//! store's other upkeep (`AnyStore::spawn_upkeep`).
//!
//! The store reads every record it is about to cache over one dedicated
//! RESP3 client (`RedisStore::tracking`). With tracking on, Redis remembers
//! each key that client read and pushes an invalidation on the same
//! connection the moment the key changes — a purge, a delete, an expiry,
//! an eviction — on whichever instance or tool changed it. This task turns
//! those pushes into [`ReplayCache::invalidate`].
//!
//! The rule every tracking client follows: invalidations are only
//! delivered while the connection lives, so whenever it may have dropped
//! the cache is flushed and fills are refused ([`ReplayCache::suspend`])
//! until tracking is switched on again over the new connection
//! ([`ReplayCache::resume`]). "May have dropped" is any of fred's
//! connection events — an error, a reconnect (also the first connect), a
//! cluster topology change (a new node's connection is not tracking yet),
//! an unresponsive connection — or a health check that goes unanswered
//! (the `PING`, or on a Cluster any primary's epoch marker read): a
//! connection that went silent without closing, or a frozen primary whose
//! replica is about to be promoted while this instance's cache still
//! answers that primary's keys from memory. A listener that falls
//! behind loses messages: that flushes too. Redis itself asks for a full
//! flush with an empty invalidation (`FLUSHALL`, or its tracking table
//! overflowed).
//!
//! That last message does not reach us: fred 10 passes on only
//! invalidations whose key list is an array, and the flush message
//! carries a null. So a flush is also noticed the way any client can: an
//! epoch marker (`{key_prefix}:replay-cache-epoch`, a random value no
//! record key can be) is read at every health check, written when absent,
//! and the cache is flushed whenever it vanished or changed since the last
//! look: after `FLUSHALL`, `FLUSHDB`, `SWAPDB` (for which Redis sends
//! nothing at all) or a restart that lost the data set. A flush is thus
//! seen within [`HEALTH_INTERVAL`]. On a Cluster a flush empties one
//! primary, so there is one marker per primary
//! (`{key_prefix}:replay-cache-epoch:{<tag>}`, the tag of a slot that
//! primary serves: [`slots`]), taken from the client's view of
//! the slot map at every check; a marker that moves with its slots to a
//! promoted replica is new to this instance and only read, never taken
//! for a flush.
//!
//! Standalone, Cluster (fred sends `CLIENT TRACKING` to every primary) and
//! Sentinel (a failover is a reconnect) work alike.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{
    ClientLike, ClusterInterface, EventInterface, KeysInterface, TrackingInterface,
};
use fred::types::Value;
use fred::types::client::Invalidation;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::slots;
use crate::backoff::Backoff;
use crate::replay_cache::{FlushReason, ReplayCache};

/// How often the tracking connection is checked with `PING`: bounds how
/// long a silently dead connection can leave stale entries behind (a purge
/// elsewhere in that window is seen late, never lost for longer).
pub(crate) const HEALTH_INTERVAL: Duration = Duration::from_secs(1);

/// First and longest pause between attempts to switch tracking on while
/// Redis is away; jittered (`crate::backoff`), so the instances that lost
/// one Redis do not all re-arm on the same beat.
const ARM_RETRY_FIRST: Duration = Duration::from_millis(200);
const ARM_RETRY_MAX: Duration = Duration::from_secs(2);

/// Runs until `shutdown`: arms tracking on `client`, applies its
/// invalidations to `cache`, and flushes it whenever they may be lost;
/// `marker` is the epoch marker's key, or on a Cluster the name every
/// primary's marker starts with (module docs).
pub(super) async fn keep_coherent(
    client: Client,
    cache: Arc<ReplayCache>,
    marker: String,
    shutdown: CancellationToken,
) {
    let mut epoch = Epoch::new(marker);
    listen(&client, &cache, &mut epoch, &shutdown).await;
    // Stopped (shutdown, or the client was closed): nothing reaches us.
    cache.suspend(FlushReason::Disconnected);
}

/// The listening loop; `None` once the client's event streams closed.
async fn listen(
    client: &Client,
    cache: &ReplayCache,
    epoch: &mut Epoch,
    shutdown: &CancellationToken,
) -> Option<()> {
    let mut invalidations = client.invalidation_rx();
    let mut reconnects = client.reconnect_rx();
    let mut errors = client.error_rx();
    let mut topology = client.cluster_change_rx();
    let mut unresponsive = client.unresponsive_rx();
    let mut health = tokio::time::interval(HEALTH_INTERVAL);
    health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut armed = false;
    let mut arm_retry = Backoff::new(ARM_RETRY_FIRST, ARM_RETRY_MAX);
    loop {
        if !armed {
            armed = arm(client, cache).await;
            if !armed {
                tokio::select! {
                    () = shutdown.cancelled() => return Some(()),
                    () = tokio::time::sleep(arm_retry.next_pause()) => continue,
                }
            }
            arm_retry = Backoff::new(ARM_RETRY_FIRST, ARM_RETRY_MAX);
        }
        let lost = tokio::select! {
            () = shutdown.cancelled() => return Some(()),
            message = invalidations.recv() => match message {
                Ok(invalidation) => {
                    apply(cache, &invalidation);
                    false
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "replay cache: invalidations dropped; flushing");
                    cache.flush(FlushReason::Lagged);
                    false
                }
                Err(RecvError::Closed) => return None,
            },
            event = reconnects.recv() => connection_event(&event.map(drop))?,
            event = errors.recv() => connection_event(&event.map(drop))?,
            event = topology.recv() => connection_event(&event.map(drop))?,
            event = unresponsive.recv() => connection_event(&event.map(drop))?,
            _ = health.tick() => match epoch.look(client).await {
                Look::Same => false,
                Look::Changed => {
                    tracing::warn!("replay cache: the store was flushed or swapped; flushing");
                    cache.flush(FlushReason::Server);
                    false
                }
                Look::Unanswered => true,
            }
        };
        if lost {
            tracing::debug!("replay cache: tracking connection may have dropped; flushing");
            cache.suspend(FlushReason::Disconnected);
            armed = false;
        }
    }
}

/// Whether a connection event means invalidations may be lost (every one
/// does, a lagged stream included); `None` once the stream is closed.
fn connection_event(event: &Result<(), RecvError>) -> Option<bool> {
    match event {
        Err(RecvError::Closed) => None,
        Ok(()) | Err(RecvError::Lagged(_)) => Some(true),
    }
}

/// Switches tracking on over the client's current connections; resumes
/// the cache if Redis said yes.
async fn arm(client: &Client, cache: &ReplayCache) -> bool {
    match client
        .start_tracking(Vec::<String>::new(), false, false, false, false)
        .await
    {
        Ok(()) => {
            cache.resume();
            tracing::debug!("replay cache: tracking armed");
            true
        }
        Err(error) => {
            tracing::debug!(%error, "replay cache: could not switch tracking on yet");
            false
        }
    }
}

/// What one health check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// Every primary answered, with the epoch seen before.
    Same,
    /// A primary's epoch changed: the data set under the cache is gone.
    Changed,
    /// The `PING` or a primary's marker read went unanswered: that
    /// primary's invalidations may be lost (a frozen or partitioned node,
    /// a failover in progress), so nothing it served can be vouched for.
    Unanswered,
}

/// The store's epoch as this instance last saw it (module docs): each
/// marker's value, by marker key.
#[derive(Debug)]
struct Epoch {
    base: String,
    seen: HashMap<String, String>,
}

impl Epoch {
    fn new(base: String) -> Self {
        Self {
            base,
            seen: HashMap::new(),
        }
    }

    /// The marker keys to read now: one per primary on a Cluster (named
    /// by the tag of the first slot it serves), else the one.
    fn markers(&self, client: &Client) -> Vec<String> {
        let Some(state) = client
            .cached_cluster_state()
            .filter(|_| client.is_clustered())
        else {
            return vec![self.base.clone()];
        };
        let mut first_slots: HashMap<String, u16> = HashMap::new();
        for range in state.slots() {
            let slot = first_slots
                .entry(range.primary.to_string())
                .or_insert(range.start);
            *slot = (*slot).min(range.start);
        }
        let mut markers: Vec<String> = first_slots
            .values()
            .map(|slot| format!("{}:{{{}}}", self.base, slots::tag(*slot)))
            .collect();
        markers.sort();
        markers
    }

    /// `PING`s, then reads every marker (writing a fresh one where
    /// absent) and compares each with the value seen before (a marker's
    /// first look is never a change).
    async fn look(&mut self, client: &Client) -> Look {
        if client.ping::<Value>(None).await.is_err() {
            return Look::Unanswered;
        }
        let mut changed = false;
        for marker in self.markers(client) {
            let Some(current) = read_or_start(client, &marker).await else {
                return Look::Unanswered;
            };
            if let Some(seen) = self.seen.insert(marker, current.clone()) {
                changed |= seen != current;
            }
        }
        if changed { Look::Changed } else { Look::Same }
    }
}

/// The value of `marker`, written first (fresh) when absent; `None` if
/// the store does not answer.
async fn read_or_start(client: &Client, marker: &str) -> Option<String> {
    if let Some(value) = client.get::<Option<String>, _>(marker).await.ok()? {
        return Some(value);
    }
    let fresh = fresh_epoch();
    let _: Value = client
        .set(
            marker,
            fresh.as_str(),
            None,
            Some(fred::types::SetOptions::NX),
            false,
        )
        .await
        .ok()?;
    // Another instance may have written first: read the winner.
    client.get::<Option<String>, _>(marker).await.ok()?
}

/// A random epoch value.
fn fresh_epoch() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // Unique enough to tell two flushes apart.
        bytes[..8].copy_from_slice(&crate::record::now_ms().to_be_bytes());
    }
    hex::encode(bytes)
}

/// Drops what one invalidation names; an empty one means everything.
fn apply(cache: &ReplayCache, invalidation: &Invalidation) {
    if invalidation.keys.is_empty() {
        cache.flush(FlushReason::Server);
        return;
    }
    for key in &invalidation.keys {
        match key.as_str() {
            Some(key) => cache.invalidate(key),
            // Never one of ours (store keys are ASCII): nothing cached.
            None => continue,
        }
    }
}
