//! Metric names, label values and recording helpers (SPEC §7).
//!
//! Names and labels are part of the product contract, so they live here as
//! constants and closed enums: no label value ever comes from request
//! input, which keeps cardinality bounded. The recorder itself (Prometheus
//! exporter and its upkeep) is installed by `app.rs`; without a recorder
//! every helper is a cheap no-op, which is what unit tests get.

pub(crate) mod inbox;
pub(crate) mod process;
pub(crate) mod replay_cache;

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};

use crate::error::Reason;
use crate::hot_keys::{RouteHotKeys, Sighting};

/// `idemgate_requests_total{route, outcome}`.
pub(crate) const REQUESTS_TOTAL: &str = "idemgate_requests_total";
/// `idemgate_rejections_total{route, reason}`.
pub(crate) const REJECTIONS_TOTAL: &str = "idemgate_rejections_total";
/// `idemgate_request_duration_seconds{route, outcome}`.
pub(crate) const REQUEST_DURATION: &str = "idemgate_request_duration_seconds";
/// `idemgate_upstream_duration_seconds{route}`.
pub(crate) const UPSTREAM_DURATION: &str = "idemgate_upstream_duration_seconds";
/// `idemgate_upstream_errors_total{route, kind}`.
pub(crate) const UPSTREAM_ERRORS_TOTAL: &str = "idemgate_upstream_errors_total";
/// `idemgate_store_duration_seconds{op}`.
pub(crate) const STORE_DURATION: &str = "idemgate_store_duration_seconds";
/// `idemgate_store_errors_total{op}`.
pub(crate) const STORE_ERRORS_TOTAL: &str = "idemgate_store_errors_total";
/// `idemgate_in_flight{route}`.
pub(crate) const IN_FLIGHT: &str = "idemgate_in_flight";
/// `idemgate_secret_matches_total{route, secret_index}`: which configured
/// secret verified each delivery, so operators see when an old secret is no
/// longer used and can be retired.
pub(crate) const SECRET_MATCHES_TOTAL: &str = "idemgate_secret_matches_total";
/// `idemgate_secret_reload_failures_total{route, reason}`: `file:`
/// secrets and public keys whose reload (SIGHUP or the file watcher) kept
/// the old value: `unreadable`, `invalid` (not decodable) or `weak`
/// (below the scheme's strength rule). `route="_admin"`: `[admin] token`.
pub(crate) const SECRET_RELOAD_FAILURES_TOTAL: &str = "idemgate_secret_reload_failures_total";
/// `idemgate_unknown_outcomes_total{route}`: deliveries whose outcome was
/// recorded as unknown (upstream timed out or the connection broke after
/// the request was sent), first deliveries and inbox redeliveries alike
/// (a redelivery whose worker vanished mid-call too). Each one blocks its key for `unknown_hold`
/// and may need an operator.
pub(crate) const UNKNOWN_OUTCOMES_TOTAL: &str = "idemgate_unknown_outcomes_total";
/// `idemgate_answers_not_stored_total{route, delivery}`: answers larger
/// than `max_stored_answer_bytes`, which reach the sender but are not kept
/// (`delivery="first"`), and the replays that then carry a problem body
/// instead of them (`delivery="replay"`).
pub(crate) const ANSWERS_NOT_STORED_TOTAL: &str = "idemgate_answers_not_stored_total";
/// `idemgate_store_eviction_risk`: 1 while a Redis primary may evict keys
/// (`maxmemory` set with a policy other than `noeviction`), else 0. An
/// evicted record or claim lets a duplicate execute again (SPEC §4 rule 10).
pub(crate) const STORE_EVICTION_RISK: &str = "idemgate_store_eviction_risk";
/// `idemgate_store_evicted_keys`: Redis's own `evicted_keys` (`INFO
/// stats`), summed over the primaries. A gauge that mirrors the servers'
/// counters, so it drops when a server restarts; `increase()` reads such a
/// drop as a counter reset.
pub(crate) const STORE_EVICTED_KEYS: &str = "idemgate_store_evicted_keys";
/// `idemgate_build_info{version,revision}`: `revision` is the git commit
/// the binary was built from (`build.rs`).
pub(crate) const BUILD_INFO: &str = "idemgate_build_info";
/// The git revision this binary was built from: a 12-digit short hash,
/// `-dirty` appended when tracked files differed from it, or what
/// `IDEMGATE_GIT_REVISION` said outside a checkout, else `unknown`.
pub(crate) const REVISION: &str = env!("IDEMGATE_REVISION");

/// Histogram buckets for every `_duration_seconds` metric: from 100 µs
/// (store round trips, replays) to 30 s (slow legacy upstreams).
pub(crate) const DURATION_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// The label route for requests that matched no route.
pub(crate) const UNMATCHED_ROUTE: &str = "_unmatched";

/// What idemgate did with a request (`outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// First delivery, sent upstream.
    Forwarded,
    /// Stored answer replayed.
    Replayed,
    /// Answered by idemgate with a problem document.
    Rejected,
    /// No route matched; forwarded untouched.
    Passthrough,
    /// Store unavailable and `on_unavailable = "forward"`.
    Unprotected,
    /// Shadow mode: forwarded although enforce would have replayed or refused.
    ShadowDuplicate,
}

impl Outcome {
    /// Every outcome, for pre-registering label sets.
    pub(crate) const ALL: [Self; 6] = [
        Self::Forwarded,
        Self::Replayed,
        Self::Rejected,
        Self::Passthrough,
        Self::Unprotected,
        Self::ShadowDuplicate,
    ];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Forwarded => "forwarded",
            Self::Replayed => "replayed",
            Self::Rejected => "rejected",
            Self::Passthrough => "passthrough",
            Self::Unprotected => "unprotected",
            Self::ShadowDuplicate => "shadow_duplicate",
        }
    }
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

/// Upstream failure kind (`kind` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpstreamErrorKind {
    /// Connection refused or reset.
    Connect,
    /// Slower than `upstream.timeout`.
    Timeout,
    /// Answered with a status outside `cache_status`.
    Status,
}

impl UpstreamErrorKind {
    /// Every kind, for pre-registering label sets.
    pub(crate) const ALL: [Self; 3] = [Self::Connect, Self::Timeout, Self::Status];

    fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::Status => "status",
        }
    }
}

/// Registers help texts and units with the installed recorder.
pub(crate) fn register_descriptions() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(REQUESTS_TOTAL, "Requests handled, by route and outcome");
    describe_counter!(
        REJECTIONS_TOTAL,
        "Requests idemgate answered itself, by reason"
    );
    describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "Time from request head to answer"
    );
    describe_histogram!(
        UPSTREAM_DURATION,
        Unit::Seconds,
        "Time the upstream took to answer"
    );
    describe_counter!(UPSTREAM_ERRORS_TOTAL, "Upstream failures by kind");
    describe_histogram!(
        STORE_DURATION,
        Unit::Seconds,
        "Store call latency by operation"
    );
    describe_counter!(STORE_ERRORS_TOTAL, "Failed store calls by operation");
    describe_gauge!(IN_FLIGHT, "First deliveries currently being forwarded");
    describe_counter!(
        SECRET_MATCHES_TOTAL,
        "Verified deliveries by the index of the configured secret that matched"
    );
    describe_counter!(
        SECRET_RELOAD_FAILURES_TOTAL,
        "Reloads of a file: secret or public key that kept the old value, by route and reason"
    );
    describe_counter!(
        UNKNOWN_OUTCOMES_TOTAL,
        "First deliveries whose outcome was recorded as unknown"
    );
    describe_counter!(
        ANSWERS_NOT_STORED_TOTAL,
        "Answers over max_stored_answer_bytes (first) and their body-less replays (replay)"
    );
    describe_gauge!(
        STORE_EVICTION_RISK,
        "1 while a Redis primary may evict keys (maxmemory with a policy other than noeviction)"
    );
    describe_gauge!(
        STORE_EVICTED_KEYS,
        "Keys Redis evicted (INFO stats evicted_keys), summed over the primaries"
    );
    describe_gauge!(
        BUILD_INFO,
        "Always 1; the version and revision (git commit) labels name the build"
    );
    inbox::register_descriptions();
    replay_cache::register_descriptions();
    crate::telemetry::register_descriptions();
    process::register_descriptions();
    gauge!(
        BUILD_INFO,
        "version" => env!("CARGO_PKG_VERSION"),
        "revision" => REVISION
    )
    .set(1.0);
}

/// One route's metric handles, resolved once at start-up so the request
/// path neither allocates label strings nor looks series up. Creating it
/// also creates every counter series at zero, so dashboards and alerts see
/// a 0 rather than an absent series before the first event (an absent
/// series makes `rate()` and ratios silently empty).
#[derive(Debug)]
pub(crate) struct RouteMetrics {
    requests: Vec<Counter>,
    durations: Vec<Histogram>,
    rejections: Vec<Counter>,
    upstream: Histogram,
    upstream_errors: Vec<Counter>,
    in_flight: Gauge,
    unknown: Counter,
    not_stored: [Counter; 2],
    secrets: Vec<Counter>,
    /// The route's hot-key table, when `[hot_keys]` is enabled.
    hot_keys: Option<Arc<RouteHotKeys>>,
}

impl RouteMetrics {
    /// Handles for `route`, whose scheme tries `secret_count` secrets.
    pub(crate) fn new(route: &str, secret_count: usize) -> Self {
        let route = route.to_owned();
        let zeroed = |counter: Counter| {
            counter.increment(0);
            counter
        };
        let this = Self {
            requests: Outcome::ALL
                .iter()
                .map(|o| zeroed(counter!(REQUESTS_TOTAL, "route" => route.clone(), "outcome" => o.as_str())))
                .collect(),
            durations: Outcome::ALL
                .iter()
                .map(|o| histogram!(REQUEST_DURATION, "route" => route.clone(), "outcome" => o.as_str()))
                .collect(),
            rejections: Reason::ALL
                .iter()
                .map(|r| zeroed(counter!(REJECTIONS_TOTAL, "route" => route.clone(), "reason" => r.as_str())))
                .collect(),
            upstream: histogram!(UPSTREAM_DURATION, "route" => route.clone()),
            upstream_errors: UpstreamErrorKind::ALL
                .iter()
                .map(|k| zeroed(counter!(UPSTREAM_ERRORS_TOTAL, "route" => route.clone(), "kind" => k.as_str())))
                .collect(),
            in_flight: gauge!(IN_FLIGHT, "route" => route.clone()),
            unknown: zeroed(counter!(UNKNOWN_OUTCOMES_TOTAL, "route" => route.clone())),
            not_stored: ["first", "replay"].map(|delivery| {
                zeroed(counter!(ANSWERS_NOT_STORED_TOTAL, "route" => route.clone(), "delivery" => delivery))
            }),
            secrets: (0..secret_count)
                .map(|i| zeroed(counter!(SECRET_MATCHES_TOTAL, "route" => route.clone(), "secret_index" => secret_label(i))))
                .collect(),
            hot_keys: None,
        };
        this.in_flight.increment(0.0);
        this
    }

    /// The same handles, also feeding the route's hot-key table.
    pub(crate) fn with_hot_keys(mut self, table: Option<Arc<RouteHotKeys>>) -> Self {
        self.hot_keys = table;
        self
    }

    /// Counts one delivery of the key whose digest is `digest` in the
    /// route's hot keys. `rejection` is the counted reason, if any;
    /// `reason` the word the log line shows. A duplicate is a delivery of
    /// a key already claimed: a replay (or, in shadow mode, one enforce
    /// would have stopped), or a 409 `in_flight`/`outcome_unknown` or 422
    /// `fingerprint_mismatch`.
    pub(crate) fn hot_key(
        &self,
        digest: &[u8; 32],
        outcome: Outcome,
        rejection: Option<Reason>,
        reason: Option<&'static str>,
    ) {
        let Some(table) = &self.hot_keys else { return };
        let duplicate = matches!(outcome, Outcome::Replayed | Outcome::ShadowDuplicate)
            || matches!(
                rejection,
                Some(Reason::InFlight | Reason::OutcomeUnknown | Reason::FingerprintMismatch)
            );
        table.observe(
            digest,
            Sighting {
                outcome: outcome.as_str(),
                reason,
                duplicate,
            },
        );
    }

    /// Counts one finished request and its latency.
    pub(crate) fn request(&self, outcome: Outcome, elapsed: Duration) {
        self.requests[outcome as usize].increment(1);
        self.durations[outcome as usize].record(elapsed.as_secs_f64());
    }

    /// Counts a rejection by its reason.
    pub(crate) fn rejection(&self, reason: Reason) {
        self.rejections[reason as usize].increment(1);
    }

    /// Records an upstream call's duration.
    pub(crate) fn upstream(&self, elapsed: Duration) {
        self.upstream.record(elapsed.as_secs_f64());
    }

    /// Counts an upstream failure.
    pub(crate) fn upstream_error(&self, kind: UpstreamErrorKind) {
        self.upstream_errors[kind as usize].increment(1);
    }

    /// Counts a verification by the secret at `index` (its position in the
    /// route's `secrets`; never the secret itself).
    pub(crate) fn secret_match(&self, index: usize) {
        if let Some(counter) = self.secrets.get(index) {
            counter.increment(1);
        }
    }

    /// Moves the in-flight gauge.
    pub(crate) fn in_flight(&self, delta: f64) {
        self.in_flight.increment(delta);
    }

    /// Counts a first delivery whose outcome was recorded as unknown.
    pub(crate) fn unknown_outcome(&self) {
        self.unknown.increment(1);
    }

    /// Counts an answer too large to store: its first delivery, or a
    /// replay without it.
    pub(crate) fn answer_not_stored(&self, replay: bool) {
        self.not_stored[usize::from(replay)].increment(1);
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
                .map(|op| histogram!(STORE_DURATION, "op" => op.as_str()))
                .collect(),
            errors: StoreOp::ALL
                .iter()
                .map(|op| {
                    let counter = counter!(STORE_ERRORS_TOTAL, "op" => op.as_str());
                    counter.increment(0);
                    counter
                })
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
            risk: gauge!(STORE_EVICTION_RISK),
            evicted: gauge!(STORE_EVICTED_KEYS),
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

/// The bounded `secret_index` label value.
fn secret_label(index: usize) -> &'static str {
    const INDEX: [&str; 8] = ["0", "1", "2", "3", "4", "5", "6", "7"];
    INDEX.get(index).copied().unwrap_or("8+")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The handle vectors are indexed by discriminant: the ALL arrays must
    /// list the variants in declaration order.
    #[test]
    fn label_arrays_follow_declaration_order() {
        for (i, outcome) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*outcome as usize, i);
        }
        for (i, op) in StoreOp::ALL.iter().enumerate() {
            assert_eq!(*op as usize, i);
        }
        for (i, kind) in UpstreamErrorKind::ALL.iter().enumerate() {
            assert_eq!(*kind as usize, i);
        }
        for (i, reason) in Reason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i);
        }
    }

    /// Replays and the 409/422 answers for a claimed key are duplicates;
    /// a first delivery or another rejection is not.
    #[tokio::test(start_paused = true)]
    async fn hot_keys_count_duplicates_by_outcome_and_reason() {
        let table = Arc::new(RouteHotKeys::new("pay", 8, Duration::from_secs(60)));
        let meters = RouteMetrics::new("pay", 0).with_hot_keys(Some(Arc::clone(&table)));
        let cases: [(Outcome, Option<Reason>, bool); 8] = [
            (Outcome::Forwarded, None, false),
            (Outcome::Replayed, None, true),
            (Outcome::ShadowDuplicate, Some(Reason::InFlight), true),
            (Outcome::Rejected, Some(Reason::InFlight), true),
            (Outcome::Rejected, Some(Reason::OutcomeUnknown), true),
            (Outcome::Rejected, Some(Reason::FingerprintMismatch), true),
            (Outcome::Rejected, Some(Reason::StoreUnavailable), false),
            (Outcome::Forwarded, Some(Reason::UpstreamTimeout), false),
        ];
        for (n, (outcome, rejection, _)) in (0u8..).zip(cases) {
            meters.hot_key(&[n; 32], outcome, rejection, rejection.map(Reason::as_str));
        }
        let top = table.top(8, tokio::time::Instant::now());
        for (n, (outcome, rejection, duplicate)) in (0u8..).zip(cases) {
            let key = top.iter().find(|k| k.digest == [n; 32]).expect("tracked");
            assert_eq!(
                key.duplicates,
                u64::from(duplicate),
                "{outcome:?} {rejection:?}"
            );
            assert_eq!(key.last_outcome, outcome.as_str());
            assert_eq!(key.last_reason, rejection.map(Reason::as_str));
        }
        // Without a table, nothing is observed and nothing fails.
        RouteMetrics::new("pay", 0).hot_key(&[9; 32], Outcome::Replayed, None, None);
    }

    #[test]
    fn handles_record_into_a_local_recorder() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let meters = RouteMetrics::new("pay", 2);
            meters.request(Outcome::Replayed, Duration::from_millis(1));
            meters.rejection(Reason::InFlight);
            meters.secret_match(1);
        });
        let text = handle.render();
        for line in [
            "idemgate_requests_total{route=\"pay\",outcome=\"replayed\"} 1",
            "idemgate_requests_total{route=\"pay\",outcome=\"forwarded\"} 0",
            "idemgate_rejections_total{route=\"pay\",reason=\"in_flight\"} 1",
            "idemgate_secret_matches_total{route=\"pay\",secret_index=\"1\"} 1",
            "idemgate_secret_matches_total{route=\"pay\",secret_index=\"0\"} 0",
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }
}
