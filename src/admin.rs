//! The admin listener: `/metrics`, `/healthz`, `/readyz` and the record API.
//!
//! Kept on its own address so probes and scrapes never compete with
//! deliveries, and so it can stay private while the proxy port faces
//! senders.
//!
//! `/readyz` is 200 when the store answers and keeps what it is given: on
//! Redis it also re-reads the eviction settings of every primary
//! ([`crate::store::eviction`]) and answers 503 while any of them may evict
//! keys, unless `[store] allow_eviction = true` (SPEC §4 rule 10).
//!
//! `GET /admin/records/{route}/{key}` shows one record; `DELETE` purges it
//! so the next delivery is forwarded — how an operator resolves an unknown
//! outcome after checking the backend. `{key}` is either the key value as
//! the sender sends it (single-part keys, percent-encoded in the URL) or
//! the 64-hex key hash that idemgate logs with every request. The record
//! API exists only when `[admin] token` is set; the bearer token is
//! compared in constant time and every purge is logged.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use metrics_exporter_prometheus::PrometheusHandle;
use subtle::ConstantTimeEq;

use crate::config::{Config, Route};
use crate::pipeline::body_of;
use crate::pipeline::delivery::hash_key_parts;
use crate::pipeline::forward::ProxyBody;
use crate::record::{RecordState, now_ms};
use crate::signature::lower_hex;
use crate::store::eviction::{EvictionWatch, Trigger};
use crate::store::{AnyStore, Existing, Observed, Store, StoreKey};

/// How long `/readyz` waits for the store before calling it down.
const READY_TIMEOUT: Duration = Duration::from_secs(1);

/// State the admin endpoints read.
#[derive(Debug)]
pub struct Admin {
    config: Arc<Config>,
    store: Arc<AnyStore>,
    eviction: Arc<EvictionWatch>,
    metrics: Option<PrometheusHandle>,
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<ProxyBody> {
    let mut response = Response::new(body_of(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

fn text(status: StatusCode, body: &str) -> Response<ProxyBody> {
    reply(status, "text/plain; charset=utf-8", format!("{body}\n"))
}

fn json(status: StatusCode, body: &serde_json::Value) -> Response<ProxyBody> {
    reply(status, "application/json", body.to_string())
}

impl Admin {
    /// An admin handler over the shared config, store, eviction watcher
    /// and metrics handle.
    pub fn new(
        config: Arc<Config>,
        store: Arc<AnyStore>,
        eviction: Arc<EvictionWatch>,
        metrics: Option<PrometheusHandle>,
    ) -> Self {
        Self {
            config,
            store,
            eviction,
            metrics,
        }
    }

    /// `/readyz`: the store answers within [`READY_TIMEOUT`] and no Redis
    /// primary may evict keys (unless `allow_eviction`). The eviction
    /// settings are re-read on every probe; if that read fails although the
    /// ping succeeded, the last findings decide.
    async fn ready(&self) -> Response<ProxyBody> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        match tokio::time::timeout_at(deadline, self.store.ping()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return text(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
            Err(_) => return text(StatusCode::SERVICE_UNAVAILABLE, "store timed out"),
        }
        let _ = tokio::time::timeout_at(deadline, self.eviction.check(Trigger::Probe)).await;
        match self.eviction.not_ready() {
            None => text(StatusCode::OK, "ready"),
            Some(problem) => text(StatusCode::SERVICE_UNAVAILABLE, &problem),
        }
    }

    /// Answers one admin request.
    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<ProxyBody> {
        let path = request.uri().path().to_owned();
        if let Some(rest) = path.strip_prefix("/admin/records/") {
            return self.records(&request, rest).await;
        }
        if request.method() != Method::GET {
            return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
        }
        match path.as_str() {
            "/healthz" => text(StatusCode::OK, "ok"),
            "/readyz" => self.ready().await,
            "/metrics" => match &self.metrics {
                Some(handle) => reply(StatusCode::OK, "text/plain; version=0.0.4", handle.render()),
                None => text(StatusCode::NOT_FOUND, "metrics recorder not installed"),
            },
            _ => text(StatusCode::NOT_FOUND, "not found"),
        }
    }

    fn authorized(&self, request: &Request<Incoming>) -> Option<bool> {
        let token = self.config.admin_token.as_ref()?;
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .unwrap_or_default();
        Some(bool::from(presented.ct_eq(&token.expose())))
    }

    async fn records(&self, request: &Request<Incoming>, rest: &str) -> Response<ProxyBody> {
        match self.authorized(request) {
            None => {
                return text(
                    StatusCode::NOT_FOUND,
                    "record API disabled: set [admin] token",
                );
            }
            Some(false) => {
                let mut denied = text(StatusCode::UNAUTHORIZED, "bearer token required");
                denied.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer realm=\"idemgate admin\""),
                );
                return denied;
            }
            Some(true) => {}
        }
        let Some((route_name, raw_key)) = rest.split_once('/') else {
            return text(
                StatusCode::NOT_FOUND,
                "expected /admin/records/{route}/{key}",
            );
        };
        let Some(route) = self.config.routes.iter().find(|r| r.name == route_name) else {
            return text(StatusCode::NOT_FOUND, "no such route");
        };
        let key_hash = key_hash_from_url(raw_key);
        let key = StoreKey::new(&self.config.store.key_prefix, &route.name, &key_hash);
        match *request.method() {
            Method::GET => match self.store.lookup(&key).await {
                Ok(Some(existing)) => json(StatusCode::OK, &describe(route, &key_hash, &existing)),
                Ok(None) => text(StatusCode::NOT_FOUND, "no record"),
                Err(error) => text(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
            },
            Method::DELETE => match self.store.purge(&key).await {
                Ok(true) => {
                    tracing::warn!(
                        route = route.name,
                        key = key_hash,
                        "record purged by operator"
                    );
                    reply(StatusCode::NO_CONTENT, "text/plain", String::new())
                }
                Ok(false) => text(StatusCode::NOT_FOUND, "no record"),
                Err(error) => text(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
            },
            _ => text(StatusCode::METHOD_NOT_ALLOWED, "GET or DELETE"),
        }
    }
}

/// How long `idemgate healthcheck` waits for `/healthz`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// `GET /healthz` on the admin listener at `addr` (an unspecified address
/// such as `0.0.0.0` is probed on loopback). `Ok` on a 200.
pub async fn probe_health(addr: std::net::SocketAddr) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut target = addr;
    if target.ip().is_unspecified() {
        target.set_ip(match target {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(target).await?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: idemgate\r\nconnection: close\r\n\r\n")
            .await?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await?;
        Ok::<_, std::io::Error>(head)
    };
    match tokio::time::timeout(PROBE_TIMEOUT, exchange).await {
        Ok(Ok(head)) if head.starts_with(b"HTTP/1.1 200") => Ok(()),
        Ok(Ok(head)) => Err(format!(
            "{target} answered {}",
            String::from_utf8_lossy(&head)
        )),
        Ok(Err(error)) => Err(format!("{target}: {error}")),
        Err(_) => Err(format!("{target}: no answer within {PROBE_TIMEOUT:?}")),
    }
}

/// The key hash for a URL's `{key}`: a 64-hex hash as is, otherwise the
/// percent-decoded key value, hashed as a single-part key.
fn key_hash_from_url(raw: &str) -> String {
    if raw.len() == 64 && raw.bytes().all(|b| b.is_ascii_hexdigit()) {
        return raw.to_ascii_lowercase();
    }
    let value: Vec<u8> = percent_encoding::percent_decode_str(raw).collect();
    lower_hex(&hash_key_parts([value.as_slice()]))
}

/// The JSON view of a record: no body content, only its size.
fn describe(route: &Route, key_hash: &str, existing: &Existing) -> serde_json::Value {
    let record = &existing.record;
    let state = match existing.observe(route.idempotency.unknown_hold) {
        Observed::Completed(_) => "completed",
        Observed::InFlight => "in_flight",
        Observed::Unknown { .. } if record.state == RecordState::InFlight => "unknown_owner_lost",
        Observed::Unknown { .. } => "unknown",
    };
    let mut view = serde_json::json!({
        "route": route.name,
        "key_hash": key_hash,
        "state": state,
        "age_ms": now_ms().saturating_sub(record.created_at_ms),
        "ttl_ms": existing.ttl.map(|t| t.as_millis() as u64),
        "fingerprint": hex::encode(record.fingerprint.0),
    });
    if let RecordState::Completed(answer) = &record.state {
        view["status"] = answer.status.into();
        view["body_bytes"] = answer.body.len().into();
    }
    view
}
