//! Stage 6 and the hand-over to stage 7: a claimed delivery is forwarded
//! in a task of its own, detached from the sender's connection (contract
//! rule 3: the sender hanging up cancels nothing), its answer queued in
//! the route's inbox when `[route.inbox] on` lists the failure, or settled
//! with the store (`settle_once.rs`); the task counts and logs the request and
//! hands the answer to the sender's connection if it is still there.

use std::net::SocketAddr;
use std::sync::Arc;

use http::Response;
use tracing::Instrument as _;

use crate::body::ProxyBody;
use crate::error::Rejection;
use crate::inbox::NotQueued;
use crate::pipeline::admit::identify::Identity;
use crate::pipeline::admit::verify::Verified;
use crate::pipeline::claim::lease_timing::{self, LeaseTiming};
use crate::pipeline::first_delivery::forwarder::Forwarder;
use crate::pipeline::first_delivery::settle::{self, ClaimAction};
use crate::pipeline::metrics::Outcome;
use crate::pipeline::runtime::RouteRuntime;
use crate::pipeline::trace;
use crate::pipeline::words::{Finished, Labels, Origin, RequestEnd, Settled};
use crate::record::{StoredRequest, StoredResponse};
use crate::store::Lease;
use crate::upstream::{self, ForwardError, UpstreamAnswer};

impl Forwarder {
    /// Forwards a claimed delivery and settles its lease in a detached
    /// task; the sender's connection only waits for the result. The task
    /// also counts and logs the request, so a sender that hangs up (the
    /// incident this product exists for) is still on the dashboard.
    pub(in crate::pipeline) async fn first_delivery(
        self: Arc<Self>,
        route: &Arc<RouteRuntime>,
        verified: Verified,
        identity: &Identity,
        lease: Lease,
        origin: &Origin,
    ) -> RequestEnd {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let this = Arc::clone(&self);
        let origin = origin.clone();
        let peer = origin.peer;
        let labels = Labels {
            key_hash: Some(identity.key_hash.clone()),
            key_digest: Some(identity.hot_key()),
            secret_index: verified.authenticity().secret_index,
            first_trace: None,
        };
        // Forwarded without a probe: said once, for the delivery that runs.
        if let Some(Err(skip)) = &identity.probe {
            skip.count(route.name(), &identity.key_hash);
        }
        let (parts, body) = verified.into_inbound().into_parts();
        route.meters.in_flight(1.0);
        let route = Arc::clone(route);
        let task = async move {
            let kept = route
                .inbox
                .as_ref()
                .map(|_| kept_request(&parts, &body, peer));
            let result = lease_timing::while_renewing(
                &this.store,
                &lease,
                LeaseTiming::of(&route.settings.idempotency),
                this.calls.forward_metered(&route, parts, body, peer),
            )
            .await;
            let meters = &route.meters;
            let hot_keys = route.hot_keys.as_deref();
            if let Some(ack) = this.queue(&route, &lease, kept, &result).await {
                meters.in_flight(-1.0);
                let response = Finished::new(
                    Outcome::Forwarded,
                    settle::acknowledged(&ack, &this.config.problem_types),
                )
                .with_upstream_status(settle::upstream_status(&result))
                .settled(Settled::Queued)
                .labelled(labels)
                .record(meters, hot_keys, &origin);
                answer_sender(reply, response);
                this.claimer.settled(lease.key());
                return;
            }
            let settlement = settle::claim_action(
                &result,
                lease.record(),
                &route.settings.idempotency,
                route.inbox_ack(),
            );
            let (settled, still_failing) = this
                .settle_once(&route, &lease, &settlement)
                .instrument(trace::settle(this.tracing))
                .await;
            meters.in_flight(-1.0);
            let response =
                Finished::upstream(Outcome::Forwarded, result, &this.config.problem_types)
                    .settled(settled)
                    .labelled(labels)
                    .record(meters, hot_keys, &origin);
            answer_sender(reply, response);
            match (still_failing, &settlement) {
                (Some(failure), ClaimAction::Keep(record, ttl)) => {
                    this.keep_storing(&route, &lease, record, *ttl, failure)
                        .await;
                }
                (Some(_), ClaimAction::Release) => this.keep_releasing(&route, &lease).await,
                (None, _) => {}
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
            RequestEnd::Recorded,
        )
    }

    /// Queues a failed first delivery in its route's inbox, if the route
    /// has one and `on` lists the failure; returns the ack to answer with.
    /// `None`: settle the claim as usual (also when queueing failed, so a
    /// sender is never acknowledged for a delivery the store does not hold).
    pub(in crate::pipeline) async fn queue(
        &self,
        route: &RouteRuntime,
        lease: &Lease,
        kept: Option<StoredRequest>,
        result: &Result<UpstreamAnswer, ForwardError>,
    ) -> Option<StoredResponse> {
        let inbox = route
            .inbox
            .as_ref()
            .map(|inbox| &inbox.queue)
            .filter(|queue| queue.wants(result))?;
        let request = kept?;
        match self.inboxes.enqueue(inbox, lease, request, result).await {
            Ok(queued) => {
                if queued.held {
                    route.meters.unknown_outcome();
                }
                Some(queued.ack)
            }
            Err(error @ NotQueued::Full { .. }) => {
                tracing::warn!(
                    route = route.name(),
                    key = lease.key().hash(),
                    %error,
                    "inbox full: the delivery is not acknowledged; the sender gets the handler's failure and keeps its own retries"
                );
                None
            }
            Err(NotQueued::Store(error)) => {
                tracing::error!(
                    route = route.name(),
                    key = lease.key().hash(),
                    %error,
                    "could not queue the delivery in the inbox; the sender gets the handler's failure"
                );
                None
            }
        }
    }
}

/// A delivery as an inbox keeps it: as the live attempt sends it,
/// forwarding header included.
pub(in crate::pipeline) fn kept_request(
    parts: &http::request::Parts,
    body: &bytes::Bytes,
    peer: Option<SocketAddr>,
) -> StoredRequest {
    let request = StoredRequest::capture(parts, body.clone());
    match peer.and_then(|peer| upstream::forwarded_for(&parts.headers, peer)) {
        Some(value) => request.with_header(upstream::X_FORWARDED_FOR.as_str(), value.as_bytes()),
        None => request,
    }
}

/// Hands a detached first delivery's answer to the sender's connection.
/// The connection is gone when the sender hung up: the delivery was
/// counted and logged all the same, and its answer is stored for the
/// sender's retry (contract rule 3), so there is nobody left to tell.
fn answer_sender(
    reply: tokio::sync::oneshot::Sender<Response<ProxyBody>>,
    response: Response<ProxyBody>,
) {
    if reply.send(response).is_err() {
        tracing::debug!("the sender hung up before its answer was ready");
    }
}
