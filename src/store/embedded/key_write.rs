//! One record key in the embedded store's tables: a stored value is the
//! record behind an 8-byte expiry, and every write keeps the `expiries`
//! index in step with `records`. Kept apart so the store's operations
//! (`embedded.rs`), the listing and the owed-set repair read entries one
//! way.

use std::time::Duration;

use bytes::Bytes;
use redb::{ReadableTable, Table};

use super::{backend, owed};
use crate::record::Record;
use crate::store::{StoreError, StoreKey};

/// A live stored entry: expiry and decoded record.
pub(super) struct Entry {
    pub(super) expires_at_ms: u64,
    pub(super) record: Record,
}

pub(super) type Records<'t> = Table<'t, &'static str, &'static [u8]>;
pub(super) type Expiries<'t> = Table<'t, (u64, &'static str), ()>;

/// The expiry prefix of a stored value, if it has one.
pub(super) fn expiry_of(raw: &[u8]) -> Option<u64> {
    raw.get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_be_bytes)
}

pub(super) fn read_entry(
    records: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
    now: u64,
) -> Result<Option<Entry>, StoreError> {
    let Some(guard) = records.get(key).map_err(backend)? else {
        return Ok(None);
    };
    let raw = guard.value();
    let Some(expires_at_ms) = expiry_of(raw) else {
        return Err(StoreError::Backend("embedded entry truncated".into()));
    };
    if expires_at_ms <= now {
        return Ok(None);
    }
    let record = Record::decode(&Bytes::copy_from_slice(&raw[8..]))?;
    Ok(Some(Entry {
        expires_at_ms,
        record,
    }))
}

/// One record key inside a write transaction: the record tables, the
/// transaction (for the owed set that changes with an inbox record) and
/// the time it started. Every record operation reads and writes one key,
/// so the key travels with the tables, and every write keeps `expiries`
/// in step with `records`.
pub(super) struct KeyWrite<'s, 't> {
    pub(super) txn: &'s redb::WriteTransaction,
    pub(super) records: &'s mut Records<'t>,
    pub(super) expiries: &'s mut Expiries<'t>,
    pub(super) key: &'s StoreKey,
    pub(super) now: u64,
}

impl KeyWrite<'_, '_> {
    /// The live entry under the key, if any.
    pub(super) fn live(&self) -> Result<Option<Entry>, StoreError> {
        read_entry(&*self.records, self.key.as_str(), self.now)
    }

    /// The record bytes stored under the key, live or not yet swept.
    pub(super) fn stored_record(&self) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .records
            .get(self.key.as_str())
            .map_err(backend)?
            .and_then(|guard| guard.value().get(8..).map(<[u8]>::to_vec)))
    }

    /// Stores `record` expiring `ttl` from now, unindexing the expiry of
    /// whatever it overwrites (live or not yet swept).
    pub(super) fn put(&mut self, ttl: Duration, record: &[u8]) -> Result<(), StoreError> {
        let key = self.key.as_str();
        let expires_at_ms = deadline(self.now, ttl);
        let mut value = Vec::with_capacity(8 + record.len());
        value.extend_from_slice(&expires_at_ms.to_be_bytes());
        value.extend_from_slice(record);
        let previous = self
            .records
            .insert(key, value.as_slice())
            .map_err(backend)?
            .and_then(|old| expiry_of(old.value()));
        if let Some(old) = previous {
            self.expiries.remove((old, key)).map_err(backend)?;
        }
        self.expiries
            .insert((expires_at_ms, key), ())
            .map_err(backend)?;
        Ok(())
    }

    /// Deletes whatever is stored under the key; returns whether anything was.
    pub(super) fn delete(&mut self) -> Result<bool, StoreError> {
        let key = self.key.as_str();
        let Some(guard) = self.records.remove(key).map_err(backend)? else {
            return Ok(false);
        };
        if let Some(expiry) = expiry_of(guard.value()) {
            drop(guard);
            self.expiries.remove((expiry, key)).map_err(backend)?;
        }
        Ok(true)
    }

    /// Puts the key into its scope's owed set (`owed`) or takes it out.
    pub(super) fn mark_owed(&self, owed: bool) -> Result<(), StoreError> {
        owed::mark(self.txn, self.key, owed)
    }
}

/// When a value written at `now` for `ttl` expires, in milliseconds.
pub(super) fn deadline(now: u64, ttl: Duration) -> u64 {
    now.saturating_add(crate::time::millis(ttl))
}
