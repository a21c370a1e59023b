//! The embedded store: the same six operations in a local redb file, for a
//! single instance with no Redis.
//!
//! Two tables: `records` maps a store key to `expires_at_ms (u64 BE) ++
//! record bytes`; `expiries` indexes `(expires_at_ms, key)` so the sweeper
//! deletes expired records in order without scanning everything. Expiry is
//! wall-clock based because records must outlive a restart.
//!
//! Writes go through one writer thread (`writer.rs`, [`EmbeddedStore::transact`]):
//! it runs whatever operations are pending in one redb write transaction
//! and commits it once, durably, before answering any of them (group
//! commit). So a claim is on disk before the upstream is called and a
//! crash right after it can not lose it, and one fsync pays for many
//! operations. An operation's own error fails only itself; a failed
//! commit fails the operations it held. Reads run on tokio's blocking pool
//! in read transactions, which never wait for the writer; a claim reads
//! first (on the calling thread: a cached B-tree lookup costs less than
//! the hand-off to the blocking pool), so a key that holds a record is answered without a write (a full
//! disk still replays). After a storage failure the writer reopens the
//! database, refuses writes until a probe write commits, and `ping` (so
//! `/readyz`) reports the failure meanwhile.
//!
//! An expired record is treated as absent by every operation even before
//! the sweeper removes it.
//!
//! [`index`] adds the durable inbox's sorted indexes of key hashes (two more
//! tables in the same file); [`open`] refuses, at start-up, a file that
//! was emptied, deleted, replaced or damaged.

mod audit;
mod books;
mod disk_room;
mod entities;
mod generation;
mod held;
mod inbox_ops;
mod index;
mod listing;
mod open;
mod owed;
mod probes;
pub(crate) use disk_room::needed_for as room_for_answers;
mod key_write;
mod start;
mod verify;
mod writer;

use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use self::key_write::{Expiries, KeyWrite, Records, expiry_of, read_entry};
pub use self::writer::GroupCommit;
use self::writer::{Job, Pending, Shared};

use super::entity::{Correction, EntityEffect, EntityState, EntityStep, Seen};
use super::probe::ProbePlan;
use super::{
    ClaimOutcome, Completion, EntityKey, Existing, Lease, Purged, Releasing, SeenRecord, Store,
    StoreError, StoreKey,
};
use crate::record::{OwnerToken, Record, RecordState, now_ms};

const RECORDS: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("records");
const EXPIRIES: TableDefinition<'static, (u64, &str), ()> = TableDefinition::new("expiries");

/// How many expired records one sweep removes at most, so a sweep never
/// holds the write lock for long.
const SWEEP_BATCH: usize = 1_000;

/// What a claim's write transaction found under a free-looking key.
enum Found {
    /// A live record, with its remaining TTL.
    Existing(Record, Duration),
    /// The entity decided; nothing was claimed.
    Decided(super::entity::EntityVerdict),
    /// Nothing: the key is now claimed.
    Free,
}

/// An owner-checked write of [`EmbeddedStore::change_owned`].
enum Change {
    /// Store an outcome: over our claim, or into a free key; `true` for a
    /// delivery the inbox now owes (entered into its owed set with it);
    /// whether it is an unknown outcome (its probe, on a probe route,
    /// is then scheduled); what it means for the key's entity, if it has
    /// one.
    Complete(Vec<u8>, Duration, (bool, bool), EntityEffect),
    /// Reset the TTL of our in-flight claim (rewrites the same record).
    Renew(Duration),
    /// Delete our claim (or, with [`Releasing::Owned`], whatever we wrote
    /// over it).
    Release(Releasing),
}

/// Whose key [`EmbeddedStore::change_owned`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owned {
    /// Ours: changed.
    Yes,
    /// Nobody's: only a completion writes it.
    Free,
    /// Another owner's, or not in the state the change needs: untouched.
    No,
}

/// The redb-backed store: cheap to clone, all clones share one writer.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
    /// The marker its generation is raised in (`embedded/generation.rs`);
    /// `None` for a store a test built over its own backend.
    stamp: Option<Arc<open::Stamp>>,
}

/// The writer thread and the state it shares with the readers. Dropping
/// the last handle stops the thread and closes the file (so it can be
/// opened again at once).
struct Inner {
    shared: Arc<Shared>,
    jobs: Option<mpsc::Sender<Box<dyn Pending>>>,
    writer: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.stop_integrity_check();
        drop(self.jobs.take());
        if let Some(writer) = self.writer.take()
            && writer.join().is_err()
        {
            tracing::error!("embedded store writer thread panicked");
        }
    }
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore").finish_non_exhaustive()
    }
}

/// What a panic inside redb said (it panics on some damaged files), for
/// the error that reports it.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

/// Runs `work`, turning a panic into [`StoreError::Backend`]: redb can
/// panic on a damaged file, and neither the writer thread nor a task
/// reading on its own thread must die of it.
pub(super) fn guarded<T>(work: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        Err(StoreError::Backend(format!(
            "embedded store panicked: {}",
            panic_message(panic.as_ref())
        )))
    })
}

/// A backend failure as a [`StoreError`]: [`StoreError::Full`] for a full
/// disk, [`StoreError::Backend`] for everything else.
fn backend<E: std::error::Error + 'static>(error: E) -> StoreError {
    writer::storage(error)
}

impl EmbeddedStore {
    /// Hands `op` to the writer thread, which runs it in a write
    /// transaction shared with whatever else is pending and answers once
    /// the commit holding it is durable (`writer` module docs); a batch of
    /// operations that all report no change is not committed. `op` may run
    /// more than once (again after a batch-mate failed), so it must not
    /// act outside the transaction. The one place both the record
    /// operations and the inbox indexes write.
    pub(super) async fn transact<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&redb::WriteTransaction) -> Result<(T, bool), StoreError> + Send + 'static,
    {
        if let Some(error) = self.inner.shared.failure() {
            return Err(error);
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let stopped = || StoreError::Backend("embedded store writer stopped".into());
        self.inner
            .jobs
            .as_ref()
            .ok_or_else(stopped)?
            .send(Box::new(Job::new(op, reply)))
            .map_err(|_| stopped())?;
        let lost = |_| StoreError::Backend("embedded store writer failed during the commit".into());
        // Unit tests run on paused tokio time, which jumps ahead whenever
        // every task waits: a wait on the writer thread would look idle and
        // let a test's timers fire mid-commit. A wait on the blocking pool
        // holds the clock, as the writes themselves did before group commit.
        #[cfg(test)]
        let answer = tokio::task::spawn_blocking(move || answer.blocking_recv())
            .await
            .map_err(backend)?;
        #[cfg(not(test))]
        let answer = answer.await;
        answer.map_err(lost)?
    }

    /// Runs `op` on `table` in one read transaction on the blocking pool:
    /// reads see one committed state and never wait for writers. The one
    /// place the record lookups and the inbox reads open a read.
    pub(super) async fn read<K, V, T, F>(
        &self,
        table: TableDefinition<'static, K, V>,
        op: F,
    ) -> Result<T, StoreError>
    where
        K: redb::Key + Send + 'static,
        V: redb::Value + Send + 'static,
        T: Send + 'static,
        F: FnOnce(&redb::ReadOnlyTable<K, V>) -> Result<T, StoreError> + Send + 'static,
    {
        let shared = Arc::clone(&self.inner.shared);
        tokio::task::spawn_blocking(move || {
            let txn = shared.database()?.begin_read().map_err(backend)?;
            let table = txn.open_table(table).map_err(backend)?;
            op(&table)
        })
        .await
        .map_err(backend)?
    }

    /// [`Store::lookup`] on the calling thread, not the blocking pool: the
    /// read before every claim and every replay cache fill. It descends the
    /// records B-tree through pages redb keeps in its cache (the branch
    /// pages every lookup shares stay there), which takes microseconds,
    /// less than the two thread hand-offs of [`EmbeddedStore::read`]
    /// (measured: docs/performance.md, "Embedded store"). A page missing
    /// from the cache is one `pread`. A page that makes redb panic is an
    /// error ([`guarded`]): the background integrity check may not have
    /// reached it yet.
    fn lookup_here(&self, key: &StoreKey) -> Result<Option<Existing>, StoreError> {
        let database = self.inner.shared.database()?;
        guarded(|| {
            let txn = database.begin_read().map_err(backend)?;
            let table = txn.open_table(RECORDS).map_err(backend)?;
            let now = now_ms();
            Ok(
                read_entry(&table, key.as_str(), now)?.map(|entry| Existing {
                    ttl: Some(Duration::from_millis(entry.expires_at_ms - now)),
                    record: entry.record,
                }),
            )
        })
    }

    /// Runs `op` on the record tables in one write transaction (see
    /// [`EmbeddedStore::transact`]); `op` gets the transaction too, for
    /// the owed set that changes with an inbox record.
    async fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'t> FnMut(
                &'t redb::WriteTransaction,
                &mut Records<'t>,
                &mut Expiries<'t>,
                u64,
            ) -> Result<(T, bool), StoreError>
            + Send
            + 'static,
    {
        let mut op = op;
        self.transact(move |txn| {
            let mut records = txn.open_table(RECORDS).map_err(backend)?;
            let mut expiries = txn.open_table(EXPIRIES).map_err(backend)?;
            op(txn, &mut records, &mut expiries, now_ms())
        })
        .await
    }

    /// Runs `op` on `key`'s [`KeyWrite`] in one write transaction (see
    /// [`EmbeddedStore::write`]): how every record operation writes.
    async fn write_key<T, F>(&self, key: &StoreKey, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&mut KeyWrite<'_, '_>) -> Result<(T, bool), StoreError> + Send + 'static,
    {
        let key = key.clone();
        let mut op = op;
        self.write(move |txn, records, expiries, now| {
            op(&mut KeyWrite {
                txn,
                records,
                expiries,
                key: &key,
                now,
            })
        })
        .await
    }

    /// Applies `change` to `key` if `owner` still owns it (see
    /// [`Change`]). Returns whether it did, and whether the key was free.
    async fn change_owned(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        change: Change,
    ) -> Result<Owned, StoreError> {
        self.write_key(key, move |target| {
            let entry = target.live()?;
            let owned = match (&entry, &change) {
                (None, Change::Complete(..)) => Owned::Free,
                (None, _) => return Ok((Owned::No, false)),
                (Some(entry), Change::Renew(..)) => {
                    if entry.record.owner == owner
                        && matches!(entry.record.state, RecordState::InFlight(_))
                    {
                        Owned::Yes
                    } else {
                        Owned::No
                    }
                }
                (Some(entry), Change::Release(Releasing::ClaimOnly))
                    if !matches!(entry.record.state, RecordState::InFlight(_)) =>
                {
                    Owned::No
                }
                (Some(entry), _) if entry.record.owner == owner => Owned::Yes,
                (Some(_), _) => Owned::No,
            };
            if owned == Owned::No {
                return Ok((owned, false));
            }
            match &change {
                // A released change never happened: its entity drops it.
                Change::Release(_) => {
                    target.delete()?;
                    entities::settle(target, EntityEffect::Drop)?;
                    probes::settle(target, false)?;
                }
                Change::Complete(bytes, ttl, (owes, unknown), effect) => {
                    if *owes {
                        target.mark_owed(true)?;
                    }
                    target.put(*ttl, bytes)?;
                    entities::settle(target, *effect)?;
                    probes::settle(target, *unknown)?;
                }
                // The owner check just read this live entry: its record
                // bytes stay as they are, only the expiry moves.
                Change::Renew(ttl) => {
                    let bytes = target.stored_record()?.unwrap_or_default();
                    target.put(*ttl, &bytes)?;
                }
            }
            Ok((owned, true))
        })
        .await
    }

    /// Owner-fenced compare-and-set: if the live record under `key` has
    /// owner `expected`, replace it with `record` (encoded bytes) expiring
    /// `ttl` from now, put the key into its scope's owed set or take it out
    /// (`owed`), and return true. If the live record's bytes already equal
    /// `record` exactly (a retried swap whose first attempt landed),
    /// return true without writing. Otherwise (absent/expired, other owner)
    /// false. The owner check comes first, so a swap that keeps the owner
    /// always moves the expiry.
    pub(crate) async fn swap(
        &self,
        key: &StoreKey,
        expected: OwnerToken,
        record: Vec<u8>,
        ttl: Duration,
        (owed, effect): (bool, EntityEffect),
    ) -> Result<bool, StoreError> {
        self.write_key(key, move |target| {
            let Some(entry) = target.live()? else {
                return Ok((false, false));
            };
            if entry.record.owner != expected {
                let landed = target.stored_record()?.as_deref() == Some(record.as_slice());
                return Ok((landed, false));
            }
            target.put(ttl, &record)?;
            target.mark_owed(owed)?;
            entities::settle(target, effect)?;
            Ok((true, true))
        })
        .await
    }

    /// Deletes up to `SWEEP_BATCH` expired records; returns how many.
    /// The app calls this periodically.
    pub async fn sweep(&self) -> Result<usize, StoreError> {
        self.write(|txn, records, expiries, now| {
            let mut expired: Vec<(u64, String)> = Vec::new();
            for item in expiries.range(..(now, "")).map_err(backend)? {
                let (entry, _) = item.map_err(backend)?;
                let (at, key) = entry.value();
                expired.push((at, key.to_owned()));
                if expired.len() >= SWEEP_BATCH {
                    break;
                }
            }
            for (at, key) in &expired {
                expiries.remove((*at, key.as_str())).map_err(backend)?;
                let stale = records
                    .get(key.as_str())
                    .map_err(backend)?
                    .is_some_and(|g| g.value().get(..8) == Some(&at.to_be_bytes()[..]));
                if stale {
                    records.remove(key.as_str()).map_err(backend)?;
                }
            }
            let count = expired.len() + entities::sweep(txn, now, SWEEP_BATCH)?;
            Ok((count, count > 0))
        })
        .await
    }
}

impl Store for EmbeddedStore {
    async fn claim(
        &self,
        key: &StoreKey,
        record: Record,
        ttl: Duration,
        (entity, probe): (Option<&EntityStep>, Option<&ProbePlan>),
    ) -> Result<ClaimOutcome, StoreError> {
        let encoded = record.encode().map_err(StoreError::from)?;
        let step = entity.cloned();
        // On a probe route the claim keeps the plan (store::probe).
        let probe = probe.map(|plan| (plan.encode(), plan.first_due(ttl)));
        // A key that holds a live record is answered from a read: no write
        // transaction, so replays are served while writes fail (a full
        // disk) and never queue behind first deliveries' commits. A key
        // found free is claimed by the write below, which looks again.
        if let Some(existing) = self.lookup_here(key)? {
            return Ok(ClaimOutcome::Existing(existing));
        }
        let found = self
            .write_key(key, move |target| {
                if let Some(entry) = target.live()? {
                    let ttl = Duration::from_millis(entry.expires_at_ms - target.now);
                    return Ok((Found::Existing(entry.record, ttl), false));
                }
                if let Some(step) = &step {
                    if let Err(verdict) = entities::claim(target, step)? {
                        return Ok((Found::Decided(verdict), true));
                    }
                }
                target.put(ttl, &encoded)?;
                if let Some((plan, first)) = &probe {
                    probes::arm(target, plan, *first)?;
                }
                Ok((Found::Free, true))
            })
            .await?;
        Ok(match found {
            Found::Existing(existing, ttl) => ClaimOutcome::Existing(Existing {
                record: existing,
                ttl: Some(ttl),
            }),
            Found::Decided(verdict) => ClaimOutcome::Decided(verdict),
            Found::Free => ClaimOutcome::Claimed(Lease::claimed(
                key.clone(),
                record,
                ttl,
                entity.map(|step| step.advance.clone()),
            )),
        })
    }

    async fn complete(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        record: &Record,
        ttl: Duration,
        effect: EntityEffect,
    ) -> Result<Completion, StoreError> {
        let owes = record.owed() == Some(true);
        let unknown = record.state == RecordState::Unknown;
        let change = Change::Complete(
            record.encode().map_err(StoreError::from)?.to_vec(),
            ttl,
            (owes, unknown),
            effect,
        );
        Ok(match self.change_owned(key, owner, change).await? {
            Owned::Yes => Completion::Stored,
            Owned::Free => Completion::StoredInFreeKey,
            Owned::No => Completion::TakenOver,
        })
    }

    async fn release(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        what: Releasing,
    ) -> Result<bool, StoreError> {
        Ok(self.change_owned(key, owner, Change::Release(what)).await? == Owned::Yes)
    }

    async fn renew(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let change = Change::Renew(ttl);
        Ok(self.change_owned(key, owner, change).await? == Owned::Yes)
    }

    async fn lookup(&self, key: &StoreKey) -> Result<Option<Existing>, StoreError> {
        // On the calling thread, like the claim's read: the replay cache
        // fills through here once per key, at the pace of replays, and
        // must not queue behind the blocking pool (`lookup_here`). A loop
        // of lookups (the inbox's repair pass) still yields to other tasks
        // once its turn's budget is spent: the read itself never waits.
        let found = self.lookup_here(key);
        tokio::task::consume_budget().await;
        found
    }

    async fn purge(&self, key: &StoreKey, seen: Option<SeenRecord>) -> Result<Purged, StoreError> {
        self.write_key(key, move |target| {
            let live = target.live()?;
            if let Some(seen) = seen
                && !live
                    .as_ref()
                    .is_some_and(|entry| seen.matches(&entry.record))
            {
                return Ok((Purged::Changed, false));
            }
            let existed = target.delete()?;
            // The operator says the change never happened (store::Store::purge).
            let settled = entities::settle(target, EntityEffect::Drop)?;
            probes::settle(target, false)?;
            let purged = if live.is_some() || settled {
                Purged::Deleted
            } else {
                Purged::Absent
            };
            Ok((purged, existed || settled))
        })
        .await
    }

    async fn entity(
        &self,
        key: &EntityKey,
    ) -> Result<Option<(EntityState, Option<Duration>)>, StoreError> {
        let key = key.clone();
        self.read(entities::ENTITIES, move |table| {
            entities::lookup(table, &key, now_ms())
        })
        .await
    }

    async fn correct_entity(
        &self,
        key: &EntityKey,
        seen: &Seen,
        correction: &Correction,
        (by, retention): (&str, Duration),
    ) -> Result<bool, StoreError> {
        let (key, seen, correction, by) =
            (key.clone(), seen.clone(), correction.clone(), by.to_owned());
        self.write(move |txn, _, _, now| {
            let done = entities::correct(txn, &key, now, (&seen, &correction, &by), retention)?;
            Ok((done, done))
        })
        .await
    }

    /// Ready while writes succeed (the writer's health) and a read opens.
    async fn ping(&self) -> Result<(), StoreError> {
        if let Some(error) = self.inner.shared.failure() {
            return Err(error);
        }
        let shared = Arc::clone(&self.inner.shared);
        tokio::task::spawn_blocking(move || {
            shared.database()?.begin_read().map(|_| ()).map_err(backend)
        })
        .await
        .map_err(backend)?
    }
}

#[cfg(test)]
mod tests;
