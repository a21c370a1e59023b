//! The OpenTelemetry spans of a delivery (docs/tracing.md): what they are
//! named, what they carry by the semantic conventions for HTTP, and how a
//! duplicate links to its first delivery.
//!
//! ```text
//! POST /notify  (server)  http.route, http.request.method, url.path,
//!   │                     server.*, client.*, http.response.status_code,
//!   │                     and idemgate.*: route, outcome, reason, key hash,
//!   │                     upstream status, secret index, delivery count;
//!   │                     a duplicate also links to its first delivery
//!   ├─ verify
//!   ├─ claim              the store call that decides first or duplicate
//!   │    └─ EVALSHA claim (client, store::redis)
//!   ├─ POST   (client)    the upstream call: url.full, server.*,
//!   │                     http.response.status_code or error.type; its
//!   │                     context is the upstream's `traceparent`
//!   └─ settle             the store call that keeps the answer
//!        └─ EVALSHA complete (client, store::redis)
//! ```
//!
//! The server span is created (as `delivery`, renamed by the `otel.name`
//! field) before stage 1 picks a route: it is named by its method alone
//! until [`routed`] adds the route's prefix. `http.route` is the route's
//! configured `path_prefix`, never the path as sent, so the name stays low
//! in cardinality. A 5xx marks the server span an error, a 4xx does not
//! (the sender's fault); a 4xx, a 5xx or no answer marks the client span
//! one. `url.full` has no userinfo and no query (the sender's query may
//! carry a token).
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
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use http::uri::Authority;
use http::{HeaderMap, Method, Uri};
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{
    SpanContext, SpanId, Status, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::record::TraceContext;
use crate::telemetry::TARGET;
use crate::upstream::{ForwardError, UpstreamAnswer};

/// Slots of [`DeliveryCounts`]: 64 KiB of counters.
const COUNT_SLOTS: usize = 8192;

/// The `delivery` span of one request (kind server, named by its method
/// until [`routed`] adds the route), its parent the sender's
/// `traceparent`/`tracestate` when they are valid. `listen` is the proxy
/// listener's address: `server.address` when the request names no host.
pub(crate) fn delivery(
    on: bool,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
    listen: SocketAddr,
) -> Span {
    if !on {
        return Span::none();
    }
    let known = known_method(method);
    let (host, port) = requested_host(uri, headers)
        .unwrap_or_else(|| (listen.ip().to_string(), Some(listen.port())));
    let span = tracing::info_span!(
        target: TARGET,
        "delivery",
        otel.kind = "server",
        otel.name = known.unwrap_or("HTTP"),
        http.request.method = known.unwrap_or(OTHER_METHOD),
        url.path = uri.path(),
        url.scheme = "http",
        server.address = host,
    );
    if known.is_none() {
        span.set_attribute("http.request.method_original", method.as_str().to_owned());
    }
    if let Some(port) = port {
        span.set_attribute("server.port", i64::from(port));
    }
    if let Some(peer) = peer {
        span.set_attribute("client.address", peer.ip().to_string());
        span.set_attribute("client.port", i64::from(peer.port()));
    }
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

/// Notes on the `delivery` span the route stage 1 chose: `http.route` is
/// its configured path prefix (a low-cardinality template, never the
/// path as sent) and the span is renamed `{method} {prefix}`.
pub(crate) fn routed(span: &Span, method: &Method, prefix: &str) {
    if span.is_disabled() {
        return;
    }
    let name = known_method(method).unwrap_or("HTTP");
    span.set_attribute("http.route", prefix.to_owned());
    span.context()
        .span()
        .update_name(format!("{name} {prefix}"));
}

/// `http.request.method` of a request whose method is none of RFC 9110's
/// and PATCH (semantic conventions: the original goes in
/// `http.request.method_original`, and the span is named `HTTP`).
const OTHER_METHOD: &str = "_OTHER";

/// The method's name when it is one the semantic conventions know.
fn known_method(method: &Method) -> Option<&'static str> {
    [
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::CONNECT,
        Method::OPTIONS,
        Method::TRACE,
        Method::PATCH,
    ]
    .into_iter()
    .zip([
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ])
    .find_map(|(known, name)| (known == method).then_some(name))
}

/// The host (brackets of an IPv6 literal removed) and port the request
/// was sent to: its URI's authority (HTTP/2, absolute form), else `Host`.
fn requested_host(uri: &Uri, headers: &HeaderMap) -> Option<(String, Option<u16>)> {
    let from_header = || {
        let value = headers.get(http::header::HOST)?.to_str().ok()?;
        value.parse::<Authority>().ok()
    };
    let authority = uri.authority().cloned().or_else(from_header)?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_owned(), authority.port_u16()))
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

/// Stage 6's span, the call to the upstream (kind client, named by the
/// method), its context put in the upstream request's `headers` in place
/// of the sender's `traceparent`/`tracestate`, so the handler's spans are
/// its children. `target` is the URI the request goes to. Off, the
/// headers are left as they are.
pub(crate) fn forward(on: bool, method: &Method, target: &Uri, headers: &mut HeaderMap) -> Span {
    if !on {
        return Span::none();
    }
    let known = known_method(method);
    let span = tracing::info_span!(
        target: TARGET,
        "forward",
        otel.kind = "client",
        otel.name = known.unwrap_or("HTTP"),
        http.request.method = known.unwrap_or(OTHER_METHOD),
        server.address = target.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']'),
        server.port = i64::from(port_of(target)),
        url.full = url_full(target),
    );
    if known.is_none() {
        span.set_attribute("http.request.method_original", method.as_str().to_owned());
    }
    headers.remove("traceparent");
    headers.remove("tracestate");
    TraceContextPropagator::new().inject_context(&span.context(), &mut HeaderInjector(headers));
    span
}

/// The port `target` is reached on: its own, else its scheme's.
fn port_of(target: &Uri) -> u16 {
    target
        .port_u16()
        .unwrap_or(if target.scheme_str() == Some("https") {
            443
        } else {
            80
        })
}

/// `url.full` of an upstream call: `target` without its userinfo (the
/// upstream's credentials) and without its query (the sender's, which may
/// carry a token: `upstream.url`'s own query is never sent).
fn url_full(target: &Uri) -> String {
    let scheme = target.scheme_str().unwrap_or("http");
    let host = target.host().unwrap_or_default();
    match target.port() {
        Some(port) => format!("{scheme}://{host}:{port}{}", target.path()),
        None => format!("{scheme}://{host}{}", target.path()),
    }
}

/// Notes the upstream's answer on the `forward` span (status code, or the
/// class of failure as `error.type`; a 4xx or 5xx or no answer marks a
/// client span an error) and its status on the current (`delivery`) span.
pub(crate) fn answered(forward: &Span, result: &Result<UpstreamAnswer, ForwardError>) {
    if forward.is_disabled() {
        return;
    }
    match result {
        Ok(answer) => {
            let code = answer.status.as_u16();
            let status = i64::from(code);
            forward.set_attribute("http.response.status_code", status);
            forward.set_attribute("idemgate.upstream_status", status);
            Span::current().set_attribute("idemgate.upstream_status", status);
            if code >= 400 {
                forward.set_attribute("error.type", code.to_string());
                forward.set_status(Status::error(code.to_string()));
            }
        }
        Err(error) => {
            forward.set_attribute("error.type", error.error_type());
            forward.set_status(Status::error(error.to_string()));
        }
    }
}

/// A probe of the handler about an unknown outcome (`crate::pipeline::probe`): a
/// trace of its own, started later than the delivery, linked to it.
pub(crate) fn probe(on: bool, route: &str, key: &str, first: Option<&TraceContext>) -> Span {
    if !on {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "probe",
        "idemgate.route" = route,
        "idemgate.key_hash" = key
    );
    if let Some(first) = first {
        link_first(&span, first);
    }
    span
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

/// How a request ended, as its `delivery` span records it: filled in by
/// `report`, which knows the request's outcome.
#[derive(Debug, Clone, Copy)]
pub(super) struct SpanEnd<'a> {
    /// The route's name.
    pub(super) route: &'a str,
    /// The outcome word of the log line.
    pub(super) outcome: &'static str,
    /// The reason word of a refusal, if any.
    pub(super) reason: Option<&'static str>,
    /// The key hash, once the key is known.
    pub(super) key_hash: Option<&'a str>,
    /// Index of the secret that verified the delivery.
    pub(super) secret_index: Option<usize>,
    /// The status of the answer sent.
    pub(super) status: u16,
}

/// Records how the request ended (`end`) on its `delivery` span (a 5xx
/// marks it an error) and returns the trace id for the log line; `None`
/// when tracing is off.
pub(super) fn finish(span: &Span, end: &SpanEnd<'_>) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let (reason, status) = (end.reason, end.status);
    span.set_attribute("idemgate.route", end.route.to_owned());
    span.set_attribute("idemgate.outcome", end.outcome);
    if let Some(reason) = reason {
        span.set_attribute("idemgate.reason", reason);
    }
    if let Some(key) = end.key_hash {
        span.set_attribute("idemgate.key_hash", key.to_owned());
    }
    let secret = end.secret_index.map(i64::try_from);
    if let Some(Ok(index)) = secret {
        span.set_attribute("idemgate.secret_index", index);
    }
    span.set_attribute("http.response.status_code", i64::from(status));
    // A server span is an error only for a 5xx: a 4xx is the sender's.
    if status >= 500 {
        span.set_attribute("error.type", status.to_string());
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
        let listen: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let uri = Uri::from_static("/notify");
        let span = delivery(false, &Method::POST, &uri, &HeaderMap::new(), None, listen);
        assert!(span.is_disabled());
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", http::HeaderValue::from_static("00-1-2-01"));
        let target = Uri::from_static("http://127.0.0.1:3000/notify");
        assert!(
            verify(false).is_disabled()
                && forward(false, &Method::POST, &target, &mut headers).is_disabled()
        );
        assert_eq!(headers["traceparent"], "00-1-2-01", "untouched");
        assert_eq!(context_of(&span), None);
    }

    #[test]
    fn url_full_has_no_credentials_and_no_query() {
        for (target, full) in [
            (
                "http://user:upstream-pw@127.0.0.1:3000/base/notify?token=sender-secret",
                "http://127.0.0.1:3000/base/notify",
            ),
            (
                "https://hooks.example:8443/n",
                "https://hooks.example:8443/n",
            ),
            ("http://user@handler/notify", "http://handler/notify"),
            ("http://[::1]:3000/", "http://[::1]:3000/"),
        ] {
            let uri: Uri = target.parse().unwrap();
            assert_eq!(url_full(&uri), full, "{target}");
        }
        assert_eq!(port_of(&Uri::from_static("https://h/")), 443);
        assert_eq!(port_of(&Uri::from_static("http://h/")), 80);
        assert_eq!(port_of(&Uri::from_static("http://h:3000/")), 3000);
    }

    #[test]
    fn methods_outside_the_conventions_are_other() {
        assert_eq!(known_method(&Method::POST), Some("POST"));
        assert_eq!(known_method(&Method::PATCH), Some("PATCH"));
        assert_eq!(known_method(&Method::from_bytes(b"PURGE").unwrap()), None);
    }

    #[test]
    fn the_server_address_is_the_host_asked_for() {
        let mut headers = HeaderMap::new();
        let path = Uri::from_static("/notify");
        assert_eq!(requested_host(&path, &headers), None);
        headers.insert(
            http::header::HOST,
            http::HeaderValue::from_static("gate.example:8080"),
        );
        assert_eq!(
            requested_host(&path, &headers),
            Some(("gate.example".to_owned(), Some(8080)))
        );
        headers.insert(http::header::HOST, http::HeaderValue::from_static("[::1]"));
        assert_eq!(
            requested_host(&path, &headers),
            Some(("::1".to_owned(), None))
        );
        let absolute = Uri::from_static("http://other.example:81/notify");
        assert_eq!(
            requested_host(&absolute, &headers),
            Some(("other.example".to_owned(), Some(81)))
        );
    }
}
