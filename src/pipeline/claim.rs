//! Stage 5 and the decisions 6b–6e: claim the key, or decide from the
//! record already there.
//!
//! Order matters and follows contract §1: a record with a different fingerprint
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
//!
//! Before any of that, the replay cache ([`crate::replay_cache`]) is asked:
//! it holds completed records only, so a hit is decided (replayed, or 422
//! for another fingerprint) with no store round trip. A leader that found a
//! completed record in the store starts a background fill, so one read per
//! key and instance is all a storm ever costs once the fill has landed.
//!
//! All of it is held by one [`Claimer`], built with the pipeline: the
//! per-request call names only the delivery, its rules and how long it may
//! wait.

pub(crate) mod lease_timing;
mod local;
pub(crate) mod single_flight;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backoff::Backoff;
use crate::config::{Idempotency, Mode, OnInFlight};
use crate::error::Rejection;
use crate::pipeline::admit::identify::Identity;
use crate::pipeline::claim::lease_timing::LeaseTiming;
use crate::pipeline::claim::local::{AnswersInHand, InHand, LocalWaiters};
use crate::pipeline::claim::single_flight::{Flight, SingleFlight};
use crate::record::{
    ClaimHold, OwnerMint, OwnerToken, Record, RecordState, StoredResponse, TraceContext,
};
use crate::store::entity::{Blocker, EntityStep, EntityVerdict, Judgement};
use crate::store::{AnyStore, ClaimOutcome, Existing, Lease, Observed, StoreError, StoreKey};

/// What a claim saw, as duplicates sharing one store read receive it.
#[derive(Debug, Clone)]
enum Seen {
    /// A record (to a joiner, the leader's fresh claim is one too).
    Record(Existing),
    /// The entity decided; nothing was claimed.
    Decided(EntityVerdict),
}

/// First and largest pause between store re-checks while waiting: a local
/// settle wakes a waiter at once, so these only bound how late a first
/// delivery on another instance is noticed. Pauses between them grow with
/// jitter (`crate::backoff`), so a crowd of waiters does not re-check in step.
const POLL_FIRST: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(100);

/// How long a duplicate may wait for its in-flight first delivery: in
/// shadow mode, not at all (the route only watches, and the copy is sent
/// on at once).
pub(crate) fn patience(rules: &Idempotency) -> Duration {
    match rules.mode {
        Mode::Enforce => rules.wait_timeout,
        Mode::Shadow => Duration::ZERO,
    }
}

/// What to do with a delivery.
#[derive(Debug)]
pub(crate) enum Decision {
    /// First delivery: forward it and settle the lease.
    Forward(Lease),
    /// Replay this stored answer, stored at `answered_at_ms` (unix ms)
    /// by the first delivery, whose trace is `first`.
    Replay {
        /// The answer.
        answer: StoredResponse,
        /// When it was stored: the replay's `Age`.
        answered_at_ms: u64,
        /// The first delivery's trace, for a span link.
        first: Option<TraceContext>,
    },
    /// Answer with this rejection; the trace is the first delivery's, when
    /// the key has a readable record.
    Refuse(Rejection, Option<TraceContext>),
}

/// What a claim on an entity route comes to ([`Claimer::claim_entity`]):
/// a decision by key, or one its entity took first.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "built once per claim and matched at once; boxing the common case would allocate for every delivery"
)]
pub(crate) enum EntityDecision {
    /// Decided by the key, as on any route.
    Decided(Decision),
    /// The delivery's entity decided against forwarding it: a repeat of
    /// its state, or a refused change (`crate::pipeline::admit::entity`).
    Judged(Judgement),
    /// The delivery's entity is busy, and the route holds notices behind
    /// a busy entity: hold this one (`crate::pipeline::first_delivery::hold`).
    Behind(Blocker),
}

/// A decision by key, as [`Claimer::claim_with`] returns it.
fn decided(decision: Decision) -> Result<EntityDecision, StoreError> {
    Ok(EntityDecision::Decided(decision))
}

/// Claims keys for the pipeline. Holds what every claim needs — the
/// store, the tracker that releases abandoned claims, the owner tokens,
/// and what duplicates of one key on this instance share (a wake-up when
/// its first delivery settles, one store read at a time) — so it is built
/// once and each request only says what it claims.
#[derive(Debug)]
pub(crate) struct Claimer {
    store: Arc<AnyStore>,
    tracker: TaskTracker,
    /// Ends the release of abandoned claims when shutdown's grace is over.
    stop: CancellationToken,
    owners: OwnerMint,
    waiters: LocalWaiters,
    /// Keys whose answer this process holds but has not stored yet.
    in_hand: AnswersInHand,
    flights: SingleFlight<StoreKey, Result<Seen, StoreError>>,
    /// Duplicates of one key allowed to wait at once on this instance.
    max_waiting: usize,
}

/// Releases a claim whose reply nobody will read: armed while the claim
/// request is out, so if the request future is dropped (the sender hung
/// up) or the reply times out, an owner-checked release is spawned.
/// Without it such a claim would block its key as "in flight", and then
/// "unknown", although the upstream never saw the delivery.
struct PendingClaim<'a> {
    store: &'a Arc<AnyStore>,
    tracker: &'a TaskTracker,
    stop: &'a CancellationToken,
    key: &'a StoreKey,
    owner: OwnerToken,
    /// The claim's TTL: a claim that landed is gone this long after the
    /// reply was given up on, so its release retries until then.
    ttl: Duration,
    armed: bool,
}

impl Drop for PendingClaim<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, key, owner) = (Arc::clone(self.store), self.key.clone(), self.owner);
        let (stop, expires) = (self.stop.clone(), Instant::now() + self.ttl);
        self.tracker.spawn(async move {
            if let Err(error) = store.release_abandoned(&key, owner, expires, &stop).await {
                tracing::debug!(key = key.hash(), %error, "could not release an abandoned claim");
            }
        });
    }
}

impl Claimer {
    /// A claimer on `store`; abandoned claims are released under
    /// `tracker` (until they expire, or `stop`), and at most `max_waiting`
    /// duplicates of one key wait.
    pub(crate) fn new(
        store: Arc<AnyStore>,
        tracker: TaskTracker,
        stop: CancellationToken,
        max_waiting: usize,
    ) -> Self {
        Self {
            store,
            tracker,
            stop,
            owners: OwnerMint::new(),
            waiters: LocalWaiters::default(),
            in_hand: AnswersInHand::default(),
            flights: SingleFlight::default(),
            max_waiting,
        }
    }

    /// Fills the replay cache with `key`'s record in the background when
    /// this claim (the flight's leader: one per storm) found it completed
    /// in the store.
    fn remember_if_completed(&self, key: &StoreKey, result: &Result<ClaimOutcome, StoreError>) {
        let Ok(ClaimOutcome::Existing(existing)) = result else {
            return;
        };
        if !matches!(
            existing.record.state,
            RecordState::Completed(_) | RecordState::Acknowledged(_)
        ) {
            return;
        }
        if let Some(fill) = self.store.begin_fill(key) {
            let (store, key) = (Arc::clone(&self.store), key.clone());
            self.tracker
                .spawn(async move { store.refill(&key, fill).await });
        }
    }

    /// Wakes every local waiter on `key`: its first delivery has settled.
    pub(crate) fn settled(&self, key: &StoreKey) {
        self.waiters.settled(key.as_str());
    }

    /// Marks `key`'s answer as held by this process until the guard is
    /// dropped (stored, or given up): meanwhile its copies here see the key
    /// in flight, never free, whatever the store says (a claim that
    /// expired while the store refused writes), and the drop wakes them.
    pub(crate) fn answer_in_hand(&self, key: &StoreKey) -> InHand<'_> {
        self.in_hand.hold(key.as_str(), &self.waiters)
    }

    /// Claims `identity` or decides from the existing record (module
    /// docs). A live in-flight record is waited for at most `patience`
    /// (and not at all with `on_in_flight = "conflict"`). `ack` is the
    /// route's acknowledgement, which a compact record's replay is
    /// ([`AckMarker::replay`]).
    ///
    /// [`AckMarker::replay`]: crate::record::AckMarker::replay
    pub(crate) async fn claim(
        &self,
        identity: &Identity,
        rules: &Idempotency,
        ack: Option<&StoredResponse>,
        patience: Duration,
        trace: Option<TraceContext>,
    ) -> Result<Decision, StoreError> {
        match self
            .claim_with(identity, rules, (ack, None), patience, trace)
            .await?
        {
            EntityDecision::Decided(decision) => Ok(decision),
            // Only a store that misbehaves judges a claim that named no
            // entity: an error, as any reply that makes no sense.
            EntityDecision::Judged(_) | EntityDecision::Behind(_) => Err(StoreError::Backend(
                "the store answered with an entity's verdict a claim that named none".into(),
            )),
        }
    }

    /// [`Claimer::claim`] on an entity route: `step` is judged with the
    /// claim; a busy entity (another delivery's change pending) is handed
    /// back to be held if the route `holds` notices, else waited for like
    /// a live in-flight record or refused ([`busy`]).
    pub(crate) async fn claim_entity(
        &self,
        identity: &Identity,
        rules: &Idempotency,
        (ack, step, holds): (Option<&StoredResponse>, &EntityStep, bool),
        patience: Duration,
        trace: Option<TraceContext>,
    ) -> Result<EntityDecision, StoreError> {
        self.claim_with(identity, rules, (ack, Some((step, holds))), patience, trace)
            .await
    }

    /// The claim loop of [`Claimer::claim`] and [`Claimer::claim_entity`].
    async fn claim_with(
        &self,
        identity: &Identity,
        rules: &Idempotency,
        (ack, entity): (Option<&StoredResponse>, Option<(&EntityStep, bool)>),
        patience: Duration,
        trace: Option<TraceContext>,
    ) -> Result<EntityDecision, StoreError> {
        let (entity, holds) = match entity {
            Some((step, holds)) => (Some(step), holds),
            None => (None, false),
        };
        let owner = self.owners.next();
        let timing = LeaseTiming::of(rules);
        let claim_ttl = timing.claim_ttl();
        let deadline = Instant::now() + patience;
        let mut backoff = Backoff::new(POLL_FIRST, POLL_MAX);
        loop {
            let attempt = async {
                let record = Record::in_flight(owner, identity.fingerprint, trace)
                    .with_key(identity.key_value.as_deref())
                    .with_hold(timing.unknown_hold);
                let mut pending = PendingClaim {
                    store: &self.store,
                    tracker: &self.tracker,
                    stop: &self.stop,
                    key: &identity.key,
                    owner,
                    ttl: claim_ttl,
                    armed: true,
                };
                let result = self
                    .store
                    .claim(
                        &identity.key,
                        record,
                        claim_ttl,
                        (
                            entity,
                            identity.probe.as_ref().and_then(|p| p.as_ref().ok()),
                        ),
                    )
                    .await;
                // Only a timed-out reply can hide a claim that landed; every
                // other answer says exactly what happened.
                pending.armed = matches!(result, Err(StoreError::Unavailable(_)));
                result
            };
            let share = |result: &Result<ClaimOutcome, StoreError>| match result {
                // To a joiner, the leader's fresh claim is a live in-flight record.
                Ok(ClaimOutcome::Claimed(lease)) => Ok(Seen::Record(Existing {
                    record: lease.record().clone(),
                    ttl: Some(claim_ttl),
                })),
                Ok(ClaimOutcome::Existing(existing)) => Ok(Seen::Record(existing.clone())),
                Ok(ClaimOutcome::Decided(verdict)) => Ok(Seen::Decided(verdict.clone())),
                Err(error) => Err(error.clone()),
            };
            let in_hand = self.in_hand.holds(identity.key.as_str());
            let result = match self.store.cached(&identity.key) {
                // This process holds the key's answer (`answer_in_hand`).
                _ if in_hand => Ok(ClaimOutcome::Existing(Existing {
                    record: Record::in_flight(owner, identity.fingerprint, None),
                    ttl: Some(claim_ttl),
                })),
                // Only completed records are cached: no round trip at all.
                Some(hit) => Ok(ClaimOutcome::Existing(hit)),
                None => match self.flights.run(&identity.key, attempt, share).await {
                    Flight::Led(result) => {
                        self.remember_if_completed(&identity.key, &result);
                        result
                    }
                    Flight::Joined(shared) => shared.map(|seen| match seen {
                        Seen::Record(existing) => ClaimOutcome::Existing(existing),
                        Seen::Decided(verdict) => ClaimOutcome::Decided(verdict),
                    }),
                },
            };
            let existing = match result {
                Ok(ClaimOutcome::Claimed(lease)) => return decided(Decision::Forward(lease)),
                Ok(ClaimOutcome::Existing(existing)) => existing,
                // Another delivery's change to the entity is pending: wait
                // for a live one like a live in-flight record, and answer
                // the truth about any other (`busy`).
                Ok(ClaimOutcome::Decided(EntityVerdict::Busy { blocker })) if holds => {
                    return Ok(EntityDecision::Behind(blocker));
                }
                Ok(ClaimOutcome::Decided(EntityVerdict::Busy { blocker })) => {
                    match busy(blocker, timing) {
                        Ok(remaining) => Existing {
                            record: Record::in_flight(owner, identity.fingerprint, None),
                            ttl: Some(remaining),
                        },
                        Err(rejection) => return decided(Decision::Refuse(rejection, None)),
                    }
                }
                Ok(ClaimOutcome::Decided(EntityVerdict::Judged(judgement))) => {
                    return Ok(EntityDecision::Judged(judgement));
                }
                Err(StoreError::Corrupt(error)) => {
                    // Unreadable (a newer encoding mid-upgrade, or damage): the
                    // first delivery may have run, so treat it as an unknown
                    // outcome — never as a free key, never as a 5xx.
                    tracing::error!(
                        key = identity.key.hash(),
                        %error,
                        "unreadable record: answering outcome_unknown until it expires or is purged"
                    );
                    return decided(Decision::Refuse(
                        Rejection::OutcomeUnknown {
                            retry_after: rules.unknown_hold,
                        },
                        None,
                    ));
                }
                Err(error) => return Err(error),
            };
            let first = existing.record.trace;
            if existing.record.fingerprint != identity.fingerprint {
                return decided(Decision::Refuse(Rejection::FingerprintMismatch, first));
            }
            match existing.observe(rules.unknown_hold) {
                Observed::Completed(answer) => {
                    return decided(Decision::Replay {
                        answer: answer.clone(),
                        answered_at_ms: existing.record.answered_at_ms,
                        first,
                    });
                }
                Observed::Acknowledged(marker) => {
                    let answered_at_ms = existing.record.answered_at_ms;
                    return decided(Decision::Replay {
                        answer: marker.replay(ack, answered_at_ms),
                        answered_at_ms,
                        first,
                    });
                }
                Observed::Unknown { remaining } => {
                    return decided(Decision::Refuse(
                        Rejection::OutcomeUnknown {
                            retry_after: remaining,
                        },
                        first,
                    ));
                }
                Observed::InFlight => {}
            }
            let in_flight = Decision::Refuse(
                Rejection::InFlight {
                    retry_after: timing.retry_after_in_flight(existing.ttl, existing.claim_hold()),
                },
                first,
            );
            let now = Instant::now();
            if rules.on_in_flight == OnInFlight::Conflict || now >= deadline {
                return decided(in_flight);
            }
            // Subscribing only now keeps the first-delivery path free of the
            // waiter map; a settle that slipped in between is caught by the
            // short first pause.
            let key = identity.key.as_str();
            let Some(notify) = self.waiters.subscribe(key, self.max_waiting) else {
                // Enough copies wait already; this one would only hold memory.
                return decided(in_flight);
            };
            let pause = backoff.next_pause().min(deadline - now);
            // Woken by the settle, or the pause is over: look again either way.
            tokio::select! {
                () = notify.notified() => {}
                () = tokio::time::sleep(pause) => {}
            }
            self.waiters.unsubscribe(key, &notify);
        }
    }
}

/// What a delivery for a busy entity meets (`store::entity::Blocker`):
/// `Ok(ttl)` of a live change in flight, waited for like a live in-flight
/// record; otherwise the 409 that tells the truth, its `Retry-After`
/// bounded by the route's lease or `unknown_hold` (a change owed by the
/// inbox, or notices held before this one, may wait there for hours; one
/// whose record is gone waits for an operator: the sender is asked back
/// within the hold, never told "a hundred years"). A route with an inbox
/// holds the notice instead ([`EntityDecision::Behind`]). Also the answer when
/// the notice can not be held (its entity's queue is full).
pub(crate) fn busy_answer(blocker: Blocker, rules: &Idempotency) -> Rejection {
    let timing = LeaseTiming::of(rules);
    let own = match blocker {
        Blocker::InFlight { hold, .. } => hold,
        _ => ClaimHold::default(),
    };
    busy(blocker, timing).map_or_else(
        |rejection| rejection,
        |ttl| Rejection::InFlight {
            retry_after: timing.retry_after_in_flight(Some(ttl), own),
        },
    )
}

/// [`busy_answer`] with the wait for a live change left to the caller.
fn busy(blocker: Blocker, timing: LeaseTiming) -> Result<Duration, Rejection> {
    let hold = timing.unknown_hold;
    match blocker {
        Blocker::InFlight {
            remaining,
            hold: own,
        } if remaining > own.or(hold) => Ok(remaining),
        Blocker::InFlight { remaining, .. } | Blocker::Unknown { remaining } => {
            Err(Rejection::OutcomeUnknown {
                retry_after: remaining.min(hold),
            })
        }
        Blocker::Inbox | Blocker::Queue => Err(Rejection::InFlight {
            retry_after: timing.lease,
        }),
        Blocker::Unresolved => Err(Rejection::OutcomeUnknown { retry_after: hold }),
    }
}

#[cfg(test)]
mod tests;
