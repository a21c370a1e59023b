//! The configuration file exactly as written: serde structs, defaults and
//! duration parsing. The same structs, filled from a validated config,
//! are what `check-config` prints (`effective`).
//!
//! Every struct denies unknown keys, so a typo is an error rather than a
//! silently ignored setting; [`strict`] turns serde's first-error-only
//! refusal into every unknown key at once, each with its dotted path and a
//! "did you mean" hint. Nothing here is validated beyond its TOML type:
//! [`super::Config`] turns these structs into checked runtime values and
//! names the offending key in every error.

#[cfg(test)]
mod every_mistake;
#[cfg(test)]
mod schema;
pub(super) mod strict;

use serde::{Deserialize, Serialize};

pub use super::admin_tokens::RawAdminToken;
pub use super::entity_machine::RawEntity;
pub use super::guard::RawGuard;
use super::hot_keys::HotKeysConfig;
pub use super::idempotency::RawIdempotency;
pub use super::inbox_rules::RawInbox;
use super::limits::Limits;
use super::listen::Listen;
pub use super::otel::RawTracing;
pub use super::probe::RawProbe;
pub use super::scheme::RawSignature;
pub use super::store::RawStore;

pub use super::duration::{ConfigDuration, DurationError, format_duration, parse_duration};

/// Default `[secrets] watch_interval`: a Kubernetes Secret volume is
/// refreshed about once a minute, so 10 s adds little to the rotation delay
/// while costing one small read per `file:` source.
pub const DEFAULT_WATCH_INTERVAL: ConfigDuration = ConfigDuration::secs(10);
/// `[admin] audit_retention` when absent.
pub const DEFAULT_AUDIT_RETENTION: ConfigDuration = ConfigDuration::secs(30 * 86400);
/// Default upstream timeout: legacy handlers can be slow, 30 s is typical.
pub const DEFAULT_UPSTREAM_TIMEOUT: ConfigDuration = ConfigDuration::secs(30);

/// The whole file.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `"forward"` or `"reject"`.
    #[serde(default)]
    pub unmatched: Option<super::Unmatched>,
    /// Base of the `type` URI of every problem document idemgate writes:
    /// a URN ending in `:` or an http(s) URL ending in `/`, `:` or `#`.
    #[serde(default)]
    pub problem_type_base: Option<String>,
    /// Listener addresses.
    #[serde(default)]
    pub listen: Listen,
    /// Resource limits.
    #[serde(default)]
    pub limits: Limits,
    /// The idempotency store.
    pub store: RawStore,
    /// The default upstream.
    pub upstream: RawUpstream,
    /// The admin API.
    #[serde(default)]
    pub admin: RawAdmin,
    /// How `file:` secrets and public keys are watched.
    #[serde(default)]
    pub secrets: RawSecrets,
    /// Per-route hot keys.
    #[serde(default)]
    pub hot_keys: HotKeysConfig,
    /// OpenTelemetry trace export; absent (the default) is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<RawTracing>,
    /// Protected routes.
    #[serde(default, rename = "route")]
    pub routes: Vec<RawRoute>,
}

/// `[secrets]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawSecrets {
    /// How often `file:` sources are checked for a change (`"0s"`: never).
    pub watch_interval: Option<ConfigDuration>,
}

/// `[upstream]`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// Base URL of the protected handler.
    pub url: String,
    /// Time allowed for the upstream's answer.
    pub timeout: Option<ConfigDuration>,
}

/// `[admin]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// Bearer token source; omit to disable `/admin/records`.
    pub token: Option<String>,
    /// Host names the admin listener answers besides its own address and
    /// the loopback names (DNS rebinding).
    pub allowed_hosts: Option<Vec<String>>,
    /// `[[admin.tokens]]`: named tokens with a scope.
    pub tokens: Option<Vec<RawAdminToken>>,
    /// How long the audit trail keeps an operator action.
    pub audit_retention: Option<ConfigDuration>,
}

/// One `[[route]]`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Name used in metrics and store keys.
    pub name: String,
    /// Path prefix that selects this route.
    pub path_prefix: String,
    /// Accepted methods (default `["POST"]`).
    pub methods: Option<Vec<String>>,
    /// Match the path prefix case-sensitively (default false: the backend
    /// may route `/NOTIFY` to the `/notify` handler, so idemgate does too).
    pub case_sensitive: Option<bool>,
    /// Per-route upstream override.
    pub upstream: Option<String>,
    /// Signature checking.
    pub signature: RawSignature,
    /// Key, fingerprint and replay rules.
    #[serde(default)]
    pub idempotency: RawIdempotency,
    /// Failed deliveries acknowledged and redelivered by idemgate.
    pub inbox: Option<RawInbox>,
    /// Business-field whitelists checked before the claim.
    #[serde(default, rename = "guard", skip_serializing_if = "Vec::is_empty")]
    pub guards: Vec<RawGuard>,
    /// The state machine of the business entity a delivery is about.
    pub entity: Option<RawEntity>,
    /// How an unknown outcome asks the handler whether it applied.
    pub probe: Option<RawProbe>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_errors() {
        let store = ["kind = \"embedded\"", "path = \"x\"", "colour = \"blue\""].join("\n");
        let text = format!("[store]\n{store}\n[upstream]\nurl = \"http://127.0.0.1:1\"\n");
        let err = strict::parse::<RawConfig>(&text).unwrap_err().join("\n");
        assert!(
            err.starts_with("store.colour: unknown key; expected one of `kind`, `url`, `path`"),
            "{err}"
        );
    }
}
