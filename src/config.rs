//! The validated runtime configuration.
//!
//! [`Config::load`] reads the TOML file (see `config/idemgate.toml` for the
//! annotated reference), resolves secrets and checks every rule it can before
//! a single socket is opened. Every error names its key, e.g.
//! `route[0].idempotency.lease: …`, and all errors are reported at once so an
//! operator fixes a file in one pass.

pub mod raw;
mod redact;
pub mod secret;
pub mod selector;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::{Method, Uri};

use crate::pipeline::route::canonical_prefix;
use raw::{RawConfig, RawIdempotency, RawRoute, RawSignature, parse_duration};

/// More worker threads than this is a typo, not a machine.
const MAX_WORKER_THREADS: usize = 1024;
pub(crate) use redact::redact_url;
pub use secret::Secret;
pub use selector::{Segment, Selector, Template};

/// Every problem found in a configuration file, each prefixed by its key.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  {}", .0.join("\n  "))]
pub struct ConfigError(pub Vec<String>);

/// What to do with requests no route matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmatched {
    /// Forward untouched, counted as `passthrough`.
    Forward,
    /// Answer 404 `route_not_found`.
    Reject,
}

/// Fail closed or open when the store cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnavailable {
    /// 503 `store_unavailable` with `Retry-After`.
    Reject,
    /// Forward without protection, counted as `unprotected`.
    Forward,
}

/// Listener addresses.
#[derive(Debug, Clone)]
pub struct Listen {
    /// Where senders deliver.
    pub proxy: SocketAddr,
    /// `/metrics`, `/healthz`, `/readyz`, `/admin/*`.
    pub admin: SocketAddr,
}

/// Resource limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest accepted request body in bytes.
    pub max_body_bytes: u64,
    /// Time allowed to receive the request headers.
    pub header_read_timeout: Duration,
    /// Time in-flight work gets after SIGTERM.
    pub shutdown_grace: Duration,
    /// Time allowed to receive the body after the headers (slow-body guard).
    pub body_read_timeout: Duration,
    /// Open proxy connections at most; further ones wait in the listen
    /// backlog until one closes.
    pub max_connections: usize,
    /// Header fields per request at most (hyper answers 431 beyond).
    pub max_headers: usize,
    /// Request-head bytes at most (hyper answers 431 beyond).
    pub max_header_bytes: usize,
    /// Duplicates of one key that may wait at once.
    pub max_waiting_per_key: usize,
    /// Largest upstream answer body stored for replay; larger ones stream
    /// to the sender and their key is completed without a body.
    pub max_stored_answer_bytes: usize,
    /// Threads that serve requests, resolved (at least 1). One thread runs
    /// tokio's current-thread scheduler: on the 2-core bench machine it
    /// needed a third less CPU per first delivery and a quarter less per
    /// replay than two work-stealing workers, because no wake-up crosses
    /// threads (no futex calls, no work stealing, no cache-line bouncing).
    pub worker_threads: usize,
}

/// Which store backs the claims.
#[derive(Clone)]
pub enum StoreBackend {
    /// Redis, Redis Cluster or Sentinel via fred.
    Redis {
        /// Connection URL (fred syntax).
        url: String,
    },
    /// The embedded redb file; single instance only.
    Embedded {
        /// Database file.
        path: PathBuf,
    },
}

impl fmt::Debug for StoreBackend {
    /// Prints the Redis URL with any password replaced, so `check-config`
    /// output and logs never carry it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Redis { url } => f
                .debug_struct("Redis")
                .field("url", &redact_url(url))
                .finish(),
            Self::Embedded { path } => f.debug_struct("Embedded").field("path", path).finish(),
        }
    }
}

/// Durability knob: how many replicas must acknowledge a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaAck {
    /// `WAIT numreplicas`.
    pub replicas: u32,
    /// `WAIT timeout`.
    pub timeout: Duration,
}

/// `[store]`.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Backend and its address.
    pub backend: StoreBackend,
    /// Claims (and stored answers) must reach this many replicas; `None`:
    /// don't wait (Redis replicates asynchronously).
    pub replica_ack: Option<ReplicaAck>,
    /// Prefix of every key.
    pub key_prefix: String,
    /// Timeout of one store call.
    pub command_timeout: Duration,
    /// Keep `/readyz` at 200 although Redis may evict keys (`maxmemory`
    /// with a policy other than `noeviction`). Off by default: an evicted
    /// record or claim lets a duplicate execute again (SPEC §4 rule 10).
    pub allow_eviction: bool,
    /// Redis connections in the pool: one per worker thread, so a worker's
    /// commands never wait for another thread's connection task, and fred
    /// reads the replies of all queued commands in one go.
    pub connections: usize,
}

/// `[upstream]` or a route's override.
#[derive(Clone)]
pub struct Upstream {
    /// Base URL; the request path and query are appended.
    pub url: Uri,
    /// Time allowed for the whole answer.
    pub timeout: Duration,
}

impl fmt::Debug for Upstream {
    /// Prints the URL without its userinfo password, like the store URL.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("url", &redact_url(&self.url.to_string()))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// HMAC digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// HMAC-SHA-256.
    Sha256,
    /// HMAC-SHA-512.
    Sha512,
}

/// Text encoding of a presented signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Lower- or upper-case hex.
    Hex,
    /// Standard base64 (padding optional).
    Base64,
}

/// Units of a timestamp value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampUnit {
    /// Unix seconds.
    Seconds,
    /// Unix milliseconds.
    Millis,
}

/// The freshness check of a route.
#[derive(Debug, Clone)]
pub struct TimestampRule {
    /// Where the timestamp is read.
    pub selector: Selector,
    /// Its unit.
    pub unit: TimestampUnit,
    /// Largest allowed |now − timestamp|.
    pub tolerance: Duration,
}

/// The generic `scheme = "hmac"` parameters.
#[derive(Debug, Clone)]
pub struct HmacScheme {
    /// Any one may match (rotation).
    pub secrets: Vec<Secret>,
    /// Digest.
    pub algorithm: Algorithm,
    /// Where the presented signature is read.
    pub signature: Selector,
    /// How it is encoded.
    pub encoding: Encoding,
    /// Stripped before decoding, e.g. `sha256=`.
    pub prefix: String,
    /// The signed content.
    pub message: Template,
    /// Freshness check, if any.
    pub timestamp: Option<TimestampRule>,
}

/// A published sender's signature scheme (SPEC §2 "Presets").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresetKind {
    /// Standard Webhooks / Svix: `webhook-*` or `svix-*` headers.
    StandardWebhooks,
    /// Stripe: `Stripe-Signature: t=…,v1=…`.
    Stripe,
    /// GitHub: `X-Hub-Signature-256: sha256=…`.
    Github,
    /// Slack: `X-Slack-Signature: v0=…`.
    Slack,
    /// Shopify: `X-Shopify-Hmac-Sha256: <base64>`.
    Shopify,
}

impl PresetKind {
    /// Every preset with its `scheme` name.
    pub const ALL: [(&'static str, Self); 5] = [
        ("standard-webhooks", Self::StandardWebhooks),
        ("stripe", Self::Stripe),
        ("github", Self::Github),
        ("slack", Self::Slack),
        ("shopify", Self::Shopify),
    ];

    /// The sender's own replay window, if its scheme signs a timestamp.
    pub fn default_tolerance(self) -> Option<Duration> {
        match self {
            Self::StandardWebhooks | Self::Stripe | Self::Slack => Some(Duration::from_secs(300)),
            Self::Github | Self::Shopify => None,
        }
    }

    /// The idempotency key the sender's documentation recommends.
    pub fn default_key(self) -> KeyPart {
        let header = |name: &'static str| {
            KeyPart::Value(Selector::Header(http::HeaderName::from_static(name)))
        };
        match self {
            Self::StandardWebhooks => KeyPart::SignedId,
            Self::Stripe => KeyPart::Value(Selector::Json("/id".into())),
            Self::Github => header("x-github-delivery"),
            Self::Slack => KeyPart::Value(Selector::Json("/event_id".into())),
            Self::Shopify => header("x-shopify-webhook-id"),
        }
    }
}

/// A preset route's parameters: everything else is fixed by the sender.
#[derive(Debug, Clone)]
pub struct Preset {
    /// Which sender.
    pub kind: PresetKind,
    /// MAC keys, in configured order (rotation: any may match). For
    /// standard-webhooks these are the decoded `whsec_` keys.
    pub keys: Vec<Secret>,
    /// Replay window (`None` for senders that sign no timestamp).
    pub tolerance: Option<Duration>,
}

/// How a route authenticates deliveries.
#[derive(Debug, Clone)]
pub enum Scheme {
    /// No verification (warned about at start-up).
    None,
    /// Generic HMAC.
    Hmac(HmacScheme),
    /// A published sender's scheme.
    Preset(Preset),
}

impl Scheme {
    /// How many secrets the scheme tries (the range of `secret_index`).
    pub fn secret_count(&self) -> usize {
        match self {
            Self::None => 0,
            Self::Hmac(h) => h.secrets.len(),
            Self::Preset(p) => p.keys.len(),
        }
    }

    /// The signature tolerance, which `retention` must exceed (SPEC §4 rule 8).
    pub fn tolerance(&self) -> Option<Duration> {
        match self {
            Self::None => None,
            Self::Hmac(h) => h.timestamp.as_ref().map(|t| t.tolerance),
            Self::Preset(p) => p.tolerance,
        }
    }
}

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
    ranges: Vec<(u16, u16)>,
}

impl CacheStatus {
    fn parse(items: &[String]) -> Result<Self, String> {
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
    /// Enforce or shadow.
    pub mode: Mode,
    /// Fail closed or open.
    pub on_unavailable: OnUnavailable,
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
}

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Requests that match no route.
    pub unmatched: Unmatched,
    /// Listener addresses.
    pub listen: Listen,
    /// Resource limits.
    pub limits: Limits,
    /// The store.
    pub store: StoreConfig,
    /// Default upstream (used by unmatched requests and routes without an override).
    pub upstream: Upstream,
    /// Store-wide default for `on_unavailable`.
    pub on_unavailable: OnUnavailable,
    /// Bearer token of `/admin/records`; `None` disables it.
    pub admin_token: Option<Secret>,
    /// Routes, in file order.
    pub routes: Vec<Route>,
}

impl Config {
    /// Re-reads every `file:` secret (SIGHUP). Returns how many changed,
    /// or the errors of those that could not be read (they keep their old
    /// value; the others are still updated).
    pub fn reload_secrets(&self) -> Result<usize, Vec<String>> {
        let route_secrets = self.routes.iter().flat_map(|route| match &route.scheme {
            Scheme::None => &[][..],
            Scheme::Hmac(hmac) => &hmac.secrets[..],
            Scheme::Preset(preset) => &preset.keys[..],
        });
        let mut changed = 0;
        let mut errors = Vec::new();
        for secret in route_secrets.chain(self.admin_token.iter()) {
            match secret.reload() {
                Ok(true) => changed += 1,
                Ok(false) => {}
                Err(error) => errors.push(error),
            }
        }
        if errors.is_empty() {
            Ok(changed)
        } else {
            Err(errors)
        }
    }
}

/// The admin listener address a configuration file names, read without
/// resolving secrets or validating anything else (for `idemgate healthcheck`).
pub fn admin_address(path: &Path) -> Result<SocketAddr, String> {
    #[derive(serde::Deserialize)]
    struct Listen {
        admin: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Partial {
        listen: Option<Listen>,
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let partial: Partial = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let admin = partial
        .listen
        .and_then(|l| l.admin)
        .unwrap_or_else(|| raw::DEFAULT_ADMIN_ADDR.to_owned());
    admin
        .parse()
        .map_err(|_| format!("listen.admin: {admin:?} is not an address"))
}

/// Collects errors with their key paths.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn push(&mut self, key: &str, message: impl fmt::Display) {
        self.0.push(format!("{key}: {message}"));
    }

    fn take<T>(&mut self, key: &str, result: Result<T, String>) -> Option<T> {
        result.map_err(|e| self.push(key, e)).ok()
    }

    fn duration(&mut self, key: &str, text: Option<&str>, default: &str) -> Duration {
        self.take(key, parse_duration(text.unwrap_or(default)))
            .unwrap_or(Duration::from_secs(1))
    }

    fn choice<T: Copy>(
        &mut self,
        key: &str,
        text: Option<&str>,
        default: T,
        options: &[(&str, T)],
    ) -> T {
        let Some(text) = text else { return default };
        if let Some((_, value)) = options.iter().find(|(name, _)| *name == text) {
            return *value;
        }
        let names: Vec<String> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
        self.push(
            key,
            format!(
                "{text:?} is not valid; expected one of {}",
                names.join(", ")
            ),
        );
        default
    }
}

impl Config {
    /// Reads, parses and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(vec![format!("{}: {e}", path.display())]))?;
        Self::parse(&text)
    }

    /// Parses and validates configuration text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError(vec![e.to_string()]))?;
        Self::try_from(raw)
    }

    /// Legal but risky settings, printed at start-up and by `check-config`.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for (index, route) in self.routes.iter().enumerate() {
            let key = format!("route[{index}]");
            match &route.scheme {
                Scheme::None => warnings.push(format!(
                    "{key}.signature.scheme: \"none\" — deliveries are not authenticated; anyone who can reach the proxy can trigger the backend"
                )),
                Scheme::Preset(preset) if preset.tolerance.is_none() => warnings.push(format!(
                    "{key}.signature.scheme: this sender signs no timestamp, so replay protection rests on retention ({:?}) alone: a delivery captured and re-sent after its record expired reaches the backend",
                    route.idempotency.retention
                )),
                Scheme::Preset(_) => {}
                Scheme::Hmac(hmac) => match &hmac.timestamp {
                    None => warnings.push(format!(
                        "{key}.signature.timestamp: not set, so no window is checked and replay protection rests on retention ({:?}) alone: a delivery captured and re-sent after its record expired reaches the backend; set timestamp (and cover it in message) if the sender stamps its deliveries",
                        route.idempotency.retention
                    )),
                    Some(rule) if !timestamp_is_signed(hmac, rule) => warnings.push(format!(
                        "{key}.signature.message: does not cover the timestamp, so a captured request can be re-sent with a fresh one; add {{timestamp}}"
                    )),
                    Some(_) => {}
                },
            }
            if route.case_sensitive && self.unmatched == Unmatched::Forward {
                warnings.push(format!(
                    "{key}.case_sensitive: with unmatched = \"forward\", a request for {:?} spelled in another case is passed through unverified; a backend that matches paths case-insensitively executes it (keep case_sensitive only if the backend tells the cases apart, or set unmatched = \"reject\")",
                    route.path_prefix
                ));
            }
            if let Some(tolerance) = route.scheme.tolerance() {
                if route.idempotency.retention <= tolerance * 2 {
                    warnings.push(format!(
                        "{key}.idempotency.retention: {:?} is at most twice the tolerance ({tolerance:?}); a request stamped in the future by a fast sender clock stays valid for up to 2 × tolerance",
                        route.idempotency.retention
                    ));
                }
            }
        }
        warnings
    }
}

/// Whether the signed message includes the timestamp value.
fn timestamp_is_signed(hmac: &HmacScheme, rule: &TimestampRule) -> bool {
    hmac.message.segments.iter().any(|segment| match segment {
        Segment::Timestamp => true,
        Segment::Body => rule.selector.needs_body(),
        Segment::Value(selector) => *selector == rule.selector,
        Segment::Literal(_) | Segment::Method | Segment::Path => false,
    })
}

impl TryFrom<RawConfig> for Config {
    type Error = ConfigError;

    fn try_from(raw: RawConfig) -> Result<Self, ConfigError> {
        let mut p = Problems::default();
        let unmatched = p.choice(
            "unmatched",
            raw.unmatched.as_deref(),
            Unmatched::Forward,
            &[
                ("forward", Unmatched::Forward),
                ("reject", Unmatched::Reject),
            ],
        );
        let listen = Listen {
            proxy: socket(
                &mut p,
                "listen.proxy",
                raw.listen.proxy,
                raw::DEFAULT_PROXY_ADDR,
            ),
            admin: socket(
                &mut p,
                "listen.admin",
                raw.listen.admin,
                raw::DEFAULT_ADMIN_ADDR,
            ),
        };
        let limits = Limits {
            max_body_bytes: raw
                .limits
                .max_body_bytes
                .unwrap_or(raw::DEFAULT_MAX_BODY_BYTES),
            header_read_timeout: p.duration(
                "limits.header_read_timeout",
                raw.limits.header_read_timeout.as_deref(),
                raw::DEFAULT_HEADER_READ_TIMEOUT,
            ),
            shutdown_grace: p.duration(
                "limits.shutdown_grace",
                raw.limits.shutdown_grace.as_deref(),
                raw::DEFAULT_SHUTDOWN_GRACE,
            ),
            body_read_timeout: p.duration(
                "limits.body_read_timeout",
                raw.limits.body_read_timeout.as_deref(),
                raw::DEFAULT_BODY_READ_TIMEOUT,
            ),
            max_connections: raw
                .limits
                .max_connections
                .unwrap_or(raw::DEFAULT_MAX_CONNECTIONS),
            max_headers: raw.limits.max_headers.unwrap_or(raw::DEFAULT_MAX_HEADERS),
            max_header_bytes: raw
                .limits
                .max_header_bytes
                .unwrap_or(raw::DEFAULT_MAX_HEADER_BYTES),
            max_waiting_per_key: raw
                .limits
                .max_waiting_per_key
                .unwrap_or(raw::DEFAULT_MAX_WAITING_PER_KEY),
            max_stored_answer_bytes: raw
                .limits
                .max_stored_answer_bytes
                .unwrap_or(raw::DEFAULT_MAX_STORED_ANSWER_BYTES),
            worker_threads: match raw
                .limits
                .worker_threads
                .unwrap_or(raw::DEFAULT_WORKER_THREADS)
            {
                0 => std::thread::available_parallelism().map_or(1, usize::from),
                threads => threads,
            },
        };
        if limits.worker_threads > MAX_WORKER_THREADS {
            p.push(
                "limits.worker_threads",
                format!("must be at most {MAX_WORKER_THREADS}"),
            );
        }
        for (key, value, least) in [
            ("limits.max_connections", limits.max_connections, 1),
            ("limits.max_headers", limits.max_headers, 1),
            ("limits.max_header_bytes", limits.max_header_bytes, 8192),
        ] {
            if value < least {
                p.push(key, format!("must be at least {least}"));
            }
        }
        if limits.body_read_timeout.is_zero() {
            p.push("limits.body_read_timeout", "must be greater than zero");
        }
        if limits.header_read_timeout.is_zero() {
            p.push("limits.header_read_timeout", "must be greater than zero");
        }
        if limits.max_body_bytes == 0 {
            p.push("limits.max_body_bytes", "must be at least 1");
        }
        if limits.max_stored_answer_bytes > raw::MAX_STORED_ANSWER_BYTES {
            p.push(
                "limits.max_stored_answer_bytes",
                format!("must be at most {}", raw::MAX_STORED_ANSWER_BYTES),
            );
        }
        let store = store_config(&mut p, &raw.store, limits.worker_threads);
        let on_unavailable = on_unavailable(
            &mut p,
            "store.on_unavailable",
            raw.store.on_unavailable.as_deref(),
            OnUnavailable::Reject,
        );
        let upstream = Upstream {
            url: upstream_url(&mut p, "upstream.url", &raw.upstream.url),
            timeout: p.duration(
                "upstream.timeout",
                raw.upstream.timeout.as_deref(),
                raw::DEFAULT_UPSTREAM_TIMEOUT,
            ),
        };
        if upstream.timeout.is_zero() {
            p.push("upstream.timeout", "must be greater than zero");
        }
        if store.command_timeout.is_zero() {
            p.push("store.command_timeout", "must be greater than zero");
        }
        let admin_token = raw
            .admin
            .token
            .as_deref()
            .and_then(|spec| p.take("admin.token", Secret::resolve(spec)));

        let mut routes: Vec<Route> = Vec::new();
        for (index, raw_route) in raw.routes.into_iter().enumerate() {
            let key = format!("route[{index}]");
            if let Some(route) = route(&mut p, &key, raw_route, &upstream, on_unavailable) {
                if routes.iter().any(|r| r.name == route.name) {
                    p.push(&format!("{key}.name"), "duplicate route name");
                }
                let shadowed = routes.iter().find(|r| {
                    let fold = !(r.case_sensitive && route.case_sensitive);
                    canonical_prefix(&r.path_prefix, fold)
                        == canonical_prefix(&route.path_prefix, fold)
                        && r.methods.iter().any(|m| route.methods.contains(m))
                });
                if let Some(other) = shadowed {
                    p.push(
                        &format!("{key}.path_prefix"),
                        format!(
                            "route {:?} already matches {:?} for the same methods",
                            other.name, route.path_prefix
                        ),
                    );
                }
                routes.push(route);
            }
        }
        if p.0.is_empty() {
            Ok(Self {
                unmatched,
                listen,
                limits,
                store,
                upstream,
                on_unavailable,
                admin_token,
                routes,
            })
        } else {
            Err(ConfigError(p.0))
        }
    }
}

fn socket(p: &mut Problems, key: &str, text: Option<String>, default: &str) -> SocketAddr {
    let text = text.unwrap_or_else(|| default.to_owned());
    p.take(
        key,
        text.parse()
            .map_err(|_| format!("{text:?} is not an address such as \"127.0.0.1:8080\"")),
    )
    .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
}

fn upstream_url(p: &mut Problems, key: &str, text: &str) -> Uri {
    let parsed = text.parse::<Uri>().ok().filter(|uri| {
        uri.scheme_str() == Some("http") && uri.authority().is_some() && uri.query().is_none()
    });
    match parsed {
        Some(uri) => uri,
        None => {
            p.push(
                key,
                format!(
                    "{:?} is not an http:// base URL such as \"http://127.0.0.1:3000\"",
                    redact_url(text)
                ),
            );
            Uri::from_static("http://127.0.0.1:1")
        }
    }
}

fn on_unavailable(
    p: &mut Problems,
    key: &str,
    text: Option<&str>,
    default: OnUnavailable,
) -> OnUnavailable {
    p.choice(
        key,
        text,
        default,
        &[
            ("reject", OnUnavailable::Reject),
            ("forward", OnUnavailable::Forward),
        ],
    )
}

fn store_config(p: &mut Problems, raw: &raw::RawStore, connections: usize) -> StoreConfig {
    let backend = match raw.kind.as_str() {
        "redis" => {
            if raw.path.is_some() {
                p.push("store.path", "only valid with kind = \"embedded\"");
            }
            let url = raw.url.clone().unwrap_or_default();
            let known = [
                "redis://",
                "rediss://",
                "redis-cluster://",
                "rediss-cluster://",
                "redis-sentinel://",
                "rediss-sentinel://",
            ];
            if !known.iter().any(|scheme| url.starts_with(scheme)) {
                p.push(
                    "store.url",
                    format!(
                        "{:?} is not a Redis URL; expected one of {}",
                        redact_url(&url),
                        known.join(" ")
                    ),
                );
            }
            StoreBackend::Redis { url }
        }
        "embedded" => {
            if raw.url.is_some() {
                p.push("store.url", "only valid with kind = \"redis\"");
            }
            match &raw.path {
                Some(path) if !path.is_empty() => StoreBackend::Embedded {
                    path: PathBuf::from(path),
                },
                _ => {
                    p.push(
                        "store.path",
                        "required with kind = \"embedded\", e.g. \"data/idemgate.redb\"",
                    );
                    StoreBackend::Embedded {
                        path: PathBuf::new(),
                    }
                }
            }
        }
        other => {
            p.push(
                "store.kind",
                format!("{other:?} is not valid; expected \"redis\" or \"embedded\""),
            );
            StoreBackend::Embedded {
                path: PathBuf::new(),
            }
        }
    };
    let key_prefix = raw
        .key_prefix
        .clone()
        .unwrap_or_else(|| raw::DEFAULT_KEY_PREFIX.to_owned());
    if key_prefix.is_empty() || key_prefix.contains(['{', '}']) {
        p.push(
            "store.key_prefix",
            "must be non-empty and free of '{' and '}' (they would change the cluster slot)",
        );
    }
    let replica_ack = match raw.min_replicas_ack {
        None | Some(0) => None,
        Some(replicas) => {
            if !matches!(backend, StoreBackend::Redis { .. }) {
                p.push("store.min_replicas_ack", "only valid with kind = \"redis\"");
            }
            let timeout = p.duration(
                "store.replica_ack_timeout",
                raw.replica_ack_timeout.as_deref(),
                raw::DEFAULT_REPLICA_ACK_TIMEOUT,
            );
            if timeout.is_zero() {
                p.push(
                    "store.replica_ack_timeout",
                    "must be greater than zero (0 would make WAIT block forever)",
                );
            }
            Some(ReplicaAck { replicas, timeout })
        }
    };
    let allow_eviction = raw.allow_eviction.unwrap_or(false);
    if raw.allow_eviction.is_some() && !matches!(backend, StoreBackend::Redis { .. }) {
        p.push(
            "store.allow_eviction",
            "only valid with kind = \"redis\" (the embedded store never evicts)",
        );
    }
    if replica_ack.is_none() && raw.replica_ack_timeout.is_some() {
        p.push(
            "store.replica_ack_timeout",
            "has no effect without min_replicas_ack",
        );
    }
    StoreConfig {
        backend,
        replica_ack,
        allow_eviction,
        key_prefix,
        connections,
        command_timeout: p.duration(
            "store.command_timeout",
            raw.command_timeout.as_deref(),
            raw::DEFAULT_COMMAND_TIMEOUT,
        ),
    }
}

fn route(
    p: &mut Problems,
    key: &str,
    raw: RawRoute,
    default_upstream: &Upstream,
    store_on_unavailable: OnUnavailable,
) -> Option<Route> {
    let name_ok = !raw.name.is_empty()
        && raw.name.len() <= 64
        && raw
            .name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !name_ok {
        p.push(
            &format!("{key}.name"),
            format!(
                "{:?} must be 1-64 characters of a-z, 0-9, '_' or '-' (it is a metric label and part of the store key)",
                raw.name
            ),
        );
    }
    if let Err(problem) = crate::pipeline::route::check_prefix(&raw.path_prefix) {
        p.push(&format!("{key}.path_prefix"), problem);
    }
    let methods = raw
        .methods
        .unwrap_or_else(|| vec!["POST".to_owned()])
        .into_iter()
        .filter_map(|m| {
            let method = Method::from_bytes(m.to_ascii_uppercase().as_bytes()).ok();
            if method.is_none() {
                p.push(
                    &format!("{key}.methods"),
                    format!("{m:?} is not an HTTP method"),
                );
            }
            method
        })
        .collect::<Vec<_>>();
    if methods.is_empty() {
        p.push(&format!("{key}.methods"), "must list at least one method");
    }
    let upstream = match &raw.upstream {
        Some(url) => Upstream {
            url: upstream_url(p, &format!("{key}.upstream"), url),
            timeout: default_upstream.timeout,
        },
        None => default_upstream.clone(),
    };
    let scheme = scheme(p, &format!("{key}.signature"), &raw.signature);
    let idempotency = idempotency(
        p,
        &format!("{key}.idempotency"),
        &raw.idempotency,
        store_on_unavailable,
        &scheme,
    );
    if let Some(tolerance) = scheme.tolerance() {
        if idempotency.retention <= tolerance {
            p.push(
                &format!("{key}.idempotency.retention"),
                format!(
                    "must exceed the signature tolerance ({tolerance:?}), or a captured request still inside the window could be replayed to the backend after its record expired"
                ),
            );
        }
    }
    Some(Route {
        name: raw.name,
        path_prefix: raw.path_prefix,
        case_sensitive: raw.case_sensitive.unwrap_or(false),
        methods,
        upstream,
        scheme,
        idempotency,
    })
}

fn scheme(p: &mut Problems, key: &str, raw: &RawSignature) -> Scheme {
    let secrets: Vec<Secret> = raw
        .secrets
        .iter()
        .enumerate()
        .filter_map(|(i, spec)| p.take(&format!("{key}.secrets[{i}]"), Secret::resolve(spec)))
        .collect();
    match raw.scheme.as_str() {
        "none" => {
            let all = [
                ("secrets", !raw.secrets.is_empty()),
                ("tolerance", raw.tolerance.is_some()),
            ];
            for (field, set) in all.into_iter().chain(hmac_only_keys(raw)) {
                if set {
                    p.push(
                        &format!("{key}.{field}"),
                        "has no effect with scheme = \"none\"",
                    );
                }
            }
            Scheme::None
        }
        "hmac" => Scheme::Hmac(hmac_scheme(p, key, raw, secrets)),
        name => match PresetKind::ALL.iter().find(|(n, _)| *n == name) {
            Some((_, kind)) => Scheme::Preset(preset(p, key, raw, *kind, &secrets)),
            None => {
                let names: Vec<&str> = PresetKind::ALL.iter().map(|(n, _)| *n).collect();
                p.push(
                    &format!("{key}.scheme"),
                    format!(
                        "{name:?} is not valid; expected \"hmac\", \"none\" or a preset: {}",
                        names.join(", ")
                    ),
                );
                Scheme::None
            }
        },
    }
}

/// The `[route.signature]` keys only `scheme = "hmac"` reads, and whether
/// each is set (an error with any other scheme).
fn hmac_only_keys(raw: &RawSignature) -> [(&'static str, bool); 7] {
    [
        ("algorithm", raw.algorithm.is_some()),
        ("signature", raw.signature.is_some()),
        ("encoding", raw.encoding.is_some()),
        ("prefix", raw.prefix.is_some()),
        ("message", raw.message.is_some()),
        ("timestamp", raw.timestamp.is_some()),
        ("timestamp_unit", raw.timestamp_unit.is_some()),
    ]
}

fn preset(
    p: &mut Problems,
    key: &str,
    raw: &RawSignature,
    kind: PresetKind,
    secrets: &[Secret],
) -> Preset {
    for (field, set) in hmac_only_keys(raw) {
        if set {
            p.push(
                &format!("{key}.{field}"),
                format!(
                    "only for scheme = \"hmac\"; scheme = {:?} fixes it itself",
                    raw.scheme
                ),
            );
        }
    }
    if raw.secrets.is_empty() {
        p.push(
            &format!("{key}.secrets"),
            "at least one secret is required, e.g. [\"env:WEBHOOK_SECRET\"]",
        );
    }
    let tolerance = match (kind.default_tolerance(), raw.tolerance.as_deref()) {
        (None, Some(_)) => {
            p.push(
                &format!("{key}.tolerance"),
                format!(
                    "scheme = {:?} signs no timestamp, so there is no window to set",
                    raw.scheme
                ),
            );
            None
        }
        (None, None) => None,
        (Some(default), None) => Some(default),
        (Some(_), Some(text)) => {
            let tolerance = p.duration(&format!("{key}.tolerance"), Some(text), "5m");
            if tolerance.is_zero() {
                p.push(&format!("{key}.tolerance"), "must be greater than zero");
            }
            Some(tolerance)
        }
    };
    let keys = match kind {
        PresetKind::StandardWebhooks => secrets
            .iter()
            .enumerate()
            .filter_map(|(i, secret)| {
                p.take(
                    &format!("{key}.secrets[{i}]"),
                    secret
                        .derived(crate::signature::standard_webhooks::decode_secret)
                        .map_err(|_| {
                            "a standard-webhooks secret is \"whsec_\" followed by base64".to_owned()
                        }),
                )
            })
            .collect(),
        _ => secrets.to_vec(),
    };
    Preset {
        kind,
        keys,
        tolerance,
    }
}

fn hmac_scheme(
    p: &mut Problems,
    key: &str,
    raw: &RawSignature,
    secrets: Vec<Secret>,
) -> HmacScheme {
    if raw.secrets.is_empty() {
        p.push(
            &format!("{key}.secrets"),
            "at least one secret is required, e.g. [\"env:WEBHOOK_SECRET\"]",
        );
    }
    let algorithm = p.choice(
        &format!("{key}.algorithm"),
        raw.algorithm.as_deref(),
        Algorithm::Sha256,
        &[("sha256", Algorithm::Sha256), ("sha512", Algorithm::Sha512)],
    );
    let signature = match &raw.signature {
        Some(text) => p
            .take(&format!("{key}.signature"), Selector::parse(text))
            .unwrap_or(Selector::Query(String::new())),
        None => {
            p.push(
                &format!("{key}.signature"),
                "required with scheme = \"hmac\", e.g. \"header:X-Signature\"",
            );
            Selector::Query(String::new())
        }
    };
    let encoding = p.choice(
        &format!("{key}.encoding"),
        raw.encoding.as_deref(),
        Encoding::Hex,
        &[("hex", Encoding::Hex), ("base64", Encoding::Base64)],
    );
    let message = match &raw.message {
        Some(text) => p
            .take(&format!("{key}.message"), Template::parse(text))
            .unwrap_or_else(Template::body_only),
        None => Template::body_only(),
    };
    let timestamp = raw.timestamp.as_ref().and_then(|text| {
        let selector = p.take(&format!("{key}.timestamp"), Selector::parse(text))?;
        let unit = p.choice(
            &format!("{key}.timestamp_unit"),
            raw.timestamp_unit.as_deref(),
            TimestampUnit::Seconds,
            &[("s", TimestampUnit::Seconds), ("ms", TimestampUnit::Millis)],
        );
        let tolerance = p.duration(
            &format!("{key}.tolerance"),
            raw.tolerance.as_deref(),
            raw::DEFAULT_TOLERANCE,
        );
        if tolerance.is_zero() {
            p.push(&format!("{key}.tolerance"), "must be greater than zero");
        }
        Some(TimestampRule {
            selector,
            unit,
            tolerance,
        })
    });
    if raw.timestamp.is_none() {
        for (field, set) in [
            ("timestamp_unit", raw.timestamp_unit.is_some()),
            ("tolerance", raw.tolerance.is_some()),
        ] {
            if set {
                p.push(
                    &format!("{key}.{field}"),
                    "has no effect without a timestamp selector",
                );
            }
        }
    }
    HmacScheme {
        secrets,
        algorithm,
        signature,
        encoding,
        prefix: raw.prefix.clone().unwrap_or_default(),
        message,
        timestamp,
    }
}

fn selectors(p: &mut Problems, key: &str, items: &[String]) -> Vec<Selector> {
    items
        .iter()
        .enumerate()
        .filter_map(|(i, text)| p.take(&format!("{key}[{i}]"), Selector::parse(text)))
        .collect()
}

fn idempotency(
    p: &mut Problems,
    key: &str,
    raw: &RawIdempotency,
    store_on_unavailable: OnUnavailable,
    scheme: &Scheme,
) -> Idempotency {
    let key_parts = match (&raw.key, scheme) {
        (Some(items), _) => {
            if items.is_empty() {
                p.push(
                    &format!("{key}.key"),
                    "must list at least one part, or be omitted",
                );
            }
            Some(
                selectors(p, &format!("{key}.key"), items)
                    .into_iter()
                    .map(KeyPart::Value)
                    .collect(),
            )
        }
        (None, Scheme::Preset(preset)) => Some(vec![preset.kind.default_key()]),
        (None, _) => None,
    };
    let fingerprint = raw
        .fingerprint
        .clone()
        .unwrap_or_else(|| vec!["method".into(), "path".into(), "body".into()])
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
                    None => Err(format!(
                        "{other:?} is not valid; expected \"method\", \"path\", \"query\", \"body\" or \"header:NAME\""
                    )),
                },
            };
            p.take(&format!("{key}.fingerprint[{i}]"), part)
        })
        .collect::<Vec<_>>();
    if fingerprint.is_empty() {
        p.push(&format!("{key}.fingerprint"), "must list at least one part");
    }
    let fingerprint_ignore = selectors(
        p,
        &format!("{key}.fingerprint_ignore"),
        raw.fingerprint_ignore.as_deref().unwrap_or_default(),
    );
    for (i, selector) in fingerprint_ignore.iter().enumerate() {
        if !selector.needs_body() {
            p.push(
                &format!("{key}.fingerprint_ignore[{i}]"),
                "only json:/pointer and form:FIELD selectors name body fields",
            );
        }
    }
    let lease = p.duration(
        &format!("{key}.lease"),
        raw.lease.as_deref(),
        raw::DEFAULT_LEASE,
    );
    let retention = p.duration(
        &format!("{key}.retention"),
        raw.retention.as_deref(),
        raw::DEFAULT_RETENTION,
    );
    let wait_timeout = p.duration(
        &format!("{key}.wait_timeout"),
        raw.wait_timeout.as_deref(),
        raw::DEFAULT_WAIT_TIMEOUT,
    );
    let unknown_hold = p.duration(
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
            p.push(&format!("{key}.{field}"), "must be at least 100ms");
        }
    }
    if !fingerprint_ignore.is_empty() && !fingerprint.contains(&FingerprintPart::Body) {
        p.push(
            &format!("{key}.fingerprint_ignore"),
            "has no effect unless \"body\" is part of the fingerprint",
        );
    }
    if raw.cache_status.as_ref().is_some_and(Vec::is_empty) {
        p.push(
            &format!("{key}.cache_status"),
            "must list at least one status class, e.g. [\"2xx\"]",
        );
    }
    let cache_status = match &raw.cache_status {
        Some(items) => p
            .take(&format!("{key}.cache_status"), CacheStatus::parse(items))
            .unwrap_or(CacheStatus { ranges: Vec::new() }),
        None => CacheStatus {
            ranges: vec![(200, 299), (400, 499)],
        },
    };
    Idempotency {
        key: key_parts,
        require_key: raw.require_key.unwrap_or(true),
        fingerprint,
        fingerprint_ignore,
        lease,
        retention,
        on_in_flight: p.choice(
            &format!("{key}.on_in_flight"),
            raw.on_in_flight.as_deref(),
            OnInFlight::Wait,
            &[
                ("wait", OnInFlight::Wait),
                ("conflict", OnInFlight::Conflict),
            ],
        ),
        wait_timeout,
        cache_status,
        on_upstream_timeout: p.choice(
            &format!("{key}.on_upstream_timeout"),
            raw.on_upstream_timeout.as_deref(),
            OnUpstreamTimeout::Hold,
            &[
                ("hold", OnUpstreamTimeout::Hold),
                ("release", OnUpstreamTimeout::Release),
            ],
        ),
        unknown_hold,
        mode: p.choice(
            &format!("{key}.mode"),
            raw.mode.as_deref(),
            Mode::Enforce,
            &[("enforce", Mode::Enforce), ("shadow", Mode::Shadow)],
        ),
        on_unavailable: on_unavailable(
            p,
            &format!("{key}.on_unavailable"),
            raw.on_unavailable.as_deref(),
            store_on_unavailable,
        ),
    }
}

/// A minimal unsigned route for unit tests elsewhere in the crate.
#[cfg(test)]
pub(crate) fn test_route(idempotency: &str) -> Route {
    let text = format!(
        "[store]\nkind = \"embedded\"\npath = \"/tmp/unused.redb\"\n\
         [upstream]\nurl = \"http://127.0.0.1:1\"\n\
         [[route]]\nname = \"r\"\npath_prefix = \"/\"\n\
         [route.signature]\nscheme = \"none\"\n\
         [route.idempotency]\n{idempotency}\n"
    );
    Config::parse(&text).expect("test route").routes.remove(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        [store]
        kind = "embedded"
        path = "/tmp/x.redb"
        [upstream]
        url = "http://127.0.0.1:3000"
        [[route]]
        name = "payments"
        path_prefix = "/notify"
        [route.signature]
        scheme = "hmac"
        secrets = ["literal:s3cret", "literal:old"]
        signature = "header:X-Signature"
        timestamp = "json:/timestamp"
        timestamp_unit = "ms"
        tolerance = "5m"
        [route.idempotency]
        key = ["json:/paymentNo"]
        lease = "30s"
    "#;

    #[test]
    fn minimal_file_loads_with_defaults() {
        let config = Config::parse(MINIMAL).unwrap();
        let route = &config.routes[0];
        assert_eq!(route.methods, vec![Method::POST]);
        assert_eq!(route.idempotency.retention, Duration::from_secs(86_400));
        assert!(route.idempotency.cache_status.contains(201));
        assert!(route.idempotency.cache_status.contains(404));
        assert!(!route.idempotency.cache_status.contains(500));
        let Scheme::Hmac(h) = &route.scheme else {
            panic!("expected hmac")
        };
        assert_eq!(h.secrets.len(), 2);
        assert_eq!(h.message, Template::body_only());
    }

    #[test]
    fn worker_threads_default_to_one_and_size_the_redis_pool() {
        let config = Config::parse(MINIMAL).unwrap();
        assert_eq!(config.limits.worker_threads, 1);
        assert_eq!(config.store.connections, 1);
        let with = |threads: &str| {
            MINIMAL.replace(
                "[store]",
                &format!("[limits]\nworker_threads = {threads}\n[store]"),
            )
        };
        let config = Config::parse(&with("3")).unwrap();
        assert_eq!(
            (config.limits.worker_threads, config.store.connections),
            (3, 3)
        );
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(
            Config::parse(&with("0")).unwrap().limits.worker_threads,
            cpus
        );
        let err = Config::parse(&with("5000")).unwrap_err().0.join("\n");
        assert!(
            err.contains("limits.worker_threads: must be at most 1024"),
            "{err}"
        );
    }

    #[test]
    fn secrets_never_print() {
        let config = Config::parse(MINIMAL).unwrap();
        let printed = format!("{config:?}");
        assert!(!printed.contains("s3cret"), "{printed}");
        assert!(printed.contains("redacted"));
    }

    #[test]
    fn errors_name_their_keys_and_are_all_reported() {
        let text = MINIMAL
            .replace(
                "lease = \"30s\"",
                "lease = \"30 parsecs\"\nretention = \"1m\"",
            )
            .replace("kind = \"embedded\"", "kind = \"memcached\"");
        let err = Config::parse(&text).unwrap_err();
        let joined = err.0.join("\n");
        assert!(joined.contains("route[0].idempotency.lease:"), "{joined}");
        assert!(
            joined.contains("route[0].idempotency.retention: must exceed"),
            "{joined}"
        );
        assert!(joined.contains("store.kind:"), "{joined}");
    }

    #[test]
    fn missing_env_secret_is_named() {
        let text = MINIMAL.replace("literal:old", "env:IDEMGATE_TEST_SURELY_UNSET");
        let err = Config::parse(&text).unwrap_err();
        assert!(
            err.0[0].starts_with("route[0].signature.secrets[1]: environment variable"),
            "{err}"
        );
    }

    #[test]
    fn case_sensitive_prefixes_warn_when_forwarding_and_compare_canonically() {
        let sensitive = MINIMAL.replace(
            "path_prefix = \"/notify\"",
            "path_prefix = \"/notify\"\ncase_sensitive = true",
        );
        let config = Config::parse(&sensitive).unwrap();
        assert!(config.routes[0].case_sensitive);
        let warned = config.warnings().join("\n");
        assert!(warned.contains("route[0].case_sensitive: "), "{warned}");
        let rejecting = Config::parse(&format!("unmatched = \"reject\"\n{sensitive}")).unwrap();
        assert!(!rejecting.warnings().join("\n").contains("case_sensitive"));
        let twin = format!(
            "{MINIMAL}\n[[route]]\nname = \"twin\"\npath_prefix = \"/Notify/\"\n[route.signature]\nscheme = \"none\"\n"
        );
        let err = Config::parse(&twin).unwrap_err().0.join("\n");
        assert!(
            err.contains("route[1].path_prefix: route \"payments\" already matches"),
            "{err}"
        );
        let bad = MINIMAL.replace("\"/notify\"", "\"/notify%20x\"");
        let err = Config::parse(&bad).unwrap_err().0.join("\n");
        assert!(err.contains("route[0].path_prefix: "), "{err}");
    }

    #[test]
    fn redis_passwords_never_print() {
        let text = MINIMAL.replace(
            "kind = \"embedded\"\n        path = \"/tmp/x.redb\"",
            "kind = \"redis\"\n        url = \"redis://app:hunter2@127.0.0.1:6379/0\"",
        );
        let printed = format!("{:?}", Config::parse(&text).unwrap());
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(
            printed.contains("redis://app:<redacted>@127.0.0.1:6379/0"),
            "{printed}"
        );
    }

    #[test]
    fn upstream_credentials_never_print() {
        let text = MINIMAL
            .replace(
                "url = \"http://127.0.0.1:3000\"",
                "url = \"http://user:upstream-pw@127.0.0.1:3000\"",
            )
            .replace(
                "path_prefix = \"/notify\"",
                "path_prefix = \"/notify\"\nupstream = \"http://route:route-pw@127.0.0.1:3001\"",
            );
        let config = Config::parse(&text).unwrap();
        let printed = format!("{config:#?}");
        for secret in ["upstream-pw", "route-pw"] {
            assert!(!printed.contains(secret), "{printed}");
        }
        assert!(
            printed.contains("http://user:<redacted>@127.0.0.1:3000/")
                && printed.contains("http://route:<redacted>@127.0.0.1:3001/"),
            "{printed}"
        );
    }

    #[test]
    fn ambiguous_or_ineffective_settings_are_errors() {
        let twice = format!(
            "{MINIMAL}\n[[route]]\nname = \"other\"\npath_prefix = \"/notify\"\n[route.signature]\nscheme = \"none\"\n"
        );
        let err = Config::parse(&twice).unwrap_err().0.join("\n");
        assert!(
            err.contains("route[1].path_prefix: route \"payments\" already matches"),
            "{err}"
        );
        let zero = MINIMAL.replace("[upstream]", "[upstream]\ntimeout = \"0ms\"");
        assert!(Config::parse(&zero).unwrap_err().0[0].starts_with("upstream.timeout"));
        let empty = MINIMAL.replace("lease = \"30s\"", "cache_status = []");
        assert!(Config::parse(&empty).unwrap_err().0[0].contains("cache_status"));
    }

    #[test]
    fn allow_eviction_defaults_off_and_needs_redis() {
        assert!(!Config::parse(MINIMAL).unwrap().store.allow_eviction);
        let embedded = MINIMAL.replace("[upstream]", "allow_eviction = true\n[upstream]");
        let err = Config::parse(&embedded).unwrap_err().0.join("\n");
        assert!(
            err.contains("store.allow_eviction: only valid with kind = \"redis\""),
            "{err}"
        );
        let redis = embedded.replace(
            "kind = \"embedded\"\n        path = \"/tmp/x.redb\"",
            "kind = \"redis\"\n        url = \"redis://127.0.0.1:6379/0\"",
        );
        assert!(Config::parse(&redis).unwrap().store.allow_eviction);
    }

    #[test]
    fn warnings_flag_unsigned_timestamps_and_short_retention() {
        let signed = Config::parse(MINIMAL).unwrap();
        assert!(signed.warnings().is_empty(), "{:?}", signed.warnings());
        let header = MINIMAL.replace("json:/timestamp", "header:X-Timestamp");
        let warnings = Config::parse(&header).unwrap().warnings().join("\n");
        assert!(
            warnings.contains("does not cover the timestamp"),
            "{warnings}"
        );
        let covered = header.replace(
            "timestamp_unit",
            "message = \"{timestamp}.{body}\"\ntimestamp_unit",
        );
        assert!(Config::parse(&covered).unwrap().warnings().is_empty());
        let short = MINIMAL.replace("lease = \"30s\"", "retention = \"9m\"");
        assert!(Config::parse(&short).unwrap().warnings()[0].contains("retention"));
    }

    #[test]
    fn hmac_without_a_timestamp_warns_like_the_presets() {
        let unstamped = MINIMAL
            .replace("timestamp = \"json:/timestamp\"\n", "")
            .replace("timestamp_unit = \"ms\"\n", "")
            .replace("tolerance = \"5m\"\n", "");
        let config = Config::parse(&unstamped).unwrap();
        let warnings = config.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("route[0].signature.timestamp: not set")
                && warnings[0].contains("rests on retention (86400s) alone"),
            "{warnings:?}"
        );
    }

    fn preset_route(signature: &str, idempotency: &str) -> Result<Config, ConfigError> {
        Config::parse(&format!(
            "[store]\nkind = \"embedded\"\npath = \"/tmp/x.redb\"\n[upstream]\nurl = \"http://127.0.0.1:1\"\n\
             [[route]]\nname = \"hook\"\npath_prefix = \"/hook\"\n[route.signature]\n{signature}\n[route.idempotency]\n{idempotency}\n"
        ))
    }

    #[test]
    fn presets_fix_their_own_parameters() {
        let config =
            preset_route("scheme = \"stripe\"\nsecrets = [\"literal:whsec_x\"]", "").unwrap();
        let route = &config.routes[0];
        assert_eq!(
            route.idempotency.key,
            Some(vec![KeyPart::Value(Selector::Json("/id".into()))])
        );
        assert_eq!(route.scheme.tolerance(), Some(Duration::from_secs(300)));

        let err = preset_route(
            "scheme = \"github\"\nsecrets = [\"literal:x\"]\nalgorithm = \"sha512\"\nmessage = \"{body}\"\ntolerance = \"1m\"",
            "",
        )
        .unwrap_err()
        .0
        .join("\n");
        assert!(
            err.contains("route[0].signature.algorithm: only for scheme = \"hmac\""),
            "{err}"
        );
        assert!(
            err.contains("route[0].signature.message: only for scheme = \"hmac\""),
            "{err}"
        );
        assert!(
            err.contains("route[0].signature.tolerance: scheme = \"github\" signs no timestamp"),
            "{err}"
        );

        let err = preset_route(
            "scheme = \"standard-webhooks\"\nsecrets = [\"literal:whsec_***\"]",
            "",
        )
        .unwrap_err();
        assert!(
            err.0[0].starts_with("route[0].signature.secrets[0]"),
            "{err}"
        );
        let err = preset_route("scheme = \"paypal\"\nsecrets = [\"literal:x\"]", "").unwrap_err();
        assert!(
            err.0[0].contains("stripe"),
            "the error lists the presets: {err}"
        );
    }

    #[test]
    fn preset_default_keys_can_be_overridden() {
        let config = preset_route(
            "scheme = \"shopify\"\nsecrets = [\"literal:x\"]",
            "key = [\"header:X-Shopify-Event-Id\"]",
        )
        .unwrap();
        assert_eq!(
            config.routes[0].idempotency.key,
            Some(vec![KeyPart::Value(
                Selector::parse("header:x-shopify-event-id").unwrap()
            )])
        );
        let sw = preset_route(
            "scheme = \"standard-webhooks\"\nsecrets = [\"literal:whsec_AAAA\"]",
            "",
        )
        .unwrap();
        assert_eq!(sw.routes[0].idempotency.key, Some(vec![KeyPart::SignedId]));
    }

    #[test]
    fn presets_without_a_window_warn() {
        for scheme in ["github", "shopify"] {
            let config = preset_route(
                &format!("scheme = \"{scheme}\"\nsecrets = [\"literal:x\"]"),
                "",
            )
            .unwrap();
            let warnings = config.warnings().join("\n");
            assert!(
                warnings.contains("rests on retention"),
                "{scheme}: {warnings}"
            );
        }
        let slack = preset_route("scheme = \"slack\"\nsecrets = [\"literal:x\"]", "").unwrap();
        assert!(slack.warnings().is_empty());
    }

    #[test]
    fn status_classes() {
        let classes = CacheStatus::parse(&["2xx".into(), "409".into()]).unwrap();
        assert!(classes.contains(200) && classes.contains(299) && classes.contains(409));
        assert!(!classes.contains(300) && !classes.contains(410));
        assert!(CacheStatus::parse(&["6xx".into()]).is_err());
        assert!(CacheStatus::parse(&["20".into()]).is_err());
    }
}
