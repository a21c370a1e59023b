//! The inbox's store operations, one contract for both stores (real
//! redis-server and redb): the owner-fenced swap a worker claims and
//! settles with, and the sorted indexes it takes due deliveries from.

use std::time::Duration;

use bytes::Bytes;
use idemgate::record::{
    Fingerprint, InboxEntry, OwnerMint, Record, RecordState, Stage, StoredBody, StoredRequest,
    StoredResponse,
};
use idemgate::store::entity::EntityEffect;
use idemgate::store::inbox::{
    BookLine, Books, BooksKey, InboxOps, Index, IndexKey, IndexPosition, OwedKey, Swapped,
};
use idemgate::store::{ClaimOutcome, Completion, Releasing, Store, StoreKey};

const LONG: Duration = Duration::from_secs(60);

/// The owner-fenced swap of `key` from `owner` to `record`, with no
/// entity effect: what every case here asks of it.
async fn swap<S: InboxOps>(
    store: &S,
    key: &StoreKey,
    owner: idemgate::record::OwnerToken,
    record: &Record,
) -> Swapped {
    store
        .swap(key, owner, record, LONG, EntityEffect::Keep)
        .await
        .unwrap()
}

async fn contract<S: Store + InboxOps>(store: &S) {
    let mint = OwnerMint::new();
    let key = StoreKey::new("contract", "inbox", "swap");
    let first = Record::in_flight(mint.next(), Fingerprint([1; 32]), None);
    let ClaimOutcome::Claimed(lease) = store.claim(&key, first, LONG, (None, None)).await.unwrap()
    else {
        panic!("a free key");
    };
    let mut taken = lease.record().with_state(RecordState::Unknown);
    taken.owner = mint.next();
    assert_eq!(
        swap(store, &key, lease.owner(), &taken).await,
        Swapped::Written,
        "expected owner: written"
    );
    let stored = Store::lookup(store, &key).await.unwrap().expect("a record");
    assert_eq!(stored.record, taken);
    assert_eq!(
        swap(store, &key, lease.owner(), &taken).await,
        Swapped::Written,
        "a retried swap whose first attempt landed succeeds for its writer"
    );
    let mut rival = taken.clone();
    rival.owner = mint.next();
    assert_eq!(
        swap(store, &key, lease.owner(), &rival).await,
        Swapped::Refused,
        "a second writer that read the same owner loses"
    );
    assert_eq!(
        Store::lookup(store, &key).await.unwrap().unwrap().record,
        taken
    );
    let absent = StoreKey::new("contract", "inbox", "absent");
    assert_eq!(
        swap(store, &absent, lease.owner(), &taken).await,
        Swapped::Refused,
        "a free key is not written"
    );
    assert!(Store::lookup(store, &absent).await.unwrap().is_none());

    let due = IndexKey::new("contract", "inbox", Index::Due);
    let dead = IndexKey::new("contract", "inbox", Index::Dead);
    for (member, score) in [("a", 10), ("b", 5), ("c", 20)] {
        store.index_add(&due, member, score).await.unwrap();
    }
    store.index_add(&dead, "a", 1).await.unwrap();
    let page = store.index_page(&due, None, 10).await.unwrap();
    assert_eq!(page, [("b".into(), 5), ("a".into(), 10), ("c".into(), 20)]);
    let after = |member: &str, score| IndexPosition {
        score,
        member: member.into(),
    };
    assert_eq!(
        store
            .index_page(&due, Some(&after("b", 5)), 1)
            .await
            .unwrap(),
        [("a".into(), 10)]
    );
    // Keyset: members sharing a score resume after the last one shown,
    // and a position whose member is gone resumes where it stood.
    for member in ["e", "d", "f"] {
        store.index_add(&due, member, 10).await.unwrap();
    }
    assert_eq!(
        store
            .index_page(&due, Some(&after("d", 10)), 2)
            .await
            .unwrap(),
        [("e".into(), 10), ("f".into(), 10)]
    );
    assert!(store.index_remove(&due, "d").await.unwrap());
    assert_eq!(
        store
            .index_page(&due, Some(&after("d", 10)), 9)
            .await
            .unwrap(),
        [("e".into(), 10), ("f".into(), 10), ("c".into(), 20)]
    );
    for member in ["e", "f"] {
        assert!(store.index_remove(&due, member).await.unwrap());
    }
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
        store.index_page(&due, None, 10).await.unwrap(),
        [("a".into(), 300)]
    );

    // The books: zero before anything is written, one per addition, per
    // scope.
    let books = BooksKey::new("contract", "inbox");
    let other = BooksKey::new("contract", "elsewhere");
    assert_eq!(store.books_read(&books).await.unwrap(), Books::default());
    for line in [
        BookLine::Acknowledged,
        BookLine::Acknowledged,
        BookLine::Acknowledged,
        BookLine::Delivered,
        BookLine::Dropped,
    ] {
        store.books_add(&books, line).await.unwrap();
    }
    store.books_add(&other, BookLine::Dropped).await.unwrap();
    let read = store.books_read(&books).await.unwrap();
    assert_eq!(
        BookLine::ALL.map(|line| read.get(line)),
        [3, 1, 1],
        "acknowledged, delivered, dropped"
    );
    assert_eq!(
        store
            .books_read(&other)
            .await
            .unwrap()
            .get(BookLine::Dropped),
        1
    );
}

/// An inbox record in `stage` over `base` (fresh owner).
fn inbox_record(base: &Record, mint: &OwnerMint, stage: Stage) -> Record {
    let entry = InboxEntry {
        ack: StoredResponse {
            status: 200,
            headers: Vec::new(),
            body: StoredBody::Kept(Bytes::from_static(b"success")),
        },
        stage,
        attempts: 0,
        limit: 3,
        due_ms: 1,
        route: "pay".into(),
        last_error: String::new(),
        last_answer: None,
        request: StoredRequest {
            method: Bytes::from_static(b"POST"),
            target: Bytes::from_static(b"/notify"),
            headers: Vec::new(),
            body: Bytes::from_static(b"{}"),
        },
        probes: 0,
    };
    let mut record = base.with_state(RecordState::Inbox(Box::new(entry)));
    record.owner = mint.next();
    record
}

/// Claims `key` and queues it the way the inbox does (`complete` with an
/// owed inbox record); returns the queued record.
async fn queue<S: Store>(store: &S, mint: &OwnerMint, key: &StoreKey) -> Record {
    let first = Record::in_flight(mint.next(), Fingerprint([2; 32]), None);
    let ClaimOutcome::Claimed(lease) = store.claim(key, first, LONG, (None, None)).await.unwrap()
    else {
        panic!("a free key");
    };
    let mut queued = inbox_record(lease.record(), mint, Stage::Queued);
    queued.owner = lease.owner();
    let done = store
        .complete(key, lease.owner(), &queued, LONG, EntityEffect::Keep)
        .await
        .unwrap();
    assert_eq!(done, Completion::Stored);
    queued
}

async fn owed<S: InboxOps>(store: &S, set: &OwedKey) -> Vec<String> {
    let mut members = store.owed(set).await.unwrap();
    members.sort();
    members
}

/// The owed sets: written with the record (queued by `complete`, every
/// stage by `swap`), so every delivery the inbox owes is listed; pruned
/// only when the record is gone or still the one read.
async fn owed_contract<S: Store + InboxOps>(store: &S) {
    let mint = OwnerMint::new();
    let set = OwedKey::new("contract", "owed");
    let hashes: Vec<String> = ["1", "2", "3"].map(|c| c.repeat(64)).to_vec();
    let keys: Vec<StoreKey> = hashes
        .iter()
        .map(|hash| StoreKey::new("contract", "owed", hash))
        .collect();
    assert!(owed(store, &set).await.is_empty());
    let mut queued = Vec::new();
    for key in &keys {
        queued.push(queue(store, &mint, key).await);
    }
    assert_eq!(owed(store, &set).await, hashes, "queued: owed");
    let elsewhere = StoreKey::new("contract", "other", &hashes[0]);
    queue(store, &mint, &elsewhere).await;
    assert_eq!(owed(store, &set).await, hashes, "scopes are apart");

    // Dead is still owed; delivered is not.
    let dead = inbox_record(&queued[0], &mint, Stage::Dead);
    assert_eq!(
        swap(store, &keys[0], queued[0].owner, &dead).await,
        Swapped::Written
    );
    assert_eq!(owed(store, &set).await, hashes);
    let delivered = inbox_record(&dead, &mint, Stage::Delivered);
    assert_eq!(
        swap(store, &keys[0], dead.owner, &delivered).await,
        Swapped::Written
    );
    assert_eq!(owed(store, &set).await, hashes[1..], "resolved: not owed");

    // A released claim leaves its entry behind; the prune takes it out
    // because the record is gone.
    assert!(
        store
            .release(&keys[1], queued[1].owner, Releasing::Owned)
            .await
            .unwrap()
    );
    assert_eq!(owed(store, &set).await, hashes[1..]);
    assert!(store.owed_prune(&keys[1], None).await.unwrap());
    assert!(!store.owed_prune(&keys[1], None).await.unwrap(), "once");
    assert_eq!(owed(store, &set).await, hashes[2..]);

    // A record that changed since it was read is left alone.
    let stale = mint.next();
    assert!(!store.owed_prune(&keys[2], Some(stale)).await.unwrap());
    assert!(!store.owed_prune(&keys[2], None).await.unwrap());
    assert_eq!(owed(store, &set).await, hashes[2..]);
    assert!(
        store
            .owed_prune(&keys[2], Some(queued[2].owner))
            .await
            .unwrap(),
        "the record read: the caller's judgement stands"
    );
    assert!(owed(store, &set).await.is_empty());
}

/// The whole inbox contract: swaps and indexes, then the owed sets.
async fn inbox_contract<S: Store + InboxOps>(store: &S) {
    contract(store).await;
    owed_contract(store).await;
}

crate::support::for_every_backend!(inbox_contract);
