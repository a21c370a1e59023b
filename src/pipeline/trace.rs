//! The OpenTelemetry spans of a delivery (docs/operations.md "Tracing"): what they are named,
//! what they carry, and how a duplicate links to its first delivery.
//!
//! ```text
//! delivery  (server)  route, outcome, reason, key hash, status, upstream
//!   │                 status, secret index, delivery count; a duplicate
//!   │                 also links to its first delivery's span
//!   ├─ verify
//!   ├─ claim          the store call that decides first or duplicate
//!   ├─ forward (client)  its context is the upstream's `traceparent`
//!   └─ settle         the store call that keeps the answer
//! ```
//!
//! The store's timings are the `claim` and `settle` spans themselves (one
//! span per store decision), not events. Every helper takes `on` (tracing
//! configured) and makes [`Span::none`] when it is off, so the request path
//! then pays for no span at all; with it on, the spans have target
//! [`crate::telemetry::TARGET`], which only the OpenTelemetry layer sees.
//!
//! `idemgate.delivery_count` is how many deliveries of the key *this
//! instance* has seen, from [`DeliveryCounts`]: a fixed table, so it is
//! cheap and bounded, and a lower bound (another instance's deliveries,
//! or a key whose slot another key took since, restart the count).

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{
    SpanContext, SpanId, Status, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::report::{Finished, LogReason};
use crate::record::TraceContext;
use crate::telemetry::TARGET;
use crate::upstream::{ForwardError, UpstreamAnswer};

/// Slots of [`DeliveryCounts`]: 64 KiB of counters.
const COUNT_SLOTS: usize = 8192;

/// The `delivery` span of one request, its parent the sender's
/// `traceparent`/`tracestate` when they are valid.
pub(crate) fn delivery(on: bool, headers: &HeaderMap) -> Span {
    if !on {
        return Span::none();
    }
    let span = tracing::info_span!(target: TARGET, "delivery", otel.kind = "server");
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if parent.span().span_context().is_valid() {
        // Only fails when no OpenTelemetry layer is installed: the span
        // then goes nowhere, with or without its parent.
        if let Err(error) = span.set_parent(parent) {
            tracing::debug!(%error, "delivery span kept without the sender's trace");
        }
    }
    span
}

/// Stage 3's span.
pub(crate) fn verify(on: bool) -> Span {
    if on {
        tracing::info_span!(target: TARGET, "verify")
    } else {
        Span::none()
    }
}

/// Stage 5's span.
pub(crate) fn claim(on: bool) -> Span {
    if on {
        tracing::info_span!(target: TARGET, "claim")
    } else {
        Span::none()
    }
}

/// Stage 6's span, the call to the upstream, its context put in the
/// upstream request's `headers` in place of the sender's
/// `traceparent`/`tracestate`, so the handler's spans are its children.
/// Off, the headers are left as they are.
pub(crate) fn forward(on: bool, headers: &mut HeaderMap) -> Span {
    if !on {
        return Span::none();
    }
    let span = tracing::info_span!(target: TARGET, "forward", otel.kind = "client");
    headers.remove("traceparent");
    headers.remove("tracestate");
    TraceContextPropagator::new().inject_context(&span.context(), &mut HeaderInjector(headers));
    span
}

/// Notes the upstream's status on the `forward` span and on the current
/// (`delivery`) span.
pub(crate) fn answered(forward: &Span, result: &Result<UpstreamAnswer, ForwardError>) {
    if let (false, Ok(answer)) = (forward.is_disabled(), result) {
        let status = i64::from(answer.status.as_u16());
        forward.set_attribute("idemgate.upstream_status", status);
        Span::current().set_attribute("idemgate.upstream_status", status);
    }
}

/// Stage 7's span: storing (or releasing) the claim.
pub(crate) fn settle(on: bool) -> Span {
    if on {
        tracing::info_span!(target: TARGET, "settle")
    } else {
        Span::none()
    }
}

/// The `delivery` span's context for the claim to store, after noting on
/// it how many deliveries of `key` this instance has seen (this one
/// included); `None` when tracing is off.
pub(crate) fn claiming(span: &Span, counts: &DeliveryCounts, key: &str) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    span.set_attribute("idemgate.delivery_count", i64::from(counts.seen(key)));
    context_of(span)
}

/// `span`'s context as the record keeps it; `None` when it has none.
pub(crate) fn context_of(span: &Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let ids = context.span().span_context().clone();
    TraceContext::new(
        ids.trace_id().to_bytes(),
        ids.span_id().to_bytes(),
        ids.is_sampled(),
    )
}

/// Marks `span` as a copy of the delivery `first` started: a link to
/// the first delivery's span and its trace id as an attribute.
pub(crate) fn link_first(span: &Span, first: &TraceContext) {
    if span.is_disabled() {
        return;
    }
    let flags = if first.sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    span.add_link(SpanContext::new(
        TraceId::from_bytes(first.trace_id),
        SpanId::from_bytes(first.span_id),
        flags,
        true,
        TraceState::default(),
    ));
    span.set_attribute("idemgate.first_trace_id", hex::encode(first.trace_id));
}

/// Sets how the request `finished` on its `delivery` span (a 5xx marks
/// it an error) and returns the trace id for the log line; `None` when
/// tracing is off.
pub(super) fn finish(span: &Span, route: &str, finished: &Finished) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let reason = finished.reason.map(LogReason::as_str);
    let status = finished.response.status().as_u16();
    span.set_attribute("idemgate.route", route.to_owned());
    span.set_attribute("idemgate.outcome", finished.outcome.as_str());
    if let Some(reason) = reason {
        span.set_attribute("idemgate.reason", reason);
    }
    if let Some(key) = &finished.labels.key_hash {
        span.set_attribute("idemgate.key_hash", key.clone());
    }
    let secret = finished.labels.secret_index.map(i64::try_from);
    if let Some(Ok(index)) = secret {
        span.set_attribute("idemgate.secret_index", index);
    }
    span.set_attribute("http.response.status_code", i64::from(status));
    if status >= 500 {
        span.set_status(Status::error(reason.unwrap_or("server error")));
    }
    let context = span.context();
    let ids = context.span().span_context().clone();
    ids.is_valid().then(|| ids.trace_id().to_string())
}

/// How many deliveries of each key this instance has seen, in a fixed
/// table of `(tag, count)` slots indexed by the key's hash: no
/// allocation, no lock, bounded memory. A key whose slot another key
/// took since starts again at 1.
#[derive(Debug)]
pub(crate) struct DeliveryCounts {
    slots: Box<[AtomicU64]>,
    hasher: RandomState,
}

impl Default for DeliveryCounts {
    fn default() -> Self {
        Self {
            slots: (0..COUNT_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            hasher: RandomState::new(),
        }
    }
}

impl DeliveryCounts {
    /// Counts one more delivery of `key` and returns its count (1 for
    /// the first this instance sees).
    pub(crate) fn seen(&self, key: &str) -> u32 {
        let hash = self.hasher.hash_one(key);
        let index = usize::try_from(hash % self.slots.len() as u64).unwrap_or(0);
        let slot = &self.slots[index];
        // The tag is never 0, so an empty slot matches no key.
        let tag = (hash >> 32) | 1;
        let next = |current: u64| {
            let count = if current >> 32 == tag {
                (current & u64::from(u32::MAX))
                    .saturating_add(1)
                    .min(u64::from(u32::MAX))
            } else {
                1
            };
            (tag << 32) | count
        };
        let previous = slot
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |current| {
                Some(next(current))
            })
            .unwrap_or_else(|current| current);
        u32::try_from(next(previous) & u64::from(u32::MAX)).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_key_apart() {
        let counts = DeliveryCounts::default();
        assert_eq!(counts.seen("a"), 1);
        assert_eq!(counts.seen("a"), 2);
        assert_eq!(counts.seen("b"), 1);
        assert_eq!(counts.seen("a"), 3);
    }

    #[test]
    fn a_slot_taken_by_another_key_restarts_the_count() {
        let counts = DeliveryCounts {
            slots: vec![AtomicU64::new(0)].into_boxed_slice(),
            hasher: RandomState::new(),
        };
        assert_eq!(counts.seen("a"), 1);
        assert_eq!(counts.seen("a"), 2);
        assert_eq!(counts.seen("b"), 1, "one slot: b evicts a");
        assert_eq!(counts.seen("a"), 1);
    }

    #[test]
    fn off_makes_no_spans_and_no_context() {
        let span = delivery(false, &HeaderMap::new());
        assert!(span.is_disabled());
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", http::HeaderValue::from_static("00-1-2-01"));
        assert!(verify(false).is_disabled() && forward(false, &mut headers).is_disabled());
        assert_eq!(headers["traceparent"], "00-1-2-01", "untouched");
        assert_eq!(context_of(&span), None);
    }
}
