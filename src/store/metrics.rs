//! The store's metrics (contract §7): how long each store call takes and how
//! often it fails, and whether Redis may evict idemgate's keys.
//!
//! Kept beside the store, which alone records them ([`AnyStore`] meters
//! every call, the eviction watcher sets the two gauges), so the crate's
//! `metrics` module stays a leaf. Names and the `op` label values are part
//! of the product contract (dashboards and alert rules read them).
//!
//! [`AnyStore`]: super::AnyStore

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
/// `idemgate_store_evicted_keys`: Redis's own `evicted_keys` (`INFO
/// stats`), summed over the primaries. A gauge that mirrors the servers'
/// counters, so it drops when a server restarts; `increase()` reads such a
/// drop as a counter reset.
pub(crate) const STORE_EVICTED_KEYS: Description = Description::gauge(
    "idemgate_store_evicted_keys",
    "Keys Redis evicted (INFO stats evicted_keys), summed over the primaries",
);

/// The store's metrics, described at start-up (`app::install_metrics`).
pub(crate) const DESCRIPTIONS: &[Description] = &[
    STORE_DURATION,
    STORE_ERRORS_TOTAL,
    STORE_EVICTION_RISK,
    STORE_EVICTED_KEYS,
];

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

/// The store's eviction gauges, resolved once; both start at 0, which is
/// also what the embedded store (it never evicts) keeps.
#[derive(Debug)]
pub(crate) struct EvictionMetrics {
    risk: Gauge,
    evicted: Gauge,
}

impl EvictionMetrics {
    /// Handles for both gauges, set to 0.
    pub(crate) fn new() -> Self {
        let this = Self {
            risk: gauge!(STORE_EVICTION_RISK.name),
            evicted: gauge!(STORE_EVICTED_KEYS.name),
        };
        this.risk.set(0.0);
        this.evicted.set(0.0);
        this
    }

    /// Records the outcome of one eviction check.
    pub(crate) fn set(&self, at_risk: bool, evicted_keys: u64) {
        self.risk.set(if at_risk { 1.0 } else { 0.0 });
        self.evicted.set(evicted_keys as f64);
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
}
