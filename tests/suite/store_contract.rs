//! One contract, two stores: the same suite runs against the Redis store
//! (real redis-server) and the embedded redb store.

use std::time::Duration;

use crate::support::RedisServer;
use bytes::Bytes;
use idemgate::record::{Fingerprint, OwnerMint, Record, RecordState, StoredBody, StoredResponse};
use idemgate::store::entity::EntityEffect;
use idemgate::store::{
    ClaimOutcome, Completion, Lease, Observed, Purged, Releasing, SeenRecord, Store, StoreError,
    StoreKey,
};

const LONG: Duration = Duration::from_secs(60);

fn key(name: &str) -> StoreKey {
    StoreKey::new("contract", "r", name)
}

fn answer() -> RecordState {
    RecordState::Completed(StoredResponse {
        status: 201,
        headers: vec![(Bytes::from_static(b"x-a"), Bytes::from_static(b"1"))],
        body: StoredBody::Kept(Bytes::from_static(b"done")),
    })
}

async fn claimed<S: Store>(store: &S, mint: &OwnerMint, key: &StoreKey, ttl: Duration) -> Lease {
    match store
        .claim(
            key,
            Record::in_flight(mint.next(), Fingerprint([1; 32]), None),
            ttl,
            (None, None),
        )
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed(lease) => lease,
        other => panic!("expected a free key, found {other:?}"),
    }
}

async fn contract<S: Store>(store: &S) {
    let mint = OwnerMint::new();

    // claim, then a second claim sees the first record and its TTL
    let k = key("claim");
    let lease = claimed(store, &mint, &k, LONG).await;
    match store
        .claim(
            &k,
            Record::in_flight(mint.next(), Fingerprint([2; 32]), None),
            LONG,
            (None, None),
        )
        .await
        .unwrap()
    {
        ClaimOutcome::Existing(existing) => {
            assert_eq!(existing.record.fingerprint, Fingerprint([1; 32]));
            assert_eq!(existing.record.owner, lease.owner());
            let ttl = existing.ttl.expect("ttl");
            assert!(ttl > Duration::from_secs(55) && ttl <= LONG, "{ttl:?}");
            assert_eq!(
                existing.observe(Duration::from_secs(10)),
                Observed::InFlight
            );
        }
        other => panic!("claimed twice: {other:?}"),
    }

    // complete stores the answer with the new TTL; renew no longer applies
    let completed = lease.record().with_state(answer());
    assert_eq!(
        store
            .complete(
                lease.key(),
                lease.owner(),
                &completed,
                Duration::from_secs(3600),
                EntityEffect::Keep
            )
            .await
            .unwrap(),
        Completion::Stored
    );
    let found = store.lookup(&k).await.unwrap().expect("record");
    assert_eq!(found.record, completed);
    assert!(found.ttl.unwrap() > Duration::from_secs(3500));

    // release by the owner deletes; the next claim is free
    let k = key("release");
    let lease = claimed(store, &mint, &k, LONG).await;
    assert!(
        store
            .release(lease.key(), lease.owner(), Releasing::ClaimOnly)
            .await
            .unwrap()
    );
    assert!(store.lookup(&k).await.unwrap().is_none());
    let _ = claimed(store, &mint, &k, LONG).await;

    // a release still running after the sender's answer leaves a record
    // its owner wrote over the claim (a duplicate may have been answered
    // from it); one before the answer deletes it
    let k = key("release-written");
    let lease = claimed(store, &mint, &k, LONG).await;
    let written = lease.record().with_state(RecordState::Unknown);
    assert_eq!(
        store
            .complete(
                lease.key(),
                lease.owner(),
                &written,
                LONG,
                EntityEffect::Keep
            )
            .await
            .unwrap(),
        Completion::Stored
    );
    assert!(
        !store
            .release(lease.key(), lease.owner(), Releasing::ClaimOnly)
            .await
            .unwrap(),
        "a claim-only release leaves a written record"
    );
    assert!(store.lookup(&k).await.unwrap().is_some());
    assert!(
        store
            .release(lease.key(), lease.owner(), Releasing::Owned)
            .await
            .unwrap()
    );
    assert!(store.lookup(&k).await.unwrap().is_none());

    // an expired claim is free again; its old owner can no longer settle it
    let k = key("expiry");
    let stale_complete = claimed(store, &mint, &k, Duration::from_millis(150)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(store.lookup(&k).await.unwrap().is_none());
    assert!(
        !store
            .renew(stale_complete.key(), stale_complete.owner(), LONG)
            .await
            .unwrap(),
        "renewing a lapsed claim"
    );
    let stale_release = claimed(store, &mint, &k, Duration::from_millis(150)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let current = claimed(store, &mint, &k, LONG).await;
    let foreign = stale_complete.record().with_state(answer());
    assert_eq!(
        store
            .complete(
                stale_complete.key(),
                stale_complete.owner(),
                &foreign,
                LONG,
                EntityEffect::Keep
            )
            .await
            .unwrap(),
        Completion::TakenOver,
        "owner checked on complete"
    );
    assert!(
        !store
            .release(stale_release.key(), stale_release.owner(), Releasing::Owned)
            .await
            .unwrap(),
        "owner checked on release"
    );
    let record = store
        .lookup(&k)
        .await
        .unwrap()
        .expect("current claim intact");
    assert_eq!(record.record.owner, current.owner());
    assert!(matches!(record.record.state, RecordState::InFlight(_)));

    // renew resets the TTL of an owned in-flight claim
    let k = key("renew");
    let lease = claimed(store, &mint, &k, Duration::from_millis(400)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(store.renew(lease.key(), lease.owner(), LONG).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        store.lookup(&k).await.unwrap().is_some(),
        "renewed past its first TTL"
    );

    // an unknown outcome is kept for its hold and observed as unknown
    let unknown = lease.record().with_state(RecordState::Unknown);
    assert_eq!(
        store
            .complete(
                lease.key(),
                lease.owner(),
                &unknown,
                LONG,
                EntityEffect::Keep
            )
            .await
            .unwrap(),
        Completion::Stored
    );
    let found = store.lookup(&k).await.unwrap().unwrap();
    assert!(matches!(
        found.observe(Duration::from_secs(1)),
        Observed::Unknown { .. }
    ));

    // an answer whose claim lapsed while it was in hand still takes the
    // key if nobody else holds it (docs/contract.md §4 rule 10)
    let k = key("lapsed");
    let lapsed = claimed(store, &mint, &k, Duration::from_millis(150)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let late = lapsed.record().with_state(answer());
    assert_eq!(
        store
            .complete(
                lapsed.key(),
                lapsed.owner(),
                &late,
                LONG,
                EntityEffect::Keep
            )
            .await
            .unwrap(),
        Completion::StoredInFreeKey
    );
    assert_eq!(store.lookup(&k).await.unwrap().unwrap().record, late);
    assert!(
        !store
            .renew(lapsed.key(), lapsed.owner(), LONG)
            .await
            .unwrap(),
        "a completed record is not renewed"
    );

    // A purge that carries what the operator saw leaves a record that
    // moved on since (here: seen in flight, completed now) alone.
    let seen_in_flight = SeenRecord::of(lapsed.record());
    assert_eq!(
        store.purge(&k, Some(seen_in_flight)).await.unwrap(),
        Purged::Changed
    );
    assert_eq!(store.lookup(&k).await.unwrap().unwrap().record, late);
    // What is there now is purged, whoever owns the key.
    let seen = SeenRecord::of(&late);
    assert_eq!(store.purge(&k, Some(seen)).await.unwrap(), Purged::Deleted);
    assert_eq!(
        store.purge(&k, Some(seen)).await.unwrap(),
        Purged::Changed,
        "gone"
    );
    assert_eq!(store.purge(&k, None).await.unwrap(), Purged::Absent);
    assert!(store.lookup(&k).await.unwrap().is_none());

    store.ping().await.unwrap();
}

crate::support::for_every_backend!(contract);

/// The embedded store's sweeper removes expired records.
#[tokio::test]
async fn the_embedded_sweeper_removes_expired_records() {
    let (_dir, store) = crate::support::fresh_embedded_backend();
    let mint = OwnerMint::new();
    let _ = claimed(&store, &mint, &key("sweep"), Duration::from_millis(50)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(store.sweep().await.unwrap() >= 1);
}

#[tokio::test]
async fn a_corrupt_redis_record_is_an_error_not_a_free_key() {
    let redis = RedisServer::start();
    let store = redis.store().await;
    let k = key("corrupt");
    redis.cli(&["SET", k.as_str(), "garbage"]);
    let outcome = store
        .claim(
            &k,
            Record::in_flight(OwnerMint::new().next(), Fingerprint([0; 32]), None),
            LONG,
            (None, None),
        )
        .await;
    assert!(
        matches!(outcome, Err(idemgate::store::StoreError::Corrupt(_))),
        "{outcome:?}"
    );
}

/// A Redis at maxmemory under noeviction refuses writes but still reads:
/// a key it holds is still found (the claim script reads before it
/// writes), and only a claim of a free key fails, as `Full`.
#[tokio::test]
async fn a_full_redis_still_answers_for_the_keys_it_holds() {
    let redis = RedisServer::start();
    let store = redis.store().await;
    let mint = OwnerMint::new();
    let k = key("held");
    let lease = claimed(&store, &mint, &k, LONG).await;
    let completed = lease.record().with_state(answer());
    store
        .complete(
            lease.key(),
            lease.owner(),
            &completed,
            LONG,
            EntityEffect::Keep,
        )
        .await
        .unwrap();
    let in_flight = claimed(&store, &mint, &key("in-flight"), LONG).await;

    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let duplicate = store
        .claim(
            &k,
            Record::in_flight(mint.next(), Fingerprint([1; 32]), None),
            LONG,
            (None, None),
        )
        .await;
    assert!(
        matches!(&duplicate, Ok(ClaimOutcome::Existing(e)) if e.record == completed),
        "{duplicate:?}"
    );
    let fresh = store
        .claim(
            &key("fresh"),
            Record::in_flight(mint.next(), Fingerprint([1; 32]), None),
            LONG,
            (None, None),
        )
        .await;
    assert!(matches!(fresh, Err(StoreError::Full(_))), "{fresh:?}");
    // Storing an answer fails the same way, and is worth retrying; renewing
    // and releasing a claim still work.
    let stored = store
        .complete(
            in_flight.key(),
            in_flight.owner(),
            &in_flight.record().with_state(answer()),
            LONG,
            EntityEffect::Keep,
        )
        .await;
    assert!(matches!(&stored, Err(e) if e.is_transient()), "{stored:?}");
    assert!(
        store
            .renew(in_flight.key(), in_flight.owner(), LONG)
            .await
            .unwrap()
    );
    assert!(
        store
            .release(in_flight.key(), in_flight.owner(), Releasing::ClaimOnly)
            .await
            .unwrap()
    );
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    assert!(matches!(
        store
            .claim(
                &key("fresh"),
                Record::in_flight(mint.next(), Fingerprint([1; 32]), None),
                LONG,
                (None, None)
            )
            .await,
        Ok(ClaimOutcome::Claimed(_))
    ));
}
