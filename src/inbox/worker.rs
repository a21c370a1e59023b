//! A scope's redelivery workers: one taking loop per instance, and up to
//! `concurrency` redeliveries in flight (summed over the scope's inbox
//! routes; with one inbox route per scope, the usual case, exactly that
//! route's `concurrency`).
//!
//! One redelivery, step by step (each store write an owner-fenced swap):
//!
//! 1. take the hash from the `due` index; the take itself pushes it one
//!    visibility timeout ahead, so if this instance dies it is due again;
//! 2. read the record and decide ([`super::transition::look`]);
//! 3. claim it: swap to `delivering` under a fresh owner token, retried
//!    with the same token while the store does not answer (a claim whose
//!    reply was lost still succeeds for its writer). With
//!    `min_replicas_ack`, a claim too few replicas acknowledged is undone
//!    (swapped back to queued) and nothing is sent: a failover could
//!    revert it, and the next worker would send the delivery again;
//! 4. send it, only if the upstream timeout fits before the visibility
//!    deadline the claim wrote;
//! 5. swap to the next stage and fix the indexes; a store that refuses is
//!    asked again until the deadline, after which another worker finds the
//!    claim expired and holds the delivery as unknown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::transition::{self, Attempt, WorkerStep};
use super::{Inboxes, RouteInbox};
use crate::backoff::Backoff;
use crate::record::{InboxEntry, OwnerToken, Record, RecordState, Stage, now_ms};
use crate::store::entity::{Judgement, KeptBack, decisions};
use crate::store::inbox::{BookLine, InboxKeys, Place, Swapped};
use crate::store::{StoreError, StoreKey};
use crate::time::millis;
use crate::upstream::{self, ForwardError, UpstreamClient};

/// How often an idle loop asks for due deliveries.
const POLL_EVERY: Duration = Duration::from_millis(200);
/// The longest idle pause while the store refuses to hand out deliveries.
const OUTAGE_POLL_MAX: Duration = Duration::from_secs(2);
/// A queued delivery this close to its time is sent now.
const EARLY: Duration = Duration::from_millis(50);
/// Pauses between store attempts while claiming or settling.
fn store_retry() -> Backoff {
    Backoff::new(Duration::from_millis(50), Duration::from_secs(1))
}
/// How soon a delivery held behind its entity is asked about again: a
/// change settling ahead of it is picked up within this.
const HELD_RECHECK: Duration = Duration::from_secs(1);
/// How long a delivery whose claim too few replicas acknowledged waits
/// before a worker tries again (the replicas are behind or away).
const UNREPLICATED_PAUSE: Duration = Duration::from_secs(1);

/// The workers of one scope on this instance.
#[derive(Debug)]
pub(super) struct Workers {
    inboxes: Arc<Inboxes>,
    keys: InboxKeys,
    prefix: String,
    scope: String,
    client: UpstreamClient,
    permits: Arc<Semaphore>,
    /// The longest visibility timeout of the scope's inbox routes: how far
    /// a take pushes an entry.
    visibility: Duration,
    tracker: TaskTracker,
}

impl Workers {
    pub(super) fn new(inboxes: Arc<Inboxes>, scope: &str, tracker: TaskTracker) -> Arc<Self> {
        let routes = || {
            inboxes
                .routes
                .iter()
                .filter(|inbox| inbox.scope() == scope)
                .map(|inbox| &inbox.rules)
        };
        let concurrency = routes()
            .map(|inbox| inbox.concurrency)
            .sum::<usize>()
            .max(1);
        let visibility = routes()
            .map(|inbox| inbox.visibility_timeout)
            .max()
            .unwrap_or(Duration::from_secs(60));
        let prefix = inboxes.config.store.key_prefix.clone();
        Arc::new(Self {
            keys: InboxKeys::new(&prefix, scope),
            prefix,
            scope: scope.to_owned(),
            client: upstream::client(),
            permits: Arc::new(Semaphore::new(concurrency)),
            visibility,
            inboxes,
            tracker,
        })
    }

    /// Takes due deliveries and redelivers them until `shutdown`.
    pub(super) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        // While the store refuses the take, idle pauses grow with jitter
        // from `POLL_EVERY`, so the workers of every instance do not poll
        // a recovering store in step.
        let mut outage: Option<Backoff> = None;
        loop {
            let free = self.permits.available_permits();
            let taken = if free == 0 {
                Vec::new()
            } else {
                let now = now_ms();
                let push_to = now.saturating_add(millis(self.visibility));
                match self
                    .inboxes
                    .store
                    .take_due(&self.keys, now, free, push_to)
                    .await
                {
                    Ok(taken) => {
                        outage = None;
                        taken
                    }
                    Err(error) => {
                        tracing::debug!(scope = self.scope, %error, "inbox: could not take due deliveries");
                        outage.get_or_insert_with(|| Backoff::new(POLL_EVERY, OUTAGE_POLL_MAX));
                        Vec::new()
                    }
                }
            };
            let idle = taken.is_empty();
            for hash in taken {
                let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
                    break;
                };
                let this = Arc::clone(&self);
                self.tracker.spawn(async move {
                    this.redeliver(&hash).await;
                    drop(permit);
                });
            }
            if idle {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(outage.as_mut().map_or(POLL_EVERY, Backoff::next_pause)) => {}
                }
            } else if shutdown.is_cancelled() {
                break;
            }
        }
    }

    /// Steps 2–5 of the module docs for one taken hash.
    async fn redeliver(&self, hash: &str) {
        let key = StoreKey::new(&self.prefix, &self.scope, hash);
        let store = &self.inboxes.store;
        let existing = match store.lookup(&key).await {
            Ok(existing) => existing,
            Err(error) => {
                tracing::debug!(key = hash, %error, "inbox: record not read; it is due again later");
                return;
            }
        };
        let Some(existing) = existing else {
            tracing::warn!(
                scope = self.scope,
                key = hash,
                "inbox: a queued delivery's record is gone (expired, evicted or purged)"
            );
            self.unindex(hash, false).await;
            return;
        };
        let record = existing.record;
        let entry = match &record.state {
            RecordState::Inbox(entry) => entry,
            // A live claim still being queued: look again after the push.
            RecordState::InFlight(_) => return,
            // The queueing never landed; the key settled another way.
            RecordState::Completed(_) | RecordState::Acknowledged(_) | RecordState::Unknown => {
                self.unindex(hash, false).await;
                return;
            }
        };
        let Some(inbox) = self.inboxes.route(&entry.route) else {
            tracing::error!(
                key = hash,
                route = entry.route,
                "inbox: the delivery's route has no inbox any more; left queued"
            );
            return;
        };
        match transition::look(entry, &inbox.rules, now_ms(), EARLY) {
            WorkerStep::NotYet(at) => self.due_at(hash, at).await,
            WorkerStep::Settled(stage) => self.unindex(hash, stage.is_held()).await,
            WorkerStep::Abandoned => {
                let attempt =
                    Attempt::Unknown("the worker redelivering it vanished mid-call".into());
                self.settle(inbox, &key, &record, entry, attempt).await;
            }
            WorkerStep::Send(sending) => self.claim_and_send(inbox, &key, &record, sending).await,
        }
    }

    async fn claim_and_send(
        &self,
        inbox: &RouteInbox,
        key: &StoreKey,
        found: &Record,
        sending: Box<InboxEntry>,
    ) {
        let deadline = sending.due_ms;
        let token = self.inboxes.mint.next();
        // The entry is kept beside the record it is written in, so what is
        // sent is read from it, not fished back out of the record.
        let mut claimed = found.with_state(RecordState::Inbox(sending.clone()));
        claimed.owner = token;
        let kept = inbox.kept_for(&claimed);
        let taken = self
            .until_answered(deadline, || {
                self.inboxes.store.take(key, found.owner, &claimed, kept)
            })
            .await;
        match taken {
            Ok(Ok(Swapped::Written)) => {}
            Ok(Ok(Swapped::Refused)) => return,
            Ok(Ok(Swapped::Unreplicated)) => {
                self.unclaim(inbox, key, found, &claimed).await;
                return;
            }
            // Held behind its entity (store::entity::held): asked again
            // soon, with no attempt spent.
            Ok(Err(KeptBack::Wait)) => {
                self.due_at(key.hash(), now_ms().saturating_add(millis(HELD_RECHECK)))
                    .await;
                return;
            }
            Ok(Err(KeptBack::Decided(judgement, to))) => {
                self.decided(inbox, key, found, &judgement, &to).await;
                return;
            }
            Err(error) => {
                tracing::warn!(key = key.hash(), %error, "inbox: claim not confirmed; not sent");
                return;
            }
        }
        let entry = &*sending;
        let fits = now_ms().saturating_add(millis(inbox.settings.upstream.timeout)) < deadline;
        let request = entry
            .request
            .clone()
            .with_header(REDELIVERY_HEADER, entry.attempts.to_string().as_bytes());
        let Some(parts) = request.to_parts().filter(|_| fits) else {
            tracing::warn!(
                key = key.hash(),
                "inbox: claimed too late to send within the visibility timeout (or the stored request no longer parses); left for the next worker"
            );
            return;
        };
        let max_stored = self.inboxes.config.limits.max_stored_answer_bytes;
        let result = upstream::forward(
            &self.client,
            &inbox.settings.upstream,
            parts,
            entry.request.body.clone(),
            None,
            max_stored,
        )
        .await;
        let attempt = attempt_of(inbox, result);
        self.settle(inbox, key, &claimed, entry, attempt).await;
    }

    /// Writes the stage after `attempt` over `current` (whose owner the
    /// swap expects) and fixes the indexes. An outcome the store would not
    /// take is logged: the claim stands, and the next worker holds the
    /// delivery as unknown when it expires (never a second send).
    async fn settle(
        &self,
        inbox: &RouteInbox,
        key: &StoreKey,
        current: &Record,
        entry: &InboxEntry,
        attempt: Attempt,
    ) {
        let rules = &inbox.rules;
        let on_timeout = inbox.settings.idempotency.on_upstream_timeout;
        let now = now_ms();
        let (next, tally) =
            transition::after(entry, attempt, rules, on_timeout, now, transition::jitter());
        let stage = next.stage;
        let due = next.due_ms;
        let attempts = next.attempts;
        let last_error = next.last_error.clone();
        let mut record = current.with_state(RecordState::Inbox(Box::new(next)));
        record.owner = self.inboxes.mint.next();
        let deadline = now.saturating_add(millis(rules.visibility_timeout));
        let hash = key.hash();
        match self
            .swap_until(key, current.owner, &record, inbox, deadline)
            .await
        {
            // An outcome too few replicas have yet is still the outcome: a
            // failover that reverts it leaves the claim, which the next
            // worker holds as unknown (never a second send).
            Ok(Swapped::Written | Swapped::Unreplicated) => {}
            Ok(Swapped::Refused) => {
                tracing::error!(
                    route = inbox.name(),
                    key = hash,
                    "inbox: another worker took the delivery over before its outcome was stored (it judged this one vanished)"
                );
                return;
            }
            Err(error) => {
                tracing::error!(route = inbox.name(), key = hash, %error, "inbox: outcome not stored; the delivery turns unknown when its claim expires");
                return;
            }
        }
        inbox.metrics.redelivery(tally);
        if stage == Stage::Delivered {
            self.inboxes
                .enter(&self.keys, BookLine::Delivered, hash)
                .await;
        }
        match stage {
            Stage::Queued => self.due_at(hash, due).await,
            _ => self.unindex(hash, stage.is_held()).await,
        }
        tracing::info!(
            route = inbox.name(),
            key = hash,
            stage = stage.as_str(),
            result = tally.as_str(),
            attempts,
            next_due_in_ms = due.saturating_sub(now),
            error = last_error,
            "inbox redelivery"
        );
    }

    /// Swaps `record` in over `expected`, asking again while the store is
    /// out of reach, until `deadline` (unix ms). The same record each time,
    /// so a swap that landed unseen is confirmed by the next one.
    async fn swap_until(
        &self,
        key: &StoreKey,
        expected: OwnerToken,
        record: &Record,
        inbox: &RouteInbox,
        deadline: u64,
    ) -> Result<Swapped, StoreError> {
        let kept = inbox.kept_for(record);
        let effect = inbox.effect(record);
        self.until_answered(deadline, || {
            self.inboxes.store.swap(key, expected, record, kept, effect)
        })
        .await
    }

    /// Runs `write` until the store answers, asking again while it is out
    /// of reach, until `deadline` (unix ms).
    async fn until_answered<T, F, Fut>(&self, deadline: u64, mut write: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let mut pauses = store_retry();
        loop {
            match write().await {
                Err(error) if error.is_transient() && now_ms() < deadline => {
                    tokio::time::sleep(pauses.next_pause()).await;
                }
                other => return other,
            }
        }
    }

    /// Resolves a held notice its entity decided on when its turn came (a
    /// repeat, or a change the machine refuses): dropped without the
    /// handler, saying why, as the same notice would have been answered
    /// at the door. Its sender was acknowledged long ago; the books count
    /// it dropped.
    async fn decided(
        &self,
        inbox: &RouteInbox,
        key: &StoreKey,
        found: &Record,
        judgement: &Judgement,
        to: &str,
    ) {
        let RecordState::Inbox(entry) = &found.state else {
            return;
        };
        let hash = key.hash();
        let why = match judgement {
            Judgement::Refused { from } => format!(
                "not sent: its entity may not change from {} to {to} (a discrepancy)",
                from.as_deref().unwrap_or("none")
            ),
            Judgement::Repeat => format!("not sent: its entity is already {to} (a repeat)"),
        };
        let Some(mut next) = transition::drop_now(entry, now_ms()) else {
            return;
        };
        next.set_error(&why);
        let mut record = found.with_state(RecordState::Inbox(Box::new(next)));
        record.owner = self.inboxes.mint.next();
        let deadline = now_ms().saturating_add(millis(inbox.rules.visibility_timeout));
        match self
            .swap_until(key, found.owner, &record, inbox, deadline)
            .await
        {
            Ok(swapped) if swapped.written() => {}
            outcome => {
                tracing::warn!(
                    route = inbox.name(),
                    key = hash,
                    ?outcome,
                    "inbox: a held notice its entity decided on was not resolved; judged again when it is due"
                );
                return;
            }
        }
        self.inboxes
            .enter(&self.keys, BookLine::Dropped, hash)
            .await;
        self.unindex(hash, false).await;
        decisions::count(inbox.name(), judgement, to);
        tracing::warn!(
            route = inbox.name(),
            key = hash,
            reason = why,
            "inbox: held notice resolved by its entity without the handler"
        );
    }

    /// Undoes a claim too few replicas acknowledged, before anything was
    /// sent: the delivery as it was `found`, under a fresh owner, due
    /// again after [`UNREPLICATED_PAUSE`]. If even that write fails, the
    /// claim stands and the next worker holds the delivery as unknown.
    async fn unclaim(&self, inbox: &RouteInbox, key: &StoreKey, found: &Record, claimed: &Record) {
        let mut queued = found.clone();
        queued.owner = self.inboxes.mint.next();
        let kept = inbox.kept_for(&queued);
        let hash = key.hash();
        match self
            .inboxes
            .store
            .swap(key, claimed.owner, &queued, kept, inbox.effect(&queued))
            .await
        {
            Ok(swapped) if swapped.written() => {
                self.due_at(hash, now_ms().saturating_add(millis(UNREPLICATED_PAUSE)))
                    .await;
                tracing::warn!(
                    route = inbox.name(),
                    key = hash,
                    "inbox: too few replicas acknowledged the claim; not sent, queued again"
                );
            }
            outcome => tracing::error!(
                route = inbox.name(),
                key = hash,
                ?outcome,
                "inbox: a claim too few replicas acknowledged could not be undone; the delivery turns unknown when the claim expires (nothing was sent)"
            ),
        }
    }

    /// Takes a settled delivery out of the pending indexes; a held one
    /// (dead or unknown) goes into the dead index first. A failure is
    /// logged only: the take already pushed the entry one visibility
    /// timeout ahead, so the next worker to take it finds the delivery
    /// settled and tries again.
    async fn unindex(&self, hash: &str, held: bool) {
        let place = if held {
            Place::held(now_ms())
        } else {
            Place::resolved()
        };
        if let Err(error) = self.inboxes.store.place(&self.keys, hash, place).await {
            tracing::warn!(key = hash, %error, "inbox: indexes not updated; the next worker to take the delivery finds it settled");
        }
    }

    /// Puts `hash` back into the due index at `at` (unix ms). A failure is
    /// logged only: the take already pushed the entry one visibility
    /// timeout ahead, and the repair pass restores a missing one.
    async fn due_at(&self, hash: &str, at: u64) {
        let place = Place::due_at(at);
        if let Err(error) = self.inboxes.store.place(&self.keys, hash, place).await {
            tracing::debug!(key = hash, %error, "inbox: due index not updated; the delivery is due again when its take expires");
        }
    }
}

/// The header every redelivery carries, on top of what the live attempt
/// carried: the redelivery's number (1 for the first), so a handler or its
/// logs can tell a redelivery from the sender's own copy.
pub(crate) const REDELIVERY_HEADER: &str = "idemgate-redelivery";

/// How a redelivery's upstream result counts.
fn attempt_of(
    inbox: &RouteInbox,
    result: Result<upstream::UpstreamAnswer, ForwardError>,
) -> Attempt {
    match result {
        Ok(answer) if inbox.rules.delivered.contains(answer.status.as_u16()) => {
            Attempt::Delivered(upstream::stored(&answer))
        }
        Ok(answer) => Attempt::Failed {
            error: format!("handler answered {}", answer.status.as_u16()),
            answer: Some(upstream::stored(&answer)),
        },
        Err(ForwardError::Refused) => Attempt::Failed {
            error: ForwardError::Refused.to_string(),
            answer: None,
        },
        Err(error) => Attempt::Unknown(error.to_string()),
    }
}
