//! The background check against a file that keeps changing under it, and
//! against damage. Plain threads, no runtime: the check runs on one.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Duration;

use redb::{Builder, Database, ReadableDatabase, ReadableTableMetadata, TableDefinition};

use super::{Integrity, IntegrityCell, start};

const DATA: TableDefinition<'static, u64, &[u8]> = TableDefinition::new("data");

/// A database of `rows` rows of 300 bytes, written with quick repair as the
/// store writes, in batches of 500.
fn filled(path: &std::path::Path, rows: u64) -> Database {
    let db = Builder::new().create(path).unwrap();
    for batch in (0..rows).collect::<Vec<_>>().chunks(500) {
        let mut txn = db.begin_write().unwrap();
        txn.set_quick_repair(true);
        {
            let mut table = txn.open_table(DATA).unwrap();
            for row in batch {
                table
                    .insert(row, [(row % 251) as u8; 300].as_slice())
                    .unwrap();
            }
        }
        txn.commit().unwrap();
    }
    db
}

/// A fresh database of `rows` rows ([`filled`]) in a folder of its own:
/// the folder (keep it), the file, the database.
fn fresh(rows: u64) -> (tempfile::TempDir, std::path::PathBuf, Database) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let db = filled(&path, rows);
    (dir, path, db)
}

fn settled(cell: &IntegrityCell) -> Integrity {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match cell.get() {
            Integrity::Checking { .. } if tokio::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            state => return state,
        }
    }
}

fn checking() -> Arc<IntegrityCell> {
    Arc::new(IntegrityCell::new(Integrity::Stopped))
}

#[test]
fn a_file_rewritten_grown_and_shrunk_during_the_check_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    for round in 0..3_u64 {
        let db = filled(&path, 20_000);
        let cell = Arc::new(IntegrityCell::slowed(
            Integrity::Stopped,
            Duration::from_micros(300),
        ));
        start(&db, &path, Arc::clone(&cell), |reason| reason).unwrap();
        // While it checks: rewrite every row (freeing the pinned pages in
        // later commits), grow the file, then delete most of it.
        let (mut commits, mut during) = (0, 0);
        while matches!(cell.get(), Integrity::Checking { .. }) || commits < 40 {
            let mut txn = db.begin_write().unwrap();
            txn.set_quick_repair(true);
            {
                let mut table = txn.open_table(DATA).unwrap();
                let base = (commits * 997 + round) % 20_000;
                for row in base..base + 500 {
                    table.insert(row, [0xA5; 700].as_slice()).unwrap();
                }
                for row in 20_000 + commits * 300..20_000 + commits * 300 + 300 {
                    table.insert(row, [0x5A; 900].as_slice()).unwrap();
                }
                if commits % 7 == 6 {
                    table.retain(|key, _| key % 3 == 0).unwrap();
                }
            }
            let checking = matches!(cell.get(), Integrity::Checking { .. });
            txn.commit().unwrap();
            commits += 1;
            during += u64::from(checking);
            assert!(commits < 100_000, "the check never ended");
        }
        let state = settled(&cell);
        assert!(
            matches!(state, Integrity::Verified { .. }),
            "round {round}: {state}"
        );
        assert!(
            during >= 5,
            "round {round}: only {during} commits ran during the check"
        );
        drop(db);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn a_flipped_byte_in_a_row_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    drop(filled(&path, 5_000));
    let mut file = std::fs::read(&path).unwrap();
    // A run of the value bytes of row 1000 (1000 % 251 = 247): flip one.
    let needle = [247_u8; 300];
    let at = file
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the row is in the file");
    file[at + 150] ^= 0x10;
    std::fs::write(&path, &file).unwrap();
    let db = Builder::new().open(&path).unwrap();
    let cell = checking();
    start(&db, &path, Arc::clone(&cell), |reason| {
        format!("damaged: {reason}")
    })
    .unwrap();
    let state = settled(&cell);
    let Integrity::Damaged { reason } = state else {
        panic!("not found: {state}");
    };
    assert!(reason.starts_with("damaged: "), "{reason}");
    assert_eq!(cell.damage(), Some(reason.as_str()));
    // The live store was not touched by the check.
    let read = db.begin_read().unwrap();
    assert_eq!(read.open_table(DATA).unwrap().len().unwrap(), 5_000);
}

#[test]
fn dropping_the_store_stops_the_check() {
    let (_dir, path, db) = fresh(20_000);
    let cell = checking();
    cell.stop();
    start(&db, &path, Arc::clone(&cell), |reason| reason).unwrap();
    assert_eq!(settled(&cell), Integrity::Stopped);
}

#[test]
fn a_quiet_file_verifies() {
    let (_dir, path, db) = fresh(20_000);
    let cell = checking();
    start(&db, &path, Arc::clone(&cell), |reason| reason).unwrap();
    let state = settled(&cell);
    assert!(matches!(state, Integrity::Verified { .. }), "{state}");
}
