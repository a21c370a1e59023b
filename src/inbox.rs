//! The durable inbox: a first delivery the handler could not take is
//! acknowledged to its sender, kept in the store and redelivered until the
//! handler takes it (README, "Durable inbox"; `[route.inbox]`).
//!
//! ```text
//! pipeline (first delivery failed as `on` lists)
//!   └─ Inboxes::enqueue   due+since index, then the record: state inbox/queued
//!                         (the sender gets the ack; copies get it replayed)
//! worker.rs (per scope, every instance)
//!   └─ take due hashes (hidden for visibility_timeout) → look at the record
//!      → owner-fenced swap to delivering → send → swap to the next stage
//! operator.rs (admin API)   list, show, retry now (once), drop
//! transition.rs             the stage rules, pure
//! ```
//!
//! The record is the truth and every change to it is an owner-fenced swap
//! (`store::inbox`), so two workers never send one delivery. The indexes
//! are written before the record when a delivery is queued and repaired
//! by whichever worker finds them stale, so a crash between two writes
//! can leave a stale index entry but never a queued delivery nobody will
//! look at. A worker sends only after its claim is confirmed, and only if
//! the handler's whole timeout fits in its visibility window; what it can
//! not confirm it leaves alone, and the next worker finds the claim
//! expired and holds the delivery as unknown (conservative: never a
//! second send).

mod operator;
mod transition;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, OnUpstreamTimeout, Route};
use crate::metrics::inbox::InboxMetrics;
use crate::pipeline::forward::{ForwardError, UpstreamAnswer};
use crate::pipeline::settle;
use crate::record::{
    InboxEntry, OwnerMint, RecordState, Stage, StoredRequest, StoredResponse, now_ms,
};
use crate::store::inbox::{Index, IndexKey};
use crate::store::{AnyStore, Completion, Lease, StoreError};
pub(crate) use operator::{Action, Listing};
pub(crate) use transition::Tally;

/// How often the backlog gauges are refreshed from the store.
const GAUGES_EVERY: Duration = Duration::from_secs(5);

/// A scope's three indexes.
#[derive(Debug, Clone)]
pub(crate) struct Indexes {
    due: IndexKey,
    since: IndexKey,
    dead: IndexKey,
}

impl Indexes {
    fn of(prefix: &str, scope: &str) -> Self {
        Self {
            due: IndexKey::new(prefix, scope, Index::Due),
            since: IndexKey::new(prefix, scope, Index::Since),
            dead: IndexKey::new(prefix, scope, Index::Dead),
        }
    }
}

/// A delivery [`Inboxes::enqueue`] kept.
#[derive(Debug)]
pub(crate) struct Queued {
    /// What the sender is told (and every copy after it).
    pub(crate) ack: StoredResponse,
    /// Whether it was held as unknown (the live call timed out under
    /// `on_upstream_timeout = "hold"`) rather than queued.
    pub(crate) held: bool,
}

/// The inboxes of every route that has one, shared by the pipeline (which
/// queues), the workers (which redeliver) and the admin API.
#[derive(Debug)]
pub(crate) struct Inboxes {
    config: Arc<Config>,
    store: Arc<AnyStore>,
    mint: OwnerMint,
    /// Per route index: its metrics, if it has an inbox.
    metrics: Vec<Option<InboxMetrics>>,
}

impl Inboxes {
    /// The inboxes `config` declares (none is fine: then nothing runs).
    pub(crate) fn new(config: Arc<Config>, store: Arc<AnyStore>) -> Self {
        let metrics = config
            .routes
            .iter()
            .map(|route| route.inbox.as_ref().map(|_| InboxMetrics::new(&route.name)))
            .collect();
        Self {
            config,
            store,
            mint: OwnerMint::new(),
            metrics,
        }
    }

    fn indexes(&self, route: &Route) -> Indexes {
        Indexes::of(&self.config.store.key_prefix, &route.idempotency.scope)
    }

    /// Whether route `index` queues this result of its live call: the
    /// route has an inbox, the route does not store the answer, and `on`
    /// lists the failure.
    pub(crate) fn wants(
        &self,
        index: usize,
        result: &Result<UpstreamAnswer, ForwardError>,
    ) -> bool {
        let route = &self.config.routes[index];
        let Some(inbox) = &route.inbox else {
            return false;
        };
        match result {
            Ok(answer) => {
                let status = answer.status.as_u16();
                !route.idempotency.cache_status.contains(status) && inbox.on.status(status)
            }
            Err(ForwardError::Refused) => inbox.on.refused,
            Err(ForwardError::Broken | ForwardError::Timeout) => inbox.on.timeout,
        }
    }

    /// Queues a first delivery whose live call failed as `on` lists:
    /// indexes first, then the record over the claim `lease` proves. An
    /// error means nothing was queued (a stale index entry at most, which
    /// a worker clears): the caller settles the claim as it would without
    /// an inbox, so the sender is never told "ok" for a delivery the store
    /// does not hold.
    pub(crate) async fn enqueue(
        &self,
        index: usize,
        lease: &Lease,
        request: StoredRequest,
        result: &Result<UpstreamAnswer, ForwardError>,
    ) -> Result<Queued, StoreError> {
        let route = &self.config.routes[index];
        let inbox = route
            .inbox
            .as_ref()
            .expect("wants() checked the route has an inbox");
        let now = now_ms();
        let (error, answer, unknown) = match result {
            Ok(answer) => (
                format!("handler answered {}", answer.status.as_u16()),
                Some(settle::stored(answer)),
                false,
            ),
            Err(error) => (error.to_string(), None, *error != ForwardError::Refused),
        };
        let held = unknown && route.idempotency.on_upstream_timeout == OnUpstreamTimeout::Hold;
        let mut entry = InboxEntry {
            ack: ack(inbox),
            stage: if held { Stage::Unknown } else { Stage::Queued },
            attempts: 0,
            limit: inbox.max_attempts,
            due_ms: now,
            route: route.name.clone(),
            last_error: String::new(),
            last_answer: answer,
            request,
        };
        entry.set_error(&if unknown {
            format!("outcome unknown: {error}")
        } else {
            error
        });
        let hash = lease.key().hash();
        let indexes = self.indexes(route);
        if held {
            self.store.index_add(&indexes.dead, hash, now).await?;
        } else {
            entry.due_ms = now + millis(transition::delay(inbox, 0, transition::jitter()));
            self.store.index_add(&indexes.since, hash, now).await?;
            self.store
                .index_add(&indexes.due, hash, entry.due_ms)
                .await?;
        }
        let ack = entry.ack.clone();
        let stage = entry.stage;
        let record = lease
            .record()
            .with_state(RecordState::Inbox(Box::new(entry)));
        let retention = route.idempotency.retention;
        match self.store.complete(lease, &record, retention).await? {
            Completion::TakenOver => Err(StoreError::Backend(
                "another delivery holds the key: the claim was lost before it was queued".into(),
            )),
            _ => {
                tracing::warn!(
                    route = route.name,
                    key = hash,
                    stage = stage.as_str(),
                    "handler could not take the delivery: acknowledged and kept in the inbox"
                );
                Ok(Queued {
                    ack,
                    held: stage == Stage::Unknown,
                })
            }
        }
    }

    /// Starts every scope's redelivery workers and the backlog gauges
    /// under `tracker`; they stop taking work when `shutdown` is
    /// cancelled.
    pub(crate) fn start(self: &Arc<Self>, tracker: &TaskTracker, shutdown: &CancellationToken) {
        let mut scopes: Vec<&str> = Vec::new();
        for route in self.config.routes.iter().filter(|r| r.inbox.is_some()) {
            if !scopes.contains(&route.idempotency.scope.as_str()) {
                scopes.push(&route.idempotency.scope);
            }
        }
        for scope in scopes {
            let workers = worker::Workers::new(Arc::clone(self), scope, tracker.clone());
            tracker.spawn(workers.run(shutdown.clone()));
        }
        if self.metrics.iter().any(Option::is_some) {
            tracker.spawn(Arc::clone(self).refresh_gauges(shutdown.clone()));
        }
    }

    /// Reads each inbox route's shared backlog every [`GAUGES_EVERY`], and
    /// trims dead-index entries whose records have expired.
    async fn refresh_gauges(self: Arc<Self>, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(GAUGES_EVERY);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = ticker.tick() => {}
            }
            for (route, metrics) in self.config.routes.iter().zip(&self.metrics) {
                let Some(metrics) = metrics else { continue };
                if let Err(error) = self.refresh(route, metrics).await {
                    tracing::debug!(route = route.name, %error, "inbox gauges not refreshed");
                }
            }
        }
    }

    async fn refresh(&self, route: &Route, metrics: &InboxMetrics) -> Result<(), StoreError> {
        let indexes = self.indexes(route);
        let now = now_ms();
        let expired = now.saturating_sub(millis(route.idempotency.retention));
        self.store.index_prune(&indexes.dead, expired).await?;
        let (queued, oldest) = self.store.index_stats(&indexes.since).await?;
        let (dead, _) = self.store.index_stats(&indexes.dead).await?;
        let age = oldest.map_or(0.0, |at| now.saturating_sub(at) as f64 / 1e3);
        metrics.backlog(queued, age, dead);
        Ok(())
    }

    fn route(&self, name: &str) -> Option<(usize, &Route)> {
        self.config
            .routes
            .iter()
            .enumerate()
            .find(|(_, route)| route.name == name && route.inbox.is_some())
    }
}

/// The acknowledgement a route's inbox sends.
fn ack(inbox: &crate::config::Inbox) -> StoredResponse {
    let headers = inbox
        .ack
        .content_type
        .iter()
        .map(|value| {
            (
                bytes::Bytes::from_static(b"content-type"),
                bytes::Bytes::copy_from_slice(value.as_bytes()),
            )
        })
        .collect();
    StoredResponse {
        status: inbox.ack.status,
        headers,
        body: crate::record::StoredBody::Kept(inbox.ack.body.clone()),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
