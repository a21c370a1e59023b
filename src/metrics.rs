//! What every metric shares: the histogram buckets, the build info, and
//! the names more than one module records (`idemgate_unknown_outcomes_total`
//! is counted by first deliveries and inbox redeliveries alike). Each
//! module that measures something keeps its own names and handles beside
//! it (`pipeline/metrics.rs`, `inbox/metrics.rs`, `store/metrics.rs`,
//! `replay_cache/metrics.rs`, `hot_keys/export.rs`, …) and describes them
//! at start-up (`app::install_metrics`); this module imports no domain
//! module.
//!
//! Names and labels are part of the product contract (`docs/contract.md`
//! §7), so they are constants and closed enums: no label value ever comes
//! from request input, which keeps cardinality bounded. The recorder
//! itself (Prometheus exporter and its upkeep) is installed by `app.rs`;
//! without a recorder every handle is a cheap no-op, which is what unit
//! tests get.

pub(crate) mod process;

use metrics::gauge;

/// `idemgate_unknown_outcomes_total{route}`: deliveries whose outcome was
/// recorded as unknown (upstream timed out or the connection broke after
/// the request was sent), first deliveries and inbox redeliveries alike
/// (a redelivery whose worker vanished mid-call too). Each one blocks its
/// key for `unknown_hold` and may need an operator.
pub(crate) const UNKNOWN_OUTCOMES_TOTAL: &str = "idemgate_unknown_outcomes_total";
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

/// Registers the help texts of the shared metrics and the process
/// metrics with the installed recorder, and sets the build info; each
/// module that owns metrics describes its own (`app::install_metrics`).
pub(crate) fn register_descriptions() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        UNKNOWN_OUTCOMES_TOTAL,
        "First deliveries and inbox redeliveries whose outcome was recorded as unknown"
    );
    describe_gauge!(
        BUILD_INFO,
        "Always 1; the version and revision (git commit) labels name the build"
    );
    process::register_descriptions();
    gauge!(
        BUILD_INFO,
        "version" => env!("CARGO_PKG_VERSION"),
        "revision" => REVISION
    )
    .set(1.0);
}
