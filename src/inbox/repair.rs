//! The repair pass: every delivery a scope owes is found again from its
//! own record, whatever happened to the indexes.
//!
//! The indexes (`due`, `since`, `dead`) are single keys written apart from
//! the records; on a Redis Cluster they live on one primary, so a failover
//! of that primary with replication lag, or any write between the record
//! and its index that never landed, can leave an owed delivery that no
//! index names: a worker would never take it, an operator would never see
//! it. The owed sets (`store::inbox`, "Owed sets") are written with the
//! records themselves, so they are the truth this pass restores the
//! indexes from, at start-up and every `repair_every` (jittered, so the
//! instances of a scope spread their passes):
//!
//! 1. read the three indexes whole, then the owed set;
//! 2. for each owed hash an index misses, read its record: a pending
//!    delivery goes back into `due` (at its own due time) and `since` (at
//!    when it was queued), a held one into `dead`; an in-flight claim is
//!    left alone (it is being queued right now);
//! 3. an owed entry whose record is gone or resolved is pruned, only if
//!    the record is still the one read (`AnyStore::owed_prune`).
//!
//! Indexes are read before the owed set, so a delivery queued during the
//! pass is either in the snapshot or re-added at the score it was queued
//! with. A re-add the pass did not need (an entry that moved while it
//! read) at worst makes a worker look at the delivery early: every
//! worker decision is fenced by the record's owner, so it never sends
//! twice.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Inboxes;
use crate::record::{RecordState, now_ms};
use crate::store::inbox::{InboxKeys, Index, IndexPosition, Place};
use crate::store::{StoreError, StoreKey};

/// Index members read per page while a pass reads an index whole.
const PAGE: usize = 1_000;

/// What one pass did, for its log line and the tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Repaired {
    /// Owed deliveries in the scope.
    pub(crate) owed: usize,
    /// Deliveries put back into an index they were missing from.
    pub(crate) restored: usize,
    /// Owed entries taken out (record gone or resolved).
    pub(crate) pruned: usize,
}

/// One scope's repair pass.
#[derive(Debug)]
pub(super) struct Repair {
    inboxes: Arc<Inboxes>,
    keys: InboxKeys,
    prefix: String,
    scope: String,
    every: Duration,
}

impl Repair {
    pub(super) fn new(inboxes: Arc<Inboxes>, scope: &str) -> Self {
        let prefix = inboxes.config.store.key_prefix.clone();
        let every = inboxes
            .routes
            .iter()
            .filter(|inbox| inbox.scope() == scope)
            .map(|inbox| inbox.rules.repair_every)
            .min()
            .unwrap_or(Duration::from_secs(60));
        Self {
            keys: InboxKeys::new(&prefix, scope),
            prefix,
            scope: scope.to_owned(),
            every,
            inboxes,
        }
    }

    /// A pass now, then one every `repair_every` (±10%) until `shutdown`.
    pub(super) async fn run(self, shutdown: CancellationToken) {
        loop {
            match self.pass().await {
                Ok(done) if done.restored + done.pruned > 0 => tracing::warn!(
                    scope = self.scope,
                    owed = done.owed,
                    restored = done.restored,
                    pruned = done.pruned,
                    "inbox repair: index entries put back from the deliveries' own records"
                ),
                Ok(done) => {
                    tracing::debug!(
                        scope = self.scope,
                        owed = done.owed,
                        "inbox repair: indexes whole"
                    );
                }
                Err(error) => {
                    tracing::warn!(scope = self.scope, %error, "inbox repair pass failed; tried again at the next one");
                }
            }
            let pause = self.every.mul_f64(0.9 + 0.2 * super::transition::jitter());
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One pass (module docs).
    pub(crate) async fn pass(&self) -> Result<Repaired, StoreError> {
        let store = &self.inboxes.store;
        let due = self.members(Index::Due).await?;
        let since = self.members(Index::Since).await?;
        let dead = self.members(Index::Dead).await?;
        let owed = store.owed(&self.keys).await?;
        let mut done = Repaired {
            owed: owed.len(),
            ..Repaired::default()
        };
        for hash in owed {
            let (in_due, in_since) = (due.contains(&hash), since.contains(&hash));
            if in_due && in_since || dead.contains(&hash) {
                continue;
            }
            let key = StoreKey::new(&self.prefix, &self.scope, &hash);
            let existing = store.lookup(&key).await?;
            let (record, entry) = match existing.as_ref().map(|e| (&e.record, &e.record.state)) {
                Some((record, RecordState::Inbox(entry))) if !entry.stage.is_resolved() => {
                    (record, entry)
                }
                // A claim being queued right now: its own writes follow.
                Some((_, RecordState::InFlight(_))) => continue,
                other => {
                    let read = other.map(|(record, _)| record.owner);
                    if store.owed_prune(&key, read).await? {
                        done.pruned += 1;
                    }
                    continue;
                }
            };
            let missing = if entry.stage.is_held() {
                vec![(Index::Dead, now_ms())]
            } else {
                let since = (!in_since).then_some((Index::Since, record.answered_at_ms));
                let due = (!in_due).then_some((Index::Due, entry.due_ms));
                since.into_iter().chain(due).collect()
            };
            for (index, at) in missing {
                store
                    .place(&self.keys, &hash, Place::into_index(index, at))
                    .await?;
            }
            done.restored += 1;
            if let Some(inbox) = self.inboxes.route(&entry.route) {
                inbox.metrics.repaired();
            }
            tracing::warn!(
                scope = self.scope,
                route = entry.route,
                key = hash,
                stage = entry.stage.as_str(),
                "inbox repair: an owed delivery was missing from its index; put back"
            );
        }
        Ok(done)
    }

    /// Every member of `index`, read a page at a time, each page after
    /// the last member read (an offset would skip members when workers
    /// take some meanwhile, and a skipped member would look missing).
    async fn members(&self, index: Index) -> Result<HashSet<String>, StoreError> {
        let mut found = HashSet::new();
        let mut after: Option<IndexPosition> = None;
        loop {
            let page = self
                .inboxes
                .store
                .page(&self.keys, index, after.as_ref(), PAGE)
                .await?;
            let last = page.len() < PAGE;
            after = page.last().map(|(member, score)| IndexPosition {
                score: *score,
                member: member.clone(),
            });
            found.extend(page.into_iter().map(|(member, _)| member));
            if last {
                return Ok(found);
            }
        }
    }
}
