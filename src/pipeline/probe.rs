//! Probe resolution (`[route.probe]`): a first delivery whose outcome
//! turned unknown (the handler timed out, the connection broke after the
//! request was sent, or the instance that sent it died mid-call) asks the
//! handler whether it applied it, instead of blocking the key until
//! `unknown_hold` ends.
//!
//! The probe's target is built from the verified delivery when it is
//! identified ([`plan`], [`render`]: `{selector}` values percent-encoded
//! into the path), so it asks about exactly the bytes the signature
//! covered, and the claim keeps it in the store in its own atomic step
//! (`crate::store::probe`). A value that
//! could send the probe to another resource than the template names (empty,
//! a dot segment, a path separator) means no probe for that delivery
//! ([`Skip`], counted in `idemgate_probe_skipped_total`).
//!
//! Whichever instance is alive sends it (`first_delivery/probe_runner.rs`): no earlier than
//! `start_after` after the call ended, then every `retry_every` (with some
//! jitter) while the handler can not tell, at most `max_attempts` times,
//! and never more than `concurrency` per route and `[limits]
//! max_probes_in_flight` per instance at once. Its answer ([`classify`]):
//!
//! * *applied*: the record is completed with the route's acknowledgement
//!   (or the probe's own answer), marked `Idempotent-Resolved: probe`;
//!   duplicates replay it, and on an entity route the entity takes the
//!   new state in the same step;
//! * *not applied*: the claim is released; the sender's next copy is a
//!   first delivery and executes once;
//! * *can't tell*, an error or a timeout: the record stays unknown, as
//!   without a probe.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request};
use metrics::{counter, gauge};

use crate::config::{Probe, Route, Segment};
use crate::extract::Inbound;
use crate::metrics::{Description, at_zero};
use crate::record::StoredResponse;
use crate::store::probe::ProbePlan;

/// `idemgate_probe_resolutions_total{route, result}`.
pub(crate) const RESOLUTIONS_TOTAL: Description = Description::counter(
    "idemgate_probe_resolutions_total",
    "Unknown outcomes a probe of the handler settled, by result (applied, not_applied, undecided, error)",
);

/// `idemgate_probe_skipped_total{route, reason}`.
pub(crate) const SKIPPED_TOTAL: Description = Description::counter(
    "idemgate_probe_skipped_total",
    "Deliveries of a probe route sent without a probe, by reason (absent, empty, dot_segment, separator)",
);

/// `idemgate_probes_waiting`.
pub(crate) const WAITING: Description = Description::gauge(
    "idemgate_probes_waiting",
    "Due probes this instance could not start at its last look, because max_probes_in_flight or a route's concurrency was reached",
);

/// `idemgate_probes_in_flight`.
pub(crate) const IN_FLIGHT: Description = Description::gauge(
    "idemgate_probes_in_flight",
    "Probes this instance is sending now",
);

/// The probe metrics, described at start-up (`app::install_metrics`).
pub(crate) const DESCRIPTIONS: &[Description] =
    &[RESOLUTIONS_TOTAL, SKIPPED_TOTAL, WAITING, IN_FLIGHT];

/// The header a probe-resolved answer carries, so a replay says where it
/// came from.
pub(crate) const RESOLVED_HEADER: &str = "idempotent-resolved";

/// Every result a probe can end in: the `result` label's closed set.
const RESULTS: [&str; 4] = ["applied", "not_applied", "undecided", "error"];

/// Creates route `route`'s probe series at zero.
pub(crate) fn register(route: &str) {
    for result in RESULTS {
        let _ = at_zero(
            counter!(RESOLUTIONS_TOTAL.name, "route" => route.to_owned(), "result" => result),
        );
    }
    for skip in Skip::ALL {
        let _ = at_zero(
            counter!(SKIPPED_TOTAL.name, "route" => route.to_owned(), "reason" => skip.as_str()),
        );
    }
    let _ = gauge!(WAITING.name);
    let _ = gauge!(IN_FLIGHT.name);
}

/// Why a delivery of a probe route gets no probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Skip {
    /// A `{selector}` value is absent from the delivery.
    #[error("a value of the probe path is absent")]
    Absent,
    /// A value is empty: the probe would name the collection, not the item.
    #[error("a value of the probe path is empty")]
    Empty,
    /// A path value is `.` or `..`: a front that normalises paths would
    /// send the probe to another resource.
    #[error("a value of the probe path is a dot segment")]
    DotSegment,
    /// A path value holds `/` or `\\`: a front that decodes it would see
    /// other segments than the template names.
    #[error("a value of the probe path holds a path separator")]
    Separator,
}

impl Skip {
    /// Every reason, for zeroing the counters.
    const ALL: [Self; 4] = [Self::Absent, Self::Empty, Self::DotSegment, Self::Separator];

    /// The `reason` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Absent => "absent",
            Self::Empty => "empty",
            Self::DotSegment => "dot_segment",
            Self::Separator => "separator",
        }
    }

    /// Counts and logs a delivery of `route` (key `key`) forwarded
    /// without a probe for this reason.
    pub(crate) fn count(self, route: &str, key: &str) {
        counter!(SKIPPED_TOTAL.name, "route" => route.to_owned(), "reason" => self.as_str())
            .increment(1);
        tracing::warn!(
            route,
            key,
            reason = self.as_str(),
            "no probe for this delivery ({self}): an unknown outcome of it waits for unknown_hold or an operator"
        );
    }
}

/// The probe plan of a delivery of `route`, kept with its claim, or why a
/// value could not name the probe's resource ([`Skip`]).
pub(crate) fn plan(route: &Route, probe: &Probe, request: &Inbound) -> Result<ProbePlan, Skip> {
    let target = render(probe, request)?;
    Ok(ProbePlan::new(
        &route.name,
        target,
        probe.start_after,
        route.idempotency.unknown_hold,
    ))
}

/// Builds `probe`'s target (path and query) from the verified `request`:
/// every `{selector}` value must be present and non-empty, and a value in
/// the path must not be a dot segment or hold a separator ([`Skip`]). A
/// value is percent-encoded except for the unreserved characters, so it
/// can not add a path segment or a query.
pub(crate) fn render(probe: &Probe, request: &Inbound) -> Result<String, Skip> {
    let mut target = String::new();
    let mut in_query = false;
    for segment in &probe.path.segments {
        match segment {
            Segment::Literal(text) => {
                in_query |= text.contains('?');
                target.push_str(text);
            }
            Segment::Value(selector) => {
                let value = request.value(selector).ok().flatten().ok_or(Skip::Absent)?;
                if value.is_empty() {
                    return Err(Skip::Empty);
                }
                if !in_query {
                    if &value[..] == b"." || &value[..] == b".." {
                        return Err(Skip::DotSegment);
                    }
                    if value.iter().any(|b| *b == b'/' || *b == b'\\') {
                        return Err(Skip::Separator);
                    }
                }
                for &byte in value.iter() {
                    if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                        target.push(char::from(byte));
                    } else {
                        target.push_str(&format!("%{byte:02X}"));
                    }
                }
            }
            // Refused when the configuration loaded (`config::probe`).
            _ => return Err(Skip::Absent),
        }
    }
    Ok(target)
}

/// What a probe read from the handler's answer: whether it applied the
/// delivery (the word "verdict" is the entity machine's, `store::entity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reading {
    /// It applied the delivery; its answer.
    Applied(StoredResponse),
    /// It never applied it.
    NotApplied,
    /// It can not tell (another status, or a field value not listed).
    Undecided,
}

/// Reads a probe's answer as `probe` says.
pub(crate) fn classify(probe: &Probe, answer: StoredResponse) -> Reading {
    let applied_status = probe.applied_status.contains(&answer.status);
    let not_applied_status = probe.not_applied_status.contains(&answer.status);
    let Some(field) = &probe.field else {
        return match (applied_status, not_applied_status) {
            (true, _) => Reading::Applied(answer),
            (false, true) => Reading::NotApplied,
            _ => Reading::Undecided,
        };
    };
    if !(applied_status || not_applied_status) {
        return Reading::Undecided;
    }
    let (mut parts, ()) = Request::new(()).into_parts();
    parts
        .headers
        .extend(answer.headers.iter().filter_map(|(name, value)| {
            Some((
                HeaderName::from_bytes(name).ok()?,
                HeaderValue::from_bytes(value).ok()?,
            ))
        }));
    let body = match &answer.body {
        crate::record::StoredBody::Kept(body) => body.clone(),
        crate::record::StoredBody::TooLarge => Bytes::new(),
    };
    let read = Inbound::new(parts, body);
    let value = read.value(field).ok().flatten();
    let is = |list: &[String]| {
        value
            .as_deref()
            .is_some_and(|v| list.iter().any(|s| s.as_bytes() == v))
    };
    if applied_status && is(&probe.applied) {
        Reading::Applied(answer)
    } else if not_applied_status && is(&probe.not_applied) {
        Reading::NotApplied
    } else {
        Reading::Undecided
    }
}

#[cfg(test)]
mod tests;
