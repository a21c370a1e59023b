//! `Pipeline::handle`: the only place the stages are sequenced and metered.
//!
//! ```text
//! admit/           stages 1 to 4: functions of the request, no store access
//! 1 route          admit/route.rs        unmatched → passthrough | 404; 400 path_ambiguous
//! 2 body           admit/body.rs         413
//! 3 verify         admit/verify.rs       401   (no store access before this passes)
//!                  admit/parameters.rs   400 unsigned_parameters (query beside a signed body)
//!   guard          admit/guard.rs        400 field_invalid (business-field whitelists)
//! 4 identify       admit/identify.rs     400; on a probe route, the probe plan the claim
//!                                        keeps (probe.rs, the probe rules)
//! claim/
//! 5 claim          claim.rs              503 | replay | 422 | 409
//!                  claim/lease_timing.rs claim TTL, renewal while forwarding
//! first_delivery/  from the claim on: Forwarder, shared with the probe runner
//!   hold           hold.rs               the claim, or a hold behind a busy entity
//! 6 forward        deliver.rs            a detached task, through crate::upstream: 502 | 504;
//!                                        a failure `[route.inbox] on` lists is queued in
//!                                        crate::inbox, the sender gets the ack
//! 7 settle         settle.rs             complete | release | unknown
//!                  settle_once.rs        one store attempt, then persist.rs retries until
//!                                        stored (the answer is in hand)
//!                  probe_runner.rs       asks the handler about unknown outcomes, on every
//!                                        instance
//! answer/
//!   mode           shadow.rs             enforce answers the ruling; shadow sends on
//!   report         report.rs             every end counted and logged once
//! ```
//!
//! The phases import one way: `answer` may use `first_delivery`, which may
//! use `claim`, which may use `admit`; the shared leaves (`words`,
//! `metrics`, `trace`, `runtime`, `upstream_calls`, `probe`) import no
//! phase. `.ci/module-cycles` fails on any circle among them, and
//! `.ci/module-cycles --graph` shows which way each edge runs.
//!
//! Words, one per thing a request carries on its way:
//!
//! * *delivery*: a request to a protected route, selected with its
//!   [`runtime::RouteRuntime`]; stage 4 gives it a *key* and a
//!   *fingerprint* ([`identify::Identity`]).
//! * *claim* and *lease*: stage 5 takes the key ([`crate::store::Lease`]);
//!   a [`claim::Decision`] says forward, replay or refuse.
//!
//! The words below are defined together in `words.rs`, a leaf every stage
//! may import:
//!
//! * *ruling* (`words::Ruling`): how enforce mode answers a request a
//!   rule stopped; the request itself is kept (`words::StoppedRequest`),
//!   so shadow mode can still send it on.
//! * *claim action* ([`settle::ClaimAction`]): what the store is told to do
//!   with a claim once the handler answered (keep a record, or release);
//!   *settled* (`words::Settled`): what the log line says came of it.
//! * *finished* (`words::Finished`): a request's end, counted and logged
//!   exactly once; a *request end* (`words::RequestEnd`) is either one
//!   still unrecorded or the answer of one a detached first delivery
//!   recorded.
//! * *judgement* (`store::entity::Judgement`): what an entity machine
//!   decided about a delivery it does not let through (a repeat, a refused
//!   change); a busy entity is no judgement, only a wait.
//! * *log reason* (`words::LogReason`): the `reason=` of the log line.
//!
//! This file is the only `impl Pipeline`: the order of the stages and
//! what each hands the next. From the claim on, a delivery needs only the
//! parts in `Forwarder` (the handler calls, the store, the inboxes, the
//! task tracker), which the probe runner shares; the stages after the
//! claim are its methods (`deliver.rs`, `settle_once.rs`) and the claim
//! stage's hold a function of it (`hold.rs`).
//!
//! Each stage takes its input and returns the next type or a
//! [`Rejection`]; no stage calls another. The stages run as enforce mode
//! would; shadow mode has its say in one place afterwards
//! ([`shadow`]). A first delivery's forward and
//! settle run as a task of their own under the app's `TaskTracker`, so the
//! sender hanging up cancels nothing (contract §4 rule 3) and shutdown waits
//! for it. Its answer is stored before the sender gets it; if the store
//! refuses it, the sender gets the answer at once and the task keeps
//! storing it (`first_delivery/persist.rs`) until it sticks, the lease is
//! provably lost or the shutdown grace period runs out — the last two
//! counted and logged as unknown outcomes. Every request ends in exactly one `Finished`, which is
//! counted and logged once: recording consumes it, so it can not happen
//! twice.

pub mod admit;
pub(crate) mod answer;
pub(crate) mod claim;
pub(crate) mod first_delivery;
pub(crate) mod metrics;
pub(crate) mod probe;
pub(crate) mod runtime;
#[cfg(test)]
mod scripted;
pub(crate) mod trace;
mod upstream_calls;
mod words;

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

use self::metrics::{Outcome, RouteMetrics, UNMATCHED_ROUTE};
use crate::body::ProxyBody;
use crate::config::{self, Config, OnUnavailable};
use crate::error::Rejection;
use crate::extract::Inbound;
use crate::inbox::Inboxes;
use crate::record::{TraceContext, now_ms};
use crate::store::AnyStore;
use admit::{body, entity, guard, identify, route, verify};
use answer::shadow;
use claim::Decision;
pub(crate) use first_delivery::Forwarder;
use first_delivery::{hold, settle};
use identify::Identity;
use route::{Router, Selection, Target};
use runtime::RouteRuntime;
use verify::{Unverified, Verified};
use words::{Enforcement, Finished, Labels, Origin, RequestEnd, Ruling, Settled, StoppedRequest};

/// What became of a request no route selected.
enum Unmatched {
    /// Answered: passed through, or refused (404, 413, 408).
    Finished(Finished),
    /// Its form body's `_method` field reaches `route`.
    Ambiguous {
        /// The route it may reach.
        route: Arc<RouteRuntime>,
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
    /// Stage 1: the routes' canonical prefixes, each with its runtime.
    router: Router<Arc<RouteRuntime>>,
    /// Stage 5 on, shared with the probe runner.
    forwarder: Arc<Forwarder>,
    /// The metric handles of requests no route selected.
    unmatched: RouteMetrics,
    /// `[tracing]` is configured: deliveries make spans ([`trace`]).
    tracing: bool,
    /// Deliveries per key on this instance, for the spans.
    deliveries: trace::DeliveryCounts,
    /// Stage 2's bounds, with the process-wide body budget.
    body_limits: body::BodyLimits,
}

impl Pipeline {
    /// Assembles a pipeline over the routes' runtimes (in route order);
    /// `tracker` owns the detached upstream calls, which stop retrying a
    /// store write once `grace_over` is cancelled.
    pub(crate) fn new(
        config: Arc<Config>,
        store: Arc<AnyStore>,
        inboxes: Arc<Inboxes>,
        tracker: TaskTracker,
        grace_over: CancellationToken,
        routes: &[Arc<RouteRuntime>],
    ) -> Self {
        let router = Router::of(
            routes
                .iter()
                .map(|route| (&route.settings, Arc::clone(route))),
        );
        let body_limits = body::BodyLimits {
            max_bytes: config.limits.max_body_bytes,
            timeout: config.limits.body_read_timeout,
            budget: crate::budget::Budget::new(config.limits.max_buffered_bytes),
        };
        let forwarder = Forwarder::new(Arc::clone(&config), store, inboxes, tracker, grace_over);
        Self {
            unmatched: RouteMetrics::new(UNMATCHED_ROUTE, 0),
            router,
            body_limits,
            tracing: forwarder.tracing,
            forwarder: Arc::new(forwarder),
            config,
            deliveries: trace::DeliveryCounts::default(),
        }
    }

    /// The first-delivery phase's parts, for the probe runner.
    pub(crate) fn forwarder(&self) -> &Arc<Forwarder> {
        &self.forwarder
    }

    /// Handles one request end to end, in its `delivery` span. Never
    /// fails: every error becomes a problem+json answer.
    pub(crate) async fn handle(
        self: Arc<Self>,
        mut request: Request<Incoming>,
        peer: Option<SocketAddr>,
    ) -> Response<ProxyBody> {
        if let Some(peer) = peer {
            request.extensions_mut().insert(body::Peer(peer.ip()));
        }
        let span = trace::delivery(
            self.tracing,
            request.method(),
            request.uri(),
            request.headers(),
            peer,
            self.config.listen.proxy,
        );
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
        if self.tracing {
            let chosen = match &selection {
                Selection::Route(target) => Some(&target.route),
                Selection::Ambiguous { route } => Some(route),
                Selection::Unmatched => None,
            };
            if let Some(route) = chosen {
                let prefix = &route.settings.path_prefix;
                trace::routed(&tracing::Span::current(), request.method(), prefix);
            }
        }
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
        let (route, end) = match selection {
            Selection::Unmatched => match self.unmatched(request, peer).await {
                Unmatched::Finished(finished) => (None, finished.into()),
                Unmatched::Ambiguous { route, inbound } => {
                    trace::routed(
                        &tracing::Span::current(),
                        &inbound.parts.method,
                        &route.settings.path_prefix,
                    );
                    // A `_method` field of its form body reaches a route:
                    // refused as stage 1 refuses an override header.
                    let enforcement = Enforcement::Stopped {
                        ruling: Ruling::Refuse(Rejection::PathAmbiguous),
                        request: StoppedRequest::Unclaimed(inbound),
                    };
                    let end =
                        shadow::apply_mode(&self.forwarder.calls, &route, enforcement, peer).await;
                    (Some(route), end)
                }
            },
            Selection::Ambiguous { route } => {
                // Stage 1 can not tell which request this is: enforce mode
                // refuses it, shadow mode streams it on unread.
                let enforcement = Enforcement::Stopped {
                    ruling: Ruling::Refuse(Rejection::PathAmbiguous),
                    request: StoppedRequest::Unread(request),
                };
                let end =
                    shadow::apply_mode(&self.forwarder.calls, &route, enforcement, peer).await;
                (Some(route), end)
            }
            Selection::Route(target) => {
                let route = Arc::clone(&target.route);
                let end = Arc::clone(&self).protected(target, request, &origin).await;
                (Some(route), end)
            }
        };
        match end {
            RequestEnd::Unrecorded(finished) => match &route {
                Some(route) => finished.record(&route.meters, route.hot_keys.as_deref(), &origin),
                None => finished.record(&self.unmatched, None, &origin),
            },
            RequestEnd::Recorded(response) => response,
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
            if let Some(Selection::Ambiguous { route }) = self.router.with_body(
                &parts.method,
                parts.uri.path(),
                parts.uri.query(),
                &parts.headers,
                &inbound.body,
            ) {
                return Unmatched::Ambiguous { route, inbound };
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
        Unmatched::Finished(
            self.forwarder
                .calls
                .pass_through_metered(&self.unmatched, &self.config.upstream, request, peer)
                .await,
        )
    }

    /// A request to a protected route: the stages as enforce mode runs
    /// them, then the route's mode decides the answer
    /// ([`shadow::apply_mode`]).
    async fn protected(
        self: Arc<Self>,
        target: Target<Arc<RouteRuntime>>,
        request: Request<Incoming>,
        origin: &Origin,
    ) -> RequestEnd {
        let route = Arc::clone(&target.route);
        let (enforcement, labels) = Arc::clone(&self).enforce(target, request, origin).await;
        shadow::apply_mode(&self.forwarder.calls, &route, enforcement, origin.peer)
            .await
            .labelled(labels)
    }

    /// Stages 2–7 as enforce mode runs them. A request a rule stops is
    /// handed back with the ruling, for the mode to decide on; the labels
    /// are what the log line says about the delivery.
    async fn enforce(
        self: Arc<Self>,
        target: Target<Arc<RouteRuntime>>,
        request: Request<Incoming>,
        origin: &Origin,
    ) -> (Enforcement, Labels) {
        let peer = origin.peer;
        let runtime = &target.route;
        let route = &runtime.settings;
        let (verified, identity) = match self.admit(&target, request).await {
            Ok(admitted) => admitted,
            Err(stopped) => return (stopped, Labels::default()),
        };
        let secret_index = verified.authenticity().secret_index;
        let rules = &route.idempotency;
        let mut first_trace = None;
        let span = tracing::Span::current();
        let context = trace::claiming(&span, &self.deliveries, &identity.key_hash);
        let entity = entity::EntityClaim::of(runtime, identity.entity.as_ref());
        let claimed = hold::claim_or_hold(
            &self.forwarder,
            runtime,
            &verified,
            &identity,
            (entity.as_ref(), context, peer),
        )
        .await;
        let decision = match claimed {
            hold::Claimed::Decided(decision) => decision,
            hold::Claimed::Judged(ruling) => {
                let judged = Enforcement::Stopped {
                    ruling,
                    request: StoppedRequest::Duplicate(verified.into_inbound()),
                };
                return (judged, labels_of(identity, secret_index, None));
            }
            hold::Claimed::Held(ack) => {
                let held = Finished::new(
                    Outcome::Forwarded,
                    settle::acknowledged(&ack, &self.config.problem_types),
                )
                .settled(Settled::Held);
                return (
                    Enforcement::Ended(held.into()),
                    labels_of(identity, secret_index, None),
                );
            }
        };
        let enforcement = match decision {
            Ok(Decision::Forward(lease)) => Enforcement::Ended(
                Arc::clone(&self.forwarder)
                    .first_delivery(runtime, verified, &identity, lease, origin)
                    .await,
            ),
            Ok(Decision::Replay {
                answer,
                answered_at_ms,
                first,
            }) => {
                first_trace = first;
                Enforcement::Stopped {
                    ruling: Ruling::Replay {
                        answer,
                        answered_at_ms,
                    },
                    request: StoppedRequest::Duplicate(verified.into_inbound()),
                }
            }
            Ok(Decision::Refuse(rejection, first)) => {
                first_trace = first;
                Enforcement::Stopped {
                    ruling: Ruling::Refuse(rejection),
                    request: StoppedRequest::Duplicate(verified.into_inbound()),
                }
            }
            Err(error) => {
                tracing::warn!(route = route.name, %error, "store unavailable");
                match rules.on_unavailable {
                    OnUnavailable::Forward => self
                        .forwarder
                        .calls
                        .unprotected(runtime, verified.inbound(), peer, Outcome::Unprotected)
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
        let labels = labels_of(identity, secret_index, first_trace);
        (enforcement, labels)
    }

    /// Stages 2 to 4 for a routed request: its body, a second look at the
    /// route once the body is read, the signature, the guards and the
    /// key. A request a stage refuses is handed back unclaimed, with the
    /// ruling, for the mode to decide on.
    async fn admit(
        &self,
        target: &Target<Arc<RouteRuntime>>,
        request: Request<Incoming>,
    ) -> Result<(Verified, Identity), Enforcement> {
        let runtime = &target.route;
        let route = &runtime.settings;
        let refused = |rejection, inbound| Enforcement::Stopped {
            ruling: Ruling::Refuse(rejection),
            request: StoppedRequest::Unclaimed(inbound),
        };
        let inbound = body::read(request, &self.body_limits)
            .await
            .map_err(|rejection| Finished::rejected(rejection, &self.config.problem_types))?;
        let parts = &inbound.parts;
        let reselected = self.router.with_body(
            &parts.method,
            parts.uri.path(),
            parts.uri.query(),
            &parts.headers,
            &inbound.body,
        );
        if reselected.is_some_and(
            |again| !matches!(again, Selection::Route(t) if Arc::ptr_eq(&t.route, runtime)),
        ) {
            // A `_method` field of the form body reaches another route.
            return Err(refused(Rejection::PathAmbiguous, inbound));
        }
        let verified = trace::verify(self.tracing)
            .in_scope(|| verify::verify(inbound, route, now_ms()))
            .map_err(|refusal| {
                let Unverified { inbound, rejection } = *refusal;
                refused(rejection, inbound)
            })?;
        if let Some(secret) = verified.authenticity().secret_index {
            runtime.meters.secret_match(secret);
        }
        if let Err(rejection) = guard::check(verified.inbound(), &route.guards) {
            return Err(refused(rejection, verified.into_inbound()));
        }
        match identify::identify(
            &verified,
            route,
            &target.canonical,
            &self.config.store.key_prefix,
        ) {
            Ok(identity) => Ok((verified, identity)),
            Err(rejection) => Err(refused(rejection, verified.into_inbound())),
        }
    }
}

/// What the log line says about a delivery the claim stage saw.
fn labels_of(
    identity: Identity,
    secret_index: Option<usize>,
    first_trace: Option<TraceContext>,
) -> Labels {
    Labels {
        key_digest: Some(identity.hot_key()),
        key_hash: Some(identity.key_hash),
        secret_index,
        first_trace,
    }
}
