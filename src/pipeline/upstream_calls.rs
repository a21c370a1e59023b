//! Every call the pipeline makes to a handler, metered and traced in one
//! place: a claimed delivery's forward (stage 6), a forward without a
//! claim (shadow mode, a fail-open store outage) and an untouched
//! passthrough (an unmatched request, a request shadow mode could not
//! read). The stages that call out hold an [`UpstreamCalls`], not the
//! whole pipeline.

use std::net::SocketAddr;
use std::sync::Arc;

use http::Request;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::body::ProxyBody;
use crate::config::{self, Config};
use crate::error::ProblemTypes;
use crate::extract::Inbound;
use crate::pipeline::metrics::{Outcome, RouteMetrics, UpstreamErrorKind};
use crate::pipeline::runtime::RouteRuntime;
use crate::pipeline::trace;
use crate::pipeline::words::Finished;
use crate::upstream::{self, ForwardError, UpstreamAnswer, UpstreamClient};

/// The pooled client and what every call needs of the configuration.
#[derive(Debug)]
pub(super) struct UpstreamCalls {
    client: UpstreamClient,
    config: Arc<Config>,
    /// `[tracing]` is configured: forwards make spans.
    tracing: bool,
}

impl UpstreamCalls {
    /// Calls over a fresh pooled client, under `config`'s limits.
    pub(super) fn new(config: Arc<Config>) -> Self {
        Self {
            client: upstream::client(),
            tracing: config.tracing.is_some(),
            config,
        }
    }

    /// The pooled client, for a probe's question to a handler (not a
    /// delivery: neither metered nor traced as one).
    pub(super) fn client(&self) -> &UpstreamClient {
        &self.client
    }

    /// How a call's failure is answered: the configuration's problem types.
    pub(super) fn problem_types(&self) -> &ProblemTypes {
        &self.config.problem_types
    }

    /// Sends a buffered request to the route's upstream and records the
    /// upstream latency and error metrics.
    pub(super) async fn forward_metered(
        &self,
        route: &RouteRuntime,
        mut parts: http::request::Parts,
        body: bytes::Bytes,
        peer: Option<SocketAddr>,
    ) -> Result<UpstreamAnswer, ForwardError> {
        let settings = &route.settings;
        let started = Instant::now();
        let max_stored = self.config.limits.max_stored_answer_bytes;
        let span = if self.tracing {
            let target = upstream::target(&settings.upstream.url, parts.uri.path_and_query());
            trace::forward(true, &parts.method, &target, &mut parts.headers)
        } else {
            tracing::Span::none()
        };
        let result = upstream::forward(
            &self.client,
            &settings.upstream,
            parts,
            body,
            peer,
            max_stored,
        )
        .instrument(span.clone())
        .await;
        trace::answered(&span, &result);
        let cache_status = &settings.idempotency.cache_status;
        route
            .meters
            .upstream_call(cache_status, &result, started.elapsed());
        result
    }

    /// Forwards without a claim: shadow mode, or a fail-open store outage.
    pub(super) async fn unprotected(
        &self,
        route: &RouteRuntime,
        inbound: &Inbound,
        peer: Option<SocketAddr>,
        outcome: Outcome,
    ) -> Finished {
        let result = self
            .forward_metered(route, inbound.parts.clone(), inbound.body.clone(), peer)
            .await;
        Finished::upstream(outcome, result, &self.config.problem_types)
    }

    /// Passes a request through untouched to `upstream`, counting the call
    /// in `meters`: the passthrough of an unmatched request, and shadow
    /// mode's send of a request it could not read.
    pub(super) async fn pass_through_metered(
        &self,
        meters: &RouteMetrics,
        upstream: &config::Upstream,
        request: Request<ProxyBody>,
        peer: Option<SocketAddr>,
    ) -> Finished {
        let started = Instant::now();
        let result = upstream::pass_through(&self.client, upstream, request, peer).await;
        meters.upstream(started.elapsed());
        match result {
            Ok(response) => Finished::passed_through(response),
            Err(error) => {
                meters.upstream_error(UpstreamErrorKind::of(error));
                Finished::rejected(error.rejection(), &self.config.problem_types)
            }
        }
    }
}
