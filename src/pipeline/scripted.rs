//! A store for unit tests of the store's callers: `complete` and `renew`
//! answer from a script and note when each call came (in tokio time, so
//! paused-time tests can pin the exact schedule of retries and renewals).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::record::{Fingerprint, OwnerToken, Record};
use crate::store::entity::{EntityState, EntityStep};
use crate::store::{
    ClaimOutcome, Completion, EntityKey, Existing, Lease, Releasing, Store, StoreError, StoreKey,
};

/// Answers `complete` and `renew` from scripts, then with success.
#[derive(Debug, Default)]
pub(crate) struct Scripted {
    answers: Mutex<VecDeque<Result<Completion, StoreError>>>,
    renew_answers: Mutex<VecDeque<Result<bool, StoreError>>>,
    /// When each `complete` came.
    pub(crate) completes: Mutex<Vec<Instant>>,
    /// When each `renew` came, and the TTL it set.
    renews: Mutex<Vec<(Instant, Duration)>>,
}

impl Scripted {
    /// `complete` gives these answers first.
    pub(crate) fn new(answers: Vec<Result<Completion, StoreError>>) -> Self {
        Self {
            answers: Mutex::new(answers.into()),
            ..Self::default()
        }
    }

    /// `renew` gives these answers first.
    pub(crate) fn renewing(answers: Vec<Result<bool, StoreError>>) -> Self {
        Self {
            renew_answers: Mutex::new(answers.into()),
            ..Self::default()
        }
    }

    /// Every `renew` so far: when, and with which TTL.
    pub(crate) fn renewals(&self) -> Vec<(Instant, Duration)> {
        self.renews.lock().unwrap().clone()
    }
}

impl Store for Scripted {
    async fn claim(
        &self,
        _: &StoreKey,
        _: Record,
        _: Duration,
        _: (Option<&EntityStep>, Option<&crate::store::probe::ProbePlan>),
    ) -> Result<ClaimOutcome, StoreError> {
        unreachable!("not used")
    }

    async fn complete(
        &self,
        _: &StoreKey,
        _: OwnerToken,
        _: &Record,
        _: Duration,
        _: crate::store::entity::EntityEffect,
    ) -> Result<Completion, StoreError> {
        self.completes.lock().unwrap().push(Instant::now());
        self.answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Ok(Completion::Stored))
    }

    async fn release(&self, _: &StoreKey, _: OwnerToken, _: Releasing) -> Result<bool, StoreError> {
        unreachable!("not used")
    }

    async fn renew(&self, _: &StoreKey, _: OwnerToken, ttl: Duration) -> Result<bool, StoreError> {
        self.renews.lock().unwrap().push((Instant::now(), ttl));
        self.renew_answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Ok(true))
    }

    async fn lookup(&self, _: &StoreKey) -> Result<Option<Existing>, StoreError> {
        unreachable!("not used")
    }

    async fn purge(
        &self,
        _: &StoreKey,
        _: Option<crate::store::SeenRecord>,
    ) -> Result<crate::store::Purged, StoreError> {
        unreachable!("not used")
    }

    async fn entity(
        &self,
        _: &EntityKey,
    ) -> Result<Option<(EntityState, Option<Duration>)>, StoreError> {
        unreachable!("not used")
    }

    async fn correct_entity(
        &self,
        _: &crate::store::EntityKey,
        _: &crate::store::entity::Seen,
        _: &crate::store::entity::Correction,
        _: (&str, Duration),
    ) -> Result<bool, StoreError> {
        unreachable!("not used")
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// A lease on a fixed key, as a successful claim would hand out.
pub(crate) fn lease() -> Lease {
    Lease::for_tests(
        StoreKey::new("idemgate", "r", &"a".repeat(64)),
        Record::in_flight(OwnerToken([1; 16]), Fingerprint([2; 32]), None),
    )
}
