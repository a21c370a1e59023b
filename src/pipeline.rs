//! `Pipeline::handle`: the only place the stages are sequenced and metered.
//!
//! ```text
//! 1 route    pipeline/route.rs          unmatched → passthrough | 404; 400 path_ambiguous
//! 2 body     pipeline/body.rs           413
//! 3 verify   pipeline/verify.rs         401   (no store access before this passes)
//!            pipeline/parameters.rs     400 unsigned_parameters (query beside a signed body)
//!   guard    pipeline/guard.rs          400 field_invalid (business-field whitelists)
//! 4 identify pipeline/identify.rs       400
//! 5 claim    pipeline/claim.rs          503 | replay | 422 | 409
//!            pipeline/lease_timing.rs   claim TTL, renewal while forwarding
//! 6 forward  pipeline/forward.rs        502 | 504   (detached from the sender)
//! 7 settle   pipeline/settle.rs         complete | release | unknown
//!            pipeline/outcome.rs        one store attempt, then pipeline/persist.rs
//!                                       retries until stored (the answer is in hand)
//!            crate::inbox               or, for a failure `[route.inbox] on` lists:
//!                                       queued, and the sender gets the ack
//! ```
//!
//! Each stage takes its input and returns the next type or a
//! [`Rejection`]; no stage calls another. The stages run as enforce mode
//! would; shadow mode has its say in one place afterwards
//! ([`shadow`]). A first delivery's forward and
//! settle run as a task of their own under the app's `TaskTracker`, so the
//! sender hanging up cancels nothing (SPEC §4 rule 3) and shutdown waits
//! for it. Its answer is stored before the sender gets it; if the store
//! refuses it, the sender gets the answer at once and the task keeps
//! storing it ([`persist`]) until it sticks, the lease is provably lost or
//! the shutdown grace period runs out — the last two counted and logged as
//! unknown outcomes. Every request ends in exactly one `Finished`, which is
//! counted and logged once: recording consumes it, so it can not happen
//! twice.

pub(crate) mod backoff;
pub(crate) mod body;
pub(crate) mod claim;
pub(crate) mod forward;
pub(crate) mod guard;
pub mod identify;
mod inbox;
pub(crate) mod lease_timing;
mod outcome;
pub mod parameters;
pub(crate) mod persist;
pub(crate) mod quick_ack;
mod report;
pub mod route;
#[cfg(test)]
mod scripted;
pub(crate) mod settle;
mod shadow;
pub(crate) mod single_flight;
pub(crate) mod trace;
pub mod verify;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use crate::body::ProxyBody;
use crate::config::{self, Config, OnUnavailable};
use crate::error::Rejection;
use crate::extract::Inbound;
use crate::hot_keys::HotKeys;
use crate::inbox::Inboxes;
use crate::metrics::{self, Outcome, RouteMetrics};
use crate::record::{StoredRequest, now_ms};
use crate::store::{AnyStore, Lease};
use claim::{Claimer, Decision};
use forward::{ForwardError, UpstreamClient};
use identify::Identity;
use lease_timing::LeaseTiming;
use report::{Ending, Finished, Labels, Origin, Settled};
use route::{Router, Selection, Target};
use settle::Settlement;
use shadow::{Enforced, Held, Verdict};
use verify::{Unverified, Verified};

/// What became of a request no route selected.
enum Unmatched {
    /// Answered: passed through, or refused (404, 413, 408).
    Finished(Finished),
    /// Its form body's `_method` field reaches route `index`.
    Ambiguous {
        /// The route it may reach.
        index: usize,
        /// The request, its body read.
        inbound: Inbound,
    },
}

/// How long a sender is told to wait when the store is down.
const STORE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Everything a request needs, shared by all connections.
#[derive(Debug)]
pub(crate) struct Pipeline {
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
    /// Where first deliveries the handler could not take are queued.
    inboxes: Arc<Inboxes>,
    /// `[tracing]` is configured: deliveries make spans ([`trace`]).
    tracing: bool,
    /// Deliveries per key on this instance, for the spans.
    deliveries: trace::DeliveryCounts,
    /// Stage 2's bounds, with the process-wide body budget.
    body_limits: body::BodyLimits,
}

impl Pipeline {
    /// Assembles a pipeline; `tracker` owns the detached upstream calls,
    /// which stop retrying a store write once `grace_over` is cancelled;
    /// each route's deliveries feed its table in `hot_keys`.
    pub(crate) fn new(
        config: Arc<Config>,
        store: Arc<AnyStore>,
        inboxes: Arc<Inboxes>,
        tracker: TaskTracker,
        grace_over: CancellationToken,
        hot_keys: &HotKeys,
    ) -> Self {
        let meters = config
            .routes
            .iter()
            .enumerate()
            .map(|(index, route)| {
                RouteMetrics::new(&route.name, route.scheme.secret_count())
                    .with_hot_keys(hot_keys.route(index).cloned())
            })
            .chain([RouteMetrics::new(metrics::UNMATCHED_ROUTE, 0)])
            .collect();
        let tracing = config.tracing.is_some();
        let claimer = Claimer::new(
            Arc::clone(&store),
            tracker.clone(),
            config.limits.max_waiting_per_key,
        );
        let body_limits = body::BodyLimits {
            max_bytes: config.limits.max_body_bytes,
            timeout: config.limits.body_read_timeout,
            budget: crate::budget::Budget::new(config.limits.max_buffered_bytes),
        };
        Self {
            meters,
            router: Router::new(&config.routes),
            body_limits,
            config,
            store,
            client: forward::client(),
            claimer,
            tracker,
            grace_over,
            inboxes,
            tracing,
            deliveries: trace::DeliveryCounts::default(),
        }
    }

    /// Handles one request end to end, in its `delivery` span. Never
    /// fails: every error becomes a problem+json answer.
    pub(crate) async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        peer: Option<SocketAddr>,
    ) -> Response<ProxyBody> {
        let span = trace::delivery(self.tracing, request.headers());
        self.handle_in_span(request, peer).instrument(span).await
    }

    async fn handle_in_span(
        self: Arc<Self>,
        request: Request<Incoming>,
        peer: Option<SocketAddr>,
    ) -> Response<ProxyBody> {
        let started = Instant::now();
        let uri = request.uri();
        let selection =
            self.router
                .select(request.method(), uri.path(), uri.query(), request.headers());
        let (method, path) = match &selection {
            Selection::Route(target) => (
                target.canonical.method.clone(),
                target.canonical.path.clone(),
            ),
            Selection::Unmatched | Selection::Ambiguous { .. } => {
                (request.method().clone(), request.uri().path().to_owned())
            }
        };
        let origin = Origin {
            method,
            path,
            peer,
            started,
        };
        let (route_index, ending) = match selection {
            Selection::Unmatched => match self.unmatched(request, peer).await {
                Unmatched::Finished(finished) => (None, finished.into()),
                Unmatched::Ambiguous { index, inbound } => {
                    // A `_method` field of its form body reaches a route:
                    // refused as stage 1 refuses an override header.
                    let enforced = Enforced::Stopped {
                        verdict: Verdict::Refuse(Rejection::PathAmbiguous),
                        held: Held::Unclaimed(inbound),
                    };
                    (Some(index), self.apply_mode(index, enforced, peer).await)
                }
            },
            Selection::Ambiguous { index } => {
                // Stage 1 can not tell which request this is: enforce mode
                // refuses it, shadow mode streams it on unread.
                let enforced = Enforced::Stopped {
                    verdict: Verdict::Refuse(Rejection::PathAmbiguous),
                    held: Held::Unread(request),
                };
                (Some(index), self.apply_mode(index, enforced, peer).await)
            }
            Selection::Route(target) => (
                Some(target.index),
                Arc::clone(&self).protected(target, request, &origin).await,
            ),
        };
        match ending {
            Ending::Pending(finished) => {
                let route_name =
                    route_index.map_or(metrics::UNMATCHED_ROUTE, |i| &self.config.routes[i].name);
                let meters = &self.meters[route_index.unwrap_or(self.config.routes.len())];
                finished.record(route_name, meters, &origin)
            }
            Ending::Recorded(response) => response,
        }
    }

    /// A request no route selected: 404 or passed through. A form request
    /// whose `_method` field could reach a route has its body read first
    /// ([`Router::body_may_decide`]), and is handed back when it does.
    async fn unmatched(&self, request: Request<Incoming>, peer: Option<SocketAddr>) -> Unmatched {
        let uri = request.uri();
        let request = if self.router.body_may_decide(
            request.method(),
            uri.path(),
            uri.query(),
            request.headers(),
        ) {
            let inbound = match body::read(request, &self.body_limits).await {
                Ok(inbound) => inbound,
                Err(rejection) => {
                    return Unmatched::Finished(Finished::rejected(
                        rejection,
                        &self.config.problem_types,
                    ));
                }
            };
            let parts = &inbound.parts;
            if let Some(Selection::Ambiguous { index }) = self.router.with_body(
                &parts.method,
                parts.uri.path(),
                parts.uri.query(),
                &parts.headers,
                &inbound.body,
            ) {
                return Unmatched::Ambiguous { index, inbound };
            }
            Request::from_parts(inbound.parts, crate::body::full(inbound.body))
        } else {
            request.map(BodyExt::boxed)
        };
        if self.config.unmatched == config::Unmatched::Reject {
            return Unmatched::Finished(Finished::rejected(
                Rejection::RouteNotFound,
                &self.config.problem_types,
            ));
        }
        let started = Instant::now();
        let result =
            forward::pass_through(&self.client, &self.config.upstream, request, peer).await;
        let meters = &self.meters[self.config.routes.len()];
        meters.upstream(started.elapsed());
        Unmatched::Finished(match result {
            Ok(response) => Finished::passed_through(response),
            Err(error) => {
                meters.upstream_error(error.kind());
                Finished::rejected(error.rejection(), &self.config.problem_types)
            }
        })
    }

    /// A request to a protected route: the stages as enforce mode runs
    /// them, then the route's mode decides the answer
    /// ([`Pipeline::apply_mode`]).
    async fn protected(
        self: Arc<Self>,
        target: Target,
        request: Request<Incoming>,
        origin: &Origin,
    ) -> Ending {
        let index = target.index;
        let (enforced, labels) = Arc::clone(&self).enforce(target, request, origin).await;
        self.apply_mode(index, enforced, origin.peer)
            .await
            .labelled(labels)
    }

    /// Stages 2–7 as enforce mode runs them. A request a rule stops is
    /// handed back with the verdict, for the mode to decide on; the labels
    /// are what the log line says about the delivery.
    async fn enforce(
        self: Arc<Self>,
        target: Target,
        request: Request<Incoming>,
        origin: &Origin,
    ) -> (Enforced, Labels) {
        let peer = origin.peer;
        let index = target.index;
        let route = &self.config.routes[index];
        let inbound = match body::read(request, &self.body_limits).await {
            Ok(inbound) => inbound,
            Err(rejection) => {
                return (
                    Finished::rejected(rejection, &self.config.problem_types).into(),
                    Labels::default(),
                );
            }
        };
        let parts = &inbound.parts;
        let reselected = self.router.with_body(
            &parts.method,
            parts.uri.path(),
            parts.uri.query(),
            &parts.headers,
            &inbound.body,
        );
        if reselected.is_some_and(|again| !matches!(again, Selection::Route(t) if t.index == index))
        {
            // A `_method` field of the form body reaches another route.
            let stopped = Enforced::Stopped {
                verdict: Verdict::Refuse(Rejection::PathAmbiguous),
                held: Held::Unclaimed(inbound),
            };
            return (stopped, Labels::default());
        }
        let verified = match trace::verify(self.tracing)
            .in_scope(|| verify::verify(inbound, route, now_ms()))
        {
            Ok(verified) => {
                if let Some(secret) = verified.authenticity().secret_index {
                    self.meters[index].secret_match(secret);
                }
                verified
            }
            Err(refused) => {
                let Unverified { inbound, rejection } = *refused;
                let stopped = Enforced::Stopped {
                    verdict: Verdict::Refuse(rejection),
                    held: Held::Unclaimed(inbound),
                };
                return (stopped, Labels::default());
            }
        };
        if let Err(rejection) = guard::check(verified.inbound(), &route.guards) {
            let stopped = Enforced::Stopped {
                verdict: Verdict::Refuse(rejection),
                held: Held::Unclaimed(verified.into_inbound()),
            };
            return (stopped, Labels::default());
        }
        let identity = match identify::identify(
            &verified,
            route,
            &target.canonical,
            &self.config.store.key_prefix,
        ) {
            Ok(identity) => identity,
            Err(rejection) => {
                let stopped = Enforced::Stopped {
                    verdict: Verdict::Refuse(rejection),
                    held: Held::Unclaimed(verified.into_inbound()),
                };
                return (stopped, Labels::default());
            }
        };
        let secret_index = verified.authenticity().secret_index;
        let rules = &route.idempotency;
        let mut first_trace = None;
        let span = tracing::Span::current();
        let context = trace::claiming(&span, &self.deliveries, &identity.key_hash);
        let decision = self
            .claimer
            .claim(&identity, rules, shadow::patience(rules), context)
            .instrument(trace::claim(self.tracing))
            .await;
        let enforced = match decision {
            Ok(Decision::Forward(lease)) => Enforced::Ended(
                Arc::clone(&self)
                    .first_delivery(index, verified, &identity, lease, origin)
                    .await,
            ),
            Ok(Decision::Replay {
                answer,
                answered_at_ms,
                first,
            }) => {
                first_trace = first;
                Enforced::Stopped {
                    verdict: Verdict::Replay {
                        answer,
                        answered_at_ms,
                    },
                    held: Held::Duplicate(verified.into_inbound()),
                }
            }
            Ok(Decision::Refuse(rejection, first)) => {
                first_trace = first;
                Enforced::Stopped {
                    verdict: Verdict::Refuse(rejection),
                    held: Held::Duplicate(verified.into_inbound()),
                }
            }
            Err(error) => {
                tracing::warn!(route = route.name, %error, "store unavailable");
                match rules.on_unavailable {
                    OnUnavailable::Forward => self
                        .unprotected(index, verified.inbound(), peer, Outcome::Unprotected)
                        .await
                        .into(),
                    OnUnavailable::Reject => Finished::rejected(
                        Rejection::StoreUnavailable {
                            retry_after: STORE_RETRY_AFTER,
                        },
                        &self.config.problem_types,
                    )
                    .into(),
                }
            }
        };
        if let Some(first) = &first_trace {
            trace::link_first(&span, first);
        }
        let labels = Labels {
            key_hash: Some(identity.key_hash),
            key_digest: Some(identity.key_digest),
            secret_index,
            first_trace,
        };
        (enforced, labels)
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
        Finished::upstream(outcome, result, &self.config.problem_types)
    }

    /// Sends a buffered request to the route's upstream and records the
    /// upstream latency and error metrics.
    async fn forward_metered(
        &self,
        index: usize,
        mut parts: http::request::Parts,
        body: bytes::Bytes,
        peer: Option<SocketAddr>,
    ) -> Result<forward::UpstreamAnswer, ForwardError> {
        let route = &self.config.routes[index];
        let started = Instant::now();
        let max_stored = self.config.limits.max_stored_answer_bytes;
        let span = trace::forward(self.tracing, &mut parts.headers);
        let result = forward::forward(&self.client, &route.upstream, parts, body, peer, max_stored)
            .instrument(span.clone())
            .await;
        trace::answered(&span, &result);
        forward::meter(route, &self.meters[index], &result, started.elapsed());
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
        origin: &Origin,
    ) -> Ending {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let this = Arc::clone(&self);
        let origin = origin.clone();
        let peer = origin.peer;
        let labels = Labels {
            key_hash: Some(identity.key_hash.clone()),
            key_digest: Some(identity.key_digest),
            secret_index: verified.authenticity().secret_index,
            first_trace: None,
        };
        let (parts, body) = verified.into_inbound().into_parts();
        self.meters[index].in_flight(1.0);
        let task = async move {
            let route = &this.config.routes[index];
            // Kept as the live attempt sends it, forwarding header included.
            let kept = route.inbox.as_ref().map(|_| {
                let request = StoredRequest::capture(&parts, body.clone());
                match peer.and_then(|peer| forward::forwarded_for(&parts.headers, peer)) {
                    Some(value) => {
                        request.with_header(forward::X_FORWARDED_FOR.as_str(), value.as_bytes())
                    }
                    None => request,
                }
            });
            let result = lease_timing::while_renewing(
                &this.store,
                &lease,
                LeaseTiming::of(&route.idempotency),
                this.forward_metered(index, parts, body, peer),
            )
            .await;
            let meters = &this.meters[index];
            if let Some(ack) = this.queue(index, &lease, kept, &result).await {
                meters.in_flight(-1.0);
                let response = Finished::new(
                    Outcome::Forwarded,
                    settle::acknowledged(&ack, &this.config.problem_types),
                )
                .with_upstream_status(report::upstream_status(&result))
                .settled(Settled::Queued)
                .labelled(labels)
                .record(&route.name, meters, &origin);
                let _ = reply.send(response);
                this.claimer.settled(lease.key());
                return;
            }
            let settlement = settle::settlement(&result, lease.record(), &route.idempotency);
            let (settled, still_failing) = this
                .settle_once(index, &lease, &settlement)
                .instrument(trace::settle(this.tracing))
                .await;
            meters.in_flight(-1.0);
            let response =
                Finished::upstream(Outcome::Forwarded, result, &this.config.problem_types)
                    .settled(settled)
                    .labelled(labels)
                    .record(&route.name, meters, &origin);
            let _ = reply.send(response);
            if let (Some(failure), Settlement::Keep(record, ttl)) = (still_failing, &settlement) {
                this.keep_storing(index, &lease, record, *ttl, failure)
                    .await;
            }
            this.claimer.settled(lease.key());
        };
        self.tracker
            .spawn(task.instrument(tracing::Span::current()));
        answer.await.map_or_else(
            |_| {
                tracing::error!(
                    key = identity.key_hash,
                    "upstream task ended without an answer"
                );
                Finished::rejected(Rejection::UpstreamError, &self.config.problem_types).into()
            },
            Ending::Recorded,
        )
    }
}
