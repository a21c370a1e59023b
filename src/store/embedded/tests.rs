//! Unit tests of the embedded store's owner-fenced swap.

use super::*;
use crate::store::entity::EntityEffect;

fn key() -> StoreKey {
    StoreKey::new("idemgate", "payments", &"a".repeat(64))
}

fn record(owner: u8, state: RecordState) -> Record {
    Record {
        owner: OwnerToken([owner; 16]),
        ..crate::record::sample(state)
    }
}

fn bytes(record: &Record) -> Vec<u8> {
    record.encode().unwrap().to_vec()
}

/// Swaps the record under [`key`] to `record` (not owed) if `expected`
/// owns it; whether it did.
async fn swap(store: &EmbeddedStore, expected: OwnerToken, record: &Record, ttl: Duration) -> bool {
    store
        .swap(
            &key(),
            expected,
            bytes(record),
            ttl,
            (false, EntityEffect::Keep),
        )
        .await
        .unwrap()
}

async fn stored(store: &EmbeddedStore) -> (Record, Duration) {
    let existing = store.lookup(&key()).await.unwrap().expect("a live record");
    (existing.record, existing.ttl.unwrap())
}

/// Asserts that `expected` is stored under [`key`] with (nearly) an hour
/// to live.
async fn assert_stored_for_an_hour(store: &EmbeddedStore, expected: &Record) {
    let (now_stored, ttl) = stored(store).await;
    assert_eq!(&now_stored, expected);
    assert!(ttl > Duration::from_secs(3_500), "{ttl:?}");
}

#[tokio::test]
async fn swap_is_fenced_by_owner_and_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("swap.redb")).unwrap();
    let first = record(1, RecordState::InFlight(Default::default()));
    let next = record(2, RecordState::Unknown);
    let ten = Duration::from_secs(10);
    let hour = Duration::from_secs(3_600);
    store
        .claim(&key(), first.clone(), ten, (None, None))
        .await
        .unwrap();

    // Expected owner: replaced, with the new TTL.
    assert!(swap(&store, first.owner, &next, hour).await);
    assert_stored_for_an_hour(&store, &next).await;

    // The same swap retried: true, nothing written (TTL untouched).
    assert!(swap(&store, first.owner, &next, ten).await);
    assert_stored_for_an_hour(&store, &next).await;

    // Another owner's record with other bytes: untouched.
    let third = record(3, RecordState::InFlight(Default::default()));
    assert!(!swap(&store, first.owner, &third, ten).await);
    assert!(!swap(&store, third.owner, &third, ten).await);
    assert_eq!(stored(&store).await.0, next);

    // The sweeper's index follows the new expiry: nothing to sweep.
    assert_eq!(store.sweep().await.unwrap(), 0);
}

#[tokio::test]
async fn swap_of_an_absent_or_expired_record_fails() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("swap.redb")).unwrap();
    let first = record(1, RecordState::InFlight(Default::default()));
    let hour = Duration::from_secs(3_600);
    assert!(!swap(&store, first.owner, &first, hour).await);
    assert!(store.lookup(&key()).await.unwrap().is_none());

    // Expired (not yet swept) counts as absent, even for equal bytes.
    store
        .claim(&key(), first.clone(), Duration::ZERO, (None, None))
        .await
        .unwrap();
    let next = record(1, RecordState::Unknown);
    assert!(!swap(&store, first.owner, &next, hour).await);
    assert!(!swap(&store, first.owner, &first, hour).await);
    assert!(store.lookup(&key()).await.unwrap().is_none());
    assert_eq!(store.sweep().await.unwrap(), 1);
}

/// The replay cache's fills read their records with `lookup`, one per
/// key, as fast as replays of uncached keys arrive: a lookup that waited
/// for the blocking pool queued them there (bench/scale's spread rounds:
/// fills landing seconds late kept evicting the keys being replayed).
/// With the pool's one thread busy, a lookup still answers.
#[test]
fn a_lookup_does_not_wait_for_the_blocking_pool() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(&dir.path().join("lookup.redb")).unwrap();
        let claimed = record(1, RecordState::InFlight(Default::default()));
        store
            .claim(
                &key(),
                claimed.clone(),
                Duration::from_secs(60),
                (None, None),
            )
            .await
            .unwrap();
        let (release, parked) = std::sync::mpsc::channel::<()>();
        let busy = tokio::task::spawn_blocking(move || parked.recv());
        let found = tokio::time::timeout(Duration::from_secs(5), store.lookup(&key())).await;
        release.send(()).unwrap();
        busy.await.unwrap().unwrap();
        let found = found.expect("the lookup waited for the blocking pool");
        assert_eq!(found.unwrap().expect("the claim").record, claimed);
    });
}

/// A damaged page that makes redb panic while reading it (here, a leaf
/// claiming more entries than it holds) is a store error for the caller,
/// never a panic in its task: reads run on the calling thread (the claim,
/// the replay cache's fills, the admin views) before the background
/// integrity check may have reached that page.
#[tokio::test]
async fn a_read_of_a_damaged_page_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.redb");
    {
        let store = EmbeddedStore::open(&path).unwrap();
        let claimed = record(1, RecordState::InFlight(Default::default()));
        store
            .claim(&key(), claimed, Duration::from_secs(600), (None, None))
            .await
            .unwrap();
    }
    let mut file = std::fs::read(&path).unwrap();
    let name = key();
    let pages: std::collections::BTreeSet<usize> = (file.windows(name.as_str().len()))
        .enumerate()
        .filter(|(_, w)| *w == name.as_str().as_bytes())
        .map(|(at, _)| at - at % 4096)
        .collect();
    assert!(!pages.is_empty(), "the key is in the file");
    // Every leaf page that holds it: its entry count (bytes 2..4) says far
    // more than the page can hold.
    for page in pages {
        file[page + 2..page + 4].copy_from_slice(&u16::MAX.to_le_bytes());
    }
    std::fs::write(&path, &file).unwrap();
    let store = EmbeddedStore::open(&path).unwrap();
    let read = tokio::spawn(async move { store.lookup(&key()).await.map(|_| ()) });
    let outcome = read.await.expect("the read's task did not panic");
    assert!(outcome.is_err(), "a damaged page read as {outcome:?}");
}

/// A lookup reads on the calling thread and never waits, so a loop of
/// them (the inbox's repair pass over owed keys) would hold a
/// current-thread runtime until it ended; each lookup spends the task's
/// cooperative budget, so the loop yields and other tasks run meanwhile.
#[tokio::test(flavor = "current_thread")]
async fn a_loop_of_lookups_lets_other_tasks_run() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("loop.redb")).unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
    let mut lookups = 0;
    while !ran.load(Ordering::SeqCst) && lookups < 10_000 {
        store.lookup(&key()).await.unwrap();
        lookups += 1;
    }
    assert!(
        ran.load(Ordering::SeqCst),
        "no other task ran during {lookups} lookups"
    );
}
