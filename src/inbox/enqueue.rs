//! Queueing: a first delivery whose live call failed as the route's `on`
//! lists is kept in the store and its sender acknowledged (module docs of
//! [`super`]), or, when it can not be kept safely, not acknowledged.

use super::{Inboxes, RouteInbox, ack, transition};
use crate::config::OnUpstreamTimeout;
use crate::record::{InboxEntry, RecordState, Stage, StoredRequest, StoredResponse, now_ms};
use crate::store::inbox::{BookLine, Place};
use crate::store::{Completion, Lease, StoreError};
use crate::time::millis;
use crate::upstream::{self, ForwardError, UpstreamAnswer};

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

impl RouteInbox {
    /// Whether this result of the route's live call is queued: the route
    /// does not store the answer, and `on` lists the failure.
    pub(crate) fn wants(&self, result: &Result<UpstreamAnswer, ForwardError>) -> bool {
        let on = &self.rules.on;
        match result {
            Ok(answer) => {
                let status = answer.status.as_u16();
                !self.settings.idempotency.cache_status.contains(status) && on.status(status)
            }
            Err(ForwardError::Refused) => on.refused,
            Err(ForwardError::Broken | ForwardError::Timeout) => on.timeout,
        }
    }
}

impl Inboxes {
    /// Queues a first delivery whose live call failed as `on` lists:
    /// indexes first, then the record (with its owed-set entry) over the
    /// claim `lease` proves. An error means the sender must not be
    /// acknowledged: nothing was queued, or (with `min_replicas_ack`) the
    /// queued record is not on enough replicas to survive a failover. The
    /// caller settles the claim as it would without an inbox, so the
    /// sender is never told "ok" for a delivery the store may not hold.
    pub(crate) async fn enqueue(
        &self,
        inbox: &RouteInbox,
        lease: &Lease,
        request: StoredRequest,
        result: &Result<UpstreamAnswer, ForwardError>,
    ) -> Result<Queued, NotQueued> {
        let route = &inbox.settings;
        let rules = &inbox.rules;
        let keys = &inbox.keys;
        // Every owed delivery counts, held ones too: none of them expires,
        // so this is what bounds the store's memory. Checked, then added:
        // instances queueing at the same moment can each pass, so the
        // bound may be exceeded by that many.
        let owed = self.store.backlog(keys).await?.owed();
        if owed >= rules.max_queued {
            inbox.metrics.full();
            return Err(NotQueued::Full {
                scope: route.idempotency.scope.clone(),
                owed,
                max: rules.max_queued,
            });
        }
        let now = now_ms();
        let (error, answer, unknown) = match result {
            Ok(answer) => (
                format!("handler answered {}", answer.status.as_u16()),
                Some(upstream::stored(answer)),
                false,
            ),
            Err(error) => (error.to_string(), None, *error != ForwardError::Refused),
        };
        let held = unknown && route.idempotency.on_upstream_timeout == OnUpstreamTimeout::Hold;
        let mut entry = InboxEntry {
            ack: ack(rules),
            stage: if held { Stage::Unknown } else { Stage::Queued },
            attempts: 0,
            limit: rules.max_attempts,
            due_ms: now,
            route: route.name.clone(),
            last_error: String::new(),
            last_answer: answer,
            request,
            probes: 0,
        };
        entry.set_error(&if unknown {
            format!("outcome unknown: {error}")
        } else {
            error
        });
        let hash = lease.key().hash();
        let place = if held {
            Place::held(now)
        } else {
            entry.due_ms = now + millis(transition::delay(rules, 0, transition::jitter()));
            Place::pending(now, entry.due_ms)
        };
        self.store.place(keys, hash, place).await?;
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
            self.unqueue(inbox, hash).await;
            return Err(NotQueued::Store(error));
        }
        self.enter(keys, BookLine::Acknowledged, hash).await;
        inbox.metrics.acknowledged();
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
    async fn unqueue(&self, inbox: &RouteInbox, hash: &str) {
        if let Err(error) = self.store.place(&inbox.keys, hash, Place::resolved()).await {
            tracing::debug!(key = hash, %error, "inbox: index entry of an unqueued delivery left for the workers");
        }
    }
}
