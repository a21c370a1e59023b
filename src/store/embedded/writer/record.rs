//! When the writer records redb's allocator state (quick repair), so a
//! start after a crash need not walk the whole file: by the idle
//! checkpoint, and by a write's commit at most once per [`RECORD_EVERY`]
//! ([`Shared::commit_recording`] says why not on every commit).

use std::sync::PoisonError;
#[cfg(test)]
use std::sync::atomic::Ordering;
use std::time::Duration;

use redb::WriteTransaction;
use tokio::time::Instant;

use super::super::guarded;
use super::{Shared, storage};
use crate::store::StoreError;

impl Shared {
    /// The allocator state's last record, locked.
    pub(super) fn recorded(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.recorded.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the idle checkpoint is due: the last commit left the
    /// allocator state unrecorded (a crash now would make the next open
    /// walk the whole file), and no checkpoint failed since.
    pub(super) fn unrecorded(&self) -> bool {
        let recorded = self.recorded();
        !recorded.last && !recorded.gave_up
    }

    /// The idle checkpoint: an empty commit that records the allocator
    /// state, after [`CHECKPOINT_IDLE`] without writes. Not on a store
    /// that refuses writes; a failure is left to the next write to find,
    /// and no checkpoint is tried again before a write commits.
    pub(super) fn checkpoint(&self) {
        let outcome = match self.failure() {
            Some(error) => Err(error),
            None => self.database().and_then(|db| {
                guarded(|| {
                    let txn = db.begin_write().map_err(storage)?;
                    self.commit_recording(txn, Record::Now)
                })
            }),
        };
        match outcome {
            Ok(()) => {
                tracing::debug!("embedded store: recorded the allocator state (idle checkpoint)");
            }
            Err(error) => {
                self.recorded().gave_up = true;
                tracing::debug!(%error, "embedded store: the idle checkpoint did not commit");
            }
        }
    }

    /// Commits `txn` durably, recording the allocator state (redb's quick
    /// repair) when `record` says: an open after a crash that follows such
    /// a commit loads that state instead of walking the whole file, so the
    /// start after a SIGKILL takes the same time at any size. The record
    /// costs a second fsync and CPU that grows with the file (measured
    /// when every commit recorded it: -13% first deliveries on a small
    /// store, -31% at 10 million records), so a write's commit records it
    /// at most once per [`RECORD_EVERY`], and the writer records it in an
    /// empty commit once it has been idle for [`CHECKPOINT_IDLE`]
    /// ([`Shared::checkpoint`]). Only a crash amid back-to-back writes
    /// makes the next start walk the file.
    pub(super) fn commit_recording(
        &self,
        mut txn: WriteTransaction,
        record: Record,
    ) -> Result<(), StoreError> {
        let quick = match record {
            Record::Now => true,
            Record::WhenDue => self.recorded().at.elapsed() >= RECORD_EVERY,
        };
        txn.set_quick_repair(quick);
        #[cfg(test)]
        if record == Record::WhenDue {
            let failing = self.fail_commits.load(Ordering::SeqCst);
            if failing > 0 {
                self.fail_commits.store(failing - 1, Ordering::SeqCst);
                txn.abort().map_err(storage)?;
                return Err(StoreError::Backend("injected commit failure".into()));
            }
        }
        txn.commit().map_err(storage)?;
        {
            let mut recorded = self.recorded();
            recorded.last = quick;
            recorded.gave_up = false;
            if quick {
                recorded.at = Instant::now();
            }
        }
        #[cfg(test)]
        {
            let counter = match record {
                Record::Now => &self.checkpoints,
                Record::WhenDue => &self.commits,
            };
            counter.fetch_add(1, Ordering::SeqCst);
            self.quick_commits.fetch_add(
                usize::from(quick && record == Record::WhenDue),
                Ordering::SeqCst,
            );
        }
        Ok(())
    }
}

/// When a commit records the allocator state ([`Shared::commit_recording`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Record {
    /// Now: the idle checkpoint.
    Now,
    /// When [`RECORD_EVERY`] has passed since the last record.
    WhenDue,
}

/// The allocator state's last record.
#[derive(Debug)]
pub(super) struct Recorded {
    /// When a commit last recorded it.
    pub(super) at: Instant,
    /// Whether the last commit recorded it.
    pub(super) last: bool,
    /// Whether a checkpoint failed since the last commit: the next one
    /// waits for a write to commit.
    pub(super) gave_up: bool,
}

/// How long the writer waits, idle after a commit that left the allocator
/// state unrecorded, before recording it in an empty commit.
pub(super) const CHECKPOINT_IDLE: Duration = Duration::from_millis(20);
/// Under steady writes, a write's commit records the allocator state at
/// most this often.
const RECORD_EVERY: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests;
