//! The store's metrics (contract §7): how long each store call takes and how
//! often it fails, and whether Redis may evict idemgate's keys.
//!
//! Kept beside the store, which alone records them ([`AnyStore`] meters
//! every call, the eviction watcher sets the risk gauge and counts
//! evictions), so the crate's
//! `metrics` module stays a leaf. Names and the `op` label values are part
//! of the product contract (dashboards and alert rules read them).
//!
//! [`AnyStore`]: super::AnyStore

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};

use crate::metrics::{Description, at_zero};

/// `idemgate_store_duration_seconds{op}`.
pub(crate) const STORE_DURATION: Description = Description::seconds(
    "idemgate_store_duration_seconds",
    "Store call latency by operation",
);
/// `idemgate_store_errors_total{op}`.
pub(crate) const STORE_ERRORS_TOTAL: Description = Description::counter(
    "idemgate_store_errors_total",
    "Failed store calls by operation",
);
/// `idemgate_store_eviction_risk`: 1 while a Redis primary may evict keys
/// (`maxmemory` set with a policy other than `noeviction`), else 0. An
/// evicted record or claim lets a duplicate execute again (contract §4 rule 10).
pub(crate) const STORE_EVICTION_RISK: Description = Description::gauge(
    "idemgate_store_eviction_risk",
    "1 while a Redis primary may evict keys (maxmemory with a policy other than noeviction)",
);
/// `idemgate_store_evicted_keys_total`: keys the Redis primaries evicted
/// since this process first read them, from each node's own
/// `evicted_keys` (`INFO stats`). A true counter: a node whose counter went
/// down was restarted, so all it reports now is new; a node seen for the
/// first time (start-up, a promoted replica) sets its baseline.
pub(crate) const STORE_EVICTED_KEYS_TOTAL: Description = Description::counter(
    "idemgate_store_evicted_keys_total",
    "Keys the Redis primaries evicted since idemgate first read them (INFO stats evicted_keys)",
);

/// `idemgate_store_durability{level}`: 1 for the declared `[store]
/// durability` (`memory`, `fsync` or `replicated`), so a dashboard shows
/// what every acknowledgement rests on (`store::durability`).
pub(crate) const STORE_DURABILITY: Description = Description::gauge(
    "idemgate_store_durability",
    "1 for the declared [store] durability level (label level)",
);
/// `idemgate_store_durability_met`: 1 while every primary can give the
/// declared level, 0 while one can not (writes are then refused).
pub(crate) const STORE_DURABILITY_MET: Description = Description::gauge(
    "idemgate_store_durability_met",
    "1 while the store's settings give the declared durability, else 0",
);

/// `idemgate_store_data_lost_total`: generation markers found gone or
/// replaced (`store::generation`): the store lost what idemgate had
/// written.
pub(crate) const STORE_DATA_LOST_TOTAL: Description = Description::counter(
    "idemgate_store_data_lost_total",
    "Times the store was found to have lost data (its generation marker gone or replaced)",
);

/// The store's metrics, described at start-up (`app::install_metrics`).
pub(crate) const DESCRIPTIONS: &[Description] = &[
    STORE_DURATION,
    STORE_ERRORS_TOTAL,
    STORE_EVICTION_RISK,
    STORE_EVICTED_KEYS_TOTAL,
    STORE_DURABILITY,
    STORE_DURABILITY_MET,
    STORE_DATA_LOST_TOTAL,
];

/// Sets `idemgate_store_durability{level}` to 1 for the declared level.
pub(crate) fn durability_level(level: &'static str) {
    gauge!(STORE_DURABILITY.name, "level" => level).set(1.0);
}

/// Sets `idemgate_store_durability_met`.
pub(crate) fn durability_met(met: bool) {
    gauge!(STORE_DURABILITY_MET.name).set(if met { 1.0 } else { 0.0 });
}

/// Store operation (`op` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreOp {
    /// claim.lua / embedded claim.
    Claim,
    /// complete.lua.
    Complete,
    /// release.lua.
    Release,
    /// renew.lua.
    Renew,
    /// lookup.lua.
    Lookup,
    /// Admin purge.
    Purge,
}

impl StoreOp {
    /// Every operation, for pre-registering label sets.
    pub(crate) const ALL: [Self; 6] = [
        Self::Claim,
        Self::Complete,
        Self::Release,
        Self::Renew,
        Self::Lookup,
        Self::Purge,
    ];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Claim => "claim",
            Self::Complete => "complete",
            Self::Release => "release",
            Self::Renew => "renew",
            Self::Lookup => "lookup",
            Self::Purge => "purge",
        }
    }
}

/// Store operation handles, resolved once.
#[derive(Debug)]
pub(crate) struct StoreMetrics {
    durations: Vec<Histogram>,
    errors: Vec<Counter>,
}

impl StoreMetrics {
    /// Handles for every operation; error counters start at zero.
    pub(crate) fn new() -> Self {
        Self {
            durations: StoreOp::ALL
                .iter()
                .map(|op| histogram!(STORE_DURATION.name, "op" => op.as_str()))
                .collect(),
            errors: StoreOp::ALL
                .iter()
                .map(|op| at_zero(counter!(STORE_ERRORS_TOTAL.name, "op" => op.as_str())))
                .collect(),
        }
    }

    /// Records a store call's latency and failure.
    pub(crate) fn record(&self, op: StoreOp, elapsed: Duration, failed: bool) {
        self.durations[op as usize].record(elapsed.as_secs_f64());
        if failed {
            self.errors[op as usize].increment(1);
        }
    }
}

impl Default for StoreMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The store's eviction metrics, resolved once; both start at 0, which is
/// also what the embedded store (it never evicts) keeps.
#[derive(Debug)]
pub(crate) struct EvictionMetrics {
    risk: Gauge,
    evicted: Counter,
    /// Each node's `evicted_keys` as last read.
    seen: Mutex<HashMap<String, u64>>,
}

impl EvictionMetrics {
    /// Handles for both metrics, at 0.
    pub(crate) fn new() -> Self {
        let this = Self {
            risk: gauge!(STORE_EVICTION_RISK.name),
            evicted: at_zero(counter!(STORE_EVICTED_KEYS_TOTAL.name)),
            seen: Mutex::new(HashMap::new()),
        };
        this.risk.set(0.0);
        this
    }

    /// Records the outcome of one eviction check: the risk, and each
    /// node's `evicted_keys` (node name, value) where `INFO` answered.
    pub(crate) fn set<'a>(
        &self,
        at_risk: bool,
        evicted_keys: impl Iterator<Item = (&'a str, u64)>,
    ) {
        self.risk.set(if at_risk { 1.0 } else { 0.0 });
        // A poisoned map only means a check panicked mid-update; its
        // readings are still each node's latest.
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let new: u64 = evicted_keys
            .map(|(node, now)| newly_evicted(&mut seen, node, now))
            .sum();
        self.evicted.increment(new);
    }
}

/// The evictions `node` reports beyond its last reading, which `now`
/// replaces: none on a first reading (the baseline), the difference while
/// its counter grows, and all of `now` after it went down (the server
/// restarted and counts from 0 again).
fn newly_evicted(seen: &mut HashMap<String, u64>, node: &str, now: u64) -> u64 {
    match seen.insert(node.to_owned(), now) {
        None => 0,
        Some(before) if now >= before => now - before,
        Some(_) => now,
    }
}

impl Default for EvictionMetrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::testing::assert_declaration_order;

    /// The handle vectors are indexed by discriminant: `StoreOp::ALL` must
    /// list the variants in declaration order.
    #[test]
    fn label_arrays_follow_declaration_order() {
        assert_declaration_order(&StoreOp::ALL, |op| op as usize);
    }

    #[test]
    fn evictions_count_across_restarts_and_new_nodes() {
        let mut seen = HashMap::new();
        // (node, its evicted_keys now, newly counted)
        for (node, now, new) in [
            ("a", 40, 0), // first reading: the baseline
            ("a", 45, 5),
            ("a", 45, 0),
            ("b", 7, 0), // a promoted replica: its own baseline
            ("a", 3, 3), // restarted: everything it reports is new
            ("a", 10, 7),
            ("b", 9, 2),
        ] {
            assert_eq!(newly_evicted(&mut seen, node, now), new, "{node} at {now}");
        }
    }

    #[test]
    fn the_counter_adds_what_the_nodes_newly_evicted() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let metrics = EvictionMetrics::new();
            metrics.set(false, [("a", 100), ("b", 1)].into_iter());
            metrics.set(true, [("a", 104), ("b", 3)].into_iter());
            metrics.set(true, [("a", 2)].into_iter());
        });
        let text = handle.render();
        assert!(
            text.contains("idemgate_store_evicted_keys_total 8"),
            "{text}"
        );
        assert!(text.contains("idemgate_store_eviction_risk 1"), "{text}");
    }
}
