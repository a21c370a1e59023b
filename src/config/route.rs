//! A route and its idempotency policy, and their validation.
//!
//! Owns `[[route]]` and `[route.idempotency]`: how a delivery's key and
//! fingerprint are built, what happens to a second delivery while the first
//! is in flight, which answers are stored. The signature part of a route is
//! [`super::scheme`]'s; this file ties the two together and checks the
//! rules that span both (retention against the signature window).

use std::fmt;
use std::time::Duration;

use http::Method;

use super::coverage::{self, UnsignedKey};
use super::guard::{Guard, guards};
use super::inbox::{Inbox, inbox};
use super::raw::{self, RawIdempotency, RawRoute};
use super::scheme::scheme;
use super::validate::{Problems, on_unavailable, upstream_url};
use super::{OnUnavailable, Scheme, Selector, Upstream};

/// One part of an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    /// A selector's value.
    Value(Selector),
    /// The message id the signature covers (standard-webhooks: `webhook-id`
    /// or `svix-id`, whichever the sender used).
    SignedId,
}

impl fmt::Display for KeyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Value(selector) => selector.fmt(f),
            Self::SignedId => f.write_str("signed message id"),
        }
    }
}

/// A part of the request fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FingerprintPart {
    /// The method.
    Method,
    /// The path.
    Path,
    /// The raw query string.
    Query,
    /// The body hash (canonical if `fingerprint_ignore` is set).
    Body,
    /// A header value.
    Header(http::HeaderName),
    /// A selector's value (`json:/pointer`, `form:FIELD`, `query:NAME`):
    /// what lets routes of one scope compare one delivery that reaches
    /// them in different shapes (a JSON callback, a form poller result).
    Value(Selector),
}

impl fmt::Display for FingerprintPart {
    /// The part as it is written in `fingerprint = [...]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Method => f.write_str("method"),
            Self::Path => f.write_str("path"),
            Self::Query => f.write_str("query"),
            Self::Body => f.write_str("body"),
            Self::Header(name) => write!(f, "header:{name}"),
            Self::Value(selector) => selector.fmt(f),
        }
    }
}

/// Duplicate handling while the first delivery is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnInFlight {
    /// Wait up to `wait_timeout` and replay.
    Wait,
    /// Answer 409 `in_flight` at once.
    Conflict,
}

/// What an upstream timeout does to the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUpstreamTimeout {
    /// Record the outcome as unknown for `unknown_hold`.
    Hold,
    /// Release the claim (the next retry is forwarded).
    Release,
}

/// Enforce deduplication, or only observe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Replay and reject as specified.
    Enforce,
    /// Forward everything; record and count what enforce would have done.
    Shadow,
}

/// Which upstream statuses are stored and replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStatus {
    /// `(low, high)` inclusive ranges.
    pub(super) ranges: Vec<(u16, u16)>,
}

impl CacheStatus {
    /// Reads `cache_status` (and the statuses of `inbox.on`).
    pub(super) fn parse(items: &[String]) -> Result<Self, String> {
        let mut ranges = Vec::new();
        for item in items {
            let range = match item.as_bytes() {
                [d @ b'1'..=b'5', b'x', b'x'] => {
                    let base = u16::from(d - b'0') * 100;
                    (base, base + 99)
                }
                _ => match item.parse::<u16>() {
                    Ok(code @ 100..=599) => (code, code),
                    _ => {
                        return Err(format!(
                            "{item:?} is not a status class; expected \"2xx\"…\"5xx\" or a code 100-599"
                        ));
                    }
                },
            };
            ranges.push(range);
        }
        Ok(Self { ranges })
    }

    /// The classes and codes as they are written in `cache_status`; a
    /// class with codes taken out (by an inbox) is listed code by code.
    pub fn names(&self) -> Vec<String> {
        self.ranges
            .iter()
            .flat_map(|&(low, high)| {
                if low % 100 == 0 && high == low + 99 {
                    vec![format!("{}xx", low / 100)]
                } else {
                    (low..=high).map(|code| code.to_string()).collect()
                }
            })
            .collect()
    }

    /// Whether an answer with this status is kept.
    pub fn contains(&self, status: u16) -> bool {
        self.ranges
            .iter()
            .any(|(low, high)| (*low..=*high).contains(&status))
    }
}

/// `[route.idempotency]`, validated.
#[derive(Debug, Clone)]
pub struct Idempotency {
    /// Key parts; `None`: the fingerprint is the key.
    pub key: Option<Vec<KeyPart>>,
    /// A missing key part is a 400 (else the fingerprint is the key).
    pub require_key: bool,
    /// Fingerprint parts.
    pub fingerprint: Vec<FingerprintPart>,
    /// Body fields left out of the body hash.
    pub fingerprint_ignore: Vec<Selector>,
    /// In-flight claim lifetime.
    pub lease: Duration,
    /// Replay window.
    pub retention: Duration,
    /// Duplicate handling while in flight.
    pub on_in_flight: OnInFlight,
    /// Longest wait for an in-flight first delivery.
    pub wait_timeout: Duration,
    /// Stored statuses.
    pub cache_status: CacheStatus,
    /// Upstream timeout handling.
    pub on_upstream_timeout: OnUpstreamTimeout,
    /// How long an unknown outcome blocks.
    pub unknown_hold: Duration,
    /// The key space this route's records live in: its name unless
    /// routes share one (`scope`), so a callback and a reconciliation
    /// route claim the same record for the same trade.
    pub scope: String,
    /// Enforce or shadow.
    pub mode: Mode,
    /// Fail closed or open.
    pub on_unavailable: OnUnavailable,
    /// Whether unsigned key parts are refused or accepted
    /// (`unsigned_key`; `crate::config::coverage`).
    pub unsigned_key: UnsignedKey,
    /// The unsigned parts `unsigned_key = "accept"` let through, each
    /// with why it is unsigned: logged at WARN at start-up.
    pub accepted_unsigned: Vec<String>,
}

/// One protected route.
#[derive(Debug, Clone)]
pub struct Route {
    /// Metric label and store key component.
    pub name: String,
    /// Path prefix that selects it, as configured (stage 1 compares its
    /// canonical form: `pipeline::route`).
    pub path_prefix: String,
    /// Whether the prefix matches only in its own letter case.
    pub case_sensitive: bool,
    /// Accepted methods.
    pub methods: Vec<Method>,
    /// Upstream of this route.
    pub upstream: Upstream,
    /// Signature checking.
    pub scheme: Scheme,
    /// Deduplication rules.
    pub idempotency: Idempotency,
    /// Business-field whitelists, checked after the signature and before
    /// the key is read.
    pub guards: Vec<Guard>,
    /// Failed deliveries acknowledged and redelivered; `None`: the
    /// table is absent or disabled, and failures reach the sender.
    pub inbox: Option<Inbox>,
}

pub(super) fn route(
    problems: &mut Problems,
    key: &str,
    raw: RawRoute,
    default_upstream: &Upstream,
    store_on_unavailable: OnUnavailable,
) -> Option<Route> {
    if !is_key_word(&raw.name) {
        problems.push(
            &format!("{key}.name"),
            format!(
                "{:?} must be 1-64 characters of a-z, 0-9, '_' or '-' (it is a metric label and part of the store key)",
                raw.name
            ),
        );
    }
    let scope = raw
        .idempotency
        .scope
        .clone()
        .unwrap_or_else(|| raw.name.clone());
    if !is_key_word(&scope) {
        problems.push(
            &format!("{key}.idempotency.scope"),
            format!("{scope:?} must be 1-64 characters of a-z, 0-9, '_' or '-' (it is part of the store key)"),
        );
    }
    if let Err(problem) = crate::path::check_prefix(&raw.path_prefix) {
        problems.push(&format!("{key}.path_prefix"), problem);
    }
    let methods = raw
        .methods
        .unwrap_or_else(|| vec!["POST".to_owned()])
        .into_iter()
        .filter_map(|m| {
            let method = Method::from_bytes(m.to_ascii_uppercase().as_bytes()).ok();
            if method.is_none() {
                problems.push(
                    &format!("{key}.methods"),
                    format!("{m:?} is not an HTTP method"),
                );
            }
            method
        })
        .collect::<Vec<_>>();
    if methods.is_empty() {
        problems.push(&format!("{key}.methods"), "must list at least one method");
    }
    let upstream = match &raw.upstream {
        Some(url) => Upstream {
            url: upstream_url(problems, &format!("{key}.upstream"), url),
            timeout: default_upstream.timeout,
        },
        None => default_upstream.clone(),
    };
    let scheme = scheme(problems, &format!("{key}.signature"), &raw.signature);
    let mut idempotency = idempotency(
        problems,
        &format!("{key}.idempotency"),
        &raw.idempotency,
        store_on_unavailable,
        (&scheme, &methods),
        scope,
    );
    idempotency.accepted_unsigned = coverage::check(
        problems,
        key,
        &scheme,
        &methods,
        &idempotency,
        idempotency.unsigned_key,
    );
    if let Some(tolerance) = scheme.tolerance() {
        if idempotency.retention <= tolerance {
            problems.push_derived(
                &format!("{key}.idempotency.retention"),
                &[&format!("{key}.signature.tolerance")],
                format!(
                    "must exceed the signature tolerance ({tolerance:?}), or a captured request still inside the window could be replayed to the backend after its record expired"
                ),
            );
        }
    }
    let guards = guards(problems, &format!("{key}.guard"), &raw.guards);
    let cache_status_written = raw.idempotency.cache_status.is_some();
    let inbox = inbox(
        problems,
        key,
        raw.inbox.as_ref(),
        cache_status_written,
        &upstream,
        &mut idempotency,
    );
    Some(Route {
        guards,
        inbox,
        name: raw.name,
        path_prefix: raw.path_prefix,
        case_sensitive: raw.case_sensitive.unwrap_or(false),
        methods,
        upstream,
        scheme,
        idempotency,
    })
}

/// Routes of one `scope` claim the same records, so one delivery reaching
/// two of them must get one fingerprint: every such route fingerprints
/// values only (selectors and headers, no `method`, `path`, `query` or
/// `body`, which differ between routes by construction), the same number
/// of them, compared value by value in order.
pub(super) fn check_shared_scope(
    problems: &mut Problems,
    key: &str,
    route: &Route,
    earlier: &[Route],
) {
    let scope = &route.idempotency.scope;
    let mut sharing = earlier.iter().filter(|r| r.idempotency.scope == *scope);
    let Some(other) = sharing.next() else {
        return;
    };
    // The first route of the scope is judged once, when the second joins.
    let first_join = sharing.next().is_none();
    let by_route = |parts: &[FingerprintPart]| {
        parts
            .iter()
            .find(|part| {
                matches!(
                    part,
                    FingerprintPart::Method
                        | FingerprintPart::Path
                        | FingerprintPart::Query
                        | FingerprintPart::Body
                )
            })
            .map(ToString::to_string)
    };
    let other_index = earlier
        .iter()
        .position(|r| std::ptr::eq(r, other))
        .expect("other is one of the earlier routes");
    // Each route's problem is reported under its own key.
    let other_key = format!("route[{other_index}].idempotency.fingerprint");
    let key = format!("{key}.idempotency.fingerprint");
    let judged = [
        (&key, &route.name, &route.idempotency.fingerprint),
        (&other_key, &other.name, &other.idempotency.fingerprint),
    ];
    for (at, name, parts) in &judged[..if first_join { 2 } else { 1 }] {
        if let Some(part) = by_route(parts) {
            problems.push(
                at,
                format!(
                    "route {name:?} shares scope {scope:?}, so its fingerprint must list values only (json:/…, form:…, query:…, header:…), not {part:?}, which differs between routes"
                ),
            );
        }
    }
    let (mine, theirs) = (
        route.idempotency.fingerprint.len(),
        other.idempotency.fingerprint.len(),
    );
    if mine != theirs {
        problems.push(
            &key,
            format!(
                "{mine} parts, but route {:?} in scope {scope:?} lists {theirs}: the parts are compared in order",
                other.name
            ),
        );
    }
}

/// A route name or scope: it is a metric label and part of the store key.
fn is_key_word(word: &str) -> bool {
    !word.is_empty()
        && word.len() <= 64
        && word
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn selectors(problems: &mut Problems, key: &str, items: &[String]) -> Vec<Selector> {
    items
        .iter()
        .enumerate()
        .filter_map(|(i, text)| problems.take(&format!("{key}[{i}]"), Selector::parse(text)))
        .collect()
}

fn idempotency(
    problems: &mut Problems,
    key: &str,
    raw: &RawIdempotency,
    store_on_unavailable: OnUnavailable,
    (scheme, methods): (&Scheme, &[Method]),
    scope: String,
) -> Idempotency {
    let key_parts = match (&raw.key, scheme) {
        (Some(items), _) => {
            if items.is_empty() {
                problems.push(
                    &format!("{key}.key"),
                    "must list at least one part, or be omitted",
                );
            }
            let parts = selectors(problems, &format!("{key}.key"), items);
            Some(parts.into_iter().map(KeyPart::Value).collect())
        }
        (None, Scheme::Preset(preset)) => Some(vec![preset.kind.default_key()]),
        (None, _) => None,
    };
    let require_key = raw.require_key.unwrap_or(true);
    let fingerprint = match &raw.fingerprint {
        Some(items) => fingerprint_parts(problems, key, items),
        None => coverage::default_fingerprint(scheme, methods, key_parts.is_none() || !require_key),
    };
    if fingerprint.is_empty() {
        problems.push(&format!("{key}.fingerprint"), "must list at least one part");
    }
    let fingerprint_ignore = selectors(
        problems,
        &format!("{key}.fingerprint_ignore"),
        raw.fingerprint_ignore.as_deref().unwrap_or_default(),
    );
    for (i, selector) in fingerprint_ignore.iter().enumerate() {
        if !selector.needs_body() {
            problems.push(
                &format!("{key}.fingerprint_ignore[{i}]"),
                "only json:/pointer, form:FIELD and xml:/path selectors name body fields",
            );
        }
    }
    // The canonical body is built for one format (identify.rs): a list that
    // names fields of two could only ever ignore one format's half.
    let body_kinds = |kind: fn(&Selector) -> bool| fingerprint_ignore.iter().any(kind);
    let kinds = [
        body_kinds(|s| matches!(s, Selector::Json(_))),
        body_kinds(|s| matches!(s, Selector::Form(_))),
        body_kinds(|s| matches!(s, Selector::Xml(_))),
    ];
    if kinds.iter().filter(|&&used| used).count() > 1 {
        problems.push(
            &format!("{key}.fingerprint_ignore"),
            "mixes body formats; list only json:/pointer, only form:FIELD or only xml:/path selectors",
        );
    }
    // A preset's volatile fields, unless the operator chose the ignore list
    // or left the body out of the fingerprint.
    let fingerprint_ignore = match (&raw.fingerprint_ignore, scheme) {
        (None, Scheme::Preset(preset)) if fingerprint.contains(&FingerprintPart::Body) => {
            preset.kind.default_fingerprint_ignore()
        }
        _ => fingerprint_ignore,
    };
    let lease = problems.duration(
        &format!("{key}.lease"),
        raw.lease.as_deref(),
        raw::DEFAULT_LEASE,
    );
    let retention = match (raw.retention.as_deref(), scheme) {
        (None, Scheme::Preset(preset)) if preset.kind.default_retention().is_some() => {
            preset.kind.default_retention().unwrap_or_default()
        }
        (text, _) => problems.duration(&format!("{key}.retention"), text, raw::DEFAULT_RETENTION),
    };
    let wait_timeout = problems.duration(
        &format!("{key}.wait_timeout"),
        raw.wait_timeout.as_deref(),
        raw::DEFAULT_WAIT_TIMEOUT,
    );
    let unknown_hold = problems.duration(
        &format!("{key}.unknown_hold"),
        raw.unknown_hold.as_deref(),
        raw::DEFAULT_UNKNOWN_HOLD,
    );
    for (field, value) in [
        ("lease", lease),
        ("retention", retention),
        ("unknown_hold", unknown_hold),
    ] {
        if value < Duration::from_millis(100) {
            problems.push(&format!("{key}.{field}"), "must be at least 100ms");
        }
    }
    if !fingerprint_ignore.is_empty() && !fingerprint.contains(&FingerprintPart::Body) {
        problems.push(
            &format!("{key}.fingerprint_ignore"),
            "has no effect unless \"body\" is part of the fingerprint",
        );
    }
    if raw.cache_status.as_ref().is_some_and(Vec::is_empty) {
        problems.push(
            &format!("{key}.cache_status"),
            "must list at least one status class, e.g. [\"2xx\"]",
        );
    }
    let cache_status = match &raw.cache_status {
        Some(items) => problems
            .take(&format!("{key}.cache_status"), CacheStatus::parse(items))
            .unwrap_or(CacheStatus { ranges: Vec::new() }),
        None => CacheStatus {
            ranges: vec![(200, 299), (400, 499)],
        },
    };
    Idempotency {
        key: key_parts,
        require_key,
        fingerprint,
        fingerprint_ignore,
        lease,
        retention,
        on_in_flight: problems.choice(
            &format!("{key}.on_in_flight"),
            raw.on_in_flight.as_deref(),
            OnInFlight::Wait,
        ),
        wait_timeout,
        cache_status,
        on_upstream_timeout: problems.choice(
            &format!("{key}.on_upstream_timeout"),
            raw.on_upstream_timeout.as_deref(),
            OnUpstreamTimeout::Hold,
        ),
        unknown_hold,
        scope,
        mode: problems.choice(&format!("{key}.mode"), raw.mode.as_deref(), Mode::Enforce),
        on_unavailable: on_unavailable(
            problems,
            &format!("{key}.on_unavailable"),
            raw.on_unavailable.as_deref(),
            store_on_unavailable,
        ),
        unsigned_key: problems.choice(
            &format!("{key}.unsigned_key"),
            raw.unsigned_key.as_deref(),
            UnsignedKey::Refuse,
        ),
        accepted_unsigned: Vec::new(),
    }
}

/// Reads `fingerprint = [...]` as written.
fn fingerprint_parts(problems: &mut Problems, key: &str, items: &[String]) -> Vec<FingerprintPart> {
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| {
            let part = match item.as_str() {
                "method" => Ok(FingerprintPart::Method),
                "path" => Ok(FingerprintPart::Path),
                "query" => Ok(FingerprintPart::Query),
                "body" => Ok(FingerprintPart::Body),
                other => match other.strip_prefix("header:") {
                    Some(name) => http::HeaderName::from_bytes(name.as_bytes())
                        .map(FingerprintPart::Header)
                        .map_err(|_| format!("{name:?} is not a valid header name")),
                    None if other.contains(':') => Selector::parse(other)
                        .map(FingerprintPart::Value),
                    None => Err(format!(
                        "{other:?} is not valid; expected \"method\", \"path\", \"query\", \"body\", \"header:NAME\" or a selector (json:/pointer, form:FIELD, xml:/path, query:NAME)"
                    )),
                },
            };
            problems.take(&format!("{key}.fingerprint[{i}]"), part)
        })
        .collect()
}

#[cfg(test)]
mod tests;
