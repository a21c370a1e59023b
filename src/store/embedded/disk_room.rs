//! Whether the disk under the embedded store has room for new data: the
//! check a failing store passes before it reports ready again.
//!
//! After a full disk, the writer's check write is not enough: redb keeps
//! freed pages inside its file, so a small commit can land in them on a
//! disk that is still full, `/readyz` would say 200 and the next real
//! batch that needs new pages fails again. So recovery also needs the
//! filesystem to take [`ROOM`] bytes of new data: a real write (of a
//! scratch file next to the database, synced, then removed), not a
//! `statvfs` reading, which says nothing of root's reserved blocks,
//! quotas, or sparse files that take no blocks until written.

use std::io::Write;
use std::path::{Path, PathBuf};

/// How much new data the disk must take before a failing store is ready
/// again: about one group commit's page writes (a commit at 7k first
/// deliveries/s writes ~45 pages of 4 KiB; docs/performance.md,
/// "Embedded store"), so the first batches after recovery fit.
pub(super) const ROOM: usize = 256 * 1024;

/// The check `Shared` runs before a recovery's check write: `Ok` when the disk
/// takes new data.
pub(super) type DiskRoom = Box<dyn Fn() -> std::io::Result<()> + Send + Sync>;

/// The room a store needs whose largest write holds `largest` bytes (the
/// largest answer it may have to keep, `[limits] max_stored_answer_bytes`):
/// that write and a commit's pages besides. Ready means able to keep any
/// answer: on a disk with room for small writes only, a large answer would
/// be sent and then fail to store, and readiness would flap with each.
pub(crate) fn needed_for(largest: usize) -> usize {
    largest.saturating_add(ROOM)
}

/// The [`DiskRoom`] check of the database at `path`: writes `bytes` bytes to
/// `<path>.room`, syncs and removes it (removed on failure too).
pub(super) fn on_disk_of(path: &Path, bytes: usize) -> DiskRoom {
    let scratch = scratch_path(path);
    Box::new(move || {
        let written = write_scratch(&scratch, bytes);
        let removed = match std::fs::remove_file(&scratch) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        };
        written.and(removed)
    })
}

/// `<path>.room`, next to the database (so on its filesystem).
fn scratch_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".room");
    PathBuf::from(name)
}

fn write_scratch(scratch: &Path, bytes: usize) -> std::io::Result<()> {
    let mut file = std::fs::File::create(scratch)?;
    // Non-zero bytes: a filesystem may keep all-zero blocks sparse.
    let block = [0xA5; 64 * 1024];
    let mut left = bytes;
    while left > 0 {
        let now = left.min(block.len());
        file.write_all(&block[..now])?;
        left -= now;
    }
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_with_room_passes_and_keeps_no_scratch_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("store.redb");
        on_disk_of(&db, needed_for(1 << 20))().unwrap();
        assert!(!scratch_path(&db).exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_missing_folder_fails() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("gone").join("store.redb");
        assert!(on_disk_of(&db, ROOM)().is_err());
    }

    #[test]
    fn the_room_needed_holds_the_largest_answer_and_a_commit() {
        assert_eq!(needed_for(1 << 20), (1 << 20) + ROOM);
        assert_eq!(needed_for(usize::MAX), usize::MAX);
    }

    /// The check writes (and syncs) the whole size asked for: on a disk
    /// with less room it fails, which is what keeps `/readyz` at 503.
    #[test]
    fn the_check_writes_every_byte_it_asks_for() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("store.redb");
        let scratch = scratch_path(&db);
        write_scratch(&scratch, ROOM + 3).unwrap();
        assert_eq!(
            std::fs::metadata(&scratch).unwrap().len(),
            (ROOM + 3) as u64
        );
    }
}
