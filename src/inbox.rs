//! The durable inbox: a first delivery the handler could not take is
//! acknowledged to its sender, kept in the store and redelivered until the
//! handler takes it (README, "Durable inbox"; `[route.inbox]`).
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

mod operator;
mod repair;
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
    InboxEntry, OwnerMint, Record, RecordState, Stage, StoredRequest, StoredResponse, now_ms,
};
use crate::store::inbox::{Book, BooksKey, Index, IndexKey};
use crate::store::{AnyStore, Completion, Lease, StoreError, StoreKey};
pub(crate) use operator::{Action, Listing};
pub(crate) use transition::Tally;

/// Dead-index entries checked against their records per refresh.
const PRUNE_PAGE: usize = 100;

/// How often the backlog gauges are refreshed from the store.
const GAUGES_EVERY: Duration = Duration::from_secs(5);

/// A scope's three indexes, and its books.
#[derive(Debug, Clone)]
pub(crate) struct Indexes {
    due: IndexKey,
    since: IndexKey,
    dead: IndexKey,
    books: BooksKey,
}

impl Indexes {
    fn of(prefix: &str, scope: &str) -> Self {
        Self {
            due: IndexKey::new(prefix, scope, Index::Due),
            since: IndexKey::new(prefix, scope, Index::Since),
            dead: IndexKey::new(prefix, scope, Index::Dead),
            books: BooksKey::new(prefix, scope),
        }
    }
}

/// Why [`Inboxes::enqueue`] did not keep a delivery: either way its
/// sender is not acknowledged and gets the handler's failure.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotQueued {
    /// The scope already owes `max_queued` deliveries (queued, delivering,
    /// dead or unknown): the backlog is bounded by refusing new ones, never
    /// by dropping old ones.
    #[error("the inbox of scope {scope} is full ({owed} owed, max_queued {max})")]
    Full {
        /// The route's scope.
        scope: String,
        /// Deliveries owed (queued or held) when it looked.
        owed: u64,
        /// The bound.
        max: u64,
    },
    /// The store did not take it.
    #[error(transparent)]
    Store(#[from] StoreError),
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
    /// indexes first, then the record (with its owed-set entry) over the
    /// claim `lease` proves. An error means the sender must not be
    /// acknowledged: nothing was queued, or (with `min_replicas_ack`) the
    /// queued record is not on enough replicas to survive a failover. The
    /// caller settles the claim as it would without an inbox, so the
    /// sender is never told "ok" for a delivery the store may not hold.
    pub(crate) async fn enqueue(
        &self,
        index: usize,
        lease: &Lease,
        request: StoredRequest,
        result: &Result<UpstreamAnswer, ForwardError>,
    ) -> Result<Queued, NotQueued> {
        let route = &self.config.routes[index];
        let inbox = route
            .inbox
            .as_ref()
            .expect("wants() checked the route has an inbox");
        let indexes = self.indexes(route);
        // Every owed delivery counts, held ones too: none of them expires,
        // so this is what bounds the store's memory. Checked, then added:
        // instances queueing at the same moment can each pass, so the
        // bound may be exceeded by that many.
        let (pending, _) = self.store.index_stats(&indexes.since).await?;
        let (held, _) = self.store.index_stats(&indexes.dead).await?;
        let owed = pending.saturating_add(held);
        if owed >= inbox.max_queued {
            if let Some(metrics) = &self.metrics[index] {
                metrics.full();
            }
            return Err(NotQueued::Full {
                scope: route.idempotency.scope.clone(),
                owed,
                max: inbox.max_queued,
            });
        }
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
        let kept = stage.kept_for(route.idempotency.retention);
        // The record and its owed-set entry in one step; with
        // `min_replicas_ack`, an error unless enough replicas have both.
        let written = match self.store.complete(lease, &record, kept).await {
            Ok(Completion::TakenOver) => Err(StoreError::Backend(
                "another delivery holds the key: the claim was lost before it was queued".into(),
            )),
            Ok(_) => Ok(()),
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            self.unqueue(&indexes, hash, held).await;
            return Err(NotQueued::Store(error));
        }
        self.enter(&indexes.books, Book::Acknowledged, hash).await;
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

    /// Takes back the index entries of a delivery [`Inboxes::enqueue`]
    /// did not queue after all (best effort: a worker or the repair pass
    /// clears what is left).
    async fn unqueue(&self, indexes: &Indexes, hash: &str, held: bool) {
        let written = if held {
            vec![&indexes.dead]
        } else {
            vec![&indexes.since, &indexes.due]
        };
        for index in written {
            if let Err(error) = self.store.index_remove(index, hash).await {
                tracing::debug!(key = hash, %error, "inbox: index entry of an unqueued delivery left for the workers");
            }
        }
    }

    /// Writes one line into a scope's books. A failure is logged, not
    /// returned: the delivery's own state is already written, and the
    /// books exist to show such gaps (`IdemgateInboxBooksUnbalanced`).
    async fn enter(&self, books: &BooksKey, line: Book, hash: &str) {
        if let Err(error) = self.store.books_add(books, line).await {
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
        for route in self.config.routes.iter().filter(|r| r.inbox.is_some()) {
            if !scopes.contains(&route.idempotency.scope.as_str()) {
                scopes.push(&route.idempotency.scope);
            }
        }
        for scope in scopes {
            let workers = worker::Workers::new(Arc::clone(self), scope, tracker.clone());
            tracker.spawn(workers.run(shutdown.clone()));
            let repair = repair::Repair::new(Arc::clone(self), scope);
            tracker.spawn(repair.run(shutdown.clone()));
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
        self.prune_dead(route, &indexes.dead).await?;
        let (queued, oldest) = self.store.index_stats(&indexes.since).await?;
        let (dead, _) = self.store.index_stats(&indexes.dead).await?;
        let books = self.store.books_read(&indexes.books).await?;
        let age = oldest.map_or(0.0, |at| now.saturating_sub(at) as f64 / 1e3);
        metrics.backlog(queued, age, dead);
        metrics.books(&books);
        Ok(())
    }

    /// Takes out of the dead index the oldest entries (up to
    /// [`PRUNE_PAGE`]) whose record is no longer held: dropped or retried
    /// by an operator, or gone. Each entry is judged by its own record,
    /// never by the retention of whichever route of the scope looks
    /// (held records do not expire: [`Stage::kept_for`]).
    async fn prune_dead(&self, route: &Route, dead: &IndexKey) -> Result<(), StoreError> {
        let prefix = &self.config.store.key_prefix;
        for (hash, _) in self.store.index_page(dead, 0, PRUNE_PAGE).await? {
            let key = StoreKey::new(prefix, &route.idempotency.scope, &hash);
            let held = match self.store.lookup(&key).await? {
                Some(existing) => matches!(
                    &existing.record.state,
                    RecordState::Inbox(entry) if entry.stage.is_held()
                ),
                None => false,
            };
            if !held {
                self.store.index_remove(dead, &hash).await?;
            }
        }
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

/// How long `record` is kept: until its delivery is resolved, then the
/// route's retention.
fn kept_for(record: &Record, route: &Route) -> Duration {
    let retention = route.idempotency.retention;
    match &record.state {
        RecordState::Inbox(entry) => entry.stage.kept_for(retention),
        _ => retention,
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
