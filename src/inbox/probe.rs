//! Probes of inbox redeliveries whose outcome is unknown, on a route with
//! both `[route.inbox]` and `[route.probe]` (the probe runner in
//! `crate::pipeline::first_delivery` asks the handler; this file moves
//! the delivery).
//!
//! Everything a probe needs is in the record already: the request (its
//! probe path is rendered from it as from a live delivery), when it turned
//! unknown (`due_ms`) and the probes so far (`probes`). A probe takes the
//! delivery with an owner-fenced swap, like a worker, that moves `due_ms`
//! to the end of its lease, so one instance at a time probes it and a
//! taker that dies leaves it due again when the lease ends. Its answer:
//!
//! * *applied*: delivered, booked as delivered, its answer the probe's;
//! * *not applied*: queued again for a redelivery now (one attempt, as an
//!   operator's retry), so the handler gets it once;
//! * *can't tell*: unknown again, due `retry_every` later while probes
//!   are left; then it waits for the operator, as without a probe.

use std::time::Duration;

use super::{Inboxes, RouteInbox, transition};
use crate::config::Probe;
use crate::record::{InboxEntry, Record, RecordState, Stage, StoredResponse, now_ms};
use crate::store::inbox::{BookLine, Index, Place};
use crate::store::{StoreError, StoreKey};
use crate::time::millis;

/// Held deliveries one look examines at most, oldest first.
const DEAD_PAGE: usize = 256;

/// An unknown delivery this instance took for a probe.
#[derive(Debug)]
pub(crate) struct TakenDelivery {
    /// Its record key.
    pub(crate) key: StoreKey,
    /// The record as the take wrote it (its owner is the taker).
    pub(crate) record: Record,
    /// The entry the take wrote into it, kept apart so no reader has to
    /// take it out of the record again.
    entry: InboxEntry,
}

impl TakenDelivery {
    /// The delivery's entry.
    pub(crate) fn entry(&self) -> &InboxEntry {
        &self.entry
    }
}

/// How a probe of a taken delivery ended.
#[derive(Debug)]
pub(crate) enum ProbeEnd {
    /// The handler applied it: this is its answer.
    Applied(StoredResponse),
    /// The handler never applied it.
    NotApplied,
    /// It could not tell (`last` says what it heard); the next probe
    /// after `next`, or none.
    Undecided {
        /// What the attempt heard.
        last: String,
        /// When to probe again; `None`: no probes left.
        next: Option<Duration>,
    },
}

/// Whether `entry` is an unknown delivery whose next probe is due at
/// `now` under `probe`.
pub(crate) fn due(entry: &InboxEntry, probe: &Probe, now: u64) -> bool {
    let at = match entry.probes {
        0 => entry.due_ms.saturating_add(millis(probe.start_after)),
        _ => entry.due_ms,
    };
    entry.stage == Stage::Unknown && entry.probes < probe.max_attempts && at <= now
}

impl Inboxes {
    /// Takes up to `limit` of `inbox`'s unknown deliveries whose probe is
    /// due, each for `lease` (module docs).
    pub(crate) async fn take_unknown(
        &self,
        inbox: &RouteInbox,
        probe: &Probe,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<TakenDelivery>, StoreError> {
        let prefix = &self.config.store.key_prefix;
        let mut taken = Vec::new();
        let held = self
            .store
            .page(&inbox.keys, Index::Dead, None, DEAD_PAGE)
            .await?;
        for (hash, _) in held {
            if taken.len() >= limit {
                break;
            }
            let key = StoreKey::new(prefix, inbox.scope(), &hash);
            let Some(existing) = self.store.lookup(&key).await? else {
                continue;
            };
            let now = now_ms();
            let found = existing.record;
            let RecordState::Inbox(entry) = &found.state else {
                continue;
            };
            if entry.route != inbox.name() || !due(entry, probe, now) {
                continue;
            }
            let mut next = (**entry).clone();
            next.probes += 1;
            next.due_ms = now.saturating_add(millis(lease));
            let entry = next.clone();
            if let Some(record) = self.swap_entry(inbox, &key, &found, next).await? {
                taken.push(TakenDelivery { key, record, entry });
            }
        }
        Ok(taken)
    }

    /// Settles a taken delivery as its probe `end`ed (module docs).
    /// `false`: another writer changed it meanwhile; nothing written.
    pub(crate) async fn settle_probe(
        &self,
        inbox: &RouteInbox,
        taken: &TakenDelivery,
        end: ProbeEnd,
    ) -> Result<bool, StoreError> {
        let now = now_ms();
        let mut next = taken.entry().clone();
        let hash = taken.key.hash();
        let after = match end {
            ProbeEnd::Applied(answer) => {
                next.stage = Stage::Delivered;
                next.last_answer = Some(answer);
                next.last_error.clear();
                next.due_ms = now;
                Stage::Delivered
            }
            ProbeEnd::NotApplied => {
                let Some(queued) = transition::retry_now(&next, now) else {
                    return Ok(false);
                };
                next = queued;
                next.set_error("probe: the handler did not apply it; sent again");
                Stage::Queued
            }
            ProbeEnd::Undecided { last, next: again } => {
                next.set_error(&format!("outcome unknown; probe {}: {last}", next.probes));
                next.due_ms = match again {
                    Some(after) => now.saturating_add(millis(after)),
                    None => now,
                };
                Stage::Unknown
            }
        };
        if self
            .swap_entry(inbox, &taken.key, &taken.record, next)
            .await?
            .is_none()
        {
            return Ok(false);
        }
        let keys = &inbox.keys;
        match after {
            Stage::Delivered => {
                self.enter(keys, BookLine::Delivered, hash).await;
                self.store.place(keys, hash, Place::resolved()).await?;
            }
            Stage::Queued => {
                self.store
                    .place(keys, hash, Place::pending(now, now))
                    .await?;
            }
            _ => {}
        }
        Ok(true)
    }

    /// Swaps `next` in as `found`'s entry under a new owner; the record
    /// written, or `None` when `found` is no longer what the store holds.
    async fn swap_entry(
        &self,
        inbox: &RouteInbox,
        key: &StoreKey,
        found: &Record,
        next: InboxEntry,
    ) -> Result<Option<Record>, StoreError> {
        let mut record = found.with_state(RecordState::Inbox(Box::new(next)));
        record.owner = self.mint.next();
        let kept = inbox.kept_for(&record);
        let swapped = self
            .store
            .swap(key, found.owner, &record, kept, inbox.effect(&record))
            .await?;
        Ok(swapped.written().then_some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::tests::MINIMAL;

    #[test]
    fn an_unknown_delivery_is_due_start_after_it_turned_unknown_then_as_noted() {
        let text = format!(
            "{MINIMAL}\nunknown_hold = \"10m\"\n[route.probe]\nhandler_deadline = \"30s\"\npath = \"/p\"\nmax_attempts = 2\n"
        );
        let config = Config::parse(&text).unwrap_or_else(|e| panic!("{}", e.0.join("\n")));
        let probe = config.routes[0].probe.clone().unwrap();
        let start_after = millis(probe.start_after);
        let mut entry = crate::record::inbox_entry::tests::entry(Stage::Unknown);
        entry.due_ms = 1_000;
        assert!(!due(&entry, &probe, 1_000 + start_after - 1));
        assert!(due(&entry, &probe, 1_000 + start_after));
        entry.probes = 1;
        entry.due_ms = 5_000;
        assert!(!due(&entry, &probe, 4_999));
        assert!(due(&entry, &probe, 5_000));
        entry.probes = 2;
        assert!(!due(&entry, &probe, u64::MAX), "no probes left");
        entry.probes = 0;
        entry.stage = Stage::Dead;
        assert!(!due(&entry, &probe, u64::MAX), "only unknown deliveries");
    }
}
