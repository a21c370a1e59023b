//! [`Forwarder`]: what a delivery needs once it holds its claim — the
//! handler calls, the store its answer is kept in, the inboxes its failure
//! may be queued in, the task tracker its detached forward runs under —
//! shared by every route, by the request path (`deliver.rs`,
//! `settle_once.rs`) and by the probe runner (`probe_runner.rs`), which
//! settles the outcomes a first delivery left unknown.
//!
//! The request path's own parts (the router, the body limits) stay with
//! [`crate::pipeline::Pipeline`], so the runner sees only what settling needs.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::inbox::Inboxes;
use crate::pipeline::claim::Claimer;
use crate::pipeline::upstream_calls::UpstreamCalls;
use crate::store::AnyStore;

/// The first-delivery phase's shared parts (module docs).
#[derive(Debug)]
pub(crate) struct Forwarder {
    /// The whole configuration (problem types, the store's key prefix).
    pub(in crate::pipeline) config: Arc<Config>,
    /// Where claims, answers and probe plans are kept.
    pub(in crate::pipeline) store: Arc<AnyStore>,
    /// Every call to a handler, metered and traced.
    pub(in crate::pipeline) calls: UpstreamCalls,
    /// Stage 5, with what duplicates on this instance share.
    pub(in crate::pipeline) claimer: Claimer,
    /// Owns the detached first deliveries and probes.
    pub(in crate::pipeline) tracker: TaskTracker,
    /// Cancelled when shutdown's grace period runs out: answers still not
    /// stored by then are given up (and counted as unknown outcomes).
    pub(in crate::pipeline) grace_over: CancellationToken,
    /// Where first deliveries the handler could not take are queued.
    pub(in crate::pipeline) inboxes: Arc<Inboxes>,
    /// `[tracing]` is configured: deliveries make spans (`trace.rs`).
    pub(in crate::pipeline) tracing: bool,
}

impl Forwarder {
    /// The parts over `store`; `tracker` owns the detached upstream calls,
    /// which stop retrying a store write once `grace_over` is cancelled.
    pub(in crate::pipeline) fn new(
        config: Arc<Config>,
        store: Arc<AnyStore>,
        inboxes: Arc<Inboxes>,
        tracker: TaskTracker,
        grace_over: CancellationToken,
    ) -> Self {
        let claimer = Claimer::new(
            Arc::clone(&store),
            tracker.clone(),
            grace_over.clone(),
            config.limits.max_waiting_per_key,
        );
        Self {
            tracing: config.tracing.is_some(),
            calls: UpstreamCalls::new(Arc::clone(&config)),
            config,
            store,
            claimer,
            tracker,
            grace_over,
            inboxes,
        }
    }
}
