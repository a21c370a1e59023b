//! Hot keys: per route, the idempotency keys with the most deliveries in
//! a sliding window, each with its duplicates and last outcome.
//!
//! Answers "which keys", where the request counters answer "how many": a
//! sender stuck in a retry loop shows up as one key at rank 1 with nearly
//! all of its deliveries duplicates. Each route owns one [`RouteHotKeys`]:
//! a [`Summary`] (windowed space-saving, see [`summary`]) of
//! [`CAPACITY_PER_K`] × `k` entries allocated at start-up, behind one
//! short mutex. Observing a delivery copies its [`KeyId`] (32-byte digest,
//! and a 16-byte entity tag on an entity route) and two `&'static str` words into that table: no allocation per request.
//!
//! Reading is done at scrape or API time: [`HotKeys::top`] takes each
//! route's current top `k`, which [`export`] writes as Prometheus text
//! straight into the admin `/metrics` answer. The series set is therefore
//! exactly the current top `k` per route (label cardinality bounded by
//! `k`), and a key that leaves it is gone from the next scrape.

pub mod export;
pub mod summary;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::config::HotKeysConfig;
use crate::time::millis;
pub use summary::{KeyId, RedeliveryResult, Sighting, Summary};

/// Table entries per reported key: the headroom space-saving needs so
/// that the top `k` are found among keys that come and go (a key is kept
/// once its share of the window exceeds 1 / (4·k)).
pub const CAPACITY_PER_K: usize = 4;

/// One key of a route's top `k`, as `/admin/hot-keys` and `/metrics`
/// show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotKey {
    /// 1 for the key with the most deliveries.
    pub rank: usize,
    /// The key, as the `key=` of the log lines spells it ([`KeyId`]).
    pub digest: KeyId,
    /// Deliveries in the window.
    pub deliveries: u64,
    /// Of those, duplicates (replays, and 409/422 answers for a key
    /// already claimed).
    pub duplicates: u64,
    /// The latest delivery's `outcome` word.
    pub last_outcome: &'static str,
    /// The latest delivery's `reason` word, if it had one.
    pub last_reason: Option<&'static str>,
    /// When the latest delivery was seen, in Unix milliseconds.
    pub last_seen_unix_ms: u64,
}

/// One route's table.
#[derive(Debug)]
pub struct RouteHotKeys {
    name: String,
    table: Mutex<Summary>,
    /// Time zero of the table's clock (tokio's, so tests can pause it).
    origin: Instant,
    /// `origin` in Unix milliseconds, to date the last sightings.
    origin_unix_ms: u64,
}

impl RouteHotKeys {
    /// A table for route `name` holding `capacity` keys over `window`.
    pub fn new(name: &str, capacity: usize, window: Duration) -> Self {
        let origin_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, millis);
        Self {
            name: name.to_owned(),
            table: Mutex::new(Summary::new(capacity, millis(window))),
            origin: Instant::now(),
            origin_unix_ms,
        }
    }

    /// The route's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Counts one delivery of `key`, now.
    pub fn observe(&self, key: impl Into<KeyId>, sighting: Sighting) {
        self.observe_at(key, sighting, Instant::now());
    }

    /// Counts one delivery at `now`.
    pub fn observe_at(&self, key: impl Into<KeyId>, sighting: Sighting, now: Instant) {
        let since = millis(now.saturating_duration_since(self.origin));
        self.lock().observe(&key.into(), sighting, since);
    }

    /// The `k` keys with the most deliveries in the window at `now`, rank
    /// 1 first; keys without deliveries in the window are not listed.
    pub fn top(&self, k: usize, now: Instant) -> Vec<HotKey> {
        let since = millis(now.saturating_duration_since(self.origin));
        let tallies = self.lock().top(k, since);
        tallies
            .into_iter()
            .enumerate()
            .map(|(index, tally)| HotKey {
                rank: index + 1,
                digest: tally.digest,
                deliveries: tally.deliveries,
                duplicates: tally.duplicates,
                last_outcome: tally.last.outcome,
                last_reason: tally.last.reason,
                last_seen_unix_ms: self.origin_unix_ms.saturating_add(tally.last_seen_ms),
            })
            .collect()
    }

    /// Keys tracked right now (at most the capacity).
    pub fn tracked(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Summary> {
        // The table is consistent after every statement that can panic
        // (none can), so a poisoned lock is still safe to use.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every protected route's table, in route order; none when
/// `[hot_keys] enabled = false`.
#[derive(Debug)]
pub struct HotKeys {
    k: usize,
    window: Duration,
    /// `[hot_keys] export_keys`: whether `/metrics` names keys.
    export_keys: bool,
    routes: Vec<Arc<RouteHotKeys>>,
}

impl HotKeys {
    /// Tables for the routes named `routes`, in order, as `settings` says.
    pub fn new<'a>(settings: &HotKeysConfig, routes: impl IntoIterator<Item = &'a str>) -> Self {
        let k = settings.k.get();
        let routes = if settings.enabled {
            routes
                .into_iter()
                .map(|name| Arc::new(RouteHotKeys::new(name, k * CAPACITY_PER_K, settings.window)))
                .collect()
        } else {
            Vec::new()
        };
        Self {
            k,
            window: settings.window,
            export_keys: settings.export_keys,
            routes,
        }
    }

    /// Whether hot keys are tracked at all.
    pub fn enabled(&self) -> bool {
        !self.routes.is_empty()
    }

    /// Whether `/metrics` carries a series per key.
    pub fn export_keys(&self) -> bool {
        self.export_keys
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The table of the route named `name`, if tracked.
    pub fn named(&self, name: &str) -> Option<&Arc<RouteHotKeys>> {
        self.routes.iter().find(|route| route.name == name)
    }

    /// Every tracked route's table, in route order.
    pub fn routes(&self) -> &[Arc<RouteHotKeys>] {
        &self.routes
    }

    /// The route's top `k` now.
    pub fn top(&self, route: &RouteHotKeys) -> Vec<HotKey> {
        route.top(self.k, Instant::now())
    }
}

/// The sightings the hot-key tests observe, shared by this module's
/// tests and its children's.
#[cfg(test)]
pub(crate) mod sightings {
    use super::Sighting;

    /// A first delivery.
    pub(crate) const FIRST: Sighting = Sighting {
        outcome: "forwarded",
        reason: None,
        duplicate: false,
    };
    /// A replay: a duplicate.
    pub(crate) const REPLAY: Sighting = Sighting {
        outcome: "replayed",
        reason: None,
        duplicate: true,
    };
    /// A 409 `in_flight`: a duplicate.
    pub(crate) const CONFLICT: Sighting = Sighting {
        outcome: "rejected",
        reason: Some("in_flight"),
        duplicate: true,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TopK;

    use sightings::{CONFLICT, FIRST};

    fn settings(k: usize, window: Duration) -> HotKeysConfig {
        HotKeysConfig {
            enabled: true,
            k: TopK::new(k).expect("valid k"),
            window,
            export_keys: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_slides_with_the_clock() {
        let hot = HotKeys::new(&settings(2, Duration::from_secs(60)), ["pay", "refund"]);
        let pay = hot.named("pay").expect("tracked");
        assert_eq!(pay.name(), "pay");
        pay.observe(&[1; 32], FIRST);
        tokio::time::advance(Duration::from_secs(30)).await;
        pay.observe(&[1; 32], CONFLICT);
        pay.observe(&[2; 32], FIRST);
        let top = hot.top(pay);
        assert_eq!(top.len(), 2);
        assert_eq!(
            (
                top[0].rank,
                top[0].digest,
                top[0].deliveries,
                top[0].duplicates
            ),
            (1, KeyId::from(&[1; 32]), 2, 1)
        );
        assert_eq!(
            (top[0].last_outcome, top[0].last_reason),
            ("rejected", Some("in_flight"))
        );
        assert_eq!(top[1].rank, 2);
        assert_eq!(top[0].last_seen_unix_ms, pay.origin_unix_ms + 30_000);
        // A minute after the first sighting it has left the window.
        tokio::time::advance(Duration::from_secs(30)).await;
        let top = hot.top(pay);
        assert_eq!((top[0].deliveries, top[0].duplicates), (1, 1));
        // Another minute and nothing is left to export.
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(hot.top(pay).is_empty());
        assert_eq!(pay.tracked(), 0);
        // The other route never saw a thing.
        assert!(hot.top(hot.named("refund").expect("tracked")).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn only_k_keys_are_reported_from_a_table_of_4k() {
        let hot = HotKeys::new(&settings(3, Duration::from_secs(60)), ["pay"]);
        let pay = hot.named("pay").expect("tracked");
        for n in 0..50u8 {
            for _ in 0..=n % 5 {
                pay.observe(&[n; 32], FIRST);
            }
            assert!(pay.tracked() <= 3 * CAPACITY_PER_K);
        }
        assert_eq!(hot.top(pay).len(), 3);
    }

    #[test]
    fn disabled_tracks_nothing() {
        let mut off = settings(10, Duration::from_secs(60));
        off.enabled = false;
        let hot = HotKeys::new(&off, ["pay"]);
        assert!(!hot.enabled());
        assert!(hot.routes().is_empty());
        assert!(hot.named("pay").is_none());
    }
}
