//! Entity state in the embedded store (`crate::store::entity`): one table
//! `entities` of `expires_at_ms (u64 BE) ++ JSON of EntityState`, and
//! `entity_expiries` indexing `(expires_at_ms, key)` for the sweeper.
//! Every change happens inside the write transaction that writes the
//! record it belongs to (the claim, a completion, an inbox swap), so an
//! entity and its records are committed together or not at all: the same
//! atomic step `claim_entity.lua` and `complete.lua` take on Redis.

use std::time::Duration;

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use super::backend;
use super::key_write::{KeyWrite, deadline, expiry_of, read_entry};
use crate::record::RecordState;
use crate::store::entity::{
    Blocker, Correction, EntityEffect, EntityState, EntityStep, EntityVerdict, HoldVerdict,
    KeptBack, PendingRecord, Seen,
};
use crate::store::{EntityKey, StoreError};

/// Entity key → expiry and state.
pub(super) const ENTITIES: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("entities");
/// `(expires_at_ms, entity key)`, for the sweeper.
pub(super) const ENTITY_EXPIRIES: TableDefinition<'static, (u64, &str), ()> =
    TableDefinition::new("entity_expiries");

/// A live entity: its state and expiry.
pub(super) fn decode(raw: &[u8], now: u64) -> Result<Option<(EntityState, u64)>, StoreError> {
    let Some(expires_at_ms) = expiry_of(raw) else {
        return Err(StoreError::Backend("embedded entity truncated".into()));
    };
    if expires_at_ms <= now {
        return Ok(None);
    }
    let state = serde_json::from_slice(&raw[8..])
        .map_err(|e| StoreError::Backend(format!("embedded entity unreadable: {e}")))?;
    Ok(Some((state, expires_at_ms)))
}

fn read(
    txn: &WriteTransaction,
    key: &str,
    now: u64,
) -> Result<Option<(EntityState, u64)>, StoreError> {
    let table = txn.open_table(ENTITIES).map_err(backend)?;
    let raw = table.get(key).map_err(backend)?;
    match raw {
        Some(raw) => decode(raw.value(), now),
        None => Ok(None),
    }
}

/// Writes `state` under `key`, expiring at `expires_at_ms`. An entity
/// with nothing left in it (no state, no pending change, no history: a
/// first change that was dropped) is deleted instead, as Redis deletes a
/// hash whose last field goes, so both stores show the same entities.
fn write(
    txn: &WriteTransaction,
    key: &str,
    state: &EntityState,
    expires_at_ms: u64,
) -> Result<(), StoreError> {
    let mut table = txn.open_table(ENTITIES).map_err(backend)?;
    let previous = if *state == EntityState::default() {
        table.remove(key).map_err(backend)?
    } else {
        let mut value = expires_at_ms.to_be_bytes().to_vec();
        serde_json::to_writer(&mut value, state).map_err(backend)?;
        table.insert(key, value.as_slice()).map_err(backend)?
    }
    .and_then(|old| expiry_of(old.value()));
    drop(table);
    let mut expiries = txn.open_table(ENTITY_EXPIRIES).map_err(backend)?;
    if let Some(old) = previous {
        expiries.remove((old, key)).map_err(backend)?;
    }
    if *state != EntityState::default() {
        expiries.insert((expires_at_ms, key), ()).map_err(backend)?;
    }
    Ok(())
}

/// What the entity's pending change's record says, read in `target`'s
/// transaction (the same look `claim_entity.lua` takes).
fn pending_of(target: &KeyWrite<'_, '_>, state: &EntityState) -> Result<PendingRecord, StoreError> {
    let Some(pending) = &state.pending else {
        return Ok(PendingRecord::Absent);
    };
    let Some(entry) = read_entry(&*target.records, &pending.record, target.now)? else {
        return Ok(PendingRecord::Absent);
    };
    let remaining = Duration::from_millis(entry.expires_at_ms - target.now);
    Ok(match entry.record.state {
        RecordState::Completed(_) | RecordState::Acknowledged(_) => PendingRecord::Completed,
        RecordState::InFlight(hold) => PendingRecord::Open(Blocker::InFlight { remaining, hold }),
        RecordState::Unknown => PendingRecord::Open(Blocker::Unknown { remaining }),
        RecordState::Inbox(_) => PendingRecord::Open(Blocker::Inbox),
    })
}

/// The entity `key` names as `target`'s transaction reads it (a default one
/// when none is kept).
fn current(target: &KeyWrite<'_, '_>, key: &str) -> Result<EntityState, StoreError> {
    Ok(read(target.txn, key, target.now)?
        .map(|(state, _)| state)
        .unwrap_or_default())
}

/// Judges the claim of `target`'s (free) key under `step`, writing the
/// entity either way. `Ok(())`: the caller writes the claim.
pub(super) fn claim(
    target: &KeyWrite<'_, '_>,
    step: &EntityStep,
) -> Result<Result<(), EntityVerdict>, StoreError> {
    let key = step.key.as_str();
    let mut state = current(target, key)?;
    let pending = pending_of(target, &state)?;
    let verdict = state.claim(step, target.key.as_str(), pending, target.now);
    if !matches!(verdict, Err(EntityVerdict::Busy { .. })) {
        write(
            target.txn,
            key,
            &state,
            deadline(target.now, step.retention),
        )?;
    }
    Ok(verdict)
}

/// Holds `target`'s (free) key behind its busy entity (`hold.lua`):
/// `Held` when the caller is to write the record, owed.
pub(super) fn hold(
    target: &KeyWrite<'_, '_>,
    step: &EntityStep,
    max: usize,
) -> Result<HoldVerdict, StoreError> {
    let key = step.key.as_str();
    let mut state = current(target, key)?;
    let pending = pending_of(target, &state)?;
    let verdict = state.hold(step, target.key.as_str(), pending, max, target.now);
    if verdict == HoldVerdict::Held {
        write(
            target.txn,
            key,
            &state,
            deadline(target.now, step.retention),
        )?;
    }
    Ok(verdict)
}

/// Whether a worker may send `target`'s queued delivery now
/// ([`EntityState::take`]); the entity keeps its expiry.
pub(super) fn take(target: &KeyWrite<'_, '_>) -> Result<Result<(), KeptBack>, StoreError> {
    let Some(entity) = target.key.entity() else {
        return Ok(Ok(()));
    };
    let Some((mut state, expires_at_ms)) = read(target.txn, entity.as_str(), target.now)? else {
        return Ok(Ok(()));
    };
    let before = state.clone();
    let taking = state.take(target.key.as_str(), target.now);
    if state != before {
        write(target.txn, entity.as_str(), &state, expires_at_ms)?;
    }
    Ok(taking)
}

/// Settles `target`'s entity (if its key has one) after a write of a record
/// with `effect`; the entity keeps its expiry. Returns whether the entity
/// changed (the transaction must then commit).
pub(super) fn settle(target: &KeyWrite<'_, '_>, effect: EntityEffect) -> Result<bool, StoreError> {
    let Some(entity) = target.key.entity() else {
        return Ok(false);
    };
    let Some((mut state, expires_at_ms)) = read(target.txn, entity.as_str(), target.now)? else {
        return Ok(false);
    };
    let before = state.clone();
    state.settle(target.key.as_str(), effect, target.now);
    if state == before {
        return Ok(false);
    }
    write(target.txn, entity.as_str(), &state, expires_at_ms)?;
    Ok(true)
}

/// An operator's correction of entity `key` (`entity_set.lua`), if it is
/// still as seen; kept `retention` from `now`.
pub(super) fn correct(
    txn: &WriteTransaction,
    key: &EntityKey,
    now: u64,
    (seen, correction, by): (&Seen, &Correction, &str),
    retention: Duration,
) -> Result<bool, StoreError> {
    let mut state = read(txn, key.as_str(), now)?
        .map(|(state, _)| state)
        .unwrap_or_default();
    if !state.correct(seen, correction, by, now) {
        return Ok(false);
    }
    write(txn, key.as_str(), &state, deadline(now, retention))?;
    Ok(true)
}

/// Reads entity `key` in a read transaction's table.
pub(super) fn lookup(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &EntityKey,
    now: u64,
) -> Result<Option<(EntityState, Option<Duration>)>, StoreError> {
    let Some(raw) = table.get(key.as_str()).map_err(backend)? else {
        return Ok(None);
    };
    Ok(decode(raw.value(), now)?
        .map(|(state, expires)| (state, Some(Duration::from_millis(expires - now)))))
}

/// Deletes up to `batch` expired entities; returns how many.
pub(super) fn sweep(txn: &WriteTransaction, now: u64, batch: usize) -> Result<usize, StoreError> {
    let mut expiries = txn.open_table(ENTITY_EXPIRIES).map_err(backend)?;
    let mut expired: Vec<(u64, String)> = Vec::new();
    for item in expiries.range(..(now, "")).map_err(backend)? {
        let (entry, _) = item.map_err(backend)?;
        let (at, key) = entry.value();
        expired.push((at, key.to_owned()));
        if expired.len() >= batch {
            break;
        }
    }
    let mut entities = txn.open_table(ENTITIES).map_err(backend)?;
    for (at, key) in &expired {
        expiries.remove((*at, key.as_str())).map_err(backend)?;
        let stale = entities
            .get(key.as_str())
            .map_err(backend)?
            .is_some_and(|g| expiry_of(g.value()) == Some(*at));
        if stale {
            entities.remove(key.as_str()).map_err(backend)?;
        }
    }
    Ok(expired.len())
}
