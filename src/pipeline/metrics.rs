//! The pipeline's metrics: what a request's way through idemgate is
//! counted as, per route (`route` label; requests no route selected under
//! [`UNMATCHED_ROUTE`]). Names and labels are part of the contract
//! (`docs/contract.md` §7): they live here as constants and closed enums,
//! so no label value comes from request input and cardinality stays
//! bounded. The handles are resolved once per route at start-up
//! ([`RouteMetrics::new`]); [`DESCRIPTIONS`] holds their help texts.

use std::time::Duration;

use http::StatusCode;
use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};

use crate::metrics::{Description, at_zero};

use crate::config::CacheStatus;
use crate::error::Reason;
use crate::upstream::{ForwardError, UpstreamAnswer};

/// `idemgate_requests_total{route, outcome, status_class}`: `status_class`
/// is the class of the status the sender was answered with, so the share
/// of 5xx senders see is one ratio of this counter.
pub(crate) const REQUESTS_TOTAL: Description = Description::counter(
    "idemgate_requests_total",
    "Requests handled, by route, outcome and the class of the status the sender was answered with",
);
/// `idemgate_rejections_total{route, reason}`.
pub(crate) const REJECTIONS_TOTAL: Description = Description::counter(
    "idemgate_rejections_total",
    "Requests idemgate answered itself, by reason",
);
/// `idemgate_request_duration_seconds{route, outcome}`.
pub(crate) const REQUEST_DURATION: Description = Description::seconds(
    "idemgate_request_duration_seconds",
    "Time from request head to answer",
);
/// `idemgate_upstream_duration_seconds{route}`.
pub(crate) const UPSTREAM_DURATION: Description = Description::seconds(
    "idemgate_upstream_duration_seconds",
    "Time the upstream took to answer",
);
/// `idemgate_upstream_errors_total{route, kind}`.
pub(crate) const UPSTREAM_ERRORS_TOTAL: Description = Description::counter(
    "idemgate_upstream_errors_total",
    "Upstream failures by kind",
);
/// `idemgate_in_flight{route}`.
pub(crate) const IN_FLIGHT: Description = Description::gauge(
    "idemgate_in_flight",
    "First deliveries currently being forwarded",
);
/// `idemgate_secret_matches_total{route, secret_index}`: which configured
/// secret verified each delivery, so operators see when an old secret is no
/// longer used and can be retired.
pub(crate) const SECRET_MATCHES_TOTAL: Description = Description::counter(
    "idemgate_secret_matches_total",
    "Verified deliveries by the index of the configured secret that matched",
);
/// `idemgate_answers_not_stored_total{route, delivery}`: answers larger
/// than `max_stored_answer_bytes`, which reach the sender but are not kept
/// (`delivery="first"`), and the replays that then carry a problem body
/// instead of them (`delivery="replay"`).
pub(crate) const ANSWERS_NOT_STORED_TOTAL: Description = Description::counter(
    "idemgate_answers_not_stored_total",
    "Answers over max_stored_answer_bytes (first) and their body-less replays (replay)",
);
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

    /// The status classes a request with this outcome can be answered
    /// with, whose series are created at zero: idemgate's own answers for
    /// a rejection (the classes of every [`Reason`]'s status), the
    /// handler's answer (or, when it failed, idemgate's 502/504) for every
    /// other outcome.
    pub(crate) fn status_classes(self) -> Vec<StatusClass> {
        match self {
            Self::Rejected => StatusClass::ALL
                .into_iter()
                .filter(|class| {
                    Reason::ALL
                        .iter()
                        .any(|r| StatusClass::of(r.status()) == *class)
                })
                .collect(),
            _ => StatusClass::FINAL.to_vec(),
        }
    }

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

/// The class of the status a sender was answered with (`status_class`
/// label): the first digit of the code, which is all a 5xx ratio needs and
/// keeps the label set closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusClass {
    /// 2xx.
    Success,
    /// 3xx.
    Redirection,
    /// 4xx.
    ClientError,
    /// 5xx.
    ServerError,
    /// Anything else a handler can send that the `http` crate accepts: a
    /// 101 without an upgrade, or a code from 600 to 999. Not created at
    /// start-up (no well-behaved handler produces it): its series appears
    /// with the first such answer.
    Other,
}

impl StatusClass {
    /// Every class, in declaration order (handles are indexed by it).
    pub(crate) const ALL: [Self; 5] = [
        Self::Success,
        Self::Redirection,
        Self::ClientError,
        Self::ServerError,
        Self::Other,
    ];

    /// The classes of a final answer RFC 9110 defines, which a handler
    /// may send: created at zero for every outcome the handler answers.
    const FINAL: [Self; 4] = [
        Self::Success,
        Self::Redirection,
        Self::ClientError,
        Self::ServerError,
    ];

    /// The class of `status`.
    pub(crate) fn of(status: StatusCode) -> Self {
        match status.as_u16() / 100 {
            2 => Self::Success,
            3 => Self::Redirection,
            4 => Self::ClientError,
            5 => Self::ServerError,
            _ => Self::Other,
        }
    }

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Success => "2xx",
            Self::Redirection => "3xx",
            Self::ClientError => "4xx",
            Self::ServerError => "5xx",
            Self::Other => "other",
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

    /// The kind of a failed call, which does not tell a refused connection
    /// from a broken one.
    pub(crate) fn of(error: ForwardError) -> Self {
        match error {
            ForwardError::Timeout => Self::Timeout,
            ForwardError::Refused | ForwardError::Broken => Self::Connect,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::Status => "status",
        }
    }
}

/// The pipeline's metrics, described at start-up (`app::install_metrics`).
pub(crate) const DESCRIPTIONS: &[Description] = &[
    REQUESTS_TOTAL,
    REJECTIONS_TOTAL,
    REQUEST_DURATION,
    UPSTREAM_DURATION,
    UPSTREAM_ERRORS_TOTAL,
    IN_FLIGHT,
    SECRET_MATCHES_TOTAL,
    ANSWERS_NOT_STORED_TOTAL,
];

/// One route's metric handles, resolved once at start-up so the request
/// path neither allocates label strings nor looks series up. Creating it
/// also creates every counter series at zero, so dashboards and alerts see
/// a 0 rather than an absent series before the first event (an absent
/// series makes `rate()` and ratios silently empty).
#[derive(Debug)]
pub(crate) struct RouteMetrics {
    /// The `route` label: the route's name, or [`UNMATCHED_ROUTE`].
    name: String,
    /// By outcome, then by status class: `None` for a pair the outcome
    /// can not produce ([`Outcome::status_classes`]), whose series is
    /// only created if it happens after all.
    requests: Vec<[Option<Counter>; StatusClass::ALL.len()]>,
    durations: Vec<Histogram>,
    rejections: Vec<Counter>,
    upstream: Histogram,
    upstream_errors: Vec<Counter>,
    in_flight: Gauge,
    unknown: Counter,
    not_stored: [Counter; 2],
    secrets: Vec<Counter>,
}

impl RouteMetrics {
    /// Handles for `route`, whose scheme tries `secret_count` secrets.
    pub(crate) fn new(route: &str, secret_count: usize) -> Self {
        let route = route.to_owned();
        let this = Self {
            requests: Outcome::ALL
                .iter()
                .map(|&outcome| {
                    let classes = outcome.status_classes();
                    StatusClass::ALL.map(|class| {
                        classes
                            .contains(&class)
                            .then(|| at_zero(requests_counter(&route, outcome, class)))
                    })
                })
                .collect(),
            durations: Outcome::ALL
                .iter()
                .map(|o| histogram!(REQUEST_DURATION.name, "route" => route.clone(), "outcome" => o.as_str()))
                .collect(),
            rejections: Reason::ALL
                .iter()
                .map(|r| at_zero(counter!(REJECTIONS_TOTAL.name, "route" => route.clone(), "reason" => r.as_str())))
                .collect(),
            upstream: histogram!(UPSTREAM_DURATION.name, "route" => route.clone()),
            upstream_errors: UpstreamErrorKind::ALL
                .iter()
                .map(|k| at_zero(counter!(UPSTREAM_ERRORS_TOTAL.name, "route" => route.clone(), "kind" => k.as_str())))
                .collect(),
            in_flight: gauge!(IN_FLIGHT.name, "route" => route.clone()),
            unknown: at_zero(counter!(crate::metrics::UNKNOWN_OUTCOMES_TOTAL.name, "route" => route.clone())),
            not_stored: ["first", "replay"].map(|delivery| {
                at_zero(counter!(ANSWERS_NOT_STORED_TOTAL.name, "route" => route.clone(), "delivery" => delivery))
            }),
            secrets: (0..secret_count)
                .map(|i| at_zero(counter!(SECRET_MATCHES_TOTAL.name, "route" => route.clone(), "secret_index" => secret_label(i))))
                .collect(),
            name: route,
        };
        this.in_flight.increment(0.0);
        this
    }

    /// The `route` label these handles carry.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Counts one finished request, by the status its sender was answered
    /// with, and its latency.
    pub(crate) fn request(&self, outcome: Outcome, status: StatusCode, elapsed: Duration) {
        let class = StatusClass::of(status);
        match &self.requests[outcome as usize][class as usize] {
            Some(counter) => counter.increment(1),
            None => requests_counter(&self.name, outcome, class).increment(1),
        }
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

    /// Records a forwarded call's latency and, unless the route stores its
    /// answer (`cache_status`), its error kind.
    pub(crate) fn upstream_call(
        &self,
        cache_status: &CacheStatus,
        result: &Result<UpstreamAnswer, ForwardError>,
        elapsed: Duration,
    ) {
        self.upstream(elapsed);
        let kind = match result {
            Ok(answer) if cache_status.contains(answer.status.as_u16()) => return,
            Ok(_) => UpstreamErrorKind::Status,
            Err(error) => UpstreamErrorKind::of(*error),
        };
        self.upstream_error(kind);
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

/// The `idemgate_requests_total` series of one (route, outcome, class).
fn requests_counter(route: &str, outcome: Outcome, class: StatusClass) -> Counter {
    counter!(
        REQUESTS_TOTAL.name,
        "route" => route.to_owned(),
        "outcome" => outcome.as_str(),
        "status_class" => class.as_str()
    )
}

/// The bounded `secret_index` label value.
fn secret_label(index: usize) -> &'static str {
    const INDEX: [&str; 8] = ["0", "1", "2", "3", "4", "5", "6", "7"];
    INDEX.get(index).copied().unwrap_or("8+")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::testing::assert_declaration_order;

    /// The handle vectors are indexed by discriminant: the ALL arrays must
    /// list the variants in declaration order.
    #[test]
    fn label_arrays_follow_declaration_order() {
        assert_declaration_order(&Outcome::ALL, |outcome| outcome as usize);
        assert_declaration_order(&UpstreamErrorKind::ALL, |kind| kind as usize);
        assert_declaration_order(&StatusClass::ALL, |class| class as usize);
        assert_declaration_order(&Reason::ALL, |reason| reason as usize);
    }

    #[test]
    fn handles_record_into_a_local_recorder() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let meters = RouteMetrics::new("pay", 2);
            meters.request(Outcome::Replayed, StatusCode::OK, Duration::from_millis(1));
            meters.rejection(Reason::InFlight);
            meters.secret_match(1);
        });
        let text = handle.render();
        for line in [
            "idemgate_requests_total{route=\"pay\",outcome=\"replayed\",status_class=\"2xx\"} 1",
            "idemgate_requests_total{route=\"pay\",outcome=\"forwarded\",status_class=\"5xx\"} 0",
            "idemgate_rejections_total{route=\"pay\",reason=\"in_flight\"} 1",
            "idemgate_secret_matches_total{route=\"pay\",secret_index=\"1\"} 1",
            "idemgate_secret_matches_total{route=\"pay\",secret_index=\"0\"} 0",
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }

    /// Every status, from the lowest code `http` accepts to the highest.
    fn every_status() -> impl Iterator<Item = StatusCode> {
        (100..=999).map(|code| StatusCode::from_u16(code).expect("a valid code"))
    }

    #[test]
    fn a_status_class_is_its_first_digit() {
        for status in every_status() {
            let expected = match status.as_u16() {
                200..=299 => "2xx",
                300..=399 => "3xx",
                400..=499 => "4xx",
                500..=599 => "5xx",
                _ => "other",
            };
            assert_eq!(StatusClass::of(status).as_str(), expected, "{status}");
        }
    }

    /// A rejection is answered 4xx or 5xx (idemgate's own table); every
    /// other outcome carries the handler's answer or idemgate's 502/504.
    #[test]
    fn outcomes_produce_their_status_classes() {
        let words = |outcome: Outcome| -> Vec<&str> {
            outcome
                .status_classes()
                .into_iter()
                .map(StatusClass::as_str)
                .collect()
        };
        assert_eq!(words(Outcome::Rejected), ["4xx", "5xx"]);
        for outcome in Outcome::ALL.into_iter().filter(|o| *o != Outcome::Rejected) {
            assert_eq!(words(outcome), ["2xx", "3xx", "4xx", "5xx"], "{outcome:?}");
        }
        for reason in Reason::ALL {
            let class = StatusClass::of(reason.status());
            assert!(
                Outcome::Rejected.status_classes().contains(&class),
                "{reason:?}"
            );
        }
    }

    /// 22 series per route at start-up (5 outcomes x 4 classes + 2 for
    /// rejections); an answer outside 2xx-5xx adds its own series, counted.
    #[test]
    fn request_series_are_bounded_and_created_at_zero() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let series = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with("idemgate_requests_total{"))
                .map(str::to_owned)
                .collect()
        };
        metrics::with_local_recorder(&recorder, || {
            let meters = RouteMetrics::new("pay", 1);
            let idle = series(&handle.render());
            assert_eq!(idle.len(), 22, "{idle:#?}");
            assert!(idle.iter().all(|line| line.ends_with(" 0")), "{idle:#?}");
            assert!(!idle.iter().any(|line| line.contains("other")));
            for status in every_status() {
                meters.request(Outcome::Forwarded, status, Duration::ZERO);
            }
            let text = handle.render();
            assert_eq!(series(&text).len(), 23, "{text}");
            for (class, count) in [("2xx", 100), ("5xx", 100), ("other", 500)] {
                let line = format!(
                    "idemgate_requests_total{{route=\"pay\",outcome=\"forwarded\",status_class=\"{class}\"}} {count}"
                );
                assert!(text.contains(&line), "missing {line}:\n{text}");
            }
        });
    }
}
