//! Group commit: the one thread that writes the embedded store.
//!
//! Every write operation of the embedded store (records, inbox indexes,
//! owed sets, books, the sweeper) is a [`Pending`] sent to this thread.
//! The thread takes what is waiting (up to `max_batch`, waiting at most
//! `commit_delay` for company), runs the operations one after another in
//! ONE redb write transaction and commits it once, durably
//! (`Durability::Immediate`, redb's default: fsync before `commit`
//! returns). Only then is each caller answered, so no claim or answer is
//! acknowledged before it is on disk, and one fsync pays for the whole
//! batch. With `commit_delay = 0` batches form by themselves: while one
//! commit's fsync runs, the next operations queue up behind it.
//!
//! Failure isolation, with the errors of one-transaction-per-operation:
//! * An operation returning `Err` fails only itself. redb can not take a
//!   savepoint once a table is open, so the transaction is aborted (undoing
//!   that operation's partial writes with everyone's) and the rest of the
//!   batch runs again in a fresh one, answered from that run. Operations
//!   are `FnMut` for that; their errors are rare (a corrupt record, a
//!   storage failure), so the re-run costs nothing in the usual case.
//! * A failing `begin_write` or `commit` fails every operation it held.
//! * A batch whose operations all report `changed = false` is aborted, not
//!   committed: reads need no fsync.
//! * A panic inside redb (it can panic on a damaged file) is caught; the
//!   batch's callers see their reply channel close, which the caller maps
//!   to [`StoreError::Backend`].
//!
//! Runtime faults ([`Shared`]): after an I/O error redb fails every later
//! call with `PreviousIo` until the database is closed, and reads that miss
//! its cache fail too. So any writer-level failure (begin, commit, panic)
//! marks the store failing and reopens the database at once (drop, then
//! `Database::create` on the same path) so reads work again: a full disk
//! still replays the answers it holds. Writes fail fast while the store is
//! failing; every backoff step (doubling up to [`MAX_BACKOFF`]) the thread
//! checks that the disk takes new data (`disk_room.rs`: a write of a scratch
//! file, since a small commit can land in free pages inside the file of a
//! disk still full) and then tries a small check write; the first check
//! write or batch that commits makes the store ready again. (The `probe`
//! of `[route.probe]`, which asks a handler, is another thing.) `/readyz` follows
//! [`Shared::failure`]: that health, and damage the background check of the
//! file (`verify`) found, which fails every write for good.
//!
//! Crash recovery (`record`): once idle for 20 ms the writer records
//! redb's allocator state in an empty commit, so the open after a crash
//! loads it instead of walking the whole file; writes' own commits record
//! it at most once a second, since on every commit it costs throughput.

use std::panic::{AssertUnwindSafe, catch_unwind};
#[cfg(test)]
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use redb::{Database, TableDefinition, WriteTransaction};
use tokio::time::Instant;

use super::guarded;
use crate::store::StoreError;

mod job;
pub(super) use job::{Job, Pending};
mod record;
use record::{CHECKPOINT_IDLE, Record, Recorded};

/// Where the check write goes: one row, rewritten by every check. The
/// table keeps its first name, `writer_probe`, so existing files need no
/// migration.
const CHECK_WRITE: TableDefinition<'static, &str, u64> = TableDefinition::new("writer_probe");

/// The first pause between attempts to recover a failing store.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest pause between attempts to recover a failing store.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How the writer groups operations into commits (`[store] commit_delay`,
/// `[store] max_batch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommit {
    /// The longest the first operation of a batch waits for company before
    /// the batch commits. Zero: commit as soon as the writer is free.
    pub commit_delay: Duration,
    /// The most operations one commit holds.
    pub max_batch: usize,
    /// Bytes the disk must take before a failing store is ready again
    /// (`disk_room::needed_for` the largest answer it may keep).
    pub room: usize,
}

impl Default for GroupCommit {
    /// Measured best on the bench (docs/performance.md, "Embedded store").
    fn default() -> Self {
        Self {
            commit_delay: Duration::ZERO,
            max_batch: 256,
            room: super::disk_room::needed_for(crate::config::DEFAULT_MAX_STORED_ANSWER_BYTES),
        }
    }
}

/// Whether the store takes writes, as `/readyz` reports it.
#[derive(Debug, Clone)]
enum Health {
    Ready,
    /// The last write failed; writes fail fast with `error` until a check
    /// write or a batch commits. `retry_at` is the next recovery attempt.
    Failing {
        error: StoreError,
        backoff: Duration,
        retry_at: Instant,
    },
}

/// How the database is opened again after a failure: `Database::create`
/// on the same path (a test's failing backend in unit tests).
pub(super) type Opener = Box<dyn Fn() -> Result<Database, redb::DatabaseError> + Send + Sync>;

/// The state the writer thread and the readers share: the open database
/// (swapped on reopen) and the store's health.
pub(super) struct Shared {
    reopen: Opener,
    /// Whether the disk takes new data: checked before a recovery's check
    /// write ([`super::disk_room`]).
    room: super::disk_room::DiskRoom,
    db: RwLock<Option<Arc<Database>>>,
    health: Mutex<Health>,
    /// The background check of the whole file (`verify`): damage found
    /// there fails every write for good.
    integrity: std::sync::OnceLock<Arc<super::verify::IntegrityCell>>,
    /// When a commit last recorded the allocator state, and whether the
    /// last commit did ([`Shared::commit`]).
    recorded: Mutex<Recorded>,
    /// Test seam: the next commits that fail, as if the disk did.
    #[cfg(test)]
    fail_commits: std::sync::atomic::AtomicUsize,
    /// Test count of the commits that succeeded.
    #[cfg(test)]
    commits: AtomicUsize,
    /// Test count of those that recorded the allocator state.
    #[cfg(test)]
    quick_commits: AtomicUsize,
    /// Test count of the idle checkpoints (not in `commits`).
    #[cfg(test)]
    checkpoints: AtomicUsize,
}

impl Shared {
    /// Shared state over an open database, reopened with `reopen`.
    pub(super) fn new(db: Database, reopen: Opener, room: super::disk_room::DiskRoom) -> Self {
        Self {
            reopen,
            room,
            db: RwLock::new(Some(Arc::new(db))),
            health: Mutex::new(Health::Ready),
            integrity: std::sync::OnceLock::new(),
            recorded: Mutex::new(Recorded {
                at: Instant::now(),
                last: false,
                gave_up: false,
            }),
            #[cfg(test)]
            fail_commits: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(test)]
            commits: AtomicUsize::new(0),
            #[cfg(test)]
            quick_commits: AtomicUsize::new(0),
            #[cfg(test)]
            checkpoints: AtomicUsize::new(0),
        }
    }

    /// The open database, for a read or the writer; an error while it is
    /// being reopened.
    pub(super) fn database(&self) -> Result<Arc<Database>, StoreError> {
        self.db
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| self.failure().unwrap_or_else(reopening))
    }

    /// Follows `cell` from now on: its damage fails every write.
    pub(super) fn watch_integrity(&self, cell: Arc<super::verify::IntegrityCell>) {
        // Set once, by the open, before any handle is shared.
        drop(self.integrity.set(cell));
    }

    /// Where the check of the whole file stands; `None` for a store a
    /// test built over its own backend.
    pub(super) fn integrity(&self) -> Option<super::verify::Integrity> {
        self.integrity.get().map(|cell| cell.get())
    }

    /// Stops the background check of the file, if it still runs.
    pub(super) fn stop_integrity_check(&self) {
        if let Some(cell) = self.integrity.get() {
            cell.stop();
        }
    }

    /// Why writes fail now, if they do: damage found in the file, or the
    /// last write's failure.
    pub(super) fn failure(&self) -> Option<StoreError> {
        if let Some(reason) = self.integrity.get().and_then(|cell| cell.damage()) {
            return Some(StoreError::Backend(reason.to_owned()));
        }
        match &*self.health.lock().unwrap_or_else(PoisonError::into_inner) {
            Health::Ready => None,
            Health::Failing { error, .. } => Some(error.clone()),
        }
    }

    fn set_ready(&self) {
        let mut health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(*health, Health::Failing { .. }) {
            tracing::info!("embedded store writes again");
        }
        *health = Health::Ready;
    }

    /// Records a failed write and reopens the database so reads work.
    fn set_failing(&self, error: StoreError) {
        {
            let mut health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
            let backoff = match &*health {
                Health::Ready => {
                    tracing::error!(%error, "embedded store write failed; refusing writes until a check write succeeds");
                    FIRST_BACKOFF
                }
                Health::Failing { backoff, .. } => (*backoff * 2).min(MAX_BACKOFF),
            };
            *health = Health::Failing {
                error,
                backoff,
                retry_at: Instant::now() + backoff,
            };
        }
        self.reopen();
    }

    /// Closes the database and opens it again: redb stays failed after an
    /// I/O error until it is closed. Readers still holding the old handle
    /// keep the file locked for a moment; then this fails and the next
    /// recovery attempt tries again.
    fn reopen(&self) {
        let old = self
            .db
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(old);
        match catch_unwind(AssertUnwindSafe(|| (self.reopen)())) {
            Ok(Ok(db)) => {
                *self.db.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(db));
            }
            Ok(Err(error)) => tracing::warn!(%error, "embedded store: reopening failed"),
            Err(_) => tracing::warn!("embedded store: reopening panicked"),
        }
    }

    /// The time left until the next recovery attempt; `None` when ready.
    fn until_retry(&self) -> Option<Duration> {
        match &*self.health.lock().unwrap_or_else(PoisonError::into_inner) {
            Health::Ready => None,
            Health::Failing { retry_at, .. } => {
                Some(retry_at.saturating_duration_since(Instant::now()))
            }
        }
    }

    /// One recovery attempt: reopen if needed, check that the disk takes
    /// new data ([`super::disk_room`]: a small commit alone can land in
    /// free pages inside the file of a disk still full), then a check write.
    fn recover(&self) {
        if let Err(error) = (self.room)() {
            self.set_failing(storage(error));
            return;
        }
        if self
            .db
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
        {
            self.reopen();
        }
        let check = |txn: &WriteTransaction| -> Result<(), StoreError> {
            let mut table = txn.open_table(CHECK_WRITE).map_err(super::backend)?;
            let now = crate::record::now_ms();
            table.insert("last", now).map_err(super::backend)?;
            Ok(())
        };
        let outcome = self
            .database()
            .and_then(|db| guarded(|| self.commit_with(&db, check)));
        match outcome {
            Ok(()) => self.set_ready(),
            Err(error) => self.set_failing(error),
        }
    }

    /// Begins a write on `db`, runs `fill` and commits.
    fn commit_with(
        &self,
        db: &Database,
        fill: impl FnOnce(&WriteTransaction) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let txn = db.begin_write().map_err(storage)?;
        fill(&txn)?;
        self.commit(txn)
    }

    /// Commits `txn` durably (redb's default durability); see
    /// [`Shared::commit_recording`] for when it records the allocator
    /// state.
    fn commit(&self, txn: WriteTransaction) -> Result<(), StoreError> {
        self.commit_recording(txn, Record::WhenDue)
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("health", &self.health)
            .finish_non_exhaustive()
    }
}

/// The error a read gets while the database is closed for reopening.
fn reopening() -> StoreError {
    StoreError::Backend("embedded store is being reopened".into())
}

/// A redb (or I/O) error as a store error: `Full` when the disk is full
/// (writes are refused, reads still work, a retry later can succeed: the
/// pipeline keeps trying to store an answer in hand), `Backend` otherwise.
pub(super) fn storage<E: std::error::Error + 'static>(error: E) -> StoreError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(cause) = source {
        if disk_full(cause) {
            return StoreError::Full(error.to_string());
        }
        source = cause.source();
    }
    StoreError::Backend(error.to_string())
}

/// Whether `cause` is an I/O error saying the disk is full, bare or in
/// one of the redb errors that carry a `StorageError` (they do not expose
/// it as their `source`).
fn disk_full(cause: &(dyn std::error::Error + 'static)) -> bool {
    let io = |storage: &redb::StorageError| matches!(storage, redb::StorageError::Io(io) if io.kind() == std::io::ErrorKind::StorageFull);
    if let Some(error) = cause.downcast_ref::<std::io::Error>() {
        return error.kind() == std::io::ErrorKind::StorageFull;
    }
    if let Some(storage) = cause.downcast_ref::<redb::StorageError>() {
        return io(storage);
    }
    let storage = if let Some(redb::CommitError::Storage(s)) = cause.downcast_ref() {
        s
    } else if let Some(redb::TransactionError::Storage(s)) = cause.downcast_ref() {
        s
    } else if let Some(redb::TableError::Storage(s)) = cause.downcast_ref() {
        s
    } else if let Some(redb::DatabaseError::Storage(s)) = cause.downcast_ref() {
        s
    } else {
        return false;
    };
    io(storage)
}

/// The writer thread: batches what arrives on `jobs` until every sender is
/// gone.
pub(super) fn run(shared: &Shared, jobs: &Receiver<Box<dyn Pending>>, config: GroupCommit) {
    loop {
        let first = match shared.until_retry() {
            None if shared.unrecorded() => match jobs.recv_timeout(CHECKPOINT_IDLE) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => {
                    shared.checkpoint();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match jobs.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            },
            Some(wait) => match jobs.recv_timeout(wait) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            },
        };
        if shared.until_retry().is_some_and(|wait| wait.is_zero()) {
            shared.recover();
        }
        let Some(first) = first else { continue };
        let batch = gather(first, jobs, config);
        if let Some(error) = shared.failure() {
            answer_all(batch, &error);
            continue;
        }
        let db = match shared.database() {
            Ok(db) => db,
            Err(error) => {
                answer_all(batch, &error);
                continue;
            }
        };
        let mut batch = batch;
        if let Err(error) = guarded(|| commit_batch(shared, &db, &mut batch)) {
            drop(db);
            // Failing and reopened before the callers hear of it: a caller
            // that retries at once sees the store as it now is, and a
            // replay reads from a working database.
            shared.set_failing(error.clone());
            answer_all(batch, &error);
        }
    }
}

/// `first` and whatever else arrives within `commit_delay`, up to
/// `max_batch` operations.
fn gather(
    first: Box<dyn Pending>,
    jobs: &Receiver<Box<dyn Pending>>,
    config: GroupCommit,
) -> Vec<Box<dyn Pending>> {
    let mut batch = vec![first];
    let deadline = Instant::now() + config.commit_delay;
    while batch.len() < config.max_batch {
        let next = match jobs.try_recv() {
            Ok(job) => Some(job),
            Err(_) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    None
                } else {
                    jobs.recv_timeout(left).ok()
                }
            }
        };
        match next {
            Some(job) => batch.push(job),
            None => break,
        }
    }
    batch
}

/// Runs `batch` in one transaction and commits it (see the module docs),
/// answering and removing every job; `Err` when the writer itself failed
/// (begin, abort, commit, or a panic), leaving the jobs to answer in
/// `batch`. After an operation fails, the transaction is aborted and the
/// others run again in a new one: that `begin_write` also tells whether
/// the failure was the storage's (redb then refuses with `PreviousIo`).
fn commit_batch(
    shared: &Shared,
    db: &Database,
    batch: &mut Vec<Box<dyn Pending>>,
) -> Result<(), StoreError> {
    // A full disk seen by an operation: what redb's later `PreviousIo`
    // really means, so the batch-mates and the failing state say "full"
    // (transient: an answer in hand is stored again) rather than "broken".
    let mut full: Option<StoreError> = None;
    loop {
        let txn = db
            .begin_write()
            .map_err(|error| previous_io_is(error, full.as_ref()))?;
        let mut changed = false;
        let mut failed = false;
        for job in batch.iter_mut() {
            match job.run(&txn) {
                Ok(change) => changed |= change,
                Err(error) => {
                    if matches!(error, StoreError::Full(_)) {
                        full = Some(error);
                    }
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            txn.abort()
                .map_err(|error| previous_io_is(error, full.as_ref()))?;
            continue;
        }
        if changed {
            shared.commit(txn)?;
            shared.set_ready();
        } else {
            txn.abort().map_err(storage)?;
        }
        for job in batch.drain(..) {
            job.answer(Ok(()));
        }
        return Ok(());
    }
}

/// `error` as a store error; a `PreviousIo` refusal after an operation hit
/// a full disk (`full`) is that full disk.
fn previous_io_is<E: std::error::Error + 'static>(
    error: E,
    full: Option<&StoreError>,
) -> StoreError {
    let previous = |storage: &redb::StorageError| matches!(storage, redb::StorageError::PreviousIo);
    let cause: &(dyn std::error::Error + 'static) = &error;
    let is_previous = if let Some(storage) = cause.downcast_ref::<redb::StorageError>() {
        previous(storage)
    } else if let Some(redb::TransactionError::Storage(storage)) = cause.downcast_ref() {
        previous(storage)
    } else if let Some(redb::CommitError::Storage(storage)) = cause.downcast_ref() {
        previous(storage)
    } else {
        false
    };
    match full {
        Some(full) if is_previous => full.clone(),
        _ => storage(error),
    }
}

/// Answers every job of `batch` with `error`.
fn answer_all(batch: Vec<Box<dyn Pending>>, error: &StoreError) {
    for job in batch {
        job.answer(Err(error.clone()));
    }
}

#[cfg(test)]
mod tests;
