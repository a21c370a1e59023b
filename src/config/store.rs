//! `[store]`: which backend holds the claims and records, and how.
//!
//! Owns the store settings and their validation. The Redis URL may carry a
//! password, so the types here print it redacted (see `redact`).
//!
//! `username` and `password` give the Redis credentials apart from the URL,
//! as secret sources (`env:`, `file:`, `literal:`), so the URL can sit in a
//! plain ConfigMap. They are read once at start-up and sent to every node
//! the URL names: the standalone server, every cluster node, and with
//! `redis-sentinel://` both the sentinels and the primary they point to
//! (fred is built without `sentinel-auth`, so sentinels that need other
//! credentials than the data nodes are not supported). A password both in
//! the URL and in `password` is an error, as is either key with the
//! embedded store (it has no credentials to apply them to).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::OnUnavailable;
use super::choice::choices;
use super::duration::ConfigDuration;
use super::problems::Problems;
use super::redact::redact_url;
use super::tls::{RedisTls, TlsFiles, redis_tls};
use crate::signature::Secret;

/// Default Redis key prefix, so idemgate shares a database safely.
const DEFAULT_KEY_PREFIX: &str = "idemgate";
/// Default per-command store timeout: a healthy Redis answers in well under
/// a millisecond, so 250 ms means "unreachable", not "slow".
const DEFAULT_COMMAND_TIMEOUT: ConfigDuration = ConfigDuration::millis(250);
/// Default time a claim waits for replica acknowledgements: replication on
/// a healthy LAN takes well under a millisecond.
const DEFAULT_REPLICA_ACK_TIMEOUT: ConfigDuration = ConfigDuration::millis(100);

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
    pub on_unavailable: Option<OnUnavailable>,
    /// Replicas that must acknowledge a claim (Redis `WAIT`); 0 = off.
    pub min_replicas_ack: Option<u32>,
    /// How long to wait for those acknowledgements.
    pub replica_ack_timeout: Option<ConfigDuration>,
    /// `"memory"`, `"fsync"` (default) or `"replicated"`.
    pub durability: Option<Durability>,
    /// Stay ready on a Redis that may evict keys (default false).
    pub allow_eviction: Option<bool>,
    /// The longest an embedded store write waits for others to share its
    /// commit (kind = "embedded"; default "0s").
    pub commit_delay: Option<ConfigDuration>,
    /// When the embedded store's file is verified in full: `"background"`
    /// (default) or `"before_serving"` (kind = "embedded").
    pub integrity_check: Option<IntegrityCheck>,
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

/// The URL schemes fred connects with: a single server, a Cluster or
/// Sentinel, each plain or over TLS.
const REDIS_SCHEMES: [&str; 6] = [
    "redis://",
    "rediss://",
    "redis-cluster://",
    "rediss-cluster://",
    "redis-sentinel://",
    "rediss-sentinel://",
];

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

impl StoreBackend {
    /// `redis` or `embedded`: what `/admin/info` and logs call the backend.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Redis { .. } => "redis",
            Self::Embedded { .. } => "embedded",
        }
    }

    /// Where the records live, safe to show: the Redis URL with any
    /// password replaced, or the embedded database's path.
    pub fn location(&self) -> String {
        match self {
            Self::Redis { url } => redact_url(url),
            Self::Embedded { path } => path.display().to_string(),
        }
    }
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

/// What an acknowledged write survives (`[store] durability`): the promise
/// idemgate states, checks against the server, and waits for on every
/// write an acknowledgement or a replay rests on (`store::durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Durability {
    /// Kept in the server's memory only: a restart or a power cut of the
    /// Redis that holds it loses it. Must be chosen explicitly.
    Memory,
    /// On the primary's disk (fsynced) before idemgate acts on it: an AOF
    /// with `appendfsync always`, or, where the server has `WAITAOF`
    /// (Redis 7.2+, Valkey), `everysec` and a `WAITAOF` per write. The
    /// embedded store always commits this way.
    Fsync,
    /// On the primary's disk and on `min_replicas_ack` replicas (`WAIT`)
    /// before idemgate acts on it: survives a failover.
    Replicated,
}

choices! {
    Durability { "memory" => Memory, "fsync" => Fsync, "replicated" => Replicated }
}

/// When the embedded store verifies the checksums of its whole file
/// (`[store] integrity_check`). Either way the open checks the file's
/// header, store id and generation before serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IntegrityCheck {
    /// While serving, against the commit found at start-up: start-up takes
    /// the same time at any size; a damaged file fails `/readyz` and every
    /// write once found (seconds per million records after start).
    #[default]
    Background,
    /// In the open, before the first delivery: nothing is served from a
    /// damaged file, and start-up grows with the file (about a second per
    /// million records).
    BeforeServing,
}

choices! {
    IntegrityCheck { "background" => Background, "before_serving" => BeforeServing }
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
    /// What every acknowledged write must survive (`[store] durability`,
    /// default `fsync`; `replicated` implies `replica_ack`).
    pub durability: Durability,
    /// Prefix of every key.
    pub key_prefix: String,
    /// Timeout of one store call.
    pub command_timeout: Duration,
    /// Keep `/readyz` at 200 although Redis may evict keys (`maxmemory`
    /// with a policy other than `noeviction`). Off by default: an evicted
    /// record or claim lets a duplicate execute again (contract §4 rule 10).
    pub allow_eviction: bool,
    /// Redis connections in the pool: one per worker thread, so a worker's
    /// commands never wait for another thread's connection task, and fred
    /// reads the replies of all queued commands in one go.
    pub connections: usize,
    /// Redis ACL user (`[store] username`), overriding none in the URL.
    pub username: Option<Secret>,
    /// Redis password (`[store] password`); the URL then has none.
    pub password: Option<Secret>,
    /// The longest an embedded store write waits for company before its
    /// commit (`[store] commit_delay`, embedded only): zero commits as
    /// soon as the writer is free, which measured fastest (batches form
    /// while the previous commit's fsync runs).
    pub commit_delay: Duration,
    /// When the embedded store verifies its whole file (`[store]
    /// integrity_check`, embedded only).
    pub integrity_check: IntegrityCheck,
    /// The largest answer the store may have to keep (`[limits]
    /// max_stored_answer_bytes`): the embedded store is ready only on a
    /// disk with room for it.
    pub largest_answer: usize,
    /// `tls_ca_file`, `tls_cert_file`, `tls_key_file` of a `rediss://`
    /// store, loaded; `None`: fred's default (the system's roots).
    pub tls: Option<RedisTls>,
}

/// The userinfo of `url` split into (user, password), each `None` when
/// absent or empty: `redis://app:pw@host` → `(Some("app"), Some("pw"))`.
fn url_credentials(url: &str) -> (Option<&str>, Option<&str>) {
    let Some((_, rest)) = url.split_once("://") else {
        return (None, None);
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let Some((userinfo, _)) = authority.rsplit_once('@') else {
        return (None, None);
    };
    let (user, password) = match userinfo.split_once(':') {
        Some((user, password)) => (user, Some(password)),
        None => (userinfo, None),
    };
    (
        Some(user).filter(|u| !u.is_empty()),
        password.filter(|p| !p.is_empty()),
    )
}

/// `[store] username` or `password`: resolved, UTF-8 (Redis `AUTH` takes
/// text), and not also given in the URL.
fn credential(
    problems: &mut Problems,
    name: &str,
    spec: Option<&str>,
    redis_url: Option<&str>,
    in_url: Option<&str>,
) -> Option<Secret> {
    let spec = spec?;
    let key = format!("store.{name}");
    let Some(url) = redis_url else {
        problems.push(
            &key,
            "only valid with kind = \"redis\" (the embedded store has no credentials)",
        );
        return None;
    };
    if in_url.is_some() {
        problems.push(
            &key,
            format!(
                "store.url {:?} already has a {name}; give it in store.url or in store.{name}, not both",
                redact_url(url)
            ),
        );
        return None;
    }
    let secret = problems.take(&key, Secret::resolve(spec))?;
    if std::str::from_utf8(&secret.expose()).is_err() {
        problems.push(&key, format!("{} is not UTF-8 text", secret.source()));
        return None;
    }
    Some(secret)
}

/// Validates `[store]`; `connections` is the Redis pool size (one per
/// worker thread), `largest_answer` is `[limits] max_stored_answer_bytes`.
pub(super) fn store_config(
    problems: &mut Problems,
    raw: &RawStore,
    connections: usize,
    largest_answer: usize,
) -> StoreConfig {
    let backend = backend(problems, raw);
    let key_prefix = raw
        .key_prefix
        .clone()
        .unwrap_or_else(|| DEFAULT_KEY_PREFIX.to_owned());
    if key_prefix.is_empty() || key_prefix.contains(['{', '}']) {
        problems.push(
            "store.key_prefix",
            "must be non-empty and free of '{' and '}' (they would change the cluster slot)",
        );
    }
    let redis = matches!(backend, StoreBackend::Redis { .. });
    let replica_ack = replica_ack(problems, raw, redis);
    let allow_eviction = raw.allow_eviction.unwrap_or(false);
    if raw.allow_eviction.is_some() && !redis {
        problems.push(
            "store.allow_eviction",
            "only valid with kind = \"redis\" (the embedded store never evicts)",
        );
    }
    if replica_ack.is_none() && raw.replica_ack_timeout.is_some() {
        problems.push(
            "store.replica_ack_timeout",
            "has no effect without min_replicas_ack",
        );
    }
    let durability = durability(problems, raw, redis, replica_ack.is_some());
    let (username, password) = credentials(problems, raw, &backend);
    let tls = match &backend {
        StoreBackend::Redis { url } => redis_tls(problems, tls_files(raw), Some(url)),
        StoreBackend::Embedded { .. } => redis_tls(problems, tls_files(raw), None),
    };
    let command_timeout = raw.command_timeout.unwrap_or(DEFAULT_COMMAND_TIMEOUT).get();
    if command_timeout.is_zero() {
        problems.push("store.command_timeout", "must be greater than zero");
    }
    let commit_delay = raw.commit_delay.map_or(Duration::ZERO, ConfigDuration::get);
    if raw.commit_delay.is_some() && redis {
        problems.push(
            "store.commit_delay",
            "only valid with kind = \"embedded\" (Redis commits each command itself)",
        );
    }
    if commit_delay > MAX_COMMIT_DELAY {
        problems.push(
            "store.commit_delay",
            "must be at most 100ms (every write waits this long at worst)",
        );
    }
    if raw.integrity_check.is_some() && redis {
        problems.push(
            "store.integrity_check",
            "only valid with kind = \"embedded\" (Redis keeps no file idemgate reads)",
        );
    }
    StoreConfig {
        integrity_check: raw.integrity_check.unwrap_or_default(),
        backend,
        replica_ack,
        durability,
        username,
        password,
        tls,
        allow_eviction,
        key_prefix,
        connections,
        command_timeout,
        commit_delay,
        largest_answer,
    }
}

/// The largest `[store] commit_delay`: every write may wait this long.
const MAX_COMMIT_DELAY: Duration = Duration::from_millis(100);

/// `kind` with its `url` (Redis) or `path` (embedded), and only that one.
fn backend(problems: &mut Problems, raw: &RawStore) -> StoreBackend {
    let nowhere = || StoreBackend::Embedded {
        path: PathBuf::new(),
    };
    match raw.kind.as_str() {
        "redis" => {
            if raw.path.is_some() {
                problems.push("store.path", "only valid with kind = \"embedded\"");
            }
            let url = raw.url.clone().unwrap_or_default();
            if !REDIS_SCHEMES.iter().any(|scheme| url.starts_with(scheme)) {
                problems.push(
                    "store.url",
                    format!(
                        "{:?} is not a Redis URL; expected one of {}",
                        redact_url(&url),
                        REDIS_SCHEMES.join(" ")
                    ),
                );
            }
            StoreBackend::Redis { url }
        }
        "embedded" => {
            if raw.url.is_some() {
                problems.push("store.url", "only valid with kind = \"redis\"");
            }
            match &raw.path {
                Some(path) if !path.is_empty() => StoreBackend::Embedded {
                    path: PathBuf::from(path),
                },
                _ => {
                    problems.push(
                        "store.path",
                        "required with kind = \"embedded\", e.g. \"data/idemgate.redb\"",
                    );
                    nowhere()
                }
            }
        }
        other => {
            problems.push(
                "store.kind",
                format!("{other:?} is not valid; expected \"redis\" or \"embedded\""),
            );
            nowhere()
        }
    }
}

/// The `tls_*` keys of `raw`.
fn tls_files(raw: &RawStore) -> TlsFiles<'_> {
    TlsFiles {
        ca_file: raw.tls_ca_file.as_deref(),
        cert_file: raw.tls_cert_file.as_deref(),
        key_file: raw.tls_key_file.as_deref(),
    }
}

/// `min_replicas_ack` (0: off) and its `replica_ack_timeout`.
fn replica_ack(problems: &mut Problems, raw: &RawStore, redis: bool) -> Option<ReplicaAck> {
    let replicas = raw.min_replicas_ack.filter(|replicas| *replicas > 0)?;
    if !redis {
        problems.push("store.min_replicas_ack", "only valid with kind = \"redis\"");
    }
    let timeout = raw
        .replica_ack_timeout
        .unwrap_or(DEFAULT_REPLICA_ACK_TIMEOUT)
        .get();
    if timeout.is_zero() {
        problems.push(
            "store.replica_ack_timeout",
            "must be greater than zero (0 would make WAIT block forever)",
        );
    }
    Some(ReplicaAck { replicas, timeout })
}

/// `durability`: `fsync` unless the file says otherwise; the embedded
/// store only commits durably, and `replicated` needs replicas to wait for.
fn durability(problems: &mut Problems, raw: &RawStore, redis: bool, replicas: bool) -> Durability {
    let level = raw.durability.unwrap_or(Durability::Fsync);
    if !redis && raw.durability.is_some() && level != Durability::Fsync {
        problems.push(
            "store.durability",
            "the embedded store commits every write to disk (fsync) before answering; \
             only \"fsync\" is valid with kind = \"embedded\"",
        );
    }
    if redis && level == Durability::Replicated && !replicas {
        problems.push(
            "store.durability",
            "\"replicated\" needs min_replicas_ack of at least 1 (the replicas every write waits for)",
        );
    }
    level
}

/// `username` and `password`, each unless the Redis URL already has one.
fn credentials(
    problems: &mut Problems,
    raw: &RawStore,
    backend: &StoreBackend,
) -> (Option<Secret>, Option<Secret>) {
    let redis_url = match backend {
        StoreBackend::Redis { url } => Some(url.as_str()),
        StoreBackend::Embedded { .. } => None,
    };
    let (url_user, url_password) = redis_url.map_or((None, None), url_credentials);
    let username = credential(
        problems,
        "username",
        raw.username.as_deref(),
        redis_url,
        url_user,
    );
    let password = credential(
        problems,
        "password",
        raw.password.as_deref(),
        redis_url,
        url_password,
    );
    (username, password)
}

impl StoreConfig {
    /// The table as `check-config` prints it, with the store-wide
    /// `on_unavailable` (a [`super::Config`] field) and the URL redacted.
    pub(super) fn to_raw(&self, on_unavailable: OnUnavailable) -> RawStore {
        let redis = matches!(self.backend, StoreBackend::Redis { .. });
        let (kind, url, path) = match &self.backend {
            StoreBackend::Redis { url } => ("redis", Some(redact_url(url)), None),
            StoreBackend::Embedded { path } => ("embedded", None, Some(path.display().to_string())),
        };
        let source = |secret: &Option<Secret>| secret.as_ref().map(|s| s.source().to_owned());
        let identity = self
            .tls
            .as_ref()
            .and_then(|tls| tls.client_identity.as_ref());
        let tls_path = |path: Option<&std::path::Path>| path.map(|p| p.display().to_string());
        RawStore {
            kind: kind.to_owned(),
            url,
            path,
            key_prefix: Some(self.key_prefix.clone()),
            command_timeout: Some(self.command_timeout.into()),
            on_unavailable: Some(on_unavailable),
            min_replicas_ack: redis.then(|| self.replica_ack.map_or(0, |ack| ack.replicas)),
            replica_ack_timeout: self.replica_ack.map(|ack| ack.timeout.into()),
            durability: Some(self.durability),
            allow_eviction: redis.then_some(self.allow_eviction),
            username: source(&self.username),
            password: source(&self.password),
            commit_delay: (!redis).then(|| self.commit_delay.into()),
            integrity_check: (!redis).then_some(self.integrity_check),
            tls_ca_file: tls_path(self.tls.as_ref().and_then(|tls| tls.ca_file.as_deref())),
            tls_cert_file: tls_path(identity.map(|(cert, _)| cert.as_path())),
            tls_key_file: tls_path(identity.map(|(_, key)| key.as_path())),
        }
    }
}

#[cfg(test)]
mod tests;
