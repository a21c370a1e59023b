//! A store key and the proof of a claim on one: the two values every store
//! operation and every settlement pass around, kept apart from the store
//! itself so their invariants (a key's three parts, a lease only a claim
//! builds) sit in one small file.

use std::time::Duration;

use tokio::time::Instant;

use super::entity::EntityEffect;
use crate::config::CacheStatus;
use crate::record::{OwnerToken, Record};

/// Hex digits of an entity hash: 128 bits of the SHA-256 of its id.
pub const ENTITY_HASH_LEN: usize = 32;

/// A fully qualified store key: `{prefix}:{route}:{sha256 hex}`, or, for
/// a route with `[route.entity]`, `{prefix}:{route}:{sha256 hex}{entity}`
/// (`{entity}` a Redis hash tag: every record of one entity sits in the
/// entity's Cluster slot, so a script can judge and claim in one step).
///
/// The second field says whether the key's route has `[route.probe]`:
/// then every write that settles the record settles its probe plan in the
/// same step (`store::probe`). A key built without it (an operator's
/// lookup) leaves a plan behind, which the probe runner drops once it
/// finds the record settled or gone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreKey(pub(in crate::store) String, pub(in crate::store) bool);

impl StoreKey {
    /// Builds the key of contract §5 from its three parts; `key_hash_hex`
    /// may carry an entity tag ([`is_record_hash`]).
    pub fn new(prefix: &str, route: &str, key_hash_hex: &str) -> Self {
        Self(format!("{prefix}:{route}:{key_hash_hex}"), false)
    }

    /// The key of a delivery about entity `entity_hex`
    /// ([`ENTITY_HASH_LEN`] hex digits).
    pub fn for_entity(prefix: &str, route: &str, key_hash_hex: &str, entity_hex: &str) -> Self {
        Self(
            format!("{prefix}:{route}:{key_hash_hex}{{{entity_hex}}}"),
            false,
        )
    }

    /// The same key of a route with `[route.probe]`: its writes keep the
    /// probe plan in step (type docs).
    #[must_use]
    pub fn probed(self) -> Self {
        Self(self.0, true)
    }

    /// Whether the key's route has `[route.probe]`.
    pub fn has_probe(&self) -> bool {
        self.1
    }

    /// The entity this key's delivery is about, if its route has one.
    pub fn entity(&self) -> Option<EntityKey> {
        let (namespace, hash) = self.0.rsplit_once(':')?;
        let tag = hash.get(64..).filter(|tag| !tag.is_empty())?;
        Some(EntityKey(format!("{namespace}:entity:{tag}")))
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

/// Whether `text` is a record key's last part: 64 hex digits, with an
/// entity's hash tag (`{` 32 hex digits `}`) after them on entity routes.
pub fn is_record_hash(text: &str) -> bool {
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    match (text.get(..64), text.get(64..)) {
        (Some(hash), Some("")) => hex(hash),
        (Some(hash), Some(tag)) => {
            hex(hash)
                && tag.len() == ENTITY_HASH_LEN + 2
                && tag.starts_with('{')
                && tag.ends_with('}')
                && hex(&tag[1..=ENTITY_HASH_LEN])
        }
        _ => false,
    }
}

/// Where one entity's state is kept: `{prefix}:{scope}:entity:{hash}`,
/// the braces a Redis hash tag shared with every record of the entity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EntityKey(pub(in crate::store) String);

impl EntityKey {
    /// The key of entity `entity_hex` in scope `scope`.
    pub fn new(prefix: &str, scope: &str, entity_hex: &str) -> Self {
        Self(format!("{prefix}:{scope}:entity:{{{entity_hex}}}"))
    }

    /// The key as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The entity hash alone (what logs print and the admin API takes).
    pub fn hash(&self) -> &str {
        self.0
            .rsplit_once('{')
            .map_or("", |(_, tag)| tag.trim_end_matches('}'))
    }
}

/// Proof of a successful claim; settle it with [`AnyStore::complete`] or
/// [`AnyStore::release`]. Only a backend's `claim` builds one and it is
/// neither `Clone` nor `Copy`, so every settled claim was really made.
#[derive(Debug)]
pub struct Lease {
    pub(in crate::store) key: StoreKey,
    record: Record,
    /// On an entity route, the answers that apply its change
    /// (`advance_status`), so the completion settles the entity as the
    /// route says wherever the lease is settled.
    advance: Option<CacheStatus>,
    /// When the claim is gone from the store at the latest: its TTL from
    /// the moment its last write (claim or renewal) was answered, so never
    /// before the store's own expiry. A release retries until then.
    expires: std::sync::Mutex<Instant>,
}

impl Lease {
    /// The lease of a claim written for `ttl` that the store just
    /// acknowledged (only backends' `claim` call this).
    pub(in crate::store) fn claimed(
        key: StoreKey,
        record: Record,
        ttl: Duration,
        advance: Option<CacheStatus>,
    ) -> Self {
        Self {
            key,
            record,
            advance,
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

    /// What writing `record` over this claim means for its entity's
    /// pending change ([`EntityEffect::Keep`] off entity routes).
    pub fn effect(&self, record: &Record) -> EntityEffect {
        EntityEffect::of_route(record, self.advance.as_ref())
    }
}

#[cfg(test)]
impl Lease {
    /// A lease without a claim, for unit tests of what settles leases.
    pub(crate) fn for_tests(key: StoreKey, record: Record) -> Self {
        Self::claimed(key, record, Duration::from_secs(60), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entity_record_names_its_entity_and_shares_its_slot() {
        let (hash, entity) = ("ab".repeat(32), "cd".repeat(16));
        let key = StoreKey::for_entity("idemgate", "pay", &hash, &entity);
        assert!(is_record_hash(key.hash()));
        let of = key.entity().unwrap();
        assert_eq!(of, EntityKey::new("idemgate", "pay", &entity));
        assert_eq!(of.hash(), entity);
        assert_eq!(
            crate::store::redis::slots::slot_of(key.as_str()),
            crate::store::redis::slots::slot_of(of.as_str())
        );
        assert!(StoreKey::new("idemgate", "pay", &hash).entity().is_none());
        assert!(is_record_hash(&hash));
        for bad in [
            &hash[..63],
            &format!("{hash}{{{}}}", &entity[1..]),
            &format!("{hash}x"),
        ] {
            assert!(!is_record_hash(bad), "{bad}");
        }
    }
}
