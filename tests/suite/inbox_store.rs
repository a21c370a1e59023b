//! The inbox's store operations, one contract for both stores (real
//! redis-server and redb): the owner-fenced swap a worker claims and
//! settles with, and the sorted indexes it takes due deliveries from.

use std::time::Duration;

use crate::support::RedisServer;
use idemgate::record::{Fingerprint, OwnerMint, Record, RecordState};
use idemgate::store::embedded::EmbeddedStore;
use idemgate::store::inbox::{Book, Books, BooksKey, InboxOps, Index, IndexKey};
use idemgate::store::redis::RedisStore;
use idemgate::store::{ClaimOutcome, Store, StoreKey};

const LONG: Duration = Duration::from_secs(60);

async fn contract<S: Store + InboxOps>(store: &S) {
    let mint = OwnerMint::new();
    let key = StoreKey::new("contract", "inbox", "swap");
    let first = Record::in_flight(mint.next(), Fingerprint([1; 32]), None);
    let ClaimOutcome::Claimed(lease) = store.claim(&key, first, LONG).await.unwrap() else {
        panic!("a free key");
    };
    let mut taken = lease.record().with_state(RecordState::Unknown);
    taken.owner = mint.next();
    assert!(
        store.swap(&key, lease.owner(), &taken, LONG).await.unwrap(),
        "expected owner: written"
    );
    let stored = Store::lookup(store, &key).await.unwrap().expect("a record");
    assert_eq!(stored.record, taken);
    assert!(
        store.swap(&key, lease.owner(), &taken, LONG).await.unwrap(),
        "a retried swap whose first attempt landed succeeds for its writer"
    );
    let mut rival = taken.clone();
    rival.owner = mint.next();
    assert!(
        !store.swap(&key, lease.owner(), &rival, LONG).await.unwrap(),
        "a second writer that read the same owner loses"
    );
    assert_eq!(
        Store::lookup(store, &key).await.unwrap().unwrap().record,
        taken
    );
    let absent = StoreKey::new("contract", "inbox", "absent");
    assert!(
        !store
            .swap(&absent, lease.owner(), &taken, LONG)
            .await
            .unwrap(),
        "a free key is not written"
    );
    assert!(Store::lookup(store, &absent).await.unwrap().is_none());

    let due = IndexKey::new("contract", "inbox", Index::Due);
    let dead = IndexKey::new("contract", "inbox", Index::Dead);
    for (member, score) in [("a", 10), ("b", 5), ("c", 20)] {
        store.index_add(&due, member, score).await.unwrap();
    }
    store.index_add(&dead, "a", 1).await.unwrap();
    let page = store.index_page(&due, 0, 10).await.unwrap();
    assert_eq!(page, [("b".into(), 5), ("a".into(), 10), ("c".into(), 20)]);
    assert_eq!(
        store.index_page(&due, 1, 1).await.unwrap(),
        [("a".into(), 10)]
    );
    assert_eq!(store.index_stats(&due).await.unwrap(), (3, Some(5)));
    assert_eq!(
        store.index_take(&due, 15, 10, 100).await.unwrap(),
        ["b", "a"]
    );
    assert!(
        store
            .index_take(&due, 15, 10, 100)
            .await
            .unwrap()
            .is_empty(),
        "taken ones are hidden"
    );
    assert_eq!(
        store.index_take(&due, 100, 1, 200).await.unwrap(),
        ["c"],
        "the lowest due first, one by limit"
    );
    assert_eq!(
        store.index_stats(&dead).await.unwrap(),
        (1, Some(1)),
        "indexes are apart"
    );
    assert_eq!(
        store.index_take(&due, 100, 10, 300).await.unwrap(),
        ["a", "b"],
        "due again at push_to"
    );
    assert!(store.index_remove(&due, "b").await.unwrap());
    assert!(!store.index_remove(&due, "b").await.unwrap());
    assert_eq!(
        store.index_prune(&due, 250).await.unwrap(),
        1,
        "c at 200 goes, a at 300 stays"
    );
    assert_eq!(
        store.index_page(&due, 0, 10).await.unwrap(),
        [("a".into(), 300)]
    );

    // The books: zero before anything is written, one per addition, per
    // scope.
    let books = BooksKey::new("contract", "inbox");
    let other = BooksKey::new("contract", "elsewhere");
    assert_eq!(store.books_read(&books).await.unwrap(), Books::default());
    for line in [
        Book::Acknowledged,
        Book::Acknowledged,
        Book::Acknowledged,
        Book::Delivered,
        Book::Dropped,
    ] {
        store.books_add(&books, line).await.unwrap();
    }
    store.books_add(&other, Book::Dropped).await.unwrap();
    let read = store.books_read(&books).await.unwrap();
    assert_eq!(
        Book::ALL.map(|line| read.get(line)),
        [3, 1, 1],
        "acknowledged, delivered, dropped"
    );
    assert_eq!(
        store.books_read(&other).await.unwrap().get(Book::Dropped),
        1
    );
}

#[tokio::test]
async fn redis_store_meets_the_inbox_contract() {
    let redis = RedisServer::start();
    let store = RedisStore::connect(&redis.url(), Duration::from_secs(2), None, 1)
        .await
        .unwrap();
    contract(&store).await;
}

#[tokio::test]
async fn embedded_store_meets_the_inbox_contract() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("inbox.redb")).unwrap();
    contract(&store).await;
}
