//! Opening the embedded store's file at start-up, refusing a file that
//! would make idemgate forget answers it gave.
//!
//! Two faults look like a healthy start to redb: a file truncated to
//! 0 bytes (or deleted) is simply initialised again, empty, so every
//! delivery answered before executes again on its retry; and a file
//! altered outside redb (a flipped byte, garbage written mid-file) opens
//! as if nothing happened, then misreads or panics. So:
//!
//! - the checksum of every page of the committed trees is verified: by
//!   default in the background while the store serves (`verify`: start-up
//!   takes the same time at any size, and a file that fails is marked
//!   damaged, failing `/readyz` and every write); with `[store]
//!   integrity_check = "before_serving"`, by redb's integrity check in the
//!   open ([`redb::Builder::set_check_integrity_on_open`]: also the
//!   allocator rebuilt), and a file that fails it is refused. Either way
//!   redb reads the header and the commit slot it trusts before serving:
//!   the writer records the allocator state (quick repair) whenever it
//!   goes idle (`writer`), so after a crash the open loads it instead of
//!   rebuilding it from the whole file, unless the crash came amid writes;
//! - a small sidecar file, the *marker* (`<file>.marker`), is written once
//!   the database is durably created. It holds a random store id that is
//!   also stored inside the database (table `meta`). A marker with a
//!   missing, empty or differently-identified database is refused: that
//!   file was lost, not never created. Deleting the marker is the
//!   deliberate way to start empty.
//!
//! A first start creates the database under a temporary name and renames
//! it into place only once its tables and id are committed, then writes
//! the marker: a crash before the rename leaves no database (the next
//! start is a first start again), a crash between the rename and the
//! marker leaves a database with an id and no marker, which the next
//! start accepts and writes the marker for. A database from a release
//! without markers (no id inside) is given an id and a marker.
//!
//! A restored backup is the third such fault: an older copy of the file
//! opens cleanly, and every delivery answered after the copy was taken
//! would run again on its retry. So the store also keeps a *generation*,
//! a counter inside the database (table `meta`) and in the marker, raised
//! at every start and every half minute while running
//! (`embedded/generation.rs`), inside first, then in the marker. A
//! database whose generation is below the marker's is an older copy and
//! is refused ([`OpenError::Restored`]); deleting the marker is again the
//! deliberate way past it. The marker lags the database by at most one
//! raise (a crash between the two writes), which is accepted.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use tokio::time::Instant;

use redb::{Builder, Database, DatabaseError, ReadableTable, StorageError, TableDefinition};

use crate::config::IntegrityCheck;

mod marker;
pub(super) use marker::write_marker;
use marker::{FoundId, Marker, StoreId, read_marker};

/// Store-wide facts, one value per name: today only [`STORE_ID`].
const META: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("meta");
/// The name of the store id in [`META`].
const STORE_ID: &str = "store_id";
/// The name of the generation in [`META`] (8 bytes, big-endian).
const GENERATION: &str = "generation";

/// Why the store file was not opened. Each message is one line naming the
/// file, what was found and what the operator can do.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// The marker says idemgate created the database, but it is gone.
    #[error(
        "{path} is missing, but {marker} says idemgate created it: starting empty would forget every \
         answered delivery and execute its retries again; restore the file, or delete {marker} to \
         start with an empty store on purpose"
    )]
    Missing {
        /// The database file.
        path: PathBuf,
        /// Its marker.
        marker: PathBuf,
    },
    /// The marker says idemgate created the database, but it is 0 bytes.
    #[error(
        "{path} is empty (0 bytes), but {marker} says idemgate created it: starting empty would \
         forget every answered delivery and execute its retries again; restore the file, or delete \
         {marker} to start with an empty store on purpose"
    )]
    Emptied {
        /// The database file.
        path: PathBuf,
        /// Its marker.
        marker: PathBuf,
    },
    /// The database is not the one the marker was written for.
    #[error(
        "{path} is not the store {marker} was written for (store id {found} instead of {expected}): \
         put the right file back, or delete {marker} to start on this file on purpose"
    )]
    Foreign {
        /// The database file.
        path: PathBuf,
        /// Its marker.
        marker: PathBuf,
        /// The id the marker holds.
        expected: StoreId,
        /// The id the database holds (`none` for a database without one).
        found: FoundId,
    },
    /// The database is an older copy of the store the marker has seen.
    #[error(
        "{path} is an older copy of its store (generation {found}, but {marker} has seen generation \
         {expected}): a restored backup, on which every delivery answered after the copy was taken \
         would run again when retried. Put the newest file back; or, to start on this copy on \
         purpose, follow \"Restoring the embedded store\" in docs/operations.md, which ends by \
         deleting {marker}"
    )]
    Restored {
        /// The database file.
        path: PathBuf,
        /// Its marker.
        marker: PathBuf,
        /// The generation the marker holds.
        expected: u64,
        /// The generation the database holds.
        found: u64,
    },
    /// redb refused the file or its integrity check failed.
    #[error(
        "{path} is damaged ({reason}): idemgate refuses to start on it rather than forget or misread \
         answers; restore it from a backup, or move it away and delete {marker} to start with an \
         empty store on purpose"
    )]
    Damaged {
        /// The database file.
        path: PathBuf,
        /// Its marker.
        marker: PathBuf,
        /// What redb reported.
        reason: String,
    },
    /// Another process holds the database's lock.
    #[error(
        "{path} is open in another process (another idemgate on the same file?): stop it, or give \
         this instance its own [store] path"
    )]
    InUse {
        /// The database file.
        path: PathBuf,
    },
    /// The marker exists but does not hold a store id.
    #[error(
        "{marker} is not an idemgate store marker ({reason}): restore it, or delete it to have \
         idemgate write it again from {path}'s store id (or start empty if {path} is gone)"
    )]
    BadMarker {
        /// The database file.
        path: PathBuf,
        /// Its marker.
        marker: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A file system call failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// An opened database, with what later raises of its generation need.
pub(super) struct Opened {
    /// The database.
    pub(super) db: Database,
    /// Its marker file.
    marker: PathBuf,
    /// Its store id.
    id: StoreId,
}

/// What a raise of a running store's generation writes to: its marker,
/// which names its id.
#[derive(Debug)]
pub(super) struct Stamp {
    /// The marker file.
    pub(super) marker: PathBuf,
    /// The store id the marker names.
    pub(super) id: StoreId,
}

impl Opened {
    /// The database, and the stamp its generation raises write.
    pub(super) fn split(self) -> (Database, Stamp) {
        let stamp = Stamp {
            marker: self.marker,
            id: self.id,
        };
        (self.db, stamp)
    }
}

/// What is at the database's path before the open.
enum FileState {
    Missing,
    Empty,
    Present,
}

/// `path` with `suffix` appended to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name: OsString = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// The marker file of the database at `path`: `<path>.marker`.
fn marker_path(path: &Path) -> PathBuf {
    sibling(path, ".marker")
}

fn io<'p>(action: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> OpenError + 'p {
    move |source| OpenError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// The database's folder ("." for a bare file name).
fn folder(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Makes a rename or a new file in `dir` durable.
fn sync_folder(dir: &Path) -> Result<(), OpenError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync the folder", dir))
}

/// Opens the database at `path` for the embedded store (see the module
/// docs): creates it on a first start, checks it otherwise, and returns it
/// with every table the store uses created.
pub(super) fn open_database(path: &Path, check: IntegrityCheck) -> Result<Opened, OpenError> {
    std::fs::create_dir_all(folder(path)).map_err(io("create the folder of", path))?;
    let marker = marker_path(path);
    let expected = read_marker(path, &marker)?;
    let state = match std::fs::metadata(path) {
        Ok(meta) if meta.len() == 0 => FileState::Empty,
        Ok(_) => FileState::Present,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileState::Missing,
        Err(e) => return Err(io("read the metadata of", path)(e)),
    };
    match (expected, state) {
        (Some(_), FileState::Missing) => Err(OpenError::Missing {
            path: path.to_owned(),
            marker,
        }),
        (Some(_), FileState::Empty) => Err(OpenError::Emptied {
            path: path.to_owned(),
            marker,
        }),
        (None, FileState::Missing | FileState::Empty) => create(path, &marker),
        (expected, FileState::Present) => open_existing(path, &marker, expected, check),
    }
}

/// The words of [`OpenError::Damaged`] for the database at `path`, for a
/// damage found after the open (`verify`).
pub(super) fn damaged(path: &Path, reason: String) -> String {
    OpenError::Damaged {
        path: path.to_owned(),
        marker: marker_path(path),
        reason,
    }
    .to_string()
}

/// Maps redb's refusal of the file at `path`.
fn refused(path: &Path, marker: &Path, error: DatabaseError) -> OpenError {
    let reason = error.to_string();
    match error {
        DatabaseError::DatabaseAlreadyOpen => OpenError::InUse {
            path: path.to_owned(),
        },
        DatabaseError::Storage(StorageError::Io(source)) => OpenError::Io {
            action: "open",
            path: path.to_owned(),
            source,
        },
        _ => OpenError::Damaged {
            path: path.to_owned(),
            marker: marker.to_owned(),
            reason,
        },
    }
}

/// A first start: the database is created under a temporary name with
/// its tables and a new id, renamed into place, and the marker written.
fn create(path: &Path, marker: &Path) -> Result<Opened, OpenError> {
    let temporary = sibling(path, ".creating");
    match std::fs::remove_file(&temporary) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("remove the unfinished", &temporary)(e)),
    }
    let id = StoreId::random();
    let db = Database::create(&temporary).map_err(|e| refused(&temporary, marker, e))?;
    let (_, generation) = prepare(&db, path, marker, Settle::Create(id))?;
    db.close().map_err(|e| refused(&temporary, marker, e))?;
    std::fs::rename(&temporary, path).map_err(io("move the new database to", path))?;
    sync_folder(folder(path))?;
    write_marker(marker, id, generation)?;
    tracing::info!(path = %path.display(), store_id = %id, "created the embedded store");
    let db = Builder::new()
        .open(path)
        .map_err(|e| refused(path, marker, e))?;
    Ok(Opened {
        db,
        marker: marker.to_owned(),
        id,
    })
}

/// Opens an existing database (with redb's integrity check when `check`
/// says so) and matches its id against the marker's (`expected`; `None`:
/// no marker).
fn open_existing(
    path: &Path,
    marker: &Path,
    expected: Option<Marker>,
    check: IntegrityCheck,
) -> Result<Opened, OpenError> {
    let started = Instant::now();
    let before_serving = check == IntegrityCheck::BeforeServing;
    // Without the check, redb reads the pages the open needs (the
    // allocator state, the tables' roots) unverified, and may panic on a
    // damaged one: damage found before serving, refused like the check's.
    let (db, (found, generation)) = panic_is_damage(path, marker, || {
        let db = Builder::new()
            .set_check_integrity_on_open(before_serving)
            .set_repair_callback(move |session| {
                // Called at each stage of a walk of the whole file: here
                // only when the last commit recorded no allocator state
                // (`writer`: the process died amid writes).
                if !before_serving && session.progress() == 0.0 {
                    tracing::warn!(
                        "embedded store: rebuilding the allocator state from the whole file \
                         (the process stopped amid writes, before the writer recorded it); \
                         this start grows with the file"
                    );
                }
            })
            .open(path)
            .map_err(|e| refused(path, marker, e))?;
        let settle = expected.map_or(Settle::Adopt, Settle::Expect);
        let prepared = prepare(&db, path, marker, settle)?;
        Ok((db, prepared))
    })?;
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    tracing::info!(
        path = %path.display(),
        bytes,
        elapsed_ms = started.elapsed().as_millis(),
        "{}",
        if before_serving {
            "embedded store passed its integrity check"
        } else {
            "embedded store opened (its integrity check runs in the background)"
        }
    );
    write_marker(marker, found, generation)?;
    if expected.is_none() {
        tracing::warn!(
            path = %path.display(),
            marker = %marker.display(),
            store_id = %found,
            "the embedded store had no marker (an older release, or a first start cut short): wrote it"
        );
    }
    Ok(Opened {
        db,
        marker: marker.to_owned(),
        id: found,
    })
}

/// Runs `open`, taking a panic inside redb for [`OpenError::Damaged`].
fn panic_is_damage<T>(
    path: &Path,
    marker: &Path,
    open: impl FnOnce() -> Result<T, OpenError>,
) -> Result<T, OpenError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(open)).unwrap_or_else(|panic| {
        Err(OpenError::Damaged {
            path: path.to_owned(),
            marker: marker.to_owned(),
            reason: format!(
                "redb panicked reading it: {}",
                super::panic_message(panic.as_ref())
            ),
        })
    })
}

/// How [`prepare`] settles the database's store id.
#[derive(Clone, Copy)]
enum Settle {
    /// A new database: store this id.
    Create(StoreId),
    /// The marker holds this id and generation: the database must hold
    /// the id, and a generation no lower.
    Expect(Marker),
    /// No marker: keep the database's id, or give it one.
    Adopt,
}

/// Creates every table the store uses, settles the store id (see
/// [`Settle`]) and raises the generation, in one write transaction;
/// returns the database's id and new generation.
fn prepare(
    db: &Database,
    path: &Path,
    marker: &Path,
    settle: Settle,
) -> Result<(StoreId, u64), OpenError> {
    let damaged = |e: &dyn fmt::Display| OpenError::Damaged {
        path: path.to_owned(),
        marker: marker.to_owned(),
        reason: e.to_string(),
    };
    let mut txn = db.begin_write().map_err(|e| damaged(&e))?;
    // As the writer's idle checkpoint (`writer`): a crash right after the
    // start leaves the allocator state recorded.
    txn.set_quick_repair(true);
    for result in [
        txn.open_table(super::RECORDS).map(drop),
        txn.open_table(super::EXPIRIES).map(drop),
        txn.open_table(super::index::SCORES).map(drop),
        txn.open_table(super::index::ORDER).map(drop),
        txn.open_table(super::books::BOOKS).map(drop),
        txn.open_table(super::owed::OWED).map(drop),
        txn.open_table(super::entities::ENTITIES).map(drop),
        txn.open_table(super::entities::ENTITY_EXPIRIES).map(drop),
        txn.open_table(super::probes::PLANS).map(drop),
        txn.open_table(super::probes::DUE).map(drop),
        txn.open_table(super::audit::AUDIT).map(drop),
    ] {
        result.map_err(|e| damaged(&e))?;
    }
    let id = {
        let mut meta = txn.open_table(META).map_err(|e| damaged(&e))?;
        let stored = meta
            .get(STORE_ID)
            .map_err(|e| damaged(&e))?
            .map(|guard| StoreId::from_bytes(guard.value()));
        let id = match (stored, settle) {
            (Some(None), _) => return Err(damaged(&"its store id is not 16 bytes")),
            (Some(Some(found)), Settle::Expect(expected)) if found != expected.id => {
                return Err(foreign(path, marker, expected.id, Some(found)));
            }
            (Some(Some(found)), _) => found,
            (None, Settle::Expect(expected)) => {
                return Err(foreign(path, marker, expected.id, None));
            }
            (None, Settle::Create(id)) => id,
            (None, Settle::Adopt) => StoreId::random(),
        };
        if stored.is_none() {
            meta.insert(STORE_ID, id.0.as_slice())
                .map_err(|e| damaged(&e))?;
        }
        id
    };
    let inside = read_generation(&txn).map_err(|e| damaged(&e))?;
    if let Settle::Expect(expected) = settle {
        if inside < expected.generation {
            return Err(OpenError::Restored {
                path: path.to_owned(),
                marker: marker.to_owned(),
                expected: expected.generation,
                found: inside,
            });
        }
    }
    let generation = inside + 1;
    write_generation(&txn, generation).map_err(|e| damaged(&e))?;
    txn.commit().map_err(|e| damaged(&e))?;
    Ok((id, generation))
}

/// The generation `txn` sees (0 in a database from before them).
pub(super) fn read_generation(txn: &redb::WriteTransaction) -> Result<u64, redb::Error> {
    let meta = txn.open_table(META)?;
    let stored = meta.get(GENERATION)?;
    Ok(stored
        .and_then(|guard| <[u8; 8]>::try_from(guard.value()).ok())
        .map_or(0, u64::from_be_bytes))
}

/// Sets the generation in `txn`.
pub(super) fn write_generation(
    txn: &redb::WriteTransaction,
    generation: u64,
) -> Result<(), redb::Error> {
    let mut meta = txn.open_table(META)?;
    meta.insert(GENERATION, generation.to_be_bytes().as_slice())?;
    Ok(())
}

fn foreign(path: &Path, marker: &Path, expected: StoreId, found: Option<StoreId>) -> OpenError {
    OpenError::Foreign {
        path: path.to_owned(),
        marker: marker.to_owned(),
        expected,
        found: FoundId(found),
    }
}

#[cfg(test)]
mod tests;
