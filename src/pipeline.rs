//! `Pipeline::handle`: the only place the stages are sequenced and metered.
//!
//! ```text
//! 1 route    pipeline/route.rs          unmatched → passthrough | 404; 400 path_ambiguous
//! 2 body     pipeline/body.rs           413
//! 3 verify   pipeline/verify.rs         401   (no store access before this passes)
//! 4 identify pipeline/identify.rs       400
//! 5 claim    pipeline/claim.rs          503 | replay | 422 | 409
//!            pipeline/lease_timing.rs   claim TTL, renewal while forwarding
//! 6 forward  pipeline/forward.rs        502 | 504   (detached from the sender)
//! 7 settle   pipeline/settle.rs         complete | release | unknown
//!            pipeline/outcome.rs        one store attempt, then pipeline/persist.rs
//!                                       retries until stored (the answer is in hand)
//! ```
//!
//! Each stage takes its input and returns the next type or a
//! [`Rejection`]; no stage calls another. A first delivery's forward and
//! settle run as a task of their own under the app's `TaskTracker`, so the
//! sender hanging up cancels nothing (SPEC §4 rule 3) and shutdown waits
//! for it. Its answer is stored before the sender gets it; if the store
//! refuses it, the sender gets the answer at once and the task keeps
//! storing it ([`persist`]) until it sticks, the lease is provably lost or
//! the shutdown grace period runs out — the last two counted and logged as
//! unknown outcomes. Every request ends in exactly one `Finished`, which is counted
//! and logged once, here.

pub mod backoff;
pub mod body;
pub mod claim;
pub mod forward;
pub mod identify;
pub mod lease_timing;
mod outcome;
pub mod persist;
pub mod quick_ack;
pub mod route;
#[cfg(test)]
mod scripted;
pub mod settle;
pub mod single_flight;
pub mod verify;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, Mode, OnUnavailable, Route, Unmatched};
use crate::error::{ANSWER_NOT_STORED, Reason, Rejection};
use crate::extract::Inbound;
use crate::metrics::{self, Outcome, RouteMetrics, UpstreamErrorKind};
use crate::record::{StoredBody, now_ms};
use crate::store::{AnyStore, Lease};
use claim::{Claimer, Decision};
use forward::{ForwardError, ProxyBody, UpstreamClient, full};
use identify::Identity;
use lease_timing::LeaseTiming;
use route::{Router, Selection, Target};
use settle::Settlement;
use verify::{Unverified, Verified};

/// How long a sender is told to wait when the store is down.
const STORE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The `reason=` of a request's log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Note {
    /// A rejection, enforced or (in shadow mode) the one enforce would
    /// have made: counted in `idemgate_rejections_total`.
    Rejection(Reason),
    /// A replay whose first answer was not stored: logged, but not counted
    /// as a rejection (the delivery was processed).
    AnswerNotStored,
}

impl Note {
    /// The word the log line shows.
    fn as_str(self) -> &'static str {
        match self {
            Self::Rejection(reason) => reason.as_str(),
            Self::AnswerNotStored => ANSWER_NOT_STORED,
        }
    }
}

/// How one request ended: what is counted and logged.
struct Finished {
    outcome: Outcome,
    response: Response<ProxyBody>,
    reason: Option<Note>,
    key_hash: Option<String>,
    /// Index of the secret that verified the delivery, for the log line.
    secret_index: Option<usize>,
    /// Already counted and logged (by a detached first delivery, which
    /// records itself so a sender's hang-up can not lose the count).
    recorded: bool,
}

impl Finished {
    fn new(outcome: Outcome, response: Response<ProxyBody>) -> Self {
        Self {
            outcome,
            response,
            reason: None,
            key_hash: None,
            secret_index: None,
            recorded: false,
        }
    }

    fn rejected(rejection: Rejection) -> Self {
        let reason = rejection.reason();
        let response = rejection.into_response().map(full_from);
        Self {
            outcome: Outcome::Rejected,
            response,
            reason: Some(Note::Rejection(reason)),
            key_hash: None,
            secret_index: None,
            recorded: false,
        }
    }

    /// The answer to a forwarded request: the upstream's, or idemgate's
    /// 502/504 when the upstream failed (outcome unchanged: it was sent).
    fn upstream(outcome: Outcome, result: Result<forward::UpstreamAnswer, ForwardError>) -> Self {
        match result {
            Ok(answer) => Self::new(outcome, settle::live(answer)),
            Err(error) => {
                let rejection = settle::failure(error);
                let reason = rejection.reason();
                Self::new(outcome, rejection.into_response().map(full_from)).with_reason(reason)
            }
        }
    }

    /// Notes the rejection this request was answered with (or, in shadow
    /// mode, would have been): logged and counted.
    fn with_reason(mut self, reason: Reason) -> Self {
        self.reason = Some(Note::Rejection(reason));
        self
    }

    /// Notes a replay whose answer was not stored: logged only.
    fn answer_not_stored(mut self) -> Self {
        self.reason = Some(Note::AnswerNotStored);
        self
    }

    /// Counts and logs the request once.
    fn record(&mut self, route: &str, meters: &RouteMetrics, started: Instant) {
        if self.recorded {
            return;
        }
        self.recorded = true;
        let elapsed = started.elapsed();
        meters.request(self.outcome, elapsed);
        if let Some(Note::Rejection(reason)) = self.reason {
            meters.rejection(reason);
        }
        tracing::info!(
            route,
            outcome = self.outcome.as_str(),
            reason = self.reason.map_or("", Note::as_str),
            key = self.key_hash.as_deref().unwrap_or(""),
            secret_index = self.secret_index,
            status = self.response.status().as_u16(),
            latency_ms = elapsed.as_secs_f64() * 1e3,
            "request"
        );
    }
}

fn full_from(body: http_body_util::Full<bytes::Bytes>) -> ProxyBody {
    use http_body_util::BodyExt;
    body.map_err(|never| match never {}).boxed()
}

/// Everything a request needs, shared by all connections.
#[derive(Debug)]
pub struct Pipeline {
    config: Arc<Config>,
    /// Stage 1: the routes' canonical prefixes.
    router: Router,
    store: Arc<AnyStore>,
    client: UpstreamClient,
    /// Stage 5, with what duplicates on this instance share.
    claimer: Claimer,
    tracker: TaskTracker,
    /// Cancelled when shutdown's grace period runs out: answers still not
    /// stored by then are given up (and counted as unknown outcomes).
    grace_over: CancellationToken,
    /// Metric handles per route, in route order, then the unmatched ones.
    meters: Vec<RouteMetrics>,
}

impl Pipeline {
    /// Assembles a pipeline; `tracker` owns the detached upstream calls,
    /// which stop retrying a store write once `grace_over` is cancelled.
    pub fn new(
        config: Arc<Config>,
        store: Arc<AnyStore>,
        tracker: TaskTracker,
        grace_over: CancellationToken,
    ) -> Self {
        let meters = config
            .routes
            .iter()
            .map(|route| RouteMetrics::new(&route.name, route.scheme.secret_count()))
            .chain([RouteMetrics::new(metrics::UNMATCHED_ROUTE, 0)])
            .collect();
        let claimer = Claimer::new(
            Arc::clone(&store),
            tracker.clone(),
            config.limits.max_waiting_per_key,
        );
        Self {
            meters,
            router: Router::new(&config.routes),
            config,
            store,
            client: forward::client(),
            claimer,
            tracker,
            grace_over,
        }
    }

    /// Handles one request end to end. Never fails: every error becomes a
    /// problem+json answer.
    pub async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        peer: Option<SocketAddr>,
    ) -> Response<ProxyBody> {
        let started = Instant::now();
        let selection =
            self.router
                .select(request.method(), request.uri().path(), request.headers());
        let (route_index, mut finished) = match selection {
            Selection::Unmatched => (None, self.unmatched(request, peer).await),
            Selection::Ambiguous { index } => {
                (Some(index), self.ambiguous(index, request, peer).await)
            }
            Selection::Route(target) => (
                Some(target.index),
                Arc::clone(&self)
                    .protected(target, request, peer, started)
                    .await,
            ),
        };
        let route_name =
            route_index.map_or(metrics::UNMATCHED_ROUTE, |i| &self.config.routes[i].name);
        let meters = &self.meters[route_index.unwrap_or(self.config.routes.len())];
        finished.record(route_name, meters, started);
        finished.response
    }

    async fn unmatched(&self, request: Request<Incoming>, peer: Option<SocketAddr>) -> Finished {
        if self.config.unmatched == Unmatched::Reject {
            return Finished::rejected(Rejection::RouteNotFound);
        }
        let started = Instant::now();
        let result =
            forward::pass_through(&self.client, &self.config.upstream, request, peer).await;
        let meters = &self.meters[self.config.routes.len()];
        meters.upstream(started.elapsed());
        match result {
            Ok(response) => Finished::new(Outcome::Passthrough, response),
            Err(error) => {
                meters.upstream_error(upstream_error_kind(error));
                Finished::rejected(settle::failure(error))
            }
        }
    }

    /// A spelling of a protected route that stage 1 can not settle: 400,
    /// or in shadow mode forwarded as it is and counted.
    async fn ambiguous(
        &self,
        index: usize,
        request: Request<Incoming>,
        peer: Option<SocketAddr>,
    ) -> Finished {
        let route = &self.config.routes[index];
        let rejection = Rejection::PathAmbiguous;
        if route.idempotency.mode != Mode::Shadow {
            return Finished::rejected(rejection);
        }
        let started = Instant::now();
        let result = forward::pass_through(&self.client, &route.upstream, request, peer).await;
        self.meters[index].upstream(started.elapsed());
        match result {
            Ok(response) => {
                Finished::new(Outcome::Passthrough, response).with_reason(rejection.reason())
            }
            Err(error) => {
                self.meters[index].upstream_error(upstream_error_kind(error));
                Finished::rejected(settle::failure(error))
            }
        }
    }

    async fn protected(
        self: Arc<Self>,
        target: Target,
        request: Request<Incoming>,
        peer: Option<SocketAddr>,
        started: Instant,
    ) -> Finished {
        let index = target.index;
        let route = &self.config.routes[index];
        let shadow = route.idempotency.mode == Mode::Shadow;
        let limits = &self.config.limits;
        let inbound =
            match body::read(request, limits.max_body_bytes, limits.body_read_timeout).await {
                Ok(inbound) => inbound,
                Err(rejection) => return Finished::rejected(rejection),
            };
        let verified = match verify::verify(inbound, route, now_ms()) {
            Ok(verified) => {
                if let Some(secret) = verified.authenticity().secret_index {
                    self.meters[index].secret_match(secret);
                }
                verified
            }
            Err(refused) if shadow => {
                let Unverified { inbound, rejection } = *refused;
                return self
                    .unprotected(index, &inbound, peer, Outcome::Passthrough)
                    .await
                    .with_reason(rejection.reason());
            }
            Err(refused) => return Finished::rejected(refused.rejection),
        };
        let verified_secret = verified.authenticity().secret_index;
        let identity = match identify::identify(
            &verified,
            route,
            &target.canonical,
            &self.config.store.key_prefix,
        ) {
            Ok(identity) => identity,
            Err(rejection) if shadow => {
                return self
                    .unprotected(index, verified.inbound(), peer, Outcome::Passthrough)
                    .await
                    .with_reason(rejection.reason());
            }
            Err(rejection) => return Finished::rejected(rejection),
        };
        // Shadow mode never holds a request back.
        let patience = if shadow {
            Duration::ZERO
        } else {
            route.idempotency.wait_timeout
        };
        let decision = self
            .claimer
            .claim(&identity, &route.idempotency, patience)
            .await;
        let mut finished = match decision {
            Ok(Decision::Forward(lease)) => {
                Arc::clone(&self)
                    .first_delivery(index, verified, &identity, lease, peer, started)
                    .await
            }
            Ok(Decision::Replay(_)) if shadow => {
                self.unprotected(index, verified.inbound(), peer, Outcome::ShadowDuplicate)
                    .await
            }
            Ok(Decision::Replay(stored)) => {
                let replayed = Finished::new(Outcome::Replayed, settle::replay(&stored));
                if stored.body == StoredBody::TooLarge {
                    self.meters[index].answer_not_stored(true);
                    replayed.answer_not_stored()
                } else {
                    replayed
                }
            }
            Ok(Decision::Refuse(rejection)) if shadow => self
                .unprotected(index, verified.inbound(), peer, Outcome::ShadowDuplicate)
                .await
                .with_reason(rejection.reason()),
            Ok(Decision::Refuse(rejection)) => Finished::rejected(rejection),
            Err(error) => {
                tracing::warn!(route = route.name, %error, "store unavailable");
                match route.idempotency.on_unavailable {
                    OnUnavailable::Forward => {
                        self.unprotected(index, verified.inbound(), peer, Outcome::Unprotected)
                            .await
                    }
                    OnUnavailable::Reject => Finished::rejected(Rejection::StoreUnavailable {
                        retry_after: STORE_RETRY_AFTER,
                    }),
                }
            }
        };
        finished.key_hash.get_or_insert(identity.key_hash);
        finished.secret_index = verified_secret;
        finished
    }

    /// Forwards without a claim: shadow mode, or a fail-open store outage.
    async fn unprotected(
        &self,
        index: usize,
        inbound: &Inbound,
        peer: Option<SocketAddr>,
        outcome: Outcome,
    ) -> Finished {
        let result = self
            .forward_metered(index, inbound.parts.clone(), inbound.body.clone(), peer)
            .await;
        Finished::upstream(outcome, result)
    }

    /// Sends a buffered request to the route's upstream and records the
    /// upstream latency and error metrics.
    async fn forward_metered(
        &self,
        index: usize,
        parts: http::request::Parts,
        body: bytes::Bytes,
        peer: Option<SocketAddr>,
    ) -> Result<forward::UpstreamAnswer, ForwardError> {
        let route = &self.config.routes[index];
        let started = Instant::now();
        let max_stored = self.config.limits.max_stored_answer_bytes;
        let result =
            forward::forward(&self.client, &route.upstream, parts, body, peer, max_stored).await;
        meter_upstream(route, &self.meters[index], &result, started.elapsed());
        result
    }

    /// Forwards a claimed delivery and settles its lease in a detached
    /// task; the sender's connection only waits for the result. The task
    /// also counts and logs the request, so a sender that hangs up (the
    /// incident this product exists for) is still on the dashboard.
    async fn first_delivery(
        self: Arc<Self>,
        index: usize,
        verified: Verified,
        identity: &Identity,
        lease: Lease,
        peer: Option<SocketAddr>,
        started: Instant,
    ) -> Finished {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let this = Arc::clone(&self);
        let key_hash = identity.key_hash.clone();
        let secret_index = verified.authenticity().secret_index;
        let (parts, body) = verified.into_inbound().into_parts();
        self.meters[index].in_flight(1.0);
        self.tracker.spawn(async move {
            let route = &this.config.routes[index];
            let result = lease_timing::while_renewing(
                &*this.store,
                &lease,
                LeaseTiming::of(&route.idempotency),
                this.forward_metered(index, parts, body, peer),
            )
            .await;
            let meters = &this.meters[index];
            let settlement = settle::settlement(&result, lease.record(), &route.idempotency);
            let still_failing = this.settle_once(index, &lease, &settlement).await;
            meters.in_flight(-1.0);
            let mut finished = Finished::upstream(Outcome::Forwarded, result);
            finished.key_hash = Some(key_hash);
            finished.secret_index = secret_index;
            finished.record(&route.name, meters, started);
            let _ = reply.send(finished);
            if let (Some(failure), Settlement::Keep(record, ttl)) = (still_failing, &settlement) {
                this.keep_storing(index, &lease, record, *ttl, failure)
                    .await;
            }
            this.claimer.settled(lease.key());
        });
        answer.await.unwrap_or_else(|_| {
            tracing::error!(
                key = identity.key_hash,
                "upstream task ended without an answer"
            );
            Finished::rejected(Rejection::UpstreamError)
        })
    }
}

fn meter_upstream(
    route: &Route,
    meters: &RouteMetrics,
    result: &Result<forward::UpstreamAnswer, ForwardError>,
    elapsed: Duration,
) {
    meters.upstream(elapsed);
    let kind = match result {
        Ok(answer)
            if route
                .idempotency
                .cache_status
                .contains(answer.status.as_u16()) =>
        {
            return;
        }
        Ok(_) => UpstreamErrorKind::Status,
        Err(error) => upstream_error_kind(*error),
    };
    meters.upstream_error(kind);
}

fn upstream_error_kind(error: ForwardError) -> UpstreamErrorKind {
    match error {
        ForwardError::Timeout => UpstreamErrorKind::Timeout,
        ForwardError::Refused | ForwardError::Broken => UpstreamErrorKind::Connect,
    }
}

/// Re-exported for the server: a plain `Full` body as [`ProxyBody`].
pub fn body_of(bytes: impl Into<bytes::Bytes>) -> ProxyBody {
    full(bytes)
}
