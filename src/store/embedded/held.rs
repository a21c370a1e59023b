//! Held notices in the embedded store (`store::entity::held`): a worker's
//! gated claim of a queued delivery, and holding a notice behind its busy
//! entity, each one write transaction with the record (the steps
//! `swap.lua` with `take` and `hold.lua` take on Redis).

use std::time::Duration;

use super::{EmbeddedStore, entities};
use crate::record::OwnerToken;
use crate::record::inbox_entry::UNRESOLVED_KEPT;
use crate::store::entity::{EntityStep, HoldVerdict, KeptBack};
use crate::store::{StoreError, StoreKey};

impl EmbeddedStore {
    /// [`EmbeddedStore::swap`] of a worker claiming a queued delivery to
    /// send it (`store::inbox::AnyStore::take`): with the owner as
    /// expected, the entity decides first, and the record is written only
    /// if it may go.
    pub(crate) async fn take(
        &self,
        key: &StoreKey,
        expected: OwnerToken,
        record: Vec<u8>,
        ttl: Duration,
    ) -> Result<Result<bool, KeptBack>, StoreError> {
        self.write_key(key, move |target| {
            let Some(entry) = target.live()? else {
                return Ok((Ok(false), false));
            };
            if entry.record.owner != expected {
                let landed = target.stored_record()?.as_deref() == Some(record.as_slice());
                return Ok((Ok(landed), false));
            }
            match entities::take(target)? {
                Ok(()) => {}
                Err(KeptBack::Wait) => return Ok((Err(KeptBack::Wait), false)),
                // A judged head left the queue: the entity changed, the
                // record stays as it was.
                Err(decided) => return Ok((Err(decided), true)),
            }
            target.put(ttl, &record)?;
            Ok((Ok(true), true))
        })
        .await
    }

    /// Holds the notice `record` under the free `key` behind its busy
    /// entity (`hold.lua`), kept until resolved, in its scope's owed set.
    pub(crate) async fn hold(
        &self,
        key: &StoreKey,
        record: Vec<u8>,
        step: EntityStep,
        max: usize,
    ) -> Result<HoldVerdict, StoreError> {
        self.write_key(key, move |target| {
            if target.live()?.is_some() {
                return Ok((HoldVerdict::Exists, false));
            }
            let verdict = entities::hold(target, &step, max)?;
            if verdict == HoldVerdict::Held {
                target.put(UNRESOLVED_KEPT, &record)?;
                target.mark_owed(true)?;
            }
            Ok((verdict, verdict == HoldVerdict::Held))
        })
        .await
    }
}
