//! Stage 5 and the decisions 6b–6e: claim the key, or decide from the
//! record already there.
//!
//! Order matters and follows SPEC §1: a record with a different fingerprint
//! is a 422 whatever its state; then a completed record is replayed, an
//! unknown one (or an in-flight one whose owner stopped renewing) is a 409
//! `outcome_unknown`, and a live in-flight one is waited for (re-claiming,
//! so a released first attempt makes the waiter the new first delivery) or
//! refused with 409 `in_flight`.
//!
//! A claim whose reply is never read — the sender hung up while it was out,
//! or the reply timed out — is released again by `PendingClaim`, so it
//! can not block its key although the upstream never saw the delivery.
//!
//! A record this build can not decode is answered like an unknown outcome
//! (409, logged, counted as a store error): it may stand for a delivery
//! that ran, so it is never treated as free.
//!
//! Waiting is cheap: duplicates on this instance are woken by
//! [`LocalWaiters`] the moment the local first delivery settles; duplicates of a
//! first delivery running on another instance re-check the store at a
//! short, growing interval. Concurrent duplicates of one key share one
//! store read ([`SingleFlight`]): a joiner receives what its leader saw —
//! the record found, or the leader's own fresh claim, which to the joiner
//! is an in-flight record like any other — so a storm of duplicates of a
//! large stored answer reads it once per instance, not once per copy.
//! Sharing never frees a key: a joiner only ever sees a record.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::identify::Identity;
use super::single_flight::{Flight, SingleFlight};
use crate::config::{Idempotency, Mode, OnInFlight};
use crate::error::Rejection;
use crate::record::{OwnerToken, Record, StoredResponse};
use crate::store::{
    AnyStore, ClaimOutcome, Existing, Lease, Observed, Store, StoreError, StoreKey,
};
use tokio_util::task::TaskTracker;

/// First and largest pause between store re-checks while waiting.
const POLL_FIRST: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(100);

/// What to do with a delivery.
#[derive(Debug)]
pub enum Decision {
    /// First delivery: forward it and settle the lease.
    Forward(Lease),
    /// Replay this stored answer.
    Replay(StoredResponse),
    /// Answer with this rejection.
    Refuse(Rejection),
}

/// What duplicates of one key on this instance share: a wake-up when its
/// first delivery settles, and one store read at a time.
#[derive(Debug, Default)]
pub struct Local {
    waiters: LocalWaiters,
    flights: SingleFlight<StoreKey, Result<Existing, StoreError>>,
}

impl Local {
    /// Wakes every local waiter on `key`: its first delivery has settled.
    pub fn settled(&self, key: &StoreKey) {
        self.waiters.settled(key.as_str());
    }
}

/// Duplicates on this instance waiting for a key's first delivery, woken
/// the moment it settles instead of at their next store re-check.
#[derive(Debug, Default)]
struct LocalWaiters {
    waiting: Mutex<HashMap<String, Arc<Notify>>>,
}

impl LocalWaiters {
    /// A handle to wait on `key`, unless `limit` waiters hold one already.
    fn subscribe(&self, key: &str, limit: usize) -> Option<Arc<Notify>> {
        let mut waiting = self.waiting.lock().expect("waiters lock");
        let notify = waiting.entry(key.to_owned()).or_default();
        // The map holds one handle; every other one is a waiter.
        (Arc::strong_count(notify) <= limit).then(|| Arc::clone(notify))
    }

    /// Drops a waiter's handle, and the key's entry with the last one.
    fn unsubscribe(&self, key: &str, notify: &Arc<Notify>) {
        let mut waiting = self.waiting.lock().expect("waiters lock");
        // The map's handle plus ours: nobody else is waiting.
        if Arc::strong_count(notify) == 2 {
            waiting.remove(key);
        }
    }

    /// Wakes every local waiter on `key`.
    fn settled(&self, key: &str) {
        let notify = self.waiting.lock().expect("waiters lock").remove(key);
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }
}

/// Releases a claim whose reply nobody will read: armed while the claim
/// request is out, so if the request future is dropped (the sender hung
/// up) or the reply times out, an owner-checked release is spawned.
/// Without it such a claim would block its key as "in flight", and then
/// "unknown", although the upstream never saw the delivery.
struct PendingClaim<'a> {
    store: &'a Arc<AnyStore>,
    tracker: &'a TaskTracker,
    key: &'a StoreKey,
    owner: OwnerToken,
    armed: bool,
}

impl Drop for PendingClaim<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, key, owner) = (Arc::clone(self.store), self.key.clone(), self.owner);
        self.tracker.spawn(async move {
            if let Err(error) = store.release_abandoned(&key, owner).await {
                tracing::debug!(key = key.hash(), %error, "could not release an abandoned claim");
            }
        });
    }
}

/// Time a sender should wait before retrying a live in-flight key: what is
/// left of its lease.
fn lease_left(ttl: Option<Duration>, rules: &Idempotency) -> Duration {
    ttl.map_or(rules.lease, |t| t.saturating_sub(rules.unknown_hold))
}

/// Claims `identity` or decides from the existing record (module docs).
pub async fn claim(
    store: &Arc<AnyStore>,
    tracker: &TaskTracker,
    local: &Local,
    identity: &Identity,
    owner: OwnerToken,
    rules: &Idempotency,
    max_waiting: usize,
) -> Result<Decision, StoreError> {
    let claim_ttl = rules.lease + rules.unknown_hold;
    let deadline = Instant::now() + rules.wait_timeout;
    let mut pause = POLL_FIRST;
    loop {
        let attempt = async {
            let record = Record::in_flight(owner, identity.fingerprint);
            let mut pending = PendingClaim {
                store,
                tracker,
                key: &identity.key,
                owner,
                armed: true,
            };
            let result = store.claim(&identity.key, record, claim_ttl).await;
            // Only a timed-out reply can hide a claim that landed; every
            // other answer says exactly what happened.
            pending.armed = matches!(result, Err(StoreError::Unavailable(_)));
            result
        };
        let share = |result: &Result<ClaimOutcome, StoreError>| match result {
            // To a joiner, the leader's fresh claim is a live in-flight record.
            Ok(ClaimOutcome::Claimed(lease)) => Ok(Existing {
                record: lease.record().clone(),
                ttl: Some(claim_ttl),
            }),
            Ok(ClaimOutcome::Existing(existing)) => Ok(existing.clone()),
            Err(error) => Err(error.clone()),
        };
        let result = match local.flights.run(&identity.key, attempt, share).await {
            Flight::Led(result) => result,
            Flight::Joined(shared) => shared.map(ClaimOutcome::Existing),
        };
        let existing = match result {
            Ok(ClaimOutcome::Claimed(lease)) => return Ok(Decision::Forward(lease)),
            Ok(ClaimOutcome::Existing(existing)) => existing,
            Err(StoreError::Corrupt(error)) => {
                // Unreadable (a newer encoding mid-upgrade, or damage): the
                // first delivery may have run, so treat it as an unknown
                // outcome — never as a free key, never as a 5xx.
                tracing::error!(
                    key = identity.key.hash(),
                    %error,
                    "unreadable record: answering outcome_unknown until it expires or is purged"
                );
                return Ok(Decision::Refuse(Rejection::OutcomeUnknown {
                    retry_after: rules.unknown_hold,
                }));
            }
            Err(error) => return Err(error),
        };
        if existing.record.fingerprint != identity.fingerprint {
            return Ok(Decision::Refuse(Rejection::FingerprintMismatch));
        }
        match existing.observe(rules.unknown_hold) {
            Observed::Completed(answer) => return Ok(Decision::Replay(answer.clone())),
            Observed::Unknown { remaining } => {
                return Ok(Decision::Refuse(Rejection::OutcomeUnknown {
                    retry_after: remaining,
                }));
            }
            Observed::InFlight => {}
        }
        let now = Instant::now();
        // Shadow mode never holds a request back.
        let no_wait = rules.on_in_flight == OnInFlight::Conflict || rules.mode == Mode::Shadow;
        if no_wait || now >= deadline {
            return Ok(Decision::Refuse(Rejection::InFlight {
                retry_after: lease_left(existing.ttl, rules),
            }));
        }
        // Subscribing only now keeps the first-delivery path free of the
        // waiter map; a settle that slipped in between is caught by the
        // short first pause.
        let key = identity.key.as_str();
        let Some(notify) = local.waiters.subscribe(key, max_waiting) else {
            // Enough copies wait already; this one would only hold memory.
            return Ok(Decision::Refuse(Rejection::InFlight {
                retry_after: lease_left(existing.ttl, rules),
            }));
        };
        let _ = tokio::time::timeout(pause.min(deadline - now), notify.notified()).await;
        local.waiters.unsubscribe(key, &notify);
        pause = (pause * 2).min(POLL_MAX);
    }
}

/// Runs `work` while renewing `lease` every third of the lease, so a slow
/// upstream never lets the claim lapse (SPEC §4 rule 4). Renewal failures
/// are logged and retried at the next tick; the work is never interrupted.
pub async fn while_renewing<T>(
    store: &AnyStore,
    lease: &Lease,
    rules: &Idempotency,
    work: impl std::future::Future<Output = T>,
) -> T {
    let ttl = rules.lease + rules.unknown_hold;
    let period = (rules.lease / 3).max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(work);
    loop {
        tokio::select! {
            output = &mut work => return output,
            _ = ticker.tick() => match store.renew(lease, ttl).await {
                Ok(true) => {}
                Ok(false) => tracing::warn!(key = lease.key().hash(), "lease lost while the upstream call runs"),
                Err(error) => tracing::warn!(key = lease.key().hash(), %error, "lease renewal failed"),
            },
        }
    }
}
