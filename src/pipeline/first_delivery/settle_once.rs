//! Stage 7, the store side: settling a first delivery's lease.
//!
//! One attempt runs before the sender gets its answer, so in the common
//! case a retry that arrives right after the answer finds the outcome
//! stored (or the key released). If the store refuses that attempt, the
//! sender is answered and [`Forwarder::keep_storing`] ([`crate::pipeline::first_delivery::persist`])
//! or [`Forwarder::keep_releasing`] carries on. Every way an
//! outcome ends up not stored is logged with the key hash the admin API
//! takes and counted as an unknown outcome, once.

use std::time::Duration;

use crate::pipeline::claim::lease_timing::LeaseTiming;
use crate::pipeline::first_delivery::forwarder::Forwarder;
use crate::pipeline::first_delivery::persist::{Persist, Persisted};
use crate::pipeline::first_delivery::settle::ClaimAction;
use crate::pipeline::runtime::RouteRuntime;
use crate::pipeline::words::Settled;
use crate::record::{Record, RecordState, StoredBody};
use crate::store::{Completion, Lease, StoreError};

impl Forwarder {
    /// Settles a first delivery's lease with one store attempt. Returns
    /// what that attempt achieved (the request line's `settled`), and the
    /// failure if storing the outcome or releasing the claim failed but
    /// may yet succeed ([`Forwarder::keep_storing`] or
    /// [`Forwarder::keep_releasing`] takes over once the sender is answered).
    pub(in crate::pipeline) async fn settle_once(
        &self,
        route: &RouteRuntime,
        lease: &Lease,
        settlement: &ClaimAction,
    ) -> (Settled, Option<StoreError>) {
        let key = lease.key().hash();
        let (record, ttl) = match settlement {
            ClaimAction::Keep(record, ttl) => (record, *ttl),
            ClaimAction::Release => {
                return match self.store.release(lease).await {
                    Ok(true) => (Settled::Released, None),
                    Ok(false) => {
                        tracing::warn!(
                            route = route.name(),
                            key,
                            "claim expired or taken over before it was released"
                        );
                        (Settled::Released, None)
                    }
                    // Unreachable: the sender is answered, then
                    // `keep_releasing` carries on.
                    Err(error @ StoreError::Unavailable(_)) => (Settled::Unknown, Some(error)),
                    Err(error) => {
                        tracing::error!(
                            route = route.name(),
                            key,
                            %error,
                            "could not release the claim: it turns unknown when its lease runs out"
                        );
                        (Settled::Unknown, None)
                    }
                };
            }
        };
        match &record.state {
            RecordState::Unknown => {
                route.meters.unknown_outcome();
                tracing::warn!(
                    route = route.name(),
                    key,
                    hold_s = ttl.as_secs(),
                    "outcome unknown: the key is blocked until the hold ends or an operator purges it"
                );
            }
            RecordState::Completed(answer) if answer.body == StoredBody::TooLarge => {
                route.meters.answer_not_stored(false);
                tracing::warn!(
                    route = route.name(),
                    key,
                    limit = self.config.limits.max_stored_answer_bytes,
                    "answer larger than max_stored_answer_bytes: sent on, not stored; duplicates get answer_not_stored"
                );
            }
            _ => {}
        }
        match self.persist(route, lease, record, ttl).once().await {
            Ok(done) => {
                let settled = Settled::after_persist(record, &done);
                self.report_persisted(route, lease, record, done);
                (settled, None)
            }
            Err(failure) => (Settled::Unknown, Some(failure)),
        }
    }

    /// Keeps releasing a claim while the store is unreachable, until it
    /// answers or the claim has expired ([`AnyStore::release_until_expired`]):
    /// a key that was never forwarded must not answer `409` for a lease and
    /// an `unknown_hold` because a release gave up inside an outage.
    ///
    /// [`AnyStore::release_until_expired`]: crate::store::AnyStore::release_until_expired
    pub(in crate::pipeline) async fn keep_releasing(&self, route: &RouteRuntime, lease: &Lease) {
        let key = lease.key().hash();
        match self
            .store
            .release_until_expired(lease, &self.grace_over)
            .await
        {
            Ok(true) => tracing::info!(
                route = route.name(),
                key,
                "claim released once the store answered again"
            ),
            Ok(false) => {}
            Err(error) => tracing::error!(
                route = route.name(),
                key,
                %error,
                "could not release the claim: it turns unknown when its lease runs out"
            ),
        }
    }

    /// Keeps storing an outcome the store refused (contract §4 rule 10).
    pub(in crate::pipeline) async fn keep_storing(
        &self,
        route: &RouteRuntime,
        lease: &Lease,
        record: &Record,
        ttl: Duration,
        failure: StoreError,
    ) {
        // Copies here must not claim the key while its answer is in hand.
        let in_hand = self.claimer.answer_in_hand(lease.key());
        let done = self
            .persist(route, lease, record, ttl)
            .until_stored(failure, &self.grace_over)
            .await;
        drop(in_hand);
        self.report_persisted(route, lease, record, done);
    }

    fn persist<'a>(
        &'a self,
        route: &RouteRuntime,
        lease: &'a Lease,
        record: &'a Record,
        ttl: Duration,
    ) -> Persist<'a> {
        let rules = &route.settings.idempotency;
        Persist::new(
            &self.store,
            lease,
            record,
            ttl,
            LeaseTiming::of(rules).claim_ttl(),
        )
    }

    /// Logs how storing an outcome ended; every way it was not stored is an
    /// unknown outcome (counted once: an unknown record was counted already).
    fn report_persisted(
        &self,
        route: &RouteRuntime,
        lease: &Lease,
        record: &Record,
        done: Persisted,
    ) {
        let key = lease.key().hash();
        let why = match done {
            Persisted::Stored(Completion::Stored) => return,
            Persisted::Stored(_) => {
                tracing::warn!(
                    route = route.name(),
                    key,
                    "the claim expired while the store was away; the outcome now holds the free key"
                );
                return;
            }
            Persisted::TakenOver => {
                "another delivery holds the key: this claim was lost before the answer was stored"
                    .to_owned()
            }
            Persisted::GaveUp(error) => error.to_string(),
        };
        if record.state != RecordState::Unknown {
            route.meters.unknown_outcome();
        }
        tracing::error!(
            route = route.name(),
            key,
            why,
            "outcome unknown: the upstream answered but its outcome could not be stored; check the backend, then purge the record if it did not act"
        );
    }
}
