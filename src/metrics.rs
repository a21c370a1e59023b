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

use metrics::{Counter, Unit, gauge};

/// `idemgate_unknown_outcomes_total{route}`: deliveries whose outcome was
/// recorded as unknown (upstream timed out or the connection broke after
/// the request was sent), first deliveries and inbox redeliveries alike
/// (a redelivery whose worker vanished mid-call too). Each one blocks its
/// key for `unknown_hold` and may need an operator.
pub(crate) const UNKNOWN_OUTCOMES_TOTAL: Description = Description::counter(
    "idemgate_unknown_outcomes_total",
    "First deliveries and inbox redeliveries whose outcome was recorded as unknown",
);
/// `idemgate_build_info{version,revision}`: `revision` is the git commit
/// the binary was built from (`build.rs`).
pub(crate) const BUILD_INFO: Description = Description::gauge(
    "idemgate_build_info",
    "Always 1; the version and revision (git commit) labels name the build",
);
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

/// What kind of series a metric is, which decides how it is described.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Only grows (`_total`).
    Counter,
    /// Set to the current value.
    Gauge,
    /// Observations in [`DURATION_BUCKETS`].
    Histogram,
}

/// One metric: each module that owns metrics declares each as a constant
/// of this type, so name, kind, unit and help text are written once, side
/// by side; handles take `.name`, and the owner's `DESCRIPTIONS` lists the
/// constants for [`describe`], which registers them all the same way.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Description {
    /// The metric name (contract §7).
    pub(crate) name: &'static str,
    /// Counter, gauge or histogram.
    pub(crate) kind: Kind,
    /// The unit, when the name carries one (`_seconds`, `_bytes`).
    pub(crate) unit: Option<Unit>,
    /// The `# HELP` text.
    pub(crate) help: &'static str,
}

impl Description {
    /// A unitless counter.
    pub(crate) const fn counter(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            kind: Kind::Counter,
            unit: None,
            help,
        }
    }

    /// A unitless gauge.
    pub(crate) const fn gauge(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            kind: Kind::Gauge,
            unit: None,
            help,
        }
    }

    /// A histogram of durations in seconds.
    pub(crate) const fn seconds(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            kind: Kind::Histogram,
            unit: Some(Unit::Seconds),
            help,
        }
    }

    /// The same metric measured in `unit`.
    pub(crate) const fn in_unit(self, unit: Unit) -> Self {
        Self {
            unit: Some(unit),
            ..self
        }
    }
}

/// Registers the help texts (and units) of `table` with the installed
/// recorder; each owner calls it with its own table at start-up
/// (`app::install_metrics`).
pub(crate) fn describe(table: &[Description]) {
    for d in table {
        metrics::with_recorder(|recorder| {
            let (name, help) = (d.name.into(), d.help.into());
            match d.kind {
                Kind::Counter => recorder.describe_counter(name, d.unit, help),
                Kind::Gauge => recorder.describe_gauge(name, d.unit, help),
                Kind::Histogram => recorder.describe_histogram(name, d.unit, help),
            }
        });
    }
}

/// `counter`, its series created at zero: dashboards and alerts then see
/// a 0 rather than an absent series before the first event (an absent
/// series makes `rate()` and ratios silently empty).
pub(crate) fn at_zero(counter: Counter) -> Counter {
    counter.increment(0);
    counter
}

/// The metrics this module names itself.
const DESCRIPTIONS: &[Description] = &[UNKNOWN_OUTCOMES_TOTAL, BUILD_INFO];

/// Registers the help texts of the shared metrics and the process
/// metrics with the installed recorder, and sets the build info; each
/// module that owns metrics describes its own (`app::install_metrics`).
pub(crate) fn register_descriptions() {
    describe(DESCRIPTIONS);
    process::register_descriptions();
    gauge!(
        BUILD_INFO.name,
        "version" => env!("CARGO_PKG_VERSION"),
        "revision" => REVISION
    )
    .set(1.0);
}

/// Test support for the owners of label enums.
#[cfg(test)]
pub(crate) mod testing {
    /// Asserts that `all` lists its variants in declaration order: handle
    /// arrays are indexed by discriminant (`index`), so a variant out of
    /// place would record into its neighbour's series.
    pub(crate) fn assert_declaration_order<T: Copy + std::fmt::Debug>(
        all: &[T],
        index: impl Fn(T) -> usize,
    ) {
        for (i, item) in all.iter().enumerate() {
            assert_eq!(index(*item), i, "{item:?} is out of place");
        }
    }
}
