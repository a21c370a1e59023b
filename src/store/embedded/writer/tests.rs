//! Unit tests of the group commit and of recovery from storage faults
//! (a failing commit, a panic, a disk that fills up and frees again).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redb::backends::FileBackend;
use redb::{Builder, Database, StorageBackend, TableDefinition};

use super::super::{EXPIRIES, EmbeddedStore, RECORDS, backend};
use super::GroupCommit;
use crate::record::{OwnerToken, Record, RecordState};
use crate::store::entity::EntityEffect;
use crate::store::{ClaimOutcome, Store, StoreError, StoreKey};

/// A table of the tests' own writes.
const SCRATCH: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("scratch");

/// How long a test waits at most for the writer to recover.
pub(super) const RECOVERY: Duration = Duration::from_secs(10);

/// A store whose first write of a batch waits `delay_ms` for company, so
/// concurrent writes share a commit.
pub(super) fn grouped(dir: &tempfile::TempDir, delay_ms: u64) -> EmbeddedStore {
    let group = GroupCommit {
        commit_delay: Duration::from_millis(delay_ms),
        ..GroupCommit::default()
    };
    EmbeddedStore::open_with(
        &dir.path().join("writer.redb"),
        group,
        crate::config::IntegrityCheck::default(),
    )
    .unwrap()
}

/// Writes `value` under `name` in [`SCRATCH`].
pub(super) async fn put(
    store: &EmbeddedStore,
    name: &str,
    value: Vec<u8>,
) -> Result<(), StoreError> {
    let name = name.to_owned();
    store
        .transact(move |txn| {
            let mut table = txn.open_table(SCRATCH).map_err(backend)?;
            table
                .insert(name.as_str(), value.as_slice())
                .map_err(backend)?;
            Ok(((), true))
        })
        .await
}

/// What [`put`] stored under `name`.
async fn get(store: &EmbeddedStore, name: &str) -> Option<Vec<u8>> {
    let name = name.to_owned();
    store
        .read(SCRATCH, move |table| {
            Ok(table
                .get(name.as_str())
                .map_err(backend)?
                .map(|guard| guard.value().to_vec()))
        })
        .await
        .unwrap()
}

pub(super) fn commits(store: &EmbeddedStore) -> usize {
    store.inner.shared.commits.load(Ordering::SeqCst)
}

/// Waits until the store is ready again; panics after [`RECOVERY`].
async fn recovered(store: &EmbeddedStore) {
    let deadline = tokio::time::Instant::now() + RECOVERY;
    while store.ping().await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "never recovered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn concurrent_writes_share_one_durable_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = grouped(&dir, 100);
    put(&store, "warm", vec![0]).await.unwrap();
    let before = commits(&store);

    let writes = (0..20).map(|n| {
        let store = store.clone();
        tokio::spawn(async move { put(&store, &format!("k{n}"), vec![n]).await })
    });
    for write in futures_join(writes).await {
        write.unwrap();
    }
    let used = commits(&store) - before;
    assert!((1..=3).contains(&used), "20 writes took {used} commits");
    drop(store);

    // Durable: all there after reopening.
    let store = EmbeddedStore::open(&dir.path().join("writer.redb")).unwrap();
    for n in 0..20_u8 {
        assert_eq!(get(&store, &format!("k{n}")).await, Some(vec![n]));
    }
}

/// Awaits every task, in order.
pub(super) async fn futures_join<T>(
    tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for task in tasks.collect::<Vec<_>>() {
        out.push(task.await.unwrap());
    }
    out
}

#[tokio::test]
async fn each_caller_gets_its_own_answer() {
    let dir = tempfile::tempdir().unwrap();
    let store = grouped(&dir, 5);
    let calls = (0..64_u64).map(|n| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .transact(move |_| Ok((n * 2, n % 2 == 0)))
                .await
                .unwrap()
        })
    });
    let answers = futures_join(calls).await;
    assert_eq!(answers, (0..64).map(|n| n * 2).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_failing_write_fails_alone_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = grouped(&dir, 100);
    put(&store, "warm", vec![0]).await.unwrap();
    let failing = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .transact(|txn| -> Result<((), bool), StoreError> {
                    let mut table = txn.open_table(SCRATCH).map_err(backend)?;
                    table.insert("partial", &[1_u8][..]).map_err(backend)?;
                    Err(StoreError::Backend("boom".into()))
                })
                .await
        })
    };
    let good = (0..5_u8).map(|n| {
        let store = store.clone();
        tokio::spawn(async move { put(&store, &format!("g{n}"), vec![n]).await })
    });
    let good = futures_join(good).await;
    let failed = failing.await.unwrap();
    assert!(
        matches!(&failed, Err(StoreError::Backend(m)) if m == "boom"),
        "{failed:?}"
    );
    for result in good {
        result.unwrap();
    }
    assert_eq!(get(&store, "partial").await, None);
    for n in 0..5_u8 {
        assert_eq!(get(&store, &format!("g{n}")).await, Some(vec![n]));
    }
    // An operation's own error is not the store's.
    store.ping().await.unwrap();
}

#[tokio::test]
async fn a_failing_commit_fails_its_whole_batch_until_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let store = grouped(&dir, 100);
    put(&store, "warm", vec![0]).await.unwrap();
    store.inner.shared.fail_commits.store(1, Ordering::SeqCst);
    let batch = (0..5_u8).map(|n| {
        let store = store.clone();
        tokio::spawn(async move { put(&store, &format!("b{n}"), vec![n]).await })
    });
    for result in futures_join(batch).await {
        assert!(
            matches!(&result, Err(StoreError::Backend(m)) if m.contains("injected")),
            "{result:?}"
        );
    }
    // Not ready, and writes fail fast, until a probe write commits.
    assert!(store.ping().await.is_err());
    assert!(put(&store, "meanwhile", vec![9]).await.is_err());
    recovered(&store).await;
    for n in 0..5_u8 {
        assert_eq!(get(&store, &format!("b{n}")).await, None);
    }
    put(&store, "after", vec![1]).await.unwrap();
    assert_eq!(get(&store, "after").await, Some(vec![1]));
}

#[tokio::test]
async fn a_batch_that_changes_nothing_is_not_committed() {
    let dir = tempfile::tempdir().unwrap();
    let store = grouped(&dir, 0);
    let before = commits(&store);
    let found = store.transact(|_| Ok((7, false))).await.unwrap();
    assert_eq!(found, 7);
    assert_eq!(commits(&store), before);
    put(&store, "x", vec![1]).await.unwrap();
    assert_eq!(commits(&store), before + 1);
}

#[tokio::test]
async fn a_panic_fails_its_batch_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = grouped(&dir, 0);
    let panicked = store
        .transact(|_| -> Result<((), bool), StoreError> { panic!("entered unreachable code") })
        .await;
    assert!(
        matches!(&panicked, Err(StoreError::Backend(_))),
        "{panicked:?}"
    );
    recovered(&store).await;
    put(&store, "after", vec![1]).await.unwrap();
    assert_eq!(get(&store, "after").await, Some(vec![1]));
}

/// A file on a disk that can fill up: while `full`, the file can not grow
/// (like ENOSPC: writes inside it still land).
#[derive(Debug)]
struct FillingFile {
    file: FileBackend,
    full: Arc<AtomicBool>,
}

impl FillingFile {
    fn open(path: &std::path::Path, full: &Arc<AtomicBool>) -> Result<Self, redb::DatabaseError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(redb::StorageError::from)?;
        Ok(Self {
            file: FileBackend::new(file)?,
            full: Arc::clone(full),
        })
    }

    fn refuse_growth(&self, end: u64) -> Result<(), std::io::Error> {
        if self.full.load(Ordering::SeqCst) && end > self.file.len()? {
            return Err(std::io::ErrorKind::StorageFull.into());
        }
        Ok(())
    }
}

impl StorageBackend for FillingFile {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.file.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.file.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.refuse_growth(len)?;
        self.file.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.file.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.refuse_growth(offset + data.len() as u64)?;
        self.file.write(offset, data)
    }
    fn close(&self) -> Result<(), std::io::Error> {
        self.file.close()
    }
}

/// A store on a [`FillingFile`] at `path`, reopened on one too.
fn on_filling_disk(path: &std::path::Path, full: &Arc<AtomicBool>) -> EmbeddedStore {
    let open = {
        let (path, full) = (path.to_owned(), Arc::clone(full));
        move || Builder::new().create_with_backend(FillingFile::open(&path, &full)?)
    };
    let db: Database = open().unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(RECORDS).unwrap();
    txn.open_table(EXPIRIES).unwrap();
    txn.open_table(SCRATCH).unwrap();
    txn.commit().unwrap();
    // The disk takes new data while it is not full.
    let room = {
        let full = Arc::clone(full);
        move || {
            if full.load(Ordering::SeqCst) {
                Err(std::io::ErrorKind::StorageFull.into())
            } else {
                Ok(())
            }
        }
    };
    EmbeddedStore::start(db, Box::new(open), Box::new(room), GroupCommit::default()).unwrap()
}

fn key(n: u8) -> StoreKey {
    StoreKey::new("idemgate", "hook", &format!("{n:02x}").repeat(32))
}

#[tokio::test]
async fn a_full_disk_still_replays_and_recovers_once_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let full = Arc::new(AtomicBool::new(false));
    let store = on_filling_disk(&dir.path().join("full.redb"), &full);
    let hour = Duration::from_secs(3_600);
    let answered = Record {
        owner: OwnerToken([1; 16]),
        ..crate::record::sample(RecordState::InFlight(Default::default()))
    };
    let ClaimOutcome::Claimed(_) = store
        .claim(&key(1), answered.clone(), hour, (None, None))
        .await
        .unwrap()
    else {
        panic!("claimed")
    };
    let completed = Record {
        owner: answered.owner,
        ..crate::record::sample(RecordState::Unknown)
    };
    store
        .complete(
            &key(1),
            answered.owner,
            &completed,
            hour,
            EntityEffect::Keep,
        )
        .await
        .unwrap();

    // The disk fills: writes fail (as Full, a transient error) and the
    // store is not ready.
    full.store(true, Ordering::SeqCst);
    let mut failure = None;
    for n in 0..400 {
        if let Err(error) = put(&store, &format!("big{n}"), vec![7; 64 * 1024]).await {
            failure = Some(error);
            break;
        }
    }
    let failure = failure.expect("a full disk fails a write");
    assert!(matches!(failure, StoreError::Full(_)), "{failure:?}");
    assert!(store.ping().await.is_err());
    // New keys fail fast, as a full store (the pipeline keeps retrying an
    // answer in hand on a transient error).
    let refused = store
        .claim(&key(2), answered.clone(), hour, (None, None))
        .await;
    assert!(matches!(refused, Err(StoreError::Full(_))), "{refused:?}");

    // The stored answer is still served, without a write.
    match store
        .claim(&key(1), answered.clone(), hour, (None, None))
        .await
        .unwrap()
    {
        ClaimOutcome::Existing(existing) => assert_eq!(existing.record, completed),
        other => panic!("claimed a key that holds an answer: {other:?}"),
    }

    // Space returns: ready again and new keys succeed, no restart.
    full.store(false, Ordering::SeqCst);
    recovered(&store).await;
    assert!(matches!(
        store
            .claim(&key(2), answered, hour, (None, None))
            .await
            .unwrap(),
        ClaimOutcome::Claimed(_)
    ));
}

#[tokio::test]
async fn a_full_disk_is_not_ready_while_a_probe_fits_in_free_pages() {
    let dir = tempfile::tempdir().unwrap();
    let full = Arc::new(AtomicBool::new(false));
    let store = on_filling_disk(&dir.path().join("free-pages.redb"), &full);
    // Free pages inside the file: a big value written, then overwritten by
    // a small one (redb reuses the pages once no reader needs them).
    put(&store, "big", vec![3; 256 * 1024]).await.unwrap();
    put(&store, "big", vec![3; 8]).await.unwrap();
    put(&store, "small", vec![4; 8]).await.unwrap();

    full.store(true, Ordering::SeqCst);
    let mut failed = false;
    for n in 0..400 {
        if put(&store, &format!("fill{n}"), vec![7; 64 * 1024])
            .await
            .is_err()
        {
            failed = true;
            break;
        }
    }
    assert!(failed, "a full disk fails a write");
    // Several recovery attempts (backoff 50, 100, 200, 400 ms): the probe
    // alone would commit into the file's free pages, the disk is still full.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let ping = store.ping().await;
    assert!(
        matches!(ping, Err(StoreError::Full(_))),
        "ready on a full disk: {ping:?}"
    );

    full.store(false, Ordering::SeqCst);
    recovered(&store).await;
    put(&store, "after", vec![5; 64 * 1024]).await.unwrap();
}

/// A 2 MiB tmpfs mounted on a temporary folder, unmounted on drop; `None`
/// (with the reason printed) where mounting is not allowed.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount() -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
            .arg(dir.path())
            .output();
        match mounted {
            Ok(out) if out.status.success() => Some(Self { dir }),
            Ok(out) => {
                eprintln!(
                    "skipped: mount -t tmpfs failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(error) => {
                eprintln!("skipped: can not run mount: {error}");
                None
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let unmounted = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
        if !unmounted.is_ok_and(|status| status.success()) {
            eprintln!("could not unmount {}", self.dir.path().display());
        }
    }
}

#[tokio::test]
async fn a_real_full_filesystem_replays_and_recovers() {
    let Some(disk) = SmallDisk::mount() else {
        return;
    };
    let store = EmbeddedStore::open(&disk.dir.path().join("full.redb")).unwrap();
    let hour = Duration::from_secs(3_600);
    let claim = |n: u8| Record {
        owner: OwnerToken([n; 16]),
        ..crate::record::sample(RecordState::InFlight(Default::default()))
    };
    let ClaimOutcome::Claimed(_) = store
        .claim(&key(1), claim(1), hour, (None, None))
        .await
        .unwrap()
    else {
        panic!("claimed")
    };
    let done = Record {
        owner: OwnerToken([1; 16]),
        ..crate::record::sample(RecordState::Unknown)
    };
    store
        .complete(&key(1), done.owner, &done, hour, EntityEffect::Keep)
        .await
        .unwrap();

    // Fill the filesystem with another file, then write until refused.
    let filler = disk.dir.path().join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let chunk = vec![1_u8; 64 * 1024];
    while std::io::Write::write_all(&mut file, &chunk).is_ok() {}
    drop(file);
    let mut refused = None;
    for n in 0..400 {
        if let Err(error) = put(&store, &format!("big{n}"), vec![7; 64 * 1024]).await {
            refused = Some(error);
            break;
        }
    }
    let refused = refused.expect("a full filesystem refuses a write");
    assert!(refused.is_transient(), "{refused:?}");
    assert!(store.ping().await.is_err());
    // Still not ready after several recovery attempts: the disk is full,
    // even if a probe fits in the file's free pages.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(store.ping().await.is_err(), "ready on a full filesystem");
    match store
        .claim(&key(1), claim(1), hour, (None, None))
        .await
        .unwrap()
    {
        ClaimOutcome::Existing(existing) => assert_eq!(existing.record, done),
        other => panic!("claimed a key that holds an answer: {other:?}"),
    }

    // Space returns.
    std::fs::remove_file(&filler).unwrap();
    recovered(&store).await;
    assert!(matches!(
        store
            .claim(&key(2), claim(2), hour, (None, None))
            .await
            .unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    drop(store);
}
