//! Probe resolution (`[route.probe]`): a first delivery whose outcome this
//! instance recorded as unknown (the handler timed out, or the connection
//! broke after the request was sent) asks the handler whether it applied
//! it, instead of blocking the key until `unknown_hold` ends.
//!
//! The probe request is built from the verified delivery when it is
//! forwarded ([`render`]: `{selector}` values percent-encoded into the
//! path), so it asks about exactly the bytes the signature covered. It is
//! sent no earlier than `start_after` after the call ended, then every
//! `retry_every` while the handler can not tell, at most `max_attempts`
//! times. Its answer ([`classify`]):
//!
//! * *applied*: the record is completed with the route's acknowledgement
//!   (or the probe's own answer), marked `Idempotent-Resolved: probe`;
//!   duplicates replay it, and on an entity route the entity takes the
//!   new state in the same step;
//! * *not applied*: the claim is released; the sender's next copy is a
//!   first delivery and executes once;
//! * *can't tell*, an error or a timeout: the record stays unknown, as
//!   without a probe.
//!
//! Only the instance that holds the lease probes, and it acts only through
//! owner-checked writes (`complete`, `release`), so two instances never
//! both act on one unknown record: another instance's copy of the delivery
//! is answered 409 `outcome_unknown` until the record is resolved. A
//! record whose owner crashed is not probed (nobody kept its request);
//! it waits for its hold or an operator as before. Shutdown abandons a
//! waiting probe when its grace period ends: the record stays unknown.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request};
use metrics::counter;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::Pipeline;
use super::runtime::RouteRuntime;
use super::trace;
use crate::config::{Probe, ProbeAnswer, Segment, Upstream};
use crate::extract::Inbound;
use crate::metrics::{Description, at_zero};
use crate::record::{RecordState, StoredResponse};
use crate::store::{Completion, Lease};
use crate::upstream;

/// `idemgate_probe_resolutions_total{route, result}`.
pub(crate) const RESOLUTIONS_TOTAL: Description = Description::counter(
    "idemgate_probe_resolutions_total",
    "Unknown outcomes a probe of the handler settled, by result (applied, not_applied, undecided, error)",
);

/// The probe metrics, described at start-up (`app::install_metrics`).
pub(crate) const DESCRIPTIONS: &[Description] = &[RESOLUTIONS_TOTAL];

/// The header a probe-resolved answer carries, so a replay says where it
/// came from.
pub(crate) const RESOLVED_HEADER: &str = "idempotent-resolved";

/// Largest probe answer read, in bytes.
const MAX_PROBE_ANSWER: usize = 64 * 1024;

/// Every result a probe can end in: the `result` label's closed set.
const RESULTS: [&str; 4] = ["applied", "not_applied", "undecided", "error"];

/// Creates route `route`'s probe series at zero.
pub(crate) fn register(route: &str) {
    for result in RESULTS {
        let _ = at_zero(
            counter!(RESOLUTIONS_TOTAL.name, "route" => route.to_owned(), "result" => result),
        );
    }
}

/// A probe request built from a delivery.
#[derive(Debug, Clone)]
pub(crate) struct ProbeRequest {
    method: Method,
    /// Path and query, values percent-encoded.
    target: String,
    headers: Vec<(String, String)>,
}

/// Builds `probe`'s request from the verified `request`: every `{selector}`
/// value must be present. A value is percent-encoded except for the
/// unreserved characters, so it can not add a path segment or a query.
pub(crate) fn render(probe: &Probe, request: &Inbound) -> Result<ProbeRequest, String> {
    let mut target = String::new();
    for segment in &probe.path.segments {
        match segment {
            Segment::Literal(text) => target.push_str(text),
            Segment::Value(selector) => {
                let value = request
                    .value(selector)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("{selector} is absent"))?;
                for &byte in value.iter() {
                    if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                        target.push(char::from(byte));
                    } else {
                        target.push_str(&format!("%{byte:02X}"));
                    }
                }
            }
            _ => return Err("only literal text and values".into()),
        }
    }
    Ok(ProbeRequest {
        method: probe.method.clone(),
        target,
        headers: probe.headers.clone(),
    })
}

/// What the handler said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It applied the delivery; its answer.
    Applied(StoredResponse),
    /// It never applied it.
    NotApplied,
    /// It can not tell (another status, or a field value not listed).
    Undecided,
}

/// Reads a probe's answer as `probe` says.
pub(crate) fn classify(probe: &Probe, answer: StoredResponse) -> Verdict {
    let applied_status = probe.applied_status.contains(&answer.status);
    let not_applied_status = probe.not_applied_status.contains(&answer.status);
    let Some(field) = &probe.field else {
        return match (applied_status, not_applied_status) {
            (true, _) => Verdict::Applied(answer),
            (false, true) => Verdict::NotApplied,
            _ => Verdict::Undecided,
        };
    };
    if !(applied_status || not_applied_status) {
        return Verdict::Undecided;
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
        Verdict::Applied(answer)
    } else if not_applied_status && is(&probe.not_applied) {
        Verdict::NotApplied
    } else {
        Verdict::Undecided
    }
}

impl Pipeline {
    /// Resolves the unknown outcome `lease` holds by probing the handler
    /// with `request` (module docs); the original call ended at `ended`.
    pub(super) async fn probe_unknown(
        &self,
        route: &RouteRuntime,
        lease: Lease,
        request: ProbeRequest,
        ended: Instant,
    ) {
        let Some(probe) = &route.settings.probe else {
            return;
        };
        let key = lease.key().hash().to_owned();
        let name = route.name();
        let span = trace::probe(self.tracing, name, &key, lease.record().trace.as_ref());
        let result = async {
            let mut at = first_attempt(probe, ended);
            for attempt in 1..=probe.max_attempts {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = self.grace_over.cancelled() => return "abandoned",
                }
                at = Instant::now() + probe.retry_every;
                let upstream = Upstream {
                    url: route.settings.upstream.url.clone(),
                    timeout: probe.timeout,
                };
                match ask(self, &upstream, &request).await {
                    Err(error) => {
                        tracing::warn!(
                            route = name,
                            key,
                            attempt,
                            error,
                            "probe failed; the outcome stays unknown"
                        );
                        if attempt == probe.max_attempts {
                            return "error";
                        }
                    }
                    Ok(answer) => {
                        let status = answer.status;
                        match classify(probe, answer) {
                            Verdict::Applied(answer) => {
                                return self.applied(route, &lease, probe, answer, status).await;
                            }
                            Verdict::NotApplied => {
                                return self.not_applied(route, &lease, status).await;
                            }
                            Verdict::Undecided => {
                                tracing::info!(
                                    route = name,
                                    key,
                                    attempt,
                                    status,
                                    "probe can not tell; the outcome stays unknown"
                                );
                                if attempt == probe.max_attempts {
                                    return "undecided";
                                }
                            }
                        }
                    }
                }
            }
            "undecided"
        }
        .instrument(span)
        .await;
        if result != "abandoned" {
            counter!(RESOLUTIONS_TOTAL.name, "route" => name.to_owned(), "result" => result)
                .increment(1);
        }
        self.claimer.settled(lease.key());
    }

    /// Completes the record with the route's answer for "applied".
    async fn applied(
        &self,
        route: &RouteRuntime,
        lease: &Lease,
        probe: &Probe,
        answer: StoredResponse,
        status: u16,
    ) -> &'static str {
        let ack = route.ack.as_ref().or(route.entity_ack.as_ref());
        let mut stored = match (probe.answer, ack) {
            (ProbeAnswer::Ack, Some(ack)) => ack.clone(),
            _ => answer,
        };
        stored.headers.push((
            Bytes::from_static(RESOLVED_HEADER.as_bytes()),
            Bytes::from_static(b"probe"),
        ));
        let record = lease.record().with_state(RecordState::Completed(stored));
        let retention = route.settings.idempotency.retention;
        let key = lease.key().hash();
        match self.store.complete(lease, &record, retention).await {
            Ok(Completion::TakenOver) => {
                tracing::warn!(
                    route = route.name(),
                    key,
                    status,
                    "probe says applied, but another delivery holds the key now; nothing written"
                );
                "error"
            }
            Ok(_) => {
                tracing::info!(
                    route = route.name(),
                    key,
                    status,
                    "probe says applied: the outcome is completed; duplicates replay it"
                );
                "applied"
            }
            Err(error) => {
                tracing::error!(route = route.name(), key, status, %error, "probe says applied, but the store refused the answer; the outcome stays unknown");
                "error"
            }
        }
    }

    /// Releases the claim for "not applied".
    async fn not_applied(&self, route: &RouteRuntime, lease: &Lease, status: u16) -> &'static str {
        let key = lease.key().hash();
        match self.store.release(lease).await {
            Ok(true) => {
                tracing::info!(
                    route = route.name(),
                    key,
                    status,
                    "probe says not applied: the claim is released; the next copy executes once"
                );
                "not_applied"
            }
            Ok(false) => {
                tracing::warn!(
                    route = route.name(),
                    key,
                    status,
                    "probe says not applied, but the record is no longer this instance's; nothing released"
                );
                "error"
            }
            Err(error) => {
                tracing::error!(route = route.name(), key, status, %error, "probe says not applied, but the release failed; the outcome stays unknown");
                "error"
            }
        }
    }
}

/// Sends one probe; its answer as a stored response (body at most 64 KiB).
async fn ask(
    pipeline: &Pipeline,
    upstream: &Upstream,
    request: &ProbeRequest,
) -> Result<StoredResponse, String> {
    let mut builder = Request::builder()
        .method(request.method.clone())
        .uri(request.target.as_str());
    for (name, value) in &request.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let (parts, ()) = builder.body(()).map_err(|e| e.to_string())?.into_parts();
    let answer = upstream::forward(
        &pipeline.client,
        upstream,
        parts,
        Bytes::new(),
        None,
        MAX_PROBE_ANSWER,
    )
    .await
    .map_err(|e| format!("{e:?}"))?;
    Ok(upstream::stored(&answer))
}

/// How long a probe waits before its first attempt, from the call's end:
/// never less than `start_after` (unit-tested with paused time).
pub(crate) fn first_attempt(probe: &Probe, ended: Instant) -> Instant {
    ended + probe.start_after
}

#[cfg(test)]
mod tests;
