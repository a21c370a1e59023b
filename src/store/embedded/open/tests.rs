//! The start-up check's decisions on real files: first start, restart,
//! a lost or emptied database, a foreign one, an upgrade, a lost marker.

use super::*;

fn dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("data").join("idemgate.redb");
    (dir, path)
}

fn marker_id(path: &Path) -> StoreId {
    read_marker(path, &marker_path(path))
        .unwrap()
        .expect("a marker")
        .id
}

#[test]
fn a_first_start_creates_the_database_and_its_marker_and_a_restart_accepts_them() {
    let (_dir, path) = dir();
    drop(
        open_database(&path, IntegrityCheck::BeforeServing)
            .expect("first start")
            .db,
    );
    let id = marker_id(&path);
    assert!(!sibling(&path, ".creating").exists());
    drop(open_database(&path, IntegrityCheck::BeforeServing).expect("restart"));
    assert_eq!(marker_id(&path), id);
}

#[test]
fn a_database_emptied_or_deleted_under_its_marker_is_refused_until_the_marker_goes() {
    let (_dir, path) = dir();
    drop(open_database(&path, IntegrityCheck::BeforeServing).unwrap());
    std::fs::File::create(&path).unwrap(); // truncated to 0 bytes
    let error = open_database(&path, IntegrityCheck::BeforeServing)
        .map(drop)
        .unwrap_err();
    assert!(matches!(error, OpenError::Emptied { .. }), "{error}");
    assert!(error.to_string().contains("delete"), "{error}");
    std::fs::remove_file(&path).unwrap();
    let error = open_database(&path, IntegrityCheck::BeforeServing)
        .map(drop)
        .unwrap_err();
    assert!(matches!(error, OpenError::Missing { .. }), "{error}");
    std::fs::remove_file(marker_path(&path)).unwrap();
    drop(open_database(&path, IntegrityCheck::BeforeServing).expect("a deliberate fresh start"));
}

#[test]
fn another_store_s_database_under_a_marker_is_refused() {
    let (_dir, path) = dir();
    drop(open_database(&path, IntegrityCheck::BeforeServing).unwrap());
    let (_other_dir, other) = dir();
    drop(open_database(&other, IntegrityCheck::BeforeServing).unwrap());
    std::fs::copy(&other, &path).unwrap();
    let error = open_database(&path, IntegrityCheck::BeforeServing)
        .map(drop)
        .unwrap_err();
    assert!(matches!(error, OpenError::Foreign { .. }), "{error}");
}

#[test]
fn a_database_of_an_older_release_gets_an_id_and_a_marker() {
    let (_dir, path) = dir();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    {
        // What the release before markers created: tables, no id.
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(super::super::RECORDS).unwrap();
        txn.commit().unwrap();
    }
    drop(open_database(&path, IntegrityCheck::BeforeServing).expect("the upgrade starts"));
    let id = marker_id(&path);
    drop(open_database(&path, IntegrityCheck::BeforeServing).expect("and starts again"));
    assert_eq!(marker_id(&path), id);
}

#[test]
fn a_marker_lost_after_the_database_was_created_is_written_again_with_its_id() {
    let (_dir, path) = dir();
    drop(open_database(&path, IntegrityCheck::BeforeServing).unwrap());
    let id = marker_id(&path);
    // A crash between the rename and the marker, or a deleted marker.
    std::fs::remove_file(marker_path(&path)).unwrap();
    drop(open_database(&path, IntegrityCheck::BeforeServing).expect("starts"));
    assert_eq!(marker_id(&path), id);
}

#[test]
fn a_first_start_cut_short_before_the_rename_leaves_nothing_that_blocks_the_next() {
    let (_dir, path) = dir();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(sibling(&path, ".creating"), b"half a database").unwrap();
    drop(
        open_database(&path, IntegrityCheck::BeforeServing)
            .expect("first start")
            .db,
    );
    assert!(!sibling(&path, ".creating").exists());
    marker_id(&path);
}

#[test]
fn a_marker_without_an_id_is_refused() {
    let (_dir, path) = dir();
    drop(open_database(&path, IntegrityCheck::BeforeServing).unwrap());
    std::fs::write(marker_path(&path), "something else\n").unwrap();
    let error = open_database(&path, IntegrityCheck::BeforeServing)
        .map(drop)
        .unwrap_err();
    assert!(matches!(error, OpenError::BadMarker { .. }), "{error}");
}

#[test]
fn a_database_open_elsewhere_is_reported_as_in_use() {
    let (_dir, path) = dir();
    let held = open_database(&path, IntegrityCheck::BeforeServing).unwrap();
    let error = open_database(&path, IntegrityCheck::BeforeServing)
        .map(drop)
        .unwrap_err();
    assert!(matches!(error, OpenError::InUse { .. }), "{error}");
    drop(held);
}

#[test]
fn an_older_copy_of_the_database_is_refused_until_the_marker_goes() {
    let (_dir, path) = dir();
    drop(open_database(&path, IntegrityCheck::BeforeServing).unwrap());
    let backup = sibling(&path, ".backup");
    std::fs::copy(&path, &backup).unwrap();
    // A restart raises the generation, inside and in the marker.
    drop(open_database(&path, IntegrityCheck::BeforeServing).unwrap());
    let seen = read_marker(&path, &marker_path(&path)).unwrap().unwrap();
    assert_eq!(seen.generation, 2);
    std::fs::copy(&backup, &path).unwrap();
    let error = open_database(&path, IntegrityCheck::BeforeServing)
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(
            error,
            OpenError::Restored {
                expected: 2,
                found: 1,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("older copy"), "{error}");
    std::fs::remove_file(marker_path(&path)).unwrap();
    drop(
        open_database(&path, IntegrityCheck::BeforeServing)
            .expect("started on the copy on purpose"),
    );
    let marker = read_marker(&path, &marker_path(&path)).unwrap().unwrap();
    assert_eq!(marker.generation, 2, "the copy's generation, raised");
}

#[test]
fn a_marker_one_raise_behind_its_database_is_accepted() {
    let (_dir, path) = dir();
    let opened = open_database(&path, IntegrityCheck::BeforeServing).unwrap();
    let (db, stamp) = opened.split();
    let txn = db.begin_write().unwrap();
    write_generation(&txn, 5).unwrap();
    txn.commit().unwrap();
    drop(db);
    // The crash between the commit and the marker: the marker says 1.
    assert_eq!(
        read_marker(&path, &stamp.marker)
            .unwrap()
            .unwrap()
            .generation,
        1
    );
    drop(open_database(&path, IntegrityCheck::BeforeServing).expect("a lagging marker is fine"));
    let marker = read_marker(&path, &stamp.marker).unwrap().unwrap();
    assert_eq!(marker.generation, 6);
}
