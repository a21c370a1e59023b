//! Unit tests of the embedded store's owner-fenced swap.

use super::*;
use crate::record::Fingerprint;

fn key() -> StoreKey {
    StoreKey::new("idemgate", "payments", &"a".repeat(64))
}

fn record(owner: u8, state: RecordState) -> Record {
    Record {
        owner: OwnerToken([owner; 16]),
        fingerprint: Fingerprint([7; 32]),
        created_at_ms: 1_000,
        answered_at_ms: 1_000,
        trace: None,
        state,
    }
}

fn bytes(record: &Record) -> Vec<u8> {
    record.encode().unwrap().to_vec()
}

async fn stored(store: &EmbeddedStore) -> (Record, Duration) {
    let existing = store.lookup(&key()).await.unwrap().expect("a live record");
    (existing.record, existing.ttl.unwrap())
}

#[tokio::test]
async fn swap_is_fenced_by_owner_and_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("swap.redb")).unwrap();
    let first = record(1, RecordState::InFlight);
    let next = record(2, RecordState::Unknown);
    let ten = Duration::from_secs(10);
    let hour = Duration::from_secs(3_600);
    store.claim(&key(), first.clone(), ten).await.unwrap();

    // Expected owner: replaced, with the new TTL.
    assert!(
        store
            .swap(&key(), first.owner, bytes(&next), hour, false)
            .await
            .unwrap()
    );
    let (now_stored, ttl) = stored(&store).await;
    assert_eq!(now_stored, next);
    assert!(ttl > Duration::from_secs(3_500), "{ttl:?}");

    // The same swap retried: true, nothing written (TTL untouched).
    assert!(
        store
            .swap(&key(), first.owner, bytes(&next), ten, false)
            .await
            .unwrap()
    );
    let (now_stored, ttl) = stored(&store).await;
    assert_eq!(now_stored, next);
    assert!(ttl > Duration::from_secs(3_500), "{ttl:?}");

    // Another owner's record with other bytes: untouched.
    let third = record(3, RecordState::InFlight);
    assert!(
        !store
            .swap(&key(), first.owner, bytes(&third), ten, false)
            .await
            .unwrap()
    );
    assert!(
        !store
            .swap(&key(), third.owner, bytes(&third), ten, false)
            .await
            .unwrap()
    );
    assert_eq!(stored(&store).await.0, next);

    // The sweeper's index follows the new expiry: nothing to sweep.
    assert_eq!(store.sweep().await.unwrap(), 0);
}

#[tokio::test]
async fn swap_of_an_absent_or_expired_record_fails() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("swap.redb")).unwrap();
    let first = record(1, RecordState::InFlight);
    let hour = Duration::from_secs(3_600);
    assert!(
        !store
            .swap(&key(), first.owner, bytes(&first), hour, false)
            .await
            .unwrap()
    );
    assert!(store.lookup(&key()).await.unwrap().is_none());

    // Expired (not yet swept) counts as absent, even for equal bytes.
    store
        .claim(&key(), first.clone(), Duration::ZERO)
        .await
        .unwrap();
    let next = record(1, RecordState::Unknown);
    assert!(
        !store
            .swap(&key(), first.owner, bytes(&next), hour, false)
            .await
            .unwrap()
    );
    assert!(
        !store
            .swap(&key(), first.owner, bytes(&first), hour, false)
            .await
            .unwrap()
    );
    assert!(store.lookup(&key()).await.unwrap().is_none());
    assert_eq!(store.sweep().await.unwrap(), 1);
}
