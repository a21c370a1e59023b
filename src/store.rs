//! The idempotency store: the contract both backends implement.
//!
//! Six operations, each on one key, each atomic:
//!
//! | op       | effect |
//! |----------|--------|
//! | claim    | return the existing record and its TTL, else create an in-flight record (reads first: a full store still answers for what it holds) |
//! | complete | owner-checked: overwrite with the completed (or unknown) record and a new TTL; a free key is written too ([`Completion`]) |
//! | release  | owner-checked delete (a failed first attempt leaves no trace) |
//! | renew    | owner-checked TTL reset while the upstream call runs |
//! | lookup   | read a record and its TTL (admin API, waiting duplicates) |
//! | purge    | unconditional delete (operator resolving an unknown outcome) |
//!
//! A successful claim is the only way to obtain a [`Lease`], and the
//! pipeline settles a claim only through [`AnyStore`], whose `complete`,
//! `release` and `renew` borrow one (an answer in hand is stored again and
//! again until it sticks, `pipeline::persist`). The backends underneath
//! take the key and owner token alone: the owner check is all they need,
//! and it lets [`AnyStore::release_abandoned`] release a claim whose reply
//! never came back without making up a lease.
//! Interpreting an existing record (contract §4 rule 4: an in-flight record
//! whose remaining TTL is at most `unknown_hold` has lost its owner) is done
//! once, here, in [`Existing::observe`], for both backends.
//!
//! `listing.rs` walks one scope's records a page at a time (the admin
//! listing by state): Redis `SCAN` on every primary, a range read of redb.
//!
//! `eviction.rs` watches the other way a record can vanish: a Redis whose
//! `maxmemory-policy` lets it evict keys (contract §4 rule 10).
//!
//! `cached.rs` puts the replay cache in front (`crate::replay_cache`):
//! [`AnyStore::cached`] answers completed records from memory, and every
//! write through `AnyStore` (complete, release, purge, inbox swap) drops its
//! key from the cache *after* the write, so nothing stale can land later.
//!
//! The store owns its background work (`upkeep.rs`,
//! [`AnyStore::spawn_upkeep`]): the embedded store's sweeper, Redis's
//! eviction watcher and the replay cache's invalidation listener. Its
//! metrics live beside it (`metrics.rs`).

pub mod audit;
mod backend;
mod cached;
mod connect;
pub(crate) mod durability;
pub mod embedded;
pub mod entity;
mod eviction;
mod generation;
pub mod inbox;
mod lease;
pub mod listing;
pub(crate) mod metrics;
pub mod probe;
pub mod redis;
mod release;
pub(crate) mod server;
mod upkeep;

pub use self::lease::{ENTITY_HASH_LEN, EntityKey, Lease, StoreKey, is_record_hash};
pub use self::release::Releasing;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use self::durability::WritePolicy;
use self::entity::{Correction, EntityEffect, EntityState, EntityStep, EntityVerdict, Seen};
use self::metrics::{StoreMetrics, StoreOp};
use self::probe::ProbePlan;
use crate::record::{
    AckMarker, ClaimHold, DecodeError, OwnerToken, Record, RecordState, StoredResponse, TooLong,
};
use crate::replay_cache::ReplayCache;

/// A record some earlier delivery left, with its remaining lifetime.
#[derive(Debug, Clone)]
pub struct Existing {
    /// The decoded record.
    pub record: Record,
    /// Remaining TTL; `None` if the store reports no expiry.
    pub ttl: Option<Duration>,
}

/// What an existing record means for a new delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed<'a> {
    /// Replay this answer.
    Completed(&'a StoredResponse),
    /// Replay the route's acknowledgement this marker names
    /// ([`AckMarker::replay`]).
    Acknowledged(&'a AckMarker),
    /// A live owner is still working on it.
    InFlight,
    /// The backend may have acted; blocked for `remaining`.
    Unknown {
        /// Time until the record expires.
        remaining: Duration,
    },
}

impl Existing {
    /// The hold the record's claim was written with (none but for an
    /// in-flight record that carries one).
    pub fn claim_hold(&self) -> ClaimHold {
        match self.record.state {
            RecordState::InFlight(hold) => hold,
            _ => ClaimHold::default(),
        }
    }

    /// Classifies the record. An in-flight claim is written with
    /// `TTL = lease + unknown_hold` and renewed while its owner lives, so a
    /// remaining TTL of at most that hold means the owner stopped
    /// renewing: the outcome is unknown (contract §4 rule 4). The hold is
    /// the claim's own ([`ClaimHold`]); `unknown_hold`, the reader's, only
    /// judges a record that carries none.
    pub fn observe(&self, unknown_hold: Duration) -> Observed<'_> {
        let remaining = self.ttl.unwrap_or(unknown_hold);
        match &self.record.state {
            RecordState::Completed(response) => Observed::Completed(response),
            RecordState::Acknowledged(marker) => Observed::Acknowledged(marker),
            // Every copy of a queued delivery is told what the first was.
            RecordState::Inbox(entry) => Observed::Completed(&entry.ack),
            RecordState::Unknown => Observed::Unknown { remaining },
            RecordState::InFlight(hold) if remaining <= hold.or(unknown_hold) => {
                Observed::Unknown { remaining }
            }
            RecordState::InFlight(_) => Observed::InFlight,
        }
    }
}

/// What a claim found.
#[derive(Debug)]
pub enum ClaimOutcome {
    /// The key was free and is now ours.
    Claimed(Lease),
    /// Someone was here first.
    Existing(Existing),
    /// The key was free, but the delivery's entity decided against
    /// forwarding it ([`entity`]): nothing was claimed.
    Decided(EntityVerdict),
}

/// The record an operator looked at before acting on it: its state byte
/// and owner token. Every transition changes one of them (a completion,
/// an unknown outcome, the inbox taking it, another owner's claim), so an
/// action that carries it is refused when the record moved on meanwhile,
/// in the same atomic step as the action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenRecord {
    state: u8,
    owner: OwnerToken,
}

impl SeenRecord {
    /// What an operator sees of `record`.
    pub fn of(record: &Record) -> Self {
        Self {
            state: record.state_byte(),
            owner: record.owner,
        }
    }

    /// Whether `record` is still the one seen.
    pub fn matches(&self, record: &Record) -> bool {
        *self == Self::of(record)
    }

    /// Bytes 2 to 18 of the record's encoding (state, owner), which the
    /// scripts compare.
    pub fn bytes(&self) -> [u8; 17] {
        let mut bytes = [0; 17];
        bytes[0] = self.state;
        bytes[1..].copy_from_slice(&self.owner.0);
        bytes
    }
}

/// What a purge did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purged {
    /// The record was deleted, or its entity's pending change dropped.
    Deleted,
    /// Nothing under the key, and no pending change of it.
    Absent,
    /// The record is not the one seen ([`SeenRecord`]): nothing was done.
    Changed,
}

/// What `complete` did with an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// Stored over this instance's own claim: the usual case.
    Stored,
    /// Stored into a free key: the claim had expired (or was lost with a
    /// restarted, evicted or purged store) while the answer was in hand.
    /// The upstream did act, so its outcome must hold the key (contract §4
    /// rule 10).
    StoredInFreeKey,
    /// Another owner holds the key: nothing was written.
    TakenOver,
}

impl Completion {
    /// Whether the outcome is now in the store.
    pub fn stored(self) -> bool {
        self != Self::TakenOver
    }
}

/// Store failures. All of them make the store "unavailable" for the
/// `on_unavailable` policy: a request is never forwarded on a guess.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Connection refused, timed out or reset.
    #[error("store unreachable: {0}")]
    Unavailable(String),
    /// The store answers but refuses writes (Redis at `maxmemory` under
    /// `noeviction`). Reads still work, so keys it holds are still
    /// replayed; only new claims and stores fail.
    #[error("store refuses writes: {0}")]
    Full(String),
    /// A stored record this build cannot decode.
    #[error("corrupt record: {0}")]
    Corrupt(#[from] DecodeError),
    /// An answer the record layout can not hold (a header name over
    /// 64 KiB, …): refused whole rather than stored truncated, never retried.
    #[error("answer can not be stored: {0}")]
    Unstorable(#[from] TooLong),
    /// The server is one idemgate does not run on (`store::server`): at
    /// start-up, the refusal to start.
    #[error("{0}")]
    Unsupported(String),
    /// Any other backend failure.
    #[error("store failure: {0}")]
    Backend(String),
}

impl StoreError {
    /// Whether trying the same write again later can succeed: the store
    /// was out of reach or full, not broken.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Full(_))
    }
}

/// The operations of the table in the module docs, implemented by
/// [`redis::RedisStore`] and [`embedded::EmbeddedStore`]. The pipeline
/// calls them through [`AnyStore`], which meters them and settles claims
/// by [`Lease`].
pub trait Store: Send + Sync + 'static {
    /// Claims `key` with the in-flight `record` for `ttl`
    /// (`lease + unknown_hold`), or returns the record already there. On
    /// an entity route, `entity` judges a free key first, in the same
    /// atomic step ([`entity`], "Claim"); on a probe route, a claim keeps
    /// the delivery's `probe` plan in that same step ([`probe`]).
    fn claim(
        &self,
        key: &StoreKey,
        record: Record,
        ttl: Duration,
        with: (Option<&EntityStep>, Option<&ProbePlan>),
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send;

    /// Replaces the claimed record with `record` for `ttl` if `owner` still
    /// owns `key`, or writes it if the key is free (see [`Completion`]).
    /// A key of an entity route settles its entity's pending change with
    /// `effect` in the same step ([`entity::EntityEffect::of`]).
    fn complete(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        record: &Record,
        ttl: Duration,
        effect: EntityEffect,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send;

    /// Deletes `key` if `owner` still owns it and `what` allows its
    /// record's state. Returns whether it did. A deleted record that was
    /// its entity's pending change drops the change in the same step (the
    /// handler did not act).
    fn release(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        what: Releasing,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Resets the TTL of the in-flight record `owner` holds on `key`.
    /// Returns whether it did.
    fn renew(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Reads a record and its remaining TTL.
    fn lookup(
        &self,
        key: &StoreKey,
    ) -> impl Future<Output = Result<Option<Existing>, StoreError>> + Send;

    /// Deletes a record whoever owns it, if it is still the record `seen`
    /// (when given: else [`Purged::Changed`], nothing done). If the key is
    /// its entity's pending change, the change is dropped in the same
    /// step, even when the record itself is already gone and none was
    /// seen (an operator resolving an unresolved change: it never
    /// happened).
    fn purge(
        &self,
        key: &StoreKey,
        seen: Option<SeenRecord>,
    ) -> impl Future<Output = Result<Purged, StoreError>> + Send;

    /// Reads an entity and its remaining TTL.
    fn entity(
        &self,
        key: &EntityKey,
    ) -> impl Future<Output = Result<Option<(EntityState, Option<Duration>)>, StoreError>> + Send;

    /// An operator's `correction` of entity `key` by `by`, if it still is
    /// as `seen` ([`entity::Correction`]); kept `retention` from now.
    /// Returns whether it was applied (`false`: it changed meanwhile).
    fn correct_entity(
        &self,
        key: &EntityKey,
        seen: &Seen,
        correction: &Correction,
        by: (&str, Duration),
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Checks that the store answers.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A boxed store call, so both backends fit behind one `&dyn` trait
/// object (the private `Dispatch`, and [`inbox::InboxOps`]).
pub type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Declares `Dispatch`, [`Store`] with its futures boxed, and implements
/// it for every store, from one list of the operations: the boxed
/// signatures are written once, so the mirror and its forwarding bodies can
/// not drift apart. `'a` in an argument's type is the borrow the boxed
/// future holds.
macro_rules! boxed_store {
    ($($op:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {
        /// [`Store`] with its futures boxed: the one way [`AnyStore`]
        /// reaches its backend. Boxing costs one small allocation per store
        /// call, nothing next to a network round trip or a durable redb
        /// commit, and spares a match over the backends in every operation.
        trait Dispatch: Send + Sync + std::fmt::Debug {
            $(fn $op<'a>(&'a self, $($arg: $ty),*) -> Call<'a, $out>;)*
        }

        impl<S: Store + std::fmt::Debug> Dispatch for S {
            $(fn $op<'a>(&'a self, $($arg: $ty),*) -> Call<'a, $out> {
                Box::pin(Store::$op(self, $($arg),*))
            })*
        }

        #[cfg(test)]
        impl<S: Store + std::fmt::Debug> Dispatch for backend::Scripted<S> {
            $(fn $op<'a>(&'a self, $($arg: $ty),*) -> Call<'a, $out> {
                Box::pin(Store::$op(&*self.0, $($arg),*))
            })*
        }
    };
}

boxed_store! {
    claim(key: &'a StoreKey, record: Record, ttl: Duration, with: (Option<&'a EntityStep>, Option<&'a ProbePlan>)) -> ClaimOutcome;
    complete(key: &'a StoreKey, owner: OwnerToken, record: &'a Record, ttl: Duration, effect: EntityEffect) -> Completion;
    release(key: &'a StoreKey, owner: OwnerToken, what: Releasing) -> bool;
    renew(key: &'a StoreKey, owner: OwnerToken, ttl: Duration) -> bool;
    lookup(key: &'a StoreKey) -> Option<Existing>;
    purge(key: &'a StoreKey, seen: Option<SeenRecord>) -> Purged;
    entity(key: &'a EntityKey) -> Option<(EntityState, Option<Duration>)>;
    correct_entity(key: &'a EntityKey, seen: &'a Seen, correction: &'a Correction, by: (&'a str, Duration)) -> bool;
    ping() -> ();
}

/// The configured backend, metered: every call but `ping` records
/// `idemgate_store_duration_seconds{op}` and, on failure,
/// `idemgate_store_errors_total{op}`.
#[derive(Debug)]
pub struct AnyStore {
    /// The backend the configuration names (`store::backend`).
    backend: Box<dyn backend::Backend>,
    metrics: StoreMetrics,
    /// Completed records kept in memory (`[limits] replay_cache_bytes`).
    cache: Option<Arc<ReplayCache>>,
    /// The background work's state ([`AnyStore::spawn_upkeep`]).
    upkeep: upkeep::Upkeep,
}

impl AnyStore {
    /// A store over a scripted backend, for unit tests of what settles
    /// claims.
    #[cfg(test)]
    pub(crate) fn for_tests(backend: std::sync::Arc<impl Store + std::fmt::Debug>) -> Self {
        Self {
            backend: Box::new(backend::Scripted(backend)),
            metrics: StoreMetrics::new(),
            cache: None,
            upkeep: upkeep::Upkeep::for_tests(),
        }
    }

    /// The Redis store, if that is the backend (for the eviction watcher).
    fn redis(&self) -> Option<&redis::RedisStore> {
        self.backend.redis()
    }

    /// The backend's record operations.
    fn backend(&self) -> &dyn Dispatch {
        &*self.backend
    }

    /// Runs one backend call, recording its latency and any failure.
    async fn metered<T>(&self, op: StoreOp, call: Call<'_, T>) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = call.await;
        self.metrics.record(op, started.elapsed(), result.is_err());
        result
    }

    /// Claims `key` with the in-flight `record` for `ttl`, judged by its
    /// entity and keeping its probe plan (`with`, see [`Store::claim`]); a
    /// [`ClaimOutcome::Claimed`] carries the lease.
    pub async fn claim(
        &self,
        key: &StoreKey,
        record: Record,
        ttl: Duration,
        with: (Option<&EntityStep>, Option<&ProbePlan>),
    ) -> Result<ClaimOutcome, StoreError> {
        let call = self.backend().claim(key, record, ttl, with);
        self.metered(StoreOp::Claim, call).await
    }

    /// Reads an entity and its remaining TTL (admin API).
    pub async fn entity(
        &self,
        key: &EntityKey,
    ) -> Result<Option<(EntityState, Option<Duration>)>, StoreError> {
        let call = self.backend().entity(key);
        self.metered(StoreOp::Lookup, call).await
    }

    /// An operator's `correction` of entity `key` (see
    /// [`Store::correct_entity`]): `false` when it changed since it was
    /// `seen`.
    pub async fn correct_entity(
        &self,
        key: &EntityKey,
        seen: &Seen,
        correction: &Correction,
        by: (&str, Duration),
    ) -> Result<bool, StoreError> {
        let call = self.backend().correct_entity(key, seen, correction, by);
        self.metered(StoreOp::Purge, call).await
    }

    /// Stores `record` for `ttl` over the claim `lease` proves (see
    /// [`Store::complete`]). Borrows the lease: an answer in hand is
    /// stored again and again until it sticks (`pipeline::persist`).
    pub async fn complete(
        &self,
        lease: &Lease,
        record: &Record,
        ttl: Duration,
    ) -> Result<Completion, StoreError> {
        let effect = lease.effect(record);
        let call = self
            .backend()
            .complete(&lease.key, lease.owner(), record, ttl, effect);
        let completion = self.metered(StoreOp::Complete, call).await;
        self.forget(&lease.key);
        completion
    }

    /// Deletes the claim `lease` proves if it still owns its key: one
    /// attempt, for the answer to the sender to wait on. Returns whether it
    /// did. If the store was unreachable, [`AnyStore::release_until_expired`]
    /// carries on after the sender is answered.
    pub async fn release(&self, lease: &Lease) -> Result<bool, StoreError> {
        let call = self
            .backend()
            .release(&lease.key, lease.owner(), Releasing::Owned);
        let released = self.metered(StoreOp::Release, call).await;
        self.forget(&lease.key);
        released
    }

    /// Releases the claim `lease` proves, retrying while the store is
    /// unreachable until it answers or the claim has expired (then nothing
    /// is left to release: `Ok(false)`). A claim left behind would answer
    /// `409` for its lease and `unknown_hold` although nothing was sent on.
    /// `stop` (shutdown's grace is over) ends the retries with the last
    /// error. It runs after the sender's answer, so it deletes only an
    /// in-flight claim ([`Releasing::ClaimOnly`]).
    pub async fn release_until_expired(
        &self,
        lease: &Lease,
        stop: &CancellationToken,
    ) -> Result<bool, StoreError> {
        self.release_owned(&lease.key, lease.owner(), lease.expires(), stop)
            .await
    }

    /// Releases the claim `owner` may hold on `key` although no [`Lease`]
    /// came back: the claim was sent, but its caller stopped waiting for
    /// the reply (the sender hung up, or the reply timed out), so the claim
    /// may have landed with nobody left to settle it. Owner-checked, so a
    /// claim that never landed, or that another request holds, is untouched.
    /// Retries like [`AnyStore::release_until_expired`] until `expires`,
    /// the latest moment the claim can still exist, or `stop`.
    pub async fn release_abandoned(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        expires: Instant,
        stop: &CancellationToken,
    ) -> Result<bool, StoreError> {
        self.release_owned(key, owner, expires, stop).await
    }

    async fn release_owned(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        expires: Instant,
        stop: &CancellationToken,
    ) -> Result<bool, StoreError> {
        let released = release::until_answered(key, expires, stop, || {
            let call = self.backend().release(key, owner, Releasing::ClaimOnly);
            self.metered(StoreOp::Release, call)
        })
        .await;
        self.forget(key);
        released
    }

    /// Resets the TTL of the in-flight claim `lease` proves. Returns
    /// whether it did.
    pub async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool, StoreError> {
        let call = self.backend().renew(&lease.key, lease.owner(), ttl);
        let renewed = self.metered(StoreOp::Renew, call).await;
        if let Ok(true) = renewed {
            lease.renewed(ttl);
        }
        renewed
    }

    /// Reads a record and its remaining TTL.
    pub async fn lookup(&self, key: &StoreKey) -> Result<Option<Existing>, StoreError> {
        let call = self.backend().lookup(key);
        self.metered(StoreOp::Lookup, call).await
    }

    /// Deletes a record whoever owns it, if it is still the one `seen`
    /// (see [`Store::purge`]).
    pub async fn purge(
        &self,
        key: &StoreKey,
        seen: Option<SeenRecord>,
    ) -> Result<Purged, StoreError> {
        let call = self.backend().purge(key, seen);
        let purged = self.metered(StoreOp::Purge, call).await;
        self.forget(key);
        purged
    }

    /// Checks that the store answers. Not metered: the `op` label set
    /// covers the request path's operations only.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.backend().ping().await
    }
}

#[cfg(test)]
mod tests;
