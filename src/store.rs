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
//! A successful claim is the only way to obtain a [`Lease`]. `complete` and
//! `release` borrow it, because an answer in hand is stored again and again
//! until it sticks (`pipeline::persist`); the pipeline's settle consumes
//! the lease when it is done with it.
//! Interpreting an existing record (SPEC §4 rule 4: an in-flight record
//! whose remaining TTL is at most `unknown_hold` has lost its owner) is done
//! once, here, in [`Existing::observe`], for both backends.
//!
//! [`eviction`] watches the other way a record can vanish: a Redis whose
//! `maxmemory-policy` lets it evict keys (SPEC §4 rule 10).

pub mod embedded;
pub mod eviction;
pub mod redis;

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{StoreBackend, StoreConfig};
use crate::metrics as m;
use crate::record::{DecodeError, OwnerToken, Record, RecordState, StoredResponse};

/// A fully qualified store key: `{prefix}:{route}:{sha256 hex}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreKey(String);

impl StoreKey {
    /// Builds the key of SPEC §5 from its three parts.
    pub fn new(prefix: &str, route: &str, key_hash_hex: &str) -> Self {
        Self(format!("{prefix}:{route}:{key_hash_hex}"))
    }

    /// The key as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The hex key hash alone: the one form logs print and the admin API
    /// takes (`?hash=`), so an operator can copy it from a log line.
    pub fn hash(&self) -> &str {
        self.0.rsplit_once(':').map_or(&self.0, |(_, hash)| hash)
    }
}

/// Proof of a successful claim; settle it with `complete` or `release`.
#[derive(Debug)]
pub struct Lease {
    key: StoreKey,
    record: Record,
}

impl Lease {
    /// The claimed key.
    pub fn key(&self) -> &StoreKey {
        &self.key
    }

    /// The in-flight record written by the claim.
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// The owner token written by the claim.
    pub fn owner(&self) -> OwnerToken {
        self.record.owner
    }
}

#[cfg(test)]
impl Lease {
    /// A lease without a claim, for unit tests of what consumes leases.
    pub(crate) fn for_tests(key: StoreKey, record: Record) -> Self {
        Self { key, record }
    }
}

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
    /// A live owner is still working on it.
    InFlight,
    /// The backend may have acted; blocked for `remaining`.
    Unknown {
        /// Time until the record expires.
        remaining: Duration,
    },
}

impl Existing {
    /// Classifies the record. An in-flight claim is written with
    /// `TTL = lease + unknown_hold` and renewed while its owner lives, so a
    /// remaining TTL of at most `unknown_hold` means the owner stopped
    /// renewing: the outcome is unknown (SPEC §4 rule 4).
    pub fn observe(&self, unknown_hold: Duration) -> Observed<'_> {
        let remaining = self.ttl.unwrap_or(unknown_hold);
        match &self.record.state {
            RecordState::Completed(response) => Observed::Completed(response),
            RecordState::Unknown => Observed::Unknown { remaining },
            RecordState::InFlight if remaining <= unknown_hold => Observed::Unknown { remaining },
            RecordState::InFlight => Observed::InFlight,
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
}

/// What `complete` did with an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// Stored over this instance's own claim: the usual case.
    Stored,
    /// Stored into a free key: the claim had expired (or was lost with a
    /// restarted, evicted or purged store) while the answer was in hand.
    /// The upstream did act, so its outcome must hold the key (SPEC §4
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
/// [`redis::RedisStore`] and [`embedded::EmbeddedStore`].
pub trait Store: Send + Sync + 'static {
    /// Claims `key` with the in-flight `record` for `ttl`
    /// (`lease + unknown_hold`), or returns the record already there.
    fn claim(
        &self,
        key: &StoreKey,
        record: Record,
        ttl: Duration,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send;

    /// Replaces the claimed record with `record` for `ttl` if `lease` still
    /// owns the key, or writes it if the key is free (see [`Completion`]).
    /// Borrows the lease: an answer in hand is stored again and again
    /// until it sticks (`pipeline::persist`).
    fn complete(
        &self,
        lease: &Lease,
        record: &Record,
        ttl: Duration,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send;

    /// Deletes the key if `lease` still owns it. Returns whether it did.
    fn release(&self, lease: &Lease) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Resets the TTL of an owned in-flight record. Returns whether it did.
    fn renew(
        &self,
        lease: &Lease,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Reads a record and its remaining TTL.
    fn lookup(
        &self,
        key: &StoreKey,
    ) -> impl Future<Output = Result<Option<Existing>, StoreError>> + Send;

    /// Deletes a record whoever owns it. Returns whether one existed.
    fn purge(&self, key: &StoreKey) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Checks that the store answers.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The configured backend, metered: every call records
/// `idemgate_store_duration_seconds{op}` and, on failure,
/// `idemgate_store_errors_total{op}`.
#[derive(Debug)]
pub struct AnyStore {
    backend: Backend,
    metrics: m::StoreMetrics,
}

/// The two implementations.
#[derive(Debug)]
enum Backend {
    Redis(Box<redis::RedisStore>),
    Embedded(embedded::EmbeddedStore),
}

macro_rules! dispatch {
    ($self:ident, $op:expr, $store:ident => $call:expr) => {{
        let started = Instant::now();
        let result = match &$self.backend {
            Backend::Redis($store) => $call.await,
            Backend::Embedded($store) => $call.await,
        };
        $self
            .metrics
            .record($op, started.elapsed(), result.is_err());
        result
    }};
}

/// Attempts at a release while the store is unreachable, and the first
/// pause between them (doubling): about 3 s in all. A release that never
/// lands is safe: the claim turns unknown and blocks its key instead.
const RELEASE_ATTEMPTS: u32 = 5;
const RELEASE_FIRST_PAUSE: Duration = Duration::from_millis(100);

impl AnyStore {
    /// Releases the claim `owner` may hold on `key` although no [`Lease`]
    /// came back: the claim was sent, but its caller stopped waiting for
    /// the reply (the sender hung up, or the reply timed out), so the claim
    /// may have landed with nobody left to settle it. Owner-checked, so a
    /// claim that never landed, or that another request holds, is untouched.
    pub async fn release_abandoned(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
    ) -> Result<bool, StoreError> {
        let lease = Lease {
            key: key.clone(),
            record: Record {
                owner,
                fingerprint: crate::record::Fingerprint([0; 32]),
                created_at_ms: 0,
                state: RecordState::InFlight,
            },
        };
        self.release(&lease).await
    }

    /// Connects the backend `config` names.
    pub async fn connect(config: &StoreConfig) -> Result<Self, StoreError> {
        let backend = match &config.backend {
            StoreBackend::Redis { url } => Backend::Redis(Box::new(
                redis::RedisStore::connect(
                    url,
                    config.command_timeout,
                    config.replica_ack,
                    config.connections,
                )
                .await?,
            )),
            StoreBackend::Embedded { path } => {
                Backend::Embedded(embedded::EmbeddedStore::open(path)?)
            }
        };
        Ok(Self {
            backend,
            metrics: m::StoreMetrics::new(),
        })
    }

    /// The Redis store, if that is the backend (for the eviction watcher).
    pub fn redis(&self) -> Option<&redis::RedisStore> {
        match &self.backend {
            Backend::Redis(store) => Some(store),
            Backend::Embedded(_) => None,
        }
    }

    /// The embedded store, if that is the backend (for its sweeper).
    pub fn embedded(&self) -> Option<&embedded::EmbeddedStore> {
        match &self.backend {
            Backend::Embedded(store) => Some(store),
            Backend::Redis(_) => None,
        }
    }
}

impl Store for AnyStore {
    async fn claim(
        &self,
        key: &StoreKey,
        record: Record,
        ttl: Duration,
    ) -> Result<ClaimOutcome, StoreError> {
        dispatch!(self, m::StoreOp::Claim, s => s.claim(key, record, ttl))
    }

    async fn complete(
        &self,
        lease: &Lease,
        record: &Record,
        ttl: Duration,
    ) -> Result<Completion, StoreError> {
        dispatch!(self, m::StoreOp::Complete, s => s.complete(lease, record, ttl))
    }

    async fn release(&self, lease: &Lease) -> Result<bool, StoreError> {
        let mut pause = RELEASE_FIRST_PAUSE;
        for remaining in (0..RELEASE_ATTEMPTS).rev() {
            let result = dispatch!(self, m::StoreOp::Release, s => s.release(lease));
            match result {
                Err(StoreError::Unavailable(error)) if remaining > 0 => {
                    tracing::warn!(key = lease.key.hash(), %error, "store unreachable while releasing; retrying");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                other => return other,
            }
        }
        unreachable!("the last attempt returns")
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool, StoreError> {
        dispatch!(self, m::StoreOp::Renew, s => s.renew(lease, ttl))
    }

    async fn lookup(&self, key: &StoreKey) -> Result<Option<Existing>, StoreError> {
        dispatch!(self, m::StoreOp::Lookup, s => s.lookup(key))
    }

    async fn purge(&self, key: &StoreKey) -> Result<bool, StoreError> {
        dispatch!(self, m::StoreOp::Purge, s => s.purge(key))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Redis(s) => s.ping().await,
            Backend::Embedded(s) => s.ping().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Fingerprint, OwnerToken};

    fn existing(state: RecordState, ttl_ms: u64) -> Existing {
        Existing {
            record: Record {
                owner: OwnerToken([1; 16]),
                fingerprint: Fingerprint([2; 32]),
                created_at_ms: 0,
                state,
            },
            ttl: Some(Duration::from_millis(ttl_ms)),
        }
    }

    #[test]
    fn in_flight_past_its_lease_is_unknown() {
        let hold = Duration::from_secs(60);
        assert_eq!(
            existing(RecordState::InFlight, 60_001).observe(hold),
            Observed::InFlight
        );
        assert_eq!(
            existing(RecordState::InFlight, 60_000).observe(hold),
            Observed::Unknown {
                remaining: Duration::from_secs(60)
            }
        );
        assert_eq!(
            existing(RecordState::Unknown, 10).observe(hold),
            Observed::Unknown {
                remaining: Duration::from_millis(10)
            }
        );
    }
}
