//! The admin listener: `/metrics`, `/healthz`, `/readyz`, the record API,
//! the inbox API, `/admin/hot-keys`, `/admin/config` and `/admin/info`
//! (see `about`), the operator console at `/admin/` (`console`), and
//! `/admin/entities/{route}` (an entity's state, `entities`),
//! `/admin/audit`, the trail of operator actions (`audit`), and
//! `/admin/openapi.json`, the document describing all of them (see
//! `openapi`). Every 405 names the path's methods in `Allow` (`allow`).
//!
//! Every path, its methods and whether it needs the token are one table
//! (`routes`); [`Admin::handle`] reads each request against it in one
//! order (host, path, token, method), so a new endpoint is a row there
//! and an arm in `Admin::serve`, and no handler checks the token itself.
//!
//! Kept on its own address so probes and scrapes never compete with
//! deliveries, and so it can stay private while the proxy port faces
//! senders.
//!
//! `/readyz` is 200 when the store can take a claim and keeps what it is
//! given: on Redis the node must be a primary (a read-only replica or a
//! node still loading is not ready, though it answers `PING`), and it
//! re-reads the settings of every primary ([`AnyStore::probe_settings`])
//! and answers 503 while any of them may evict keys, unless `[store]
//! allow_eviction = true` (contract §4 rule 10), or can not keep writes at
//! the declared `[store] durability` (`store::durability`).
//!
//! The record API names one record in exactly one of three ways, so a key
//! value that happens to look like a hash is never mistaken for one:
//!
//! | form | names |
//! |---|---|
//! | `/admin/records/{route}?hash=<64 hex>` | the key hash, as every log line prints it (`key=…`) |
//! | `/admin/records/{route}?key=<value>` | a single-part key value, percent-encoded (`+` is a plus sign, not a space) |
//! | `/admin/records/{route}/{key}` | the same key value in the path (contract §6), percent-decoded |
//!
//! | `/admin/records/{route}?state=unknown\|in_flight[&limit=N][&cursor=C]` | no one record: a page of the records in that state (`listing`) |
//!
//! `GET` shows the record; `DELETE` purges it so the next delivery is
//! forwarded — how an operator resolves an unknown outcome after checking
//! the backend. Anything else (both forms, an unknown parameter, a hash
//! that is not 64 hex digits) is a 400 that says which forms exist; so is
//! `state=` beside a record's name or with `DELETE`. The
//! record API exists only when `[admin] token` is set; the `Bearer` scheme
//! is matched case-insensitively (RFC 9110 §11.1) and the token is compared
//! as SHA-256 digests in constant time, so neither its bytes nor its length
//! leak through timing. Every purge is logged.
//!
//! Every refusal of an `/admin/*` request (and of an unknown path) is an
//! `application/problem+json` document whose reason is an
//! [`AdminReason`], typed under `problem_type_base` like the proxy's.
//! `/healthz`, `/readyz` and `/metrics` answer plain text in every case:
//! probes and scrapers read that.

mod about;
mod allow;
mod audit;
mod auth;
mod console;
mod corrections;
mod entities;
mod held;
mod host;
mod hot_keys;
mod inbox_api;
mod inbox_cursor;
mod listing;
mod openapi;
mod purge;
mod record_ref;
mod routes;

/// The header on every admin listener answer, by which the CLI knows it
/// talks to an admin listener before it sends the token: pointed at the
/// proxy port by mistake, it would otherwise hand the token to the proxy,
/// which forwards it to the legacy handler.
pub const LISTENER_HEADER: &str = "idemgate-listener";
use auth::{Caller, Refusal};
use record_ref::key_hash_of;
use routes::{Access, AdminPath, Endpoint, Found};

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::body::{ProxyBody, full};
use crate::config::{Config, Route};
use crate::error::AdminReason;
use crate::hot_keys::HotKeys;
use crate::inbox::Inboxes;
use crate::record::{RecordState, now_ms};
use crate::store::entity::TransitionKind;
use crate::store::{AnyStore, Existing, Observed, StoreError, StoreKey};

/// The metrics of the audit trail, described at start-up.
pub(crate) const AUDIT_METRICS: &[crate::metrics::Description] = audit::DESCRIPTIONS;

/// How long `/readyz` waits for the store before calling it down.
const READY_TIMEOUT: Duration = Duration::from_secs(1);

/// State the admin endpoints read.
#[derive(Debug)]
pub(crate) struct Admin {
    config: Arc<Config>,
    store: Arc<AnyStore>,
    metrics: Option<PrometheusHandle>,
    inboxes: Arc<Inboxes>,
    hot_keys: Arc<HotKeys>,
    /// When this process started serving, for `/admin/info`.
    started: about::Started,
    /// Every path this listener serves (`routes`).
    routes: routes::Table,
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<ProxyBody> {
    let mut response = Response::new(full(body));
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
    /// The problem document refusing an admin request: status, reason
    /// word and title from the [`AdminReason`] row, `detail` for this case.
    pub(crate) fn problem(&self, reason: AdminReason, detail: &str) -> Response<ProxyBody> {
        reason.response(&self.config.problem_types, detail)
    }

    /// An admin handler over the shared config, store, metrics handle,
    /// inboxes and hot-key tables; the audit trail's series start at 0.
    pub(crate) fn new(
        config: Arc<Config>,
        store: Arc<AnyStore>,
        metrics: Option<PrometheusHandle>,
        inboxes: Arc<Inboxes>,
        hot_keys: Arc<HotKeys>,
    ) -> Self {
        audit::metrics_at_zero();
        Self {
            config,
            store,
            metrics,
            inboxes,
            hot_keys,
            started: about::Started::now(),
            routes: routes::Table::new(),
        }
    }

    /// `/readyz`: [`Admin::readiness`] as plain text for probes.
    async fn ready(&self) -> Response<ProxyBody> {
        match self.readiness().await {
            Ok(()) => text(StatusCode::OK, "ready"),
            Err(problem) => text(StatusCode::SERVICE_UNAVAILABLE, &problem),
        }
    }

    /// Whether the store can take claims now: it answers within
    /// [`READY_TIMEOUT`] and no Redis primary may evict keys (unless
    /// `allow_eviction`); the error says why not. The eviction settings
    /// are re-read on every call; if that read fails although the ping
    /// succeeded, the last findings decide. `/readyz` and `/admin/info`
    /// both read it, so they never disagree.
    async fn readiness(&self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        match tokio::time::timeout_at(deadline, self.store.ping()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(error.to_string()),
            Err(_) => return Err("store timed out".to_owned()),
        }
        // The doc above: a failed or late re-read leaves the last findings
        // to decide, so the probe's own outcome changes nothing here.
        match tokio::time::timeout_at(deadline, self.store.probe_settings()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::debug!(%error, "readiness: settings re-read failed"),
            Err(_) => tracing::debug!("readiness: settings re-read timed out"),
        }
        match self.store.settings_problem() {
            None => Ok(()),
            Some(problem) => Err(problem),
        }
    }

    /// Answers one admin request that came to the listener's address
    /// `local`, in one order for every path (`routes`): a `Host` naming
    /// another site is refused first ([`host`]), then a path not in the
    /// table, then a missing or insufficient token where the path needs
    /// one (compared once, `auth`), then a method the path does not
    /// serve; an operator's action is recorded once answered (`audit`).
    pub(crate) async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        local: Option<std::net::SocketAddr>,
    ) -> Response<ProxyBody> {
        if !host::allowed(&request, local, &self.config.admin_hosts) {
            return self.problem(
                AdminReason::UnknownHost,
                "this Host is not a name of the admin listener: use its address, localhost, or a name in [admin] allowed_hosts",
            );
        }
        let Some(found) = self.routes.at(request.uri().path()) else {
            return self.problem(AdminReason::NotFound, "no admin endpoint at this path");
        };
        let action = found.path.endpoint.action(request.method());
        let caller = match found.path.access {
            Access::Probe | Access::Open => None,
            Access::Token => match self.authenticate(&request) {
                Ok(caller) => Some(caller),
                Err(refusal) => {
                    let answer = self.refused(refusal);
                    // A known token's refused action is still an
                    // operator's: recorded (`audit`).
                    if let (Refusal::ReadOnly(caller), Some(action)) = (refusal, action) {
                        self.record_action((action, found.route), caller.name, &answer)
                            .await;
                    }
                    return answer;
                }
            },
        };
        if !found.path.allow.admits(request.method()) {
            return self.wrong_method(found.path);
        }
        let answer = self.serve(&request, found, caller).await;
        if let (Some(action), Some(caller)) = (action, caller) {
            self.record_action((action, found.route), caller.name, &answer)
                .await;
        }
        answer
    }

    /// The 405 for a path `path` names that does not serve the method:
    /// plain text for probes and scrapers, a problem document otherwise.
    fn wrong_method(&self, path: AdminPath) -> Response<ProxyBody> {
        if path.access != Access::Probe {
            return self.method_not_allowed(path.allow);
        }
        let mut refused = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
        path.allow.stamp(&mut refused);
        refused
    }

    /// The answer of the endpoint `found` names, the token and method
    /// already checked.
    async fn serve(
        &self,
        request: &Request<Incoming>,
        found: Found<'_>,
        caller: Option<Caller<'_>>,
    ) -> Response<ProxyBody> {
        let (method, query) = (request.method(), request.uri().query());
        match found.path.endpoint {
            Endpoint::Health => text(StatusCode::OK, "ok"),
            Endpoint::Ready => self.ready().await,
            Endpoint::Metrics => self.exposition(),
            // The console's files hold no data (`console`); the calls the
            // page makes carry the token.
            Endpoint::Console(file) => file.serve(),
            Endpoint::OpenApi => openapi::document(),
            Endpoint::About(view) => self.about(view, caller).await,
            Endpoint::HotKeys => self.hot_keys(query),
            Endpoint::Audit => self.audit_trail(query).await,
            Endpoint::Record => {
                let purge = method == Method::DELETE;
                self.records(purge, found.route, found.key, query).await
            }
            Endpoint::Inbox(part) => self.inbox(part, found.route, query).await,
            Endpoint::Entity if method == Method::GET => self.entity(found.route, query).await,
            Endpoint::Entity => {
                let set = method == Method::PUT;
                self.correct(found.route, query, set).await
            }
        }
    }

    /// `/metrics`: the recorder's exposition with the process metrics and
    /// the hot-key tables.
    fn exposition(&self) -> Response<ProxyBody> {
        let Some(handle) = &self.metrics else {
            return text(StatusCode::NOT_FOUND, "metrics recorder not installed");
        };
        crate::metrics::process::collect();
        let mut body = handle.render();
        self.hot_keys.render_prometheus(&mut body);
        reply(StatusCode::OK, "text/plain; version=0.0.4", body)
    }

    /// One record (`GET` shows it, `DELETE` purges it) or a listing of
    /// records, on the route named `route_name`.
    async fn records(
        &self,
        purge: bool,
        route_name: &str,
        path_key: Option<&str>,
        query: Option<&str>,
    ) -> Response<ProxyBody> {
        let Some(route) = self.config.routes.iter().find(|r| r.name == route_name) else {
            return self.problem(AdminReason::UnknownRoute, "no route has this name");
        };
        if listing::is_listing(query) {
            if purge {
                return self.problem(
                    AdminReason::BadRequest,
                    "state= lists; DELETE needs hash= or key=",
                );
            }
            return self.record_listing(route, path_key, query).await;
        }
        // A purge says which state it saw (`purge`); the rest names the record.
        let (expect, query) = if purge {
            match purge::expected_state(query) {
                Ok(split) => split,
                Err(problem) => return self.problem(AdminReason::BadRequest, problem),
            }
        } else {
            (None, query.map(str::to_owned))
        };
        let (key_hash, key) = match self.record_key(route, path_key, query.as_deref()) {
            Ok(named) => named,
            Err(problem) => return *problem,
        };
        if purge {
            return self.purge(route, &key, &key_hash, expect.as_deref()).await;
        }
        match self.store.lookup(&key).await {
            Ok(Some(existing)) => {
                let mut view = record_view(route, &key_hash, &existing);
                self.show_probe(route, &key, &mut view).await;
                json(StatusCode::OK, &view)
            }
            Ok(None) => self.problem(AdminReason::RecordNotFound, "no record under this key"),
            Err(error) => self.problem(AdminReason::StoreUnavailable, &error.to_string()),
        }
    }

    /// The key hash a record URL names (see [`key_hash_of`]) and its store
    /// key under `route`, or the 400 problem saying why the URL names none:
    /// the record API and the inbox API address records alike.
    fn record_key(
        &self,
        route: &Route,
        path_key: Option<&str>,
        query: Option<&str>,
    ) -> Result<(String, StoreKey), Box<Response<ProxyBody>>> {
        let hash = key_hash_of(path_key, query, route.entity.is_some()).map_err(|problem| {
            Box::new(self.problem(AdminReason::BadRequest, &problem.to_string()))
        })?;
        let key = StoreKey::new(
            &self.config.store.key_prefix,
            &route.idempotency.scope,
            &hash,
        );
        // A purge through a probe route drops the probe plan with it.
        let key = if route.probe.is_some() {
            key.probed()
        } else {
            key
        };
        Ok((hash, key))
    }
}

impl Admin {
    /// Adds `key`'s pending probe to a record's `view`, on a probe route
    /// (`probe`: when an instance looks next, the attempts so far, what
    /// the last one heard); left out when the store can not say.
    async fn show_probe(&self, route: &Route, key: &StoreKey, view: &mut serde_json::Value) {
        if route.probe.is_none() {
            return;
        }
        match self.store.pending_probe(key).await {
            Ok(Some(pending)) => view["probe"] = listing::probe_view(&pending),
            Ok(None) => {}
            Err(error) => tracing::debug!(%error, "could not read the probe plan"),
        }
    }

    /// Whether `key`, on an entity route, is a delivery whose change its
    /// entity remembers as applied: purging it would not make its next
    /// copy a first delivery (contract §6), so the purge is refused.
    async fn applied_to_entity(&self, route: &Route, key: &StoreKey) -> Result<bool, StoreError> {
        let Some(entity) = key.entity().filter(|_| route.entity.is_some()) else {
            return Ok(false);
        };
        let Some((state, _)) = self.store.entity(&entity).await? else {
            return Ok(false);
        };
        Ok(state
            .history
            .iter()
            .any(|t| t.kind == TransitionKind::Applied && t.delivery == key.hash()))
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
        // The address itself as Host: the listener answers its own (`host`).
        let request =
            format!("GET /healthz HTTP/1.1\r\nhost: {target}\r\nconnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
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

/// The `name=value` pairs of a query string, raw (not percent-decoded);
/// a pair without `=` has an empty value.
fn query_pairs(query: Option<&str>) -> impl Iterator<Item = (&str, &str)> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
}

/// The state word the record API and the listing show for a record, as
/// `route` observes it (contract §4 rule 4).
fn state_word(route: &Route, existing: &Existing) -> &'static str {
    match existing.observe(route.idempotency.unknown_hold) {
        // The inbox API shows the rest (`/admin/inbox/{route}/delivery`).
        Observed::Completed(_) if matches!(existing.record.state, RecordState::Inbox(_)) => "inbox",
        Observed::Completed(_) | Observed::Acknowledged(_) => "completed",
        Observed::InFlight => "in_flight",
        Observed::Unknown { .. } if matches!(existing.record.state, RecordState::InFlight(_)) => {
            "unknown_owner_lost"
        }
        Observed::Unknown { .. } => "unknown",
    }
}

/// The JSON view of a record: no body content, only its size.
fn record_view(route: &Route, key_hash: &str, existing: &Existing) -> serde_json::Value {
    let record = &existing.record;
    let mut view = serde_json::json!({
        "route": route.name,
        "key_hash": key_hash,
        "state": state_word(route, existing),
        "age_ms": now_ms().saturating_sub(record.created_at_ms),
        "ttl_ms": existing.ttl.map(crate::time::millis),
        "fingerprint": hex::encode(record.fingerprint.0),
    });
    if let RecordState::Inbox(entry) = &record.state {
        view["inbox_stage"] = entry.stage.as_str().into();
        view["attempts"] = entry.attempts.into();
    }
    if let RecordState::Completed(answer) = &record.state {
        view["status"] = answer.status.into();
        view["body_bytes"] = answer.body.stored_len().into();
        view["body_stored"] = (answer.body != crate::record::StoredBody::TooLarge).into();
        // Completed by a probe of the handler (`pipeline::probe`).
        let resolved = answer.headers.iter().any(|(name, value)| {
            name.as_ref() == crate::pipeline::probe::RESOLVED_HEADER.as_bytes()
                && value.as_ref() == b"probe"
        });
        if resolved {
            view["resolved_by"] = "probe".into();
        }
    }
    // A compact record: the answer was the route's acknowledgement.
    if let RecordState::Acknowledged(marker) = &record.state {
        view["status"] = marker.status().into();
        view["acknowledgement"] = marker.digest_hex().into();
    }
    view
}
