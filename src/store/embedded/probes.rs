//! The embedded side of `store::probe`: two tables of the same file,
//! `probe_plans` (record key → due time, 8 bytes big-endian, then the
//! plan's text) and `probe_due` (`(due time, record key)`, so due plans
//! are read in order), written inside the record's own transaction, so a
//! record and its plan are committed together or not at all. The rule a
//! take applies is `store::probe::judge`, which `probe_take.lua` mirrors.

use std::time::Duration;

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use super::key_write::{KeyWrite, expiry_of};
use super::{EmbeddedStore, backend};
use crate::record::{OwnerToken, Record, RecordState};
use crate::store::probe::{Judged, ProbeOps, ProbePlan, judge};
use crate::store::{Call, StoreError, StoreKey};

/// Record key → due time (u64 BE) ++ plan text.
pub(super) const PLANS: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("probe_plans");
/// `(due time, record key)`.
pub(super) const DUE: TableDefinition<'static, (u64, &str), ()> = TableDefinition::new("probe_due");

/// `key`'s plan and due time, inside a write transaction.
fn read(txn: &WriteTransaction, key: &str) -> Result<Option<(u64, String)>, StoreError> {
    let plans = txn.open_table(PLANS).map_err(backend)?;
    let Some(guard) = plans.get(key).map_err(backend)? else {
        return Ok(None);
    };
    Ok(split(guard.value()))
}

fn split(value: &[u8]) -> Option<(u64, String)> {
    let due = expiry_of(value)?;
    let text = std::str::from_utf8(value.get(8..)?).ok()?;
    Some((due, text.to_owned()))
}

/// Stores `key`'s plan `text`, due at `due`.
fn write(txn: &WriteTransaction, key: &str, text: &str, due: u64) -> Result<(), StoreError> {
    forget(txn, key)?;
    let mut value = due.to_be_bytes().to_vec();
    value.extend_from_slice(text.as_bytes());
    txn.open_table(PLANS)
        .map_err(backend)?
        .insert(key, value.as_slice())
        .map_err(backend)?;
    txn.open_table(DUE)
        .map_err(backend)?
        .insert((due, key), ())
        .map_err(backend)?;
    Ok(())
}

/// Drops `key`'s plan, if it has one.
fn forget(txn: &WriteTransaction, key: &str) -> Result<(), StoreError> {
    let old = {
        let mut plans = txn.open_table(PLANS).map_err(backend)?;
        plans
            .remove(key)
            .map_err(backend)?
            .and_then(|guard| expiry_of(guard.value()))
    };
    if let Some(due) = old {
        txn.open_table(DUE)
            .map_err(backend)?
            .remove((due, key))
            .map_err(backend)?;
    }
    Ok(())
}

/// A claim keeps its delivery's `plan`, due `first` from now (its lease
/// plus `start_after`: the earliest a lost owner's record could be probed).
pub(super) fn arm(
    target: &KeyWrite<'_, '_>,
    plan: &str,
    first: Duration,
) -> Result<(), StoreError> {
    let due = target.now + crate::time::millis(first);
    write(target.txn, target.key.as_str(), plan, due)
}

/// What a write that leaves the record an `unknown` outcome (or not:
/// completed, queued, deleted) means for the plan of a probe route's key:
/// an unknown outcome is due `start_after` from now, anything else
/// forgets the plan (`probe.lua`'s `probe_settle`).
pub(super) fn settle(target: &KeyWrite<'_, '_>, unknown: bool) -> Result<(), StoreError> {
    if !target.key.has_probe() {
        return Ok(());
    }
    let key = target.key.as_str();
    match (unknown, read(target.txn, key)?) {
        (true, Some((_, text))) => {
            let plan = ProbePlan::decode(&text)?;
            let due = target.now + crate::time::millis(plan.start_after);
            write(target.txn, key, &text, due)
        }
        (_, Some(_)) => forget(target.txn, key),
        (_, None) => Ok(()),
    }
}

impl ProbeOps for EmbeddedStore {
    fn probe_due<'a>(
        &'a self,
        namespace: &'a str,
        now_ms: u64,
        limit: usize,
    ) -> Call<'a, Vec<String>> {
        let prefix = format!("{namespace}:");
        Box::pin(self.read(DUE, move |table| {
            let mut keys = Vec::new();
            for item in table
                .range(..(now_ms.saturating_add(1), ""))
                .map_err(backend)?
            {
                let (entry, _) = item.map_err(backend)?;
                let (_, key) = entry.value();
                if key.starts_with(&prefix) {
                    keys.push(key.to_owned());
                    if keys.len() >= limit {
                        break;
                    }
                }
            }
            Ok(keys)
        }))
    }

    fn probe_take<'a>(
        &'a self,
        key: &'a StoreKey,
        owner: OwnerToken,
        lease: Duration,
    ) -> Call<'a, Option<(Record, Duration, String)>> {
        Box::pin(self.write_key(key, move |target| {
            let name = target.key.as_str().to_owned();
            let Some((due, text)) = read(target.txn, &name)? else {
                return Ok((None, false));
            };
            let Ok(mut plan) = ProbePlan::decode(&text) else {
                forget(target.txn, &name)?;
                return Ok((None, true));
            };
            let Some(entry) = target.live()? else {
                forget(target.txn, &name)?;
                return Ok((None, true));
            };
            let ttl_ms = entry.expires_at_ms - target.now;
            match judge(&plan, Some(&entry.record.state), (ttl_ms, due, target.now)) {
                Judged::Forget => {
                    forget(target.txn, &name)?;
                    Ok((None, true))
                }
                Judged::Later(at) if at == due => Ok((None, false)),
                Judged::Later(at) => {
                    write(target.txn, &name, &text, at)?;
                    Ok((None, true))
                }
                Judged::Take => {
                    let taken = Record {
                        owner,
                        ..entry.record.with_state(RecordState::Unknown)
                    };
                    let bytes = taken.encode().map_err(StoreError::from)?;
                    target.put(Duration::from_millis(ttl_ms), &bytes)?;
                    plan.attempts += 1;
                    let text = plan.encode();
                    write(
                        target.txn,
                        &name,
                        &text,
                        target.now + crate::time::millis(lease),
                    )?;
                    Ok((Some((taken, Duration::from_millis(ttl_ms), text)), true))
                }
            }
        }))
    }

    fn probe_note<'a>(
        &'a self,
        key: &'a StoreKey,
        owner: OwnerToken,
        plan: &'a str,
        next: Option<Duration>,
    ) -> Call<'a, bool> {
        let plan = plan.to_owned();
        Box::pin(self.write_key(key, move |target| {
            let Some(entry) = target.live()?.filter(|e| e.record.owner == owner) else {
                return Ok((false, false));
            };
            let after = next.map_or(entry.expires_at_ms - target.now + 1000, crate::time::millis);
            write(target.txn, target.key.as_str(), &plan, target.now + after)?;
            Ok((true, true))
        }))
    }

    fn probe_pending<'a>(&'a self, key: &'a StoreKey) -> Call<'a, Option<(String, u64)>> {
        let name = key.as_str().to_owned();
        Box::pin(self.read(PLANS, move |table| {
            Ok(table
                .get(name.as_str())
                .map_err(backend)?
                .and_then(|guard| split(guard.value()))
                .map(|(due, text)| (text, due)))
        }))
    }
}
