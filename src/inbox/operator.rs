//! What the admin API does to an inbox (`/admin/inbox/{route}…`): list a
//! scope's queued or held deliveries, retry a held one now (once), drop
//! one without sending. Both actions are owner-fenced swaps like a
//! worker's, so an operator and a worker never both act on one delivery,
//! and both are logged.

use super::{Inboxes, RouteInbox, transition};
use crate::record::{InboxEntry, Record, RecordState, Stage, now_ms};
use crate::store::inbox::{BookLine, Index, IndexPosition, Place};
use crate::store::{StoreError, StoreKey};

/// Which deliveries a listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listing {
    /// Queued or being redelivered, oldest first.
    Queued,
    /// Dead or with an unknown outcome, in the order they got there.
    Dead,
}

/// What an operator action did.
#[derive(Debug)]
pub(crate) enum Action {
    /// Done: the record as it now stands.
    Done(Record),
    /// No inbox delivery under that key.
    NotFound,
    /// The delivery is in a stage the action does not apply to.
    WrongStage(Stage),
    /// A worker changed it meanwhile: look again.
    Raced,
    /// The delivery is not in the stage the operator saw (the stage now):
    /// nothing was done.
    Changed(Stage),
}

impl Inboxes {
    /// One page of a route's scope index after `after` (a keyset walk):
    /// `(hash, unix ms)` pairs, the time being when the delivery was
    /// queued (`Queued`) or was held (`Dead`).
    pub(crate) async fn list(
        &self,
        inbox: &RouteInbox,
        listing: Listing,
        after: Option<&IndexPosition>,
        limit: usize,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let index = match listing {
            Listing::Queued => Index::Since,
            Listing::Dead => Index::Dead,
        };
        self.store.page(&inbox.keys, index, after, limit).await
    }

    /// Retries a dead or unknown delivery now, once: if that attempt fails
    /// too, it is dead again.
    pub(crate) async fn retry(
        &self,
        inbox: &RouteInbox,
        key: &StoreKey,
        seen: &str,
    ) -> Result<Action, StoreError> {
        let action = self
            .act(key, seen, |entry| transition::retry_now(entry, now_ms()))
            .await?;
        if let Action::Done(_) = &action {
            let hash = key.hash();
            let now = now_ms();
            self.store
                .place(&inbox.keys, hash, Place::pending(now, now))
                .await?;
            tracing::warn!(
                route = inbox.name(),
                key = hash,
                "inbox: operator retry: queued for one attempt now"
            );
        }
        Ok(action)
    }

    /// Resolves a delivery without sending it; its record stays, so copies
    /// still get the ack.
    pub(crate) async fn drop_delivery(
        &self,
        inbox: &RouteInbox,
        key: &StoreKey,
        seen: &str,
    ) -> Result<Action, StoreError> {
        let action = self
            .act(key, seen, |entry| transition::drop_now(entry, now_ms()))
            .await?;
        if let Action::Done(_) = &action {
            let hash = key.hash();
            // Booked as soon as the drop is written: an index that fails
            // to update is repaired later (a worker or the dead-index
            // prune finds the record dropped), a missing book line is not.
            self.enter(&inbox.keys, BookLine::Dropped, hash).await;
            self.store
                .place(&inbox.keys, hash, Place::resolved())
                .await?;
            tracing::warn!(
                route = inbox.name(),
                key = hash,
                "inbox: operator drop: resolved without sending"
            );
        }
        Ok(action)
    }

    /// Reads the delivery under `key`, checks it is in the stage the
    /// operator `seen` (its word), asks `change` for its next entry and
    /// swaps it in over the owner it was read with: a delivery that moved
    /// on since the operator looked is left alone, also between this read
    /// and the swap.
    async fn act(
        &self,
        key: &StoreKey,
        seen: &str,
        change: impl FnOnce(&InboxEntry) -> Option<InboxEntry>,
    ) -> Result<Action, StoreError> {
        let Some(existing) = self.store.lookup(key).await? else {
            return Ok(Action::NotFound);
        };
        let found = existing.record;
        let RecordState::Inbox(entry) = &found.state else {
            return Ok(Action::NotFound);
        };
        if entry.stage.as_str() != seen {
            return Ok(Action::Changed(entry.stage));
        }
        let Some(next) = change(entry) else {
            return Ok(Action::WrongStage(entry.stage));
        };
        let Some(inbox) = self.route(&next.route) else {
            return Ok(Action::NotFound);
        };
        let mut record = found.with_state(RecordState::Inbox(Box::new(next)));
        record.owner = self.mint.next();
        let kept = inbox.kept_for(&record);
        if self
            .store
            .swap(key, found.owner, &record, kept, inbox.effect(&record))
            .await?
            .written()
        {
            Ok(Action::Done(record))
        } else {
            Ok(Action::Raced)
        }
    }
}
