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
mod schema;
pub(super) mod strict;

use serde::{Deserialize, Serialize};

use super::hot_keys::HotKeysConfig;
use super::limits::Limits;

pub use super::duration::{ConfigDuration, DurationError, format_duration, parse_duration};

/// Default proxy address: loopback, beside the handler it protects.
pub const DEFAULT_PROXY_ADDR: &str = "127.0.0.1:8080";
/// Default admin address: loopback, so metrics and the record API stay private.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:8790";
/// Default `[secrets] watch_interval`: a Kubernetes Secret volume is
/// refreshed about once a minute, so 10 s adds little to the rotation delay
/// while costing one small read per `file:` source.
pub const DEFAULT_WATCH_INTERVAL: ConfigDuration = ConfigDuration::secs(10);
/// `[admin] audit_retention` when absent.
pub const DEFAULT_AUDIT_RETENTION: ConfigDuration = ConfigDuration::secs(30 * 86400);
/// Default Redis key prefix, so idemgate shares a database safely.
pub const DEFAULT_KEY_PREFIX: &str = "idemgate";
/// Default per-command store timeout: a healthy Redis answers in well under
/// a millisecond, so 250 ms means "unreachable", not "slow".
pub const DEFAULT_COMMAND_TIMEOUT: ConfigDuration = ConfigDuration::millis(250);
/// Default time a claim waits for replica acknowledgements: replication on
/// a healthy LAN takes well under a millisecond.
pub const DEFAULT_REPLICA_ACK_TIMEOUT: ConfigDuration = ConfigDuration::millis(100);
/// Default upstream timeout: legacy handlers can be slow, 30 s is typical.
pub const DEFAULT_UPSTREAM_TIMEOUT: ConfigDuration = ConfigDuration::secs(30);
/// Default in-flight claim lifetime (renewed while the upstream call runs).
pub const DEFAULT_LEASE: ConfigDuration = ConfigDuration::secs(30);
/// Default replay window: a day covers every common sender's retry schedule
/// for the first day; raise it for senders that retry for longer.
pub const DEFAULT_RETENTION: ConfigDuration = ConfigDuration::secs(24 * 3600);
/// Default time a duplicate waits for an in-flight first delivery.
pub const DEFAULT_WAIT_TIMEOUT: ConfigDuration = ConfigDuration::secs(5);
/// Default time an unknown outcome blocks re-forwarding.
pub const DEFAULT_UNKNOWN_HOLD: ConfigDuration = ConfigDuration::secs(5 * 60);

/// Default `[tracing] sampling_ratio`: every trace a sender did not
/// decide on is kept; lower it when the collector can not take them all.
pub const DEFAULT_SAMPLING_RATIO: f64 = 1.0;
/// The `service.name` of every span when neither `[tracing] service_name`
/// nor the OpenTelemetry environment (`OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`) names the service.
pub const DEFAULT_SERVICE_NAME: &str = "idemgate";
/// Default `[tracing] queue_size`: finished spans waiting for export at
/// most (a delivery makes four or five); more are dropped and counted.
pub const DEFAULT_TRACE_QUEUE_SIZE: usize = 2048;

/// Default `on`: server errors, rate limiting and a handler that is down
/// are worth another try; other 4xx answers will not change on a retry.
pub const DEFAULT_INBOX_ON: [&str; 3] = ["5xx", "429", "refused"];
/// Default `delivered_status`: a handler that took a redelivery says so
/// with 2xx; a 4xx (a refused signature, an address allow-list, a missing
/// route) means it did not, whatever `cache_status` stores for live
/// attempts.
pub const DEFAULT_DELIVERED_STATUS: [&str; 1] = ["2xx"];
/// Default `max_queued`: far above a normal backlog (a day of a busy
/// route's failures), small enough that the store's memory stays bounded.
pub const DEFAULT_MAX_QUEUED: u64 = 100_000;
/// Default `ack_status`: every sender reads 200 as delivered.
pub const DEFAULT_ACK_STATUS: u16 = 200;
/// Default `ack_content_type`: the acknowledgement bodies senders expect
/// (`success`, `OK`) are plain text.
pub const DEFAULT_ACK_CONTENT_TYPE: &str = "text/plain";
/// Default `max_attempts`: with the default backoff about a day and a half
/// of redeliveries, longer than most handler outages.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 12;
/// Default `backoff`: long enough for a restarting handler to come back.
pub const DEFAULT_BACKOFF: ConfigDuration = ConfigDuration::secs(30);
/// Default `max_backoff`: an hour keeps a long outage from being retried
/// too rarely once it ends.
pub const DEFAULT_MAX_BACKOFF: ConfigDuration = ConfigDuration::secs(3600);
/// Default `concurrency`: a recovering handler is not flooded with its
/// backlog.
pub const DEFAULT_CONCURRENCY: usize = 4;
/// Default `visibility_timeout`: above the default upstream timeout (30 s).
pub const DEFAULT_VISIBILITY_TIMEOUT: ConfigDuration = ConfigDuration::secs(60);
/// Default `repair_every`: a delivery whose index entry a failover lost is
/// found again within a minute, for one pass a minute per instance and
/// scope (16,384 small reads on a Cluster, one on a single Redis).
pub const DEFAULT_REPAIR_EVERY: ConfigDuration = ConfigDuration::secs(60);

/// The whole file.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `"forward"` or `"reject"`.
    #[serde(default)]
    pub unmatched: Option<String>,
    /// Base of the `type` URI of every problem document idemgate writes:
    /// a URN ending in `:` or an http(s) URL ending in `/`, `:` or `#`.
    #[serde(default)]
    pub problem_type_base: Option<String>,
    /// Listener addresses.
    #[serde(default)]
    pub listen: RawListen,
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

/// `[listen]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawListen {
    /// Where senders deliver.
    pub proxy: Option<String>,
    /// The admin listener.
    pub admin: Option<String>,
}

/// `[store]`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// `"redis"` or `"embedded"`.
    pub kind: String,
    /// Redis URL (kind = "redis").
    pub url: Option<String>,
    /// File path (kind = "embedded").
    pub path: Option<String>,
    /// Prefix of every store key.
    pub key_prefix: Option<String>,
    /// Timeout of one store call.
    pub command_timeout: Option<ConfigDuration>,
    /// `"reject"` or `"forward"`.
    pub on_unavailable: Option<String>,
    /// Replicas that must acknowledge a claim (Redis `WAIT`); 0 = off.
    pub min_replicas_ack: Option<u32>,
    /// How long to wait for those acknowledgements.
    pub replica_ack_timeout: Option<ConfigDuration>,
    /// `"memory"`, `"fsync"` (default) or `"replicated"`.
    pub durability: Option<String>,
    /// Stay ready on a Redis that may evict keys (default false).
    pub allow_eviction: Option<bool>,
    /// The longest an embedded store write waits for others to share its
    /// commit (kind = "embedded"; default "0s").
    pub commit_delay: Option<ConfigDuration>,
    /// Redis ACL user, as a secret source (kind = "redis").
    pub username: Option<String>,
    /// Redis password, as a secret source (kind = "redis").
    pub password: Option<String>,
    /// PEM file of the CAs a `rediss://` server's certificate must chain to.
    pub tls_ca_file: Option<String>,
    /// PEM client certificate (chain) for Redis `tls-auth-clients`.
    pub tls_cert_file: Option<String>,
    /// PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<String>,
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

/// One `[[admin.tokens]]` entry.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdminToken {
    /// What logs call its holder.
    pub name: String,
    /// Bearer token source (`env:`, `file:`, `literal:`).
    pub token: String,
    /// `read` (default) or `act`.
    pub scope: Option<String>,
}

/// `[tracing]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawTracing {
    /// OTLP/HTTP collector base URL (`/v1/traces` is appended); absent: off.
    pub otlp_endpoint: Option<String>,
    /// Share of new traces kept, 0.0 to 1.0; a sender's sampled
    /// `traceparent` is always honoured.
    pub sampling_ratio: Option<f64>,
    /// `service.name` of the exported spans.
    pub service_name: Option<String>,
    /// Finished spans waiting for export at most.
    pub queue_size: Option<usize>,
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

/// `[route.probe]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawProbe {
    /// Method (default GET).
    pub method: Option<String>,
    /// Path and query template on the route's upstream.
    pub path: String,
    /// Extra headers, `"Name: value"`.
    pub headers: Option<Vec<String>>,
    /// When the handler gives up on a request at the latest.
    pub handler_deadline: ConfigDuration,
    /// Delay after the call ended (default upstream timeout + deadline).
    pub start_after: Option<ConfigDuration>,
    /// Pause between attempts.
    pub retry_every: Option<ConfigDuration>,
    /// Attempts at most.
    pub max_attempts: Option<u32>,
    /// Time allowed per attempt.
    pub timeout: Option<ConfigDuration>,
    /// Probes of this route in flight at once, per instance.
    pub concurrency: Option<u32>,
    /// Statuses meaning applied.
    pub applied_status: Option<Vec<u16>>,
    /// Statuses meaning not applied.
    pub not_applied_status: Option<Vec<u16>>,
    /// A field of the answer that decides.
    pub field: Option<String>,
    /// Field values meaning applied.
    pub applied: Option<Vec<String>>,
    /// Field values meaning not applied.
    pub not_applied: Option<Vec<String>>,
    /// `"ack"` or `"probe"`: what duplicates of an applied record get.
    pub answer: Option<String>,
}

/// `[route.entity]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawEntity {
    /// A channel's machine whose settings fill what the table leaves out
    /// (`alipay`, `wechatpay-v2`, `payment`).
    pub machine: Option<String>,
    /// Selectors naming the business id (joined like key parts).
    #[serde(default)]
    pub id: Vec<String>,
    /// Selector of the state a delivery announces.
    #[serde(default)]
    pub state: String,
    /// Selector of the event a delivery announces (a refund id): the same
    /// state with a new event is a change, not a repeat.
    pub event: Option<String>,
    /// `"enforce"` or `"shadow"`: judge and act, or only count and log.
    pub mode: Option<String>,
    /// States an entity seen for the first time may take (default: any).
    pub initial: Option<Vec<String>>,
    /// Allowed changes, `"from -> to"`, either side `a | b`.
    #[serde(default)]
    pub transitions: Vec<String>,
    /// States nothing may leave.
    pub terminal: Option<Vec<String>>,
    /// `"acknowledge"` or `"conflict"`: the answer to a refused transition.
    pub on_refused: Option<String>,
    /// How long an entity's state is kept after its last change.
    pub retention: Option<ConfigDuration>,
    /// The handler's answers that mean it accepted a change (default 2xx).
    pub advance_status: Option<Vec<String>>,
    /// Notices held behind one busy entity at most (routes with an inbox).
    pub max_held_per_entity: Option<u64>,
    /// Status of the acknowledgement (default: the inbox's).
    pub ack_status: Option<u16>,
    /// Body of the acknowledgement.
    pub ack_body: Option<String>,
    /// `Content-Type` of that body.
    pub ack_content_type: Option<String>,
}

/// One `[[route.guard]]`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawGuard {
    /// Selector of the guarded field.
    pub field: String,
    /// Its allowed values, compared exactly as text.
    pub one_of: Vec<String>,
    /// Whether an absent field passes (default false).
    pub optional: Option<bool>,
}

/// `[route.signature]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawSignature {
    /// Scheme name.
    pub scheme: String,
    /// Secret sources; any one may match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// `"sha256"` or `"sha512"`.
    pub algorithm: Option<String>,
    /// Selector of the presented signature.
    pub signature: Option<String>,
    /// `"hex"` or `"base64"`.
    pub encoding: Option<String>,
    /// Text stripped before decoding.
    pub prefix: Option<String>,
    /// Template of the signed content.
    pub message: Option<String>,
    /// Selector of the timestamp.
    pub timestamp: Option<String>,
    /// `"s"` or `"ms"`.
    pub timestamp_unit: Option<String>,
    /// Allowed clock difference.
    pub tolerance: Option<ConfigDuration>,
    /// RSA public keys (alipay, wechatpay-v3); any one may verify.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub public_keys: Vec<crate::signature::RawPublicKey>,
    /// The scheme and host the sender called (twilio signs the full URL).
    pub public_url: Option<String>,
    /// Accept Alipay's legacy SHA1withRSA (`sign_type=RSA`).
    pub allow_rsa1: Option<bool>,
}

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
    pub on_in_flight: Option<String>,
    /// Longest wait for an in-flight first delivery.
    pub wait_timeout: Option<ConfigDuration>,
    /// Status classes that are stored.
    pub cache_status: Option<Vec<String>>,
    /// `"hold"` or `"release"`.
    pub on_upstream_timeout: Option<String>,
    /// How long an unknown outcome blocks.
    pub unknown_hold: Option<ConfigDuration>,
    /// `"enforce"` or `"shadow"`.
    pub mode: Option<String>,
    /// Key space shared with other routes (default: the route name).
    pub scope: Option<String>,
    /// Per-route `on_unavailable`.
    pub on_unavailable: Option<String>,
    /// `"refuse"` or `"accept"`: a key or fingerprint-as-key resting on
    /// parts the signature does not cover.
    pub unsigned_key: Option<String>,
}

/// `[route.inbox]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawInbox {
    /// Whether the table takes effect (default true when it is present).
    pub enabled: Option<bool>,
    /// Failures queued: status classes, codes, `"refused"`, `"timeout"`.
    pub on: Option<Vec<String>>,
    /// Status the sender is told when its delivery is queued.
    pub ack_status: Option<u16>,
    /// Body the sender is told when its delivery is queued.
    pub ack_body: Option<String>,
    /// `Content-Type` of that body.
    pub ack_content_type: Option<String>,
    /// Redeliveries before a delivery is dead.
    pub max_attempts: Option<u32>,
    /// First redelivery delay, doubled each attempt.
    pub backoff: Option<ConfigDuration>,
    /// Cap on the delay.
    pub max_backoff: Option<ConfigDuration>,
    /// Redeliveries in flight per instance.
    pub concurrency: Option<usize>,
    /// How long a taken delivery stays invisible to other workers.
    pub visibility_timeout: Option<ConfigDuration>,
    /// Handler statuses that mean a redelivery was taken.
    pub delivered_status: Option<Vec<String>>,
    /// Deliveries owed (queued or held) in the route's scope at most.
    pub max_queued: Option<u64>,
    /// How often the scope's indexes are checked against its owed set.
    pub repair_every: Option<ConfigDuration>,
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
