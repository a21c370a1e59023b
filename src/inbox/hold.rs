//! Holding: a notice for a busy entity on a route with an inbox is kept as
//! a queued delivery behind the entity's pending change and the notices
//! before it (`store::entity::held`), and its sender acknowledged. A
//! redelivery worker sends it when its turn comes.

use super::{Inboxes, RouteInbox, ack};
use crate::record::{
    Fingerprint, InboxEntry, Record, RecordState, Stage, StoredRequest, StoredResponse, now_ms,
};
use crate::store::entity::{EntityStep, HoldVerdict};
use crate::store::inbox::{BookLine, Place};
use crate::store::{StoreError, StoreKey};

/// What [`Inboxes::hold`] did with a notice.
#[derive(Debug)]
pub(crate) enum Holding {
    /// Held: its sender gets this acknowledgement.
    Held(StoredResponse),
    /// Not held; [`HoldVerdict`] says why (free: claim it again; full:
    /// refuse it; exists: a copy raced it, claim again).
    Not(HoldVerdict),
}

impl Inboxes {
    /// Holds the notice under the free `key` (its fingerprint and key
    /// value as a claim would record them, its `request` as received)
    /// behind its entity (`step`): the record with its owed-set entry and
    /// its place in the entity's queue in one step, then its index entries
    /// and the books' line. An error means nothing was acknowledged.
    pub(crate) async fn hold(
        &self,
        inbox: &RouteInbox,
        key: &StoreKey,
        (fingerprint, key_value): (Fingerprint, Option<&[u8]>),
        request: StoredRequest,
        step: &EntityStep,
    ) -> Result<Holding, StoreError> {
        let rules = &inbox.rules;
        let now = now_ms();
        let mut entry = InboxEntry {
            ack: ack(rules),
            stage: Stage::Queued,
            attempts: 0,
            limit: rules.max_attempts,
            due_ms: now,
            route: inbox.name().to_owned(),
            last_error: String::new(),
            last_answer: None,
            request,
            probes: 0,
        };
        entry.set_error("held behind its entity's pending change");
        let ack = entry.ack.clone();
        let record = Record::in_flight(self.mint.next(), fingerprint, None)
            .with_key(key_value)
            .with_state(RecordState::Inbox(Box::new(entry)));
        let max = inbox
            .settings
            .entity
            .as_ref()
            .map_or(1, |entity| entity.max_held);
        let verdict = self.store.hold(key, &record, step, max).await?;
        if verdict != HoldVerdict::Held {
            return Ok(Holding::Not(verdict));
        }
        // The record is owed (its owed-set entry was written with it), so
        // the repair pass restores these entries should they not land.
        let hash = key.hash();
        self.store
            .place(&inbox.keys, hash, Place::pending(now, now))
            .await?;
        self.enter(&inbox.keys, BookLine::Acknowledged, hash).await;
        tracing::info!(
            route = inbox.name(),
            key = hash,
            entity = step.key.hash(),
            state = step.to,
            "entity busy: the notice is acknowledged and held behind its pending change"
        );
        Ok(Holding::Held(ack))
    }
}
