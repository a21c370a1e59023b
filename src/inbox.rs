//! The durable inbox: a first delivery the handler could not take is
//! acknowledged to its sender, kept in the store and redelivered until the
//! handler takes it (docs/inbox.md; `[route.inbox]`).
//!
//! ```text
//! pipeline (first delivery failed as `on` lists)
//!   └─ Inboxes::enqueue   due+since index, then the record with its owed-set
//!                         entry (one step; replicated first with
//!                         min_replicas_ack): state inbox/queued, and only
//!                         then the sender gets the ack
//! worker.rs (per scope, every instance)
//!   └─ take due hashes (hidden for visibility_timeout) → look at the record
//!      → owner-fenced swap to delivering → send → swap to the next stage
//! repair.rs (per scope, every instance, every repair_every)
//!   └─ owed set → index entries that went missing, put back
//! operator.rs (admin API)   list, show, retry now (once), drop
//! transition.rs             the stage rules, pure
//! ```
//!
//! The record is the truth and every change to it is an owner-fenced swap
//! (`store::inbox`), so two workers never send one delivery. The indexes
//! only say where to look: they are written before the record when a
//! delivery is queued and repaired by whichever worker finds them stale,
//! and every owed delivery is also in its scope's owed set, written in the
//! same atomic step as its record, from which the repair pass restores
//! any index entry that was lost (a Redis Cluster failover of the index's
//! primary with replication lag). A worker sends only after its claim is
//! confirmed (and, with `min_replicas_ack`, replicated), and only if the
//! handler's whole timeout fits in its visibility window; what it can not
//! confirm it leaves alone, and the next worker finds the claim expired
//! and holds the delivery as unknown (conservative: never a second send).

mod enqueue;
mod hold;
pub(crate) mod metrics;
mod operator;
pub(crate) mod probe;
mod repair;
mod transition;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, Inbox, Route};
use crate::record::{OwnerMint, Record, RecordState, StoredResponse, now_ms};
use crate::store::entity::EntityEffect;
use crate::store::inbox::{BookLine, InboxKeys, Index, Place};
use crate::store::{AnyStore, StoreError, StoreKey};
pub(crate) use enqueue::NotQueued;
pub(crate) use hold::Holding;
use metrics::InboxMetrics;
pub(crate) use operator::{Action, Listing};
pub(crate) use transition::RedeliveryResult;

/// Dead-index entries checked against their records per refresh.
const PRUNE_PAGE: usize = 100;

/// How often the backlog gauges are refreshed from the store.
const GAUGES_EVERY: Duration = Duration::from_secs(5);

/// One route's inbox, built once at start-up: the route's settings, its
/// `[route.inbox]` rules, its metrics and its scope's indexes. The
/// pipeline's per-route runtime holds the same one, so queueing, the
/// workers and the admin API never look a route up by number.
#[derive(Debug)]
pub(crate) struct RouteInbox {
    /// The route's settings (upstream, idempotency).
    pub(crate) settings: Route,
    /// `[route.inbox]`.
    pub(crate) rules: Inbox,
    metrics: InboxMetrics,
    /// The scope's inbox keys.
    keys: InboxKeys,
}

impl RouteInbox {
    /// The route's name.
    pub(crate) fn name(&self) -> &str {
        &self.settings.name
    }

    /// The route's scope: the key space its records and indexes share.
    pub(crate) fn scope(&self) -> &str {
        &self.settings.idempotency.scope
    }

    /// How long `record` is kept: until its delivery is resolved, then
    /// the route's retention.
    fn kept_for(&self, record: &Record) -> Duration {
        let retention = self.settings.idempotency.retention;
        match &record.state {
            RecordState::Inbox(entry) => entry.stage.kept_for(retention),
            _ => retention,
        }
    }

    /// What writing `record` means for its entity's pending change, as
    /// the route's `advance_status` says (nothing off entity routes).
    fn effect(&self, record: &Record) -> EntityEffect {
        let advance = self.settings.entity.as_ref().map(|e| &e.advance_status);
        EntityEffect::of_route(record, advance)
    }
}

/// The inboxes of every route that has one, shared by the pipeline (which
/// queues), the workers (which redeliver) and the admin API.
#[derive(Debug)]
pub(crate) struct Inboxes {
    config: Arc<Config>,
    store: Arc<AnyStore>,
    mint: OwnerMint,
    /// Every route with an inbox, in route order.
    routes: Vec<Arc<RouteInbox>>,
}

impl Inboxes {
    /// The inboxes `config` declares (none is fine: then nothing runs).
    pub(crate) fn new(config: Arc<Config>, store: Arc<AnyStore>) -> Self {
        let prefix = &config.store.key_prefix;
        let routes = config
            .routes
            .iter()
            .filter_map(|route| {
                let rules = route.inbox.clone()?;
                Some(Arc::new(RouteInbox {
                    metrics: InboxMetrics::new(&route.name),
                    keys: InboxKeys::new(prefix, &route.idempotency.scope),
                    settings: route.clone(),
                    rules,
                }))
            })
            .collect();
        Self {
            config,
            store,
            mint: OwnerMint::new(),
            routes,
        }
    }

    /// The inbox of the route named `name`, if it has one.
    pub(crate) fn route(&self, name: &str) -> Option<&Arc<RouteInbox>> {
        self.routes.iter().find(|inbox| inbox.name() == name)
    }

    /// Writes one line into a scope's books. A failure is logged, not
    /// returned: the delivery's own state is already written, and the
    /// books exist to show such gaps (`IdemgateInboxBooksUnbalanced`).
    async fn enter(&self, keys: &InboxKeys, line: BookLine, hash: &str) {
        if let Err(error) = self.store.book(keys, line).await {
            tracing::error!(
                key = hash,
                line = line.as_str(),
                %error,
                "inbox: the books were not updated; they stay unbalanced by one"
            );
        }
    }

    /// Starts every scope's redelivery workers and the backlog gauges
    /// under `tracker`; they stop taking work when `shutdown` is
    /// cancelled.
    pub(crate) fn start(self: &Arc<Self>, tracker: &TaskTracker, shutdown: &CancellationToken) {
        let mut scopes: Vec<&str> = Vec::new();
        for inbox in &self.routes {
            if !scopes.contains(&inbox.scope()) {
                scopes.push(inbox.scope());
            }
        }
        for scope in scopes {
            let workers = worker::Workers::new(Arc::clone(self), scope, tracker.clone());
            tracker.spawn(workers.run(shutdown.clone()));
            let repair = repair::Repair::new(Arc::clone(self), scope);
            tracker.spawn(repair.run(shutdown.clone()));
        }
        if !self.routes.is_empty() {
            tracker.spawn(Arc::clone(self).refresh_gauges(shutdown.clone()));
        }
    }

    /// Reads each inbox route's shared backlog every [`GAUGES_EVERY`], and
    /// trims dead-index entries whose records have expired.
    async fn refresh_gauges(self: Arc<Self>, shutdown: CancellationToken) {
        crate::time::every(GAUGES_EVERY, shutdown, || {
            let this = Arc::clone(&self);
            async move {
                for inbox in &this.routes {
                    if let Err(error) = this.refresh(inbox).await {
                        tracing::debug!(route = inbox.name(), %error, "inbox gauges not refreshed");
                    }
                }
            }
        })
        .await;
    }

    async fn refresh(&self, inbox: &RouteInbox) -> Result<(), StoreError> {
        let now = now_ms();
        self.prune_dead(inbox).await?;
        let backlog = self.store.backlog(&inbox.keys).await?;
        let books = self.store.books(&inbox.keys).await?;
        let age = backlog
            .oldest_ms
            .map_or(0.0, |at| now.saturating_sub(at) as f64 / 1e3);
        inbox.metrics.backlog(backlog.pending, age, backlog.held);
        inbox.metrics.books(&books);
        Ok(())
    }

    /// Takes out of the dead index the oldest entries (up to
    /// [`PRUNE_PAGE`]) whose record is no longer held: dropped or retried
    /// by an operator, or gone. Each entry is judged by its own record,
    /// never by the retention of whichever route of the scope looks
    /// (held records do not expire: [`Stage::kept_for`]).
    async fn prune_dead(&self, inbox: &RouteInbox) -> Result<(), StoreError> {
        let prefix = &self.config.store.key_prefix;
        let keys = &inbox.keys;
        for (hash, _) in self.store.page(keys, Index::Dead, None, PRUNE_PAGE).await? {
            let key = StoreKey::new(prefix, inbox.scope(), &hash);
            let held = match self.store.lookup(&key).await? {
                Some(existing) => matches!(
                    &existing.record.state,
                    RecordState::Inbox(entry) if entry.stage.is_held()
                ),
                None => false,
            };
            if !held {
                self.store
                    .place(keys, &hash, Place::out_of(Index::Dead))
                    .await?;
            }
        }
        Ok(())
    }
}

/// The acknowledgement a route's inbox sends (also the answer a compact
/// record stands for, `crate::record::AckMarker`).
pub(crate) fn ack(inbox: &Inbox) -> StoredResponse {
    ack_response(&inbox.ack)
}

/// An acknowledgement as the answer a sender gets (the inbox's, or an
/// entity table's: `crate::entity`).
pub(crate) fn ack_response(ack: &crate::config::Ack) -> StoredResponse {
    let headers = ack
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
        status: ack.status,
        headers,
        body: crate::record::StoredBody::Kept(ack.body.clone()),
    }
}
