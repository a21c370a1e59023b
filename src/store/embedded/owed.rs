//! The inbox's owed sets in the embedded store (`crate::store::inbox`,
//! "Owed sets"): one table, `(owed set, key hash)`, changed inside the
//! very write transaction that writes the record (`complete`, `swap`), so
//! a record and its entry are committed together or not at all.

use redb::{TableDefinition, WriteTransaction};

use super::{EmbeddedStore, RECORDS, backend, read_entry};
use crate::record::{OwnerToken, now_ms};
use crate::store::inbox::OwedKey;
use crate::store::{StoreError, StoreKey};

/// `(owed set, key hash)`: membership only.
pub(super) const OWED: TableDefinition<'static, (&str, &str), ()> =
    TableDefinition::new("inbox_owed");

/// Puts `key` into its scope's owed set (`owed`) or takes it out, inside
/// the caller's transaction.
pub(super) fn mark(txn: &WriteTransaction, key: &StoreKey, owed: bool) -> Result<(), StoreError> {
    let mut table = txn.open_table(OWED).map_err(backend)?;
    let set = OwedKey::of(key);
    let entry = (set.as_str(), key.hash());
    if owed {
        table.insert(entry, ()).map_err(backend)?;
    } else {
        table.remove(entry).map_err(backend)?;
    }
    Ok(())
}

impl EmbeddedStore {
    /// Every key hash in the owed set `set`.
    pub(crate) async fn owed(&self, set: &str) -> Result<Vec<String>, StoreError> {
        let set = set.to_owned();
        self.read(OWED, move |table| {
            let mut members = Vec::new();
            for item in table.range((set.as_str(), "")..).map_err(backend)? {
                let (entry, _) = item.map_err(backend)?;
                let (owner, member) = entry.value();
                if owner != set {
                    break;
                }
                members.push(member.to_owned());
            }
            Ok(members)
        })
        .await
    }

    /// Takes `key` out of its owed set if its record is absent or still
    /// has the owner `read` (see `AnyStore::owed_prune`).
    pub(crate) async fn owed_prune(
        &self,
        key: &StoreKey,
        read: Option<OwnerToken>,
    ) -> Result<bool, StoreError> {
        let key = key.clone();
        self.transact(move |txn| {
            let records = txn.open_table(RECORDS).map_err(backend)?;
            let current = read_entry(&records, key.as_str(), now_ms())?;
            drop(records);
            if current.is_some_and(|entry| Some(entry.record.owner) != read) {
                return Ok((false, false));
            }
            let mut table = txn.open_table(OWED).map_err(backend)?;
            let removed = table
                .remove((OwedKey::of(&key).as_str(), key.hash()))
                .map_err(backend)?
                .is_some();
            Ok((removed, removed))
        })
        .await
    }
}
