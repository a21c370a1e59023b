//! A store key and the proof of a claim on one: the two values every store
//! operation and every settlement pass around, kept apart from the store
//! itself so their invariants (a key's three parts, a lease only a claim
//! builds) sit in one small file.

use std::time::Duration;

use tokio::time::Instant;

use crate::record::{OwnerToken, Record};

/// A fully qualified store key: `{prefix}:{route}:{sha256 hex}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreKey(pub(in crate::store) String);

impl StoreKey {
    /// Builds the key of contract §5 from its three parts.
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

    /// `{prefix}:{route}`, the key space the key belongs to: what the
    /// scope's other keys (inbox indexes, owed sets) are named under.
    pub fn namespace(&self) -> &str {
        self.0
            .rsplit_once(':')
            .map_or("", |(namespace, _)| namespace)
    }
}

/// Proof of a successful claim; settle it with [`AnyStore::complete`] or
/// [`AnyStore::release`]. Only a backend's `claim` builds one and it is
/// neither `Clone` nor `Copy`, so every settled claim was really made.
#[derive(Debug)]
pub struct Lease {
    pub(in crate::store) key: StoreKey,
    record: Record,
    /// When the claim is gone from the store at the latest: its TTL from
    /// the moment its last write (claim or renewal) was answered, so never
    /// before the store's own expiry. A release retries until then.
    expires: std::sync::Mutex<Instant>,
}

impl Lease {
    /// The lease of a claim written for `ttl` that the store just
    /// acknowledged (only backends' `claim` call this).
    pub(in crate::store) fn claimed(key: StoreKey, record: Record, ttl: Duration) -> Self {
        Self {
            key,
            record,
            expires: std::sync::Mutex::new(Instant::now() + ttl),
        }
    }

    /// The latest moment the claim can still be in the store.
    pub(crate) fn expires(&self) -> Instant {
        *self
            .expires
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A renewal for `ttl` was just acknowledged: the claim lives on.
    pub(in crate::store) fn renewed(&self, ttl: Duration) {
        *self
            .expires
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now() + ttl;
    }

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
    /// A lease without a claim, for unit tests of what settles leases.
    pub(crate) fn for_tests(key: StoreKey, record: Record) -> Self {
        Self::claimed(key, record, Duration::from_secs(60))
    }
}
