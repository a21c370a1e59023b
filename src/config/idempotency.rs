//! `[route.idempotency]`, validated and printed: how a delivery's key and
//! fingerprint are built, what happens to a second delivery while the
//! first is in flight, which answers are stored and for how long.
//!
//! The defaults that depend on the route's signature (a preset's own key,
//! retention and ignored fields; a fingerprint of signed parts only, as the
//! signed-coverage rule of `coverage.rs` asks) are resolved here; the checks that compare this table with the others
//! (signed coverage, retention against the signature window, the inbox's
//! statuses) are `cross.rs`'s.

use std::fmt;
use std::time::Duration;

use http::Method;

use serde::{Deserialize, Serialize};

use super::OnUnavailable;
use super::choice::choices;
use super::duration::ConfigDuration;
use super::problems::Problems;
use super::status::CacheStatus;
use crate::extract::{Segment, Selector};
use crate::signature::{EventId, RequestPart, Scheme, unsigned};

/// Default in-flight claim lifetime (renewed while the upstream call runs).
const DEFAULT_LEASE: ConfigDuration = ConfigDuration::secs(30);
/// Default replay window: a day covers every common sender's retry schedule
/// for the first day; raise it for senders that retry for longer.
const DEFAULT_RETENTION: ConfigDuration = ConfigDuration::secs(24 * 3600);
/// Default time a duplicate waits for an in-flight first delivery.
const DEFAULT_WAIT_TIMEOUT: ConfigDuration = ConfigDuration::secs(5);
/// Default time an unknown outcome blocks re-forwarding.
const DEFAULT_UNKNOWN_HOLD: ConfigDuration = ConfigDuration::secs(5 * 60);

/// `[route.idempotency]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawIdempotency {
    /// Key part selectors.
    pub key: Option<Vec<String>>,
    /// Whether a missing key part is a 400.
    pub require_key: Option<bool>,
    /// Fingerprint parts.
    pub fingerprint: Option<Vec<String>>,
    /// Body fields left out of the body hash.
    pub fingerprint_ignore: Option<Vec<String>>,
    /// In-flight claim lifetime.
    pub lease: Option<ConfigDuration>,
    /// Replay window.
    pub retention: Option<ConfigDuration>,
    /// `"wait"` or `"conflict"`.
    pub on_in_flight: Option<OnInFlight>,
    /// Longest wait for an in-flight first delivery.
    pub wait_timeout: Option<ConfigDuration>,
    /// Status classes that are stored.
    pub cache_status: Option<Vec<String>>,
    /// `"hold"` or `"release"`.
    pub on_upstream_timeout: Option<OnUpstreamTimeout>,
    /// How long an unknown outcome blocks.
    pub unknown_hold: Option<ConfigDuration>,
    /// `"enforce"` or `"shadow"`.
    pub mode: Option<Mode>,
    /// Key space shared with other routes (default: the route name).
    pub scope: Option<String>,
    /// Per-route `on_unavailable`.
    pub on_unavailable: Option<OnUnavailable>,
    /// `"refuse"` or `"accept"`: a key or fingerprint-as-key resting on
    /// parts the signature does not cover.
    pub unsigned_key: Option<UnsignedKey>,
}

/// Shortest accepted `lease`, `retention` and `unknown_hold`.
const MIN_HOLD: Duration = Duration::from_millis(100);

/// One part of an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    /// A selector's value.
    Value(Selector),
    /// The message id the signature covers (standard-webhooks: `webhook-id`
    /// or `svix-id`, whichever the sender used).
    SignedId,
}

impl From<EventId> for KeyPart {
    /// A preset's event id as the key part that reads it.
    fn from(id: EventId) -> Self {
        match id {
            EventId::Field(selector) => Self::Value(selector),
            EventId::Signed => Self::SignedId,
        }
    }
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

choices! {
    OnInFlight { "wait" => Wait, "conflict" => Conflict }
    OnUpstreamTimeout { "hold" => Hold, "release" => Release }
    Mode { "enforce" => Enforce, "shadow" => Shadow }
}

/// Whether a route may rest its key on unsigned parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsignedKey {
    /// Refuse the configuration (the default).
    Refuse,
    /// Accept it, logged at WARN at start-up.
    Accept,
}

choices! {
    UnsignedKey { "refuse" => Refuse, "accept" => Accept }
}

impl<'a> From<&'a KeyPart> for RequestPart<'a> {
    fn from(part: &'a KeyPart) -> Self {
        match part {
            KeyPart::Value(selector) => Self::Value(selector),
            KeyPart::SignedId => Self::SignedId,
        }
    }
}

impl<'a> From<&'a FingerprintPart> for RequestPart<'a> {
    fn from(part: &'a FingerprintPart) -> Self {
        match part {
            FingerprintPart::Method => Self::Method,
            FingerprintPart::Path => Self::Path,
            FingerprintPart::Query => Self::Query,
            FingerprintPart::Body => Self::Body,
            FingerprintPart::Header(name) => Self::Header(name),
            FingerprintPart::Value(selector) => Self::Value(selector),
        }
    }
}

/// The fingerprint a route gets when it sets none: method, path and body,
/// but where the fingerprint may be the key (`may_be_key`) only the ones
/// the scheme signs (a body-only HMAC gets `["method", "body"]` on a
/// one-method route, so `/notify/x` and `/notify/y` are one delivery).
/// A `scheme = "hmac"` template without `{body}` fingerprints the values
/// it names instead of the body (its timestamp and signature aside: a
/// sender's retry changes those).
fn default_fingerprint(
    scheme: &Scheme,
    methods: &[Method],
    may_be_key: bool,
) -> Vec<FingerprintPart> {
    let all = [
        FingerprintPart::Method,
        FingerprintPart::Path,
        FingerprintPart::Body,
    ];
    let template = match scheme {
        Scheme::Hmac(hmac) if !hmac.message.segments.contains(&Segment::Body) => Some(hmac),
        _ => None,
    };
    if !may_be_key && template.is_none() {
        return all.to_vec();
    }
    let mut parts: Vec<FingerprintPart> = all
        .iter()
        .filter(|part| unsigned(scheme, methods, (*part).into()).is_none())
        .cloned()
        .collect();
    if let Some(hmac) = template {
        for segment in &hmac.message.segments {
            if let Segment::Value(selector) = segment {
                let volatile = *selector == hmac.signature
                    || hmac
                        .timestamp
                        .as_ref()
                        .is_some_and(|t| t.selector == *selector);
                let part = FingerprintPart::Value(selector.clone());
                if !volatile && !parts.contains(&part) {
                    parts.push(part);
                }
            }
        }
    }
    if parts.is_empty() {
        all.to_vec()
    } else {
        parts
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

/// Validates `[route.idempotency]` (`key` is e.g. `route[0].idempotency`)
/// of a route verified by `scheme` and accepting `methods`. The route's
/// `scope` is checked by the caller; `accepted_unsigned` is filled in by
/// the signed-coverage check (`cross.rs`).
pub(super) fn idempotency(
    problems: &mut Problems,
    key: &str,
    raw: &RawIdempotency,
    store_on_unavailable: OnUnavailable,
    (scheme, methods): (&Scheme, &[Method]),
    scope: String,
) -> Idempotency {
    let key_parts = key_parts(problems, key, raw, scheme);
    let require_key = raw.require_key.unwrap_or(true);
    let may_be_key = key_parts.is_none() || !require_key;
    let fingerprint = fingerprint(problems, key, raw, (scheme, methods), may_be_key);
    let fingerprint_ignore = fingerprint_ignore(problems, key, raw, scheme, &fingerprint);
    let timings = Timings::read(problems, key, raw, scheme);
    if !fingerprint_ignore.is_empty() && !fingerprint.contains(&FingerprintPart::Body) {
        problems.push(
            &format!("{key}.fingerprint_ignore"),
            "has no effect unless \"body\" is part of the fingerprint",
        );
    }
    let cache_status = cache_status(problems, key, raw.cache_status.as_deref());
    Idempotency {
        key: key_parts,
        require_key,
        fingerprint,
        fingerprint_ignore,
        lease: timings.lease,
        retention: timings.retention,
        on_in_flight: raw.on_in_flight.unwrap_or(OnInFlight::Wait),
        wait_timeout: timings.wait_timeout,
        cache_status,
        on_upstream_timeout: raw.on_upstream_timeout.unwrap_or(OnUpstreamTimeout::Hold),
        unknown_hold: timings.unknown_hold,
        scope,
        mode: raw.mode.unwrap_or(Mode::Enforce),
        on_unavailable: raw.on_unavailable.unwrap_or(store_on_unavailable),
        unsigned_key: raw.unsigned_key.unwrap_or(UnsignedKey::Refuse),
        accepted_unsigned: Vec::new(),
    }
}

/// `key = [...]`: the parts as written, else a preset's own event id,
/// else none (the fingerprint is the key).
fn key_parts(
    problems: &mut Problems,
    key: &str,
    raw: &RawIdempotency,
    scheme: &Scheme,
) -> Option<Vec<KeyPart>> {
    match (&raw.key, scheme) {
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
        (None, Scheme::Preset(preset)) => Some(vec![preset.kind.default_key().into()]),
        (None, _) => None,
    }
}

/// `fingerprint = [...]` as written, else the default of the signed-coverage
/// rule (`may_be_key`: the fingerprint is or may become the key).
fn fingerprint(
    problems: &mut Problems,
    key: &str,
    raw: &RawIdempotency,
    (scheme, methods): (&Scheme, &[Method]),
    may_be_key: bool,
) -> Vec<FingerprintPart> {
    let fingerprint = match &raw.fingerprint {
        Some(items) => fingerprint_parts(problems, key, items),
        None => default_fingerprint(scheme, methods, may_be_key),
    };
    if fingerprint.is_empty() {
        problems.push(&format!("{key}.fingerprint"), "must list at least one part");
    }
    fingerprint
}

/// `fingerprint_ignore = [...]`: body fields of one format, else a
/// preset's volatile fields where the body is fingerprinted.
fn fingerprint_ignore(
    problems: &mut Problems,
    key: &str,
    raw: &RawIdempotency,
    scheme: &Scheme,
    fingerprint: &[FingerprintPart],
) -> Vec<Selector> {
    let written = selectors(
        problems,
        &format!("{key}.fingerprint_ignore"),
        raw.fingerprint_ignore.as_deref().unwrap_or_default(),
    );
    for (i, selector) in written.iter().enumerate() {
        if !selector.needs_body() {
            problems.push(
                &format!("{key}.fingerprint_ignore[{i}]"),
                "only json:/pointer, form:FIELD and xml:/path selectors name body fields",
            );
        }
    }
    // The canonical body is built for one format (identify.rs): a list that
    // names fields of two could only ever ignore one format's half.
    let body_kinds = |kind: fn(&Selector) -> bool| written.iter().any(kind);
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
    match (&raw.fingerprint_ignore, scheme) {
        (None, Scheme::Preset(preset)) if fingerprint.contains(&FingerprintPart::Body) => {
            preset.kind.default_fingerprint_ignore()
        }
        _ => written,
    }
}

/// The table's durations, each with its default (a preset's retention
/// where it sets none).
struct Timings {
    lease: Duration,
    retention: Duration,
    wait_timeout: Duration,
    unknown_hold: Duration,
}

impl Timings {
    fn read(problems: &mut Problems, key: &str, raw: &RawIdempotency, scheme: &Scheme) -> Self {
        let lease = raw.lease.unwrap_or(DEFAULT_LEASE).get();
        let retention = match (raw.retention, scheme) {
            (None, Scheme::Preset(preset)) if preset.kind.default_retention().is_some() => {
                preset.kind.default_retention().unwrap_or_default()
            }
            (written, _) => written.unwrap_or(DEFAULT_RETENTION).get(),
        };
        let wait_timeout = raw.wait_timeout.unwrap_or(DEFAULT_WAIT_TIMEOUT).get();
        let unknown_hold = raw.unknown_hold.unwrap_or(DEFAULT_UNKNOWN_HOLD).get();
        for (field, value) in [
            ("lease", lease),
            ("retention", retention),
            ("unknown_hold", unknown_hold),
        ] {
            if value < MIN_HOLD {
                problems.push(&format!("{key}.{field}"), "must be at least 100ms");
            }
        }
        Self {
            lease,
            retention,
            wait_timeout,
            unknown_hold,
        }
    }
}

/// `cache_status = [...]`, default `["2xx", "4xx"]`.
fn cache_status(problems: &mut Problems, key: &str, items: Option<&[String]>) -> CacheStatus {
    let key = format!("{key}.cache_status");
    match items {
        Some([]) => {
            problems.push(&key, "must list at least one status class, e.g. [\"2xx\"]");
            CacheStatus { ranges: Vec::new() }
        }
        Some(items) => problems
            .take(&key, CacheStatus::parse(items))
            .unwrap_or(CacheStatus { ranges: Vec::new() }),
        None => CacheStatus {
            ranges: vec![(200, 299), (400, 499)],
        },
    }
}

fn selectors(problems: &mut Problems, key: &str, items: &[String]) -> Vec<Selector> {
    items
        .iter()
        .enumerate()
        .filter_map(|(i, text)| problems.take(&format!("{key}[{i}]"), Selector::parse(text)))
        .collect()
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

impl Idempotency {
    /// The table as `check-config` prints it. A preset's own key (which
    /// may be the signed message id, a part no selector can name) is what
    /// an absent `key` means, so it is left out.
    pub(super) fn to_raw(&self, scheme: &Scheme) -> RawIdempotency {
        let preset_default = match scheme {
            Scheme::Preset(preset) => Some(vec![KeyPart::from(preset.kind.default_key())]),
            _ => None,
        };
        let key = self
            .key
            .as_ref()
            .filter(|parts| Some(*parts) != preset_default.as_ref())
            .map(|parts| parts.iter().map(KeyPart::to_string).collect());
        let names = |parts: &[FingerprintPart]| parts.iter().map(ToString::to_string).collect();
        RawIdempotency {
            key,
            require_key: Some(self.require_key),
            fingerprint: Some(names(&self.fingerprint)),
            fingerprint_ignore: Some(
                self.fingerprint_ignore
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            ),
            lease: Some(self.lease.into()),
            retention: Some(self.retention.into()),
            on_in_flight: Some(self.on_in_flight),
            wait_timeout: Some(self.wait_timeout.into()),
            cache_status: Some(self.cache_status.names()),
            on_upstream_timeout: Some(self.on_upstream_timeout),
            unknown_hold: Some(self.unknown_hold.into()),
            mode: Some(self.mode),
            scope: Some(self.scope.clone()),
            on_unavailable: Some(self.on_unavailable),
            unsigned_key: Some(self.unsigned_key),
        }
    }
}

#[cfg(test)]
mod tests;
