//! Verifying the embedded store's whole file while it serves.
//!
//! redb's integrity check reads every page of the committed trees, which
//! grows with the store (about 10 s at 10 million records), and it wants
//! the database to itself. Before serving, start-up verifies only what it
//! must (`open`: the file's header and commit slot, its store id and its
//! generation). The checksums of the rest are verified here, on a thread
//! of their own, against a frozen view of the file:
//!
//! - right after the open, before the writer thread starts (so nothing
//!   else commits in between): an empty commit without quick repair (the
//!   pinned commit must record no allocator state, see [`start`]), then a
//!   read transaction begun on the live database and, at once, the file's
//!   header and length copied, so both name the same commit; then an empty
//!   commit that records the allocator state again. The read transaction
//!   pins its commit: redb does not reuse a page of its trees while a live
//!   reader can see it, so they stay as they are on disk while the store
//!   goes on writing elsewhere in the file;
//! - [`FrozenFile`] is a redb storage backend that reads the file through
//!   its own descriptor, answers the header from the copy, and keeps every
//!   write in memory: a second, private [`Database`] opened on it with
//!   the integrity check on open verifies the pinned commit's checksums
//!   and throws its own repair away.
//!
//! The outcome is the store's [`Integrity`]: while it runs the store
//! serves and `/admin/info` (`idemgate info`) says so; a verified file
//! changes nothing; a damaged one marks the store damaged for good (writes
//! and `/readyz` fail with the same words the start-up check would have
//! used), since answers read from it can no longer be trusted. Dropping
//! the store stops the check at its next read.
//!
//! `[store] integrity_check = "before_serving"` keeps redb's check in the
//! open instead (`open`), for whoever prefers a start-up that grows with
//! the store to any window in which a damaged record could be misread.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use redb::{Builder, Database, ReadTransaction, ReadableDatabase, StorageBackend};
use tokio::time::Instant;

impl super::EmbeddedStore {
    /// Where the check of the whole file stands, in words; `None` for a
    /// store a test built over its own backend.
    pub(crate) fn integrity(&self) -> Option<String> {
        self.inner.shared.integrity().map(|state| state.to_string())
    }
}

/// The granularity of [`FrozenFile`]'s in-memory writes (any size works;
/// redb's own page size keeps them aligned).
const CHUNK: usize = 4096;
/// [`CHUNK`] as a file offset.
const CHUNK_BYTES: u64 = CHUNK as u64;
/// The bytes copied from the head of the file before the check: redb's
/// header (its two commit slots) lies in the first page.
const HEADER_BYTES: u64 = CHUNK_BYTES;
/// The check's own page cache: it reads each page once.
const CHECK_CACHE_BYTES: usize = 16 * 1024 * 1024;

/// Where the background check of the file stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Integrity {
    /// `[store] integrity_check = "before_serving"`: redb checked the whole
    /// file in the open.
    CheckedBeforeServing,
    /// The check runs; the store serves meanwhile.
    Checking {
        /// The file's size when the check began.
        bytes: u64,
    },
    /// Every page of the committed trees had its checksum.
    Verified {
        /// The file's size when the check began.
        bytes: u64,
        /// How long the check took.
        elapsed: Duration,
    },
    /// The check found damage: the store refuses writes from now on.
    Damaged {
        /// The start-up check's words for it.
        reason: String,
    },
    /// The store was dropped before the check ended.
    Stopped,
}

impl std::fmt::Display for Integrity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CheckedBeforeServing => f.write_str("checked before serving"),
            Self::Checking { bytes } => write!(f, "checking {bytes} bytes in the background"),
            Self::Verified { bytes, elapsed } => write!(
                f,
                "verified {bytes} bytes in the background in {} ms",
                elapsed.as_millis()
            ),
            Self::Damaged { reason } => f.write_str(reason),
            Self::Stopped => f.write_str("check stopped with the store"),
        }
    }
}

/// The check's state, shared by its thread, the store's health and the
/// status pages.
#[derive(Debug)]
pub(super) struct IntegrityCell {
    state: Mutex<Integrity>,
    /// The damage found, once: read on every write, without a lock.
    damage: OnceLock<String>,
    /// Set when the store is dropped: the check's next read fails.
    stop: Arc<AtomicBool>,
    /// Test seam: a pause before each of the check's reads, so that a
    /// test's commits surely run while it checks.
    #[cfg(test)]
    read_pause: Duration,
}

impl IntegrityCell {
    /// A cell in `state`.
    pub(super) fn new(state: Integrity) -> Self {
        Self {
            state: Mutex::new(state),
            damage: OnceLock::new(),
            stop: Arc::new(AtomicBool::new(false)),
            #[cfg(test)]
            read_pause: Duration::ZERO,
        }
    }

    /// A cell whose check pauses `pause` before each read.
    #[cfg(test)]
    pub(super) fn slowed(state: Integrity, pause: Duration) -> Self {
        Self {
            read_pause: pause,
            ..Self::new(state)
        }
    }

    /// Where the check stands.
    pub(super) fn get(&self) -> Integrity {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Sets where the check stands (the check's thread; tests). Damage,
    /// once set, stays.
    pub(super) fn set(&self, state: Integrity) {
        if let Integrity::Damaged { reason } = &state {
            // Only the first damage is kept: the check runs once.
            drop(self.damage.set(reason.clone()));
        }
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }

    /// The damage found, if any: why every write now fails.
    pub(super) fn damage(&self) -> Option<&str> {
        self.damage.get().map(String::as_str)
    }

    /// Stops a running check at its next read.
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Pins `db`'s last commit, freezes the file's head and length, and checks
/// the pinned commit on a thread of its own, reporting into `cell`. Must
/// run before anything else writes to `db` (the writer thread starts
/// after). `damaged` turns redb's complaint into the start-up check's
/// words.
pub(super) fn start(
    db: &Database,
    path: &Path,
    cell: Arc<IntegrityCell>,
    damaged: impl FnOnce(String) -> String + Send + 'static,
) -> std::io::Result<()> {
    // The pinned commit must record no allocator state. That record lives
    // in redb's system tree, which read transactions do not read, and a
    // check pinned on a commit holding one finds pages of it rewritten by
    // later commits ("Primary is corrupted"): the test
    // `a_file_rewritten_grown_and_shrunk_during_the_check_verifies` failed
    // every time it was pinned right after such a commit. A commit
    // without quick repair drops the record.
    commit_nothing(db, false)?;
    // The pin and the copy of the header name the same commit: nothing
    // commits between them.
    let pin = db.begin_read().map_err(std::io::Error::other)?;
    #[allow(unused_mut)]
    let mut frozen = FrozenFile::freeze(path, Arc::clone(&cell.stop))?;
    #[cfg(test)]
    {
        frozen.read_pause = cell.read_pause;
    }
    // And a commit that records the allocator state again, so a crash
    // before the writer's first checkpoint (`writer`) still finds it.
    commit_nothing(db, true)?;
    let bytes = frozen.frozen_len;
    cell.set(Integrity::Checking { bytes });
    std::thread::Builder::new()
        .name("idemgate-store-check".into())
        .spawn(move || {
            let started = Instant::now();
            let outcome = check(frozen, pin);
            let state = match outcome {
                Ok(()) => Integrity::Verified {
                    bytes,
                    elapsed: started.elapsed(),
                },
                Err(_) if cell.stop.load(Ordering::SeqCst) => Integrity::Stopped,
                Err(reason) => Integrity::Damaged {
                    reason: damaged(reason),
                },
            };
            match &state {
                Integrity::Verified { elapsed, .. } => tracing::info!(
                    bytes,
                    elapsed_ms = elapsed.as_millis(),
                    "embedded store passed its integrity check (in the background)"
                ),
                Integrity::Damaged { reason } => tracing::error!(
                    %reason,
                    "embedded store failed its integrity check: refusing writes"
                ),
                _ => {}
            }
            cell.set(state);
        })?;
    Ok(())
}

/// An empty commit, recording the allocator state or not.
fn commit_nothing(db: &Database, quick_repair: bool) -> std::io::Result<()> {
    let mut txn = db.begin_write().map_err(std::io::Error::other)?;
    txn.set_quick_repair(quick_repair);
    txn.commit().map_err(std::io::Error::other)
}

/// redb's check of the frozen file; `pin` keeps its pages in place until
/// the check is over. A panic inside redb (it may panic on a damaged
/// file) is damage too.
fn check(frozen: FrozenFile, pin: ReadTransaction) -> Result<(), String> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Builder::new()
            .set_check_integrity_on_open(true)
            .set_cache_size(CHECK_CACHE_BYTES)
            .create_with_backend(frozen)
            .map(drop)
            .map_err(|error| error.to_string())
    }));
    drop(pin);
    outcome.unwrap_or_else(|panic| {
        Err(format!(
            "redb panicked reading it: {}",
            super::panic_message(panic.as_ref())
        ))
    })
}

/// The database file as it was when frozen: reads come from the file (the
/// pinned pages do not change), the head from a copy, writes stay in
/// memory. Takes no file lock: the live store holds it.
#[derive(Debug)]
struct FrozenFile {
    path: PathBuf,
    file: File,
    /// The file's length when frozen: bytes past it read as zeros.
    frozen_len: u64,
    view: Mutex<View>,
    stop: Arc<AtomicBool>,
    /// [`IntegrityCell::slowed`]'s pause.
    #[cfg(test)]
    read_pause: Duration,
}

/// What [`FrozenFile`] holds beyond the file.
#[derive(Debug)]
struct View {
    /// The length redb set last.
    len: u64,
    /// The bytes still read from the file where no chunk is held: the
    /// frozen length, lowered by any shrink (what grows back is zeros).
    from_file: u64,
    /// Chunks written (or copied at freezing), by chunk index.
    chunks: HashMap<u64, Box<[u8]>>,
}

impl FrozenFile {
    /// Opens `path` for reading and copies its head.
    fn freeze(path: &Path, stop: Arc<AtomicBool>) -> std::io::Result<Self> {
        let file = File::open(path)?;
        let frozen_len = file.metadata()?.len();
        let frozen = Self {
            path: path.to_owned(),
            file,
            frozen_len,
            view: Mutex::new(View {
                len: frozen_len,
                from_file: frozen_len,
                chunks: HashMap::new(),
            }),
            stop,
            #[cfg(test)]
            read_pause: Duration::ZERO,
        };
        let mut head = vec![0; usize::try_from(HEADER_BYTES.min(frozen_len)).unwrap_or(0)];
        frozen.file.read_exact_at(&mut head, 0)?;
        frozen.write(0, &head)?;
        Ok(frozen)
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The chunk at `index` as this view holds it.
    fn chunk(&self, view: &View, index: u64) -> std::io::Result<Box<[u8]>> {
        if let Some(chunk) = view.chunks.get(&index) {
            return Ok(chunk.clone());
        }
        let mut chunk = vec![0; CHUNK].into_boxed_slice();
        let start = index * CHUNK_BYTES;
        let from_file = within_chunk(view.from_file.saturating_sub(start));
        if from_file > 0 {
            self.file.read_exact_at(&mut chunk[..from_file], start)?;
        }
        Ok(chunk)
    }

    fn stopped(&self) -> std::io::Result<()> {
        if self.stop.load(Ordering::SeqCst) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "the store stopped",
            ));
        }
        Ok(())
    }
}

/// `bytes` (at most a chunk's worth) as an index into a chunk.
fn within_chunk(bytes: u64) -> usize {
    usize::try_from(bytes.min(CHUNK_BYTES)).unwrap_or(CHUNK)
}

/// The part of one read or write that falls in one chunk.
struct Piece {
    /// The chunk's index.
    index: u64,
    /// The file offset the piece starts at.
    at: u64,
    /// Where in the chunk it starts.
    within: usize,
    /// Its length.
    take: usize,
    /// Where in the caller's buffer it starts.
    done: usize,
}

impl Piece {
    /// The file offset just past the piece.
    fn end(&self) -> u64 {
        self.at + self.take as u64
    }
}

/// `len` bytes from `offset`, cut at chunk boundaries.
fn pieces(offset: u64, len: usize) -> impl Iterator<Item = Piece> {
    let mut done = 0;
    std::iter::from_fn(move || {
        (done < len).then(|| {
            let at = offset + done as u64;
            let within = within_chunk(at % CHUNK_BYTES);
            let take = (CHUNK - within).min(len - done);
            let piece = Piece {
                index: at / CHUNK_BYTES,
                at,
                within,
                take,
                done,
            };
            done += take;
            piece
        })
    })
}

impl StorageBackend for FrozenFile {
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.view().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.stopped()?;
        // The check's own thread, never a runtime's.
        #[cfg(test)]
        #[allow(clippy::disallowed_methods)]
        std::thread::sleep(self.read_pause);
        let view = self.view();
        let end = offset + out.len() as u64;
        if end > view.len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("read past the end of {}", self.path.display()),
            ));
        }
        for piece in pieces(offset, out.len()) {
            let target = &mut out[piece.done..piece.done + piece.take];
            if view.chunks.contains_key(&piece.index) || piece.end() > view.from_file {
                let chunk = self.chunk(&view, piece.index)?;
                target.copy_from_slice(&chunk[piece.within..piece.within + piece.take]);
            } else {
                // The common case, straight from the file.
                self.file.read_exact_at(target, piece.at)?;
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let mut view = self.view();
        if len < view.len {
            let first_gone = len.div_ceil(CHUNK_BYTES);
            view.chunks.retain(|index, _| *index < first_gone);
            // A shrunk-then-grown range reads as zeros, not as the file.
            if let Some(partial) = view.chunks.get_mut(&(len / CHUNK_BYTES)) {
                partial[within_chunk(len % CHUNK_BYTES)..].fill(0);
            }
            view.from_file = view.from_file.min(len);
        }
        view.len = len;
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let mut view = self.view();
        let end = offset + data.len() as u64;
        for piece in pieces(offset, data.len()) {
            let mut chunk = self.chunk(&view, piece.index)?;
            chunk[piece.within..piece.within + piece.take]
                .copy_from_slice(&data[piece.done..piece.done + piece.take]);
            view.chunks.insert(piece.index, chunk);
        }
        view.len = view.len.max(end);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
