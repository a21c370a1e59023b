//! The validated runtime configuration.
//!
//! [`Config::load`] reads the TOML file (see `config/idemgate.toml` for the
//! annotated reference), resolves secrets and checks every rule it can before
//! a single socket is opened. Every error names its key, e.g.
//! `route[0].idempotency.lease: …`, and all errors are reported at once so an
//! operator fixes a file in one pass.
//!
//! This file keeps [`Config`] and the types several sections share
//! ([`Route`], [`Upstream`], …), loading, warnings and secret reload. The
//! signature schemes, the presets' knowledge of each sender and the key
//! material are `crate::signature`'s, the selectors `crate::extract`'s:
//! this module reads the file into them and re-exports them, so every type
//! a configuration holds is also named `config::X`. The submodules, from
//! the file's text to the checked whole:
//!
//! * `raw` — the file as serde reads it: `RawConfig` assembles the
//!   sections' tables, and `raw/strict.rs` reads the text into it, every
//!   unknown key and every refused value at once (`raw/schema.rs` holds the
//!   reference file and `check-config`'s output to the parser's keys);
//! * `validate` — `Config::validate`, which drives the sections;
//! * one module per section, each owning its table as serde reads it,
//!   the table's defaults, its checks and its printout for `check-config`.
//!   `limits`, `listen` and `hot_keys` are typed through and through: the
//!   struct serde reads is the one the program uses and the one
//!   `check-config` prints. The others read a raw table into runtime
//!   values (selectors, templates, secrets) and print it back: `store`,
//!   `otel` (`[tracing]`), `route` (`[[route]]`), `scheme`
//!   (`[route.signature]`, with `scheme/preset` for the named senders),
//!   `idempotency`, `guard`, `inbox_rules`, `entity_machine`, `probe`,
//!   `admin_tokens`;
//! * `cross` — the checks that compare one section with another, and
//!   `coverage`, the signed-coverage rule among them (contract §4 rule 12);
//! * `effective` — the sections' printouts put together (`to_toml`);
//! * `access` — the admin address and token source alone, for the
//!   commands that talk to a running instance (`healthcheck`, `admin`);
//! * shared leaves: `problems` (the error collector), `duration` (the
//!   duration syntax and its serde type), `choice` (settings spelled as one
//!   of a few words, serde types through `choices!`), `text` (how a setting
//!   written as text is read through its own parser), `read` (the upstream
//!   URL reader), `status` (status class lists), `redact` (credentials out
//!   of URLs).

mod access;
mod admin_tokens;
mod choice;
mod coverage;
mod cross;
pub mod duration;
mod effective;
mod entity_machine;
mod guard;
mod hot_keys;
mod idempotency;
mod inbox_rules;
mod limits;
mod listen;
mod otel;
mod probe;
mod problems;
pub mod raw;
mod read;
mod redact;
mod route;
mod scheme;
mod status;
mod store;
mod text;
mod tls;
mod validate;

use std::fmt;
use std::path::Path;
use std::time::Duration;

use crate::error::ProblemTypes;
use http::{Method, Uri};

use choice::choices;
use raw::RawConfig;

pub use crate::extract::{Segment, Selector, Template};
pub use crate::signature::{
    Algorithm, Credential, DEFAULT_TOLERANCE, Encoding, HmacScheme, Preset, PresetKind, PublicKeys,
    RawPublicKey, ReloadError, ReloadFailure, RsaDigest, Scheme, Secret, Strength, TimestampRule,
    TimestampUnit, decode_hex_key, decode_whsec, secret_strength,
};
pub use access::{AdminAccess, admin_address};
pub use admin_tokens::{MAIN_TOKEN_NAME, NamedToken, TokenScope};
pub use choice::Choice;
pub use entity_machine::{Entity, EntityMode, OnRefused, Sources, StateMachine};
pub use guard::Guard;
pub use hot_keys::{HotKeysConfig, TopK};
pub use idempotency::{
    FingerprintPart, Idempotency, KeyPart, Mode, OnInFlight, OnUpstreamTimeout, UnsignedKey,
};
pub use inbox_rules::{Ack, Inbox, InboxTriggers};
pub use limits::{DEFAULT_MAX_STORED_ANSWER_BYTES, Limits};
pub use listen::{DEFAULT_ADMIN_ADDR, DEFAULT_PROXY_ADDR, Listen};
pub use otel::{DEFAULT_SERVICE_NAME, Tracing};
pub use probe::{Probe, ProbeAnswer};
pub(crate) use redact::redact_url;
pub use status::CacheStatus;
pub use store::{Durability, IntegrityCheck, ReplicaAck, StoreBackend, StoreConfig};
pub use tls::RedisTls;

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

choices! {
    Unmatched { "forward" => Forward, "reject" => Reject }
    OnUnavailable { "reject" => Reject, "forward" => Forward }
}

/// `[upstream]` or a route's override.
#[derive(Clone)]
pub struct Upstream {
    /// Base URL; the request path and query are appended.
    pub url: Uri,
    /// Time allowed for the whole answer.
    pub timeout: Duration,
}

impl Upstream {
    /// The URL without its userinfo password: the form logs, `Debug` and
    /// `/admin/info` show.
    pub fn shown_url(&self) -> String {
        redact_url(&self.url.to_string())
    }
}

impl fmt::Debug for Upstream {
    /// Prints the URL without its userinfo password, like the store URL.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("url", &self.shown_url())
            .field("timeout", &self.timeout)
            .finish()
    }
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
    /// The state machine of the entity a delivery is about; `None`:
    /// deliveries are judged by their key alone.
    pub entity: Option<Entity>,
    /// How an unknown outcome asks the handler; `None`: it waits for its
    /// hold or an operator.
    pub probe: Option<Probe>,
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
    /// `[[admin.tokens]]`: named tokens besides `admin_token`, each with
    /// its scope.
    pub admin_tokens: Vec<NamedToken>,
    /// `[admin] allowed_hosts`, lower-cased: the names besides the
    /// listener's own address and the loopback names that a request's
    /// `Host` may carry (`admin::host`).
    pub admin_hosts: Vec<String>,
    /// `[admin] audit_retention`: how long the store keeps an operator
    /// action in the audit trail (`store::audit`).
    pub audit_retention: Duration,
    /// The `type` URIs of problem documents (`problem_type_base`).
    pub problem_types: ProblemTypes,
    /// How often `file:` secrets and public keys are checked for a change
    /// (`[secrets] watch_interval`); `None`: only on SIGHUP.
    pub secrets_watch: Option<Duration>,
    /// `[hot_keys]`.
    pub hot_keys: HotKeysConfig,
    /// Routes, in file order.
    pub routes: Vec<Route>,
    /// OpenTelemetry trace export; `None` (the default) is off.
    pub tracing: Option<Tracing>,
}

impl Config {
    /// The path of every `file:` secret and public key that
    /// [`Config::reload_secrets`] re-reads, each once, in file order.
    pub fn secret_files(&self) -> Vec<std::path::PathBuf> {
        let mut files: Vec<std::path::PathBuf> = Vec::new();
        let secrets = self.routes.iter().flat_map(|route| match &route.scheme {
            Scheme::None => &[][..],
            Scheme::Hmac(hmac) => &hmac.secrets[..],
            Scheme::Preset(preset) => &preset.keys[..],
        });
        let secret_files = secrets
            .chain(self.admin_token.iter())
            .chain(self.admin_tokens.iter().map(|named| &named.secret))
            .filter_map(Secret::file);
        let key_files = self.routes.iter().flat_map(|route| match &route.scheme {
            Scheme::Preset(preset) => preset.public_keys.files().collect(),
            _ => Vec::new(),
        });
        for file in secret_files.chain(key_files) {
            if !files.iter().any(|known| known == file) {
                files.push(file.to_owned());
            }
        }
        files
    }

    /// Re-reads every `file:` secret and public key (SIGHUP). Returns how
    /// many changed, or the sources that could not be reloaded: each keeps
    /// its old value (unreadable, undecodable, or weaker than its scheme's
    /// [`Strength`]); the others are still updated.
    pub fn reload_secrets(&self) -> Result<usize, Vec<FailedReload>> {
        let mut changed = 0;
        let mut failures = Vec::new();
        let mut note =
            |route: &str, setting: String, result: Result<bool, ReloadError>| match result {
                Ok(true) => changed += 1,
                Ok(false) => {}
                Err(error) => failures.push(FailedReload {
                    route: route.to_owned(),
                    setting,
                    error,
                }),
            };
        for (index, route) in self.routes.iter().enumerate() {
            let secrets = match &route.scheme {
                Scheme::None => &[][..],
                Scheme::Hmac(hmac) => &hmac.secrets[..],
                Scheme::Preset(preset) => &preset.keys[..],
            };
            for (i, secret) in secrets.iter().enumerate() {
                let setting = format!("route[{index}].signature.secrets[{i}]");
                note(&route.name, setting, secret.reload());
            }
            if let Scheme::Preset(preset) = &route.scheme {
                let reloaded = preset.public_keys.reload().map_err(|message| {
                    let reason = if message.contains("cannot read") {
                        ReloadFailure::Unreadable
                    } else {
                        ReloadFailure::Invalid
                    };
                    ReloadError { reason, message }
                });
                let setting = format!("route[{index}].signature.public_keys");
                note(&route.name, setting, reloaded);
            }
        }
        if let Some(token) = &self.admin_token {
            note(ADMIN_LABEL, "admin.token".to_owned(), token.reload());
        }
        for (index, named) in self.admin_tokens.iter().enumerate() {
            let setting = format!("admin.tokens[{index}].token");
            note(ADMIN_LABEL, setting, named.secret.reload());
        }
        if failures.is_empty() {
            Ok(changed)
        } else {
            Err(failures)
        }
    }
}

/// The `route` label of a reload failure of `[admin] token`.
pub const ADMIN_LABEL: &str = "_admin";

/// A `file:` source whose reload kept the old value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedReload {
    /// The route it belongs to ([`ADMIN_LABEL`] for `[admin] token`): the
    /// `route` label of `idemgate_secret_reload_failures_total`.
    pub route: String,
    /// Which setting, as configuration errors name it
    /// (`route[0].signature.secrets[1]`, `admin.token`).
    pub setting: String,
    /// Why, naming the source but never the value.
    pub error: ReloadError,
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
        let parsed = raw::strict::parse::<RawConfig>(text).map_err(ConfigError)?;
        Self::validate(parsed)
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
            if !route.idempotency.accepted_unsigned.is_empty() {
                warnings.push(format!(
                    "{key}.idempotency.unsigned_key: \"accept\" — the key rests on parts the signature does not cover: {}; a captured delivery re-sent with other values there runs again",
                    route.idempotency.accepted_unsigned.join("; ")
                ));
            }
            if route.case_sensitive && self.unmatched == Unmatched::Forward {
                warnings.push(format!(
                    "{key}.case_sensitive: with unmatched = \"forward\", a request for {:?} spelled in another case is passed through unverified; a backend that matches paths case-insensitively executes it (keep case_sensitive only if the backend tells the cases apart, or set unmatched = \"reject\")",
                    route.path_prefix
                ));
            }
            if let Scheme::Preset(preset) = &route.scheme
                && let Some(horizon) = preset.kind.retry_horizon()
                && route.idempotency.retention < horizon
            {
                warnings.push(format!(
                    "{key}.idempotency.retention: {:?} is shorter than how long {} retries an unacknowledged delivery ({horizon:?}); a late retry of a delivery the handler already executed finds no record and runs again",
                    route.idempotency.retention,
                    preset.kind.name()
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
pub(crate) mod tests {
    use super::*;
    use http::Method;

    /// The smallest valid configuration, for tests anywhere in the crate.
    pub(crate) const MINIMAL: &str = r#"
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
        secrets = ["literal:s3cret-0123456789abcdef", "literal:old-secret-0123456789"]
        signature = "header:X-Signature"
        timestamp = "json:/timestamp"
        timestamp_unit = "ms"
        tolerance = "5m"
        [route.idempotency]
        key = ["json:/paymentNo"]
        lease = "30s"
    "#;

    /// The problems that refuse `text`, one a line: the text a test
    /// searches for the message it expects.
    pub(crate) fn problems_of(text: &str) -> String {
        Config::parse(text).unwrap_err().0.join("\n")
    }

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
    fn problem_type_base_is_checked_and_printed() {
        let default = Config::parse(MINIMAL).unwrap();
        assert_eq!(default.problem_types.base(), "urn:idemgate:problem:");
        let hosted = format!("problem_type_base = \"https://docs.example.com/p/\"\n{MINIMAL}");
        let config = Config::parse(&hosted).unwrap();
        assert_eq!(
            config.problem_types.uri("key_missing"),
            "https://docs.example.com/p/key_missing"
        );
        assert!(
            config
                .to_toml()
                .contains("problem_type_base = \"https://docs.example.com/p/\""),
            "check-config prints the base"
        );
        let bad = format!("problem_type_base = \"https://docs.example.com/p\"\n{MINIMAL}");
        let err = problems_of(&bad);
        assert!(err.starts_with("problem_type_base: "), "{err}");
        assert!(err.contains("must end with"), "{err}");
    }

    #[test]
    fn weak_secrets_are_refused_by_index_without_their_value() {
        let text = MINIMAL.replace("literal:old-secret-0123456789", "literal:old");
        let err = Config::parse(&text).unwrap_err().to_string();
        assert!(
            err.contains(
                "route[0].signature.secrets[1]: literal:<redacted>: the key is 3 bytes long, at least 16 needed: an hmac secret needs at least 16 bytes"
            ),
            "{err}"
        );
        assert!(!err.contains("secrets[0]"), "{err}");
    }

    #[test]
    fn secrets_never_print() {
        let config = Config::parse(MINIMAL).unwrap();
        let printed = format!("{config:?}");
        assert!(!printed.contains("s3cret"), "{printed}");
        assert!(printed.contains("redacted"));
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
        let bad = MINIMAL.replace("\"/notify\"", "\"/notify%20x\"");
        let err = problems_of(&bad);
        assert!(err.contains("route[0].path_prefix: "), "{err}");
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
}
